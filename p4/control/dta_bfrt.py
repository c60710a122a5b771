"""dta_bfrt.py: the control plane of p4/translator/dta_translator.p4 (bfrt_python).

It reads the same TOML file as the software translator (translator/src/config/: [translator],
[reports], [append], [postcard], [reliability], [[collector]] with `metadata` = the collector's
published CollectorMeta JSON, [routing]; or `cluster = FILE`, a collector cluster's file, see
apply_cluster) and fills the program's tables, registers and multicast groups.

Each store's redundancy N comes from the collector metadata's `redundancy` (collector
`[[store]] redundancy`, carried in metadata record version 2): Key-Write and Key-Increment
routes are installed for that N only (a report with another N misses tbl_kv_route and is
dropped, as the software translator drops it), and postcards are replicated N times. Metadata
without `redundancy` keeps the old behaviour: every N in 1..=translator.max_redundancy, and
[postcard] redundancy (default 1). A [postcard] redundancy that contradicts a store's N is
refused.

Queue pairs come from one of two sources:
  * static set-up: the collector metadata's `qps` (the first QP of each store), exactly as the
    software translator's worker 0 uses them;
  * RDMA_CM: `dta-translator --control-only --config FILE --emit-connections JSON` connects on the
    switch's behalf and prints, per store, {"store", "collector", "qpn", "remote_qpn", "psn",
    "rkey", "addr", "len", layout...}; pass that file with DTA_CONNECTIONS / --connections.

Sketch-Merge stores (kind "sketch") are merged by the second pipe of the two-pipe build
(p4/translator/dta_sketch.p4, in icrc_pipe's ingress): plan_sketches() gives each store a sketch
index, its cells in the shared row registers, a state slot per (sketch, switch), its epoch slots
and its QP (tbl_sketch, tbl_sk_switch, tbl_sk_slot, tbl_sk_qp, tbl_sk_resp and the sk_*_reg
registers; the names are in SK_NAMES). The program tracks only the switches the control plane
installs: DTA_SKETCH_SWITCHES / --sketch-switches "1-100,200" (every sketch) or
"7:1-100;9:0x0a000001-0x0a000010" (per sketch ID). Stores the program cannot merge (batch other
than 1, epochs not 1/2/4/8/16, shapes other than DTA_SK_ROWS rows of 4-byte sum or signed-sum
cells or one row of 1- or 4-byte cells) are refused, as is any sketch with --no-icrc or
-DDTA_NO_SKETCH (DTA_NO_SKETCH=1 / --no-sketch).

Program a switch:   python3 dta_bfrt.py --config translator.toml --ports c1=8,c2=12
[--connections conn.json] [--defines="-D..."] [--sketch-switches SPEC] ...
--bfshell $SDE_INSTALL/bin/bfshell   checks the plan and runs this file in bf_switchd's
bfrt_python through `bfshell -b`, handing the settings over in DTA_SETTINGS (bfshell -b runs
the file inside bf_switchd, which does not see the caller's environment). Inside bfrt_python
the settings are DTA_CONFIG, DTA_PORTS ("c1=8,c2=12", collector name -> dev port),
DTA_CONNECTIONS, DTA_DEFINES, DTA_RESYNC_WINDOW, DTA_LOOP_PORT, DTA_SKETCH_SWITCHES,
DTA_SK_ROWS (DTA_SETTINGS, else bf_switchd's environment). `--print` prints the plan.

The module is pure Python 3.11 (tomllib, json); `plan()` computes everything and `apply()` is the
only function that touches bfrt, so tests run it against a fake bfrt.
"""

import ipaddress
import json
import os
import sys
import tomllib

PROGRAM = "dta_translator"

# Compile-time knobs of the P4 program this plan is for (defaults of dta_translator.p4).
DEFAULT_KNOBS = {
    "max_n": 4,
    "ap_batch": 4,
    "ap_sequenced": True,
    "pc_hops": 5,
    "pc_cache_bits": 15,
    "value_len": 4,
    "hash": "independent",
    "qps": 256,
    "variant": "a",
    "extended": True,
    "icrc": True,   # the ICRC pipe (dta_icrc_pipe.p4); False: -DDTA_NO_ICRC, one pipe, ICRC 0
    "sketch": True,  # Sketch-Merge in the ICRC pipe; False: -DDTA_NO_SKETCH
    "sk_rows": 4,    # DTA_SK_ROWS: rows of a wide (Count-Min / Count sketch) sketch
    "sketches": 16,  # DTA_SKETCHES
    "sk_cells": 16384,   # DTA_SK_CELLS: cells per row register, shared by all sketches
    "sk_switches": 4096,  # DTA_SK_SWITCHES: (sketch, switch) state slots
}

# Sketch-Merge tables, actions and registers of p4/translator/dta_sketch.p4 (pipe 1's ingress).
SK_CTRL = "icrc_pipe.IcrcIngress.sketch"
SK_NAMES = {
    "tbl_sketch": (f"{SK_CTRL}.tbl_sketch", "set_sketch"),
    "tbl_sk_switch": (f"{SK_CTRL}.tbl_sk_switch", "set_switch"),
    "tbl_sk_slot": (f"{SK_CTRL}.tbl_sk_slot", "set_slot"),
    "tbl_sk_qp": (f"{SK_CTRL}.tbl_sk_qp", "set_sk_qp"),
    "tbl_sk_resp": (f"{SK_CTRL}.tbl_sk_resp", "sk_resp"),
    "sk_psn_reg": (f"{SK_CTRL}.sk_psn_reg", None),
    "sk_nak_reg": (f"{SK_CTRL}.sk_nak_reg", None),
    "sk_ackreq_reg": (f"{SK_CTRL}.sk_ackreq_reg", None),
    "sk_epoch_reg": (f"{SK_CTRL}.sk_epoch_reg", None),
}
# Pipe names of the program's bfrt tree (a name starting with another is in pipe 0, "pipe").
PIPES = ("pipe", "icrc_pipe")

# Sketch-Merge layout (dta_proto::sketch, PROTOCOL.md section 9).
SK_HEADER_LEN = 64
SK_RECORD_HEAD_LEN = 8
SK_RECORD_TAIL_LEN = 8  # layout version 2: a copy of the head after the cells
SK_MERGE_OP = {"count-min": 0, "hyper-log-log": 1, "count": 2}  # 0 sum, 1 max, 2 signed sum

# Tofino-1's recirculation port of pipe 0: the default loop port of the two-pipe build.
DEFAULT_LOOP_PORT = 68

AP_TRAILER_LEN = 8

# Tables that also hold entries the operator adds (plain IPv4 routes): apply() replaces only
# the plan's keys instead of clearing them.
SHARED_TABLES = ("Ingress.tbl_forward",)


# -D flags of the program (p4/README.md's knob table) and the knob each sets.
DEFINE_FLAGS = {"DTA_HASH_REFERENCE": ("hash", "reference"), "DTA_REF_VARIANT_B": ("variant", "b"),
                "DTA_NO_EXTENDED": ("extended", False), "DTA_AP_REFERENCE_RING": ("ap_sequenced", False),
                "DTA_NO_ICRC": ("icrc", False), "DTA_NO_SKETCH": ("sketch", False)}
DEFINE_NUMBERS = {"DTA_MAX_N": "max_n", "DTA_AP_BATCH": "ap_batch", "DTA_PC_HOPS": "pc_hops",
                  "DTA_PC_CACHE_BITS": "pc_cache_bits", "DTA_QPS": "qps", "DTA_SK_ROWS": "sk_rows",
                  "DTA_SKETCHES": "sketches", "DTA_SK_SWITCHES": "sk_switches"}


def knobs_from_defines(defines):
    """The knobs of a program compiled with these `bf-p4c` flags (`-DDTA_...`, as
    p4/README.md's knob table and a corpus case's `p4_defines`)."""
    k = dict(DEFAULT_KNOBS)
    for d in defines.split():
        if not d.startswith("-D"):
            raise ConfigError(f"--defines: {d!r} is not a -D flag")
        name, _, value = d[2:].partition("=")
        if name in DEFINE_FLAGS:
            key, v = DEFINE_FLAGS[name]
            k[key] = v
        elif name in DEFINE_NUMBERS:
            try:
                k[DEFINE_NUMBERS[name]] = int(value, 0)
            except ValueError:
                raise ConfigError(f"--defines: {d!r} needs a number") from None
        elif name == "DTA_SK_CELL_BITS":
            k["sk_cells"] = 1 << int(value, 0)
        elif name == "DTA_AP_LISTS":
            pass   # the register size; the plan checks list IDs against the stores
        else:
            raise ConfigError(f"--defines: unknown knob {name} (p4/README.md lists them)")
    return k


