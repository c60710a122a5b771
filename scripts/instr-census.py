#!/usr/bin/env python3
"""Where a profile's instructions go, by how often each instruction ran per report.

    valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file=OUT \\
        target/profiling/examples/pipeline_profile keywrite 102400
    scripts/instr-census.py OUT 102400 [--binary BIN --rate R]

Every executed instruction is put in a class by its count divided by the reports: 1 (once per
report: parse, hash, checks), 2 (once per frame of a Key-Write at N = 2), 1/5 (once per
postcard chunk), 1/16 (once per Append batch), 1/64 (once per burst of the profile), below
1/100 (start-up). The classes' sums are the profile's instructions per report, split by what
they scale with, which no per-function listing shows once the hot path is inlined into one
function. With --binary and --rate, lists the functions (from `nm`) holding the instructions
of one class.
"""

import argparse
import bisect
import collections
import subprocess

CLASSES = [
    (1 / 64, "once per burst (1/64)"),
    (1 / 32, "1/32"),
    (1 / 16, "once per Append batch (1/16)"),
    (1 / 8, "1/8"),
    (1 / 5, "once per postcard chunk (1/5)"),
    (2 / 5, "2/5"),
    (1 / 2, "1/2"),
    (1, "once per report"),
    (2, "twice per report (a frame at N = 2)"),
    (3, "3"),
    (4, "4"),
]


def instruction_costs(path):
    """Self cost (Ir) of each instruction address in a callgrind output written with
    --dump-instr=yes (the inclusive costs of calls are left out)."""
    cost = collections.Counter()
    positions = None
    last = []
    after_calls = False
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("positions:"):
                positions = line.split()[1:]
                last = [0] * len(positions)
                continue
            if line.startswith("calls="):
                after_calls = True
                continue
            if not line or not (line[0].isdigit() or line[0] in "+-*"):
                continue
            if positions is None or "instr" not in positions:
                raise SystemExit(f"{path}: not written with --dump-instr=yes")
            parts = line.split()
            for i, p in enumerate(parts[: len(positions)]):
                if p == "*":
                    continue
                if p[0] == "+":
                    last[i] += int(p[1:], 0)
                elif p[0] == "-":
                    last[i] -= int(p[1:], 0)
                else:
                    last[i] = int(p, 0)
            ir = int(parts[len(positions)]) if len(parts) > len(positions) else 0
            if after_calls:
                after_calls = False
                continue
            cost[last[0]] += ir
    return cost


def classify(rate):
    if rate < 0.01:
        return "start-up (< 1/100)"
    for r, name in CLASSES:
        if abs(rate - r) / r < 0.06:
            return name
    return "other rates"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("callgrind_out")
    ap.add_argument("reports", type=int, help="reports the profile ran")
    ap.add_argument("--binary", help="the profiled binary, to name functions")
    ap.add_argument("--rate", type=float, help="list the functions of this class (e.g. 2)")
    a = ap.parse_args()
    cost = instruction_costs(a.callgrind_out)
    classes = collections.defaultdict(lambda: [0, 0])
    for c in cost.values():
        k = classify(c / a.reports)
        classes[k][0] += 1
        classes[k][1] += c
    total = sum(cost.values())
    print(f"{'class':<38} {'instructions':>12} {'per report':>11}")
    for k, (n, c) in sorted(classes.items(), key=lambda kv: -kv[1][1]):
        print(f"{k:<38} {n:>12} {c / a.reports:>11.1f}")
    print(f"{'total':<38} {len(cost):>12} {total / a.reports:>11.1f}")
    if a.binary and a.rate:
        nm = subprocess.run(
            ["nm", "-C", "-S", "--defined-only", "-n", a.binary],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        syms = []
        for line in nm.splitlines():
            p = line.split(" ", 3)
            if len(p) == 4 and p[2] in "tTwW":
                syms.append((int(p[0], 16), int(p[1], 16), p[3]))
        starts = [s for s, _, _ in syms]
        want = classify(a.rate)
        per = collections.Counter()
        for addr, c in cost.items():
            if classify(c / a.reports) == want:
                i = bisect.bisect_right(starts, addr) - 1
                inside = i >= 0 and addr < syms[i][0] + syms[i][1]
                per[syms[i][2] if inside else "(outside the binary: a shared library)"] += c
        print(f"\n{want}, by function:")
        for f, c in per.most_common(15):
            print(f"{c / a.reports:8.1f}  {f[:140]}")


if __name__ == "__main__":
    main()
