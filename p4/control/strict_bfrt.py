"""strict_bfrt.py: a bfrt_python stand-in that refuses what the real shell refuses, for tests.

`test_dta_bfrt.Fake` records any call. `StrictBfrt` is built from a reduced bf-rt.json
(`bfrt_schema.py`, files under `p4/control/bfrt/`) plus the driver's fixed tables, keeps the
switch's state, and raises where bfrt_python would raise (unknown node or method, unknown
keyword, a value wider than its field, an entry that already exists or does not exist) or
where it would silently write something else (a key or action parameter left out becomes 0 on
the switch: here it is an error). The fixed tables are those of bf-drivers' Tofino-1 JSON
(`bf_rt_pre_tf1.json`, `bf_rt_mirror_tf1.json`): `$pre.node`, `$pre.mgid`, `$mirror.cfg`.
"""

import bfrt_schema


class BfrtError(Exception):
    """What bfrt_python raises (BfRtTableError) when the driver refuses an operation."""


def _check_value(table, field, value, width):
    if isinstance(value, bool) or not isinstance(value, int):
        raise BfrtError(f"{table}: {field} = {value!r} is not an integer")
    if value < 0 or value >> width:
        raise BfrtError(f"{table}: {field} = {value:#x} is wider than {width} bits")


class Table:
    """One program table or register: its generated methods and its entries."""

    def __init__(self, switch, name, spec):
        self._switch, self._name, self._spec = switch, name, spec
        self.entries = {}     # key tuple -> (action or None, {field: value})

    def _key_args(self, kw, names):
        key = []
        for fname, match, width in self._spec["keys"]:
            p = names[fname]
            if match not in ("Exact",):
                raise BfrtError(f"{self._name}: {match} key {fname} (the plan only writes exact keys)")
            if p not in kw:
                raise BfrtError(f"{self._name}: key {p} left out (the switch would match 0)")
            _check_value(self._name, p, kw[p], width)
            key.append(kw[p])
        return tuple(key)

    def _data_args(self, kw, names, fields, what):
        data = {}
        for fname, width, _mandatory in fields:
            p = names[fname]
            if p not in kw:
                raise BfrtError(f"{self._name}: {what} parameter {p} left out (written as 0)")
            _check_value(self._name, p, kw[p], width)
            data[fname] = kw[p]
        return data

    @staticmethod
    def _unknown(kw, names, method):
        extra = set(kw) - set(names.values())
        if extra:
            raise TypeError(f"{method}() got unexpected keyword arguments {sorted(extra)}")

    def __getattr__(self, attr):
        actions = self._spec.get("actions", {})
        for action, fields in actions.items():
            if attr == bfrt_schema.action_method(action):
                return lambda **kw: self._add(action, fields, attr, kw)
        if attr == "mod" and not actions:
            return lambda **kw: self._mod(kw)
        if attr == "delete":
            return lambda **kw: self._delete(kw)
        if attr == "clear":
            return self._clear
        raise AttributeError(f"{self._name} has no method {attr}")

    def _add(self, action, fields, method, kw):
        names = bfrt_schema.param_names([k[0] for k in self._spec["keys"]], [f[0] for f in fields])
        self._unknown(kw, names, method)
        key = self._key_args(kw, names)
        data = self._data_args(kw, names, fields, action)
        if key in self.entries:
            raise BfrtError(f"{self._name}: entry {key} already exists")
        if len(self.entries) >= self._spec["size"]:
            raise BfrtError(f"{self._name}: full ({self._spec['size']} entries)")
        self.entries[key] = (action, data)
        self._switch.log.append((self._name, method, key, data))

    def _mod(self, kw):
        fields = self._spec.get("data", [])
        names = bfrt_schema.param_names([k[0] for k in self._spec["keys"]], [f[0] for f in fields])
        self._unknown(kw, names, "mod")
        (index,) = self._key_args(kw, names)
        if index >= self._spec["size"]:
            raise BfrtError(f"{self._name}: index {index} >= size {self._spec['size']}")
        self.entries[(index,)] = (None, self._data_args(kw, names, fields, "register"))

    def _delete(self, kw):
        names = bfrt_schema.param_names([k[0] for k in self._spec["keys"]])
        self._unknown(kw, names, "delete")
        key = self._key_args(kw, names)
        if key not in self.entries:
            raise BfrtError(f"{self._name}: no entry {key} to delete")
        del self.entries[key]

    def _clear(self):
        self.entries.clear()


class Node:
    """An inner node of the tree (program, pipe, control)."""

    def __init__(self, path, children):
        self._path, self._children = path, children

    def __getattr__(self, attr):
        try:
            return self._children[attr]
        except KeyError:
            raise AttributeError(f"bfrt.{self._path} has no node {attr}") from None