class ConfigError(Exception):
    """The configuration cannot be served by the P4 program."""


def ip_int(s):
    return int(ipaddress.IPv4Address(s))


def mac_int(s):
    parts = s.split(":")
    if len(parts) != 6:
        raise ConfigError(f"bad MAC {s!r}")
    return int("".join(parts), 16)


# The program adds 64-bit addresses as a 32-bit low half plus a chosen high half; offsets and
# the carry threshold must stay below 2^31 for the sign test (dta_translator.p4, `addr_carry`).
NO_CARRY = 0x7FFFFFFF


def addr_parts(base, max_off, what):
    """The four action parameters of a 64-bit base address: high and low halves, the high half
    + 1, and the first offset whose low-half add carries (NO_CARRY when none up to max_off)."""
    if max_off >= NO_CARRY:
        raise ConfigError(f"{what}: offsets up to {max_off} do not fit the program's 31-bit "
                          "address offsets (regions of at most 2 GiB)")
    lo, hi = base & 0xFFFFFFFF, (base >> 32) & 0xFFFFFFFF
    to_carry = (1 << 32) - lo
    return {"base_hi": hi, "base_lo": lo, "base_hi1": (hi + 1) & 0xFFFFFFFF,
            "carry_at": to_carry if to_carry <= max_off else NO_CARRY}


def psn_cell(psn):
    """psn_reg holds PSN << 8 (one 32-bit add steps it and wraps at 2^24)."""
    return (psn & 0xFFFFFF) << 8


def split_addr(s):
    host, port = s.rsplit(":", 1)
    return host, int(port)


def load_config(path):
    with open(path, "rb") as f:
        cfg = tomllib.load(f)
    cfg.setdefault("translator", {})
    t = cfg["translator"]
    t.setdefault("listen", "0.0.0.0:40040")
    t.setdefault("roce", "127.0.0.1:4791")
    t.setdefault("mac", "02:00:00:00:00:01")
    t.setdefault("max_redundancy", 4)
    # [postcard] redundancy stays absent unless given: a store's own N applies (see plan()).
    cfg.setdefault("postcard", {}).setdefault("cache_slots", 32768)
    cfg.setdefault("reliability", {}).setdefault("ack_every", 64)
    r = cfg.setdefault("routing", {})
    r.setdefault("keywrite", "single")
    r.setdefault("keyincrement", "single")
    r.setdefault("postcard", "single")
    r.setdefault("destinations", {})
    cfg.setdefault("collector", [])
    if "cluster" in cfg:
        if cfg["collector"]:
            raise ConfigError("give either `cluster` or [[collector]] sections, not both")
        apply_cluster(cfg, os.path.dirname(os.path.abspath(path)))
    return cfg


def apply_cluster(cfg, base_dir="."):
    """A collector-cluster member (`cluster = FILE`, dta_proto::cluster): the collectors, and
    the routing of the cluster's current epoch, come from the one cluster file translators and
    query clients read. The program routes Key-Write, Key-Increment and postcards by IPv4
    destination, not by key hash, so an epoch whose key slot table names more than one
    collector is refused (the software translator serves it); Append lists go to the collector
    whose store holds them, and plan() checks that every store holds exactly its range."""
    path = cfg["cluster"]
    if not os.path.isabs(path):
        path = os.path.join(base_dir, path)
    with open(path, "rb") as f:
        cl = tomllib.load(f)
    cl_dir = os.path.dirname(os.path.abspath(path))
    current = cl.get("cluster", {}).get("epoch")
    epoch = next((e for e in cl.get("epoch", []) if e.get("number") == current), None)
    if epoch is None:
        raise ConfigError(f"{path}: cluster.epoch {current} has no [[epoch]]")
    for c in cl.get("collector", []):
        entry = {"name": c["name"]}
        if c.get("metadata"):
            m = c["metadata"]
            entry["metadata"] = m if os.path.isabs(m) else os.path.join(cl_dir, m)
        cfg["collector"].append(entry)
    names = cl.get("stores", {})
    owners = sorted(set(epoch.get("keys", [])))
    if len(owners) > 1:
        raise ConfigError(
            f"{path}: epoch {current} partitions keys over {len(owners)} collectors "
            f"({', '.join(owners)}) by key hash; the Tofino program routes by IPv4 destination, "
            "so run the software translator for this cluster or give the epoch one key owner")
    for what in ("keywrite", "keyincrement", "postcard"):
        if names.get(what):
            cfg["routing"][what] = f"single:{owners[0]}/{names[what]}" if owners else "none"
    cfg["_cluster"] = {"path": path, "epoch": current, "lists": epoch.get("lists", []),
                       "append": names.get("append")}


def load_collectors(cfg, base_dir="."):
    """[(section name, CollectorMeta dict)] in configuration order."""
    out = []
    for c in cfg["collector"]:
        path = c.get("metadata")
        if not path:
            raise ConfigError(f"collector {c['name']}: no metadata (static set-up needs it)")
        if not os.path.isabs(path):
            path = os.path.join(base_dir, path)
        with open(path) as f:
            out.append((c["name"], json.load(f)))
    return out


def load_connections(path):
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, dict):
        data = data.get("connections", [])
    return data


def _route_stores(route, what, stores):
    """Store indices a [routing] rule sends `what` reports to, with the destination IP (or None
    for "the report's destination does not matter")."""
    kind_stores = [i for i, s in enumerate(stores) if s["kind"] == what]
    if route == "none" or not kind_stores:
        return []
    if route == "single":
        return [(None, kind_stores[0])]
    if route.startswith("single:"):
        name = route.split(":", 1)[1]
        collector, _, store = name.rpartition("/")   # "COLLECTOR/STORE" or "STORE"
        for i in kind_stores:
            if stores[i]["name"] == store and collector in ("", stores[i]["collector"]):
                return [(None, i)]
        raise ConfigError(f"routing.{what}: no {what} store {name!r}")
    if route == "key-hash":
        raise ConfigError(
            f"routing.{what} = key-hash is not supported by the P4 program "
            "(it routes by IPv4 destination); use single or destination")
    if route == "destination":
        return None
    raise ConfigError(f"routing.{what}: unknown rule {route!r}")


