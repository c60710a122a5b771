#!/usr/bin/env python3
"""Paired wall clock of two `pipeline_profile` builds: base and new alternated run by run,
pinned to one core; per case, the median (and quartiles) of the per-pair ratios new/base of
M reports/s.

usage: scripts/paired-profile.py BASE NEW PAIRS CASE:REPORTS [CASE:REPORTS ...]
  e.g. scripts/paired-profile.py /tmp/base/pipeline_profile \\
           target/profiling/examples/pipeline_profile 21 mix:1000000 keywrite:1000000

(BASE and NEW are two builds of `cargo build --profile profiling --example pipeline_profile
-p dta-translator`. Keep REPORTS under the PSN cap: Key-Write at N = 2 takes 2^22 frames.)
"""
import re
import statistics
import subprocess
import sys

RATE = re.compile(r"= ([0-9.]+) M reports/s")


def run(binary, case, reports):
    r = subprocess.run(
        ["taskset", "-c", "1", binary, case, str(reports)],
        capture_output=True,
        text=True,
    )
    m = RATE.search(r.stderr)
    if r.returncode != 0 or not m:
        sys.exit(f"{binary} {case}: no rate\n{r.stderr[-2000:]}")
    return float(m.group(1))


def main():
    if len(sys.argv) < 5 or not sys.argv[3].isdigit():
        sys.exit(__doc__)
    base, new, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cases = []
    for c in sys.argv[4:]:
        name, _, n = c.partition(":")
        cases.append((name, int(n or 1_000_000)))
    print("| Case | Base M reports/s | New M reports/s | New ÷ base, median (IQR) |")
    print("|---|---:|---:|---|")
    for name, n in cases:
        ratios, rb, rn = [], [], []
        for i in range(pairs):
            if i % 2 == 0:
                a = run(base, name, n)
                b = run(new, name, n)
            else:
                b = run(new, name, n)
                a = run(base, name, n)
            rb.append(a)
            rn.append(b)
            ratios.append(b / a)
        q = statistics.quantiles(ratios, n=4) if pairs > 1 else [ratios[0]] * 3
        print(
            f"| {name} {n:,} | {statistics.median(rb):.2f} | {statistics.median(rn):.2f} | "
            f"**{statistics.median(ratios):.3f}** ({q[0]:.3f}–{q[2]:.3f}) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
