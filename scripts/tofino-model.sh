#!/usr/bin/env bash
# Runs one compiled Tofino build on Intel's Tofino model: a network namespace of its own, a veth
# pair per device port, `tofino-model` and `bf_switchd` (BF-RT, bfshell server on port 9999),
# then COMMAND inside the namespace; tears everything down on exit, failure or signal.
#
#   scripts/tofino-model.sh BUILD_DIR [DEV_PORT...] [-- COMMAND [ARG...]]
#
#   BUILD_DIR  a bf-p4c output directory (`P4_OUT=dir scripts/p4-check.sh` keeps one per build):
#              its <program>.conf names bf-rt.json, context.json and tofino.bin of each pipe;
#              without one (p4-check.sh runs p4c-barefoot and bfas, not the bf-p4c driver) it
#              is written with p4c-gen-conf from PATH or $P4C_BUILD.
#   DEV_PORT   device ports to give a veth pair (default: 0 136, a report port on pipe 0 and a
#              collector port on pipe 1). Port p gets model side veth<2i> and test side
#              veth<2i+1>, i its position in the list.
#   COMMAND    runs in the namespace with DTA_TF_NETNS, DTA_TF_PORTS ("port=veth,..." of the
#              test sides), SDE, SDE_INSTALL set; `$SDE_INSTALL/bin/bfshell -b script.py` there
#              talks to this bf_switchd. Without COMMAND the script waits until interrupted.
#
# Environment: SDE_INSTALL (default /opt/bf-sde/install: tofino-model, bf_switchd, bfshell under
# bin/), TF_LOG_DIR (default: a temporary directory, removed on exit; model and switchd logs),
# TF_START_TIMEOUT (seconds for the model and switchd to come up, default 300).
#
# Prints "SKIP: reason" and exits 0 when the model, the driver or the privileges for network
# namespaces are missing (p4/README.md, "Tofino model", says how to build them). Otherwise the
# exit status is COMMAND's, or 1 when the model or the driver did not start.
set -u

SDE_INSTALL=${SDE_INSTALL:-/opt/bf-sde/install}
SDE=${SDE:-$(dirname "$SDE_INSTALL")}
TF_START_TIMEOUT=${TF_START_TIMEOUT:-300}

skip() {
    echo "SKIP: tofino-model: $*"
    exit 0
}

die() {
    echo "tofino-model.sh: $*" >&2
    exit 1
}