def plan(cfg, collectors, ports, connections=None, knobs=None, resync_window=0,
         loop_port=DEFAULT_LOOP_PORT, sketch_switches=None):
    """Everything the program needs, as plain data:
    {"tables": {table: [(action, {key...}, {param...})]},
     "registers": {register: [(index, value)]},
     "mcast": {"nodes": [(node_id, rid, port)], "groups": [(mgid, [node_ids])]}}
    sketch_switches: parse_sketch_switches()'s {sketch_id or None: [switch IDs]}."""
    k = dict(DEFAULT_KNOBS)
    k.update(knobs or {})
    if not 1 <= k["pc_hops"] <= 5:
        raise ConfigError(f"DTA_PC_HOPS {k['pc_hops']}: Tofino-1 builds take 1..5 "
                          "(6 to 8 hops need 13 egress stages; p4/README.md)")
    if k["ap_batch"] not in (1, 2, 4):
        raise ConfigError(f"DTA_AP_BATCH {k['ap_batch']}: Tofino-1 builds take 1, 2 or 4 "
                          "(batch 8 needs 14 ingress stages, 16 needs 22; p4/README.md)")
    t = cfg["translator"]
    src_ip, src_port = split_addr(t["roce"])
    listen_ip, _ = split_addr(t["listen"])
    report_dst = listen_ip if listen_ip != "0.0.0.0" else src_ip
    max_n = int(t["max_redundancy"])
    if max_n > k["max_n"]:
        raise ConfigError(f"translator.max_redundancy {max_n} exceeds the program's DTA_MAX_N {k['max_n']}")
    ack_every = int(cfg["reliability"]["ack_every"])
    if ack_every < 1:
        raise ConfigError("reliability.ack_every must be at least 1")
    if int(cfg["postcard"]["cache_slots"]) != 1 << k["pc_cache_bits"]:
        raise ConfigError(
            f"postcard.cache_slots {cfg['postcard']['cache_slots']} != 2^DTA_PC_CACHE_BITS")
    pc_cfg = cfg["postcard"].get("redundancy")
    rep = cfg.get("reports", {})
    if rep.get("accept_reference", True) and rep.get("reference_variant", "a").lower() != k["variant"]:
        raise ConfigError(f"reports.reference_variant {rep.get('reference_variant', 'a')!r} but the "
                          f"program parses variant {k['variant'].upper()} (DTA_REF_VARIANT_B)")
    if rep.get("accept_extended", True) and not k["extended"]:
        raise ConfigError("reports.accept_extended but the program is built with DTA_NO_EXTENDED")

    conn_by_store = {}
    for c in connections or []:
        conn_by_store[(c.get("collector"), c["store"])] = c
        conn_by_store.setdefault((None, c["store"]), c)

    # Flatten stores with their collector and QP coordinates.
    stores = []
    for cname, meta in collectors:
        roce_ip, _ = split_addr(meta["roce"])
        if cname not in ports:
            raise ConfigError(f"collector {cname}: no dev port given")
        for s in meta["stores"]:
            c = conn_by_store.get((cname, s["name"])) or conn_by_store.get((None, s["name"]))
            if c is not None:
                local, remote, psn = c["qpn"], c["remote_qpn"], c["psn"]
                addr, rkey = c.get("addr", s["addr"]), c.get("rkey", s["rkey"])
            elif s.get("qps"):
                q = s["qps"][0]
                local, remote, psn = q["peer_qpn"], q["qpn"], q["psn"]
                addr, rkey = s["addr"], s["rkey"]
            else:
                raise ConfigError(f"store {s['name']}: no QP (static qps or a connection)")
            st = dict(s)
            # Two-pipe build: frames leave pipe 0's Ingress for the loop port (Egress builds
            # them there), and responses come back through it; the collector's own port is
            # on pipe 1 (tbl_forward below).
            st.update(collector=cname, roce_ip=roce_ip, mac=meta["mac"],
                      port=loop_port if k["icrc"] else ports[cname], collector_port=ports[cname],
                      local_qpn=local, remote_qpn=remote, psn=psn, addr=addr, rkey=rkey)
            if "hash" in st and st["hash"] != k["hash"]:
                raise ConfigError(f"store {s['name']}: hash profile {st.get('hash')} but the "
                                  f"program is compiled for {k['hash']}")
            n = st.get("redundancy")
            if n is not None and not 1 <= int(n) <= 8:
                raise ConfigError(f"store {s['name']}: redundancy {n} is not 1..=8")
            if n is not None and st["kind"] in ("keywrite", "keyincrement") and int(n) > max_n:
                raise ConfigError(f"store {s['name']}: written with redundancy {n}, above "
                                  f"translator.max_redundancy {max_n}")
            if (n is not None and st["kind"] == "postcard" and pc_cfg is not None
                    and int(pc_cfg) != int(n)):
                raise ConfigError(f"store {s['name']}: written with redundancy {n} but "
                                  f"[postcard] redundancy = {pc_cfg}: remove the setting or "
                                  "make them agree")
            stores.append(st)
    # Sketch-Merge stores have their QPs in pipe 1 (plan_sketches); the rest in pipe 0.
    sketches = [s for s in stores if s["kind"] == "sketch"]
    stores = [s for s in stores if s["kind"] != "sketch"]
    if len(stores) > k["qps"]:
        raise ConfigError("more stores than DTA_QPS")

    tables = {n: [] for n in ("Egress.tbl_qp", "Ingress.tbl_resp_qp", "Ingress.tbl_kv_route",
                              "Ingress.tbl_ap_list", "Ingress.tbl_pc_route", "Ingress.tbl_pc_hop")}
    regs = {n: [] for n in ("Egress.psn_reg", "Egress.nak_reg", "Egress.ackreq_reg", "Egress.window_reg",
                            "Ingress.ap_pos_reg", "Ingress.ap_off_reg", "Ingress.ap_seq_reg",
                            "Ingress.ap_imm_reg")}
    nodes, groups = [], []
    group_of = {}
    if k["icrc"]:
        # Tofino-1 device ports: bits 8..7 are the pipe.
        if not 0 <= loop_port < 128:
            raise ConfigError(f"loop port {loop_port} is not on pipe 0 (device ports 0..127): "
                              "the translator's Egress runs there")
        for cname, port in ports.items():
            if not 128 <= port < 256:
                raise ConfigError(f"collector {cname}: port {port} is not on pipe 1 (device ports "
                                  "128..255), where the ICRC pipe appends the ICRC; compile with "
                                  "-DDTA_NO_ICRC (and --no-icrc here) for one pipe without it")
        tables["Ingress.tbl_icrc_loop"] = [("icrc_mark", {"ingress_port": loop_port}, {})]
        tables["Ingress.tbl_forward"] = []
        seen = set()
        for cname, meta in collectors:
            ip = ip_int(split_addr(meta["roce"])[0])
            if ip not in seen:
                seen.add(ip)
                tables["Ingress.tbl_forward"].append(("forward", {"dst": ip}, {"port": ports[cname]}))
        tables["icrc_pipe.IcrcIngress.tbl_icrc_return"] = [
            ("to_port", {"dst": ip_int(src_ip)}, {"port": loop_port})]

    def group(port, count):
        if (port, count) not in group_of:
            ids = []
            for rid in range(count):
                nid = len(nodes) + 1
                nodes.append((nid, rid, port))
                ids.append(nid)
            mgid = len(groups) + 1
            groups.append((mgid, ids))
            group_of[(port, count)] = mgid
        return group_of[(port, count)]

    for qp, s in enumerate(stores):
        kind = s["kind"]
        if kind in ("keywrite", "keyincrement"):
            mask = s["slots"] - 1
            max_off = mask * 8 + 7
            if kind == "keywrite" and s["slot_size"] != 4 + k["value_len"]:
                raise ConfigError(f"store {s['name']}: slot_size {s['slot_size']} but the "
                                  f"program writes {4 + k['value_len']}-byte slots")
        elif kind == "postcard":
            mask = s["chunks"] - 1
            chunk = 1 << (4 * k["pc_hops"] - 1).bit_length()   # bytes, a power of two
            max_off = mask * chunk + chunk - 1
            if s["hops"] != k["pc_hops"]:
                raise ConfigError(f"store {s['name']}: {s['hops']} hops but DTA_PC_HOPS is {k['pc_hops']}")
        else:
            mask, max_off = 0, 0
        tables["Egress.tbl_qp"].append(("set_qp", {"qp": qp}, {
            "src_mac": mac_int(t["mac"]), "dst_mac": mac_int(s["mac"]),
            "src_ip": ip_int(src_ip), "dst_ip": ip_int(s["roce_ip"]), "src_port": src_port,
            "remote_qpn": s["remote_qpn"], "rkey": s["rkey"],
            **addr_parts(s["addr"], max_off, f"store {s['name']}"),
            "slot_mask": mask, "ack_every_m1": ack_every - 1, "window": resync_window}))
        tables["Ingress.tbl_resp_qp"].append(("resp_qp", {
            "src": ip_int(s["roce_ip"]), "dest_qp": s["local_qpn"]}, {"qp": qp, "port": s["port"]}))
        regs["Egress.psn_reg"].append((qp, psn_cell(s["psn"])))
        # What the responder executed, as if it had ACKed the PSN before the start (nak_reg in
        # dta_translator.p4: ACK(p) = p << 8 | 0x80): a NAK naming the start PSN is fresh, any
        # older one is stale.
        regs["Egress.nak_reg"].append((qp, psn_cell(s["psn"] - 1) | 0x80))
        regs["Egress.ackreq_reg"].append((qp, 0))
        regs["Egress.window_reg"].append((qp, 0))

    routing = cfg["routing"]
    for what, op in (("keywrite", 1), ("keyincrement", 3)):
        rule = _route_stores(routing[what], what, stores)
        if rule is None:
            rule = []
            for ip, name in sorted(routing["destinations"].items()):
                for i, s in enumerate(stores):
                    if s["name"] == name and s["kind"] == what:
                        rule.append((ip, i))
        for ip, i in rule:
            dst = ip_int(ip if ip is not None else report_dst)
            store_n = stores[i].get("redundancy")
            for n in [int(store_n)] if store_n is not None else range(1, max_n + 1):
                for imm in (0, 1):
                    count = n + (imm if what == "keyincrement" else 0)
                    mgid = group(stores[i]["port"], count)
                    tables["Ingress.tbl_kv_route"].append(("kv_replicate", {
                        "dst": dst, "op": op, "n": n, "immediate": imm}, {"grp": mgid, "qp": i}))

    rule = _route_stores(routing["postcard"], "postcard", stores)
    if rule is None:
        rule = [(ip, i) for ip, name in sorted(routing["destinations"].items())
                for i, s in enumerate(stores) if s["name"] == name and s["kind"] == "postcard"]
    for ip, i in rule:
        pc_r = int(stores[i].get("redundancy") or pc_cfg or 1)
        mgid = group(stores[i]["port"], pc_r)
        tables["Ingress.tbl_pc_route"].append(("pc_route", {
            "dst": ip_int(ip if ip is not None else report_dst)}, {"qp": i, "grp": mgid}))
    if rule:
        hops = k["pc_hops"]
        for hop in range(hops):
            for path_len in [0] + list(range(hop + 1, hops + 1)):
                want = path_len or hops
                full = (1 << want) - 1
                bit = 1 << hop
                tables["Ingress.tbl_pc_hop"].append(("pc_hop", {"hop": hop, "path_len": path_len}, {
                    "hop_bit": bit, "full": full, "full_xor_bit": full ^ bit,
                    "start_mask": 0 if want == 1 else bit,
                    "start_complete": 1 if want == 1 else 0}))

    cl = cfg.get("_cluster")
    if cl and cl["append"]:
        # Each collector's Append store must hold exactly the lists the cluster gives it.
        for r in cl["lists"]:
            held = [s for s in stores if s["kind"] == "append" and s["collector"] == r["collector"]
                    and s["name"] == cl["append"]]
            if not held or (held[0]["first_list"], held[0]["lists"]) != (r["first"], r["count"]):
                got = (f"lists {held[0]['first_list']}..{held[0]['first_list'] + held[0]['lists']}"
                       if held else "no such store")
                raise ConfigError(
                    f"{cl['path']}: epoch {cl['epoch']} gives lists {r['first']}.."
                    f"{r['first'] + r['count']} to {r['collector']}, whose store "
                    f"{cl['append']!r} has {got}")
    list_idx = 0
    for qp, s in enumerate(stores):
        if s["kind"] != "append":
            continue
        seq = s.get("format", "sequenced") == "sequenced"
        if s["batch"] > 4:
            raise ConfigError(f"store {s['name']}: Append batch {s['batch']}, but the Tofino-1 "
                              "program batches at most 4 entries (p4/README.md): give the store "
                              "batch 4 or less, or use the software translator")
        if s["batch"] != k["ap_batch"] or s["entry_size"] != k["value_len"] or seq != k["ap_sequenced"]:
            raise ConfigError(f"store {s['name']}: batch {s['batch']}, entry {s['entry_size']}, "
                              f"format {s.get('format')} differ from the compiled program")
        stride = s["batch"] * s["entry_size"] + (AP_TRAILER_LEN if seq else 0)
        slots = s["capacity"] // s["batch"]
        for l in range(s["lists"]):
            tables["Ingress.tbl_ap_list"].append(("ap_list", {"list_id": s["first_list"] + l}, {
                "list_idx": list_idx, "qp": qp, "port": s["port"],
                **addr_parts(s["addr"] + l * s["list_stride"], (slots - 1) * stride,
                             f"store {s['name']} list {l}"),
                "last_off": (slots - 1) * stride}))
            for r in ("Ingress.ap_pos_reg", "Ingress.ap_off_reg", "Ingress.ap_seq_reg",
                      "Ingress.ap_imm_reg"):
                regs[r].append((list_idx, 0))
            list_idx += 1

    if sketches:
        plan_sketches(sketches, cfg, k, ports, sketch_switches, tables, regs)
    return {"tables": tables, "registers": regs, "mcast": {"nodes": nodes, "groups": groups}}


