"""Runs dta_bfrt against a fake bfrt module and checks what it writes against the config.

stdlib only (unittest, tomllib): python3 -m unittest p4/control/test_dta_bfrt.py
"""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dta_bfrt  # noqa: E402


class Fake:
    """Records every call made through attribute paths, like bfrt.prog.pipe.Ctrl.tbl.add_with_x(...)."""

    def __init__(self, log, path=()):
        self._log, self._path = log, path

    def __getattr__(self, name):
        return Fake(self._log, self._path + (name,))

    def __call__(self, *args, **kwargs):
        self._log.append((".".join(self._path), args, kwargs))


CONFIG = """
[translator]
listen = "10.0.0.101:40040"
roce = "10.0.0.101:4791"
mac = "02:00:00:00:00:01"
max_redundancy = 4

[reliability]
ack_every = 16

[postcard]
cache_slots = 32768
redundancy = 2

[[collector]]
name = "c1"
metadata = "c1.json"

[routing]
keywrite = "single"
keyincrement = "single:ki"
postcard = "destination"
destinations = { "10.0.0.102" = "pc" }
"""

META = {
    "roce": "10.0.0.51:4791",
    "mac": "02:00:00:00:00:51",
    "verify_icrc": True,
    "stores": [
        {"name": "kw", "addr": 0x7f0000000000, "len": 8 << 16, "rkey": 0x1234,
         "qps": [{"qpn": 0x11, "psn": 0xABC000, "peer_qpn": 0x100}],
         "kind": "keywrite", "slots": 1 << 16, "slot_size": 8, "hash": "independent"},
        {"name": "ki", "addr": 0x7f1000000000, "len": 8 << 10, "rkey": 0x2345,
         "qps": [{"qpn": 0x12, "psn": 0x000010, "peer_qpn": 0x101}],
         "kind": "keyincrement", "slots": 1 << 10, "hash": "independent"},
        {"name": "ap", "addr": 0x7f2000000000, "len": 3 * 24 * 64, "rkey": 0x3456,
         "qps": [{"qpn": 0x13, "psn": 0xFFFFFF, "peer_qpn": 0x102}],
         "kind": "append", "lists": 3, "first_list": 10, "capacity": 256, "entry_size": 4,
         "batch": 4, "format": "sequenced", "list_stride": 24 * 64},
        {"name": "pc", "addr": 0x7f3000000000, "len": 32 * 1024, "rkey": 0x4567,
         "qps": [{"qpn": 0x14, "psn": 5, "peer_qpn": 0x103}],
         "kind": "postcard", "chunks": 1024, "hops": 5, "hash": "independent"},
    ],
}


def ip(s):
    return dta_bfrt.ip_int(s)


class ControlPlaneTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.cfg = os.path.join(self.dir.name, "translator.toml")
        with open(self.cfg, "w") as f:
            f.write(CONFIG)
        with open(os.path.join(self.dir.name, "c1.json"), "w") as f:
            json.dump(META, f)

    def tearDown(self):
        self.dir.cleanup()

    def run_fake(self, connections=None, window=0):
        log = []
        plan = dta_bfrt.run(Fake(log), self.cfg, {"c1": 136}, connections, window)
        return log, plan

    @staticmethod
    def base(params):
        """The 64-bit base address an action gets as (base_hi, base_lo, base_hi1, carry_at)."""
        hi, lo = params["base_hi"], params["base_lo"]
        assert params["base_hi1"] == (hi + 1) & 0xFFFFFFFF
        return (hi << 32) | lo

    def test_address_halves_and_carry_threshold(self):
        """The program computes base + offset as base_lo + offset (32 bits) and takes base_hi
        + 1 when offset >= carry_at; checked here against 64-bit arithmetic at and around the
        carry for a region that straddles a 4 GiB boundary and one that does not."""
        def va(p, off):
            lo = (p["base_lo"] + off) & 0xFFFFFFFF
            d = (off - p["carry_at"]) & 0xFFFFFFFF
            hi = p["base_hi"] if d >> 31 else p["base_hi1"]
            return (hi << 32) | lo
        for base, max_off in ((0x7F00FFFFFF00, 0x1000), (0x7F0000001000, 0x1000),
                              (0x0000FFFFFFF8, 0x7FFFFFFE), (0xFFFFFFFF, 8)):
            p = dta_bfrt.addr_parts(base, max_off, "t")
            self.assertLess(p["carry_at"], 1 << 31)
            for off in sorted({0, 1, 7, 8, 0xF8, 0x100, max_off - 1, max_off,
                               min(max_off, p["carry_at"]), min(max_off, p["carry_at"] - 1)}):
                self.assertEqual(va(p, off), base + off, (hex(base), off))
        with self.assertRaises(dta_bfrt.ConfigError):
            dta_bfrt.addr_parts(0x1000, 1 << 31, "too large")

    def calls(self, log, suffix):
        return [kw for path, _, kw in log if path.endswith(suffix)]

    def test_qp_table_and_registers_follow_the_metadata(self):
        log, _ = self.run_fake(window=100)
        qps = self.calls(log, "Egress.tbl_qp.add_with_set_qp")
        self.assertEqual(len(qps), 4)
        for i, (store, q) in enumerate(zip(META["stores"], qps)):
            self.assertEqual(q["qp"], i)
            self.assertEqual(q["remote_qpn"], store["qps"][0]["qpn"])
            self.assertEqual(q["rkey"], store["rkey"])
            self.assertEqual(self.base(q), store["addr"])
            self.assertEqual(q["dst_ip"], ip("10.0.0.51"))
            self.assertEqual(q["src_ip"], ip("10.0.0.101"))
            self.assertEqual(q["src_port"], 4791)
            self.assertEqual(q["dst_mac"], 0x020000000051)
            self.assertEqual(q["ack_every_m1"], 15)
            self.assertEqual(q["window"], 100)
        self.assertEqual([q["slot_mask"] for q in qps], [0xFFFF, 0x3FF, 0, 0x3FF])
        psn = self.calls(log, "Egress.psn_reg.mod")
        self.assertEqual([(c["REGISTER_INDEX"], c["f1"] >> 8) for c in psn],
                         [(0, 0xABC000), (1, 0x10), (2, 0xFFFFFF), (3, 5)])
        self.assertTrue(all(c["f1"] & 0xFF == 0 for c in psn))
        # What the responder executed starts as an ACK of the PSN before the start (wrapping at
        # 2^24): PSN << 8 | 0x80.
        nak = self.calls(log, "Egress.nak_reg.mod")
        self.assertEqual([c["f1"] >> 8 for c in nak], [0xABBFFF, 0xF, 0xFFFFFE, 4])
        self.assertTrue(all(c["f1"] & 0xFF == 0x80 for c in nak))
        resp = self.calls(log, "Ingress.tbl_resp_qp.add_with_resp_qp")
        self.assertEqual([(r["src"], r["dest_qp"], r["qp"], r["port"]) for r in resp],
                         [(ip("10.0.0.51"), 0x100 + i, i, 68) for i in range(4)])
        # Tables are cleared before they are filled.
        first_add = next(i for i, (p, _, _) in enumerate(log) if ".add_with_" in p)
        self.assertTrue(all(p.endswith(".clear") for p, _, _ in log[:first_add]))
        self.assertEqual(log[-1][0], "complete_operations")

    def test_key_value_routes_replicate_with_rid_per_replica(self):
        log, plan = self.run_fake()
        kv = self.calls(log, "Ingress.tbl_kv_route.add_with_kv_replicate")
        self.assertEqual(len(kv), 2 * 4 * 2)  # (KW, KI) x N = 1..4 x immediate
        nodes = {c["MULTICAST_NODE_ID"]: c for c in self.calls(log, "pre.node.add")}
        groups = {c["MGID"]: c["MULTICAST_NODE_ID"] for c in self.calls(log, "pre.mgid.add")}
        for e in kv:
            self.assertEqual(e["dst"], ip("10.0.0.101"))
            members = groups[e["grp"]]
            want = e["n"] + (e["immediate"] if e["op"] == 3 else 0)
            self.assertEqual(len(members), want)
            self.assertEqual(sorted(nodes[m]["MULTICAST_RID"] for m in members), list(range(want)))
            self.assertTrue(all(nodes[m]["DEV_PORT"] == [68] for m in members))
            self.assertEqual(e["qp"], 0 if e["op"] == 1 else 1)
        self.assertEqual(len(groups), len(plan["mcast"]["groups"]))

    def test_icrc_pipe_routes_frames_through_the_loop_port(self):
        """Two-pipe build: frames and responses use the loop port (pipe 0), looped frames are
        marked for the ICRC pipe and routed to the collector's pipe-1 port, and pipe 1 sends
        what the collectors answer back to the loop port."""
        log, _ = self.run_fake()
        mark = self.calls(log, "Ingress.tbl_icrc_loop.add_with_icrc_mark")
        self.assertEqual(mark, [{"ingress_port": 68}])
        fwd = self.calls(log, "Ingress.tbl_forward.add_with_forward")
        self.assertEqual(fwd, [{"dst": ip("10.0.0.51"), "port": 136}])
        # tbl_forward keeps the operator's routes: our keys are deleted, the table not cleared.
        self.assertFalse(any(p.endswith("tbl_forward.clear") for p, _, _ in log))
        self.assertTrue(any(p.endswith("tbl_forward.delete") for p, _, _ in log))
        ret = [(p, kw) for p, _, kw in log if p.endswith("tbl_icrc_return.add_with_to_port")]
        self.assertEqual(ret, [("dta_translator.icrc_pipe.IcrcIngress.tbl_icrc_return.add_with_to_port",
                                {"dst": ip("10.0.0.101"), "port": 68})])

    def test_icrc_pipe_port_rules_and_the_one_pipe_build(self):
        cfg = dta_bfrt.load_config(self.cfg)
        cols = dta_bfrt.load_collectors(cfg, self.dir.name)
        with self.assertRaises(dta_bfrt.ConfigError):   # a collector on pipe 0
            dta_bfrt.plan(cfg, cols, {"c1": 8})
        with self.assertRaises(dta_bfrt.ConfigError):   # the loop port on pipe 1
            dta_bfrt.plan(cfg, cols, {"c1": 136}, loop_port=196)
        p = dta_bfrt.plan(cfg, cols, {"c1": 8}, knobs={"icrc": False})
        self.assertNotIn("Ingress.tbl_icrc_loop", p["tables"])
        self.assertNotIn("Ingress.tbl_forward", p["tables"])
        self.assertTrue(all(port == 8 for _, _, port in p["mcast"]["nodes"]))
        self.assertEqual({e[2]["port"] for e in p["tables"]["Ingress.tbl_resp_qp"]}, {8})

    def test_append_lists_and_postcard_tables(self):
        log, _ = self.run_fake()
        ap = self.calls(log, "Ingress.tbl_ap_list.add_with_ap_list")
        self.assertEqual([a["list_id"] for a in ap], [10, 11, 12])
        self.assertEqual([a["list_idx"] for a in ap], [0, 1, 2])
        self.assertEqual([self.base(a) for a in ap],
                         [0x7f2000000000 + l * 24 * 64 for l in range(3)])
        self.assertTrue(all(a["last_off"] == (256 // 4 - 1) * 24 and a["qp"] == 2 for a in ap))
        for r in ("ap_pos_reg", "ap_off_reg", "ap_seq_reg", "ap_imm_reg"):
            self.assertEqual(len(self.calls(log, f"Ingress.{r}.mod")), 3)
        pc = self.calls(log, "Ingress.tbl_pc_route.add_with_pc_route")
        self.assertEqual(len(pc), 1)
        self.assertEqual(pc[0]["dst"], ip("10.0.0.102"))
        self.assertEqual(pc[0]["qp"], 3)
        groups = {c["MGID"]: c["MULTICAST_NODE_ID"] for c in self.calls(log, "pre.mgid.add")}
        self.assertEqual(len(groups[pc[0]["grp"]]), 2)  # postcard.redundancy
        hop = {(h["hop"], h["path_len"]): h for h in self.calls(log, "Ingress.tbl_pc_hop.add_with_pc_hop")}
        self.assertEqual(hop[(0, 0)]["full"], 0b11111)
        self.assertEqual(hop[(2, 3)]["full_xor_bit"], 0b011)
        self.assertEqual(hop[(0, 1)]["start_mask"], 0)  # a 1-hop path completes at once
        self.assertEqual(hop[(1, 2)]["start_mask"], 0b10)
        self.assertEqual(hop[(0, 1)]["start_complete"], 1)
        self.assertEqual(hop[(1, 2)]["start_complete"], 0)
        self.assertNotIn((3, 2), hop)  # hop beyond the path length: a miss, counted as bad hop

    def test_connections_override_static_qps(self):
        conn = os.path.join(self.dir.name, "conn.json")
        with open(conn, "w") as f:
            json.dump([{"store": "kw", "collector": "c1", "qpn": 0x900, "remote_qpn": 0x77,
                        "psn": 0x123456, "rkey": 0xBEEF, "addr": 0x1000, "len": 8 << 16,
                        "kind": "keywrite", "slots": 1 << 16, "slot_size": 8}], f)
        log, _ = self.run_fake(connections=conn)
        q = self.calls(log, "Egress.tbl_qp.add_with_set_qp")[0]
        self.assertEqual((q["remote_qpn"], q["rkey"], self.base(q)), (0x77, 0xBEEF, 0x1000))
        self.assertEqual(self.calls(log, "Egress.psn_reg.mod")[0]["f1"], 0x123456 << 8)
        self.assertEqual(self.calls(log, "Ingress.tbl_resp_qp.add_with_resp_qp")[0]["dest_qp"], 0x900)

    def test_unsupported_configurations_are_refused(self):
        cfg = dta_bfrt.load_config(self.cfg)
        cols = dta_bfrt.load_collectors(cfg, self.dir.name)
        cfg["routing"]["keywrite"] = "key-hash"
        with self.assertRaises(dta_bfrt.ConfigError):
            dta_bfrt.plan(cfg, cols, {"c1": 136})
        cfg = dta_bfrt.load_config(self.cfg)
        cfg["translator"]["max_redundancy"] = 8
        with self.assertRaises(dta_bfrt.ConfigError):
            dta_bfrt.plan(cfg, cols, {"c1": 136})
        cfg = dta_bfrt.load_config(self.cfg)
        with self.assertRaises(dta_bfrt.ConfigError):
            dta_bfrt.plan(cfg, cols, {"c1": 136}, knobs={"hash": "reference"})
        with self.assertRaises(dta_bfrt.ConfigError):
            dta_bfrt.plan(cfg, cols, {})
        cfg["reports"] = {"reference_variant": "b"}
        with self.assertRaises(dta_bfrt.ConfigError):
            dta_bfrt.plan(cfg, cols, {"c1": 136})
        dta_bfrt.plan(cfg, cols, {"c1": 136}, knobs={"variant": "b"})

    def test_knobs_outside_the_tofino1_ranges_are_refused(self):
        """Append batch 8 and 16 and 6..8 postcard hops do not fit Tofino-1 (p4/README.md)."""
        cfg = dta_bfrt.load_config(self.cfg)
        cols = dta_bfrt.load_collectors(cfg, self.dir.name)
        for knobs in ({"ap_batch": 8}, {"ap_batch": 16}, {"pc_hops": 6}, {"pc_hops": 8}):
            with self.assertRaisesRegex(dta_bfrt.ConfigError, "Tofino-1", msg=str(knobs)):
                dta_bfrt.plan(cfg, cols, {"c1": 136}, knobs=knobs)
        # A store written with batch 8 is refused even against a batch-4 program.
        cols[0][1]["stores"][2]["batch"] = 8
        with self.assertRaisesRegex(dta_bfrt.ConfigError, "at most 4 entries"):
            dta_bfrt.plan(cfg, cols, {"c1": 136})

    def test_store_redundancy_from_the_metadata(self):
        # Metadata that records each store's N (record version 2 / JSON `redundancy`).
        meta = json.loads(json.dumps(META))
        for st, n in zip(meta["stores"], (2, 3, None, 2)):
            if n is not None:
                st["redundancy"] = n
        with open(os.path.join(self.dir.name, "c1.json"), "w") as f:
            json.dump(meta, f)
        log, _ = self.run_fake()
        kv = self.calls(log, "Ingress.tbl_kv_route.add_with_kv_replicate")
        # Only the store's N is routed: Key-Write N=2, Key-Increment N=3 (x immediate).
        self.assertEqual(sorted((e["op"], e["n"], e["immediate"]) for e in kv),
                         [(1, 2, 0), (1, 2, 1), (3, 3, 0), (3, 3, 1)])
        pc = self.calls(log, "Ingress.tbl_pc_route.add_with_pc_route")
        groups = {c["MGID"]: c["MULTICAST_NODE_ID"] for c in self.calls(log, "pre.mgid.add")}
        self.assertEqual(len(groups[pc[0]["grp"]]), 2)
        # The postcard store's N wins over an absent [postcard] redundancy ...
        cfg = dta_bfrt.load_config(self.cfg)
        del cfg["postcard"]["redundancy"]
        meta["stores"][3]["redundancy"] = 3
        with open(os.path.join(self.dir.name, "c1.json"), "w") as f:
            json.dump(meta, f)
        cols = dta_bfrt.load_collectors(cfg, self.dir.name)
        p = dta_bfrt.plan(cfg, cols, {"c1": 136})
        (_, _, params), = p["tables"]["Ingress.tbl_pc_route"]
        members = dict((g, ids) for g, ids in p["mcast"]["groups"])[params["grp"]]
        self.assertEqual(len(members), 3)
        # ... and contradicting it (2 in the config) is refused, as is N above max_redundancy.
        cfg = dta_bfrt.load_config(self.cfg)
        with self.assertRaises(dta_bfrt.ConfigError):
            dta_bfrt.plan(cfg, cols, {"c1": 136})
        meta["stores"][3]["redundancy"] = 2
        meta["stores"][1]["redundancy"] = 6
        with open(os.path.join(self.dir.name, "c1.json"), "w") as f:
            json.dump(meta, f)
        with self.assertRaises(dta_bfrt.ConfigError):
            dta_bfrt.plan(cfg, dta_bfrt.load_collectors(cfg, self.dir.name), {"c1": 136})

    def test_command_line_prints_the_plan(self):
        import io
        import contextlib
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = dta_bfrt.main(["--config", self.cfg, "--ports", "c1=136", "--print"])
        self.assertEqual(rc, 0)
        p = json.loads(out.getvalue())
        self.assertEqual(len(p["tables"]["Egress.tbl_qp"]), 4)
        self.assertEqual(p["registers"]["Egress.psn_reg"][0], [0, 0xABC000 << 8])


SK_META = {
    "roce": "10.0.0.51:4791",
    "mac": "02:00:00:00:00:51",
    "verify_icrc": True,
    "stores": [
        {"name": "cm", "addr": 0x7f5000000000, "len": 64 + 4 * 1024 * 32, "rkey": 0x5001,
         "qps": [{"qpn": 0x21, "psn": 0, "peer_qpn": 0x200}],
         "kind": "sketch", "sketch_id": 7, "sketch": "count-min", "rows": 4, "columns": 1024,
         "cell_width": 4, "batch": 1, "epochs": 4},
        {"name": "hll", "addr": 0x7f6000000000, "len": 64 + 2 * 256 * 20, "rkey": 0x5002,
         "qps": [{"qpn": 0x22, "psn": 0x10, "peer_qpn": 0x201}],
         "kind": "sketch", "sketch_id": 9, "sketch": "hyper-log-log", "rows": 1,
         "columns": 256, "cell_width": 1, "batch": 1, "epochs": 2},
        {"name": "cs", "addr": 0x7f7000000000, "len": 64 + 16 * 64 * 32, "rkey": 0x5003,
         "qps": [{"qpn": 0x23, "psn": 0x123, "peer_qpn": 0x202}],
         "kind": "sketch", "sketch_id": 11, "sketch": "count", "rows": 4, "columns": 64,
         "cell_width": 4, "batch": 1, "epochs": 16},
    ],
}


class SketchPlanTest(unittest.TestCase):
    """Sketch-Merge stores: pipe 1's tables and registers (dta_sketch.p4) and the refusals."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.cfg = os.path.join(self.dir.name, "translator.toml")
        with open(self.cfg, "w") as f:
            f.write(CONFIG + "\n[sketch]\nexpected_switches = 3\nepoch_quorum = 1\n")
        self.meta = json.loads(json.dumps(META))
        self.meta["stores"] += json.loads(json.dumps(SK_META["stores"]))
        self.write_meta()

    def write_meta(self):
        with open(os.path.join(self.dir.name, "c1.json"), "w") as f:
            json.dump(self.meta, f)

    def tearDown(self):
        self.dir.cleanup()

    def plan(self, spec="1-3,0x0a000001", knobs=None, ports=None):
        cfg = dta_bfrt.load_config(self.cfg)
        cols = dta_bfrt.load_collectors(cfg, self.dir.name)
        return dta_bfrt.plan(cfg, cols, ports or {"c1": 136}, knobs=knobs,
                             sketch_switches=dta_bfrt.parse_sketch_switches(spec))

    def test_switch_specs(self):
        p = dta_bfrt.parse_sketch_switches
        self.assertEqual(p("1-3,200, 2"), {None: [1, 2, 3, 200]})
        self.assertEqual(p("7:1-2;9:10.0.0.1-10.0.0.2,0x10"),
                         {7: [1, 2], 9: [0x0A000001, 0x0A000002, 16]})
        self.assertEqual(p(""), {})
        for bad in ("x", "5-1", "7:1;7:2", "1-99999999", "4294967296", "a:1"):
            with self.assertRaises(dta_bfrt.ConfigError, msg=bad):
                p(bad)

    def test_tables_and_registers(self):
        p = self.plan("7:1-3;9:1-4;11:100-102")
        T = {n: v[0] for n, v in dta_bfrt.SK_NAMES.items()}
        sk = p["tables"][T["tbl_sketch"]]
        self.assertEqual([(k["sketch_id"], k["rows"], k["cell_width"], k["merge_op"]) for _, k, _ in sk],
                         [(7, 4, 4, 0), (9, 1, 1, 1), (11, 4, 4, 2)])
        self.assertEqual([(v["sk"], v["columns_m1"], v["cell_base"], v["expected"], v["wide"])
                          for _, _, v in sk],
                         [(0, 1023, 0, 3, 1), (1, 255, 1024, 3, 0), (2, 63, 1280, 3, 1)])
        sw = [(k["sk"], k["switch_id"], v["sw"]) for _, k, v in p["tables"][T["tbl_sk_switch"]]]
        self.assertEqual(sw, [(0, 1, 0), (0, 2, 1), (0, 3, 2), (1, 1, 3), (1, 2, 4), (1, 3, 5),
                              (1, 4, 6), (2, 100, 7), (2, 101, 8), (2, 102, 9)])
        slot = {(k["sk"], k["epoch_lo4"]): v["slot_off"] for _, k, v in p["tables"][T["tbl_sk_slot"]]}
        self.assertEqual(len(slot), 48)
        self.assertEqual([slot[(0, e)] for e in (0, 1, 4, 7, 15)],
                         [64, 64 + 1024 * 32, 64, 64 + 3 * 1024 * 32, 64 + 3 * 1024 * 32])
        self.assertEqual([slot[(1, e)] for e in (0, 1, 2, 3)], [64, 64 + 256 * 20, 64, 64 + 256 * 20])
        self.assertEqual(slot[(2, 13)], 64 + 13 * 64 * 32)
        qp = [v for _, _, v in p["tables"][T["tbl_sk_qp"]]]
        for v, st in zip(qp, SK_META["stores"]):
            self.assertEqual((v["remote_qpn"], v["rkey"], ControlPlaneTest.base(v)),
                             (st["qps"][0]["qpn"], st["rkey"], st["addr"]))
            self.assertEqual((v["src_ip"], v["dst_ip"], v["src_port"], v["nack_src_port"]),
                             (ip("10.0.0.101"), ip("10.0.0.51"), 4791, 4791))
            self.assertEqual((v["port"], v["ack_every_m1"], v["dst_mac"]), (136, 15, 0x020000000051))
        resp = [(k["src"], k["dest_qp"], v["sk"]) for _, k, v in p["tables"][T["tbl_sk_resp"]]]
        self.assertEqual(resp, [(ip("10.0.0.51"), 0x200 + i, i) for i in range(3)])
        regs = p["registers"]
        self.assertEqual(regs[T["sk_psn_reg"]], [(0, 0), (1, 0x10 << 8), (2, 0x123 << 8)])
        self.assertEqual(regs[T["sk_nak_reg"]], [(0, 0xFFFFFF << 8 | 0x80), (1, 0xF << 8 | 0x80), (2, 0x122 << 8 | 0x80)])
        self.assertEqual(regs[T["sk_ackreq_reg"]], [(i, 0) for i in range(3)])
        self.assertEqual(regs[T["sk_epoch_reg"]], [(i, 0) for i in range(3)])
        # Pipe 0 keeps its four stores, QPs 0..3; the sketches have none there.
        self.assertEqual(len(p["tables"]["Egress.tbl_qp"]), 4)
        self.assertEqual(len(p["registers"]["Egress.psn_reg"]), 4)

    def test_apply_writes_pipe_1_names(self):
        log = []
        dta_bfrt.run(Fake(log), self.cfg, {"c1": 136}, sketch_switches="1-3")
        paths = {path for path, _, _ in log}
        self.assertIn("dta_translator.icrc_pipe.IcrcIngress.sketch.tbl_sketch.clear", paths)
        self.assertIn("dta_translator.icrc_pipe.IcrcIngress.sketch.tbl_sketch.add_with_set_sketch", paths)
        self.assertIn("dta_translator.icrc_pipe.IcrcIngress.sketch.tbl_sk_qp.add_with_set_sk_qp", paths)
        self.assertIn("dta_translator.icrc_pipe.IcrcIngress.sketch.sk_psn_reg.mod", paths)
        self.assertIn("dta_translator.pipe.Egress.psn_reg.mod", paths)
        # Without sketch stores nothing of pipe 1's Sketch-Merge is touched (older programs
        # and -DDTA_NO_SKETCH builds have no such tables).
        log = []
        self.meta["stores"] = self.meta["stores"][:4]
        self.write_meta()
        dta_bfrt.run(Fake(log), self.cfg, {"c1": 136})
        self.assertTrue(log)
        self.assertFalse(any("tbl_sk" in p or "IcrcIngress.sk_" in p for p, _, _ in log))

    def test_refusals(self):
        def refused(pattern, **kw):
            with self.assertRaisesRegex(dta_bfrt.ConfigError, pattern):
                self.plan(**kw)
        refused("one-pipe build", knobs={"icrc": False}, ports={"c1": 8})
        refused("DTA_NO_SKETCH", knobs={"sketch": False})
        refused("no switches given", spec="")
        refused("no switches given", spec="7:1-3")
        refused("fewer than sketch.expected_switches", spec="1-2")
        refused("no Sketch-Merge store serves sketch ID 8", spec="1-3;8:1-3")
        refused("DTA_SK_SWITCHES", spec="1-2000")
        refused("DTA_SK_ROWS = 2", knobs={"sk_rows": 2})
        refused("DTA_SKETCHES = 2", knobs={"sketches": 2})
        refused("do not fit", knobs={"sk_cells": 1100})
        for field, value, pattern in (("batch", 4, "batch 4"), ("epochs", 3, "3 epoch slots"),
                                      ("rows", 2, "2 rows of 4-byte cells")):
            self.meta["stores"][4][field] = value
            self.write_meta()
            refused(pattern)
            self.meta["stores"][4][field] = SK_META["stores"][0][field]
        self.meta["stores"][6]["sketch_id"] = 7
        self.write_meta()
        refused("same sketch ID")
        # One row of 4-byte sum cells (a one-row Count-Min) is served, with any merge op.
        self.meta["stores"][6]["sketch_id"] = 11
        self.meta["stores"][5].update(sketch="count-min", cell_width=4)
        self.write_meta()
        (_, key, par), = [e for e in self.plan()["tables"][dta_bfrt.SK_NAMES["tbl_sketch"][0]]
                          if e[1]["sketch_id"] == 9]
        self.assertEqual((key["cell_width"], key["merge_op"], par["wide"]), (4, 0, 0))
        # One row of 1-byte sum cells is not: the program merges 1-byte cells as 32-bit ones.
        self.meta["stores"][5].update(sketch="count-min", cell_width=1)
        self.write_meta()
        refused("1-byte sum would not saturate")

    def test_epoch_rules_the_program_cannot_honour_are_refused(self):
        def refused_with(sketch, pattern):
            with open(self.cfg, "w") as f:
                f.write(CONFIG + "\n[sketch]\n" + sketch)
            with self.assertRaisesRegex(dta_bfrt.ConfigError, pattern):
                self.plan()
        # No quorum in the program: the default (a majority of 3) and any quorum above 1.
        refused_with("expected_switches = 3\n", r"majority of expected_switches = 3, i.e. 2")
        refused_with("expected_switches = 3\nepoch_quorum = 2\n", "epoch_quorum = 2")
        refused_with("expected_switches = 3\nepoch_quorum = 1\n[[sketch.switch]]\nid = 1\n"
                     "address = \"10.0.0.1\"\n", r"\[\[sketch.switch\]\]")
        # One expected switch: the default quorum is 1.
        with open(self.cfg, "w") as f:
            f.write(CONFIG + "\n[sketch]\nexpected_switches = 1\n")
        self.assertTrue(self.plan()["tables"])

    def test_command_line_and_corpus_flags(self):
        import io
        import contextlib
        import corpus_setup
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = dta_bfrt.main(["--config", self.cfg, "--ports", "c1=136", "--print",
                                "--sketch-switches", "7:1-3;9:1-3;11:1-3"])
        self.assertEqual(rc, 0)
        p = json.loads(out.getvalue())
        self.assertEqual(len(p["tables"][dta_bfrt.SK_NAMES["tbl_sk_switch"][0]]), 9)
        # Wrong set-ups end with one line on stderr and exit status 2, not a traceback.
        for extra in (["--no-sketch", "--sketch-switches", "1-3"],
                      ["--defines=-DDTA_BOGUS=1"], ["--defines=-DDTA_MAX_N=x"],
                      ["--defines=-DDTA_NO_ICRC", "--sketch-switches", "1-3"]):
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                rc = dta_bfrt.main(["--config", self.cfg, "--ports", "c1=136", "--print"] + extra)
            self.assertEqual(rc, 2, extra)
            self.assertTrue(err.getvalue().startswith("dta_bfrt: "), err.getvalue())
        k = dta_bfrt.knobs_from_defines("-DDTA_NO_ICRC -DDTA_SK_CELL_BITS=16 -DDTA_SKETCHES=4")
        self.assertEqual((k["icrc"], k["sk_cells"], k["sketches"]), (False, 65536, 4))
        k = corpus_setup.knobs_from_defines("-DDTA_MAX_N=4 -DDTA_SK_ROWS=2 -DDTA_NO_SKETCH")
        self.assertEqual((k["sk_rows"], k["sketch"]), (2, False))
        self.assertEqual(corpus_setup.sketch_switches(
            {"sketch": {"switches": [{"sketch_id": 7, "switches": [1, 2]},
                                     {"sketch_id": 9, "switches": []}]}}), "7:1,2")


class CorpusSetupTest(unittest.TestCase):
    """Every corpus case the Tofino program supports yields a plan that matches its case.json."""

    ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "corpus")

    def test_every_supported_corpus_case_plans(self):
        import glob
        import corpus_setup
        cases = sorted(glob.glob(os.path.join(self.ROOT, "*", "case.json")))
        self.assertGreater(len(cases), 30)
        planned = sketched = with_responses = 0
        with tempfile.TemporaryDirectory() as out:
            for path in cases:
                case, cfg_path = corpus_setup.setup(os.path.dirname(path), out)
                if case.get("p4_unsupported"):
                    continue
                cfg = dta_bfrt.load_config(cfg_path)
                knobs = corpus_setup.knobs_from_defines(case["p4_defines"])
                switches = dta_bfrt.parse_sketch_switches(corpus_setup.sketch_switches(case))
                p = dta_bfrt.plan(cfg, dta_bfrt.load_collectors(cfg, out), {"corpus": 136},
                                  knobs=knobs, sketch_switches=switches)
                # Pipe 0 serves the other stores, pipe 1 the Sketch-Merge ones.
                pairs = [(q, m) for q, m in zip(case["qps"], case["metas"]) if m["kind"] != "sketch"]
                qps = p["tables"]["Egress.tbl_qp"]
                self.assertEqual(len(qps), len(pairs), case["name"])
                for (_, key, params), (q, m) in zip(qps, pairs):
                    base = (params["base_hi"] << 32) | params["base_lo"]
                    self.assertEqual((params["remote_qpn"], params["rkey"], base),
                                     (q["remote_qpn"], q["rkey"], q["addr"]), case["name"])
                    self.assertEqual(params["ack_every_m1"], case["ack_every"] - 1)
                self.assertEqual([v >> 8 for _, v in p["registers"]["Egress.psn_reg"]],
                                 [q["psn"] for q, _ in pairs], case["name"])
                # Collector responses reach the QP they answer; nak_reg starts at ACK(psn - 1).
                for (after, syn, psn, fresh, qp), r in zip(corpus_setup.response_plan(case, p),
                                                           case.get("responses", [])):
                    self.assertEqual(qp, r["store"], case["name"])
                    with_responses += 1
                self.assertEqual([v for _, v in p["registers"]["Egress.nak_reg"]],
                                 [(((q["psn"] - 1) & 0xFFFFFF) << 8) | 0x80 for q, _ in pairs])
                # nak_accept as dta_translator.p4 computes it (ACK(p) = p << 8 | 0x80, NAK(q) =
                # q << 8 | 0x01, fresh when the signed 32-bit difference is positive) takes
                # exactly the NAKs the corpus model calls fresh.
                nak_reg = dict(p["registers"]["Egress.nak_reg"])
                for r in case.get("responses", []):
                    point = (r["psn"] << 8) | (0x80 if r["syndrome"] == "ack" else 0x01)
                    d = (point - nak_reg[r["store"]]) & 0xFFFFFFFF
                    fresh = 0 < d < 0x80000000
                    if fresh:
                        nak_reg[r["store"]] = point
                    if r["syndrome"] != "ack":
                        self.assertEqual(fresh, r["fresh"], (case["name"], r))
                if case.get("sketch"):
                    self.check_sketch_case(case, p, os.path.dirname(path))
                    sketched += 1
                planned += 1
        self.assertGreaterEqual(planned, 30)
        self.assertGreaterEqual(sketched, 7)
        self.assertGreater(with_responses, 0)

    @staticmethod
    def read_pcap(path):
        import struct
        with open(path, "rb") as f:
            data = f.read()
        frames, at = [], 24
        while at < len(data):
            n = struct.unpack_from("<I", data, at + 8)[0]
            frames.append(data[at + 16:at + 16 + n])
            at += 16 + n
        return frames

    def check_sketch_case(self, case, p, case_dir):
        """A supported Sketch-Merge case's plan against its case.json and, frame by frame,
        against its expected.pcap: every WRITE lands where tbl_sk_slot puts its epoch's records,
        through the sketch's QP, and every NACK leaves from the address tbl_sk_qp gives."""
        name = case["name"]
        T = {n: v[0] for n, v in dta_bfrt.SK_NAMES.items()}
        sk_metas = [(q, m) for q, m in zip(case["qps"], case["metas"]) if m["kind"] == "sketch"]
        sketch = p["tables"][T["tbl_sketch"]]
        self.assertEqual(len(sketch), len(sk_metas), name)
        by_qpn, slot = {}, {}
        for sk, ((_, key, par), (q, m)) in enumerate(zip(sketch, sk_metas)):
            self.assertEqual((key["sketch_id"], key["rows"], key["cell_width"]),
                             (m["sketch_id"], m["rows"], m["cell_width"]), name)
            self.assertEqual(key["merge_op"], dta_bfrt.SK_MERGE_OP[m["sketch"]])
            self.assertEqual((par["sk"], par["columns_m1"], par["expected"]),
                             (sk, m["columns"] - 1, case["sketch"]["expected_switches"]), name)
            stride = 16 + 4 * m["rows"] if par["wide"] else 20  # head, cells, tail
            by_qpn[q["remote_qpn"]] = (sk, q, m, stride)
        # Cells of the sketches do not overlap.
        spans = sorted((e[2]["cell_base"], e[2]["cell_base"] + e[2]["columns_m1"] + 1)
                       for e in sketch)
        self.assertTrue(all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), name)
        installed = {}
        for _, key, par in p["tables"][T["tbl_sk_switch"]]:
            installed.setdefault(key["sk"], []).append(key["switch_id"])
        sws = [par["sw"] for _, _, par in p["tables"][T["tbl_sk_switch"]]]
        self.assertEqual(len(set(sws)), len(sws))
        for e in case["sketch"]["switches"]:
            sk = next(par["sk"] for _, key, par in sketch if key["sketch_id"] == e["sketch_id"])
            self.assertEqual(sorted(installed[sk]), e["switches"], name)
        for _, key, par in p["tables"][T["tbl_sk_slot"]]:
            slot[(key["sk"], key["epoch_lo4"])] = par["slot_off"]
        qp = {key["sk"]: par for _, key, par in p["tables"][T["tbl_sk_qp"]]}
        psn = dict(p["registers"][T["sk_psn_reg"]])
        for sk, q, m, _ in by_qpn.values():
            par = qp[sk]
            base = (par["base_hi"] << 32) | par["base_lo"]
            self.assertEqual((par["remote_qpn"], par["rkey"], base, par["port"]),
                             (q["remote_qpn"], q["rkey"], q["addr"], 136), name)
            self.assertEqual(psn[sk] >> 8, q["psn"])
            self.assertEqual(dict(p["registers"][T["sk_nak_reg"]])[sk],
                             (((q["psn"] - 1) & 0xFFFFFF) << 8) | 0x80)
        resp = {(k["src"], k["dest_qp"]): v["sk"] for _, k, v in p["tables"][T["tbl_sk_resp"]]}
        for sk, q, _, _ in by_qpn.values():
            self.assertEqual(resp[(ip("10.0.0.51"), q["local_qpn"])], sk)
        frames = self.read_pcap(os.path.join(case_dir, "expected.pcap"))
        self.assertEqual(len(frames), case["frames"])
        writes = nacks = 0
        for f in frames[:case["frames_before_flush"]]:
            udp_dst = int.from_bytes(f[36:38], "big")
            if udp_dst == 40044:
                par = qp[0]
                self.assertEqual(int.from_bytes(f[26:30], "big"), par["src_ip"], name)
                self.assertEqual(int.from_bytes(f[34:36], "big"), par["nack_src_port"], name)
                self.assertEqual(int.from_bytes(f[6:12], "big"), par["src_mac"], name)
                nacks += 1
                continue
            sk, q, m, stride = by_qpn[int.from_bytes(f[47:50], "big")]
            va = int.from_bytes(f[54:62], "big")
            length = int.from_bytes(f[66:70], "big")
            epoch = int.from_bytes(f[70:74], "little")
            off = va - q["addr"] - slot[(sk, epoch & 15)]
            self.assertEqual(length, stride, name)
            self.assertEqual(off % stride, 0, name)
            self.assertGreaterEqual(off, 0, name)
            self.assertLess(off // stride, m["columns"], name)
            writes += 1
        self.assertGreater(writes, 0, name)
        if name == "sketch_gap_nack":
            self.assertEqual(nacks, 2)


class ClusterMemberTest(unittest.TestCase):
    """A translator TOML with `cluster = FILE` (dta_proto::cluster): collectors and routing come
    from the cluster file's current epoch."""

    CLUSTER = """
[cluster]
name = "t"
epoch = 1
[stores]
keywrite = "kw"
append = "ap"
[[collector]]
name = "c1"
metadata = "c1.json"
[[collector]]
name = "c2"
metadata = "c2.json"
[[epoch]]
number = 1
keys = [KEYS]
lists = [{ collector = "c1", first = 10, count = 3 }, { collector = "c2", first = 13, count = 3 }]
"""

    def setUp(self):
        import copy
        self.dir = tempfile.TemporaryDirectory()
        d = self.dir.name
        with open(os.path.join(d, "translator.toml"), "w") as f:
            f.write('cluster = "cluster.toml"\n[translator]\nroce = "10.0.0.101:4791"\n'
                    'listen = "10.0.0.101:40040"\n')
        c1 = copy.deepcopy(META)
        c1["stores"] = [st for st in c1["stores"] if st["name"] in ("kw", "ap")]
        c2 = copy.deepcopy(c1)
        c2["roce"] = "10.0.0.52:4791"
        c2["stores"][1]["first_list"] = 13
        for i, st in enumerate(c2["stores"]):
            st["rkey"] += 0x100
            st["qps"][0]["peer_qpn"] += 0x10 + i
        for name, meta in (("c1.json", c1), ("c2.json", c2)):
            with open(os.path.join(d, name), "w") as f:
                json.dump(meta, f)

    def tearDown(self):
        self.dir.cleanup()

    def plan(self, keys='"c2"'):
        with open(os.path.join(self.dir.name, "cluster.toml"), "w") as f:
            f.write(self.CLUSTER.replace("KEYS", keys))
        cfg = dta_bfrt.load_config(os.path.join(self.dir.name, "translator.toml"))
        cols = dta_bfrt.load_collectors(cfg, self.dir.name)
        return dta_bfrt.plan(cfg, cols, {"c1": 136, "c2": 140})

    def test_routes_come_from_the_cluster_epoch(self):
        p = self.plan()
        qps = p["tables"]["Egress.tbl_qp"]
        kv = p["tables"]["Ingress.tbl_kv_route"]
        self.assertTrue(kv)
        # Every Key-Write route goes to c2's store (the epoch's only key owner).
        owner = {e[2]["qp"] for e in kv}
        self.assertEqual(len(owner), 1)
        self.assertEqual(qps[owner.pop()][2]["dst_ip"], ip("10.0.0.52"))
        # Lists 10..13 to c1, 13..16 to c2.
        ap = {e[1]["list_id"]: qps[e[2]["qp"]][2]["dst_ip"] for e in p["tables"]["Ingress.tbl_ap_list"]}
        self.assertEqual(ap, {**{l: ip("10.0.0.51") for l in range(10, 13)},
                              **{l: ip("10.0.0.52") for l in range(13, 16)}})
        # Both collectors get their pipe-1 route.
        self.assertEqual(sorted(e[2]["port"] for e in p["tables"]["Ingress.tbl_forward"]), [136, 140])

    def test_key_hash_partitions_and_wrong_ranges_are_refused(self):
        with self.assertRaisesRegex(dta_bfrt.ConfigError, "key hash"):
            self.plan('"c1", "c2"')
        self.CLUSTER = self.CLUSTER.replace("first = 13, count = 3", "first = 13, count = 2")
        with self.assertRaisesRegex(dta_bfrt.ConfigError, "gives lists 13..15 to c2"):
            self.plan()


class SketchReporterPlanTest(unittest.TestCase):
    """dta_sketch_reporter.p4's entries (plan_sketch_reporter)."""

    SW = {"switch_id": 0x0A000001, "cm_sketch_id": 7, "hll_sketch_id": 8,
          "report_ip": "10.0.0.1", "report_mac": "02:00:00:00:00:0a",
          "translator_ip": "10.0.0.101", "translator_mac": "02:00:00:00:00:01",
          "port": 12, "trigger_ports": [68, 192]}

    def test_entries(self):
        wall = (3 << 48) + (5 << 30) + 123
        p = dta_bfrt.plan_sketch_reporter(self.SW, wall)
        act, sw = p["defaults"]["Ingress.tbl_switch"]
        self.assertEqual(act, "set_switch")
        self.assertEqual((sw["switch_id"], sw["cm_id"], sw["hll_id"]), (0x0A000001, 7, 8))
        # epoch = (timestamp >> 30) + base, the timestamp being wall mod 2^48.
        self.assertEqual(((wall % (1 << 48)) >> 30) + sw["epoch_base"], wall >> 30)
        self.assertEqual(sw["epoch_base_minus_1"], sw["epoch_base"] - 1)
        _, dst = p["defaults"]["Ingress.tbl_report_dst"]
        self.assertEqual((dst["port"], dst["src_ip"], dst["dst_ip"], dst["udp_src_port"]),
                         (12, ip("10.0.0.1"), ip("10.0.0.101"), 0xC0DE))
        trig = p["tables"]["Ingress.tbl_trigger"]
        self.assertEqual(len(trig), 4)
        self.assertIn(("export", {"ingress_port": 68, "sketch": 1}, {"mode": 3}), trig)
        self.assertIn(("export", {"ingress_port": 192, "sketch": 0}, {"mode": 2}), trig)
        nack = p["tables"]["Ingress.tbl_nack"]
        self.assertEqual(nack, [
            ("nack", {"dst_addr": ip("10.0.0.1"), "switch_id": 0x0A000001, "sketch_id": 7,
                      "udp_len": 24}, {"mode": 4}),
            ("nack", {"dst_addr": ip("10.0.0.1"), "switch_id": 0x0A000001, "sketch_id": 8,
                      "udp_len": 24}, {"mode": 5})])
        cm, hll = p["stores"]
        self.assertEqual((cm["rows"], cm["cell_width"], cm["columns"], cm["hash"]),
                         (2, 4, 4096, "tofino"))
        self.assertEqual((hll["rows"], hll["cell_width"], hll["columns"], hll["merge_op"]),
                         (1, 1, 1024, 1))
        self.assertEqual(p["triggers_per_epoch"], 4096 + 1024)

    def test_epoch_base_wraps_to_u32(self):
        self.assertEqual(dta_bfrt.sketch_reporter_epoch_base(0), 0)
        self.assertEqual(dta_bfrt.sketch_reporter_epoch_base(1 << 48), 1 << 18)
        self.assertEqual(dta_bfrt.sketch_reporter_epoch_base(1 << 48, 16), 0)

    def test_refusals(self):
        bad = [({"cm_sketch_id": 8}, None), ({"trigger_ports": []}, None),
               ({"switch_id": 1 << 32}, None), ({}, {"cm_rows": 5}),
               ({}, {"cm_cols": 3000}), ({}, {"hll_p": 17}), ({}, {"epoch_shift": 8})]
        for over, knobs in bad:
            sw = dict(self.SW, **over)
            with self.assertRaises(dta_bfrt.ConfigError, msg=str((over, knobs))):
                dta_bfrt.plan_sketch_reporter(sw, 0, knobs)
        p = dta_bfrt.plan_sketch_reporter(self.SW, 0, {"cm_rows": 1, "cm_cols": 65536,
                                                       "hll_p": 16})
        self.assertEqual(p["triggers_per_epoch"], 131072)


class DartReporterPlanTest(unittest.TestCase):
    """The DART reporter's entries (dta_reporter.p4 -DDTA_DART; plan_dart_reporter, run_dart):
    one QP per collector from the same inputs as the translator (metadata, RDMA_CM
    connections), the bucket table, the PSN registers, the N-copy multicast groups and the
    mirror sessions, as written through bfrt."""

    CONFIG = CONFIG.replace('[[collector]]\nname = "c1"\nmetadata = "c1.json"\n',
                            '[[collector]]\nname = "c1"\nmetadata = "c1.json"\n\n'
                            '[[collector]]\nname = "c2"\nmetadata = "c2.json"\n')
    META2 = {
        "roce": "10.0.0.52:4791", "mac": "02:00:00:00:00:52", "verify_icrc": False,
        "stores": [{"name": "kw", "addr": 0x00000000FFFFF000, "len": 8 << 12, "rkey": 0x9999,
                    "qps": [{"qpn": 0x21, "psn": 0x10, "peer_qpn": 0x200}], "kind": "keywrite",
                    "slots": 1 << 12, "slot_size": 8, "hash": "independent", "redundancy": 3}],
    }

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.cfg = os.path.join(self.dir.name, "translator.toml")
        with open(self.cfg, "w") as f:
            f.write(self.CONFIG)
        with open(os.path.join(self.dir.name, "c1.json"), "w") as f:
            json.dump(META, f)
        with open(os.path.join(self.dir.name, "c2.json"), "w") as f:
            json.dump(self.META2, f)
        # c1's Key-Write QP connected through RDMA_CM on the switch's behalf.
        self.conn = os.path.join(self.dir.name, "conn.json")
        with open(self.conn, "w") as f:
            json.dump({"connections": [
                {"store": "kw", "collector": "c1", "qpn": 0x300, "remote_qpn": 0x31,
                 "psn": 0xFFFFFF, "rkey": 0x7777, "addr": 0x7f0000100000,
                 "translator_roce": "10.0.0.9:50000"}]}, f)

    def tearDown(self):
        self.dir.cleanup()

    def run_dart(self, **kw):
        log = []
        p = dta_bfrt.run_dart(Fake(log), self.cfg, {"c1": 8, "c2": 12}, self.conn, n=2, **kw)
        return log, p

    @staticmethod
    def calls(log, suffix):
        return [kw for path, _, kw in log if path.endswith(suffix)]

    def test_entries_written(self):
        log, _ = self.run_dart()
        pre = "dta_reporter.pipe."
        self.assertTrue(all(path.startswith((pre, "pre.", "mirror.", "complete"))
                            for path, _, _ in log), log[:3])
        qps = self.calls(log, "Egress.dart_write.tbl_dart_qp.add_with_set_dart_qp")
        self.assertEqual(len(qps), 2)
        c1, c2 = qps
        # c1: the RDMA_CM connection wins over the static QP (QPN, R_Key, address, source).
        self.assertEqual((c1["qp"], c1["qpn"], c1["r_key"], c1["src_ip"], c1["src_port"]),
                         (0, 0x31, 0x7777, ip("10.0.0.9"), 50000))
        self.assertEqual(((c1["hi"] << 32) | c1["lo"], c1["hi1"]), (0x7f0000100000, 0x7f01))
        self.assertEqual((c1["dst_ip"], c1["dst_mac"], c1["mask"]),
                         (ip("10.0.0.51"), 0x020000000051, (1 << 16) - 1))
        # c2: static metadata QP, the switch's source from [translator] roce.
        self.assertEqual((c2["qp"], c2["qpn"], c2["r_key"], c2["src_ip"], c2["src_port"]),
                         (1, 0x21, 0x9999, ip("10.0.0.101"), 4791))
        self.assertEqual((c2["dst_ip"], c2["mask"], c2["src_mac"]),
                         (ip("10.0.0.52"), (1 << 12) - 1, 0x020000000001))
        # A region crossing 4 GiB: slot offsets from 0x1000 on carry into the high half.
        self.assertEqual((c2["hi"], c2["lo"], c2["hi1"], c2["carry"]), (0, 0xFFFFF000, 1, 0x1000))
        # PSN registers hold PSN << 8.
        psn = self.calls(log, "Egress.dart_write.dart_psn_reg.mod")
        self.assertEqual(psn, [{"REGISTER_INDEX": 0, "f1": 0xFFFFFF00},
                               {"REGISTER_INDEX": 1, "f1": 0x1000}])
        # 256 buckets, round robin over the two collectors, each with its own mirror session.
        b = self.calls(log, "Ingress.dart_collector.tbl_dart_collector.add_with_dart_collector")
        self.assertEqual(len(b), 256)
        for e in b:
            self.assertEqual((e["qp"], e["session"]), (e["bucket"] % 2, 1 + e["bucket"] % 2))
        # N copies per collector: c1 records no redundancy (n = 2), c2 records 3.
        nodes = self.calls(log, "pre.node.add")
        self.assertEqual([(x["MULTICAST_RID"], x["DEV_PORT"]) for x in nodes],
                         [(0, [8]), (1, [8]), (0, [12]), (1, [12]), (2, [12])])
        groups = self.calls(log, "pre.mgid.add")
        self.assertEqual([(g["MGID"], g["MULTICAST_NODE_ID"]) for g in groups],
                         [(1, [1, 2]), (2, [3, 4, 5])])
        mirror = self.calls(log, "mirror.cfg.add_with_normal")
        self.assertEqual([(m["sid"], m["mcast_grp_a"], m["mcast_grp_a_valid"], m["direction"])
                          for m in mirror], [(1, 1, True, "INGRESS"), (2, 2, True, "INGRESS")])
        # Answers to both source addresses are dropped.
        resp = self.calls(log, "Ingress.dart_response.tbl_dart_resp.add_with_dart_response")
        self.assertEqual(resp, [{"dst": ip("10.0.0.9"), "dst_port": 50000},
                                {"dst": ip("10.0.0.101"), "dst_port": 4791}])

    def test_knobs_and_refusals(self):
        k = dta_bfrt.dart_knobs_from_defines("-DDTA_DART -DDTA_MAX_N=8 -DDTA_NO_ICRC "
                                             "-DDTA_HASH_REFERENCE -DDTA_DART_QPS=4")
        self.assertEqual(k, {"max_n": 8, "qps": 4, "hash": "reference", "icrc": False})
        for bad in ("", "-DDTA_DART -DDTA_REPORT_EXTENDED", "-DDTA_DART -DDTA_MAX_N=x"):
            with self.assertRaises(dta_bfrt.ConfigError, msg=bad):
                dta_bfrt.dart_knobs_from_defines(bad)
        refused = [
            {"knobs": {"icrc": False}},          # c1 verifies the ICRC
            {"knobs": {"hash": "reference"}},     # the stores are independent
            {"knobs": {"qps": 1}},                # two collectors
            {"knobs": {"max_n": 2}},              # c2 is written with N = 3
            {"n": None},                          # c1 records no N
            {"store": "nope"},
        ]
        cfg = dta_bfrt.load_config(self.cfg)
        cols = dta_bfrt.load_collectors(cfg, self.dir.name)
        for over in refused:
            args = dict({"knobs": None, "n": 2}, **over)
            with self.assertRaises(dta_bfrt.ConfigError, msg=str(over)):
                dta_bfrt.plan_dart_reporter(cfg, cols, {"c1": 8, "c2": 12}, None, **args)
        with self.assertRaises(dta_bfrt.ConfigError):   # no dev port for c2
            dta_bfrt.plan_dart_reporter(cfg, cols, {"c1": 8}, None, n=2)
        meta = json.loads(json.dumps(self.META2))
        meta["stores"][0]["slot_size"] = 16
        with self.assertRaises(dta_bfrt.ConfigError):   # 8-byte slots only
            dta_bfrt.plan_dart_reporter(cfg, [("c2", meta)], {"c2": 12}, None)

    def test_cli_prints_the_plan(self):
        import contextlib
        import io
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = dta_bfrt.main(["--config", self.cfg, "--ports", "c1=8,c2=12", "--dart",
                                "--dart-n", "2", "--defines", "-DDTA_DART -DDTA_MAX_N=8"])
        self.assertEqual(rc, 0)
        p = json.loads(out.getvalue())
        self.assertEqual(len(p["tables"]["Egress.dart_write.tbl_dart_qp"]), 2)
        self.assertEqual(p["mirror"][1][1]["mcast_grp_a"], 2)


if __name__ == "__main__":
    unittest.main()


class StrictBfrtTest(unittest.TestCase):
    """Every plan written through strict_bfrt.StrictBfrt: the tables, actions, keyword names,
    field widths and sizes of the compiled programs (bf-rt.json reduced by bfrt_schema.py into
    p4/control/bfrt/, or every file of DTA_BFRT_DIR), the driver's fixed tables, and a second
    run over the first (a re-run on a live switch)."""

    HERE = os.path.dirname(os.path.abspath(__file__))

    @classmethod
    def schemas(cls):
        import glob
        files = sorted(glob.glob(os.path.join(cls.HERE, "bfrt", "*.json")))
        extra = os.environ.get("DTA_BFRT_DIR")
        if extra:
            files += sorted(glob.glob(os.path.join(extra, "*.json")))
        out = []
        for f in files:
            with open(f) as fh:
                out.append((os.path.basename(f), json.load(fh)))
        return out

    def apply_twice(self, schema, p, program, what):
        import strict_bfrt
        sw = strict_bfrt.StrictBfrt(schema)
        for _ in range(2):
            try:
                dta_bfrt.apply(p, sw, program)
            except (strict_bfrt.BfrtError, TypeError, AttributeError) as e:
                self.fail(f"{what}: {e}")
        for name, entries in p["tables"].items():
            full = name if name.split(".")[0] in dta_bfrt.PIPES else "pipe." + name
            if name not in dta_bfrt.SHARED_TABLES:
                self.assertEqual(len(sw.tables[full].entries), len(entries), (what, name))
        for name, cells in p["registers"].items():
            full = name if name.split(".")[0] in dta_bfrt.PIPES else "pipe." + name
            got = {k[0]: list(v[1].values())[0] for k, v in sw.tables[full].entries.items()}
            self.assertEqual(got, dict(cells), (what, name))
        self.assertEqual(len(sw.pre.node.entries), len(p["mcast"]["nodes"]), what)
        self.assertEqual(len(sw.pre.mgid.entries), len(p["mcast"]["groups"]), what)
        return sw

    def test_translator_plans_fit_the_compiled_program(self):
        import corpus_setup
        import glob
        schemas = [(f, s) for f, s in self.schemas() if s["program"] == dta_bfrt.PROGRAM]
        if not schemas:
            self.skipTest("no reduced bf-rt.json of dta_translator under p4/control/bfrt/")
        cases = sorted(glob.glob(os.path.join(CorpusSetupTest.ROOT, "*", "case.json")))
        checked = 0
        with tempfile.TemporaryDirectory() as out:
            for fname, schema in schemas:
                knobs = dta_bfrt.knobs_from_defines(schema["defines"])
                for path in cases:
                    with open(path) as f:
                        case = json.load(f)
                    if case.get("p4_unsupported"):
                        continue
                    if corpus_setup.knobs_from_defines(case["p4_defines"]) != knobs:
                        continue
                    case, cfg_path = corpus_setup.setup(os.path.dirname(path), out)
                    cfg = dta_bfrt.load_config(cfg_path)
                    port = 136 if knobs["icrc"] else 8
                    p = dta_bfrt.plan(cfg, dta_bfrt.load_collectors(cfg, out), {"corpus": port},
                                      knobs=knobs, sketch_switches=dta_bfrt.parse_sketch_switches(
                                          corpus_setup.sketch_switches(case)))
                    self.apply_twice(schema, p, dta_bfrt.PROGRAM, f"{fname}: {case['name']}")
                    checked += 1
        self.assertGreater(checked, 0)

    def test_dart_plans_fit_the_compiled_reporter(self):
        schemas = [(f, s) for f, s in self.schemas() if s["program"] == dta_bfrt.DART_PROGRAM
                   and "-DDTA_DART" in s["defines"].split()]
        if not schemas:
            self.skipTest("no reduced bf-rt.json of the DART reporter under p4/control/bfrt/")
        for fname, schema in schemas:
            t = DartReporterPlanTest("test_entries_written")
            t.setUp()
            try:
                knobs = dta_bfrt.dart_knobs_from_defines(schema["defines"])
                cfg = dta_bfrt.load_config(t.cfg)
                cols = dta_bfrt.load_collectors(cfg, t.dir.name)
                conns = dta_bfrt.load_connections(t.conn)
                n = min(2, knobs["max_n"])
                p = dta_bfrt.plan_dart_reporter(cfg, cols, {"c1": 8, "c2": 12}, conns, knobs, n)
                sw = self.apply_twice(schema, p, dta_bfrt.DART_PROGRAM, fname)
                self.assertEqual(len(sw.mirror.cfg.entries), len(p["mirror"]), fname)
            finally:
                t.tearDown()


class TwinCheckTest(unittest.TestCase):
    """twin_check.compare: byte for byte, order kept per flow (destination QP, or the UDP
    destination of a sketch-column NACK), the first differing field named."""

    def frames(self, case):
        import twin_check
        return twin_check.read_pcap(os.path.join(CorpusSetupTest.ROOT, case, "expected.pcap"))

    def test_equal_reordered_across_flows_and_differences_named(self):
        import twin_check
        exp = self.frames("mixed_all_primitives")
        flows = {twin_check.flow_of(f) for f in exp}
        self.assertGreater(len(flows), 2)
        self.assertEqual(twin_check.compare(exp, list(exp)), [])
        # Another interleaving of the flows is the same run.
        by_flow = sorted(range(len(exp)), key=lambda i: (str(twin_check.flow_of(exp[i])), i))
        self.assertEqual(twin_check.compare(exp, [exp[i] for i in by_flow]), [])
        # Two frames of one QP swapped: both differ.
        qp = twin_check.flow_of(exp[0])
        idx = [i for i, f in enumerate(exp) if twin_check.flow_of(f) == qp][:2]
        swapped = list(exp)
        swapped[idx[0]], swapped[idx[1]] = exp[idx[1]], exp[idx[0]]
        self.assertEqual(len(twin_check.compare(exp, swapped)), 2)
        # A wrong ICRC byte, a wrong PSN, a missing and an extra frame.
        bad = bytearray(exp[0])
        bad[-1] ^= 1
        d = twin_check.compare(exp, [bytes(bad)] + exp[1:])
        self.assertEqual([(x["what"], x["field"]) for x in d], [("differs", "ICRC")])
        bad = bytearray(exp[0])
        bad[53] ^= 1
        d = twin_check.compare(exp, [bytes(bad)] + exp[1:])
        self.assertEqual([x["field"] for x in d], ["BTH AckReq/PSN"])
        d = twin_check.compare(exp, exp[:-1])
        self.assertEqual([x["what"] for x in d], ["missing"])
        d = twin_check.compare(exp[:-1], exp)
        self.assertEqual([x["what"] for x in d], ["extra"])

    def test_sketch_nacks_are_their_own_flow_and_pcap_round_trips(self):
        import twin_check
        exp = self.frames("sketch_gap_nack")
        nacks = [f for f in exp if twin_check.flow_of(f)[0] == "udp"]
        self.assertEqual(len(nacks), 2)
        self.assertEqual(twin_check.flow_of(nacks[0]), ("udp", "10.0.0.200", 40044))
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x.pcap")
            twin_check.write_pcap(path, exp)
            self.assertEqual(twin_check.read_pcap(path), exp)


class BfshellLauncherTest(unittest.TestCase):
    """`--bfshell`: bfshell -b runs the file inside bf_switchd, which does not see the caller's
    environment, so the settings travel in the wrapper (the stand-in bfshell drops DTA_* and
    changes directory, as the real one effectively does)."""

    BFSHELL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "standin", "bfshell")
    setUp = ControlPlaneTest.setUp
    tearDown = ControlPlaneTest.tearDown

    def launch(self, *extra):
        import contextlib
        import io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = dta_bfrt.main(["--config", self.cfg, "--ports", "c1=136", *extra,
                                "--bfshell", self.BFSHELL])
        return rc, buf.getvalue()

    def test_settings_reach_the_switch_and_failures_are_seen(self):
        rc, out = self.launch()
        self.assertEqual(rc, 0, out)
        self.assertIn("standin bfshell: ran", out)
        # A plan the program refuses fails before bfshell runs.
        rc, _ = self.launch("--defines=-DDTA_AP_BATCH=16")
        self.assertEqual(rc, 2)
        # Inside the switch: a refusal there (no such table) is a traceback, and a failure.
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"program": dta_bfrt.PROGRAM, "defines": "", "tables": {}}, f)
        os.environ["DTA_STANDIN_SCHEMA"] = f.name
        try:
            rc, out = self.launch()
        finally:
            del os.environ["DTA_STANDIN_SCHEMA"]
            os.unlink(f.name)
        self.assertEqual(rc, 1, out)
        self.assertIn("Traceback", out)

    def test_plain_bfshell_without_settings_stops(self):
        import subprocess
        env = dict(os.environ, DTA_CONFIG=self.cfg, DTA_PORTS="c1=136")
        r = subprocess.run([self.BFSHELL, "-b", os.path.abspath(dta_bfrt.__file__)], env=env,
                           capture_output=True, text=True)
        self.assertIn("DTA_CONFIG is not set", r.stdout + r.stderr)


