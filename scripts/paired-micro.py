#!/usr/bin/env python3
"""Paired `dta bench micro`: base and new release binaries alternated run by run, pinned to one
core; per row, the median of the per-pair ratios new/base of M reports/s.
usage: scripts/paired-micro.py BASE NEW PAIRS [bench micro args...]
(BASE and NEW are two builds of `dta`, e.g. target/release/dta of two checkouts.)"""
import subprocess, sys, re, statistics, tempfile
if len(sys.argv) < 4 or not sys.argv[3].isdigit() or int(sys.argv[3]) < 1:
    sys.exit(__doc__)
base, new, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3])
extra = sys.argv[4:]
pat = re.compile(r"^\s+(.+?)\s+([0-9.]+) M reports/s \(")
def run(b):
    out = tempfile.mkdtemp()
    r = subprocess.run(["taskset", "-c", "1", b, "bench", "micro", "--out", out] + extra,
                       capture_output=True, text=True)
    rows = {}
    for line in (r.stdout + r.stderr).splitlines():
        m = pat.match(line)
        if m:
            rows[m.group(1).strip()] = float(m.group(2))
    if not rows:
        sys.exit(f"{b}: no rows\n{r.stderr[-2000:]}")
    return rows
ratios, rb, rn = {}, {}, {}
order = []
for i in range(pairs):
    if i % 2 == 0:
        a = run(base); b = run(new)
    else:
        b = run(new); a = run(base)
    for k in a:
        if k in b:
            if k not in ratios:
                order.append(k)
            ratios.setdefault(k, []).append(b[k] / a[k])
            rb.setdefault(k, []).append(a[k]); rn.setdefault(k, []).append(b[k])
    print(f"pair {i + 1}/{pairs} done", file=sys.stderr, flush=True)
for k in order:
    q = statistics.quantiles(ratios[k], n=4) if len(ratios[k]) > 1 else [ratios[k][0]] * 3
    print(f"| {k} | {statistics.median(rb[k]):.2f} | {statistics.median(rn[k]):.2f} | "
          f"{statistics.median(ratios[k]):.3f} ({q[0]:.3f}–{q[2]:.3f}) |")
