#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests, on a free loopback port, in a temporary
# folder, with trust authentication for loopback connections; optionally with a streaming
# hot standby of it (HOLDFAST_PG_STANDBY=1).
#
#   scripts/pg-test-server.sh start         prints ONLY the primary's connection URL on stdout
#   scripts/pg-test-server.sh stop          stops both servers (pg_ctl stop -m fast) and
#                                           removes their folder
#   scripts/pg-test-server.sh down          stops the primary but keeps its folder and port
#   scripts/pg-test-server.sh up            starts it again after `down` (same data, same port)
#   scripts/pg-test-server.sh url           prints the URL of the running primary
#   scripts/pg-test-server.sh standby-url   prints the URL of the standby
#   scripts/pg-test-server.sh standby-down  stops the standby (keeps its folder and port)
#   scripts/pg-test-server.sh standby-up    starts it again after standby-down
#   scripts/pg-test-server.sh promoted      records that the standby was promoted (the
#                                           caller promoted it, e.g. with pg_promote()):
#                                           it is the primary from now on, and the old
#                                           primary (stopped, frozen or fenced: the caller
#                                           sees to it that it never answers again) the
#                                           standby, to rebuild
#   scripts/pg-test-server.sh rebuild-standby  after `promoted`: the old primary's folder
#                                           replaced by a fresh `pg_basebackup -R` from
#                                           the new primary, started as its streaming
#                                           standby on the old primary's port; prints the
#                                           standby's URL
#
# The verbs act by role, not by folder: the state file records which folder and port are
# the primary's and which the standby's, and `promoted` swaps them. After a failover
# (promoted, then rebuild-standby) `down` stops the new primary, `standby-down` the rebuilt
# standby, and `url` and `standby-url` print theirs. Each folder keeps its log file
# (server.log for the first primary's, standby.log for the first standby's).
#
# The standby is made with `pg_basebackup -R -X stream` from the running primary (a fast
# checkpoint, no fsync: well under a second on a fresh cluster) and started with
# hot_standby=on, so it answers reads (pg_is_in_recovery() is true) and replays the
# primary's WAL as it streams in. Both listen on 127.0.0.1 only. A start that fails half
# way stops whatever it started and removes the folder.
#
# The server refuses to run as root, so when this script runs as root (CI does) every
# server binary runs as the `postgres` OS user; otherwise as the calling user.
#
# Environment:
#   HOLDFAST_PG_STATE_DIR        where the state file lives
#                                (default ${TMPDIR:-/tmp}/holdfast-pg-test); tests that
#                                need a private server of their own pass another folder
#   HOLDFAST_PG_MAX_CONNECTIONS  max_connections (default 64; the standby gets the same, as
#                                a hot standby must)
#   HOLDFAST_PG_STANDBY          1: `start` also makes and starts the standby
#   HOLDFAST_PG_BINDIR           server binaries (default /usr/lib/postgresql/15/bin, else
#                                the newest /usr/lib/postgresql/*/bin)
#
# Settings worth knowing: fsync is off (a throwaway cluster); synchronous_standby_names
# (in postgresql.conf, so ALTER SYSTEM can change it) names a standby that never exists while synchronous_commit defaults to `local`, so no
# COMMIT ever waits for it -- except in a session that sets synchronous_commit=on, which
# is how the commit-in-doubt test makes a COMMIT hang after it committed locally
# (docs/adr/0004-postgres-read-path-and-commit-in-doubt.md). The real standby reports as
# `holdfast_standby`, not that name, so it never makes a COMMIT wait either.
set -euo pipefail

die() {
  echo "pg-test-server: $*" >&2
  exit 1
}
note() { echo "pg-test-server: $*" >&2; }

state_dir="${HOLDFAST_PG_STATE_DIR:-${TMPDIR:-/tmp}/holdfast-pg-test}"
state_file="$state_dir/server.env"
max_connections="${HOLDFAST_PG_MAX_CONNECTIONS:-64}"

find_bindir() {
  if [[ -n "${HOLDFAST_PG_BINDIR:-}" ]]; then
    echo "$HOLDFAST_PG_BINDIR"
    return
  fi
  if [[ -x /usr/lib/postgresql/15/bin/pg_ctl ]]; then
    echo /usr/lib/postgresql/15/bin
    return
  fi
  local newest
  newest="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  echo "$newest"
}

# shellcheck source=lib/throwaway.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/throwaway.sh"

common_options() {
  echo "-k $root -c listen_addresses=127.0.0.1 -c max_connections=$max_connections" \
    "-c fsync=off -c full_page_writes=off"
}

server_options() {
  echo "-p $port $(common_options)"
}