def parse_switch_ids(spec):
    """Switch IDs of "1-100,200,0x0a000001,10.0.0.1-10.0.0.4" (decimal, 0x hex or dotted IPv4;
    ranges inclusive), in order, without repeats."""
    def one(x):
        x = x.strip()
        try:
            v = ip_int(x) if x.count(".") == 3 else int(x, 0)
        except ValueError:
            raise ConfigError(f"sketch switches: {x!r} is not a switch ID") from None
        if not 0 <= v < 1 << 32:
            raise ConfigError(f"sketch switches: {x!r} is not a 32-bit switch ID")
        return v
    out, seen = [], set()
    for part in filter(None, (p.strip() for p in spec.split(","))):
        lo, sep, hi = part.partition("-")
        a = one(lo)
        b = one(hi) if sep else a
        if b < a:
            raise ConfigError(f"sketch switches: empty range {part!r}")
        if b - a >= 1 << 20:
            raise ConfigError(f"sketch switches: range {part!r} is too large")
        for v in range(a, b + 1):
            if v not in seen:
                seen.add(v)
                out.append(v)
    return out


def parse_sketch_switches(spec):
    """--sketch-switches / DTA_SKETCH_SWITCHES: "SPEC" (every sketch) or "ID:SPEC;ID:SPEC"
    (per sketch ID) -> {sketch_id or None: [switch IDs]}."""
    out = {}
    if not spec or not spec.strip():
        return out
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        sid, sep, ids = part.partition(":")
        if sep:
            try:
                key = int(sid, 0)
            except ValueError:
                raise ConfigError(f"sketch switches: {sid!r} is not a sketch ID") from None
        else:
            key, ids = None, part
        if key in out:
            raise ConfigError(f"sketch switches: sketch {key if key is not None else '*'} "
                              "given twice")
        out[key] = parse_switch_ids(ids)
    return out


def sketch_stride(rows, width):
    """Bytes of one column record: the head (epoch, merged, expected), the cells padded to 4,
    the tail (a copy of the head)."""
    return (SK_RECORD_HEAD_LEN + rows * width + 3) // 4 * 4 + SK_RECORD_TAIL_LEN


def check_sketch_epoch_rules(sk_cfg, expected):
    """Refuses the [sketch] settings the program cannot honour (p4/README.md, Sketch-Merge):
    it moves a sketch's epoch on at the first report of a newer one (a quorum of 1) and NACKs
    an installed switch at the report's source address."""
    quorum = sk_cfg.get("epoch_quorum")
    effective = int(quorum) if quorum is not None else expected // 2 + 1
    if effective != 1:
        why = (f"sketch.epoch_quorum = {quorum}" if quorum is not None else
               f"sketch.epoch_quorum (absent: a majority of expected_switches = {expected}, "
               f"i.e. {effective})")
        raise ConfigError(f"{why}, but the program moves the epoch on at the first report of "
                          "a newer epoch (no quorum, no held epoch): set epoch_quorum = 1 to "
                          "accept that, or use the software translator")
    if sk_cfg.get("switch"):
        raise ConfigError("[[sketch.switch]]: the program NACKs an installed switch at the "
                          "source address of its report (switches are installed by "
                          "--sketch-switches, never learned); fixed NACK addresses need the "
                          "software translator")


