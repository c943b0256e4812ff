# Shared by the throwaway-server scripts (pg-test-server.sh, pgbouncer-test.sh); sourced,
# not run. The caller sets `state_file` before it calls load_state.

# Runs a server binary as the user the server accepts: PostgreSQL and PgBouncer refuse to
# run as root, so as root it runs as the `postgres` OS user; otherwise as the caller.
as_server_user() {
  if [[ $(id -u) -eq 0 ]]; then
    if command -v runuser >/dev/null 2>&1; then
      runuser -u postgres -- "$@"
    else
      su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
    fi
  else
    "$@"
  fi
}

# True when something listens on 127.0.0.1:$1.
port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Loads the running server's state file; false when there is none.
load_state() {
  [[ -f "$state_file" ]] || return 1
  # shellcheck disable=SC1090
  source "$state_file"
}

# A free port on 127.0.0.1, other than $port when the caller has one, below the kernel's
# ephemeral range (32768 and up): an outgoing connection may hold a port there without
# listening on it, which port_in_use cannot see.
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 12768))
    if [[ "$p" != "${port:-}" ]] && ! port_in_use "$p"; then
      echo "$p"
      return
    fi
  done
}
