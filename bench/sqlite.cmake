# The SQLite driver's point read against raw sqlite3_step on the same statement.
find_package(SQLite3 REQUIRED)
add_executable(bench_sqlite sqlite_bench.cpp)
# It drives the driver's own cached statement by hand (an internal header).
target_include_directories(bench_sqlite PRIVATE ${PROJECT_SOURCE_DIR}/src/sqlite)
target_link_libraries(bench_sqlite PRIVATE holdfast::sqlite SQLite::SQLite3 holdfast_bench_alloc
                      holdfast_warnings)
