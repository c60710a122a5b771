"""corpus_setup.py: prepares a Tofino run of one conformance-corpus case (tests/corpus/<case>).

    python3 p4/control/corpus_setup.py tests/corpus/<case> OUT_DIR --port 8

writes OUT_DIR/collector.json (the case's stores at their canonical coordinates, as a collector
would publish them), OUT_DIR/translator.toml (the translator knobs the case was generated with)
and prints the bf-p4c flags, the Sketch-Merge switches, the bfrt plan's size and, for cases with
collector responses, after which report to inject each frame of responses.pcap on the
collector's port. Then compile with the flags, start the program, and run
`python3 p4/control/dta_bfrt.py --config OUT_DIR/translator.toml --ports corpus=<port>
--defines="<flags>" [--sketch-switches=<printed spec>] --bfshell $SDE_INSTALL/bin/bfshell`
(p4/README.md, "Checking a Tofino run"; p4/control/twin_check.py does all of it). Sketch cases
expect the sketch-column NACK frames of expected.pcap too (UDP to port 40044).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dta_bfrt  # noqa: E402

TRANSLATOR = "10.0.0.101"
COLLECTOR = "10.0.0.51:4791"


def knobs_from_defines(defines):
    """dta_bfrt knobs for a `-D...` string (the case's p4_defines)."""
    return dta_bfrt.knobs_from_defines(defines)


def sketch_switches(case):
    """The --sketch-switches spec of a case: its switches, per sketch ID ("" without sketches)."""
    sk = case.get("sketch") or {}
    return ";".join(f"{e['sketch_id']}:{','.join(str(w) for w in e['switches'])}"
                    for e in sk.get("switches", []) if e["switches"])


def setup(case_dir, out_dir):
    """Writes collector.json and translator.toml for the case; returns (case, config path)."""
    with open(os.path.join(case_dir, "case.json")) as f:
        case = json.load(f)
    os.makedirs(out_dir, exist_ok=True)
    meta = {"roce": COLLECTOR, "mac": "02:00:00:00:00:51", "verify_icrc": True,
            "stores": case["metas"]}
    with open(os.path.join(out_dir, "collector.json"), "w") as f:
        json.dump(meta, f, indent=1)
    cfg = os.path.join(out_dir, "translator.toml")
    with open(cfg, "w") as f:
        f.write(f"""[translator]
listen = "{TRANSLATOR}:40040"
roce = "{TRANSLATOR}:4791"
mac = "02:00:00:00:00:01"
max_redundancy = {case['max_redundancy']}

[reports]
reference_variant = "{case['reference_variant'].lower()}"

[reliability]
ack_every = {case['ack_every']}

[postcard]
cache_slots = {case['postcard_cache_slots']}
redundancy = {case['postcard_redundancy']}

[[collector]]
name = "corpus"
metadata = "collector.json"
""")
        if case.get("sketch"):
            f.write(f"""
[sketch]
expected_switches = {case['sketch']['expected_switches']}
max_switches = {case['sketch']['max_switches']}
# The program moves the epoch on at the first report of a newer one: a case it runs has no
# report the quorum rule treats otherwise (the model marks those p4_unsupported).
epoch_quorum = 1
""")
    return case, cfg


def response_plan(case, plan):
    """When to inject each of the case's collector responses (responses.pcap, in order) and the
    program's QP it reaches: [(after_report, syndrome, psn, fresh, qp index)]. Responses enter
    on the collector's port (pipe 1, relayed to pipe 0 by tbl_icrc_return) and tbl_resp_qp
    maps (collector IP, our QPN) to the QP, exactly as for a live collector."""
    resp_qp = {(k["src"], k["dest_qp"]): a["qp"]
               for _, k, a in plan["tables"]["Ingress.tbl_resp_qp"]}
    collector_ip = dta_bfrt.ip_int(COLLECTOR.split(":")[0])
    out = []
    for r in case.get("responses", []):
        qpn = case["qps"][r["store"]]["local_qpn"]
        qp = resp_qp.get((collector_ip, qpn))
        if qp is None:
            raise ValueError(f"{case['name']}: no tbl_resp_qp entry for QPN {qpn:#x}")
        out.append((r["after_report"], r["syndrome"], r["psn"], r["fresh"], qp))
    return out


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--port", type=int, default=0, help="dev port of the collector")
    a = ap.parse_args(argv)
    case, cfg_path = setup(a.case_dir, a.out_dir)
    if case.get("p4_unsupported"):
        print(f"the Tofino program cannot run {case['name']}: {case['p4_unsupported']}")
        return 1
    cfg = dta_bfrt.load_config(cfg_path)
    switches = sketch_switches(case)
    plan = dta_bfrt.plan(cfg, dta_bfrt.load_collectors(cfg, a.out_dir), {"corpus": a.port},
                         knobs=knobs_from_defines(case["p4_defines"]),
                         sketch_switches=dta_bfrt.parse_sketch_switches(switches))
    print("bf-p4c flags:", case["p4_defines"])
    if switches:
        print("sketch switches (DTA_SKETCH_SWITCHES):", switches)
    print("compare the first", case["frames_before_flush"], "frames of expected.pcap")
    for after, syn, psn, fresh, qp in response_plan(case, plan):
        print(f"after report {after}: inject the next frame of responses.pcap ({syn} PSN "
              f"{psn:#08x}, {'fresh' if fresh else 'stale: must not move the PSN'}, QP {qp})")
    print("plan:", {t: len(e) for t, e in plan["tables"].items()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
