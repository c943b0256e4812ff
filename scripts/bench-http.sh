#!/usr/bin/env bash
# The panel's HTTP throughput beside nginx's, in one run on this machine (make bench runs it).
#
#   scripts/bench-http.sh [HOLDFAST_EXE]
#
# Starts `holdfast panel` on a throwaway SQLite file, signs in, and has wrk fetch the
# schedule page over 16 keep-alive connections; then nginx serves the very same bytes as a
# static file and wrk fetches that. The page is a signed-in page: it reads the session and
# the file's change epoch, and, when anything was committed since the day's last good copy
# was read, the games and their context (ADR 0031); then it renders. Prints both rates,
# their ratio and each p99. The machine is shared and noisy: only the ratio within one run
# means anything. Needs wrk and nginx (Debian: wrk, nginx-light; make bench installs them).
# Env: SECONDS_EACH (default 10), CONNECTIONS (16), WORKERS (the panel's --workers, default
# its own), PANEL_FLAGS (more `holdfast panel` flags), WRITES_PER_SECOND (default 0: while
# wrk fetches the page, payments with fresh keys are made at this rate, each a commit that
# the next pages must read afresh), ENGINE (sqlite, the default, or postgres).
#
# ENGINE=postgres: the panel runs on a throwaway PostgreSQL server (scripts/pg-test-server.sh,
# stopped afterwards), and the run adds the page's floor: pgbench -M prepared with the same
# connections and 2 threads sending the page's own three statements (the session, the day's
# games, the day's context) with the same values, i.e. what a perfect client could get from
# the same server. Prints the panel's rate against the floor and against nginx. Needs pgbench
# (postgresql-contrib's, in Debian's postgresql package).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=lib/throwaway.sh
source "$here/lib/throwaway.sh"  # free_port: a free port below the ephemeral range
exe="${1:-build/release/apps/holdfast/holdfast}"
seconds_each="${SECONDS_EACH:-10}"
connections="${CONNECTIONS:-16}"
engine="${ENGINE:-sqlite}"
tools=(wrk nginx curl)
case "$engine" in
  sqlite) ;;
  postgres) tools+=(pgbench) ;;
  *) echo "bench-http: ENGINE must be sqlite or postgres, not '$engine'" >&2; exit 2 ;;
esac
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null || { echo "bench-http: $tool not found (Debian: wrk, nginx-light, curl, postgresql)" >&2; exit 1; }
done
[[ -x "$exe" ]] || { echo "bench-http: $exe is not built (make bench builds it)" >&2; exit 1; }

