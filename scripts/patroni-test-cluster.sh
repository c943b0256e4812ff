#!/usr/bin/env bash
# A throwaway Patroni cluster for the HA drill and its e2e test: one etcd and three
# PostgreSQL nodes, each under its own Patroni, all on loopback ports in a temporary folder
# (FAULTS.md, "Patroni + etcd"; Debian 12's patroni 3.0.2 and etcd-server 3.4.23).
#
#   scripts/patroni-test-cluster.sh start    starts etcd and the three nodes and waits (about
#                                            13 s here; up to 3 attempts of at most 2 minutes,
#                                            each on new ports) until one leads, one is a
#                                            synchronous standby and all three stream. Prints
#                                            on stdout the multi-host URL of the three nodes
#                                            (postgresql://postgres@127.0.0.1:P1,...:P3/postgres),
#                                            then a line per node: NAME PG_PORT REST_PORT
#   scripts/patroni-test-cluster.sh stop     stops the three Patronis (SIGTERM: each stops its
#                                            PostgreSQL with a fast shutdown), then etcd, every
#                                            one by its pid (SIGKILL for what is still there
#                                            after 20 s), and removes the folder
#   scripts/patroni-test-cluster.sh status   one line per member from Patroni's REST API
#                                            (GET /cluster): name, role, state, timeline, lag
#   scripts/patroni-test-cluster.sh url      prints the multi-host URL
#   scripts/patroni-test-cluster.sh leader   prints the leader's name, PostgreSQL port and REST
#                                            port (fails while there is none)
#   scripts/patroni-test-cluster.sh wait-healthy [SECONDS]
#                                            waits (default 90 s) until one member leads and
#                                            runs, the other two stream, one of them is the
#                                            synchronous standby, and all three are on one
#                                            timeline
#
# The state file ($HOLDFAST_PATRONI_STATE_DIR/cluster.env) records the folder, the ports,
# each node's data folder and Patroni config, and the pids of etcd and of the Patronis.
# Each node's folder keeps patroni.log (Patroni's and its PostgreSQL's output); etcd's is
# etcd.log. An attempt to start that fails half way stops whatever it started (by pid) and
# removes its folder, then tries again; after three it gives up.
#
# PostgreSQL refuses to run as root, so when this script runs as root (CI does) Patroni and
# etcd run as the `postgres` OS user; otherwise as the calling user. Every process is
# started through `sh -c 'echo $$ > PIDFILE; exec ...'`, so the pid recorded is the
# server's own, and is stopped by that pid, never by name.
#
# Ports: eight, drawn from 20000-32767 (below Linux's ephemeral range, where an outgoing
# connection could take a REST or peer port at the moment it binds), each checked free.
#
# Environment:
#   HOLDFAST_PATRONI_STATE_DIR   where the state file lives
#                                (default ${TMPDIR:-/tmp}/holdfast-patroni-test)
#   HOLDFAST_PATRONI_DCS         etcd3 (default: Patroni's etcd v3 client) or etcd (its v2
#                                client, compare-and-swap on the leader key; etcd 3.4 then
#                                runs with --enable-v2)
#   HOLDFAST_PATRONI_FAILSAFE    1: bootstrap with failsafe_mode on (default 0; it can be
#                                changed later with PATCH /config on any node's REST API)
#   HOLDFAST_PATRONI_TTL, HOLDFAST_PATRONI_LOOP_WAIT, HOLDFAST_PATRONI_RETRY_TIMEOUT
#                                the leader key's TTL, the loop's wait and the DCS and
#                                PostgreSQL retry timeout in seconds (default 10, 2, 5: a
#                                fast test; Patroni's own defaults are 30, 10, 10)
#   HOLDFAST_PG_MAX_CONNECTIONS  max_connections (default 100)
#   HOLDFAST_PG_BINDIR           server binaries (default /usr/lib/postgresql/15/bin)
#
# Settings worth knowing: synchronous_mode is on (a commit waits for the synchronous
# standby); use_pg_rewind is on (Patroni turns wal_log_hints on), so a demoted leader is
# rewound rather than copied again; fsync is off (a throwaway cluster: nothing here
# survives an OS crash, and none is caused); the watchdog is off.
set -euo pipefail

die() {
  echo "patroni-test-cluster: $*" >&2
  exit 1
}
note() { echo "patroni-test-cluster: $*" >&2; }

state_dir="${HOLDFAST_PATRONI_STATE_DIR:-${TMPDIR:-/tmp}/holdfast-patroni-test}"
state_file="$state_dir/cluster.env"
dcs="${HOLDFAST_PATRONI_DCS:-etcd3}"
failsafe="${HOLDFAST_PATRONI_FAILSAFE:-0}"
ttl="${HOLDFAST_PATRONI_TTL:-10}"
loop_wait="${HOLDFAST_PATRONI_LOOP_WAIT:-2}"
retry_timeout="${HOLDFAST_PATRONI_RETRY_TIMEOUT:-5}"
max_connections="${HOLDFAST_PG_MAX_CONNECTIONS:-100}"
bindir="${HOLDFAST_PG_BINDIR:-/usr/lib/postgresql/15/bin}"
nodes=(n1 n2 n3)

