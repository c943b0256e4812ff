/// @file
/// holdfast over SQLiteCpp: classified errors, reads judged by SQLite itself, and retried
/// statements and transactions for code that already uses SQLite::Database. Header-only;
/// include it only where SQLiteCpp is linked (find_package(SQLiteCpp)). Tested with
/// SQLiteCpp 3.2 (Debian's libsqlitecpp-dev).
///
/// @code
///   SQLite::Database db("club.db", SQLite::OPEN_READWRITE);
///   SQLite::Statement q(db, "SELECT v FROM kv WHERE id = ?");
///   q.bind(1, 1);
///   holdfast::RequestScope request;                    // one 6 s window per request
///   holdfast::Result<int> v = holdfast::sqlitecpp::run(shield, db, q, [](SQLite::Statement& s) {
///     return s.executeStep() ? s.getColumn(0).getInt() : -1;
///   });
/// @endcode
///
/// Errors become Status values (to_status): a SQLite::Exception's getExtendedErrorCode() (or
/// getErrorCode() when it has no extended code) through sqlite_status() (docs/faults.md).
/// SQLiteCpp's own errors, which carry no SQLite code ("no row", "column index out of range"),
/// are kFailedPrecondition and permanent.
///
/// Which retries are safe is decided by the Operation (retry.hpp):
///   - run(shield, op, fn): any SQLiteCpp code, as `op` says (without a Shield:
///     holdfast::retry_throwing<SQLite::Exception>(policy, op, fn, sqlitecpp::to_status));
///   - retry(policy, db, stmt, fn), run(shield, db, stmt, fn): one statement, judged by
///     is_read() -- a read is retried as Operation::read, anything else as
///     Operation::write (only when the failed attempt provably applied nothing, such as
///     SQLITE_BUSY in autocommit). The statement is reset (bindings kept) before each retry.
///   - retry_transaction(policy, op, db, fn), run_transaction(shield, op, db, fn): fn(db) in
///     a SQLite::Transaction (BEGIN IMMEDIATE by default), committed when fn returns. A failed
///     attempt is rolled back, so a fault that re-running its statement would help re-runs
///     the whole transaction instead (scope kTransaction, TxnState kRolledBack): only for
///     Operation::transaction(true).
/// fn returns a value, void, Status or `Result<U>`; the result is Result<T>. Exceptions other
/// than SQLite::Exception propagate unchanged (the attempt counts as neutral).
///
/// Thread safety: as SQLiteCpp's: one Database, one thread at a time.
#pragma once

#include <sqlite3.h>

#include <SQLiteCpp/SQLiteCpp.h>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "holdfast/core/classify.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/core/retry.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/core/status.hpp"
#include "holdfast/detail/as_result.hpp"

