#!/usr/bin/env bash
# Runs every test with ctest for a configured and built preset. When the project has a
# PostgreSQL test server script, starts a throwaway primary and its streaming hot standby
# first (HOLDFAST_TEST_PG_URL, HOLDFAST_TEST_PG_STANDBY_URL) and always stops them, also
# when tests fail.
set -euo pipefail
preset="${1:-debug}"
shift || true
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"

pg_started=0
cleanup() {
  if [[ $pg_started -eq 1 ]]; then scripts/pg-test-server.sh stop || true; fi
}
trap cleanup EXIT

if [[ -x scripts/pg-test-server.sh ]]; then
  if url="$(HOLDFAST_PG_STANDBY=1 scripts/pg-test-server.sh start)"; then
    pg_started=1
    export HOLDFAST_TEST_PG_URL="$url"
    HOLDFAST_TEST_PG_STANDBY_URL="$(scripts/pg-test-server.sh standby-url)"
    export HOLDFAST_TEST_PG_STANDBY_URL
    echo "run-tests: PostgreSQL test server at $url, its hot standby at" \
         "$HOLDFAST_TEST_PG_STANDBY_URL"
  elif [[ "${CI:-}" == "true" ]]; then
    echo "run-tests: could not start the PostgreSQL test server; on CI the PostgreSQL" \
         "tests must run" >&2
    exit 1
  else
    echo "run-tests: WARNING: could not start the PostgreSQL test server;" \
         "the PostgreSQL tests will report themselves skipped" >&2
  fi
fi

ctest --preset "$preset" "$@"
