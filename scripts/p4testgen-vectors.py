#!/usr/bin/env python3
"""Turn P4Testgen's PTF tests for dta_translator.p4 into the JSON vectors under
tests/corpus/p4testgen/ (p4/README.md, "P4Testgen").

    scripts/p4testgen-vectors.py PTF_FILE OUT_JSON --knobs NAME --defines=-D... \
        --command "p4testgen ..." [--log P4TESTGEN_LOG] [--per-ingress-path K]

--per-ingress-path K keeps the first K tests of each ingress path (parser states, ingress table
branches and actions except the postcard cache's cell and mask tables, ingress drop reason),
which keeps a full P4Testgen run's vectors small.

The PTF file is Python that drives a switch through bfrt_grpc and ptf. It is not run: its test
classes are executed against recording stand-ins for those modules, which keep what each test
configures (table entries, default entries, register cells), sends (port, bytes) and expects
(port, bytes, don't-care bit ranges), plus a few facts from the test's path trace (parser states,
table branches, the last ingress drop reason). Nothing here depends on p4c's code.
"""

import argparse
import json
import re
import sys
import types


class Rec:
    """A bfrt_grpc key or data tuple."""

    def __init__(self, name, value=None, mask=None, prefix_len=None, low=None, high=None):
        self.name, self.value, self.mask, self.prefix_len = name, value, mask, prefix_len


class Mask:
    """ptf.mask.Mask: the expected bytes and the don't-care bit ranges."""

    def __init__(self, exp):
        self.exp = bytes(exp)
        self.dont_care = []

    def set_do_not_care(self, offset, width):
        self.dont_care.append([offset, width])


def install_stubs():
    class BfRuntimeTest:
        def setUp(self, *a, **k):
            pass

        def tearDown(self):
            pass

    m = types.ModuleType("bfruntime_client_base_tests")
    m.BfRuntimeTest = BfRuntimeTest
    sys.modules["bfruntime_client_base_tests"] = m
    ptf = types.ModuleType("ptf")
    mask = types.ModuleType("ptf.mask")
    mask.Mask = Mask
    tu = types.ModuleType("ptf.testutils")

    def send_packet(test, port, pkt):
        test.rec["sent"].append({"port": int(port), "packet": bytes(pkt).hex()})

    def verify_packet(test, pkt, port):
        if isinstance(pkt, Mask):
            exp, dc = pkt.exp, pkt.dont_care
        else:
            exp, dc = bytes(pkt), []
        test.rec["expected"].append({"port": int(port), "packet": exp.hex(), "dont_care_bits": dc})

    def verify_no_other_packets(test, *a, **k):
        pass

    tu.send_packet, tu.verify_packet, tu.verify_no_other_packets = (
        send_packet, verify_packet, verify_no_other_packets)
    ptf.mask, ptf.testutils = mask, tu
    sys.modules.update({"ptf": ptf, "ptf.mask": mask, "ptf.testutils": tu})
    bg = types.ModuleType("bfrt_grpc")
    pb = types.ModuleType("bfrt_grpc.bfruntime_pb2")
    client = types.ModuleType("bfrt_grpc.client")
    client.KeyTuple = Rec
    client.DataTuple = Rec
    client.Target = lambda **k: None
    bg.bfruntime_pb2, bg.client = pb, client
    sys.modules.update({"bfrt_grpc": bg, "bfrt_grpc.bfruntime_pb2": pb, "bfrt_grpc.client": client})


def tuples(lst):
    out = {}
    for t in lst or []:
        v = {"value": t.value}
        if t.mask is not None:
            v["mask"] = t.mask
        if t.prefix_len is not None:
            v["prefix_len"] = t.prefix_len
        out[t.name] = v if len(v) > 1 else t.value
    return out


def trace_facts(doc):
    """Ingress parser states, table branches, the last ingress drop reason and the headers the
    ingress deparser emits (name -> fields), from a test's trace."""
    states, tables, reason, gress = [], [], 0, "Ingress"
    emits, pending = [], None
    for line in (doc or "").splitlines():
        line = line.strip()
        if "StartEgress" in line:
            gress = "Egress"
        m = re.match(r"\[MethodCall\]: pkt\.emit<\w+>\(hdr\.([\w\[\]]+)\);", line)
        if m:
            pending = m.group(1)
            continue
        if pending and gress == "Ingress" and line.startswith("[Emit]: {"):
            fields = dict((k, int(v)) for k, v in re.findall(r"(\w+):(\d+);", line)
                          if k != "headerValid")
            # The bridged header and the words the egress builds the frame from; the
            # Ethernet/IPv4/UDP headers egress rewrites anyway.
            if pending.startswith(("bridge", "ap_words", "ap_trailer", "pc_words")):
                emits.append([pending, fields])
        pending = None
        m = re.match(r"\[State\] (\w+)", line)
        if m and m.group(1) not in ("start", "accept") and gress == "Ingress":
            states.append(m.group(1))
        m = re.match(r"\[(?:Constant )?Table Branch: ([\w.]+)\s*(.*)\]$", line)
        if m:
            what = m.group(2)
            a = re.search(r"Chosen action: ([\w./()]+)", what) or re.search(
                r"default action: ([\w./]+)", what)
            action = a.group(1).split("/")[-1].split(".")[-1] if a else what
            tables.append([m.group(1), action.removesuffix("()")])
        m = re.search(r"Computed: md\.drop_reason = (\d+);", line)
        if m and gress == "Ingress":
            reason = int(m.group(1))
    return states, tables, reason, emits


