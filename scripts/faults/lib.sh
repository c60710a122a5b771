# Shared by the fault scripts: a reporter ↔ translator ↔ collector topology of three network
# namespaces joined by two veth pairs, the real binaries started in them, counters read from
# their HTTP endpoints, and a cleanup that always runs (trap EXIT).
#
#   R (reporter)  10.R.1.1  ──veth──  10.R.1.2  T (translator)  10.R.2.1  ──veth──  10.R.2.2  C (collector)
#
# Names carry the script's PID, so concurrent runs never collide.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${DTA_BIN:-$ROOT/target/release}
REPORTER="$ROOT/scripts/faults/reporter.py"
ID=$$
NS_R=dfr$ID NS_T=dft$ID NS_C=dfc$ID
IF_RT=dfrt$ID IF_TR=dftr$ID IF_TC=dftc$ID IF_CT=dfct$ID
SUB=$((ID % 200 + 20))
IP_R=10.$SUB.1.1 IP_TR=10.$SUB.1.2 IP_TC=10.$SUB.2.1 IP_C=10.$SUB.2.2
WORK=
PIDS=()
FAILS=0

skip() { echo "SKIP: $*"; exit 0; }
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
check() { # check NAME CONDITION-EXIT-CODE DETAIL
    if [ "$2" = 0 ]; then echo "PASS: $1 ($3)"; else echo "FAIL: $1 ($3)"; FAILS=$((FAILS + 1)); fi
}

# known_fail NAME DETAIL: a check that fails because of a reported translator/collector bug.
# Printed as KNOWN-FAIL; fails the script only with STRICT=1.
KNOWN=0
known_fail() {
    echo "KNOWN-FAIL: $1 ($2)"
    KNOWN=$((KNOWN + 1))
    [ -n "${STRICT:-}" ] && FAILS=$((FAILS + 1))
    return 0
}

# PIDS holds only children not yet waited for: once waited for, a PID may belong to someone
# else (pid_max is 32768 here, and builds churn through PIDs), so stop_pid and kill9_pid
# drop it; an exited child stays a zombie, its PID not reusable, until it is waited for.
forget_pid() {
    local p keep=()
    for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}

cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    sleep 0.3
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    ip netns del "$NS_R" 2>/dev/null || true
    ip netns del "$NS_T" 2>/dev/null || true
    ip netns del "$NS_C" 2>/dev/null || true
    [ -n "$WORK" ] || return 0
    if [ -n "${KEEP_LOGS:-}" ]; then echo "logs kept in $WORK"; else rm -rf "$WORK"; fi
}

preflight() {
    [ "$(id -u)" = 0 ] || skip "not root"
    command -v ip >/dev/null 2>&1 || skip "no ip(8)"
    command -v tc >/dev/null 2>&1 || skip "no tc(8)"
    command -v nft >/dev/null 2>&1 || skip "no nft(8) (scripts/faults/deps.sh installs it)"
    command -v python3 >/dev/null 2>&1 || skip "no python3"
    command -v curl >/dev/null 2>&1 || skip "no curl"
    for b in dta-collector dta-translator; do
        [ -x "$BIN/$b" ] || skip "$BIN/$b missing (cargo build --release -p dta-collector -p dta-translator -p dta-bench)"
    done
    trap cleanup EXIT
    trap 'exit 130' INT TERM
    WORK=$(mktemp -d /tmp/dta-faults.XXXXXX)
    # The collector's admin token: /stats shows QPNs only to admin (ccurl sends it).
    ( umask 077; head -c 24 /dev/urandom | base64 | tr -d '\n' >"$WORK/admin.token" )
}

topology() {
    ip netns add "$NS_R" && ip netns add "$NS_T" && ip netns add "$NS_C" || skip "cannot create namespaces"
    ip link add "$IF_RT" netns "$NS_R" type veth peer name "$IF_TR" netns "$NS_T" || skip "no veth"
    ip link add "$IF_TC" netns "$NS_T" type veth peer name "$IF_CT" netns "$NS_C" || skip "no veth"
    ip -n "$NS_R" addr add "$IP_R/24" dev "$IF_RT"
    ip -n "$NS_T" addr add "$IP_TR/24" dev "$IF_TR"
    ip -n "$NS_T" addr add "$IP_TC/24" dev "$IF_TC"
    ip -n "$NS_C" addr add "$IP_C/24" dev "$IF_CT"
    for n in "$NS_R" "$NS_T" "$NS_C"; do ip -n "$n" link set lo up; done
    ip -n "$NS_R" link set "$IF_RT" up
    ip -n "$NS_T" link set "$IF_TR" up
    ip -n "$NS_T" link set "$IF_TC" up
    ip -n "$NS_C" link set "$IF_CT" up
    for n in "$NS_R" "$NS_T" "$NS_C"; do
        ip netns exec "$n" sysctl -qw net.core.rmem_max=33554432 net.core.wmem_max=33554432 2>/dev/null || true
    done
    # Wait for the veths' carrier (DAD is irrelevant for IPv4, but the link must be up).
    ip netns exec "$NS_R" ping -c1 -W2 "$IP_TR" >/dev/null 2>&1 || true
    ip netns exec "$NS_T" ping -c1 -W2 "$IP_C" >/dev/null 2>&1 || true
}