def plan_sketches(sketches, cfg, k, ports, switches, tables, regs):
    """Pipe 1's Sketch-Merge tables and registers for the Sketch stores (see the module docs)."""
    names = [s["name"] for s in sketches]
    if not k["icrc"]:
        raise ConfigError(f"Sketch-Merge stores {names}: the one-pipe build (--no-icrc, "
                          "-DDTA_NO_ICRC) has no Sketch-Merge; it runs in the ICRC pipe")
    if not k["sketch"]:
        raise ConfigError(f"Sketch-Merge stores {names}: the program is built with "
                          "-DDTA_NO_SKETCH; rebuild without it or use the software translator")
    if len(sketches) > k["sketches"]:
        raise ConfigError(f"{len(sketches)} Sketch-Merge stores, but the program holds "
                          f"DTA_SKETCHES = {k['sketches']}")
    t = cfg["translator"]
    src_ip, src_port = split_addr(t["roce"])
    ack_every = int(cfg["reliability"]["ack_every"])
    sk_cfg = cfg.get("sketch", {})
    expected = int(sk_cfg.get("expected_switches", 1))
    if not 1 <= expected < 1 << 16:
        raise ConfigError(f"sketch.expected_switches {expected} is not 1..=65535")
    check_sketch_epoch_rules(sk_cfg, expected)
    switches = switches or {}
    for sid in switches:
        if sid is not None and sid not in {s["sketch_id"] for s in sketches}:
            raise ConfigError(f"sketch switches: no Sketch-Merge store serves sketch ID {sid}")
    for n, (name, action) in SK_NAMES.items():
        (tables if action else regs)[name] = []
    T = {n: SK_NAMES[n][0] for n in SK_NAMES}
    cell_base, sw_next = 0, 0
    ids = set()
    for sk, s in enumerate(sketches):
        what = f"store {s['name']} (sketch {s['sketch_id']})"
        if s["sketch_id"] in ids:
            raise ConfigError(f"{what}: another store serves the same sketch ID")
        ids.add(s["sketch_id"])
        rows, width, columns = int(s["rows"]), int(s["cell_width"]), int(s["columns"])
        batch, epochs = int(s["batch"]), int(s["epochs"])
        op = SK_MERGE_OP.get(s["sketch"])
        if op is None:
            raise ConfigError(f"{what}: unknown sketch kind {s['sketch']!r}")
        if batch != 1:
            raise ConfigError(f"{what}: batch {batch}, but the program writes one column "
                              "record per WRITE: give the store batch = 1, or use the software "
                              "translator")
        if epochs not in (1, 2, 4, 8, 16):
            raise ConfigError(f"{what}: {epochs} epoch slots, but the program takes 1, 2, 4, 8 "
                              "or 16 (the epoch's low 4 bits pick the slot)")
        wide = rows == k["sk_rows"] and width == 4 and op in (0, 2)
        one_row = rows == 1 and (width == 4 or (width == 1 and op == 1))
        if not wide and not one_row:
            raise ConfigError(f"{what}: {rows} rows of {width}-byte cells ({s['sketch']}), but "
                              f"the program merges DTA_SK_ROWS = {k['sk_rows']} rows of 4-byte "
                              "sum or signed-sum cells, one row of 4-byte cells, or one row of "
                              "1-byte max cells (HyperLogLog): it merges 1-byte cells as 32-bit "
                              "ones, so a 1-byte sum would not saturate at 255")
        if cell_base + columns > k["sk_cells"]:
            raise ConfigError(f"{what}: {columns} columns do not fit the program's cell "
                              f"registers (DTA_SK_CELLS = {k['sk_cells']}, {cell_base} taken "
                              "by the stores before it)")
        stride = sketch_stride(rows, width)
        assert stride == (4 * (rows + 4) if rows > 1 else 20)
        region = SK_HEADER_LEN + epochs * columns * stride
        if not 128 <= s["collector_port"] < 256:
            raise ConfigError(f"{what}: collector port {s['collector_port']} is not on pipe 1 "
                              "(device ports 128..255), where Sketch-Merge runs")
        ids_of = switches.get(s["sketch_id"], switches.get(None))
        if not ids_of:
            raise ConfigError(f"{what}: no switches given (--sketch-switches / "
                              "DTA_SKETCH_SWITCHES): the program merges only installed switches")
        if len(ids_of) < expected:
            raise ConfigError(f"{what}: {len(ids_of)} switches installed, fewer than "
                              f"sketch.expected_switches = {expected}: no column would complete")
        if sw_next + len(ids_of) > k["sk_switches"]:
            raise ConfigError(f"{what}: {sw_next + len(ids_of)} (sketch, switch) pairs, above "
                              f"DTA_SK_SWITCHES = {k['sk_switches']}")
        tables[T["tbl_sketch"]].append((SK_NAMES["tbl_sketch"][1], {
            "sketch_id": s["sketch_id"], "rows": rows, "cell_width": width, "merge_op": op}, {
            "sk": sk, "columns_m1": columns - 1, "cell_base": cell_base, "expected": expected,
            "wide": 1 if wide else 0}))
        for sw in ids_of:
            tables[T["tbl_sk_switch"]].append((SK_NAMES["tbl_sk_switch"][1], {
                "sk": sk, "switch_id": sw}, {"sw": sw_next}))
            sw_next += 1
        for lo4 in range(16):
            tables[T["tbl_sk_slot"]].append((SK_NAMES["tbl_sk_slot"][1], {
                "sk": sk, "epoch_lo4": lo4}, {
                "slot_off": SK_HEADER_LEN + (lo4 % epochs) * columns * stride}))
        tables[T["tbl_sk_qp"]].append((SK_NAMES["tbl_sk_qp"][1], {"sk": sk}, {
            "src_mac": mac_int(t["mac"]), "dst_mac": mac_int(s["mac"]),
            "src_ip": ip_int(src_ip), "dst_ip": ip_int(s["roce_ip"]), "src_port": src_port,
            "remote_qpn": s["remote_qpn"], "rkey": s["rkey"],
            **addr_parts(s["addr"], region - 1, what),
            "ack_every_m1": ack_every - 1, "port": s["collector_port"],
            # NACKs leave from the translator's RoCEv2 address, as the software translator's.
            "nack_src_port": src_port}))
        tables[T["tbl_sk_resp"]].append((SK_NAMES["tbl_sk_resp"][1], {
            "src": ip_int(s["roce_ip"]), "dest_qp": s["local_qpn"]}, {"sk": sk}))
        regs[T["sk_psn_reg"]].append((sk, psn_cell(s["psn"])))
        regs[T["sk_nak_reg"]].append((sk, psn_cell(s["psn"] - 1) | 0x80))  # ACK(start - 1), as nak_reg
        regs[T["sk_ackreq_reg"]].append((sk, 0))
        regs[T["sk_epoch_reg"]].append((sk, 0))
        cell_base += columns


# ---- p4/reporter/dta_sketch_reporter.p4 (a switch's Sketch-Merge reporter) ----

SKETCH_REPORTER_PROGRAM = "dta_sketch_reporter"
# ig_md_t.mode values of the program (its MODE_* constants).
RSK_MODE_EXPORT_CM, RSK_MODE_EXPORT_HLL, RSK_MODE_NACK_CM, RSK_MODE_NACK_HLL = 2, 3, 4, 5
RSK_SELECTOR_CM, RSK_SELECTOR_HLL = 0, 1      # a trigger frame's first payload byte
RSK_NACK_UDP_LEN = 8 + 16                     # UDP header + the 16-byte sketch-column NACK
RSK_DEFAULT_KNOBS = {"cm_rows": 2, "cm_cols": 4096, "hll_p": 10, "epoch_shift": 30}


def sketch_reporter_epoch_base(wall_ns, shift=30):
    """epoch_base for a switch whose global timestamp was set to wall-clock nanoseconds modulo
    2^48 (so that every switch's epoch boundaries coincide): the epochs the timestamp's wraps
    took away, so that epoch = wall_ns >> shift (mod 2^32). Re-installed at each wrap."""
    return ((wall_ns >> 48) << (48 - shift)) & 0xFFFFFFFF