def ingress_path(t):
    """The selection key: parser states, ingress table branches (without the postcard cache's
    constant cell and mask tables, whose combinations the Rust side does not compare) and the
    ingress drop reason."""
    return (tuple(t["parser_states"]),
            tuple((tb, a) for tb, a in t["table_branches"]
                  if tb.startswith("Ingress") and not tb.startswith(("Ingress.tbl_pc_cell_",
                                                                       "Ingress.tbl_pc_mask"))),
            t["ingress_drop_reason"])


def convert(ptf_file, knobs, defines, command, log, per_ingress_path=0):
    install_stubs()
    src = open(ptf_file).read()
    ns = {"__name__": "p4testgen_ptf"}
    exec(compile(src, ptf_file, "exec"), ns)
    names = sorted((n for n in ns if re.fullmatch(r"Test\d+", n)), key=lambda n: int(n[4:]))
    tests = []
    for n in names:
        cls = ns[n]
        t = object.__new__(cls)
        t.rec = {"tables": [], "defaults": [], "registers": [], "sent": [], "expected": []}

        def insert(self, table_name, key_fields=None, action_name=None, data_fields=[]):
            self.rec["tables"].append({"table": table_name, "key": tuples(key_fields),
                                       "action": action_name, "args": tuples(data_fields)})

        def override(self, table_name, action_name=None, data_fields=[]):
            self.rec["defaults"].append({"table": table_name, "action": action_name,
                                         "args": tuples(data_fields)})

        def setreg(self, reg_name, value, index):
            self.rec["registers"].append({"register": reg_name, "index": index, "value": value})

        cls.insertTableEntry, cls.overrideDefaultEntry, cls.setRegisterValue = insert, override, setreg
        t.setupCtrlPlane()
        t.sendPacket()
        t.verifyPackets()
        states, tables, reason, emits = trace_facts(cls.__doc__)
        assert len(t.rec["sent"]) == 1, n
        tests.append({
            "name": n,
            "ingress_port": t.rec["sent"][0]["port"],
            "packet": t.rec["sent"][0]["packet"],
            "tables": t.rec["tables"],
            "defaults": t.rec["defaults"],
            "registers": t.rec["registers"],
            "expected": t.rec["expected"],
            "parser_states": states,
            "table_branches": tables,
            "ingress_drop_reason": reason,
            "ingress_emits": emits,
        })
    generated = len(tests)
    if per_ingress_path:
        seen, kept = {}, []
        for t in tests:
            n = seen.get(ingress_path(t), 0)
            if n < per_ingress_path:
                seen[ingress_path(t)] = n + 1
                kept.append(t)
        tests = kept
    coverage = None
    if log:
        cov = re.findall(r"Nodes covered: ([0-9.]+) \((\d+)/(\d+)\)", open(log).read())
        if cov:
            coverage = {"statements_covered": int(cov[-1][1]), "statements": int(cov[-1][2])}
    return {"knobs": knobs, "defines": defines, "command": command,
            "statement_coverage": coverage, "generated": generated,
            "selection": (f"the first {per_ingress_path} tests of each ingress path"
                          if per_ingress_path else "all"),
            "tests": tests}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ptf_file")
    ap.add_argument("out_json")
    ap.add_argument("--knobs", required=True)
    ap.add_argument("--defines", default="")
    ap.add_argument("--command", required=True)
    ap.add_argument("--log")
    ap.add_argument("--per-ingress-path", type=int, default=0, metavar="K")
    a = ap.parse_args()
    doc = convert(a.ptf_file, a.knobs, a.defines, a.command, a.log, a.per_ingress_path)
    # One test per line: small, and diffs stay readable.
    with open(a.out_json, "w") as f:
        tests = doc.pop("tests")
        head = json.dumps(doc, indent=1)[:-2]
        f.write(head + ',\n "tests": [\n')
        f.write(",\n".join(json.dumps(t, separators=(",", ":")) for t in tests))
        f.write("\n ]\n}\n")
    print(f"{a.out_json}: {len(tests)} of {doc['generated']} tests")


if __name__ == "__main__":
    main()
