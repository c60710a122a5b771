#!/bin/bash
# rdma-deps.sh - install what `cargo build -p dta-collector --features rdma` needs, or say in one
# line why not. Never fails.
#
# usage: rdma-deps.sh [--no-install]
# The `rdma` feature links rdma-sys 0.3, whose build script finds libibverbs and librdmacm with
# pkg-config and runs bindgen over their headers (bindgen loads libclang at build time).
# Debian packages: libibverbs-dev librdmacm-dev pkg-config libclang1-14 (libclang.so for bindgen).
# Installs them only as root with apt-get (apt-get update first if the lists are empty).
# The last line of stdout is "rdma-deps: READY" or "rdma-deps: SKIP: <reason>"; the exit status is 0.
set -uo pipefail
INSTALL=1
[ "${1:-}" = --no-install ] && INSTALL=0
skip() { echo "rdma-deps: SKIP: $*"; exit 0; }

have_libclang() {
  ls /usr/lib/llvm-*/lib/libclang*.so* /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1
}
missing=()
[ -f /usr/include/infiniband/verbs.h ] || missing+=(libibverbs-dev)
[ -f /usr/include/rdma/rdma_cma.h ] || missing+=(librdmacm-dev)
command -v pkg-config >/dev/null || missing+=(pkg-config)
have_libclang || missing+=(libclang1-14)
[ ${#missing[@]} -eq 0 ] && { echo "rdma-deps: READY"; exit 0; }

[ $INSTALL = 1 ] || skip "missing host packages: ${missing[*]} (run scripts/rdma-deps.sh as root)"
[ "$(id -u)" = 0 ] || skip "missing host packages: ${missing[*]}, and not root to install them"
command -v apt-get >/dev/null || skip "missing host packages: ${missing[*]}, and no apt-get"
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]; then
  timeout 600 apt-get -o DPkg::Lock::Timeout=300 update -qq >&2 || skip "apt-get update failed (no network?)"
fi
echo "rdma-deps: apt-get install ${missing[*]}" >&2
DEBIAN_FRONTEND=noninteractive timeout 900 apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
  --no-install-recommends "${missing[@]}" >&2 || skip "apt-get install ${missing[*]} failed (no network?)"
echo "rdma-deps: READY"