class BfrtNamesTest(unittest.TestCase):
    """bfrt_schema.param_names: bfrt_python's keyword names (bf-drivers bfrtcli.py)."""

    def test_last_component_lengthened_on_collision(self):
        import bfrt_schema as b
        self.assertEqual(b.param_names(["hdr.ipv4.dst", "md.op"], ["port"]),
                         {"hdr.ipv4.dst": "dst", "md.op": "op", "port": "port"})
        # A key and an action parameter with one last component: the parameter cannot grow,
        # so bfrt_python deepens to its limit and writes every key out whole.
        self.assertEqual(b.param_names(["hdr.ipv4.dst", "md.qp"], ["qp", "port"]),
                         {"hdr.ipv4.dst": "hdr_ipv4_dst", "md.qp": "md_qp", "qp": "qp",
                          "port": "port"})
        # Data names that can grow do, one level at a time, and the keys follow.
        self.assertEqual(b.param_names(["md.a.x"], ["Ctrl.r.x", "y"]),
                         {"md.a.x": "a_x", "Ctrl.r.x": "r_x", "y": "y"})
        # ... so delete() (key only) and add_with_...() name the same key differently.
        self.assertEqual(b.param_names(["hdr.ipv4.dst", "md.qp"]),
                         {"hdr.ipv4.dst": "dst", "md.qp": "qp"})
        self.assertEqual(b.param_names(["$REGISTER_INDEX"], ["Egress.psn_reg.f1"]),
                         {"$REGISTER_INDEX": "REGISTER_INDEX", "Egress.psn_reg.f1": "f1"})
        self.assertEqual(b.param_names(["hdr.sk_b.epoch[3:0]"]), {"hdr.sk_b.epoch[3:0]": "epoch_3_0_"})
        self.assertEqual(b.param_names(["md.in"], ["pass"]), {"md.in": "key_in", "pass": "data_pass"})
        self.assertEqual(b.action_method("Ingress.dart.set_dart_qp"), "add_with_set_dart_qp")

    def test_reduce_keeps_what_the_plan_touches(self):
        import bfrt_schema as b
        bfrt = {"tables": [
            {"name": "pipe.Ingress.tbl_forward", "table_type": "MatchAction_Direct", "size": 1024,
             "key": [{"name": "hdr.ipv4.dst", "match_type": "Exact",
                      "type": {"type": "bytes", "width": 32}}],
             "action_specs": [
                 {"name": "Ingress.forward", "action_scope": "TableAndDefault",
                  "data": [{"name": "port", "type": {"type": "bytes", "width": 9}}]},
                 {"name": "Ingress.no_route", "action_scope": "DefaultOnly", "data": []}]},
            {"name": "pipe.Egress.psn_reg", "table_type": "Register", "size": 256,
             "key": [{"name": "$REGISTER_INDEX", "match_type": "Exact",
                      "type": {"type": "uint32"}}],
             "data": [{"mandatory": False, "singleton": {
                 "name": "Egress.psn_reg.f1", "type": {"type": "bytes", "width": 32}}}]},
            {"name": "$pre.node", "key": [], "data": []}]}
        r = b.reduce(bfrt, "dta_translator", "")
        self.assertEqual(sorted(r["tables"]), ["pipe.Egress.psn_reg", "pipe.Ingress.tbl_forward"])
        fwd = r["tables"]["pipe.Ingress.tbl_forward"]
        self.assertEqual(fwd["actions"], {"Ingress.forward": [["port", 9, False]]})
        self.assertEqual(r["tables"]["pipe.Egress.psn_reg"]["keys"],
                         [["$REGISTER_INDEX", "Exact", 32]])
        import strict_bfrt
        sw = strict_bfrt.StrictBfrt(r)
        t = sw.dta_translator.pipe.Ingress.tbl_forward
        t.add_with_forward(dst=0x0A000033, port=136)
        with self.assertRaises(strict_bfrt.BfrtError):      # exists
            t.add_with_forward(dst=0x0A000033, port=136)
        with self.assertRaises(strict_bfrt.BfrtError):      # 9-bit port
            t.add_with_forward(dst=1, port=512)
        with self.assertRaises(strict_bfrt.BfrtError):      # left out: the switch writes 0
            t.add_with_forward(dst=2)
        with self.assertRaises(TypeError):
            t.add_with_forward(dst_addr=3, port=1)
        with self.assertRaises(AttributeError):             # default-only action
            t.add_with_no_route(dst=4)
        t.delete(dst=0x0A000033)
        with self.assertRaises(strict_bfrt.BfrtError):
            t.delete(dst=0x0A000033)
        reg = sw.dta_translator.pipe.Egress.psn_reg
        reg.mod(REGISTER_INDEX=255, f1=7)
        with self.assertRaises(strict_bfrt.BfrtError):
            reg.mod(REGISTER_INDEX=256, f1=7)
        sw.pre.node.add(MULTICAST_NODE_ID=1, MULTICAST_RID=0, MULTICAST_LAG_ID=[], DEV_PORT=[136])
        with self.assertRaises(strict_bfrt.BfrtError):
            sw.pre.node.add(MULTICAST_NODE_ID=1, MULTICAST_RID=0, MULTICAST_LAG_ID=[],
                            DEV_PORT=[136])
        with self.assertRaises(strict_bfrt.BfrtError):
            sw.pre.mgid.add(MGID=1, MULTICAST_NODE_ID=[2], MULTICAST_NODE_L1_XID_VALID=[False],
                            MULTICAST_NODE_L1_XID=[0])
