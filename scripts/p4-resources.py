#!/usr/bin/env python3
"""Summarises a p4c-barefoot build's resource use (Tofino-1).

Usage: p4-resources.py BUILD_DIR [NAME]
BUILD_DIR is p4c-barefoot's -o directory: one subdirectory per pipeline instance (`pipe`; the
translator's two-pipe build adds `icrc_pipe`), each with logs/resources.json and the .bfa for
the stages each gress uses. Prints a summary line, then per pipe one line per MAU stage (a
stage's resources are shared by that pipe's ingress and egress) and a total line, as Markdown
table rows.
"""
import glob
import json
import os
import re
import sys

# Tofino-1 per stage: 80 SRAM blocks (8 rows x 10 columns), 24 TCAM blocks, 48 map RAMs,
# 4 stateful ALUs, 16 gateways, 32 VLIW instructions, 16 logical tables.
LIMITS = {"sram": 80, "tcam": 24, "salu": 4, "gw": 16, "vliw": 32, "tables": 16, "hash_bits": 416,
          "hash_dist": 6}
# Per stage: 8 hash groups x 52 bits; 2 hash ids x 3 hash-distribution units (16 bits each).


def stage_counts(pipe_dir):
    """Stages per gress, from the assembler input (the compiler may emit more than exist)."""
    counts = {}
    for bfa in glob.glob(os.path.join(pipe_dir, "*.bfa")):
        for line in open(bfa):
            m = re.match(r"\s*stage (\d+) (ingress|egress):", line)
            if m:
                counts.setdefault(m.group(2), set()).add(int(m.group(1)))
    return {g: len(s) for g, s in counts.items()}


def pipe_dirs(build):
    """The build's pipeline directories, `pipe` first."""
    dirs = [d for d in sorted(glob.glob(os.path.join(build, "*")))
            if os.path.isfile(os.path.join(d, "logs", "resources.json"))]
    return sorted(dirs, key=lambda d: (os.path.basename(d) != "pipe", d))


def stage_rows(pipe_dir):
    res = json.load(open(os.path.join(pipe_dir, "logs", "resources.json")))["resources"]
    rows = []
    for st in res["mau"]["mau_stages"]:
        rows.append((st["stage_number"], {
            "sram": sum(1 for r in st["rams"]["srams"] if r.get("usages")),
            "tcam": sum(1 for t in st["tcams"]["tcams"] if t.get("usages")),
            "salu": len(st["meter_alus"]["meters"]),
            "gw": len(st["gateways"]["gateways"]),
            "vliw": len(st["vliw"]["instructions"]),
            "tables": len(st["logical_tables"]["ids"]),
            "hash_bits": len({(b["hash_function"], b["hash_bit"]) for b in st["hash_bits"]["bits"]}),
            "hash_dist": len(st["hash_distribution_units"]["units"]),
        }))
    return rows


def phv_use(pipe_dir):
    """(bits of PHV containers used, bits of PHV containers there are), tagalong included."""
    phv = os.path.join(pipe_dir, "logs", "phv.json")
    if not os.path.isfile(phv):
        return None
    p = json.load(open(phv))
    used = sum(c["bit_width"] for c in p["containers"])
    total = sum(g["bit_width"] * g["num_containers"] for g in p["resources"]
                if g.get("group_type") == "mau")   # the deparser view lists the same containers
    return used, total


def main():
    build = sys.argv[1]
    name = sys.argv[2] if len(sys.argv) > 2 else os.path.basename(build.rstrip("/"))
    dirs = pipe_dirs(build)
    if not dirs:
        sys.exit(f"{build}: no pipe directory with logs/resources.json")
    gress = {os.path.basename(d): stage_counts(d) for d in dirs}
    if len(dirs) == 1:
        g = next(iter(gress.values()))
        print(f"{name}: ingress {g.get('ingress', 0)} stages, egress {g.get('egress', 0)} "
              f"stages (Tofino-1 has 12)")
    else:
        parts = [f"{p} ingress {g.get('ingress', 0)} / egress {g.get('egress', 0)}"
                 for p, g in gress.items()]
        print(f"{name}: {'; '.join(parts)} stages (Tofino-1 has 12 per gress)")
    for d in dirs:
        rows = stage_rows(d)
        total = {k: sum(r[k] for _, r in rows) for k in LIMITS}
        if len(dirs) > 1:
            print(f"\n{os.path.basename(d)}:\n")
        print("| stage | SRAM /80 | TCAM /24 | stateful ALU /4 | gateways /16 | VLIW /32 | tables /16 "
              "| hash bits /416 | hash dist /6 |")
        print("|---|---|---|---|---|---|---|---|---|")
        for n, r in rows:
            print(f"| {n} | {r['sram']} | {r['tcam']} | {r['salu']} | {r['gw']} | {r['vliw']} | "
                  f"{r['tables']} | {r['hash_bits']} | {r['hash_dist']} |")
        n = len(rows)
        print(f"| all {n} | {total['sram']} ({100 * total['sram'] / (80 * n):.0f} %) | "
              f"{total['tcam']} | {total['salu']} | {total['gw']} | {total['vliw']} | {total['tables']} "
              f"| {total['hash_bits']} | {total['hash_dist']} |")
        use = phv_use(d)
        if use:
            print(f"\nPHV: {use[0]} of {use[1]} container bits ({100 * use[0] / use[1]:.0f} %)")


if __name__ == "__main__":
    main()
