#!/usr/bin/env bash
# scripts/bench-zero-interference.sh - the ZERO interference measurement (issue 30,
# bench/README.md "ZERO interference"): a Redis server under a steady redis-benchmark load on
# this machine's core 1 (the monitored host), monitored at 1 s by nothing, by Prometheus'
# node_exporter scraped by Prometheus, or by dta-agent pulled with RDMA READ by dta-collector;
# Redis latency and throughput and the monitored core's CPU spent on monitoring, per case.
#
#   scripts/bench-zero-interference.sh --deps-only   install the Debian packages when missing
#                                                    (root), print READY or SKIP: reason
#   scripts/bench-zero-interference.sh [ARGS...]     install, build (release) and run
#                                                    `dta bench zero-interference ARGS...`
#                                                    (e.g. --secs 60 --rounds 3; see --help)
#
# Debian packages: redis-server, redis-tools (redis-benchmark), prometheus,
# prometheus-node-exporter, util-linux (taskset, setpriv). Their system services are never
# used: every server is started by the bench with a private data directory under a temporary
# directory, on 127.0.0.1 ports nothing else listens on, with a parent-death signal, and stopped
# at the end (also on failure); the directory is removed unless --keep-work is given.
# Never fails for a missing dependency: prints "SKIP: reason" and exits 0.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 0
PACKAGES=(redis-server redis-tools prometheus prometheus-node-exporter util-linux)

skip() {
  echo "SKIP: $*"
  exit 0
}

have_all() {
  command -v redis-server >/dev/null 2>&1 && command -v redis-benchmark >/dev/null 2>&1 \
    && command -v prometheus >/dev/null 2>&1 && command -v prometheus-node-exporter >/dev/null 2>&1 \
    && command -v taskset >/dev/null 2>&1 && command -v setpriv >/dev/null 2>&1
}

install() {
  have_all && return 0
  [ "$(id -u)" = 0 ] || skip "missing packages and not root (apt-get install ${PACKAGES[*]})"
  command -v apt-get >/dev/null 2>&1 || skip "missing packages and no apt-get on this system"
  export DEBIAN_FRONTEND=noninteractive
  local apt="apt-get -o DPkg::Lock::Timeout=300"
  if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]; then
    timeout 600 $apt update -qq >/dev/null 2>&1 || true
  fi
  # --no-install-recommends: not prometheus-node-exporter-collectors (systemd timers writing
  # textfiles). A system whose init starts the packages' services gets them started here; the
  # bench warns about monitors it did not start (they would be load it does not account for).
  timeout 900 $apt install -y -qq --no-install-recommends "${PACKAGES[@]}" \
    >/tmp/dta-zero-interference-install.log 2>&1 \
    || { timeout 600 $apt update -qq >/dev/null 2>&1 \
         && timeout 900 $apt install -y -qq --no-install-recommends "${PACKAGES[@]}" \
            >>/tmp/dta-zero-interference-install.log 2>&1; } \
    || skip "apt-get install ${PACKAGES[*]} failed (see /tmp/dta-zero-interference-install.log)"
  have_all || skip "a tool is still missing after installing ${PACKAGES[*]}"
}

install
if [ "${1:-}" = --deps-only ]; then
  echo "READY: redis-server $(redis-server --version | awk '{print $3}'), $(prometheus --version 2>&1 | head -n 1), $(prometheus-node-exporter --version 2>&1 | head -n 1)"
  exit 0
fi
[ "$(nproc)" -ge 2 ] || skip "needs 2 cores (the monitored host is core 1, the rest core 0)"
command -v cargo >/dev/null 2>&1 || skip "no cargo"
cargo build --release -q -p dta-bench -p dta-agent -p dta-collector --bins \
  || { echo "bench-zero-interference: the release build failed" >&2; exit 1; }
exec target/release/dta bench zero-interference "$@"
