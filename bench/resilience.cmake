# The breaker's closed and open paths and the Shield's success path, against a bare call.
add_executable(bench_breaker ${CMAKE_CURRENT_LIST_DIR}/breaker_bench.cpp)
target_link_libraries(bench_breaker PRIVATE holdfast::core holdfast_bench_alloc holdfast_warnings)
