# The cost of a log call on the caller's thread with a DatabaseSink attached.
add_executable(bench_log ${CMAKE_CURRENT_LIST_DIR}/log_bench.cpp)
target_link_libraries(bench_log PRIVATE holdfast::core holdfast_bench_alloc holdfast_warnings)