dir="$(mktemp -d /tmp/holdfast-bench-http.XXXXXX)"
panel_pid=""
nginx_pid_file="$dir/nginx.pid"
pg_state="$dir/pg-state"
pg_started=0
cleanup() {
  if [[ -n "$panel_pid" ]]; then kill "$panel_pid" 2>/dev/null || true; wait "$panel_pid" 2>/dev/null || true; fi
  if [[ -f "$nginx_pid_file" ]]; then kill "$(cat "$nginx_pid_file")" 2>/dev/null || true; fi
  if [[ $pg_started -eq 1 ]]; then
    HOLDFAST_PG_STATE_DIR="$pg_state" "$here/pg-test-server.sh" stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT

panel_port="$(free_port)"
nginx_port="$(free_port)"
while [[ "$nginx_port" == "$panel_port" ]]; do nginx_port="$(free_port)"; done

db_args=(--db "$dir/club.db")
if [[ "$engine" == postgres ]]; then
  pg_url="$(HOLDFAST_PG_STATE_DIR="$pg_state" "$here/pg-test-server.sh" start)"
  pg_started=1
  db_args=(--pg "$pg_url")
fi
workers_arg=()
[[ -n "${WORKERS:-}" ]] && workers_arg=(--workers "$WORKERS")
[[ -n "${PANEL_FLAGS:-}" ]] && read -ra panel_flags <<<"$PANEL_FLAGS" && workers_arg+=("${panel_flags[@]}")
"$exe" panel "${db_args[@]}" --port "$panel_port" "${workers_arg[@]}" >"$dir/panel.log" 2>&1 &
panel_pid=$!
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$panel_port/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
cookie="$(curl -fsi -X POST -d 'email=Ada.Nowak@club.example&password=demo' \
  "http://127.0.0.1:$panel_port/login" | tr -d '\r' | sed -n 's/^[Ss]et-[Cc]ookie: \(session=[^;]*\).*/\1/p' | head -1)"
[[ -n "$cookie" ]] || { echo "bench-http: could not sign in" >&2; cat "$dir/panel.log" >&2; exit 1; }
page="http://127.0.0.1:$panel_port/dashboard/schedule"
mkdir -p "$dir/www" "$dir/tmp"
curl -fs -H "Cookie: $cookie" "$page" -o "$dir/www/schedule.html"

cat >"$dir/nginx.conf" <<EOF
worker_processes 2;
pid $nginx_pid_file;
error_log $dir/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $dir/tmp; proxy_temp_path $dir/tmp; fastcgi_temp_path $dir/tmp;
  uwsgi_temp_path $dir/tmp; scgi_temp_path $dir/tmp;
  server { listen 127.0.0.1:$nginx_port; root $dir/www; location / { default_type text/html; } }
}
EOF
nginx -c "$dir/nginx.conf" -p "$dir" 2>/dev/null

# rate and p99 (ms) of one wrk run
measure() {
  local out
  out="$(wrk -t2 -c"$connections" -d"${seconds_each}s" --latency "$@")"
  local rate p99 non2xx
  rate="$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' <<<"$out")"
  p99="$(awk '$1=="99%"{v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; print v}' <<<"$out")"
  non2xx="$(sed -n 's/^ *Non-2xx or 3xx responses: *\([0-9]*\).*/\1/p' <<<"$out")"
  echo "$rate $p99 ${non2xx:-0}"
}
# Payments at WRITES_PER_SECOND while the page is fetched (python3's standard library).
writer_pid=""
if [[ "${WRITES_PER_SECOND:-0}" != 0 ]]; then
  csrf="$(curl -fs -D - -o /dev/null -H "Cookie: $cookie" "$page" | tr -d '\r' | sed -n 's/^[Xx]-[Cc][Ss][Rr][Ff]-[Tt]oken: //p')"
  python3 - "$panel_port" "$cookie" "$csrf" "$WRITES_PER_SECOND" "$seconds_each" >"$dir/writes.txt" <<'PY' &
import http.client, sys, time, uuid
port, cookie, csrf, rate, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
conn = http.client.HTTPConnection("127.0.0.1", int(port))
made = refused = 0
start = time.monotonic()
while time.monotonic() - start < seconds:
    conn.request("POST", "/payments", body="amount_cents=100",
                 headers={"Cookie": cookie, "X-CSRF-Token": csrf, "Idempotency-Key": uuid.uuid4().hex,
                          "Content-Type": "application/x-www-form-urlencoded"})
    answer = conn.getresponse()
    answer.read()
    made += 1
    refused += answer.status != 201
    pause = start + made / rate - time.monotonic()
    if pause > 0:
        time.sleep(pause)
print(made, refused, round(made / (time.monotonic() - start)))
PY
  writer_pid=$!
fi
read -r panel_rate panel_p99 panel_bad < <(measure -H "Cookie: $cookie" "$page")
# How many schedules were answered from the day's copy, without the schedule's queries.
metrics="$(curl -fs "http://127.0.0.1:$panel_port/metrics" || true)"
copies="$(awk '/^holdfast_panel_current_copy_pages_total/ {print $2}' <<<"$metrics")"
asked="$(awk '/^holdfast_panel_requests_total/ {print $2}' <<<"$metrics")"
writes=""
if [[ -n "$writer_pid" ]]; then
  wait "$writer_pid"
  read -r made refused per_second <"$dir/writes.txt"
  writes="; meanwhile $made payments ($per_second/s, $refused not 201)"
