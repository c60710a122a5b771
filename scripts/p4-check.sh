#!/usr/bin/env bash
# Checks the Tofino programs in p4/ as far as this machine allows. Never fails the test command
# because a tool is missing: it prints "SKIP: reason" and exits 0 instead.
#
# 1. Always (needs only `cpp`): preprocesses every program under every supported combination of
#    compile-time knobs and checks that the result is balanced and free of leftover macros.
# 2. With the P4 front end `p4test` (p4lang/p4c) on PATH or installable: compiles both programs
#    with `p4test --arch tna` for the same combinations. p4c is not in Debian 12's archive and
#    no PyPI package ships `p4test`, so on a stock machine this step is skipped (p4/README.md).
# Exit status: 0 on success or skip, 1 when a check that could run failed.
set -u
cd "$(dirname "$0")/.."

combos=(
  ""
  "-DDTA_HASH_REFERENCE"
  "-DDTA_REF_VARIANT_B"
  "-DDTA_NO_EXTENDED -DDTA_AP_BATCH=1"
  "-DDTA_AP_BATCH=16 -DDTA_AP_REFERENCE_RING"
  "-DDTA_AP_BATCH=2 -DDTA_PC_HOPS=3 -DDTA_MAX_N=8"
  "-DDTA_AP_BATCH=8 -DDTA_PC_HOPS=8"
  "-DDTA_PC_HOPS=1 -DDTA_NO_ICRC"
  "-DDTA_REPORT_EXTENDED"
)
programs=(p4/translator/dta_translator.p4 p4/reporter/dta_reporter.p4)
status=0

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
depth = {"{": 0, "(": 0, "[": 0}
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
leftover = re.findall(r"\b(DTA_[A-Z0-9_]+|AP_ENTRY[A-Z_]*|PC_HOP[A-Z_]*|PC_ENCODE|ICRC_HEADERS)\b(?!\s*=)", text)
consts = set(re.findall(r"const\s+[^=]+?\s(\w+)\s*=", text))
leftover = [l for l in leftover if l not in consts]
if leftover:
    print(f"FAIL: {prog} {combo}: unexpanded macros {sorted(set(leftover))[:8]}")
    sys.exit(1)
if "TODO" in text:
    print(f"FAIL: {prog} {combo}: TODO left")
    sys.exit(1)
PY
  for prog in "${programs[@]}"; do
    for c in "${combos[@]}"; do
      # shellcheck disable=SC2086
      if ! out=$(cpp -P -undef -nostdinc -I "$stub" $c "$prog" 2>&1); then
        echo "FAIL: cpp $c $prog"; echo "$out" | head -20; status=1; continue
      fi
      if ! python3 "$stub/check.py" "$prog" "$c" <<<"$out"; then status=1; fi
    done
  done
  [ $status -eq 0 ] && echo "ok: preprocessed ${#programs[@]} programs x ${#combos[@]} knob combinations"
fi

P4TEST=$(command -v p4test || true)
if [ -z "$P4TEST" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  # p4c is packaged for Debian testing/unstable only; try, quietly, in case this machine has it.
  if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v lock)" ]; then
    apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null 2>&1 || true
  fi
  if apt-cache show p4lang-p4c >/dev/null 2>&1; then
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq p4lang-p4c >/dev/null 2>&1 || true
  fi
  P4TEST=$(command -v p4test || true)
fi
if [ -z "$P4TEST" ]; then
  echo "SKIP: p4test not found (p4c is not in Debian 12's archive and no PyPI package ships it)"
  exit $status
fi
# p4test needs tna.p4 from the Tofino back end (p4lang/p4c, backends/tofino/bf-p4c/p4include).
TNA_DIR=${P4C_TNA_INCLUDE:-}
if [ -z "$TNA_DIR" ]; then
  for d in /usr/share/p4c/p4include /usr/local/share/p4c/p4include; do
    [ -f "$d/tna.p4" ] && TNA_DIR=$d
  done
fi
if [ -z "$TNA_DIR" ]; then
  echo "SKIP: p4test found but no tna.p4 (set P4C_TNA_INCLUDE to the Tofino p4include directory)"
  exit $status
fi
for prog in "${programs[@]}"; do
  for c in "${combos[@]}"; do
    # shellcheck disable=SC2086
    if ! "$P4TEST" --std p4-16 -I "$TNA_DIR" $c "$prog" >/tmp/p4test.$$ 2>&1; then
      echo "FAIL: p4test $c $prog"; head -30 /tmp/p4test.$$; status=1
    fi
  done
done
rm -f /tmp/p4test.$$
[ $status -eq 0 ] && echo "ok: p4test accepted ${#programs[@]} programs x ${#combos[@]} combinations"
exit $status
