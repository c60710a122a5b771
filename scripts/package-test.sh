#!/usr/bin/env bash
# Builds the Debian packages (cargo-deb), installs them, checks the systemd units, starts the
# collector and the translator with the packaged configuration as the packaged user, checks that
# the translator connects to every store of the collector, then (the collector stopped: both
# answer RoCEv2 on 127.0.0.1:4791) starts the ZERO agent the same way and checks that it serves
# its region, and removes the packages again.
#
# Needs root (dpkg), dpkg-deb and cargo-deb (installed with `cargo install cargo-deb --locked`
# when missing). Prints "SKIP: reason" and exits 0 when a precondition is missing.
# Where systemd is PID 1 the services are started with systemctl; elsewhere (containers, CI
# machines) the units' ExecStart lines are run as the units' User, which is what systemd would
# run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
skip() { echo "SKIP: package test: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "not root (dpkg -i needs root)"
command -v dpkg >/dev/null && command -v dpkg-deb >/dev/null || skip "dpkg is not installed"
if ! cargo deb --version >/dev/null 2>&1; then
  echo "== installing cargo-deb"
  cargo install cargo-deb --locked >/dev/null 2>&1 || skip "cargo-deb could not be installed"
fi
command -v adduser >/dev/null || apt-get install -y -qq adduser >/dev/null 2>&1 || skip "adduser missing"

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  dpkg -P dta-collector dta-translator dta-agent >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== cargo deb"
debs=()
for p in dta-collector dta-translator dta-agent; do
  out=$(cargo deb -p "$p" --output "$work/" 2>&1 | tail -1)
  deb=$(ls "$work"/"$p"_*.deb 2>/dev/null | head -1)
  [ -n "$deb" ] || { echo "FAIL: cargo deb -p $p: $out"; exit 1; }
  debs+=("$deb")
  echo "built $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB)"
done

echo "== dpkg -i"
dpkg -i "${debs[@]}" >/dev/null
for f in /usr/bin/dta-collector /usr/bin/dta-translator /usr/bin/dta-agent \
         /etc/dta/collector.toml /etc/dta/translator.toml /etc/dta/agent.toml \
         /lib/systemd/system/dta-collector.service /lib/systemd/system/dta-translator.service \
         /lib/systemd/system/dta-agent.service; do
  [ -e "$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
getent passwd dta >/dev/null || { echo "FAIL: the dta user was not created"; exit 1; }
echo "installed: binaries, /etc/dta, units, user dta"

if command -v systemd-analyze >/dev/null; then
  if ! out=$(systemd-analyze verify /lib/systemd/system/dta-collector.service \
             /lib/systemd/system/dta-translator.service \
             /lib/systemd/system/dta-agent.service 2>&1); then
    echo "FAIL: systemd-analyze verify"; echo "$out"; exit 1
  fi
  echo "systemd-analyze verify: ok"
fi

exec_start() {  # the ExecStart command line of a unit
  sed -n 's/^ExecStart=//p' "/lib/systemd/system/$1.service"
}
unit_user() { sed -n 's/^User=//p' "/lib/systemd/system/$1.service"; }

echo "== starting the services"
if [ "$(ps -p 1 -o comm= 2>/dev/null)" = systemd ]; then
  systemctl daemon-reload
  systemctl start dta-collector dta-translator
  logs() { journalctl -u "$1" --no-pager -n 200; }
  pids=()
else
  for u in dta-collector dta-translator; do
    # shellcheck disable=SC2046
    (cd /var/lib/dta && exec runuser -u "$(unit_user "$u")" -- env RUST_LOG=info $(exec_start "$u")) \
      > "$work/$u.log" 2>&1 &
    pids+=($!)
    sleep 1
  done
  logs() { cat "$work/$1.log"; }
fi

# The translator connects one QP per worker and store over RDMA_CM; the collector's stores
# are the ones in its packaged configuration.
stores=$(grep -c '^\[\[store\]\]' /etc/dta/collector.toml)
ok=0
for _ in $(seq 100); do
  # "collector NAME: connected N store(s) over RDMA_CM for W worker(s)", one line per collector.
  n=$(logs dta-translator | sed -n 's/.*: connected \([0-9]*\) store(s) over RDMA_CM.*/\1/p' |
      awk '{ s += $1 } END { print s + 0 }')
  if [ "$n" -ge "$stores" ]; then ok=1; break; fi
  sleep 0.1
done
i=0
for u in dta-collector dta-translator; do
  if [ ${#pids[@]} -gt $i ] && ! kill -0 "${pids[$i]}" 2>/dev/null; then
    echo "FAIL: $u exited"; logs "$u" | tail -20; exit 1
  fi
  i=$((i + 1))
done
if [ $ok -ne 1 ]; then
  echo "FAIL: the translator did not connect to the collector's $stores stores"
  echo "-- collector"; logs dta-collector | tail -20
  echo "-- translator"; logs dta-translator | tail -20
  exit 1
fi
echo "both services run as user dta with the packaged configuration; the translator connected ($stores stores)"

# The agent's packaged configuration answers RoCEv2 on 127.0.0.1:4791 like the collector's:
# stop those two first.
echo "== starting the agent"
if [ "$(ps -p 1 -o comm= 2>/dev/null)" = systemd ]; then
  systemctl stop dta-translator dta-collector
  systemctl start dta-agent
else
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # shellcheck disable=SC2046
  (cd /var/lib/dta && exec runuser -u "$(unit_user dta-agent)" -- env RUST_LOG=info $(exec_start dta-agent)) \
    > "$work/dta-agent.log" 2>&1 &
  pids=($!)
fi
ok=0
for _ in $(seq 100); do
  if logs dta-agent | grep -q 'serving a [0-9]*-byte region'; then ok=1; break; fi
  sleep 0.1
done
if [ ${#pids[@]} -gt 0 ] && ! kill -0 "${pids[0]}" 2>/dev/null; then
  echo "FAIL: dta-agent exited"; logs dta-agent | tail -20; exit 1
fi
if [ $ok -ne 1 ]; then
  echo "FAIL: the agent does not serve its region"; logs dta-agent | tail -20; exit 1
fi
echo "the agent runs as user dta with the packaged configuration and serves its region"
if [ "$(ps -p 1 -o comm= 2>/dev/null)" = systemd ]; then systemctl stop dta-agent; fi
echo "package test: ok"
