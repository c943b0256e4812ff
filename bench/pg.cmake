# A pooled point read through holdfast's resilient path against raw libpq on one connection,
# over loopback, in one run (the server: HOLDFAST_TEST_PG_URL).
if(TARGET holdfast_pg)
  find_package(PostgreSQL QUIET)
  add_executable(bench_pg ${CMAKE_CURRENT_LIST_DIR}/pg_bench.cpp)
  target_link_libraries(bench_pg PRIVATE holdfast::pg PostgreSQL::PostgreSQL holdfast_bench_alloc
                        holdfast_warnings)
endif()

# 16 reads in flight on one event loop: holdfast::asio::pg::Client against bare
# pg::LoopConnection on the same loop (Boost.Asio 1.81).
find_package(Boost 1.81 QUIET)
if(TARGET holdfast_pg AND Boost_FOUND)
  find_package(Threads REQUIRED)
  add_executable(bench_asio_pg ${CMAKE_CURRENT_LIST_DIR}/asio_pg_bench.cpp)
  target_link_libraries(bench_asio_pg PRIVATE holdfast::pg PostgreSQL::PostgreSQL Boost::headers
                        Threads::Threads
                        benchmark::benchmark holdfast_warnings)
endif()
