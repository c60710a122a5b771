#!/usr/bin/env bash
# Checks the Tofino programs in p4/ as far as this machine allows. A missing tool never fails
# the test command: that step prints "SKIP: reason" and the script exits 0.
#
# 1. Always (needs only `cpp`): preprocesses every program under every knob combination and
#    checks that the result is balanced and free of leftover macros.
# 2. With the P4 front end `p4test` (p4lang/p4c): runs it on every combination, with
#    -D__TARGET_TOFINO__=1 so that tna.p4 accepts the target.
# 3. With the open-source Tofino back end (`p4c-barefoot` and the assembler `bfas`): compiles
#    every combination end to end for Tofino-1 (`--target tofino --arch tna`, then `bfas` to
#    tofino.bin) and keeps each build's resource summary and BF-RT schema (bf-rt.json, what
#    bfrt_python and p4/control/bfrt_schema.py read) under $P4_OUT (default: a temporary
#    directory, removed at exit).
#
# Where the tools are (p4/README.md, "Compile"): each of P4TEST, P4C_BAREFOOT, BFAS may name
# its binary; otherwise P4C_BUILD may name a p4c build directory that holds all three (its
# CMakeCache names the source tree, where core.p4 and tna.p4 are); otherwise PATH.
# P4C_CORE_INCLUDE / P4C_TNA_INCLUDE name the directories with core.p4 / tna.p4 otherwise.
# Combinations: the list below, plus every `p4_defines` of tests/corpus/*/case.json (translator);
# the reporters' own knobs (reporter: dta_reporter.p4, its DART option, and
# dta_sketch_reporter.p4).
# P4_ONLY=translator|reporter limits to the translator or the reporters.
# P4_DEFINES="set;set..." limits to the builds whose -D flags are exactly one of these sets (in
# any order; "" is the defaults; "corpus" stands for every supported corpus case's p4_defines,
# the builds a twin-check run needs).
# Exit status: 0 on success or skip, 1 when a check that could run failed.
set -u
cd "$(dirname "$0")/.."

translator_combos=(
  ""
  "-DDTA_HASH_REFERENCE"
  "-DDTA_REF_VARIANT_B"
  "-DDTA_NO_EXTENDED -DDTA_AP_BATCH=1"
  "-DDTA_AP_BATCH=4 -DDTA_AP_REFERENCE_RING"
  "-DDTA_AP_BATCH=2 -DDTA_PC_HOPS=3 -DDTA_MAX_N=8"
  "-DDTA_PC_HOPS=4 -DDTA_MAX_N=8"
  "-DDTA_PC_HOPS=1 -DDTA_NO_ICRC"
  "-DDTA_HASH_REFERENCE -DDTA_REF_VARIANT_B"
  "-DDTA_SK_ROWS=1 -DDTA_SK_CELL_BITS=16"
  "-DDTA_NO_SKETCH"
)
reporter_combos=(
  ""
  "-DDTA_REF_VARIANT_B"
  "-DDTA_REPORT_EXTENDED"
  # DART (p4/reporter/dta_dart.p4): the default (N <= 4, ICRC in egress), the most copies,
  # the reference hash profile with ICRC 0, and the most collectors with variant B.
  "-DDTA_DART"
  "-DDTA_DART -DDTA_MAX_N=8"
  "-DDTA_DART -DDTA_HASH_REFERENCE -DDTA_NO_ICRC"
  "-DDTA_DART -DDTA_MAX_N=2 -DDTA_REF_VARIANT_B -DDTA_DART_QPS=256"
)
# The Sketch-Merge reporter (p4/reporter/dta_sketch_reporter.p4): defaults (2 x 4096 Count-Min,
# 2^10 HyperLogLog registers), the most rows, and the largest sketches.
sketch_reporter_combos=(
  ""
  "-DDTA_RSK_CM_ROWS=4"
  "-DDTA_RSK_CM_ROWS=1 -DDTA_RSK_HLL_P=16 -DDTA_RSK_CM_COLS=65536"
)
# The corpus cases' build flags (tests/corpus/*/case.json, "p4_defines").
corpus_combos=()
while IFS= read -r d; do
  [ -n "$d" ] && translator_combos+=("$d") && corpus_combos+=("$d")
