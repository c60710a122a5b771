#!/usr/bin/env bash
# scripts/clickhouse.sh - a private ClickHouse server for the exporter's tests
# (tests/tests/clickhouse_export.rs) and for trying `dta-collector export` by hand.
#
#   scripts/clickhouse.sh                       install clickhouse-server when missing (root,
#                                               Debian's package), print READY or SKIP
#   scripts/clickhouse.sh start DIR [HTTP TCP]  start a server with its data, logs and config
#                                               under DIR, listening on 127.0.0.1 only (HTTP
#                                               port HTTP, native port TCP; free ones by
#                                               default); prints "READY <http-port> <pid>"
#   scripts/clickhouse.sh stop DIR              stop the server started in DIR
#
# Never the system service, never port 8123: every instance is private to DIR. Never fails:
# anything that does not work prints "SKIP: reason" and exits 0.
set -uo pipefail

skip() {
  echo "SKIP: $*"
  exit 0
}

server_bin() {
  command -v clickhouse-server 2>/dev/null \
    || { [ -x /usr/sbin/clickhouse-server ] && echo /usr/sbin/clickhouse-server; } \
    || { command -v clickhouse >/dev/null 2>&1 && echo "$(command -v clickhouse) server"; }
}

install() {
  [ -n "$(server_bin)" ] && return 0
  [ "$(id -u)" = 0 ] || skip "clickhouse-server missing and not root (apt-get install clickhouse-server)"
  command -v apt-get >/dev/null 2>&1 || skip "clickhouse-server missing and no apt-get on this system"
  export DEBIAN_FRONTEND=noninteractive
  local apt="apt-get -o DPkg::Lock::Timeout=300"
  if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$' -e '^auxfiles$')" ]; then
    $apt update -qq >/dev/null 2>&1 || true
  fi
  # The package's own service must not start here: policy-rc.d or no init decides that, and
  # the instances below never use /var/lib/clickhouse.
  $apt install -y -qq --no-install-recommends clickhouse-server clickhouse-client \
    >/tmp/dta-clickhouse-install.log 2>&1 \
    || { $apt update -qq >/dev/null 2>&1 \
         && $apt install -y -qq --no-install-recommends clickhouse-server clickhouse-client \
            >>/tmp/dta-clickhouse-install.log 2>&1; } \
    || skip "apt-get install clickhouse-server failed (see /tmp/dta-clickhouse-install.log)"
  [ -n "$(server_bin)" ] || skip "clickhouse-server not found after installing it"
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
  # HTTP/1.0 GET /ping with bash's /dev/tcp: the server answers "Ok.".
  local port=$1 reply
  reply=$({ exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'GET /ping HTTP/1.0\r\n\r\n' >&3 \
    && timeout 2 cat <&3; } 2>/dev/null) || return 1
  [[ "$reply" == *"Ok."* ]]
}

start() {
  local dir=$1 http=${2:-} tcp=${3:-}
  install
  local bin
  bin=$(server_bin)
  mkdir -p "$dir/data" "$dir/tmp" "$dir/log" "$dir/user_files" || skip "cannot create $dir"
  dir=$(cd "$dir" && pwd)
  [ -n "$http" ] || http=$(free_port) || skip "no free port"
  [ -n "$tcp" ] || tcp=$(free_port) || skip "no free port"
  cat >"$dir/config.xml" <<EOF
<?xml version="1.0"?>
<yandex>
    <logger>
        <level>warning</level>
        <log>$dir/log/server.log</log>
        <errorlog>$dir/log/server.err.log</errorlog>
        <size>100M</size>
        <count>1</count>
    </logger>
    <http_port>$http</http_port>
    <tcp_port>$tcp</tcp_port>
    <listen_host>127.0.0.1</listen_host>
    <max_connections>256</max_connections>
    <keep_alive_timeout>3</keep_alive_timeout>
    <max_concurrent_queries>64</max_concurrent_queries>
    <uncompressed_cache_size>67108864</uncompressed_cache_size>
    <mark_cache_size>67108864</mark_cache_size>
    <path>$dir/data/</path>
    <tmp_path>$dir/tmp/</tmp_path>
    <user_files_path>$dir/user_files/</user_files_path>
    <users_config>$dir/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <mlock_executable>false</mlock_executable>
    <remote_servers>
        <dta_local>
            <shard>
                <replica><host>127.0.0.1</host><port>$tcp</port></replica>
            </shard>
        </dta_local>
    </remote_servers>
</yandex>
EOF
  # Users: `default` without a password (the tests' schema set-up) and `dta` with the password
  # "dta-test" (the exporter's password_file), both on 127.0.0.1 only.
  cat >"$dir/users.xml" <<'EOF'
<?xml version="1.0"?>
<yandex>
    <profiles>
        <default><max_memory_usage>2000000000</max_memory_usage></default>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
        <dta>
            <password>dta-test</password>
            <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </dta>
    </users>
    <quotas>
        <default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
        <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time>
        </interval></default>
    </quotas>
</yandex>
EOF
  # setsid: the server outlives this script and ignores the caller's terminal signals.
  # shellcheck disable=SC2086
  setsid $bin --config-file="$dir/config.xml" >"$dir/log/stdout.log" 2>&1 </dev/null &
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
  skip "clickhouse-server did not answer on 127.0.0.1:$http ($(tail -n 3 "$dir/log/stdout.log" "$dir/log/server.err.log" 2>/dev/null | tr '\n' ' '))"
}

stop() {
  local dir=$1 pid
  pid=$(cat "$dir/pid" 2>/dev/null) || { echo "no server in $dir"; exit 0; }
  kill "$pid" 2>/dev/null || { echo "stopped"; exit 0; }
  for _ in $(seq 1 100); do
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
    echo "READY: clickhouse-server ($(server_bin))"
    ;;
  start)
    [ -n "${2:-}" ] || skip "usage: $0 start DIR [HTTP_PORT TCP_PORT]"
    start "$2" "${3:-}" "${4:-}"
    ;;
  stop)
    [ -n "${2:-}" ] || skip "usage: $0 stop DIR"
    stop "$2"
    ;;
  *)
    skip "usage: $0 [start DIR [HTTP_PORT TCP_PORT] | stop DIR]"
    ;;
esac
exit 0
