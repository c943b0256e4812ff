# `holdfast logs --pg` and `holdfast logs prune --pg` against a real PostgreSQL server (the
# one scripts/run-tests.sh starts: HOLDFAST_TEST_PG_URL), on a database of its own made and
# dropped with psql: the rows shown and their order, the filters, pruning by age, and a
# refused connection reported with the URL but never its password.
set(url "$ENV{HOLDFAST_TEST_PG_URL}")
if(url STREQUAL "")
  message(STATUS "HOLDFAST_TEST_PG_URL is not set: skipped")
  return()
endif()
find_program(PSQL psql PATHS /usr/lib/postgresql/15/bin)
if(NOT PSQL)
  message(FATAL_ERROR "psql is needed for this test (Debian package postgresql-client)")
endif()
string(RANDOM LENGTH 8 ALPHABET abcdefghijklmnopqrstuvwxyz suffix)
set(dbname "hf_logs_cli_${suffix}")
# The test server's URL names its database last (postgresql://user@host:port/postgres).
string(REGEX REPLACE "/[^/]*$" "/${dbname}" db_url "${url}")

function(psql target sql)
  execute_process(COMMAND ${PSQL} -X -q -v ON_ERROR_STOP=1 "${target}" -c "${sql}"
                  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "psql: ${sql}: ${err}")
  endif()
endfunction()

function(run out_var rc_var)
  execute_process(COMMAND ${HOLDFAST} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  set(${out_var} "${out}${err}" PARENT_SCOPE)
  set(${rc_var} ${rc} PARENT_SCOPE)
endfunction()

function(expect_lines args expected)
  run(out rc logs --pg ${db_url} ${args})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "holdfast logs --pg ${args}: exit code ${rc}: ${out}")
  endif()
  if(NOT out STREQUAL expected)
    message(FATAL_ERROR "holdfast logs --pg ${args}:\nexpected:\n${expected}\ngot:\n${out}")
  endif()
endfunction()

psql("${url}" "CREATE DATABASE ${dbname}")
psql("${db_url}" "CREATE TABLE logs (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  level TEXT NOT NULL, context TEXT NOT NULL, message TEXT NOT NULL, created_at TEXT NOT NULL);
  INSERT INTO logs (level, context, message, created_at) VALUES
    ('ERROR', 'payments', 'ancient failure', '2020-01-02T00:00:00.000Z'),
    ('INFO', 'schedule', 'rendered ms=12', '2099-09-11T06:19:00.000Z'),
    ('WARN', 'payments', 'slow commit', '2099-09-11T06:20:13.004Z'),
    ('ERROR', 'payments', 'charge failed: database is locked', '2099-09-11T06:21:07.412Z'),
    ('INFO', 'signup', 'joined', '2099-09-11T06:22:00.000Z')")

expect_lines("--since;2099-09-11T06:20"
"2099-09-11T06:22:00.000Z INFO  [signup] joined
2099-09-11T06:21:07.412Z ERROR [payments] charge failed: database is locked
2099-09-11T06:20:13.004Z WARN  [payments] slow commit
")
expect_lines("--level;WARN;--context;payments;--limit;2"
"2099-09-11T06:21:07.412Z ERROR [payments] charge failed: database is locked
2099-09-11T06:20:13.004Z WARN  [payments] slow commit
")

run(out rc logs prune --pg ${db_url} --older-than 90d --batch-size 1)
if(NOT rc EQUAL 0 OR NOT out MATCHES "^deleted 1 rows older than ")
  message(FATAL_ERROR "holdfast logs prune --pg: exit code ${rc}: '${out}'")
endif()
expect_lines("--level;ERROR"
"2099-09-11T06:21:07.412Z ERROR [payments] charge failed: database is locked
")

run(out rc logs --pg "postgresql://someone:s3cret@127.0.0.1:1/nowhere")
if(rc EQUAL 0 OR NOT out MATCHES "cannot connect to postgresql://someone:[*][*][*]@127.0.0.1:1/nowhere"
   OR out MATCHES "s3cret")
  message(FATAL_ERROR "a refused connection: exit code ${rc}: '${out}'")
endif()

psql("${url}" "DROP DATABASE ${dbname} WITH (FORCE)")
message(STATUS "holdfast logs --pg answers as expected")