[ $# -ge 1 ] || die "usage: scripts/tofino-model.sh BUILD_DIR [DEV_PORT...] [-- COMMAND...]"
BUILD_DIR=$(cd "$1" 2>/dev/null && pwd) || die "no build directory $1"
shift
PORTS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    PORTS+=("$1")
    shift
done
[ $# -gt 0 ] && shift   # the "--"
[ ${#PORTS[@]} -gt 0 ] || PORTS=(0 136)

for bin in tofino-model bf_switchd bfshell; do
    [ -x "$SDE_INSTALL/bin/$bin" ] || skip "$SDE_INSTALL/bin/$bin not installed (p4/README.md, \"Tofino model\")"
done
[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip > /dev/null || skip "iproute2 (ip) not installed"
CONF=$(ls "$BUILD_DIR"/*.conf 2>/dev/null | head -1)
if [ -z "$CONF" ]; then
    # p4-check.sh runs p4c-barefoot and bfas, not the bf-p4c driver, which would also write
    # <program>.conf: write it with the compiler's own p4c-gen-conf (Tofino-1: pipeline i of n
    # gets pipes i, i+n, ...), pipelines in the order the compiler's manifest lists them.
    GEN=$(command -v p4c-gen-conf || true)
    [ -z "$GEN" ] && [ -n "${P4C_BUILD:-}" ] && [ -x "$P4C_BUILD/p4c-gen-conf" ] && GEN=$P4C_BUILD/p4c-gen-conf
    [ -n "$GEN" ] || die "$BUILD_DIR has no <program>.conf and p4c-gen-conf is not found (set P4C_BUILD)"
    read -r PROG PIPES < <(python3 - "$BUILD_DIR" <<'PY'
import json, os, sys
d = sys.argv[1]
name = os.path.basename(d).rsplit("-", 1)[0]
pipes = [p for p in sorted(os.listdir(d)) if os.path.isfile(os.path.join(d, p, "context.json"))]
try:
    with open(os.path.join(d, "manifest.json")) as f:
        m = json.load(f)
    name = m.get("programs", [{}])[0].get("program_name", name).removesuffix(".p4")
    order = [p["pipe_name"] for p in m["programs"][0]["pipes"]]
    pipes = [p for p in order if p in pipes] or pipes
except (OSError, KeyError, IndexError, ValueError):
    pipes.sort(key=lambda p: (p != "pipe", p))
print(name, " ".join(pipes))
PY
)
    [ -n "$PIPES" ] || die "$BUILD_DIR has no pipe directory with context.json"
    python3 "$GEN" --conf-type BF-RT --device tofino --name "$PROG" --outputdir "$BUILD_DIR" \
        --installdir "$BUILD_DIR" --bfrt-name "$BUILD_DIR/bf-rt.json" --p4-version p4-16 \
        --pipe $PIPES > /dev/null || die "p4c-gen-conf failed for $BUILD_DIR"
    CONF=$BUILD_DIR/$PROG.conf
    [ -f "$CONF" ] || die "p4c-gen-conf wrote no $CONF"
fi

NS=dta-tf-$$
WORK=$(mktemp -d /tmp/dta-tofino-model.XXXXXX)
LOG_DIR=${TF_LOG_DIR:-$WORK/log}
mkdir -p "$LOG_DIR"
PIDS=()

cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2> /dev/null
    done
    for pid in "${PIDS[@]}"; do
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            kill -0 "$pid" 2> /dev/null || break
            sleep 0.5
        done
        kill -9 "$pid" 2> /dev/null
        wait "$pid" 2> /dev/null
    done
    # Anything still running in the namespace was started by us (tofino-model and bf_switchd
    # fork helpers); the namespace goes with it, and the veths with the namespace.
    if ip netns list 2> /dev/null | grep -qw "$NS"; then
        for pid in $(ip netns pids "$NS" 2> /dev/null); do
            kill -9 "$pid" 2> /dev/null
        done
        ip netns del "$NS" 2> /dev/null
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$NS" || die "ip netns add $NS failed"
ip -n "$NS" link set lo up
map=""
test_ports=""
for i in "${!PORTS[@]}"; do
    a=veth$((2 * i))
    b=veth$((2 * i + 1))
    ip -n "$NS" link add "$a" type veth peer name "$b" || die "veth pair $a/$b failed"
    for v in "$a" "$b"; do
        ip netns exec "$NS" sysctl -qw "net.ipv6.conf.$v.disable_ipv6=1" > /dev/null 2>&1
        ip -n "$NS" link set "$v" mtu 10240 up
    done
    map+="${map:+,}{\"device_port\": ${PORTS[$i]}, \"veth1\": $((2 * i)), \"veth2\": $((2 * i + 1))}"
    test_ports+="${test_ports:+,}${PORTS[$i]}=$b"
done
echo "{\"PortToVeth\": [$map]}" > "$LOG_DIR/ports.json"

export SDE SDE_INSTALL
export LD_LIBRARY_PATH="$SDE_INSTALL/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$SDE_INSTALL/bin:$PATH"

# Prints the logs' tails and fails (the log directory goes at exit unless TF_LOG_DIR names it).
fail_start() {
    tail -n 20 "$LOG_DIR"/*.log >&2 2> /dev/null
    die "$*"
}

# Waits until TCP port $2 listens in the namespace while process $1 lives.
wait_listen() {
    local pid=$1 port=$2 what=$3 t=0
    while [ "$t" -lt "$TF_START_TIMEOUT" ]; do
        kill -0 "$pid" 2> /dev/null || fail_start "$what exited"
        if ip netns exec "$NS" ss -Hltn "sport = :$port" 2> /dev/null | grep -q LISTEN; then
            return 0
        fi
        sleep 1
        t=$((t + 1))
    done
    fail_start "$what did not listen on port $port within ${TF_START_TIMEOUT}s"
}

# Chip type 2 is Tofino-1 (open-p4studio run_tofino_model.sh, --arch tofino).
ip netns exec "$NS" "$SDE_INSTALL/bin/tofino-model" --chip-type 2 -d 1 -f "$LOG_DIR/ports.json" \
    --p4-target-config "$CONF" --install-dir "$SDE_INSTALL" --log-dir "$LOG_DIR" \
    > "$LOG_DIR/model.log" 2>&1 &
PIDS+=($!)
# The model's packet and driver-access server (bf_switchd's DMA simulation, --tcp-port-base
# default 8001).
wait_listen "${PIDS[0]}" 8001 tofino-model

ip netns exec "$NS" "$SDE_INSTALL/bin/bf_switchd" --install-dir "$SDE_INSTALL" \
    --conf-file "$CONF" --background > "$LOG_DIR/switchd.log" 2>&1 &
PIDS+=($!)
wait_listen "${PIDS[1]}" 9999 bf_switchd
echo "tofino-model: up in namespace $NS (ports $test_ports; logs $LOG_DIR)"

if [ $# -eq 0 ]; then
    echo "tofino-model: Ctrl-C stops the model and the driver"
    while kill -0 "${PIDS[0]}" 2> /dev/null && kill -0 "${PIDS[1]}" 2> /dev/null; do
        sleep 1
    done
    fail_start "the model or the driver exited"
fi
ip netns exec "$NS" env DTA_TF_NETNS="$NS" DTA_TF_PORTS="$test_ports" "$@"
exit $?
