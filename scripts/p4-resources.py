#!/usr/bin/env python3
"""Summarises a p4c-barefoot build's resource use (Tofino-1).

Usage: p4-resources.py BUILD_DIR [NAME]
BUILD_DIR is p4c-barefoot's -o directory (it reads pipe/logs/resources.json, and the .bfa for
the stages each gress uses). Prints one line per MAU stage (the stage's resources are shared by
ingress and egress) and a total line, as Markdown table rows.
"""
import glob
import json
import os
import re
import sys

# Tofino-1 per stage: 80 SRAM blocks (8 rows x 10 columns), 24 TCAM blocks, 48 map RAMs,
# 4 stateful ALUs, 16 gateways, 32 VLIW instructions, 16 logical tables.
LIMITS = {"sram": 80, "tcam": 24, "salu": 4, "gw": 16, "vliw": 32, "tables": 16}


def stage_counts(build):
    """Stages per gress, from the assembler input (the compiler may emit more than exist)."""
    counts = {}
    for bfa in glob.glob(os.path.join(build, "pipe", "*.bfa")):
        for line in open(bfa):
            m = re.match(r"\s*stage (\d+) (ingress|egress):", line)
            if m:
                counts.setdefault(m.group(2), set()).add(int(m.group(1)))
    return {g: len(s) for g, s in counts.items()}


def main():
    build = sys.argv[1]
    name = sys.argv[2] if len(sys.argv) > 2 else os.path.basename(build.rstrip("/"))
    res = json.load(open(os.path.join(build, "pipe", "logs", "resources.json")))["resources"]
    rows = []
    total = {k: 0 for k in LIMITS}
    for st in res["mau"]["mau_stages"]:
        srams = sum(1 for r in st["rams"]["srams"] if r.get("usages"))
        tcams = sum(1 for t in st["tcams"]["tcams"] if t.get("usages"))
        salus = len(st["meter_alus"]["meters"])
        gws = len(st["gateways"]["gateways"])
        vliw = len(st["vliw"]["instructions"])
        tables = len(st["logical_tables"]["ids"])
        row = {"sram": srams, "tcam": tcams, "salu": salus, "gw": gws, "vliw": vliw, "tables": tables}
        for k, v in row.items():
            total[k] += v
        rows.append((st["stage_number"], row))
    gress = stage_counts(build)
    print(f"{name}: ingress {gress.get('ingress', 0)} stages, egress {gress.get('egress', 0)} "
          f"stages (Tofino-1 has 12)")
    print("| stage | SRAM /80 | TCAM /24 | stateful ALU /4 | gateways /16 | VLIW /32 | tables /16 |")
    print("|---|---|---|---|---|---|---|")
    for n, r in rows:
        print(f"| {n} | {r['sram']} | {r['tcam']} | {r['salu']} | {r['gw']} | {r['vliw']} | {r['tables']} |")
    n = len(rows)
    print(f"| all {n} | {total['sram']} ({100 * total['sram'] / (80 * n):.0f} %) | "
          f"{total['tcam']} | {total['salu']} | {total['gw']} | {total['vliw']} | {total['tables']} |")


if __name__ == "__main__":
    main()
