#!/usr/bin/env bash
# Network faults (issue 7, item 3): random loss, duplication and delay on the translator↔collector
# link (nftables + tbf: this kernel has no sch_netem), then loss, reordering, duplication and delay
# on the reporter→translator link (faultproxy.py).
# Checks: QPs never stall (reports written after every fault is removed), recovery time
# (translator qp_recovery_max_seconds), frames resent per frame lost, NACKs name exactly the reports the network dropped, the
# accounting identity rx = translated + dropped + pending (pending = 0 at the end), the
# collector holds no malformed entry, and lost RDMA writes are retransmitted: no Append batch
# is left unwritten (no hole) unless the QP's retransmission window was overrun
# (qp_retx_overruns, counted in qp_psn_skipped).
#   scripts/faults/loss.sh [--quick]     (root; prints SKIP otherwise)
#   RETX_WINDOW=0 scripts/faults/loss.sh  (no retransmission: the pre-ring behaviour)
source "$(dirname "$0")/lib.sh"
preflight
QUICK=${1:-}
N=${N:-3000}; RATE=${RATE:-3000}
[ "$QUICK" = --quick ] && { N=1500; RATE=3000; }
topology
collector_config "$WORK/c.toml"
translator_config "$WORK/t.toml"
start_collector "$WORK/c.toml"
start_translator "$WORK/t.toml"
SEQ=1

# send_phase N RATE [extra reporter args]: seqs SEQ..SEQ+N-1
send_phase() {
    local n=$1 rate=$2; shift 2
    reporter --first "$SEQ" --count "$n" --rate "$rate" --kind mix --linger 0.3 "$@"
    SEQ=$((SEQ + n))
}
# recovered: after faults are removed, 500 more reports must be written within 5 s.
recovered() {
    local before after t0 t1
    before=$(tstat 'c["translated"]')
    t0=$(date +%s%N)
    send_phase 500 5000 --nack-log "$WORK/ignored" >/dev/null
    for _ in $(seq 100); do
        after=$(tstat 'c["translated"]')
        [ $((after - before)) -ge 450 ] && break
        sleep 0.05
    done
    t1=$(date +%s%N)
    echo "$((after - before)) $(((t1 - t0) / 1000000))"
}

log "baseline (no fault): $N reports at $RATE/s"
send_phase "$N" "$RATE" >/dev/null
sleep 0.5
id=$(identity); check "baseline identity" "$([[ $id == ok* ]]; echo $?)" "$id"

# T<->C faults: "label|loss per mille|dup per mille|delay ms", on both directions of the link
# (RDMA frames and their ACKs).
FAULTS=(
    "loss 0.1%|1|0|0"
    "loss 1%|10|0|0"
    "loss 5%|50|0|0"
    "duplicate 5%|0|50|0"
    "delay (20 Mbit/s tbf, 10 ms queue)|0|0|10"
    "loss 2% + duplicate 2%|20|20|0"
)
[ "$QUICK" = --quick ] && FAULTS=("loss 1%|10|0|0" "loss 5%|50|0|0" "duplicate 5%|0|50|0")
for f in "${FAULTS[@]}"; do
    IFS='|' read -r label loss dup delay <<<"$f"
    r0=$(tmetric dta_translator_qp_recoveries); to0=$(tmetric dta_translator_qp_ack_timeouts)
    rt0=$(tmetric dta_translator_qp_retransmitted_frames); re0=$(tmetric dta_translator_qp_retransmit_events)
    tr0=$(tstat 'c["translated"]'); d0=$(tstat 's["dropped"]')
    fault "$NS_T" "$IF_TC" "$loss" "$dup" "$delay"
    fault "$NS_C" "$IF_CT" "$loss" "$dup" "$delay"
    send_phase "$N" "$RATE" >/dev/null
    fc="frames lost/duplicated: $(fault_count "$NS_T" "$IF_TC")acks lost/duplicated: $(fault_count "$NS_C" "$IF_CT")"
    fault_clear "$NS_T" "$IF_TC"; fault_clear "$NS_C" "$IF_CT"
    read -r rec ms < <(recovered)
    sleep 0.3
    r1=$(tmetric dta_translator_qp_recoveries); to1=$(tmetric dta_translator_qp_ack_timeouts)
    rt1=$(tmetric dta_translator_qp_retransmitted_frames); re1=$(tmetric dta_translator_qp_retransmit_events)
    tr1=$(tstat 'c["translated"]'); d1=$(tstat 's["dropped"]')
    mx=$(tmetric dta_translator_qp_recovery_max_seconds)
    id=$(identity)
    lost=$(echo "$fc" | awk '{print $3}')
    ratio=$(awk -v r="$((rt1 - rt0))" -v l="$lost" 'BEGIN { if (l > 0) printf "%.2f", r / l; else print "-" }')
    echo "FIGURE T<->C [$label]: $fc; translated=$((tr1 - tr0)) dropped=$((d1 - d0)) recoveries=$((r1 - r0)) retransmit_events=$((re1 - re0)) retransmitted_frames=$((rt1 - rt0)) (resent/lost=$ratio) ack_timeouts=$((to1 - to0)) recovery_max_us(so far)=$mx recovered=$rec/500 in ${ms}ms"
    check "T<->C [$label]: QP recovers after the fault" "$([ "$rec" -ge 450 ]; echo $?)" "$rec of 500 written ${ms} ms after removal"
    check "T<->C [$label]: identity" "$([[ $id == ok* ]]; echo $?)" "$id"
done

