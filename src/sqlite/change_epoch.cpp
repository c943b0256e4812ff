// sqlite::ChangeEpoch (holdfast/sqlite/change_epoch.hpp): the SQL function each connection
// reports its data_version through.
#include "holdfast/sqlite/change_epoch.hpp"

#include <atomic>
#include <memory>
#include <string>

#include <sqlite3.h>

namespace holdfast::sqlite {
namespace {

// A connection's memory: the epoch it reports to, and the data_version it last reported
// (-1: none yet, so its first report moves the epoch).
struct Seen {
  ChangeEpoch* epoch;
  std::atomic<std::int64_t> last{-1};
};

void observe_on(sqlite3_context* ctx, int argc, sqlite3_value** argv) {
  auto* seen = static_cast<Seen*>(sqlite3_user_data(ctx));
  if (argc != 1 || sqlite3_value_type(argv[0]) != SQLITE_INTEGER) {
    sqlite3_result_error(ctx, "holdfast_change_epoch() takes PRAGMA data_version", -1);
    return;
  }
  const std::uint64_t epoch = seen->epoch->observe(seen->last, sqlite3_value_int64(argv[0]));
  sqlite3_result_int64(ctx, static_cast<sqlite3_int64>(epoch));
}

void forget(void* p) {
  delete static_cast<Seen*>(p);
}

}  // namespace

std::uint64_t ChangeEpoch::observe(std::atomic<std::int64_t>& last, std::int64_t version) noexcept {
  // seq_cst throughout: a copy is stamped with the epoch read after its observation, and
  // checked against the epoch read after a later one.
  if (last.exchange(version) != version) epoch_.fetch_add(1);
  return epoch_.load();
}

Status ChangeEpoch::attach(sqlite3* db) {
  auto seen = std::make_unique<Seen>();
  seen->epoch = this;
  // Not deterministic (its answer changes between calls) and not for schemas or triggers.
  const int rc =
      sqlite3_create_function_v2(db, "holdfast_change_epoch", 1, SQLITE_UTF8 | SQLITE_DIRECTONLY,
                                 seen.get(), &observe_on, nullptr, nullptr, &forget);
  if (rc != SQLITE_OK) {
    // SQLite has called forget() on failure: the memory is its to free.
    (void)seen.release();
    return Status(Code::kInternal,
                  std::string("cannot define holdfast_change_epoch(): ") + sqlite3_errstr(rc));
  }
  (void)seen.release();  // freed by forget() when the connection closes
  return Status();
}

}  // namespace holdfast::sqlite
