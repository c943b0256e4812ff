#!/usr/bin/env bash
# What a frozen PostgreSQL primary costs the panel in threads (issue #43): the panel on a
# throwaway server under CONNECTIONS clients (wrk on the schedule page), the primary frozen
# (SIGSTOP of the postmaster and every backend) for FREEZE_SECONDS, and once a second the
# panel's thread count and how many of its threads wait in a blocking socket call (their
# /proc/PID/task/*/wchan: poll, select, a socket read or connect; not an event loop's epoll),
# naming those that are not the library's cancel requests (holdfast names its threads hf-*).
# Prints one line per second and a summary; the server is thawed and removed however the
# script ends.
#   scripts/freeze-threads.sh [build/release/apps/holdfast/holdfast]
# Env: FREEZE_SECONDS (20), CONNECTIONS (16).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
source "$here/lib/throwaway.sh"  # free_port: a free port below the ephemeral range
exe="${1:-build/release/apps/holdfast/holdfast}"
freeze_seconds="${FREEZE_SECONDS:-20}"
connections="${CONNECTIONS:-16}"
for tool in wrk curl; do
  command -v "$tool" >/dev/null || { echo "freeze-threads: $tool not found (Debian: wrk, curl)" >&2; exit 1; }
done
[[ -x "$exe" ]] || { echo "freeze-threads: $exe is not built (make drill builds it)" >&2; exit 1; }

dir="$(mktemp -d /tmp/holdfast-freeze-threads.XXXXXX)"
pg_state="$dir/pg-state"
panel_pid=""
wrk_pid=""
frozen=""
cleanup() {
  if [[ -n "$frozen" ]]; then kill -CONT $frozen 2>/dev/null || true; fi
  if [[ -n "$wrk_pid" ]]; then kill "$wrk_pid" 2>/dev/null || true; wait "$wrk_pid" 2>/dev/null || true; fi
  if [[ -n "$panel_pid" ]]; then kill "$panel_pid" 2>/dev/null || true; wait "$panel_pid" 2>/dev/null || true; fi
  HOLDFAST_PG_STATE_DIR="$pg_state" "$here/pg-test-server.sh" stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT

url="$(HOLDFAST_PG_STATE_DIR="$pg_state" "$here/pg-test-server.sh" start)"
# shellcheck disable=SC1091
pid_file="$(source "$pg_state/server.env" && echo "$pid_file")"
postmaster="$(head -1 "$pid_file")"
port="$(free_port)"
"$exe" panel --pg "$url" --port "$port" >"$dir/panel.log" 2>&1 &
panel_pid=$!
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
cookie="$(curl -fsi -X POST -d 'email=Ada.Nowak@club.example&password=demo' \
  "http://127.0.0.1:$port/login" | tr -d '\r' | sed -n 's/^[Ss]et-[Cc]ookie: \(session=[^;]*\).*/\1/p' | head -1)"
[[ -n "$cookie" ]] || { echo "freeze-threads: could not sign in" >&2; cat "$dir/panel.log" >&2; exit 1; }
wrk -t2 -c"$connections" -d"$((freeze_seconds + 12))s" --latency -H "Cookie: $cookie" \
  "http://127.0.0.1:$port/dashboard/schedule" >"$dir/wrk.txt" &
wrk_pid=$!

most_threads=0
most_blocking=0
most_other=0
sample() {
  local threads blocking=0 other=0 t name wchan names=""
  threads=$(ls "/proc/$panel_pid/task" | wc -l)
  # A thread blocked in a socket call: its wchan is poll, select or a socket wait. An event
  # loop's own wait (epoll) is not one: it waits for every socket at once. Only the library's
  # cancel requests (threads named hf-pg-cancel) may be seen there: the log writer's batches
  # wait on the event loop too (asio::pg::LogStore).
  for t in /proc/"$panel_pid"/task/*; do
    wchan="$(cat "$t/wchan" 2>/dev/null || true)"
    [[ "$wchan" =~ poll|select|wait_woken|sk_wait|tcp_|inet_ && ! "$wchan" =~ epoll ]] || continue
    blocking=$((blocking + 1))
    name="$(cat "$t/comm" 2>/dev/null || true)"
    if [[ "$name" != hf-pg-cancel ]]; then
      other=$((other + 1))
      names+=" $name"
    fi
  done
  echo "$1: $threads threads, $blocking in a blocking socket wait ($other not a cancel request${names:+:$names})"
  if [[ "$1" == frozen* ]]; then
    (( threads > most_threads )) && most_threads=$threads
    (( blocking > most_blocking )) && most_blocking=$blocking
    (( other > most_other )) && most_other=$other
  fi
  return 0
}
sleep 5
sample "before"
before=$(ls "/proc/$panel_pid/task" | wc -l)
frozen="$postmaster $(ps -o pid= --ppid "$postmaster" | tr '\n' ' ')"
kill -STOP $frozen
for i in $(seq "$freeze_seconds"); do
  sleep 1
  sample "frozen ${i}s"
done
kill -CONT $frozen
frozen=""
sleep 3
sample "thawed"
wait "$wrk_pid" || true
wrk_pid=""
non2xx="$(sed -n 's/^ *Non-2xx or 3xx responses: *\([0-9]*\).*/\1/p' "$dir/wrk.txt")"
echo "summary: $before threads before, at most $most_threads during the ${freeze_seconds} s freeze," \
     "at most $most_blocking in a blocking socket wait ($most_other not a cancel request); $(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$dir/wrk.txt") pages," \
     "${non2xx:-0} not 2xx"
# The issue's target: no thread more during the freeze, none in a blocking socket wait but the
# cancel requests.
if (( most_threads > before || most_other > 0 )); then
  echo "freeze-threads: FAILED (threads grew, or a thread other than a cancel request blocked)" >&2
  exit 1
fi