# collector_config FILE [persist_dir]
collector_config() {
    cat >"$1" <<EOT
[collector]
roce = "$IP_C:4791"
control = "127.0.0.1:14791"
hugepages = false
verify_icrc = true
cm_allow = ["$IP_TC"]
admin_token_file = "$WORK/admin.token"
$( [ -n "${2:-}" ] && echo "persist_dir = \"$2\"" )

[[store]]
name = "kw"
kind = "keywrite"
slots = ${KW_SLOTS:-1048576}
slot_size = 32

[[store]]
name = "ap"
kind = "append"
lists = 16
capacity = ${AP_CAPACITY:-65536}
entry_size = 20
batch = 16
EOT
}

# translator_config FILE [messages_per_sec]
translator_config() {
    cat >"$1" <<EOT
[translator]
listen = "$IP_TR:40040"
roce = "$IP_TC:4791"
metrics = "127.0.0.1:14792"
workers = 1
socket_buffer = 16777216
retransmit_window = ${RETX_WINDOW:-1024}

[reliability]
ack_every = ${ACK_EVERY:-64}
ack_timeout_us = ${ACK_TIMEOUT_US:-20000}
broken_after_ms = ${BROKEN_AFTER_MS:-5000}

[overload]
messages_per_sec = ${2:-0}
burst = ${BURST:-4096}

[[collector]]
name = "c1"
cm = "$IP_C:4791"
ports = [1337, 1338]
connect_timeout_secs = 10

[routing]
keywrite = "single:kw"
keyincrement = "none"
postcard = "none"
EOT
}

start_collector() { # start_collector CONFIG
    ip netns exec "$NS_C" env RUST_LOG=${RUST_LOG:-info} "$BIN/dta-collector" run -c "$1" >>"$WORK/collector.log" 2>&1 &
    COLLECTOR_PID=$!
    PIDS+=("$COLLECTOR_PID")
    local i
    for i in $(seq 100); do
        ccurl /stats >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "collector did not start:"; tail -20 "$WORK/collector.log"; exit 1
}

start_translator() { # start_translator CONFIG
    ip netns exec "$NS_T" env RUST_LOG=${RUST_LOG:-info} "$BIN/dta-translator" -c "$1" >>"$WORK/translator.log" 2>&1 &
    TRANSLATOR_PID=$!
    PIDS+=("$TRANSLATOR_PID")
    local i
    for i in $(seq 150); do
        tcurl /stats >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "translator did not start:"; tail -20 "$WORK/translator.log"; exit 1
}

stop_pid() { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null || true; forget_pid "$1"; }
kill9_pid() { kill -9 "$1" 2>/dev/null; wait "$1" 2>/dev/null || true; forget_pid "$1"; }

ccurl() { ip netns exec "$NS_C" curl -sf --max-time 5 -H "Authorization: Bearer $(cat "$WORK/admin.token")" "http://127.0.0.1:14791$1"; }
tcurl() { ip netns exec "$NS_T" curl -sf --max-time 5 "http://127.0.0.1:14792$1"; }

# tstat EXPR: a Python expression over the translator's /stats JSON (c = counters, s = whole).
tstat() {
    tcurl /stats | python3 -c "import json,sys; s=json.load(sys.stdin); c=s['counters']; p=sum(w['pending'] for w in s['workers']); print($1)"
}
# The accounting identity: rx_datagrams = translated + dropped (by reason) + pending. Prints
# "ok ..." or "broken ...".
identity() {
    tcurl /stats | python3 -c '
import json, sys
s = json.load(sys.stdin); c = s["counters"]; p = sum(w["pending"] for w in s["workers"])
drops = {k: v for k, v in c.items() if k.startswith("drop_") and v}
lhs, rhs = c["rx_datagrams"], c["translated"] + s["dropped"] + p
print(("ok" if lhs == rhs else "broken"), "rx=%d translated=%d dropped=%d pending=%d drops=%s" % (lhs, c["translated"], s["dropped"], p, json.dumps(drops, separators=(",", ":"))))'
}
# settled_identity [SECONDS]: the identity once nothing is pending (polled every 0.2 s, up to
# SECONDS, default 10), so a loaded machine that drains slowly does not fail the check.
settled_identity() {
    local id end=$((SECONDS + ${1:-10}))
    while :; do
        id=$(identity)
        if [[ $id == ok* && $id == *pending=0* ]] || [ $SECONDS -ge $end ]; then
            echo "$id"; return 0
        fi
        sleep 0.2
    done
}
# tmetric NAME: the sum of a translator Prometheus family (max for *_max_ns and *_max_seconds;
# seconds are printed as integer microseconds).
tmetric() {
    tcurl /metrics | awk -v n="$1" '$1 ~ "^"n"(_total)?([{]|$)" { v = $2 + 0; if (n ~ /_seconds/) v = v * 1e6; if (n ~ /max_(ns|seconds)$/) { if (v > m) m = v } else m += v } END { printf "%d\n", m }'
}
cmetric() {
    ccurl /metrics | awk -v n="$1" '$1 ~ "^"n"(_total)?([{]|$)" { m += $2 } END { printf "%d\n", m }'
}
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