def plan_sketch_reporter(sw, wall_ns, knobs=None):
    """The control-plane entries of one switch running dta_sketch_reporter.p4.

    `sw`: switch_id (u32), cm_sketch_id and hll_sketch_id (distinct u16), report_ip and
    report_mac (the switch's report source; NACKs come back to report_ip), translator_ip and
    translator_mac, port (device port towards the translator), trigger_ports (pktgen / CPU
    ports whose trigger frames are obeyed), optional udp_src_port (default 0xC0DE).
    `wall_ns`: the wall-clock time the switch's global timestamp was set to (epoch base).
    Returns default actions, table entries (action, key, params) and the two collector stores
    the switch's reports need (`hash = "tofino"`)."""
    k = dict(RSK_DEFAULT_KNOBS)
    k.update(knobs or {})
    rows, cols, p, shift = k["cm_rows"], k["cm_cols"], k["hll_p"], k["epoch_shift"]
    if not 1 <= rows <= 4:
        raise ConfigError(f"cm_rows {rows}: the program takes 1..4")
    if cols < 16 or cols > 65536 or cols & (cols - 1):
        raise ConfigError(f"cm_cols {cols}: the program takes a power of two, 16..65536")
    if not 4 <= p <= 16:
        raise ConfigError(f"hll_p {p}: the program takes 4..16")
    if not 16 <= shift <= 40:
        raise ConfigError(f"epoch_shift {shift}: the program takes 16..40")
    switch_id = int(sw["switch_id"])
    if not 0 <= switch_id < 1 << 32:
        raise ConfigError(f"switch_id {switch_id} is not a u32")
    cm_id, hll_id = int(sw["cm_sketch_id"]), int(sw["hll_sketch_id"])
    for sid in (cm_id, hll_id):
        if not 0 <= sid < 1 << 16:
            raise ConfigError(f"sketch ID {sid} is not a u16")
    if cm_id == hll_id:
        raise ConfigError(f"the Count-Min and HyperLogLog sketches share sketch ID {cm_id}")
    ports = list(sw.get("trigger_ports", []))
    if not ports:
        raise ConfigError("no trigger_ports: without trigger frames nothing is ever exported")
    report_ip = ip_int(sw["report_ip"])
    base = sketch_reporter_epoch_base(wall_ns, shift)
    defaults = {
        "Ingress.tbl_switch": ("set_switch", {
            "switch_id": switch_id, "cm_id": cm_id, "hll_id": hll_id,
            "epoch_base": base, "epoch_base_minus_1": (base - 1) & 0xFFFFFFFF}),
        "Ingress.tbl_report_dst": ("set_report_dst", {
            "port": int(sw["port"]), "src_mac": mac_int(sw["report_mac"]),
            "dst_mac": mac_int(sw["translator_mac"]), "src_ip": report_ip,
            "dst_ip": ip_int(sw["translator_ip"]),
            "udp_src_port": int(sw.get("udp_src_port", 0xC0DE))}),
    }
    trig = []
    for port in ports:
        trig.append(("export", {"ingress_port": int(port), "sketch": RSK_SELECTOR_CM},
                     {"mode": RSK_MODE_EXPORT_CM}))
        trig.append(("export", {"ingress_port": int(port), "sketch": RSK_SELECTOR_HLL},
                     {"mode": RSK_MODE_EXPORT_HLL}))
    nack = [("nack", {"dst_addr": report_ip, "switch_id": switch_id, "sketch_id": sid,
                      "udp_len": RSK_NACK_UDP_LEN}, {"mode": mode})
            for sid, mode in ((cm_id, RSK_MODE_NACK_CM), (hll_id, RSK_MODE_NACK_HLL))]
    stores = [
        {"sketch_id": cm_id, "sketch": "count_min", "rows": rows, "cell_width": 4,
         "merge_op": 0, "columns": cols, "hash": "tofino"},
        {"sketch_id": hll_id, "sketch": "hyperloglog", "rows": 1, "cell_width": 1,
         "merge_op": 1, "columns": 1 << p, "hash": "tofino"},
    ]
    return {"defaults": defaults,
            "tables": {"Ingress.tbl_trigger": trig, "Ingress.tbl_nack": nack},
            "stores": stores,
            # One report per trigger: the export of an epoch needs this many within the next.
            "triggers_per_epoch": cols + (1 << p),
            "epoch_ns": 1 << shift}


# ---- the DART build of the reporter (p4/reporter/dta_reporter.p4 -DDTA_DART, dta_dart.p4) ----
DART_PROGRAM = "dta_reporter"
DART_BUCKETS = 256          # tbl_dart_collector: the key checksum's low byte
DART_SLOT_SIZE = 8          # 4-byte checksum + the 4-byte value (the switch ID)
DART_DEFAULT_KNOBS = {"max_n": 4, "qps": 16, "hash": "independent", "icrc": True}
DART_NAMES = {
    "tbl_dart_collector": "Ingress.dart_collector.tbl_dart_collector",
    "tbl_dart_resp": "Ingress.dart_response.tbl_dart_resp",
    "tbl_dart_qp": "Egress.dart_write.tbl_dart_qp",
    "dart_psn_reg": "Egress.dart_write.dart_psn_reg",
}


def dart_knobs_from_defines(defines):
    """The knobs of a DART reporter compiled with these -D flags (-DDTA_DART required)."""
    k = dict(DART_DEFAULT_KNOBS)
    flags = defines.split()
    if "-DDTA_DART" not in flags:
        raise ConfigError("--defines: the DART reporter is compiled with -DDTA_DART")
    for d in flags:
        name, _, value = d[2:].partition("=")
        if not d.startswith("-D"):
            raise ConfigError(f"--defines: {d!r} is not a -D flag")
        if name in ("DTA_DART", "DTA_REF_VARIANT_B"):
            continue
        if name == "DTA_HASH_REFERENCE":
            k["hash"] = "reference"
        elif name == "DTA_NO_ICRC":
            k["icrc"] = False
        elif name in ("DTA_MAX_N", "DTA_DART_QPS"):
            try:
                k["max_n" if name == "DTA_MAX_N" else "qps"] = int(value, 0)
            except ValueError:
                raise ConfigError(f"--defines: {d!r} needs a number") from None
        else:
            raise ConfigError(f"--defines: {name} is not a knob of the DART reporter "
                              "(p4/README.md, \"DART reporter\")")
    return k


