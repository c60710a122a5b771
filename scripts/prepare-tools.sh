#!/usr/bin/env bash
# scripts/prepare-tools.sh - installs optional test tools from Debian's archive, best effort.
#
#   promtool (package `prometheus`): the translator's and the collector's /metrics tests
#   (translator/src/control/metrics.rs, collector/src/metrics.rs, collector/tests/metrics.rs)
#   pipe their pages through `promtool check metrics`; without it they print
#   "SKIP: promtool not found" and pass.
#
# Never fails: prints READY or "SKIP: reason" and exits 0.
set -uo pipefail

if command -v promtool >/dev/null 2>&1; then
  echo "READY: promtool ($(command -v promtool))"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: promtool missing and not root (run as root, or apt-get install prometheus)"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "SKIP: promtool missing and no apt-get on this system"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$' -e '^auxfiles$')" ]; then
  apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null 2>&1 || true
fi
# The package's service must not start (no init here, and nothing should listen on :9090).
apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends prometheus \
  >/tmp/dta-prepare-tools.log 2>&1 \
  || { apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null 2>&1 \
       && apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends prometheus \
          >>/tmp/dta-prepare-tools.log 2>&1; } || true
if command -v promtool >/dev/null 2>&1; then
  echo "READY: promtool ($(command -v promtool))"
else
  echo "SKIP: could not install Debian's prometheus package (see /tmp/dta-prepare-tools.log)"
fi
exit 0
