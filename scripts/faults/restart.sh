#!/usr/bin/env bash
# Restarts under load (issue 7, item 4; finding 2 checked: Append data survives a translator
# restart). The collector keeps its regions in files
# (persist_dir on tmpfs, /dev/shm); it is killed (SIGKILL) and restarted while a reporter
# sends, then the translator is. Checks: the translator reconnects through RDMA_CM with a new
# QP (reconnects counter, new QPN), the collector replaces the old QP (cm_replaced, one QP per
# store afterwards), data written before each restart stays queryable, reports flow again.
#   scripts/faults/restart.sh            (root; prints SKIP otherwise)
source "$(dirname "$0")/lib.sh"
preflight
topology
PERSIST=/dev/shm/dta-faults-$ID
mkdir -p "$PERSIST"
trap 'cleanup; rm -rf "$PERSIST"' EXIT
collector_config "$WORK/c.toml" "$PERSIST"
translator_config "$WORK/t.toml"
start_collector "$WORK/c.toml"
start_translator "$WORK/t.toml"
RATE=${RATE:-2000}

cqps() { ccurl /stats | python3 -c "import json,sys; print(' '.join(hex(q['qpn']) for q in json.load(sys.stdin)['qps']))"; }
tqps() { tcurl /stats | python3 -c "import json,sys; print(' '.join(hex(q['qpn']) for w in json.load(sys.stdin)['workers'] for q in w['qps']))"; }
# wait_flowing SECONDS: until translated grows by 200 with no new drop, or time runs out.
wait_flowing() {
    local t0 end=$((SECONDS + $1)) a b
    t0=$(date +%s%N)
    a=$(tstat 'c["translated"]')
    while [ $SECONDS -lt $end ]; do
        sleep 0.1
        b=$(tstat 'c["translated"] - 0' 2>/dev/null || echo "$a")
        if [ $((b - a)) -ge 200 ]; then echo $((($(date +%s%N) - t0) / 1000000)); return 0; fi
    done
    echo -1
}

log "phase 1: 4000 reports before any restart"
reporter --first 1 --count 4000 --rate "$RATE" --kind mix >/dev/null
sleep 0.5
v1=$(verify --first 1 --count 4000 --kind mix --kw-sample 1000)
echo "VERIFY before restarts: $v1"
QP0=$(cqps); TQ0=$(tqps)
echo "collector QPs: $QP0; translator QPs: $TQ0"

log "phase 2: load (seqs 4001..) while the collector is killed and restarted"
reporter --first 4001 --count $((RATE * 12)) --rate "$RATE" --kind mix --linger 0.2 >"$WORK/load1.json" &
LOAD=$!; PIDS+=("$LOAD")
sleep 2
kill9_pid "$COLLECTOR_PID"
log "collector killed (SIGKILL)"
sleep 1
rc0=$(tmetric dta_translator_reconnects)
start_collector "$WORK/c.toml"
t_start=$(date +%s%N)
log "collector restarted"
v=$(verify --first 1 --count 4000 --kind mix --kw-sample 1000)
echo "VERIFY phase-1 data right after the collector restart: $v"
check "collector restart: data written before it is queryable" "$(python3 -c "import json,sys; a=json.loads(sys.argv[1]); b=json.loads(sys.argv[2]); sys.exit(0 if a['append_missing']==b['append_missing'] and a['kw']==b['kw'] and a['append_malformed']==0 else 1)" "$v1" "$v"; echo $?)" "before: missing=$(echo "$v1" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["append_missing"], r["kw"])') after: $(echo "$v" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["append_missing"], r["kw"])')"
ms=-1
for _ in $(seq 300); do
    rc=$(tmetric dta_translator_reconnects)
    [ "$rc" -gt "$rc0" ] && [ -n "$(cqps)" ] && { ms=$((($(date +%s%N) - t_start) / 1000000)); break; }
    sleep 0.1
done
fl=$(wait_flowing 20)
QP1=$(cqps); TQ1=$(tqps)
echo "FIGURE collector restart: translator reconnected after ${ms} ms, reports written again after another ${fl} ms; collector QPs $QP0 -> $QP1; translator QPs $TQ0 -> $TQ1; reconnects=$(tmetric dta_translator_reconnects)"
check "collector restart: translator reconnects over RDMA_CM" "$([ "$ms" -ge 0 ] && [ "$fl" -ge 0 ]; echo $?)" "reconnected in ${ms} ms, flowing ${fl} ms later"
check "collector restart: new QPs" "$([ "$TQ1" != "$TQ0" ] && [ -n "$QP1" ]; echo $?)" "translator $TQ0 -> $TQ1"
wait "$LOAD" 2>/dev/null; forget_pid "$LOAD"
echo "load: $(cat "$WORK/load1.json")"
id=$(identity); echo "translator accounting after the collector restart: $id"
check "collector restart: identity" "$([[ $id == ok* ]]; echo $?)" "$id"

