# `holdfast classify` against a real file with a schema (made with the sqlite3 shell):
# the first word of each answer, the exit code, and that the file is left as it was.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
find_program(SQLITE3 sqlite3)
if(NOT SQLITE3)
  message(FATAL_ERROR "the sqlite3 shell is needed for this test (Debian package sqlite3)")
endif()
set(db ${WORK_DIR}/club.db)
execute_process(COMMAND ${SQLITE3} ${db}
                        "CREATE TABLE games(id INTEGER PRIMARY KEY, day TEXT, court INTEGER);"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "sqlite3 could not create ${db}")
endif()

function(expect sql pattern want_rc)
  execute_process(COMMAND ${HOLDFAST} classify --db ${db} ${sql}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT out MATCHES "${pattern}")
    message(FATAL_ERROR "classify '${sql}': expected /${pattern}/, got '${out}' ${err}")
  endif()
  if(NOT rc EQUAL want_rc)
    message(FATAL_ERROR "classify '${sql}': expected exit code ${want_rc}, got ${rc}")
  endif()
endfunction()

expect("SELECT day, court FROM games WHERE id = ?" "^read because " 0)
expect("WITH g AS (SELECT id FROM games) DELETE FROM games WHERE id IN g" "^write because the engine" 0)
expect("BEGIN IMMEDIATE" "^write because transaction control" 0)
expect("SELECT 1\; DROP TABLE games" "^write because more than one statement" 0)
expect("SELECT * FROM nope" "^error .*no such table: nope" 1)

if(EXISTS ${db}-wal)
  message(FATAL_ERROR "classify changed the file's journal mode")
endif()
message(STATUS "holdfast classify answers as expected")
