# A pooled point read through holdfast's resilient path against raw libpq on one connection,
# over loopback, in one run (the server: HOLDFAST_TEST_PG_URL).
if(TARGET holdfast_pg)
  find_package(PostgreSQL QUIET)
  add_executable(bench_pg ${CMAKE_CURRENT_LIST_DIR}/pg_bench.cpp)
  target_link_libraries(bench_pg PRIVATE holdfast::pg PostgreSQL::PostgreSQL holdfast_bench_alloc
                        holdfast_warnings)
endif()