NEXT=$((4001 + RATE * 12))
log "phase 3: 2000 reports after the collector restart"
reporter --first "$NEXT" --count 2000 --rate "$RATE" --kind mix >/dev/null
sleep 0.5
v3=$(verify --first "$NEXT" --count 2000 --kind mix --kw-sample 500)
echo "VERIFY phase 3: $v3"
check "after the collector restart every report lands" "$(python3 -c "import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if r['append_missing']==0 and r['kw']['value']==r['kw_checked'] else 1)" "$v3"; echo $?)" "$(echo "$v3" | cut -c1-120)"

log "phase 4: load while the translator is killed and restarted"
REQS0=$(grep -c "RDMA_CM: REQ" "$WORK/collector.log")
NEXT2=$((NEXT + 2000))
reporter --first "$NEXT2" --count $((RATE * 8)) --rate "$RATE" --kind mix --linger 0.2 >"$WORK/load2.json" &
LOAD=$!; PIDS+=("$LOAD")
sleep 2
kill9_pid "$TRANSLATOR_PID"
log "translator killed (SIGKILL)"
sleep 1
t0=$(date +%s%N)
start_translator "$WORK/t.toml"
ms=$((($(date +%s%N) - t0) / 1000000))
fl=$(wait_flowing 20)
wait "$LOAD" 2>/dev/null; forget_pid "$LOAD"
sleep 0.5
QP2=$(cqps); TQ2=$(tqps)
REQS1=$(grep -c "RDMA_CM: REQ" "$WORK/collector.log")
# The collector's CM counters (cm_replaced) are not exported over HTTP, so the evidence is
# its QP table (/stats: one QP per store, not two) and its log (new REQs, new PSNs).
echo "FIGURE translator restart: connected and serving after ${ms} ms, reports written ${fl} ms later; collector QPs $QP1 -> $QP2 (new CM REQs: $((REQS1 - REQS0))); translator QPs $TQ1 -> $TQ2"
check "translator restart: collector replaced the old QPs" "$([ "$(echo $QP2 | wc -w)" = 2 ] && [ $((REQS1 - REQS0)) = 2 ]; echo $?)" "collector QPs $QP1 -> $QP2 after $((REQS1 - REQS0)) new REQs"
check "translator restart: reports flow again" "$([ "$fl" -ge 0 ]; echo $?)" "${fl} ms"
v=$(verify --first 1 --count 4000 --kind mix --kw-sample 1000)
echo "VERIFY phase-1 data after both restarts: $v"
check "Key-Write data of phase 1 still queryable after both restarts" "$(python3 -c "import json,sys; a=json.loads(sys.argv[1]); b=json.loads(sys.argv[2]); sys.exit(0 if a['kw']==b['kw'] and b['append_malformed']==0 else 1)" "$v1" "$v"; echo $?)" "kw $(echo "$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["kw"])')"
am=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['append_missing'] - json.loads(sys.argv[2])['append_missing'])" "$v" "$v1")
# The restarted translator continues every Append list after the collector's head (list-head
# messages after the metadata record), so nothing written before it is overwritten.
check "Append data of phase 1 still readable after both restarts" "$([ "$am" = 0 ]; echo $?)" "$am more entries missing than before the restarts"
heads=$(grep -c "sent the heads of" "$WORK/collector.log")
echo "FIGURE list-head exchanges in the collector log: $heads"
check "translator restart: the collector sent the Append list heads" "$([ "$heads" -ge 1 ]; echo $?)" "$heads"
grep -m2 "continues .* Append list" "$WORK/translator.log" || true
NEXT3=$((NEXT2 + RATE * 8))
reporter --first "$NEXT3" --count 2000 --rate "$RATE" --kind mix >/dev/null
sleep 0.5
v5=$(verify --first "$NEXT3" --count 2000 --kind mix --kw-sample 500)
echo "VERIFY after the translator restart: $v5"
check "after the translator restart every report lands" "$(python3 -c "import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if r['append_missing']==0 and r['kw']['value']==r['kw_checked'] and r['append_malformed']==0 else 1)" "$v5"; echo $?)" "$(echo "$v5" | cut -c1-120)"
id=$(identity); check "translator (new process) identity" "$([[ $id == ok* ]]; echo $?)" "$id"
finish