class PreNodes:
    def __init__(self):
        self.entries = {}

    def add(self, MULTICAST_NODE_ID, MULTICAST_RID, MULTICAST_LAG_ID, DEV_PORT):  # noqa: N803
        _check_value("$pre.node", "MULTICAST_NODE_ID", MULTICAST_NODE_ID, 32)
        _check_value("$pre.node", "MULTICAST_RID", MULTICAST_RID, 16)
        for p in DEV_PORT:
            _check_value("$pre.node", "DEV_PORT", p, 9)
        if MULTICAST_NODE_ID in self.entries:
            raise BfrtError(f"$pre.node: node {MULTICAST_NODE_ID} already exists")
        self.entries[MULTICAST_NODE_ID] = (MULTICAST_RID, list(MULTICAST_LAG_ID), list(DEV_PORT))

    def delete(self, MULTICAST_NODE_ID):  # noqa: N803
        if MULTICAST_NODE_ID not in self.entries:
            raise BfrtError(f"$pre.node: no node {MULTICAST_NODE_ID}")
        del self.entries[MULTICAST_NODE_ID]


class PreGroups:
    def __init__(self, nodes):
        self.entries, self._nodes = {}, nodes

    def add(self, MGID, MULTICAST_NODE_ID=(), MULTICAST_NODE_L1_XID_VALID=(),  # noqa: N803
            MULTICAST_NODE_L1_XID=()):
        _check_value("$pre.mgid", "MGID", MGID, 16)
        if not len(MULTICAST_NODE_ID) == len(MULTICAST_NODE_L1_XID_VALID) == len(MULTICAST_NODE_L1_XID):
            raise BfrtError("$pre.mgid: node, L1 XID valid and L1 XID lists differ in length")
        for n in MULTICAST_NODE_ID:
            if n not in self._nodes.entries:
                raise BfrtError(f"$pre.mgid: group {MGID} names node {n}, which does not exist")
        if MGID in self.entries:
            raise BfrtError(f"$pre.mgid: group {MGID} already exists")
        self.entries[MGID] = list(MULTICAST_NODE_ID)

    def delete(self, MGID):  # noqa: N803
        if MGID not in self.entries:
            raise BfrtError(f"$pre.mgid: no group {MGID}")
        del self.entries[MGID]


MIRROR_FIELDS = {"session_enable": 1, "direction": None, "ucast_egress_port": 9,
                 "ucast_egress_port_valid": 1, "egress_port_queue": 32, "ingress_cos": 32,
                 "packet_color": None, "level1_mcast_hash": 32, "level2_mcast_hash": 32,
                 "mcast_grp_a": 16, "mcast_grp_a_valid": 1, "mcast_grp_b": 16,
                 "mcast_grp_b_valid": 1, "mcast_l1_xid": 16, "mcast_l2_xid": 16, "mcast_rid": 16,
                 "icos_for_copy_to_cpu": 32, "copy_to_cpu": 1, "max_pkt_len": 16}


class MirrorCfg:
    def __init__(self):
        self.entries = {}

    def add_with_normal(self, sid, **fields):
        extra = set(fields) - set(MIRROR_FIELDS)
        if extra:
            raise TypeError(f"add_with_normal() got unexpected keyword arguments {sorted(extra)}")
        _check_value("$mirror.cfg", "sid", sid, 16)
        if sid > 1015:   # pipe_mgr: 1024 sessions less the 8 coalescing ones, less one
            raise BfrtError(f"$mirror.cfg: normal session {sid} above Tofino-1's 1015")
        if fields.get("direction", "BOTH") not in ("INGRESS", "EGRESS", "BOTH"):
            raise BfrtError(f"$mirror.cfg: direction {fields['direction']!r}")
        if sid in self.entries:
            raise BfrtError(f"$mirror.cfg: session {sid} already exists")
        self.entries[sid] = dict(fields)

    def delete(self, sid):
        if sid not in self.entries:
            raise BfrtError(f"$mirror.cfg: no session {sid}")
        del self.entries[sid]


class StrictBfrt:
    """`bfrt` for one program (a reduced bf-rt.json, bfrt_schema.reduce) on a Tofino-1."""

    def __init__(self, schema):
        self.log = []
        self.tables = {}
        tree = {}
        for name, spec in schema["tables"].items():
            t = Table(self, name, spec)
            self.tables[name] = t
            node = tree
            parts = name.split(".")
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            node[parts[-1]] = t
        self._program = schema["program"]
        self._root = self._build(schema["program"], tree)
        nodes = PreNodes()
        self.pre = Node("pre", {"node": nodes, "mgid": PreGroups(nodes)})
        self.mirror = Node("mirror", {"cfg": MirrorCfg()})
        self.completed = 0

    def _build(self, path, tree):
        return Node(path, {k: (self._build(f"{path}.{k}", v) if isinstance(v, dict) else v)
                           for k, v in tree.items()})

    def __getattr__(self, attr):
        if attr == self._program:
            return self._root
        raise AttributeError(f"bfrt has no node {attr}")

    def complete_operations(self):
        self.completed += 1
