#!/usr/bin/env bash
# scripts/influxdb.sh - a private InfluxDB 1.x server for `dta bench collectors` and its test
# (bench/tests/collectors.rs).
#
#   scripts/influxdb.sh                     install influxdb when missing (root, Debian's
#                                           package: 1.6), print READY or SKIP
#   scripts/influxdb.sh start DIR [PORT]    start a server with its meta, data, WAL and log
#                                           under DIR, its HTTP API on 127.0.0.1 only (a free
#                                           port by default); prints "READY <port> <pid>"
#   scripts/influxdb.sh stop DIR            stop the server started in DIR
#
# The server runs with InfluxDB's defaults (`influxd config`) except: its directories and
# ports; usage reporting off; and no cap on series per database or values per tag
# (`max-series-per-database`, `max-values-per-tag`), whose defaults (1 M, 100 k) refuse a
# telemetry workload keyed by flow. Never the system service, never port 8086. Never fails:
# anything that does not work prints "SKIP: reason" and exits 0.
set -uo pipefail

skip() {
  echo "SKIP: $*"
  exit 0
}

server_bin() {
  command -v influxd 2>/dev/null || { [ -x /usr/bin/influxd ] && echo /usr/bin/influxd; }
}

install() {
  [ -n "$(server_bin)" ] && return 0
  [ "$(id -u)" = 0 ] || skip "influxd missing and not root (apt-get install influxdb)"
  command -v apt-get >/dev/null 2>&1 || skip "influxd missing and no apt-get on this system"
  export DEBIAN_FRONTEND=noninteractive
  local apt="apt-get -o DPkg::Lock::Timeout=300"
  if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$' -e '^auxfiles$')" ]; then
    $apt update -qq >/dev/null 2>&1 || true
  fi
  # The package's own service must not start here (policy-rc.d or no init decides that); the
  # instances below never use /var/lib/influxdb or port 8086.
  $apt install -y -qq --no-install-recommends influxdb >/tmp/dta-influxdb-install.log 2>&1 \
    || { $apt update -qq >/dev/null 2>&1 \
         && $apt install -y -qq --no-install-recommends influxdb \
            >>/tmp/dta-influxdb-install.log 2>&1; } \
    || skip "apt-get install influxdb failed (see /tmp/dta-influxdb-install.log)"
  [ -n "$(server_bin)" ] || skip "influxd not found after installing it"
}

free_port() {
  # A port nothing listens on, from the ephemeral range's upper half.
  local p
  for _ in $(seq 1 50); do
    p=$((40000 + RANDOM % 20000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
  done
  return 1
}

ping_ok() {
  # HTTP/1.0 GET /ping with bash's /dev/tcp: the server answers 204 No Content.
  local port=$1 reply
  reply=$({ exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'GET /ping HTTP/1.0\r\n\r\n' >&3 \
    && timeout 2 cat <&3; } 2>/dev/null) || return 1
  [[ "$reply" == "HTTP/1."?" 204"* ]]
}

start() {
  local dir=$1 http=${2:-} rpc
  install
  local bin
  bin=$(server_bin)
  mkdir -p "$dir/meta" "$dir/data" "$dir/wal" "$dir/log" || skip "cannot create $dir"
  dir=$(cd "$dir" && pwd)
  [ -n "$http" ] || http=$(free_port) || skip "no free port"
  rpc=$(free_port) || skip "no free port"
  # Usage reporting off: Debian's build calls it reporting-enabled (default false), upstream
  # reporting-disabled; both are set.
  cat >"$dir/influxdb.conf" <<CONF
reporting-enabled = false
reporting-disabled = true
bind-address = "127.0.0.1:$rpc"

[meta]
  dir = "$dir/meta"

[data]
  dir = "$dir/data"
  wal-dir = "$dir/wal"
  max-series-per-database = 0
  max-values-per-tag = 0

[http]
  bind-address = "127.0.0.1:$http"
CONF
  # setsid: the server outlives this script and ignores the caller's terminal signals.
  setsid "$bin" run -config "$dir/influxdb.conf" >"$dir/log/influxd.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$dir/pid"
  echo "$http" >"$dir/http_port"
  for _ in $(seq 1 150); do
    if ping_ok "$http"; then
      echo "READY $http $pid"
      exit 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  kill "$pid" 2>/dev/null
  skip "influxd did not answer on 127.0.0.1:$http ($(tail -n 3 "$dir/log/influxd.log" 2>/dev/null | tr '\n' ' '))"
}

stop() {
  local dir=$1 pid
  pid=$(cat "$dir/pid" 2>/dev/null) || { echo "no server in $dir"; exit 0; }
  kill "$pid" 2>/dev/null || { echo "stopped"; exit 0; }
  for _ in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || { echo "stopped"; exit 0; }
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null
  echo "stopped (killed)"
  exit 0
}

case "${1:-}" in
  "")
    install
    echo "READY: influxd ($(server_bin), $("$(server_bin)" version 2>/dev/null | awk '{print $2}'))"
    ;;
  start)
    [ -n "${2:-}" ] || skip "usage: $0 start DIR [PORT]"
    start "$2" "${3:-}"
    ;;
  stop)
    [ -n "${2:-}" ] || skip "usage: $0 stop DIR"
    stop "$2"
    ;;
  *)
    skip "usage: $0 [start DIR [PORT] | stop DIR]"
    ;;
esac
exit 0
