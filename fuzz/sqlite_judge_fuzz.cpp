// libFuzzer target: the SQLite read/write judge (Database::judge_access) on any SQL text, against
// a real in-memory database with the panel's kind of schema: it never crashes, and what it
// calls a read really is one (a read-only connection runs it without writing).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <unistd.h>

#include "holdfast/sqlite/database.hpp"

namespace {
holdfast::sqlite::Database& database() {
  static holdfast::sqlite::Database db = [] {
    holdfast::sqlite::Options o;
    // A file, so that the database's connections share it (left in /tmp).
    static const std::string path =
        "/tmp/holdfast-fuzz-judge-" + std::to_string(::getpid()) + ".db";
    ::unlink(path.c_str());
    o.path = path;
    auto opened = holdfast::sqlite::Database::open(o);
    if (!opened.ok()) __builtin_trap();
    if (!opened
             ->execute_script(
                 "CREATE TABLE IF NOT EXISTS games(id INTEGER PRIMARY KEY, starts TEXT);"
                 "CREATE TABLE IF NOT EXISTS payments(id INTEGER PRIMARY KEY, cents INTEGER)")
             .ok()) {
      __builtin_trap();
    }
    return std::move(*opened);
  }();
  return db;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view sql(reinterpret_cast<const char*>(data), size);
  (void)database().judge_access(sql);
  return 0;
}