# Reporter->translator faults through the proxy. NACKs must name exactly the reports the
# network dropped (plus, with reordering, the ones held back: they leave a gap when they are
# NACKed, and arrive late).
# nack_run LABEL PROXY-ARGS...
nack_run() {
    local label=$1; shift
    local first=$SEQ rx0 rx1 sent px
    : >"$WORK/nacks"
    rx0=$(tstat 'c["rx_datagrams"]')
    proxy_start --dropped-log "$WORK/dropped" --reordered-log "$WORK/reordered" "$@"
    send_phase "$N" "$RATE" --nack-log "$WORK/nacks" >/dev/null
    sleep 0.3
    proxy_heal
    # A clean fence report (same reporter: through the healed proxy) closes any gap at the tail.
    send_phase 1 0 --nack-log "$WORK/nacks" --linger 0.5 >/dev/null
    rx1=$(tstat 'c["rx_datagrams"]')
    sent=$((SEQ - first))
    sort -un "$WORK/nacks" >"$WORK/nacked.set"
    cat "$WORK/dropped" "$WORK/reordered" | sort -un >"$WORK/expected.set"
    local nacked listed expected diff
    nacked=$(wc -l <"$WORK/nacked.set"); listed=$(wc -l <"$WORK/nacks")
    expected=$(wc -l <"$WORK/expected.set")
    diff=$(comm -3 "$WORK/nacked.set" "$WORK/expected.set" | wc -l)
    echo "FIGURE R->T [$label]: sent=$sent translator_rx=$((rx1 - rx0)) nacked=$nacked (listed $listed) dropped+held=$expected set_difference=$diff"
    if [ -n "${TOLERANCE:-}" ]; then
        # Heavy delay jitter: the proxy's send order stands in for arrival order, which the
        # kernel may still shuffle; a set difference up to 0.1% is tolerated and reported.
        check "R->T [$label]: NACKs name the dropped and overtaken reports (within 0.1%)" \
            "$([ $((diff * 1000)) -le "$expected" ] && [ "$listed" = "$nacked" ] && [ "$nacked" -gt 0 ]; echo $?)" "nacked=$nacked expected=$expected difference=$diff"
    else
        check "R->T [$label]: NACKs name exactly the dropped (and overtaken) reports" \
            "$([ "$diff" = 0 ] && [ "$listed" = "$nacked" ] && [ "$nacked" -gt 0 ]; echo $?)" "nacked=$nacked expected=$expected difference=$diff"
    fi
    rtx=$(reporter --first "$SEQ" --count 0 --retransmit "$WORK/nacked.set" --kind mix --rate 2000 --linger 0.3)
    px=$(proxy_stop)
    echo "retransmission of the NACKed reports: $rtx; proxy: $px"
    # Wait for the retransmissions to land (a loaded machine may take longer than the first
    # look): re-read until complete, up to 6 looks.
    for _ in 1 2 3 4 5 6; do
        sleep 1
        res=$(verify --first "$first" --count "$sent" --kind mix --kw-sample 400)
        python3 -c "import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if r['append_missing']==0 and r['kw']['empty']==0 else 1)" "$res" && break
    done
    echo "VERIFY R->T [$label] range after retransmission: $res"
    check "R->T [$label]: every report landed after retransmission" "$(python3 -c "import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if r['append_missing']==0 and r['kw']['wrong']==0 and r['kw']['conflict']==0 and r['kw']['empty']==0 else 1)" "$res"; echo $?)" "missing=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['append_missing'])" "$res")"
}
nack_run "loss 2%" --loss 0.02
[ "$QUICK" = --quick ] || nack_run "loss 0.1%" --loss 0.001
nack_run "loss 1% + reorder 2% + duplicate 1%" --loss 0.01 --reorder 0.02 --dup 0.01 --seed 11
[ "$QUICK" = --quick ] || nack_run "delay 5 ms +-50% (reorders) + loss 1%" --loss 0.01 --delay-ms 5 --seed 13

id=$(settled_identity 15)
check "final identity, pending = 0" "$([[ $id == ok* ]] && [[ $id == *pending=0* ]]; echo $?)" "$id"
res=$(verify --first 1 --count "$((SEQ - 1))" --kind mix --kw-sample 1500)
echo "VERIFY all: $res"
check "collector memory holds no malformed entry" "$(python3 -c "import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if r['append_malformed']==0 and r['append_foreign']==0 and r['kw']['wrong']==0 and r['kw']['conflict']==0 else 1)" "$res"; echo $?)" "$res"
holes=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['append_holes'])" "$res")
missing=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['append_missing'])" "$res")
skipped=$(tmetric dta_translator_qp_psn_skipped)
overruns=$(tmetric dta_translator_qp_retx_overruns)
echo "FIGURE frames sent but never executed (qp_psn_skipped)=$skipped; retransmission window overruns=$overruns; retransmitted frames=$(tmetric dta_translator_qp_retransmitted_frames) in $(tmetric dta_translator_qp_retransmit_events) rounds; Append entries missing=$missing; batches never written (holes)=$holes"
if [ "${RETX_WINDOW:-1024}" = 0 ]; then
    # No retransmission: lost batches stay holes (finding 1 of docs/reliability.md).
    [ "$holes" -gt 0 ] && known_fail "Append holes without retransmission (RETX_WINDOW=0)" "$holes holes"
else
    check "lost RDMA writes are retransmitted: no Append hole without a window overrun" "$([ "$holes" -eq 0 ] || [ "$overruns" -gt 0 ]; echo $?)" "holes=$holes overruns=$overruns skipped=$skipped"
fi
echo "FIGURE recovery_max_us=$(tmetric dta_translator_qp_recovery_max_seconds) recoveries=$(tmetric dta_translator_qp_recoveries) ack_timeouts=$(tmetric dta_translator_qp_ack_timeouts) reconnects=$(tmetric dta_translator_reconnects) late=$(tstat 'c["reporter_late"]') nacks_sent=$(tstat 'c["nacks_sent"]')"
finish
