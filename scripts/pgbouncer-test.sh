#!/usr/bin/env bash
# A throwaway PgBouncer in transaction mode in front of a test PostgreSQL server, on a free
# loopback port, in a temporary folder, with trust authentication.
#
#   scripts/pgbouncer-test.sh start URL   prints ONLY the URL to reach URL's server through
#                                         PgBouncer (same user and database)
#   scripts/pgbouncer-test.sh stop        stops it (SIGTERM to its pid) and removes its folder
#   scripts/pgbouncer-test.sh url         prints the URL of the running PgBouncer
#   scripts/pgbouncer-test.sh repoint PORT  points its ini at the server on 127.0.0.1:PORT
#                                         (a failover's new primary); RELOAD on the admin
#                                         console makes PgBouncer use it
#
# URL is what scripts/pg-test-server.sh prints (postgresql://USER@127.0.0.1:PORT/DB). Every
# database name is passed on to that server (a `*` entry), pool_mode is transaction, and no
# startup parameter is ignored: a client that sends `options` (session settings at
# connect) is refused, as PgBouncer refuses it by default. USER may use the admin console
# (database `pgbouncer`: PAUSE, RESUME, SHOW ...; admin_users). PgBouncer refuses to run as root,
# so when this script runs as root it runs as the `postgres` OS user.
#
# Environment:
#   HOLDFAST_PGBOUNCER_STATE_DIR  where the state file lives
#                                 (default ${TMPDIR:-/tmp}/holdfast-pgbouncer-test)
#   HOLDFAST_PGBOUNCER_POOL_SIZE  server connections per database and user (default 4)
#   HOLDFAST_PGBOUNCER_LOGIN_RETRY  server_login_retry in seconds, fractions allowed (default 1;
#                                   PgBouncer's 15)
#   HOLDFAST_PGBOUNCER_QUERY_WAIT   query_wait_timeout in seconds, fractions allowed (default
#                                   PgBouncer's 120)
set -euo pipefail

die() {
  echo "pgbouncer-test: $*" >&2
  exit 1
}

state_dir="${HOLDFAST_PGBOUNCER_STATE_DIR:-${TMPDIR:-/tmp}/holdfast-pgbouncer-test}"
state_file="$state_dir/pgbouncer.env"
pool_size="${HOLDFAST_PGBOUNCER_POOL_SIZE:-4}"
# After a failed login to the server PgBouncer refuses clients this long before it tries
# again (its default is 15 s: a server back after a restart would stay unreachable).
login_retry="${HOLDFAST_PGBOUNCER_LOGIN_RETRY:-1}"
# How long PgBouncer holds a client's query while no server connection takes it (the
# server is away, or every server connection is busy) before it refuses the client.
query_wait="${HOLDFAST_PGBOUNCER_QUERY_WAIT:-120}"
# They go into pgbouncer.ini as they are: a count and two durations, nothing else.
[[ $pool_size =~ ^[1-9][0-9]{0,3}$ ]] ||
  die "HOLDFAST_PGBOUNCER_POOL_SIZE must be a whole number from 1 to 9999, got '$pool_size'"
