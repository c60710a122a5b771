#!/bin/bash
# prepare.sh - make the Soft-RoCE test VM usable, or say in one line why it can't be. Never fails.
#
# usage: prepare.sh [--no-install]
#   1. installs the host packages the build and the VM need if some are missing (only as root with
#      apt-get; --no-install forbids it),
#   2. builds the image into ${DTA_RXE_VM_DIR:-/tmp/dta-rxe-vm}/out (nothing to do if it is up to
#      date; see build-image.sh), log in ${DTA_RXE_VM_DIR:-/tmp/dta-rxe-vm}/build.log.
# The last line of stdout is either "rxe-vm: READY <image dir> ..." or "rxe-vm: SKIP: <reason>".
# The exit status is 0 either way: a machine that can't run the VM must not fail the test command;
# the VM tests then skip with the same reason (tests/rxe_vm.rs runs this with --no-install).
# Env: DTA_RXE_VM_DIR, DTA_SKIP_RXE_VM=1 (do nothing, report SKIP).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DIR=${DTA_RXE_VM_DIR:-/tmp/dta-rxe-vm}
OUT=$DIR/out
INSTALL=1
[ "${1:-}" = --no-install ] && INSTALL=0
T0=$(date +%s.%N)

skip() { echo "rxe-vm: SKIP: $*"; exit 0; }
elapsed() { awk "BEGIN{printf \"%.1f\", $(date +%s.%N)-$T0}"; }

[ "${DTA_SKIP_RXE_VM:-0}" = 1 ] && skip "DTA_SKIP_RXE_VM=1"
[ "$(uname -s)/$(uname -m)" = Linux/x86_64 ] || skip "needs Linux on x86_64, this is $(uname -sm)"

# The collector's `rdma` feature (tests/tests/rdma_backend_vm.rs runs its binaries in the VM)
# builds against libibverbs-dev and librdmacm-dev; best effort, never changes this script's verdict.
[ $INSTALL = 1 ] && { bash "$HERE/../rdma-deps.sh" | sed 's/^/  /' >&2 || true; }

# Fast path: nothing to install, nothing to build.
if command -v qemu-system-x86_64 >/dev/null && "$HERE/build-image.sh" --check "$OUT" 2>/dev/null; then
  echo "rxe-vm: READY $OUT (up to date, $(elapsed)s)"
  exit 0
fi

# command -> Debian package that provides it (the build also needs the verbs header)
missing=()
for pair in qemu-system-x86_64:qemu-system-x86 cpio:cpio gcc:gcc depmod:kmod gzip:gzip xz:xz-utils \
            readelf:binutils sha256sum:coreutils flock:util-linux; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
[ -f /usr/include/infiniband/verbs.h ] || missing+=(libibverbs-dev)
[ -f /usr/include/stdio.h ] || missing+=(libc6-dev)
command -v apt-get >/dev/null || skip "no apt-get: the image is built from Debian packages"

lists_empty() { [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]; }

if [ ${#missing[@]} -gt 0 ]; then
  [ $INSTALL = 1 ] || skip "missing host packages: ${missing[*]} (run scripts/rxe-vm/prepare.sh as root)"
  [ "$(id -u)" = 0 ] || skip "missing host packages: ${missing[*]}, and not root to install them"
  if lists_empty; then
    echo "rxe-vm: apt-get update" >&2
    timeout 600 apt-get -o DPkg::Lock::Timeout=300 update -qq >&2 || skip "apt-get update failed (no network?)"
  fi
  echo "rxe-vm: apt-get install ${missing[*]}" >&2
  # the whole set, not only what was found missing: a package may be half-installed
  mapfile -t pkgs < <(printf '%s\n' qemu-system-x86 cpio gcc libc6-dev libibverbs-dev kmod gzip \
    xz-utils binutils "${missing[@]}" | sort -u)
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
    --no-install-recommends "${pkgs[@]}" >&2 ||
    skip "apt-get install of the VM's build packages failed (no network?)"
fi

# build-image.sh resolves and downloads the kernel and userspace .debs through apt.
if lists_empty; then
  [ $INSTALL = 1 ] && [ "$(id -u)" = 0 ] || skip "apt package lists are empty (run apt-get update as root)"
  timeout 600 apt-get -o DPkg::Lock::Timeout=300 update -qq >&2 || skip "apt-get update failed (no network?)"
fi

mkdir -p "$DIR" || skip "cannot create $DIR"
echo "rxe-vm: building the image into $OUT (log: $DIR/build.log)" >&2
build() { SKIP_APT=1 timeout 1200 "$HERE/build-image.sh" "$OUT" >"$DIR/build.log" 2>&1; }
if ! build; then
  # Stale package lists name .debs the mirror no longer has (a kernel ABI bump, say).
  if [ $INSTALL = 1 ] && [ "$(id -u)" = 0 ]; then
    echo "rxe-vm: build failed; apt-get update and one more try" >&2
    timeout 600 apt-get -o DPkg::Lock::Timeout=300 update -qq >&2 || true
  fi
  if ! { [ $INSTALL = 1 ] && [ "$(id -u)" = 0 ] && build; }; then
    tail -5 "$DIR/build.log" | sed 's/^/  build-image: /' >&2
    skip "building the image failed after $(elapsed)s (no network?), see $DIR/build.log"
  fi
fi
"$HERE/build-image.sh" --check "$OUT" || skip "build-image.sh succeeded but $OUT is not a complete image"
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 not found"
echo "rxe-vm: READY $OUT (prepared in $(elapsed)s)"
