#!/usr/bin/env bash
# scripts/install-tshark.sh - installs Debian's tshark (used to check that `dta gen` pcaps
# decode cleanly). Prints READY or "SKIP: reason" and always exits 0.
set -u
if command -v tshark >/dev/null 2>&1; then
  echo "tshark: READY ($(command -v tshark))"
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "SKIP: tshark not installed and not root (run: apt-get install tshark)"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "SKIP: tshark not installed and no apt-get on this system"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# Do not ask whether non-root users may capture packets.
echo "wireshark-common wireshark-common/install-setuid boolean false" \
  | debconf-set-selections 2>/dev/null || true
if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$')" ]; then
  apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null 2>&1 || true
fi
if apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends tshark \
  >/dev/null 2>&1; then
  echo "tshark: READY ($(command -v tshark))"
else
  echo "SKIP: apt-get install tshark failed"
fi
exit 0