# synchronous_commit and synchronous_standby_names go to postgresql.conf rather than the
# command line (which would outrank ALTER SYSTEM), so a test or the drill can turn on
# synchronous replication with ALTER SYSTEM + pg_reload_conf() (the drill's failover
# fault does). The standby copies the file with its base backup.
write_settings() {
  printf '%s\n' "synchronous_commit = 'local'" \
    "synchronous_standby_names = 'holdfast_absent_standby'" |
    as_server_user tee -a "$data_dir/postgresql.conf" >/dev/null
}

standby_options() {
  echo "-p $standby_port $(common_options) -c hot_standby=on -c cluster_name=holdfast_standby"
}

pg_start() {
  as_server_user "$bindir/pg_ctl" -D "$data_dir" -l "${log:-$root/server.log}" -w -t 30 \
    -o "$(server_options)" start >/dev/null
}

standby_start() {
  as_server_user "$bindir/pg_ctl" -D "$standby_dir" -l "${standby_log:-$root/standby.log}" \
    -w -t 30 -o "$(standby_options)" start >/dev/null
}

# Writes the state file from the variables, by role: data_dir, port, url and log are the
# primary's, standby_* the standby's.
write_state() {
  cat >"$state_file.tmp" <<EOF
root='$root'
data_dir='$data_dir'
port='$port'
pid_file='$data_dir/postmaster.pid'
bindir='$bindir'
max_connections='$max_connections'
url='$url'
log='$log'
standby_dir='$standby_dir'
standby_port='$standby_port'
standby_url='$standby_url'
standby_log='$standby_log'
EOF
  mv "$state_file.tmp" "$state_file"
}

# Set while `start` runs: the folder a failure half way must remove, after stopping
# whatever it started.
starting_root=""
abandon_start() {
  [[ -n "$starting_root" ]] || return 0
  local dir
  for dir in "${standby_dir:-}" "${data_dir:-}"; do
    if [[ -n "$dir" && -f "$dir/postmaster.pid" ]]; then
      as_server_user "$bindir/pg_ctl" -D "$dir" -m immediate -w -t 10 stop >/dev/null 2>&1 ||
        true
    fi
  done
  rm -rf "$starting_root"
  rm -f "$state_file"
}

# Makes the standby from the running primary and starts it.
make_standby() {
  standby_dir="$root/standby"
  if ! as_server_user "$bindir/pg_basebackup" -h 127.0.0.1 -p "$port" -U postgres \
    -D "$standby_dir" -R -X stream -c fast --no-sync >"$root/basebackup.log" 2>&1; then
    cat "$root/basebackup.log" >&2
    die "pg_basebackup failed"
  fi
  local tries=0
  while :; do
    standby_port="$(free_port)"
    tries=$((tries + 1))
    if standby_start; then break; fi
    if [[ $tries -ge 8 ]]; then
      tail -n 20 "$standby_log" >&2 || true
      die "the standby did not start (see the log above)"
    fi
    note "port $standby_port did not work for the standby; trying another"
  done
  standby_url="postgresql://postgres@127.0.0.1:$standby_port/postgres"
}

