#!/usr/bin/env bash
# Overload (issue 7, item 5): reporters at 2x the translator's [overload] messages_per_sec.
# Key-Write N=2 reports (2 RDMA messages each), a share of them high priority, the rest low.
# Checks: RDMA frames/s stays within 5% of the cap (steady window), low priority is shed
# (drop_overload_low) and high priority is not lost (no drop_backlog_full / drop_overload_*
# beyond low, and every high-priority key is in the collector), identity holds.
#   scripts/faults/overload.sh [CAP] [SECONDS]    (default 4000 messages/s, 10 s)
source "$(dirname "$0")/lib.sh"
preflight
CAP=${1:-4000}; SECS=${2:-10}
HIGH=${HIGH_SHARE:-0.4}
BURST=$((CAP / 10)) translator_config "$WORK/t.toml" "$CAP"
topology
# Key-Write overwrites a key whose hash collides with a later one's, by design: at 12 s
# (48 000 keys) one or two high-priority keys of this deterministic key sequence are lost that
# way, with 2^20 and with 2^22 slots alike (a full 32-bit hash collision), which says nothing
# about shedding. Runs up to 10 s (40 000 keys) have none; KW_SLOTS sizes the store.
collector_config "$WORK/c.toml"
start_collector "$WORK/c.toml"
start_translator "$WORK/t.toml"
RATE=$CAP   # reports/s; x2 messages each = 2x the cap
COUNT=$((RATE * SECS))
log "cap $CAP messages/s; $RATE Key-Write N=2 reports/s (= $((2 * RATE)) messages/s) for $SECS s, $HIGH high priority"
reporter --first 1 --count "$COUNT" --rate "$RATE" --kind kw --prio split --high-share "$HIGH" --linger 0.2 >"$WORK/load.json" &
LOAD=$!; PIDS+=("$LOAD")
# The steady window: from 2 s after the start to 2 s before the end (SECONDS - 4 s). The
# token bucket can exceed the rate by at most its burst (CAP/10 messages) over the window, so
# at 10 s (6 s window) the burst alone accounts for at most 1.7% of the 5% tolerance (2.5% at
# 8 s, where a run measured +4.4%).
sleep 2
f0=$(tstat 'c["frames"]'); r0=$(tstat 'c["rx_datagrams"]'); t0=$(date +%s%N)
sleep $((SECS - 4))
f1=$(tstat 'c["frames"]'); r1=$(tstat 'c["rx_datagrams"]'); t1=$(date +%s%N)
wait "$LOAD"; forget_pid "$LOAD"
echo "reporter: $(cat "$WORK/load.json")"
sleep 1
fps=$(python3 -c "print(round(($f1 - $f0) / (($t1 - $t0) / 1e9), 1))")
rps=$(python3 -c "print(round(($r1 - $r0) / (($t1 - $t0) / 1e9), 1))")
dev=$(python3 -c "print(round(100 * ($fps - $CAP) / $CAP, 2))")
echo "FIGURE offered $rps reports/s = $(python3 -c "print(2 * $rps)") messages/s; RDMA frames/s in the steady window: $fps (cap $CAP, deviation $dev%)"
# The cap is an upper bound: frames/s may not exceed it by more than 5%. Below it, the shed
# low-priority share and the shared CPU decide; under 90% of the cap is reported as a failure
# to use the budget.
check "cap holds within 5%" "$(python3 -c "import sys; sys.exit(0 if $fps <= 1.05 * $CAP else 1)"; echo $?)" "$fps frames/s vs $CAP"
check "the budget is used (>= 90% of the cap)" "$(python3 -c "import sys; sys.exit(0 if $fps >= 0.90 * $CAP else 1)"; echo $?)" "$fps frames/s vs $CAP"
check "offered load is about 2x the cap" "$(python3 -c "import sys; sys.exit(0 if 2 * $rps >= 1.8 * $CAP else 1)"; echo $?)" "$(python3 -c "print(2 * $rps)") messages/s"
id=$(identity); echo "accounting: $id"
check "identity" "$([[ $id == ok* ]]; echo $?)" "$id"
low=$(tstat 'c["drop_overload_low"]'); med=$(tstat 'c["drop_overload_medium"]'); bl=$(tstat 'c["drop_backlog_full"]'); q=$(tstat 'c["queued_high"]')
echo "FIGURE drop_overload_low=$low drop_overload_medium=$med drop_backlog_full=$bl queued_high=$q"
check "low priority shed, high never dropped" "$([ "$low" -gt 0 ] && [ "$bl" = 0 ] && [ "$med" = 0 ]; echo $?)" "low=$low backlog_full=$bl"
echo "FIGURE translator QPs: $(tcurl /stats | python3 -c 'import json,sys; print(json.dumps([q for w in json.load(sys.stdin)["workers"] for q in w["qps"]], separators=(",", ":")))')"
v=$(verify --first 1 --count "$COUNT" --kind kw --only-high "$HIGH" --kw-sample 100000)
echo "VERIFY high-priority keys: $v"
check "every high-priority report is in the collector" "$(python3 -c "import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if r['kw']['value']==r['kw_checked'] and r['kw_checked']>0 else 1)" "$v"; echo $?)" "$(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print(r['kw'], 'of', r['kw_checked'])" "$v")"
finish
