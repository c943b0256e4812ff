#include <sqlite3.h>

#include <string>

#include "connection.hpp"
#include "holdfast/core/classify.hpp"
#include "holdfast/sqlite/query.hpp"
#include "query_info.hpp"

namespace holdfast::sqlite {

bool Query::cached() const noexcept {
  return info_ && info_->slot != detail::QueryInfo::kUncached;
}

std::string_view to_string(Access access) noexcept {
  return access == Access::kRead ? "read" : "write";
}

std::string_view to_string(Effect effect) noexcept {
  switch (effect) {
    case Effect::kRead:
      return "read";
    case Effect::kExplain:
      return "explain";
    case Effect::kWrite:
      return "write";
    case Effect::kTransactionControl:
      return "transaction_control";
    case Effect::kSavepoint:
      return "savepoint";
    case Effect::kConnectionState:
      return "connection_state";
    case Effect::kPragmaSetting:
      return "pragma_setting";
    case Effect::kMultipleStatements:
      return "multiple_statements";
    case Effect::kPragmaThatWrites:
      return "pragma_that_writes";
  }
  return "?";
}

std::string_view describe(Effect effect) noexcept {
  switch (effect) {
    case Effect::kRead:
      return "one statement the engine reports as read-only (sqlite3_stmt_readonly), with no "
             "transaction or connection control";
    case Effect::kExplain:
      return "EXPLAIN describes a statement without running it";
    case Effect::kWrite:
      return "the engine reports that it may change the database (sqlite3_stmt_readonly is "
             "false)";
    case Effect::kTransactionControl:
      return "transaction control (BEGIN, COMMIT, END, ROLLBACK) changes the connection's "
             "transaction state";
    case Effect::kSavepoint:
      return "SAVEPOINT, RELEASE and ROLLBACK TO change the connection's transaction state";
    case Effect::kConnectionState:
      return "ATTACH and DETACH change which databases the connection sees";
    case Effect::kPragmaSetting:
      return "a PRAGMA with an argument may change the connection (some act while being "
             "prepared)";
    case Effect::kMultipleStatements:
      return "more than one statement: only a single statement can be judged and retried";
    case Effect::kPragmaThatWrites:
      return "PRAGMA optimize may run ANALYZE, which writes sqlite_stat1 (though "
             "sqlite3_stmt_readonly is true)";
  }
  return "?";
}

namespace detail {

Status too_few_columns(int has, std::size_t wanted) {
  return sqlite_status(SQLITE_RANGE, detail::cat({"the query returns ", std::to_string(has),
                                                  has == 1 ? " column, " : " columns, ",
                                                  std::to_string(wanted), " were asked for"}));
}

Status after_rows(Status failure, std::size_t delivered) {
  if (delivered == 0 || failure.ok()) return failure;
  failure.annotate(
      detail::cat({"after ", std::to_string(delivered), delivered == 1 ? " row" : " rows",
                   " reached the caller (not repeated, they would arrive twice)"}));
  failure.with_stop(StopReason::kNotSafeToRepeat, 1);
  return failure;
}

}  // namespace detail
}  // namespace holdfast::sqlite
