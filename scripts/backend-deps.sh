#!/bin/bash
# backend-deps.sh - install what the kernel-bypass backend features need to build, or say in one
# line why not. Never fails.
#
# usage: backend-deps.sh [--no-install]
#   af_xdp feature (xsk-rs builds its bundled libxdp/libbpf): clang llvm m4 make libelf-dev
#                  zlib1g-dev pkg-config
#   dpdk feature (our dta-dpdk-sys: pkg-config libdpdk + bindgen): libdpdk-dev pkg-config
#                  libclang-dev
#   the veth pair the raw-backend tests run on (scripts/netns.sh): iproute2 ethtool (without
#                  ethtool, TX checksum offload stays on and frames carry partial UDP checksums)
# Installs missing Debian packages only as root with apt-get (apt-get update first if the lists
# are empty). The last line of stdout is "backend-deps: READY af_xdp dpdk" (the features that can
# be built; one of them may be missing) or "backend-deps: SKIP: <reason>"; the exit status is 0.
set -uo pipefail
INSTALL=1
[ "${1:-}" = --no-install ] && INSTALL=0
skip() { echo "backend-deps: SKIP: $*"; exit 0; }

XDP_PKGS="clang llvm m4 make libelf-dev zlib1g-dev pkg-config"
DPDK_PKGS="libdpdk-dev pkg-config libclang-dev"
NETNS_PKGS="iproute2 ethtool"
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing_of() { local m=""; for p in $1; do installed "$p" || m="$m $p"; done; echo "$m"; }

command -v dpkg-query >/dev/null || skip "not a Debian system (no dpkg-query)"
missing="$(missing_of "$XDP_PKGS $DPDK_PKGS $NETNS_PKGS" | tr ' ' '\n' | sort -u | tr '\n' ' ')"
if [ -n "${missing// /}" ] && [ $INSTALL = 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]; then
    timeout 600 apt-get -o DPkg::Lock::Timeout=300 update -qq >&2 || echo "backend-deps: apt-get update failed" >&2
  fi
  echo "backend-deps: apt-get install$missing" >&2
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
    --no-install-recommends $missing >&2 || echo "backend-deps: apt-get install failed" >&2
fi
ready=""
[ -z "$(missing_of "$XDP_PKGS" | tr -d ' ')" ] && ready="$ready af_xdp"
[ -z "$(missing_of "$DPDK_PKGS" | tr -d ' ')" ] && ready="$ready dpdk"
[ -n "$ready" ] || skip "missing host packages:$(missing_of "$XDP_PKGS $DPDK_PKGS") (run scripts/backend-deps.sh as root)"
echo "backend-deps: READY$ready"