# This kernel has no sch_netem (tc qdisc ... netem: "Specified qdisc kind is unknown"), so
# faults on a link are an nftables netdev egress chain (random loss and duplication with
# numgen) plus a tbf qdisc for queueing delay; the reporter link also has a user-space proxy
# (faultproxy.py) for loss, reordering, duplication and delay with per-report bookkeeping.
#   fault NS DEV LOSS_PER_MILLE DUP_PER_MILLE [DELAY_MS]   ;   fault_clear NS DEV
fault() {
    local ns=$1 dev=$2 loss=$3 dup=$4 delay=${5:-0}
    ip netns exec "$ns" nft delete table netdev "f$dev" 2>/dev/null || true
    ip netns exec "$ns" nft -f - <<EOT
table netdev f$dev {
  chain eg {
    type filter hook egress device "$dev" priority 0; policy accept;
    udp dport 4791 numgen random mod 1000 < $loss counter drop
    udp dport 4791 numgen random mod 1000 < $dup counter dup to "$dev"
  }
}
EOT
    if [ "$delay" != 0 ]; then
        # A 20 Mbit/s token bucket with a queue of DELAY_MS: bursts wait up to that long.
        ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate 20mbit burst 4kb latency "${delay}ms"
    fi
}
fault_clear() {
    ip netns exec "$1" nft delete table netdev "f$2" 2>/dev/null || true
    ip netns exec "$1" tc qdisc del dev "$2" root 2>/dev/null || true
}
# fault_count NS DEV: "dropped duplicated" packet counters of the chain.
fault_count() {
    ip netns exec "$1" nft list table netdev "f$2" 2>/dev/null | awk '/counter packets/ { for (i = 1; i <= NF; i++) if ($i == "packets") printf "%s ", $(i+1) } END { print "" }'
}

reporter() { ip netns exec "$NS_R" python3 "$REPORTER" send --target "${REPORT_TARGET:-$IP_TR:40040}" --nack-bind "$IP_R:40044" "$@"; }
verify() { ip netns exec "$NS_C" python3 "$REPORTER" verify --control 127.0.0.1:14791 "$@"; }
# proxy_start ARGS...: the reporter-side fault proxy on 127.0.0.1:40050 (REPORT_TARGET);
# proxy_stop prints its JSON summary.
proxy_start() {
    ip netns exec "$NS_R" python3 "$ROOT/scripts/faults/faultproxy.py" --listen 127.0.0.1:40050 \
        --target "$IP_TR:40040" --source "$IP_R" "$@" >"$WORK/proxy.out" 2>&1 &
    PROXY_PID=$!
    PIDS+=("$PROXY_PID")
    REPORT_TARGET=127.0.0.1:40050
    sleep 0.3
}
proxy_heal() { kill -USR1 "$PROXY_PID"; sleep 0.2; }
proxy_stop() { kill "$PROXY_PID" 2>/dev/null; wait "$PROXY_PID" 2>/dev/null; forget_pid "$PROXY_PID"; unset REPORT_TARGET; tail -1 "$WORK/proxy.out"; }
# `dta gen --target` binds its socket to 127.0.0.1, so it cannot leave its namespace: it runs
# in the translator's namespace and reaches the report port over lo.
gen() { ip netns exec "$NS_T" "$BIN/dta" gen --target "$IP_TR:40040" "$@"; }

finish() {
    if [ "$FAILS" = 0 ]; then echo "RESULT: PASS ($KNOWN known failures)"; exit 0; fi
    echo "RESULT: FAIL ($FAILS checks)"
    echo "--- translator log (tail)"; tail -15 "$WORK/translator.log"
    echo "--- collector log (tail)"; tail -15 "$WORK/collector.log"
    exit 1
}