for setting in "HOLDFAST_PGBOUNCER_LOGIN_RETRY=$login_retry" "HOLDFAST_PGBOUNCER_QUERY_WAIT=$query_wait"; do
  [[ ${setting#*=} =~ ^[0-9]{1,6}(\.[0-9]{1,3})?$ ]] ||
    die "${setting%%=*} must be seconds such as 1 or 0.25, got '${setting#*=}'"
done

# shellcheck source=lib/throwaway.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/throwaway.sh"

# True while the process lives (an exited one waiting to be reaped does not count).
running() {
  [[ -n "${pid:-}" ]] && kill -0 "$pid" 2>/dev/null &&
    [[ "$(ps -o stat= -p "$pid" 2>/dev/null)" != Z* ]]
}

# Stops the PgBouncer of a failed start try, waits until it has exited, and removes its
# pidfile.
abandon_try() {
  local stale
  stale="$(cat "$root/pgbouncer.pid" 2>/dev/null || true)"
  if [[ "$stale" =~ ^[0-9]+$ ]]; then
    pid="$stale"
    kill -TERM "$pid" 2>/dev/null || true
    local waited=0
    while running && [[ $waited -lt 50 ]]; do
      sleep 0.1
      waited=$((waited + 1))
    done
    if running; then kill -KILL "$pid" 2>/dev/null || true; fi
    pid=""
  fi
  rm -f "$root/pgbouncer.pid"
}

cmd_start() {
  local target="${1:-}"
  command -v pgbouncer >/dev/null 2>&1 ||
    die "pgbouncer is not installed (Debian package 'pgbouncer'; scripts/install-deps.sh)"
  [[ "$target" =~ ^postgres(ql)?://([^@/]+)@127\.0\.0\.1:([0-9]+)/([^?]+) ]] ||
    die "usage: $0 start postgresql://USER@127.0.0.1:PORT/DB"
  local user="${BASH_REMATCH[2]}" server_port="${BASH_REMATCH[3]}" db="${BASH_REMATCH[4]}"
  if [[ $(id -u) -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
    die "running as root, but there is no 'postgres' OS user to run PgBouncer as"
  fi
  if load_state && running; then
    die "a PgBouncer is already running at $url (state $state_file); stop it first"
  fi
  [[ -n "${root:-}" ]] && rm -rf "$root"
  mkdir -p "$state_dir"
  root="$(mktemp -d "${TMPDIR:-/tmp}/holdfast-pgbouncer.XXXXXX")"
  trap 'rm -rf "$root"' EXIT
  chmod 700 "$root"
  if [[ $(id -u) -eq 0 ]]; then chown postgres: "$root"; fi

  printf '"%s" ""\n' "$user" >"$root/userlist.txt"
  local tries=0
  while :; do
    # Below the kernel's ephemeral range (32768 and up), where a client's outgoing connection
    # may hold the port without listening on it, so that port_in_use cannot see it.
    port=$((20000 + RANDOM % 12768))
    tries=$((tries + 1))
    if port_in_use "$port"; then continue; fi
    cat >"$root/pgbouncer.ini" <<EOF
[databases]
* = host=127.0.0.1 port=$server_port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $root/userlist.txt
admin_users = $user
pool_mode = transaction
default_pool_size = $pool_size
max_client_conn = 200
server_reset_query =
server_login_retry = $login_retry
query_wait_timeout = $query_wait
logfile = $root/pgbouncer.log
pidfile = $root/pgbouncer.pid
EOF
    if [[ $(id -u) -eq 0 ]]; then chown postgres: "$root"/*; fi
    if as_server_user pgbouncer -d "$root/pgbouncer.ini" >>"$root/start.log" 2>&1; then
      local waited=0
      while ! port_in_use "$port" && [[ $waited -lt 50 ]]; do
        sleep 0.1
        waited=$((waited + 1))
      done
      if port_in_use "$port" && [[ -s "$root/pgbouncer.pid" ]]; then break; fi
    fi
    # This try failed (the port was taken meanwhile, or it did not listen in time): stop what
    # it left running and remove its pidfile, which would make every later try refuse with
    # "pidfile exists".
    abandon_try
    if [[ $tries -ge 8 ]]; then
      tail -n 20 "$root/pgbouncer.log" "$root/start.log" >&2 || true
      die "PgBouncer did not start (see the log above)"
    fi
  done
  pid="$(cat "$root/pgbouncer.pid")"
  url="postgresql://$user@127.0.0.1:$port/$db"
  cat >"$state_file" <<EOF
root='$root'
port='$port'
pid='$pid'
url='$url'
EOF
  trap - EXIT
  echo "$url"
}

cmd_stop() {
  if ! load_state; then
    echo "pgbouncer-test: no PgBouncer recorded in $state_file; nothing to stop" >&2
    return 0
  fi
  if running; then
    kill -TERM "$pid" || true
    local waited=0
    while running && [[ $waited -lt 50 ]]; do
      sleep 0.1
      waited=$((waited + 1))
    done
    if running; then kill -KILL "$pid" || true; fi
  fi
  rm -rf "$root"
  rm -f "$state_file"
  rmdir "$state_dir" 2>/dev/null || true
}

cmd_url() {
  load_state || die "no PgBouncer recorded in $state_file"
  echo "$url"
}

cmd_repoint() {
  local to="${1:-}"
  [[ "$to" =~ ^[1-9][0-9]{0,4}$ ]] || die "usage: $0 repoint PORT"
  load_state || die "no PgBouncer recorded in $state_file"
  as_server_user sed -i "s/^\* = host=127\.0\.0\.1 port=[0-9]*\$/* = host=127.0.0.1 port=$to/" \
    "$root/pgbouncer.ini"
  grep -q "^\* = host=127\.0\.0\.1 port=$to\$" "$root/pgbouncer.ini" ||
    die "could not point $root/pgbouncer.ini at port $to"
}

case "${1:-}" in
  start) cmd_start "${2:-}" ;;
  repoint) cmd_repoint "${2:-}" ;;
  stop) cmd_stop ;;
  url) cmd_url ;;
  *)
    echo "usage: $0 start URL|stop|url|repoint PORT" >&2
    exit 2
    ;;
esac
