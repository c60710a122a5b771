#!/usr/bin/env bash
# Installs the optional system packages the kernel-bypass backends need (AF_XDP, DPDK, pcap
# tooling). Debian only, root only. Never fails: prints SKIP and exits 0 when it cannot install.
#
#   scripts/prepare-optional.sh            # install everything in PACKAGES
#   scripts/prepare-optional.sh --check    # only report what is missing
set -u

PACKAGES="pkg-config clang libclang-dev libelf-dev zlib1g-dev libpcap-dev libdpdk-dev dpdk-dev \
libxdp-dev libbpf-dev xdp-tools iproute2 ethtool m4 llvm make"

skip() {
    echo "SKIP: prepare-optional: $*"
    exit 0
}

missing=""
for p in $PACKAGES; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -z "$missing" ]; then
    echo "prepare-optional: all optional packages present"
    exit 0
fi
echo "prepare-optional: missing:$missing"
[ "${1:-}" = "--check" ] && exit 0
[ "$(id -u)" = 0 ] || skip "not root"
command -v apt-get >/dev/null 2>&1 || skip "no apt-get"

APT="apt-get -o DPkg::Lock::Timeout=300 -y -q"
if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$' || true)" ]; then
    $APT update >/dev/null 2>&1 || skip "apt-get update failed"
fi
# shellcheck disable=SC2086
if ! DEBIAN_FRONTEND=noninteractive $APT install --no-install-recommends $missing >/tmp/prepare-optional.log 2>&1; then
    # Stale lists: refresh once and retry.
    $APT update >/dev/null 2>&1 || true
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $APT install --no-install-recommends $missing \
        >/tmp/prepare-optional.log 2>&1 || skip "apt-get install failed (see /tmp/prepare-optional.log)"
fi
echo "prepare-optional: installed:$missing"
exit 0
