// Connection: one sqlite3 connection with holdfast's busy handler, statement cache and
// statement classifier. Internal to the driver.
//
// The busy handler replaces SQLite's busy_timeout: it waits through the Options clock, at
// most busy_timeout per lock episode and never longer than the current RequestScope's
// window has left. It polls at 1, 2, 5, then every 10 ms; SQLite's own handler backs off
// to 100 ms and so loses to a writer that commits back to back.
//
// The authorizer is installed once, before anything is prepared (changing it expires every
// prepared statement). During classification it records transaction control, savepoints,
// ATTACH/DETACH and PRAGMAs with an argument; on read connections it also refuses a PRAGMA
// with an argument, because SQLite applies some of them (query_only, foreign_keys) while
// preparing, before the statement ever runs.
//
// Not thread-safe: the Database hands a connection to one thread at a time, so connections
// are opened with SQLITE_OPEN_NOMUTEX.
#pragma once

#include <sqlite3.h>

#include <array>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "holdfast/core/clock.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/core/status.hpp"
#include "holdfast/sqlite/options.hpp"
#include "holdfast/sqlite/query.hpp"
#include "query_info.hpp"

namespace holdfast::sqlite::detail {

// What every connection of one Database is opened with.
struct ConnectionSpec {
  std::string target;      // what sqlite3_open_v2 gets (a path, a URI, a memdb URI)
  std::string display;     // what error messages call the database (Options::path)
  const Options* options;  // REQUIRES: outlives the connection
  bool create = false;     // SQLITE_OPEN_CREATE (the first writer only)
};

// Internal statements of the transaction machinery, prepared once per connection.
enum class Control : int { kBeginImmediate, kBeginExclusive, kBeginDeferred, kCommit, kRollback };

class Connection {
 public:
  static Result<std::unique_ptr<Connection>> open(const ConnectionSpec& spec, Role role);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  [[nodiscard]] sqlite3* db() const noexcept { return db_; }
  [[nodiscard]] Role role() const noexcept { return role_; }
  [[nodiscard]] bool autocommit() const noexcept { return sqlite3_get_autocommit(db_) != 0; }

  // The cached statement of a registered query, or nullptr before its first use here.
  [[nodiscard]] sqlite3_stmt* cached(const QueryInfo& query) const noexcept {
    return query.slot < cache_.size() ? cache_[query.slot] : nullptr;
  }
  // Prepares a registered query into this connection's cache.
  Result<sqlite3_stmt*> prepare_cached(const QueryInfo& query);
  // A fresh statement the caller finalizes. SQL with a second statement is refused.
  Result<sqlite3_stmt*> prepare(std::string_view sql);
  // Prepares `sql` (refusing, on a read connection, anything that would change the
  // connection while being prepared) and decides whether it is a read (see
  // sqlite/query.hpp). Nothing is kept.
  Result<AccessVerdict> judge_access(std::string_view sql, int* parameters = nullptr);
  // Runs every statement of `sql` in order; transaction control is refused.
  Status run_script(std::string_view sql);

  // Runs BEGIN/COMMIT/ROLLBACK. Errors carry the SQLite code; TxnState is left to callers.
  Status control(Control which);
  // Runs SQL that returns no rows (set-up pragmas).
  Status exec(const char* sql);

  // A Status for the connection's last error: "<context>: <sqlite message>".
  [[nodiscard]] Status error(int rc, std::string_view context) const;

 private:
  struct AuthLog {
    bool transaction = false;
    bool savepoint = false;
    bool attach = false;
    bool pragma_setting = false;
    bool pragma_that_writes = false;
  };

  Connection(sqlite3* db, Role role, const Options& options, std::string display);
  Status configure(const ConnectionSpec& spec);
  void clear_cache() noexcept;

  static int on_busy(void* self, int count) noexcept;
  static int on_authorize(void* self, int action, const char* a, const char* b, const char* c,
                          const char* d) noexcept;

  sqlite3* db_;
  Role role_;
  const Options* options_;
  Clock* clock_;
  std::string display_;
  TimePoint busy_deadline_{};
  AuthLog* auth_log_ = nullptr;  // set while classifying
  bool deny_pragma_settings_ = false;
  std::vector<sqlite3_stmt*> cache_;
  std::array<sqlite3_stmt*, 5> control_{};
};

// "SELECT v FROM kv WHERE id = ?" shortened for messages.
std::string_view sql_excerpt(std::string_view sql) noexcept;

// Joins the parts of an error message (one allocation).
std::string cat(std::initializer_list<std::string_view> parts);

}  // namespace holdfast::sqlite::detail
