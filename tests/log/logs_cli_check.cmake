# `holdfast logs` and `holdfast logs prune` against a real file made with the sqlite3 shell:
# the rows shown and their order, each filter, that the snapshot copy is deleted, bad input,
# and pruning by age.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/tmp)
find_program(SQLITE3 sqlite3)
if(NOT SQLITE3)
  message(FATAL_ERROR "the sqlite3 shell is needed for this test (Debian package sqlite3)")
endif()
set(db ${WORK_DIR}/club.db)
execute_process(
  COMMAND ${SQLITE3} ${db}
  "PRAGMA journal_mode=WAL;
   CREATE TABLE logs (id INTEGER PRIMARY KEY, level TEXT NOT NULL, context TEXT NOT NULL,
                      message TEXT NOT NULL, created_at TEXT NOT NULL);
   CREATE INDEX logs_created_at ON logs (created_at);
   INSERT INTO logs (level, context, message, created_at) VALUES
     ('INFO', 'schedule', 'rendered', '2020-01-01T00:00:00.000Z'),
     ('ERROR', 'payments', 'ancient failure', '2020-01-02T00:00:00.000Z'),
     ('WARN', 'logger', 'old gap', '2020-01-03T00:00:00.000Z'),
     ('INFO', 'schedule', 'rendered ms=12', '2099-09-11T06:19:00.000Z'),
     ('WARN', 'payments', 'slow commit', '2099-09-11T06:20:13.004Z'),
     ('ERROR', 'payments', 'charge failed: database is locked', '2099-09-11T06:21:07.412Z'),
     ('INFO', 'signup', 'joined', '2099-09-11T06:22:00.000Z');"
  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "sqlite3 could not create ${db}: ${err}")
endif()

# Runs holdfast with TMPDIR in the work directory (where the snapshot copy goes).
function(run out_var rc_var)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env TMPDIR=${WORK_DIR}/tmp ${HOLDFAST} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(${out_var} "${out}${err}" PARENT_SCOPE)
  set(${rc_var} ${rc} PARENT_SCOPE)
endfunction()

function(expect_lines args expected)
  run(out rc logs --db ${db} ${args})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "holdfast logs ${args}: exit code ${rc}: ${out}")
  endif()
  if(NOT out STREQUAL expected)
    message(FATAL_ERROR "holdfast logs ${args}:\nexpected:\n${expected}\ngot:\n${out}")
  endif()
endfunction()

function(expect_error args pattern)
  run(out rc ${args})
  if(rc EQUAL 0)
    message(FATAL_ERROR "holdfast ${args}: expected a non-zero exit code, got 0: ${out}")
  endif()
  if(NOT out MATCHES "${pattern}")
    message(FATAL_ERROR "holdfast ${args}: expected /${pattern}/, got '${out}'")
  endif()
endfunction()

set(l_signup "2099-09-11T06:22:00.000Z INFO  [signup] joined\n")
set(l_charge "2099-09-11T06:21:07.412Z ERROR [payments] charge failed: database is locked\n")
set(l_slow "2099-09-11T06:20:13.004Z WARN  [payments] slow commit\n")
set(l_render "2099-09-11T06:19:00.000Z INFO  [schedule] rendered ms=12\n")
set(l_gap "2020-01-03T00:00:00.000Z WARN  [logger] old gap\n")
set(l_ancient "2020-01-02T00:00:00.000Z ERROR [payments] ancient failure\n")
set(l_first "2020-01-01T00:00:00.000Z INFO  [schedule] rendered\n")

# Newest first, every row; then each filter.
expect_lines("" "${l_signup}${l_charge}${l_slow}${l_render}${l_gap}${l_ancient}${l_first}")
expect_lines("--limit;2" "${l_signup}${l_charge}")
expect_lines("--level;WARN" "${l_charge}${l_slow}${l_gap}${l_ancient}")
expect_lines("--level;error" "${l_charge}${l_ancient}")
expect_lines("--context;payments" "${l_charge}${l_slow}${l_ancient}")
expect_lines("--since;2099-09-11T06:20" "${l_signup}${l_charge}${l_slow}")
expect_lines("--since;2099-09-11T06:20;--level;WARN;--context;payments;--limit;1" "${l_charge}")

file(GLOB left ${WORK_DIR}/tmp/*)
if(left)
  message(FATAL_ERROR "holdfast logs left its snapshot copy behind: ${left}")
endif()

# Bad input: a clear message and a non-zero exit code.
expect_error("logs;--db;${db};--level;LOUD" "unknown --level 'LOUD'")
expect_error("logs;--db;${db};--since;yesterday" "bad --since 'yesterday'")
expect_error("logs;--db;${db};--limit;0" "--limit: Value 0 not in range 1 to")
expect_error("logs;--db;${WORK_DIR}/no-such.db" "no-such.db' does not exist")
expect_error("logs" "name the database")
file(WRITE ${WORK_DIR}/notes.txt "this is not a database, just some text that is long enough\n")
expect_error("logs;--db;${WORK_DIR}/notes.txt" "notes.txt.*not a database")
expect_error("logs;prune;--db;${WORK_DIR}/notes.txt;--older-than;90d" "notes.txt.*not a database")
file(WRITE ${WORK_DIR}/empty.db "")
expect_error("logs;--db;${WORK_DIR}/empty.db" "has no logs table")
expect_error("logs;prune;--db;${db};--older-than;90x" "bad --older-than '90x'")
expect_error("logs;prune;--db;${db};--older-than;0d" "bad --older-than '0d'")
expect_error("logs;prune;--db;${WORK_DIR}/no-such.db;--older-than;90d" "does not exist")
if(EXISTS ${WORK_DIR}/no-such.db)
  message(FATAL_ERROR "holdfast logs prune created a missing database")
endif()

# Prune: the three rows from 2020 go, the four from 2099 stay.
run(out rc logs prune --db ${db} --older-than 90d --batch-size 2)
if(NOT rc EQUAL 0 OR NOT out MATCHES "^deleted 3 rows older than ")
  message(FATAL_ERROR "holdfast logs prune: exit code ${rc}: '${out}'")
endif()
expect_lines("" "${l_signup}${l_charge}${l_slow}${l_render}")
run(out rc logs prune --db ${db} --older-than 12h)
if(NOT rc EQUAL 0 OR NOT out MATCHES "^deleted 0 rows older than ")
  message(FATAL_ERROR "holdfast logs prune --older-than 12h: exit code ${rc}: '${out}'")
endif()
message(STATUS "holdfast logs answers as expected")