def plan_dart_reporter(cfg, collectors, ports, connections=None, knobs=None, n=None,
                       store=None, first_session=1, max_pkt_len=128):
    """The entries of one switch running the DART reporter, from the translator's inputs:
    `cfg` (load_config: [translator] roce and mac are the switch's RoCEv2 source, the address
    `dta-translator --control-only` connected the QPs from), the collectors' metadata
    (load_collectors) and optionally the RDMA_CM connections (load_connections), which win over
    the metadata's static QPs as in plan().

    One QP per collector, into its Key-Write store (`store`, or its first Key-Write store):
    tbl_dart_qp and dart_psn_reg (the start PSN). tbl_dart_collector gives bucket b (the key
    checksum's low byte) to collector b mod C, with that collector's mirror session
    (first_session + its index), whose multicast group holds N nodes towards the collector's
    dev port with rid 0..N-1 (N: the store's recorded redundancy, else `n`). tbl_dart_resp drops
    the collectors' answers to our source address. Returns a plan for apply(), with "mirror":
    [(session ID, mirror.cfg fields)]."""
    k = dict(DART_DEFAULT_KNOBS)
    k.update(knobs or {})
    t = cfg["translator"]
    # A connection names its collector; one without applies to every collector's store.
    conn_by_store = {(c.get("collector"), c["store"]): c for c in connections or []}
    if not collectors:
        raise ConfigError("DART: no collector")
    if len(collectors) > k["qps"]:
        raise ConfigError(f"DART: {len(collectors)} collectors but the program holds "
                          f"DTA_DART_QPS = {k['qps']} QPs")
    tables = {DART_NAMES[x]: [] for x in ("tbl_dart_collector", "tbl_dart_resp", "tbl_dart_qp")}
    regs = {DART_NAMES["dart_psn_reg"]: []}
    nodes, groups, mirror = [], [], []
    sources = []
    for qp, (cname, meta) in enumerate(collectors):
        if cname not in ports:
            raise ConfigError(f"collector {cname}: no dev port given")
        kws = [s for s in meta["stores"] if s.get("kind") == "keywrite"
               and (store is None or s["name"] == store)]
        if not kws:
            raise ConfigError(f"collector {cname}: no Key-Write store"
                              + (f" {store!r}" if store else ""))
        s = kws[0]
        c = conn_by_store.get((cname, s["name"])) or conn_by_store.get((None, s["name"]))
        if c is not None:
            remote, psn = c["remote_qpn"], c["psn"]
            addr, rkey = c.get("addr", s["addr"]), c.get("rkey", s["rkey"])
            src = c.get("translator_roce", t["roce"])
        elif s.get("qps"):
            q = s["qps"][0]
            remote, psn, addr, rkey, src = q["qpn"], q["psn"], s["addr"], s["rkey"], t["roce"]
        else:
            raise ConfigError(f"store {s['name']}: no QP (static qps or a connection)")
        if s.get("slot_size") != DART_SLOT_SIZE:
            raise ConfigError(f"store {s['name']}: slot_size {s.get('slot_size')} but the DART "
                              f"reporter writes {DART_SLOT_SIZE}-byte slots (4-byte values)")
        if s.get("hash", "independent") != k["hash"]:
            raise ConfigError(f"store {s['name']}: hash profile {s.get('hash')} but the program "
                              f"is compiled for {k['hash']}")
        if not k["icrc"] and meta.get("verify_icrc", True):
            raise ConfigError(f"collector {cname} verifies the ICRC but the program is built "
                              "with -DDTA_NO_ICRC (ICRC 0): set verify_icrc = false there")
        store_n = s.get("redundancy")   # the store's recorded N wins over `n`
        copies = int(store_n if store_n is not None else (n if n is not None else 0))
        if not 1 <= copies <= k["max_n"]:
            raise ConfigError(f"store {s['name']}: redundancy {copies or 'unknown'} (the store "
                              f"records none: give n) is not 1..DTA_MAX_N = {k['max_n']}")
        slots = int(s["slots"])
        src_ip, src_port = split_addr(src)
        sources.append((ip_int(src_ip), src_port))
        parts = addr_parts(addr, slots * DART_SLOT_SIZE - 1, f"store {s['name']}")
        tables[DART_NAMES["tbl_dart_qp"]].append(("set_dart_qp", {"qp": qp}, {
            "src_mac": mac_int(t["mac"]), "dst_mac": mac_int(meta["mac"]),
            "src_ip": ip_int(src_ip), "dst_ip": ip_int(split_addr(meta["roce"])[0]),
            "src_port": src_port, "qpn": remote, "r_key": rkey,
            "hi": parts["base_hi"], "lo": parts["base_lo"], "hi1": parts["base_hi1"],
            "carry": parts["carry_at"], "mask": slots - 1}))
        regs[DART_NAMES["dart_psn_reg"]].append((qp, psn_cell(psn)))
        ids = []
        for rid in range(copies):
            nodes.append((len(nodes) + 1, rid, ports[cname]))
            ids.append(len(nodes))
        groups.append((len(groups) + 1, ids))
        mirror.append((first_session + qp, {
            "direction": "INGRESS", "session_enable": True, "mcast_grp_a": len(groups),
            "mcast_grp_a_valid": True, "ucast_egress_port_valid": False,
            "max_pkt_len": max_pkt_len}))
    for b in range(DART_BUCKETS):
        qp = b % len(collectors)
        tables[DART_NAMES["tbl_dart_collector"]].append(
            ("dart_collector", {"bucket": b}, {"session": first_session + qp, "qp": qp}))
    for ip, port in sorted(set(sources)):
        tables[DART_NAMES["tbl_dart_resp"]].append(("dart_response", {"dst": ip, "dst_port": port}, {}))
    return {"tables": tables, "registers": regs, "mcast": {"nodes": nodes, "groups": groups},
            "mirror": mirror}


def _node(prog, name):
    """The bfrt object of a plan name: "Ctrl.x" in pipe 0, or "pipe_name.Ctrl[.Inner].x"."""
    parts = name.split(".")
    if parts[0] not in PIPES:
        parts = ["pipe"] + parts
    obj = prog
    for p in parts:
        obj = getattr(obj, p)
    return obj


def _delete_if_present(delete, **key):
    """Deletes one entry through bfrt_python, where an absent entry is fine. bfrt_python raises
    its own BfRtTableError for "not found"; a TypeError is a wrong keyword, a bug here."""
    try:
        delete(**key)
    except TypeError:
        raise
    except Exception:  # noqa: BLE001 (BfRtTableError cannot be imported outside bfshell)
        pass


def apply(p, bfrt, program=PROGRAM):
    """Writes a plan through bfrt_python: clears the tables it owns, then adds every entry,
    writes every register cell and creates the multicast nodes and groups and the mirror
    sessions. A re-run replaces what an earlier run wrote: the driver refuses to add a
    multicast node or group or a mirror session that exists, so the plan's IDs are deleted
    first (an operator's own groups must not use them)."""
    prog = getattr(bfrt, program)
    for name, entries in p["tables"].items():
        table = _node(prog, name)
        if name in SHARED_TABLES:
            # The operator's own routes stay; only ours are replaced.
            for _, key, _ in entries:
                _delete_if_present(table.delete, **key)
        else:
            table.clear()
        for action, key, params in entries:
            args = dict(key)
            args.update(params)
            getattr(table, "add_with_" + action)(**args)
    for name, cells in p["registers"].items():
        r = _node(prog, name)
        for index, value in cells:
            r.mod(REGISTER_INDEX=index, f1=value)
    pre = bfrt.pre
    for mgid, _ in p["mcast"]["groups"]:
        _delete_if_present(pre.mgid.delete, MGID=mgid)
    for nid, _, _ in p["mcast"]["nodes"]:
        _delete_if_present(pre.node.delete, MULTICAST_NODE_ID=nid)
    for nid, rid, port in p["mcast"]["nodes"]:
        pre.node.add(MULTICAST_NODE_ID=nid, MULTICAST_RID=rid, MULTICAST_LAG_ID=[],
                     DEV_PORT=[port])
    for mgid, ids in p["mcast"]["groups"]:
        pre.mgid.add(MGID=mgid, MULTICAST_NODE_ID=ids,
                     MULTICAST_NODE_L1_XID_VALID=[False] * len(ids),
                     MULTICAST_NODE_L1_XID=[0] * len(ids))
    # Mirror sessions (the DART reporter's: one per collector, multicast to its N copies).
    for sid, fields in p.get("mirror", []):
        _delete_if_present(bfrt.mirror.cfg.delete, sid=sid)
        bfrt.mirror.cfg.add_with_normal(sid=sid, **fields)
    bfrt.complete_operations()


def parse_ports(s):
    out = {}
    for part in filter(None, (x.strip() for x in s.split(","))):
        name, port = part.split("=")
        out[name.strip()] = int(port)
    return out


def run(bfrt, config, ports, connections=None, resync_window=0, knobs=None,
        loop_port=DEFAULT_LOOP_PORT, sketch_switches=None):
    cfg = load_config(config)
    collectors = load_collectors(cfg, os.path.dirname(os.path.abspath(config)))
    conns = load_connections(connections) if connections else None
    p = plan(cfg, collectors, ports, conns, knobs, resync_window, loop_port,
             parse_sketch_switches(sketch_switches or ""))
    apply(p, bfrt)
    return p


