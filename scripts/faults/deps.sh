#!/usr/bin/env bash
# Installs what the fault scripts need beyond iproute2: nftables (random loss and duplication,
# used because this kernel has no sch_netem), curl and python3. Debian only; never fails:
# prints SKIP and exits 0 when it cannot install.
set -u
[ "$(id -u)" = 0 ] || { echo "SKIP: faults deps: not root"; exit 0; }
command -v apt-get >/dev/null 2>&1 || { echo "SKIP: faults deps: no apt-get"; exit 0; }
need=()
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v python3 >/dev/null 2>&1 || need+=(python3)
[ ${#need[@]} = 0 ] && { echo "faults deps: present"; exit 0; }
[ -n "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v lock)" ] || apt-get -o DPkg::Lock::Timeout=300 update -qq || true
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq "${need[@]}" >/dev/null ||
    { echo "SKIP: faults deps: apt-get install ${need[*]} failed"; exit 0; }
echo "faults deps: installed ${need[*]}"