# shellcheck source=lib/throwaway.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/throwaway.sh"

# Ports handed out by this run, so no two are the same.
taken_ports=" "
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 12768))
    if [[ "$taken_ports" != *" $p "* ]] && ! port_in_use "$p"; then
      taken_ports+="$p "
      echo "$p"
      return
    fi
  done
}

# Starts "$@" in the background as the server user, in a session of its own, with its
# output appended to $log_to; the server's pid goes to $pid_to. `setsid --fork` detaches it
# at once, so no runuser waits on it: runuser stops itself when its child is stopped (job
# control), and would stay stopped, its child unreaped, after a fault's SIGSTOP.
spawn_server() {
  local pid_to="$1" log_to="$2"
  shift 2
  # shellcheck disable=SC2016
  as_server_user setsid --fork sh -c 'echo $$ > "$0"; exec "$@"' "$pid_to" "$@" \
    </dev/null >>"$log_to" 2>&1
}

# The pid in file $1 once it is there (up to 5 s); empty otherwise.
read_pid() {
  local i
  for i in $(seq 50); do
    if [[ -s "$1" ]]; then
      cat "$1"
      return
    fi
    sleep 0.1
  done
}

alive() { [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null; }

# Sends signal $1 to pid $2 and waits up to $3 seconds for it to go; SIGKILL after that.
stop_pid() {
  local sig="$1" pid="$2" wait_s="$3" i
  alive "$pid" || return 0
  kill "-$sig" "$pid" 2>/dev/null || true
  kill -CONT "$pid" 2>/dev/null || true # a frozen one (the drill's faults) must see it
  for i in $(seq $((wait_s * 10))); do
    alive "$pid" || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

# The postmaster of data folder $1 (first line of postmaster.pid), when it runs.
postmaster_of() {
  local pid
  pid="$(head -n 1 "$1/postmaster.pid" 2>/dev/null || true)"
  if [[ "$pid" =~ ^[0-9]+$ ]] && alive "$pid"; then echo "$pid"; fi
}

# Stops everything recorded under $root: the Patronis (which stop their PostgreSQL), any
# postmaster left behind, then etcd. Each by its pid.
stop_all() {
  local n pid pm child
  for n in "${nodes[@]}"; do
    # A node frozen by a fault (its postmaster and backends SIGSTOPped) must run to stop.
    pm="$(postmaster_of "$root/$n/data")"
    if [[ -n "$pm" ]]; then
      kill -CONT "$pm" 2>/dev/null || true
      for child in $(ps -o pid= --ppid "$pm" 2>/dev/null); do kill -CONT "$child" 2>/dev/null || true; done
    fi
  done
  for n in "${nodes[@]}"; do
    pid="$(cat "$root/$n/patroni.pid" 2>/dev/null || true)"
    if alive "$pid"; then kill -TERM "$pid" 2>/dev/null || true; fi
  done
  for n in "${nodes[@]}"; do
    pid="$(cat "$root/$n/patroni.pid" 2>/dev/null || true)"
    stop_pid TERM "$pid" 20
  done
  for n in "${nodes[@]}"; do
    pm="$(postmaster_of "$root/$n/data")"
    if [[ -n "$pm" ]]; then
      as_server_user "$bindir/pg_ctl" -D "$root/$n/data" -m immediate -w -t 10 stop \
        >/dev/null 2>&1 || kill -KILL "$pm" 2>/dev/null || true
    fi
  done
  pid="$(cat "$root/etcd.pid" 2>/dev/null || true)"
  stop_pid TERM "$pid" 10
}

starting_root=""
abandon_start() {
  [[ -n "$starting_root" ]] || return 0
  root="$starting_root"
  stop_all
  rm -rf "$starting_root"
  rm -f "$state_file"
}

# GET $2 on REST port $1, within 2 s; more curl options after them.
rest_get() {
  curl -s -m 2 "http://127.0.0.1:$1$2" "${@:3}"
}

# Reads /cluster from the first node that answers and prints one line per member:
# name role state timeline lag. Fails when no node answers.
members() {
  local r out
  for r in $rest_ports; do
    if out="$(rest_get "$r" /cluster)" && [[ -n "$out" ]]; then
      python3 -c '
import json, sys
for m in json.loads(sys.stdin.read()).get("members", []):
    print(m.get("name"), m.get("role"), m.get("state"), m.get("timeline", "-"), m.get("lag", "-"))
' <<<"$out" && return 0
    fi
  done
  return 1
}

# True when one member leads and runs, and the two others stream (one of them the
# synchronous standby), all three on the same timeline (a thawed old leader is shown as a
# running replica on its old timeline for a moment before Patroni rewinds it).
healthy() {
  local lines
  lines="$(members 2>/dev/null)" || return 1
  [[ "$(grep -c ' leader running ' <<<"$lines")" -eq 1 ]] || return 1
  [[ "$(grep -cE ' (sync_standby|replica) (streaming|running) ' <<<"$lines")" -eq 2 ]] || return 1
  grep -q ' sync_standby ' <<<"$lines" || return 1
  [[ "$(awk '{ print $4 }' <<<"$lines" | sort -u)" =~ ^[0-9]+$ ]]
}

wait_healthy() {
  local seconds="$1" i
  for i in $(seq $((seconds * 5))); do
    if healthy; then return 0; fi
    sleep 0.2
  done
  return 1
}

write_config() {
  local n="$1" pg="$2" rest="$3" dcs_section
  local dir="$root/$n"
  dcs_section="$dcs:
  host: 127.0.0.1:$etcd_client"
  cat >"$dir/patroni.yml" <<EOF
scope: holdfast
namespace: /holdfast/
name: $n
log:
  level: INFO
restapi:
  listen: 127.0.0.1:$rest
  connect_address: 127.0.0.1:$rest
$dcs_section
bootstrap:
  dcs:
    ttl: $ttl
    loop_wait: $loop_wait
    retry_timeout: $retry_timeout
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    failsafe_mode: $([[ "$failsafe" == "1" ]] && echo true || echo false)
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        max_connections: $max_connections
        wal_keep_size: 128MB
        hot_standby: 'on'
  initdb:
  - encoding: UTF8
  - locale: C
  - no-sync
postgresql:
  listen: 127.0.0.1:$pg
  connect_address: 127.0.0.1:$pg
  data_dir: $dir/data
  bin_dir: $bindir
  pgpass: $dir/pgpass
  authentication:
    superuser:
      username: postgres
      password: holdfast
    replication:
      username: replicator
      password: holdfast
    rewind:
      username: rewinder
      password: holdfast
  basebackup:
  - checkpoint: fast
  parameters:
    unix_socket_directories: '$root'
    fsync: 'off'
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 trust
  - host replication all 127.0.0.1/32 trust
watchdog:
  mode: 'off'
EOF
}

write_state() {
  cat >"$state_file.tmp" <<EOF
root='$root'
dcs='$dcs'
bindir='$bindir'
etcd_client='$etcd_client'
etcd_peer='$etcd_peer'
etcd_pid_file='$root/etcd.pid'
pg_ports='$pg_ports'
rest_ports='$rest_ports'
url='$url'
EOF
  mv "$state_file.tmp" "$state_file"
}

# Starts etcd; false (the log's end on stderr) when it does not become healthy in 10 s.
start_etcd() {
  local v2=()
  if [[ "$dcs" == "etcd" ]]; then v2=(--enable-v2=true); fi
  etcd_client="$(free_port)"
  etcd_peer="$(free_port)"
  spawn_server "$root/etcd.pid" "$root/etcd.log" etcd --name e1 --data-dir "$root/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_client" \
    --advertise-client-urls "http://127.0.0.1:$etcd_client" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "e1=http://127.0.0.1:$etcd_peer" "${v2[@]}"
  local pid i
  pid="$(read_pid "$root/etcd.pid")"
  for i in $(seq 100); do
    if curl -s -m 1 "http://127.0.0.1:$etcd_client/health" | grep -q '"true"'; then return 0; fi
    alive "$pid" || break
    sleep 0.1
  done
  tail -n 20 "$root/etcd.log" >&2 || true
  note "etcd did not become healthy on port $etcd_client (see the log above)"
  return 1
}

# One attempt at the whole cluster in a fresh folder ($root); false, with what went wrong
# on stderr, when a part did not come up (a port taken at the moment it was bound, a slow
# bootstrap): the caller stops what it started and tries again.
start_once() {
  root="$(mktemp -d "${TMPDIR:-/tmp}/holdfast-patroni.XXXXXX")"
  starting_root="$root"
  chmod 700 "$root"
  if [[ $(id -u) -eq 0 ]]; then chown postgres: "$root"; fi
  as_server_user test -w "$root" ||
    die "the server user cannot write $root (is ${TMPDIR:-/tmp} reachable by 'postgres'?)"

  start_etcd || return 1
  pg_ports=""
  rest_ports=""
  local n pg rest
  for n in "${nodes[@]}"; do
    pg="$(free_port)"
    rest="$(free_port)"
    pg_ports+="${pg_ports:+ }$pg"
    rest_ports+="${rest_ports:+ }$rest"
    as_server_user mkdir -m 700 "$root/$n"
    write_config "$n" "$pg" "$rest"
    if [[ $(id -u) -eq 0 ]]; then chown postgres: "$root/$n/patroni.yml"; fi
  done
  # The first node alone, so it is the one that bootstraps (initdb); the others copy it
  # (pg_basebackup) once it leads.
  spawn_server "$root/n1/patroni.pid" "$root/n1/patroni.log" patroni "$root/n1/patroni.yml"
  local i
  for i in $(seq 300); do
    if [[ "$(rest_get "${rest_ports%% *}" /leader -o /dev/null -w '%{http_code}' || true)" == 200 ]]; then
      break
    fi
    if [[ $i -eq 300 ]]; then
      tail -n 30 "$root/n1/patroni.log" >&2 || true
      note "n1 did not bootstrap within 60 s (its log above)"
      return 1
    fi
    sleep 0.2
  done
  for n in n2 n3; do
    spawn_server "$root/$n/patroni.pid" "$root/$n/patroni.log" patroni "$root/$n/patroni.yml"
  done
  url="postgresql://postgres@$(for p in $pg_ports; do printf '127.0.0.1:%s,' "$p"; done | sed 's/,$//')/postgres"
  write_state
  if ! wait_healthy 60; then
    members >&2 || true
    for n in "${nodes[@]}"; do tail -n 15 "$root/$n/patroni.log" >&2 || true; done
    note "the cluster did not become healthy within 60 s (members and logs above)"
    return 1
  fi
}

cmd_start() {
  [[ -x "$bindir/initdb" ]] ||
    die "PostgreSQL server binaries not found in $bindir (install 'postgresql', or set HOLDFAST_PG_BINDIR)"
  command -v patroni >/dev/null || die "patroni is not installed (scripts/install-deps.sh)"
  command -v etcd >/dev/null || die "etcd is not installed (scripts/install-deps.sh)"
  command -v curl >/dev/null || die "curl is not installed (scripts/install-deps.sh)"
  [[ "$dcs" == "etcd3" || "$dcs" == "etcd" ]] ||
    die "HOLDFAST_PATRONI_DCS must be etcd3 or etcd, not '$dcs'"
  if [[ $(id -u) -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
    die "running as root, but there is no 'postgres' OS user to run the servers as"
  fi
  if load_state; then
    if alive "$(cat "$etcd_pid_file" 2>/dev/null || true)"; then
      die "a test cluster is already running at $url (state $state_file);" \
        "stop it first, or set HOLDFAST_PATRONI_STATE_DIR for another one"
    fi
    note "removing the state of a cluster that is no longer running ($state_file)"
    stop_all
    rm -rf "$root"
    rm -f "$state_file"
  fi
  mkdir -p "$state_dir"
  trap abandon_start EXIT
  local attempt
  for attempt in 1 2 3; do
    if start_once; then break; fi
    [[ $attempt -lt 3 ]] || die "the cluster did not start in 3 attempts (see above)"
    note "attempt $attempt failed; stopping what it started and trying again on other ports"
    stop_all
    rm -rf "$root"
    rm -f "$state_file"
  done
  starting_root=""
  trap - EXIT
  echo "$url"
  local k=1 p r
  for p in $pg_ports; do
    r="$(cut -d' ' -f$k <<<"$rest_ports")"
    echo "n$k $p $r"
    k=$((k + 1))
  done
}

cmd_stop() {
  if ! load_state; then
    note "no test cluster recorded in $state_file; nothing to stop"
    return 0
  fi
  stop_all
  rm -rf "$root"
  rm -f "$state_file"
  rmdir "$state_dir" 2>/dev/null || true
}

cmd_status() {
  load_state || die "no test cluster recorded in $state_file"
  members || die "no node's REST API answered"
}

cmd_leader() {
  load_state || die "no test cluster recorded in $state_file"
  local lines name k
  lines="$(members)" || die "no node's REST API answered"
  name="$(awk '$2 == "leader" && $3 == "running" { print $1 }' <<<"$lines")"
  [[ -n "$name" ]] || die "no running leader: $lines"
  k="${name#n}"
  echo "$name $(cut -d' ' -f"$k" <<<"$pg_ports") $(cut -d' ' -f"$k" <<<"$rest_ports")"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  url)
    load_state || die "no test cluster recorded in $state_file"
    echo "$url"
    ;;
  leader) cmd_leader ;;
  wait-healthy)
    load_state || die "no test cluster recorded in $state_file"
    wait_healthy "${2:-90}" || { members >&2 || true; die "not healthy within ${2:-90} s"; }
    ;;
  *)
    echo "usage: $0 start|stop|status|url|leader|wait-healthy [SECONDS]" >&2
    exit 2
    ;;
esac