fi
# The floor on PostgreSQL: the page's three statements, as the store sends them (apps/panel/
# club_store_pg.cpp), prepared, over as many connections as wrk used, with the same values.
# pgbench takes every ":name" as a variable, also inside quotes: the format's colon is written
# E'\x3a' (the same constant).
floor=""
if [[ "$engine" == postgres ]]; then
  token="${cookie#session=}"
  cat >"$dir/page.sql" <<'SQL'
SELECT u.id, u.name, u.email, u.role FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.token = :token AND s.expires_at > :now;
SELECT g.id, c.name, a.name, a.color, to_char(g.starts_at, E'YYYY-MM-DD"T"HH24\x3aMI'), to_char(g.ends_at, E'YYYY-MM-DD"T"HH24\x3aMI'), g.capacity, (SELECT count(*) FROM signups s WHERE s.game_id = g.id) FROM games g JOIN courts c ON c.id = g.court_id JOIN activity_types a ON a.id = g.activity_type_id WHERE g.starts_at >= :day::date AND g.starts_at < :day::date + 1 ORDER BY g.starts_at, c.name;
SELECT kind, a, b FROM (SELECT 0 AS kind, 0::bigint AS ord, key AS a, value AS b FROM settings WHERE key IN ('club_name', 'currency') UNION ALL SELECT 1, id, name, NULL FROM courts UNION ALL SELECT 2, 0, name, NULL FROM holidays WHERE date = :day::date UNION ALL SELECT 3, 0, count(*)::text, coalesce(sum(amount_cents), 0)::bigint::text FROM payments WHERE created_at >= :day::date AND created_at < :day::date + 1) context ORDER BY kind, ord;
SQL
  chmod a+r "$dir/page.sql"
  floor_out="$(pgbench -n -M prepared -c"$connections" -j2 -T"$seconds_each" -r -f "$dir/page.sql" \
    -D token="$token" -D now="$(date -u +%Y-%m-%dT%H:%M:%S)" -D day="$(date -u +%F)" "$pg_url" 2>&1)" ||
    { echo "bench-http: pgbench failed:" >&2; echo "$floor_out" >&2; exit 1; }
  floor="$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$floor_out" | head -1)"
  floor_ms="$(sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p' <<<"$floor_out" | head -1)"
fi
read -r nginx_rate nginx_p99 _ < <(measure "http://127.0.0.1:$nginx_port/schedule.html")
bytes="$(wc -c <"$dir/www/schedule.html")"
echo "schedule page on $engine ($bytes bytes), $connections keep-alive connections, ${seconds_each} s each, $(nproc) cores:"
printf '  holdfast panel  %9.0f requests/s  p99 %7.2f ms  (%s answers not 2xx%s)\n' "$panel_rate" "$panel_p99" "$panel_bad" "$writes"
# (PostgreSQL keeps no copy: every page is read.)
[[ "$engine" == sqlite && -n "$copies" && -n "$asked" ]] &&
  printf '                  %s of %s requests answered from the day\x27s current copy (no schedule query)\n' "$copies" "$asked"
if [[ -n "$floor" ]]; then
  printf '  pgbench floor   %9.0f pages/s     (the 3 statements prepared, %s ms average)\n' "$floor" "$floor_ms"
fi
printf '  nginx, static   %9.0f requests/s  p99 %7.2f ms\n' "$nginx_rate" "$nginx_p99"
if [[ -n "$floor" ]]; then
  awk -v a="$panel_rate" -v b="$floor" 'BEGIN { printf "  ratio (panel / pgbench floor): %.3f\n", a / b }'
fi
awk -v a="$panel_rate" -v b="$nginx_rate" 'BEGIN { printf "  ratio (panel / nginx): %.3f\n", a / b }'