done < <(python3 - <<'PY' 2>/dev/null
import glob, json
seen = set()
for p in sorted(glob.glob("tests/corpus/*/case.json")):
    c = json.load(open(p))
    d = " ".join(c.get("p4_defines", "").split())
    if not c.get("p4_unsupported") and d not in seen:
        seen.add(d)
        print(d)
PY
)
# Drop repeats (a corpus set may equal a listed one).
declare -A seen_combo=()
uniq_combos=()
for c in "${translator_combos[@]}"; do
  k=" $c"
  [ -n "${seen_combo[$k]:-}" ] && continue
  seen_combo[$k]=1
  uniq_combos+=("$c")
done
translator_combos=("${uniq_combos[@]}")

builds=()   # "program|combo"
if [ "${P4_ONLY:-}" != reporter ]; then
  for c in "${translator_combos[@]}"; do builds+=("p4/translator/dta_translator.p4|$c"); done
fi
if [ "${P4_ONLY:-}" != translator ]; then
  for c in "${reporter_combos[@]}"; do builds+=("p4/reporter/dta_reporter.p4|$c"); done
  for c in "${sketch_reporter_combos[@]}"; do builds+=("p4/reporter/dta_sketch_reporter.p4|$c"); done
fi
if [ -n "${P4_DEFINES+x}" ]; then
  norm() { tr ' ' '\n' <<< "$1" | grep -v '^$' | sort | tr '\n' ' '; }
  declare -A wanted=()
  IFS=';' read -r -a sets <<< "$P4_DEFINES"
  [ ${#sets[@]} -gt 0 ] || sets=("")
  for w in "${sets[@]}"; do
    if [ "$w" = corpus ]; then
      for c in "${corpus_combos[@]}"; do wanted["k:$(norm "$c")"]=1; done
    else
      wanted["k:$(norm "$w")"]=1
    fi
  done
  selected=()
  for b in "${builds[@]}"; do
    [ -n "${wanted["k:$(norm "${b#*|}")"]:-}" ] && selected+=("$b")
  done
  builds=("${selected[@]}")
fi
status=0

# ---- 1. preprocessing ----
if ! command -v cpp >/dev/null 2>&1; then
  echo "SKIP: cpp (the C preprocessor) is not installed; cannot preprocess the P4 programs"
else
  stub=$(mktemp -d)
  trap 'rm -rf "$stub"' EXIT
  # Stand-ins for the system includes: only the preprocessor runs in this step.
  : > "$stub/core.p4"; : > "$stub/tna.p4"
  cat > "$stub/check.py" <<'PY'
import sys, re
text = sys.stdin.read()
prog, combo = sys.argv[1], sys.argv[2]
pairs = {"}": "{", ")": "(", "]": "["}
stack = []
for i, ch in enumerate(text):
    if ch in "{([":
        stack.append(ch)
    elif ch in "})]":
        if not stack or stack[-1] != pairs[ch]:
            print(f"FAIL: {prog} {combo}: unbalanced {ch!r} at offset {i}")
            sys.exit(1)
        stack.pop()
if stack:
    print(f"FAIL: {prog} {combo}: unclosed {stack[-1]!r}")
    sys.exit(1)
leftover = re.findall(r"\b(DTA_[A-Z0-9_]+|AP_ENTRY[A-Z_]*|PC_HOP[A-Z_]*|PC_CELL[A-Z_]*|PC_ENCODE|ICRC_HEADERS)\b(?!\s*=)", text)
consts = set(re.findall(r"const\s+[^=]+?\s(\w+)\s*=", text))
leftover = [l for l in leftover if l not in consts]
if leftover:
    print(f"FAIL: {prog} {combo}: unexpanded macros {sorted(set(leftover))[:8]}")
    sys.exit(1)
if "TODO" in text:
    print(f"FAIL: {prog} {combo}: TODO left")
    sys.exit(1)
PY
  n=0
  for b in "${builds[@]}"; do
    prog=${b%%|*} c=${b#*|}
    # shellcheck disable=SC2086
    if ! out=$(cpp -P -undef -nostdinc -I "$stub" $c "$prog" 2>&1); then
      echo "FAIL: cpp $c $prog"; echo "$out" | head -20; status=1; continue
    fi
    if python3 "$stub/check.py" "$prog" "$c" <<<"$out"; then n=$((n + 1)); else status=1; fi
  done
  [ $status -eq 0 ] && echo "ok: preprocessed ${#builds[@]} builds (3 programs, their knob combinations)"
fi

# ---- tools ----
tool() {  # tool NAME ENVVAR
  local v=${!2:-} d
  if [ -n "$v" ]; then [ -x "$v" ] && echo "$v"; return; fi
  if [ -n "${P4C_BUILD:-}" ]; then
    for d in "" backends/p4test backends/tofino backends/tofino/bf-p4c backends/tofino/bf-asm backends/p4tools; do
      [ -x "$P4C_BUILD/$d/$1" ] && [ -f "$P4C_BUILD/$d/$1" ] && { echo "$P4C_BUILD/$d/$1"; return; }
    done
  fi
  command -v "$1" 2>/dev/null || true
}
P4TEST_BIN=$(tool p4test P4TEST)
BAREFOOT_BIN=$(tool p4c-barefoot P4C_BAREFOOT)
BFAS_BIN=$(tool bfas BFAS)
# A build directory knows its source tree (core.p4 and the Tofino tna.p4 live there).
P4C_SRC=${P4C_SRC:-}
if [ -z "$P4C_SRC" ] && [ -f "${P4C_BUILD:-/nonexistent}/CMakeCache.txt" ]; then
  P4C_SRC=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$P4C_BUILD/CMakeCache.txt")
fi
CORE_DIR=${P4C_CORE_INCLUDE:-}
if [ -z "$CORE_DIR" ]; then
  for d in ${P4C_BUILD:+"$P4C_BUILD/p4include"} ${P4C_SRC:+"$P4C_SRC/p4include"}; do
    [ -f "$d/core.p4" ] && { CORE_DIR=$d; break; }
  done
fi
TNA_DIR=${P4C_TNA_INCLUDE:-}
if [ -z "$TNA_DIR" ]; then
  for d in ${P4C_BUILD:+"$P4C_BUILD/p4include"} \
           ${P4C_SRC:+"$P4C_SRC/backends/tofino/bf-p4c/p4include"} \
           ${BAREFOOT_BIN:+"$(dirname "$(readlink -f "$BAREFOOT_BIN")")/p4include"} \
           ${BAREFOOT_BIN:+"$(dirname "$BAREFOOT_BIN")/p4include"} \
           ${P4TEST_BIN:+"$(dirname "$P4TEST_BIN")/p4include"} \
           /usr/share/p4c/p4include /usr/local/share/p4c/p4include; do
    [ -f "$d/tna.p4" ] && { TNA_DIR=$d; break; }
  done
fi

# ---- 2. p4test ----
if [ -z "$P4TEST_BIN" ]; then
  echo "SKIP: p4test not found (set P4TEST or P4C_BUILD, or put p4c's build on PATH; p4/README.md)"
elif [ -z "$TNA_DIR" ]; then
  echo "SKIP: p4test found but no tna.p4 (set P4C_TNA_INCLUDE to the Tofino p4include directory)"
else
  fails=0
  for b in "${builds[@]}"; do
    prog=${b%%|*} c=${b#*|}
    # shellcheck disable=SC2086
    if ! out=$("$P4TEST_BIN" --std p4-16 -D__TARGET_TOFINO__=1 ${CORE_DIR:+-I "$CORE_DIR"} \
               -I "$TNA_DIR" $c "$prog" 2>&1); then
      echo "FAIL: p4test $c $prog"; echo "$out" | head -30; fails=$((fails + 1)); status=1
    fi
  done
  echo "p4test: $(( ${#builds[@]} - fails )) of ${#builds[@]} builds accepted"
fi

# ---- 3. p4c-barefoot + bfas, end to end ----
if [ -z "$BAREFOOT_BIN" ] || [ -z "$BFAS_BIN" ]; then
  echo "SKIP: the Tofino back end is not available (p4c-barefoot: ${BAREFOOT_BIN:-not found}; bfas: ${BFAS_BIN:-not found}); set P4C_BUILD (p4/README.md)"
  exit $status
fi
OUT=${P4_OUT:-}
if [ -z "$OUT" ]; then
  OUT=$(mktemp -d)
  trap 'rm -rf "$stub" "$OUT"' EXIT
fi
# One build: compile, assemble each pipe, keep the resource summary. Prints its verdict lines
# into $dir/verdict; exit status 0 when it compiled end to end.
build_one() {  # build_one INDEX PROGRAM "DEFINES"
  local i=$1 prog=$2 c=$3 dir bfa pdir asm_ok=1
  dir="$OUT/$(basename "$prog" .p4)-$i"
  rm -rf "$dir"; mkdir -p "$dir"
  printf '%s\n' "$c" > "$dir/defines"
  exec > "$dir/verdict" 2>&1
  # shellcheck disable=SC2086
  if ! "$BAREFOOT_BIN" --target tofino --arch tna --std p4-16 -g ${CORE_DIR:+-I "$CORE_DIR"} \
      ${TNA_DIR:+-I "$TNA_DIR"} $c --bf-rt-schema "$dir/bf-rt.json" \
      -o "$dir" "$prog" > "$dir/compile.log" 2>&1; then
    echo "FAIL: p4c-barefoot $c $prog"; grep -iE "error|warning: .*unsupported" "$dir/compile.log" | head -20
    return 1
  fi
  # One .bfa per pipe: the translator's default build has two (pipe, icrc_pipe).
  local bfas
  mapfile -t bfas < <(find "$dir" -name '*.bfa' | sort)
  if [ ${#bfas[@]} -eq 0 ]; then
    echo "FAIL: p4c-barefoot $c $prog wrote no .bfa"; return 1
  fi
  # Resource summary (stages per gress, per-stage SRAM/TCAM/stateful ALUs/gateways/VLIW).
  python3 scripts/p4-resources.py "$dir" "$(basename "$prog") ${c:-(defaults)}" > "$dir/resources.md" 2>&1 || true
  for bfa in "${bfas[@]}"; do
    pdir=$(dirname "$bfa")
    if ! "$BFAS_BIN" -o "$pdir" "$bfa" > "$pdir/bfas.log" 2>&1 || [ ! -f "$pdir/tofino.bin" ]; then
      echo "FAIL: bfas $c $prog ($(basename "$pdir")): $(head -1 "$dir/resources.md")"; grep -i error "$pdir/bfas.log" | head -5
      asm_ok=0
    fi
  done
  [ $asm_ok -eq 1 ] || return 1
  echo "ok: $(head -1 "$dir/resources.md") -> $(find "$dir" -name tofino.bin | sort | sed "s|$OUT/||" | tr '\n' ' ')"
}
# P4_JOBS builds at a time (default 1: p4c-barefoot takes 2-4 minutes and ~2 GiB per build);
# verdicts are printed in list order as the builds finish.
jobs_max=${P4_JOBS:-1}
fails=0 i=0 next=1
declare -A pid_of=() prog_of=()
report_done() {  # prints the verdicts of finished builds in order
  while [ -n "${pid_of[$next]:-}" ] && ! kill -0 "${pid_of[$next]}" 2>/dev/null; do
    local v="$OUT/$(basename "${prog_of[$next]}" .p4)-$next/verdict"
    # The verdict, not the exit status: `wait -n` may have reaped the job already.
    if ! grep -q '^ok:' "$v" 2>/dev/null; then fails=$((fails + 1)); status=1; fi
    cat "$v" 2>/dev/null || echo "FAIL: build $next left no verdict"
    unset "pid_of[$next]"
    next=$((next + 1))
  done
}
for b in "${builds[@]}"; do
  prog=${b%%|*} c=${b#*|}
  i=$((i + 1))
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do
    wait -n 2>/dev/null || true
    report_done
  done
  prog_of[$i]=$prog
  build_one "$i" "$prog" "$c" &
  pid_of[$i]=$!
done
while [ $next -le $i ]; do
  wait -n 2>/dev/null || true
  report_done
done
echo "p4c-barefoot + bfas: $(( ${#builds[@]} - fails )) of ${#builds[@]} builds compiled end to end"
exit $status
