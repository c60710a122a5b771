#!/usr/bin/env bash
# scripts/fuzz-smoke.sh - CI smoke run of every cargo-fuzz target (fuzz/), SECS seconds each
# (default 15; 12 targets ≈ 3 min plus the build). Called by scripts/test.
#
# Needs a nightly toolchain (`cargo +nightly`); installs cargo-fuzz (`cargo install cargo-fuzz
# --locked`) only when nightly exists. Without them it prints "SKIP: reason" and exits 0.
# A crash fails the script (exit 1) and leaves the input in fuzz/artifacts/<target>/.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SECS=${SECS:-15}
targets=(report nack metarec listheads cm_mad config rnic cm_state pipeline sketch telemetry_report zero)

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "SKIP: fuzz smoke: no nightly toolchain (cargo +nightly)"
  exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  if ! cargo install cargo-fuzz --locked >/dev/null 2>&1; then
    echo "SKIP: fuzz smoke: cargo-fuzz could not be installed"
    exit 0
  fi
fi
if ! cargo +nightly fuzz build -s none >/tmp/dta-fuzz-build.log 2>&1; then
  tail -30 /tmp/dta-fuzz-build.log
  echo "FAIL: fuzz targets do not build"
  exit 1
fi
failed=()
for t in "${targets[@]}"; do
  corpus=$(mktemp -d)
  log=$(mktemp)
  # -s none: the crates under test forbid unsafe code outside the (bounds-checked) memory
  # region, so the sanitizer buys little and halves the speed; debug assertions stay on.
  cargo +nightly fuzz run -s none "$t" "$corpus" "fuzz/seeds/$t" -- \
    -max_total_time="$SECS" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || true)
  cov=$(grep -E '^#[0-9]+' "$log" | tail -1 | grep -oE 'cov: [0-9]+' || true)
  if [ $rc -ne 0 ]; then
    echo "FAIL: fuzz $t (exit $rc)"
    grep -E "panicked|SUMMARY|Test unit written|Base64" "$log" | head -8
    failed+=("$t")
  else
    echo "ok: fuzz $t: ${runs:-?} runs in ${SECS}s, ${cov:-cov: ?}"
  fi
  rm -rf "$corpus" "$log"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAIL: fuzz smoke: ${failed[*]}"
  exit 1
fi
echo "fuzz smoke: all ${#targets[@]} targets ok"
