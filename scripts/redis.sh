#!/usr/bin/env bash
# scripts/redis.sh - a private Redis server for `dta bench collectors` and its test
# (bench/tests/collectors.rs).
#
#   scripts/redis.sh                     install redis-server when missing (root, Debian's
#                                        package), print READY or SKIP
#   scripts/redis.sh start DIR [PORT]    start a server with its dump file and log under DIR,
#                                        listening on 127.0.0.1 only (a free port by default);
#                                        prints "READY <port> <pid>"
#   scripts/redis.sh stop DIR            stop the server started in DIR
#
# The server runs with Redis's built-in defaults (no configuration file: RDB snapshots at the
# default save points, no AOF, no memory limit); only its port, address, directory and log are
# set. Never the system service, never port 6379. Never fails: anything that does not work
# prints "SKIP: reason" and exits 0.
set -uo pipefail

skip() {
  echo "SKIP: $*"
  exit 0
}

server_bin() {
  command -v redis-server 2>/dev/null \
    || { [ -x /usr/bin/redis-server ] && echo /usr/bin/redis-server; }
}

install() {
  [ -n "$(server_bin)" ] && return 0
  [ "$(id -u)" = 0 ] || skip "redis-server missing and not root (apt-get install redis-server)"
  command -v apt-get >/dev/null 2>&1 || skip "redis-server missing and no apt-get on this system"
  export DEBIAN_FRONTEND=noninteractive
  local apt="apt-get -o DPkg::Lock::Timeout=300"
  if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$' -e '^auxfiles$')" ]; then
    $apt update -qq >/dev/null 2>&1 || true
  fi
  # The package's own service must not start here (policy-rc.d or no init decides that); the
  # instances below never use /var/lib/redis or port 6379.
  $apt install -y -qq --no-install-recommends redis-server >/tmp/dta-redis-install.log 2>&1 \
    || { $apt update -qq >/dev/null 2>&1 \
         && $apt install -y -qq --no-install-recommends redis-server \
            >>/tmp/dta-redis-install.log 2>&1; } \
    || skip "apt-get install redis-server failed (see /tmp/dta-redis-install.log)"
  [ -n "$(server_bin)" ] || skip "redis-server not found after installing it"
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
  # An inline PING with bash's /dev/tcp: the server answers "+PONG".
  local port=$1 reply
  reply=$({ exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'PING\r\n' >&3 \
    && timeout 1 head -c 7 <&3; } 2>/dev/null) || return 1
  [[ "$reply" == *"+PONG"* ]]
}

start() {
  local dir=$1 port=${2:-}
  install
  local bin
  bin=$(server_bin)
  mkdir -p "$dir" || skip "cannot create $dir"
  dir=$(cd "$dir" && pwd)
  [ -n "$port" ] || port=$(free_port) || skip "no free port"
  # setsid: the server outlives this script and ignores the caller's terminal signals.
  setsid "$bin" --port "$port" --bind 127.0.0.1 --dir "$dir" --logfile "$dir/redis.log" \
    --daemonize no >"$dir/stdout.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$dir/pid"
  echo "$port" >"$dir/port"
  for _ in $(seq 1 100); do
    if ping_ok "$port"; then
      echo "READY $port $pid"
      exit 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill "$pid" 2>/dev/null
  skip "redis-server did not answer on 127.0.0.1:$port ($(tail -n 3 "$dir/redis.log" "$dir/stdout.log" 2>/dev/null | tr '\n' ' '))"
}

stop() {
  local dir=$1 pid
  pid=$(cat "$dir/pid" 2>/dev/null) || { echo "no server in $dir"; exit 0; }
  kill "$pid" 2>/dev/null || { echo "stopped"; exit 0; }
  # On SIGTERM Redis writes its RDB snapshot first (its default save points): allow for it.
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
    echo "READY: redis-server ($(server_bin), $("$(server_bin)" --version | awk '{print $3}'))"
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