def run_dart(bfrt, config, ports, connections=None, knobs=None, n=None, store=None,
             first_session=1, max_pkt_len=128):
    """Fills a switch running the DART reporter (plan_dart_reporter) through bfrt."""
    cfg = load_config(config)
    collectors = load_collectors(cfg, os.path.dirname(os.path.abspath(config)))
    conns = load_connections(connections) if connections else None
    p = plan_dart_reporter(cfg, collectors, ports, conns, knobs, n, store, first_session,
                           max_pkt_len)
    apply(p, bfrt, DART_PROGRAM)
    return p


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--ports", required=True, help="collector=devport,...")
    ap.add_argument("--connections")
    ap.add_argument("--resync-window", type=int, default=0)
    ap.add_argument("--loop-port", type=int, default=DEFAULT_LOOP_PORT,
                    help="pipe-0 loopback port of the two-pipe (ICRC) build (default 68)")
    ap.add_argument("--no-icrc", action="store_true",
                    help="the program was compiled with -DDTA_NO_ICRC (one pipe, ICRC 0)")
    ap.add_argument("--no-sketch", action="store_true",
                    help="the program was compiled with -DDTA_NO_SKETCH (no Sketch-Merge)")
    ap.add_argument("--sk-rows", type=int, default=DEFAULT_KNOBS["sk_rows"],
                    help="DTA_SK_ROWS the program was compiled with (default 4)")
    ap.add_argument("--sketch-switches", default="",
                    help='switch IDs of every sketch ("1-100,200") or per sketch ID '
                         '("7:1-100;9:200")')
    ap.add_argument("--defines", default="",
                    help='the bf-p4c -D flags the program was compiled with, as one argument '
                         '(--defines="-DDTA_AP_BATCH=2 -DDTA_PC_CACHE_BITS=3"; in bfrt_python: '
                         'DTA_DEFINES); --no-icrc, --no-sketch and --sk-rows add to them')
    ap.add_argument("--dart", action="store_true",
                    help="plan the DART reporter (dta_reporter.p4 -DDTA_DART; --defines as "
                         "compiled, -DDTA_DART included) instead of the translator")
    ap.add_argument("--dart-n", type=int, help="DART: copies per report when a store records "
                                               "no redundancy")
    ap.add_argument("--dart-store", help="DART: the Key-Write store name (default: each "
                                         "collector's first)")
    ap.add_argument("--mirror-session", type=int, default=1,
                    help="DART: the first mirror session ID (one per collector)")
    ap.add_argument("--max-pkt-len", type=int, default=128,
                    help="DART: mirror truncation (bytes)")
    ap.add_argument("--print", action="store_true", help="print the plan as JSON")
    ap.add_argument("--bfshell", metavar="PATH",
                    help="program the switch: check the plan here, then run this script "
                         "through `PATH -b` (e.g. $SDE_INSTALL/bin/bfshell) with these "
                         "settings (bfshell runs it inside bf_switchd, which does not see "
                         "this shell's environment)")
    a = ap.parse_args(argv)
    try:
        cfg = load_config(a.config)
        collectors = load_collectors(cfg, os.path.dirname(os.path.abspath(a.config)))
        conns = load_connections(a.connections) if a.connections else None
        if a.dart:
            p = plan_dart_reporter(cfg, collectors, parse_ports(a.ports), conns,
                                   dart_knobs_from_defines(a.defines or "-DDTA_DART"),
                                   a.dart_n, a.dart_store, a.mirror_session, a.max_pkt_len)
            json.dump(p, sys.stdout, indent=1)
            print()
            return 0
        knobs = knobs_from_defines(a.defines)
        if a.no_icrc:
            knobs["icrc"] = False
        if a.no_sketch:
            knobs["sketch"] = False
        if a.sk_rows != DEFAULT_KNOBS["sk_rows"]:
            knobs["sk_rows"] = a.sk_rows
        p = plan(cfg, collectors, parse_ports(a.ports), conns, knobs, a.resync_window,
                 a.loop_port, parse_sketch_switches(a.sketch_switches))
    except (ConfigError, OSError, ValueError, KeyError) as e:
        print(f"dta_bfrt: {e}", file=sys.stderr)
        return 2
    if a.bfshell:
        return run_bfshell(a.bfshell, bfshell_settings(a))
    json.dump(p, sys.stdout, indent=1)
    print()
    return 0


def bfshell_settings(a):
    """The DTA_* settings of a command line, as the in-switch run reads them (_setting)."""
    defines = a.defines
    if a.no_icrc:
        defines += " -DDTA_NO_ICRC"
    if a.no_sketch:
        defines += " -DDTA_NO_SKETCH"
    out = {"DTA_CONFIG": os.path.abspath(a.config), "DTA_PORTS": a.ports,
           "DTA_DEFINES": defines.strip(), "DTA_RESYNC_WINDOW": str(a.resync_window),
           "DTA_LOOP_PORT": str(a.loop_port), "DTA_SKETCH_SWITCHES": a.sketch_switches}
    if a.sk_rows != DEFAULT_KNOBS["sk_rows"]:
        out["DTA_SK_ROWS"] = str(a.sk_rows)
    if a.connections:
        out["DTA_CONNECTIONS"] = os.path.abspath(a.connections)
    if a.dart:
        out.update(DTA_DART="1", DTA_DEFINES=a.defines or "-DDTA_DART",
                   DTA_MIRROR_SESSION=str(a.mirror_session), DTA_MAX_PKT_LEN=str(a.max_pkt_len))
        if a.dart_n:
            out["DTA_DART_N"] = str(a.dart_n)
        if a.dart_store:
            out["DTA_DART_STORE"] = a.dart_store
    return out


def run_bfshell(bfshell, settings):
    """Runs this script in bfrt_python through `bfshell -b`. bfshell only sends
    "bfrt_python FILE" to bf_switchd's CLI server (TCP 9999), so the script runs inside
    bf_switchd, with bf_switchd's environment and working directory: the settings travel in
    a small wrapper that defines DTA_SETTINGS and then runs this file. bfshell's exit status
    says nothing about the script; a traceback or a "dta_bfrt:" error in its output does."""
    import subprocess
    import tempfile
    me = os.path.abspath(__file__)
    with tempfile.NamedTemporaryFile("w", suffix=".py", prefix="dta_bfrt_run_",
                                     delete=False) as f:
        # bf_switchd keeps one bfrt_python namespace for every run: the wrapper removes what
        # it defined, so a later plain run cannot pick up these settings.
        f.write(f"DTA_SETTINGS = {json.dumps(settings)}\n"
                f"try:\n"
                f"    exec(compile(open({json.dumps(me)}).read(), {json.dumps(me)}, 'exec'))\n"
                f"finally:\n"
                f"    del DTA_SETTINGS\n")
        wrapper = f.name
    os.chmod(wrapper, 0o644)
    try:
        r = subprocess.run([bfshell, "-b", wrapper], capture_output=True, text=True)
    finally:
        os.unlink(wrapper)
    out = r.stdout + r.stderr
    sys.stdout.write(out)
    failed = r.returncode != 0 or "Traceback (most recent call last)" in out or \
        "dta_bfrt: " in out
    return 1 if failed else 0


def _setting(name, default=None):
    """A DTA_* setting of the in-switch run: the launcher's DTA_SETTINGS (run_bfshell) when it
    is there, else bf_switchd's environment (set when bf_switchd was started)."""
    given = globals().get("DTA_SETTINGS")
    if isinstance(given, dict):
        return given.get(name, default)
    return os.environ.get(name, default)


if "bfrt" in globals() and not _setting("DTA_CONFIG"):
    raise ConfigError("DTA_CONFIG is not set: run `python3 dta_bfrt.py --config ... --bfshell "
                      "$SDE_INSTALL/bin/bfshell` (bfshell -b runs this file inside bf_switchd, "
                      "which does not see the calling shell's environment)")
elif "bfrt" in globals() and _setting("DTA_DART", "") not in ("", "0"):
    # The DART reporter: DTA_CONFIG, DTA_PORTS, DTA_CONNECTIONS as for the translator;
    # DTA_DEFINES as compiled (-DDTA_DART ...), DTA_DART_N, DTA_DART_STORE, DTA_MIRROR_SESSION,
    # DTA_MAX_PKT_LEN.
    run_dart(globals()["bfrt"], _setting("DTA_CONFIG"),
             parse_ports(_setting("DTA_PORTS", "")), _setting("DTA_CONNECTIONS"),
             dart_knobs_from_defines(_setting("DTA_DEFINES", "-DDTA_DART")),
             int(_setting("DTA_DART_N")) if _setting("DTA_DART_N") else None,
             _setting("DTA_DART_STORE") or None,
             int(_setting("DTA_MIRROR_SESSION", "1")),
             int(_setting("DTA_MAX_PKT_LEN", "128")))
elif "bfrt" in globals():  # running inside bfshell's bfrt_python
    run(globals()["bfrt"], _setting("DTA_CONFIG"), parse_ports(_setting("DTA_PORTS", "")),
        _setting("DTA_CONNECTIONS"), int(_setting("DTA_RESYNC_WINDOW", "0")),
        dict(knobs_from_defines(_setting("DTA_DEFINES", "")),
             **({"icrc": False} if _setting("DTA_NO_ICRC", "") not in ("", "0") else {}),
             **({"sketch": False} if _setting("DTA_NO_SKETCH", "") not in ("", "0") else {}),
             **({"sk_rows": int(_setting("DTA_SK_ROWS"))} if _setting("DTA_SK_ROWS") else {})),
        int(_setting("DTA_LOOP_PORT", str(DEFAULT_LOOP_PORT))),
        _setting("DTA_SKETCH_SWITCHES", ""))
elif __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
