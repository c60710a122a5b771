#!/usr/bin/env bash
# scripts/bench-collectors.sh - `dta bench collectors` in one command (bench/README.md,
# "dta against the databases operators deploy").
#
#   scripts/bench-collectors.sh [dta bench options...]     e.g. --reports 1000000
#
# 1. Installs Redis, ClickHouse and InfluxDB from Debian's archive when missing (root; each
#    through its own script: scripts/redis.sh, scripts/clickhouse.sh, scripts/influxdb.sh).
# 2. Starts a private server of each on 127.0.0.1 (free ports; data, logs and configuration
#    under one temporary directory; never the system services or their default ports).
# 3. Runs `dta bench collectors` against them and `dta` itself (software RNIC): it writes
#    bench/results/collectors.json and collectors.svg (or --out DIR).
# 4. Stops the servers and removes their data: on success, on failure and on Ctrl-C.
#
# The `dta` binary is $DTA if set, else target/release/dta, built with
# `cargo build --release -p dta-bench` when missing. A database that cannot be installed or
# started prints its "SKIP: reason" and is left out; the others and `dta` still run.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

work=$(mktemp -d /tmp/dta-bench-collectors.XXXXXX) || { echo "SKIP: no temporary directory"; exit 0; }
started=()
cleanup() {
  local s
  for s in "${started[@]}"; do
    bash "scripts/${s%%:*}.sh" stop "$work/${s%%:*}" >/dev/null 2>&1
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

dta=${DTA:-target/release/dta}
if [ ! -x "$dta" ]; then
  echo "== building $dta (cargo build --release -p dta-bench)"
  cargo build --release -p dta-bench || { echo "SKIP: cargo build --release -p dta-bench failed"; exit 1; }
fi

args=()
for db in redis clickhouse influxdb; do
  out=$(bash "scripts/$db.sh" start "$work/$db" | tail -n 1)
  # The server may have been started even when it never answered: stop it in any case.
  started+=("$db")
  case "$out" in
    READY*)
      read -r _ port pid <<<"$out"
      echo "$db: 127.0.0.1:$port, pid $pid, data in $work/$db"
      args+=("--$db" "127.0.0.1:$port" "--$db-pid" "$pid")
      ;;
    *)
      echo "$db: $out"
      ;;
  esac
done

"$dta" bench collectors "${args[@]}" "$@"