/// holdfast over SQLiteCpp: classified errors and retried statements and transactions (see
/// sqlitecpp.hpp).
namespace holdfast::sqlitecpp {

/// The Status for a SQLiteCpp exception (see above).
[[nodiscard]] inline Status to_status(const SQLite::Exception& e) {
  const int code = e.getExtendedErrorCode() > 0 ? e.getExtendedErrorCode() : e.getErrorCode();
  if (code <= 0) {
    return Status(Code::kFailedPrecondition, e.what()).with_backend(Backend::kSqlite);
  }
  return sqlite_status(code, e.what());
}

/// True when SQLite judges `stmt` (prepared on `db`) read-only: sqlite3_stmt_readonly() on
/// its handle. SQLiteCpp 3.2 keeps that handle private, so it is found among `db`'s prepared
/// statements by its SQL text (statements with the same text are judged alike); should it
/// not be found, the text is prepared once more to be judged. A statement SQLite cannot
/// prepare is not a read.
[[nodiscard]] inline bool is_read(const SQLite::Database& db, const SQLite::Statement& stmt) {
  sqlite3* handle = db.getHandle();
  const std::string& sql = stmt.getQuery();
  for (sqlite3_stmt* p = sqlite3_next_stmt(handle, nullptr); p != nullptr;
       p = sqlite3_next_stmt(handle, p)) {
    const char* text = sqlite3_sql(p);
    if (text != nullptr && sql == text) return sqlite3_stmt_readonly(p) != 0;
  }
  sqlite3_stmt* p = nullptr;
  if (sqlite3_prepare_v2(handle, sql.c_str(), static_cast<int>(sql.size() + 1), &p, nullptr) !=
      SQLITE_OK) {
    sqlite3_finalize(p);
    return false;
  }
  const bool read = p != nullptr && sqlite3_stmt_readonly(p) != 0;
  sqlite3_finalize(p);
  return read;
}

/// Operation::read or Operation::write, by is_read(), labelled with the statement's SQL.
[[nodiscard]] inline Operation operation_for(const SQLite::Database& db,
                                             const SQLite::Statement& stmt) {
  return is_read(db, stmt) ? Operation::read(stmt.getQuery()) : Operation::write(stmt.getQuery());
}

namespace detail {

using holdfast::detail::AsResult;

// Calls fn(args...) as one attempt; `done` runs after fn succeeded (a commit). SQLiteCpp's
// exceptions become a Status, handed to `failed` first.
template <class Out, class R, class Done, class Failed, class F, class... Args>
Out attempt(Done&& done, Failed&& failed, F& fn, Args&... args) {
  try {
    if constexpr (std::is_void_v<R>) {
      fn(args...);
      done();
      return Out();
    } else if constexpr (std::is_same_v<R, Status>) {
      Status s = fn(args...);
      if (!s.ok()) return s;
      done();
      return Out();
    } else if constexpr (is_result<R>::value) {
      R r = fn(args...);
      if (!r.ok()) return Out(r.status());
      done();
      return r;
    } else {
      R value = fn(args...);
      done();
      return Out(std::move(value));
    }
  } catch (const SQLite::Exception& e) {
    return failed(to_status(e));
  }
}

inline void nothing() noexcept {}

}  // namespace detail

/// fn() (any SQLiteCpp code) under `shield`, as `op` says. (Without a Shield:
/// holdfast::retry_throwing<SQLite::Exception>(policy, op, fn, sqlitecpp::to_status).)
template <class F>
auto run(Shield& shield, Operation op, F&& fn, RetryStats* stats = nullptr) ->
    typename detail::AsResult<std::invoke_result_t<F&>>::type {
  using R = std::invoke_result_t<F&>;
  using Out = typename detail::AsResult<R>::type;
  return shield.run(
      op,
      [&]() -> Out {
        return detail::attempt<Out, R>(
            detail::nothing, [](Status s) { return s; }, fn);
      },
      stats);
}

/// One statement: fn(stmt) steps it; retried as a read or a write by is_read(). The statement
/// is reset (bindings kept) before every attempt.
template <class F>
auto retry(const RetryPolicy& policy, SQLite::Database& db, SQLite::Statement& stmt, F&& fn,
           RetryStats* stats = nullptr) ->
    typename detail::AsResult<std::invoke_result_t<F&, SQLite::Statement&>>::type {
  using R = std::invoke_result_t<F&, SQLite::Statement&>;
  using Out = typename detail::AsResult<R>::type;
  return holdfast::retry(
      policy, operation_for(db, stmt),
      [&]() -> Out {
        stmt.tryReset();
        return detail::attempt<Out, R>(
            detail::nothing, [](Status s) { return s; }, fn, stmt);
      },
      stats);
}

/// The same under `shield`.
template <class F>
auto run(Shield& shield, SQLite::Database& db, SQLite::Statement& stmt, F&& fn,
         RetryStats* stats = nullptr) ->
    typename detail::AsResult<std::invoke_result_t<F&, SQLite::Statement&>>::type {
  using R = std::invoke_result_t<F&, SQLite::Statement&>;
  using Out = typename detail::AsResult<R>::type;
  return shield.run(
      operation_for(db, stmt),
      [&]() -> Out {
        stmt.tryReset();
        return detail::attempt<Out, R>(
            detail::nothing, [](Status s) { return s; }, fn, stmt);
      },
      stats);
}

namespace detail {

// One attempt of a transaction: BEGIN, fn(db), COMMIT; on failure rolled back.
template <class F>
auto transaction_attempt(SQLite::Database& db, F& fn, SQLite::TransactionBehavior behavior) ->
    typename AsResult<std::invoke_result_t<F&, SQLite::Database&>>::type {
  using R = std::invoke_result_t<F&, SQLite::Database&>;
  using Out = typename AsResult<R>::type;
  bool began = false;
  Out out = [&]() -> Out {
    try {
      SQLite::Transaction tx(db, behavior);
      began = true;
      return attempt<Out, R>([&tx] { tx.commit(); }, [](Status s) { return s; }, fn, db);
    } catch (const SQLite::Exception& e) {  // BEGIN failed: fn did not run
      return to_status(e);
    }
  }();
  if (out.ok() || !began) return out;
  // ~Transaction rolled back. Should that ROLLBACK have failed too (after a COMMIT that met
  // SQLITE_BUSY), end the transaction here so that the next attempt can begin.
  if (sqlite3_get_autocommit(db.getHandle()) == 0) {
    sqlite3_exec(db.getHandle(), "ROLLBACK", nullptr, nullptr, nullptr);
  }
  // Nothing of this attempt stays: only re-running all of it can help.
  Status s = out.status();
  Fault fault = s.fault();
  if (fault.scope == RetryScope::kStatement) fault.scope = RetryScope::kTransaction;
  s.with_fault(fault);
  s.with_txn_state(TxnState::kRolledBack);
  return s;
}

}  // namespace detail

/// fn(db) in a transaction of its own per attempt, committed when fn returns; re-run only as
/// `op` allows (Operation::transaction(true) for a whole re-run). REQUIRES: no transaction
/// open on `db`.
template <class F>
auto retry_transaction(
    const RetryPolicy& policy, Operation op, SQLite::Database& db, F&& fn,
    RetryStats* stats = nullptr,
    SQLite::TransactionBehavior behavior = SQLite::TransactionBehavior::IMMEDIATE) ->
    typename detail::AsResult<std::invoke_result_t<F&, SQLite::Database&>>::type {
  return holdfast::retry(
      policy, op, [&] { return detail::transaction_attempt(db, fn, behavior); }, stats);
}

/// The same under `shield`.
template <class F>
auto run_transaction(Shield& shield, Operation op, SQLite::Database& db, F&& fn,
                     RetryStats* stats = nullptr,
                     SQLite::TransactionBehavior behavior = SQLite::TransactionBehavior::IMMEDIATE)
    -> typename detail::AsResult<std::invoke_result_t<F&, SQLite::Database&>>::type {
  return shield.run(
      op, [&] { return detail::transaction_attempt(db, fn, behavior); }, stats);
}

}  // namespace holdfast::sqlitecpp