cmd_start() {
  bindir="$(find_bindir)"
  [[ -n "$bindir" && -x "$bindir/initdb" && -x "$bindir/pg_ctl" ]] ||
    die "PostgreSQL server binaries not found (install the Debian package 'postgresql'," \
      "or set HOLDFAST_PG_BINDIR)"
  if [[ $(id -u) -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
    die "running as root, but there is no 'postgres' OS user to run the server as"
  fi
  if load_state; then
    if as_server_user "$bindir/pg_ctl" -D "$data_dir" status >/dev/null 2>&1; then
      die "a test server is already running at $url (state $state_file);" \
        "stop it first, or set HOLDFAST_PG_STATE_DIR for another one"
    fi
    note "removing the state of a server that is no longer running ($state_file)"
    if [[ -n "${standby_dir:-}" ]]; then
      as_server_user "$bindir/pg_ctl" -D "$standby_dir" -m immediate -w -t 10 stop \
        >/dev/null 2>&1 || true
    fi
    rm -rf "$root"
    rm -f "$state_file"
  fi
  standby_dir=""
  standby_port=""
  standby_url=""
  mkdir -p "$state_dir"

  root="$(mktemp -d "${TMPDIR:-/tmp}/holdfast-pg.XXXXXX")"
  starting_root="$root"
  trap abandon_start EXIT
  chmod 700 "$root"
  if [[ $(id -u) -eq 0 ]]; then chown postgres: "$root"; fi
  as_server_user test -w "$root" ||
    die "the server user cannot write $root (is ${TMPDIR:-/tmp} reachable by 'postgres'?)"
  data_dir="$root/data"
  log="$root/server.log"
  standby_log="$root/standby.log"
  if ! as_server_user "$bindir/initdb" -D "$data_dir" -U postgres -A trust -E UTF8 \
    --no-sync --locale=C >"$root/initdb.log" 2>&1; then
    cat "$root/initdb.log" >&2
    die "initdb failed"
  fi
  write_settings

  local tries=0
  while :; do
    port="$(free_port)"
    tries=$((tries + 1))
    if pg_start; then break; fi
    if [[ $tries -ge 8 ]]; then
      tail -n 20 "$log" >&2 || true
      die "the server did not start (see the log above)"
    fi
    note "port $port did not work; trying another"
  done
  if [[ "${HOLDFAST_PG_STANDBY:-0}" == "1" ]]; then make_standby; fi

  url="postgresql://postgres@127.0.0.1:$port/postgres"
  write_state
  starting_root=""
  trap - EXIT
  echo "$url"
}

cmd_stop() {
  if ! load_state; then
    note "no test server recorded in $state_file; nothing to stop"
    return 0
  fi
  if [[ -n "${standby_dir:-}" ]]; then
    as_server_user "$bindir/pg_ctl" -D "$standby_dir" -m fast -w -t 30 stop >/dev/null 2>&1 ||
      true
  fi
  as_server_user "$bindir/pg_ctl" -D "$data_dir" -m fast -w -t 30 stop >/dev/null 2>&1 || true
  rm -rf "$root"
  rm -f "$state_file"
  rmdir "$state_dir" 2>/dev/null || true
}

cmd_down() {
  load_state || die "no test server recorded in $state_file"
  as_server_user "$bindir/pg_ctl" -D "$data_dir" -m fast -w -t 30 stop >/dev/null
}

cmd_up() {
  load_state || die "no test server recorded in $state_file"
  pg_start || die "the server did not start again (see ${log:-$root/server.log})"
}

cmd_url() {
  load_state || die "no test server recorded in $state_file"
  echo "$url"
}

load_standby() {
  load_state || die "no test server recorded in $state_file"
  [[ -n "${standby_dir:-}" ]] ||
    die "the test server at $url has no standby (start it with HOLDFAST_PG_STANDBY=1)"
}

cmd_standby_url() {
  load_standby
  echo "$standby_url"
}

cmd_standby_down() {
  load_standby
  as_server_user "$bindir/pg_ctl" -D "$standby_dir" -m fast -w -t 30 stop >/dev/null
}

cmd_standby_up() {
  load_standby
  standby_start ||
    die "the standby did not start again (see ${standby_log:-$root/standby.log})"
}

# True while a postmaster runs in folder $1.
running_in() {
  as_server_user "$bindir/pg_ctl" -D "$1" status >/dev/null 2>&1
}

cmd_promoted() {
  load_standby
  if [[ -x "$bindir/psql" ]]; then
    local recovery
    recovery="$("$bindir/psql" -X -q -A -t -h 127.0.0.1 -p "$standby_port" -U postgres \
      -d postgres -c 'SELECT pg_is_in_recovery()' 2>&1)" ||
      die "the standby on port $standby_port did not answer: $recovery"
    [[ "$recovery" == "f" ]] ||
      die "the standby on port $standby_port is still in recovery: promote it first"
  fi
  local d="$data_dir" p="$port" u="$url" l="${log:-$root/server.log}"
  data_dir="$standby_dir" port="$standby_port" url="$standby_url"
  log="${standby_log:-$root/standby.log}"
  standby_dir="$d" standby_port="$p" standby_url="$u" standby_log="$l"
  write_state
}

cmd_rebuild_standby() {
  load_standby
  if running_in "$standby_dir"; then
    die "the standby's folder ($standby_dir) has a running server: stop it first"
  fi
  if port_in_use "$standby_port"; then
    die "port $standby_port is taken: the old primary's processes may still run" \
      "(a frozen one has no pid file left; fence or stop it first)"
  fi
  # A fenced (SIGKILLed) postmaster leaves its Unix socket and its lock file, which names
  # a pid that may since be another process's.
  rm -f "$root/.s.PGSQL.$standby_port" "$root/.s.PGSQL.$standby_port.lock"
  rm -rf "$standby_dir"
  if ! as_server_user "$bindir/pg_basebackup" -h 127.0.0.1 -p "$port" -U postgres \
    -D "$standby_dir" -R -X stream -c fast --no-sync >"$root/basebackup.log" 2>&1; then
    cat "$root/basebackup.log" >&2
    die "pg_basebackup from the primary on port $port failed"
  fi
  if ! standby_start; then
    tail -n 20 "${standby_log:-$root/standby.log}" >&2 || true
    die "the rebuilt standby did not start on port $standby_port (see the log above)"
  fi
  echo "$standby_url"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  down) cmd_down ;;
  up) cmd_up ;;
  url) cmd_url ;;
  standby-url) cmd_standby_url ;;
  standby-down) cmd_standby_down ;;
  standby-up) cmd_standby_up ;;
  promoted) cmd_promoted ;;
  rebuild-standby) cmd_rebuild_standby ;;
  *)
    echo "usage: $0 start|stop|down|up|url|standby-url|standby-down|standby-up|promoted|" \
      "rebuild-standby" >&2
    exit 2
    ;;
esac
