#!/usr/bin/env bash
# scripts/fuzz-long.sh - the long fuzz campaign behind docs/reliability.md: runs each target
# (default: all) one after another for RUNS executions (default 10 million) or MAX_TIME seconds,
# whichever comes first, and prints libFuzzer's final statistics per target.
#
#   scripts/fuzz-long.sh                 # every target, 10M executions each
#   RUNS=1000000 scripts/fuzz-long.sh rnic pipeline
#
# Logs go to fuzz/logs/<target>.log, the grown corpus to fuzz/corpus/<target>, crashes to
# fuzz/artifacts/<target>/. Needs cargo-fuzz and a nightly toolchain.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS=${RUNS:-10000000}
MAX_TIME=${MAX_TIME:-7200}
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(report nack metarec listheads cm_mad config rnic cm_state pipeline)
mkdir -p fuzz/logs
cargo +nightly fuzz build -s none "${targets[@]:0:1}" >/dev/null 2>&1 || cargo +nightly fuzz build -s none
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t"
  echo "== $t"
  cargo +nightly fuzz run -s none "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
    -runs="$RUNS" -max_total_time="$MAX_TIME" -print_final_stats=1 >"fuzz/logs/$t.log" 2>&1 || true
  grep -E "DONE|Done [0-9]+ runs|stat::number_of_executed_units|stat::average_exec_per_sec|SUMMARY|panicked" \
    "fuzz/logs/$t.log" | tail -6
done
