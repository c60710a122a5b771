#!/usr/bin/env bash
# Soak (issue 7, item 6): a short ramp finds the highest rate `dta gen` can push through the
# translator with nothing dropped, then it runs at that rate for SECONDS (default 600).
# Every SAMPLE seconds: VmRSS of both processes, the translator's accounting identity
# (rx = translated + dropped + pending) and the collector's RNIC counters. Checks: RSS flat
# within +-5% after warm-up (the first 20% of the run), identity at every sample, nothing
# dropped, and at the end every frame the translator sent was received by the collector.
#   scripts/faults/soak.sh [SECONDS] [RATE]    (RATE skips the ramp)
source "$(dirname "$0")/lib.sh"
crcvd() { ccurl /stats | python3 -c "import json,sys; print(json.load(sys.stdin)['rnic'].get('rcvd_pkts', -1))"; }
preflight
[ -x "$BIN/dta" ] || skip "$BIN/dta missing (cargo build --release -p dta-bench)"
DUR=${1:-600}; RATE=${2:-}
SAMPLE=${SAMPLE:-10}
MIX="kw=4,loss=2,cong=1"
topology
AP_CAPACITY=4096 collector_config "$WORK/c.toml"
translator_config "$WORK/t.toml"
start_collector "$WORK/c.toml"
start_translator "$WORK/t.toml"

if [ -z "$RATE" ]; then
    RAMP=${RAMP:-"10000 20000 40000 80000 160000"}
    for r in $RAMP; do
        d0=$(tstat 's["dropped"]'); x0=$(tstat 'c["rx_datagrams"]'); f0=$(tstat 'c["frames"]'); c0=$(crcvd)
        gen --mix "$MIX" --rate "$r" --count $((r * 5)) --seed "$r" >/dev/null 2>&1
        sleep 0.5
        d1=$(tstat 's["dropped"]'); x1=$(tstat 'c["rx_datagrams"]'); f1=$(tstat 'c["frames"]'); c1=$(crcvd)
        got=$((x1 - x0)); drops=$((d1 - d0)); fl=$((f1 - f0 - (c1 - c0)))
        echo "ramp: $r reports/s offered for 5 s: translator received $got of $((r * 5)), dropped $drops; frames not received by the collector $fl"
        if [ "$drops" = 0 ] && [ "$got" = $((r * 5)) ] && [ "$fl" -le 0 ]; then BEST=$r; else break; fi
    done
    # Half the highest clean step: the ramp's steps are short and the cores are shared.
    RATE=$(( ${BEST:-20000} / 2 ))
fi
log "soak: $RATE reports/s ($MIX) for $DUR s, sampling every $SAMPLE s"
d_start=$(tstat 's["dropped"]'); x_start=$(tstat 'c["rx_datagrams"]')
f_start=$(tstat 'c["frames"]'); c_start=$(crcvd)
gen --mix "$MIX" --rate "$RATE" --count $((RATE * DUR)) --seed 99 >"$WORK/gen.log" 2>&1 &
GEN=$!; PIDS+=("$GEN")
: >"$WORK/samples"
bad_id=0 n=0
t_end=$((SECONDS + DUR))
while [ $SECONDS -lt $t_end ] && kill -0 "$GEN" 2>/dev/null; do
    sleep "$SAMPLE"
    n=$((n + 1))
    id=$(identity)
    [[ $id == ok* ]] || bad_id=$((bad_id + 1))
    rt=$(rss_kb "$TRANSLATOR_PID"); rc=$(rss_kb "$COLLECTOR_PID")
    echo "$SECONDS $rt $rc $(tstat 'c["rx_datagrams"], c["translated"], s["dropped"], p' | tr -d '(),')" >>"$WORK/samples"
    echo "sample $n: t=${SECONDS}s rss translator=${rt} kB collector=${rc} kB; $id"
done
wait "$GEN" 2>/dev/null; forget_pid "$GEN"
sleep 1
x_end=$(tstat 'c["rx_datagrams"]'); d_end=$(tstat 's["dropped"]')
frames=$(( $(tstat 'c["frames"]') - f_start ))
crx=$(( $(crcvd) - c_start ))
sd=$(tstat 'sum(w["socket_drops"] for w in s["workers"])')
res=$(python3 - "$WORK/samples" <<'PY'
import sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
warm = max(1, len(rows) // 5)
out = []
for col, name in ((1, "translator"), (2, "collector")):
    ref = rows[warm][col] if len(rows) > warm else rows[-1][col]
    after = [r[col] for r in rows[warm:]] or [ref]
    dev = max(abs(v - ref) / ref for v in after) * 100
    out.append(f"{name}_rss_kb={int(ref)}..{int(max(after))} dev={dev:.2f}%")
print(" ".join(out))
print("ok" if all(float(x.split("dev=")[1].rstrip("%")) <= 5 for x in out) else "drift")
PY
)
echo "FIGURE soak $DUR s at $RATE reports/s: samples=$n received=$((x_end - x_start)) dropped=$((d_end - d_start)) identity_breaks=$bad_id translator_frames=$frames collector_rcvd_pkts=$crx translator_socket_drops=$sd; $(echo "$res" | head -1)"
check "RSS flat within 5% after warm-up" "$([ "$(echo "$res" | tail -1)" = ok ]; echo $?)" "$(echo "$res" | head -1)"
check "identity at every sample" "$([ "$bad_id" = 0 ] && [ "$n" -gt 0 ]; echo $?)" "$bad_id of $n samples broken"
check "nothing dropped at the sustained rate" "$([ $((d_end - d_start)) = 0 ]; echo $?)" "dropped $((d_end - d_start))"
check "received = sent" "$([ $((x_end - x_start)) = $((RATE * DUR)) ]; echo $?)" "$((x_end - x_start)) of $((RATE * DUR))"
check "collector received every RDMA frame sent during the soak" "$([ "$crx" -ge "$frames" ]; echo $?)" "frames=$frames rcvd_pkts=$crx"
id=$(identity); check "final identity, pending = 0" "$([[ $id == ok* ]] && [[ $id == *pending=0* ]]; echo $?)" "$id"
finish
