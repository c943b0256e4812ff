/// @file
/// holdfast::sqlite::Database and Transaction: SQLite with `query_only` read connections and
/// one writer taken first come, first served. A Database never retries (ResilientDatabase
/// does); how every wait is bounded by busy_timeout and the request's window:
/// docs/library.md. Thread safety: a Database may be used from many threads at once; a
/// Transaction and its Statements belong to one thread and must not outlive the Database.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "holdfast/core/idempotency.hpp"
#include "holdfast/core/operation.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/core/status.hpp"
#include "holdfast/detail/run_attempts.hpp"
#include "holdfast/sqlite/options.hpp"
#include "holdfast/sqlite/query.hpp"
#include "holdfast/sqlite/row.hpp"

namespace holdfast::sqlite {

class Transaction;
namespace detail {
// A transaction() function, seen by the compiled code that runs it.
using TransactionBody = holdfast::detail::StatusRef<Transaction&>;
class DatabaseImpl;
class Connection;
// One connection (a read connection or the writer) held for one use; given back when
// destroyed or reset (database.cpp).
struct Lease {
  Lease() noexcept = default;
  Lease(Lease&& other) noexcept;
  Lease& operator=(Lease&& other) noexcept;
  ~Lease() {
    if (impl_ != nullptr) reset();
  }
  void reset() noexcept;
  [[nodiscard]] bool held() const noexcept { return impl_ != nullptr; }

  DatabaseImpl* impl_ = nullptr;
  Connection* conn_ = nullptr;
  int slot_ = -1;  // a read connection's index, or kWriterSlot
};
}  // namespace detail

/// A write transaction on the writer connection, holding it until commit() or rollback().
/// Move-only. Destroying an open Transaction rolls it back.
class Transaction : public QueryApi<Transaction> {
 public:
  /// Takes over `other`'s transaction; `other` is left ended.
  Transaction(Transaction&& other) noexcept;
  /// Rolls this transaction back if open, then takes over `other`'s.
  Transaction& operator=(Transaction&& other) noexcept;
  ~Transaction();

  /// True until commit() succeeds, rollback() runs, or SQLite rolled it back after an error.
  [[nodiscard]] bool is_open() const noexcept;
  /// How the transaction began.
  [[nodiscard]] TxnMode mode() const noexcept { return mode_; }

  /// On success the transaction is committed and the writer is free for others.
  /// On SQLITE_BUSY (rollback journal: a reader still holds its lock) the transaction stays
  /// open (TxnState::kStillOpen) and commit() may be called again. On another error the
  /// Status says whether SQLite rolled it back.
  Status commit();
  /// Rolls back (if still open) and frees the writer. Never fails in practice; a failure is
  /// returned and the writer is rolled back again before its next use.
  Status rollback();

  /// A statement on the writer connection, borrowed from its cache. Transaction control
  /// (BEGIN/COMMIT/ROLLBACK) is refused here; SAVEPOINT/RELEASE are allowed.
  /// REQUIRES: the Statement is destroyed before this Transaction ends.
  Result<Statement> statement(QueryRef q);

 private:
  friend class Database;
  friend class ResilientDatabase;
  friend class QueryApi<Transaction>;
  Transaction(detail::DatabaseImpl* impl, detail::Lease lease, TxnMode mode) noexcept;
  // After a failure inside the transaction: rolls it back (unless SQLite already did), marks
  // the Status TxnState::kRolledBack, and turns a transient fault of one statement into a
  // fault of the whole transaction (only re-running all of it can help now).
  Status abandon(Status failure);
  Status finished() const;
  Status prepare_statement(QueryRef q, Statement& out);
  Status run_statement(QueryRef q, detail::StatementBody body);

  detail::DatabaseImpl* impl_ = nullptr;
  detail::Lease lease_;  // the writer, held while open
  TxnMode mode_ = TxnMode::kImmediate;
};

/// One SQLite database file: a writer connection and read connections, with the query
/// helpers (see the top of this file). Move-only; may be used from many threads at once.
class Database : public QueryApi<Database> {
 public:
  /// Opens `options.path`, checks that it is a writable SQLite database (readable, with
  /// read_only) and sets options.journal_mode. Bad options throw std::invalid_argument; a
  /// file that is missing, unwritable or not a database is a Status naming it.
  static Result<Database> open(Options options);

  /// Takes over `other`'s database; `other` is left empty.
  Database(Database&& other) noexcept;
  /// Closes this database, then takes over `other`'s.
  Database& operator=(Database&& other) noexcept;
  ~Database();

  /// Prepares and judges `sql` (one statement; see sqlite/query.hpp), keeping it in
  /// the statement cache. Bad SQL is a Status with the engine's message.
  Result<Query> prepare(std::string_view sql);
  /// The read/write verdict for `sql`, without keeping it. Preparing a PRAGMA that sets
  /// something is refused while judging, so judging never changes a connection.
  Result<AccessVerdict> judge_access(std::string_view sql);

  /// Waits for the writer (first come, first served) and begins a transaction.
  Result<Transaction> begin(TxnMode mode = TxnMode::kImmediate);

  /// Runs fn(Transaction&) -> Status or Result<T> inside a transaction and commits it. When
  /// fn fails or COMMIT fails, the transaction is rolled back and the Status says so
  /// (TxnState::kRolledBack): nothing of it is applied. `op` names the operation; a
  /// Database never retries (ResilientDatabase does, as `op` allows).
  template <class Fn>
  auto transaction(Fn&& fn, Operation op = Operation::transaction(false),
                   TxnMode mode = TxnMode::kImmediate) -> std::invoke_result_t<Fn&, Transaction&>;

  /// Runs every statement of `sql` in one transaction (BEGIN IMMEDIATE ... COMMIT): all or
  /// nothing. For schemas and migrations. Transaction control inside `sql` is refused.
  Status execute_script(std::string_view sql);

  /// Creates Options::idempotency_table if it does not exist: (key TEXT PRIMARY KEY, result
  /// TEXT, created_at TEXT NOT NULL), created_at in UTC, ISO-8601.
  Status create_idempotency_table();
  /// Runs fn(Transaction&) -> Status or Result<std::string> in a transaction and records `key`
  /// with its result there; a key recorded already returns its result (replayed) without
  /// running fn (idempotency.hpp). A Database runs it once; ResilientDatabase retries it.
  /// REQUIRES: create_idempotency_table() was called.
  template <class Fn>
  Result<KeyedResult> once(std::string_view key, Fn&& fn, TxnMode mode = TxnMode::kImmediate);

  /// Closes every connection nobody is using (they reopen on next use; an in-memory
  /// database stays), so that another process can take an exclusive lock (FAULTS.md).
  /// Returns how many were closed.
  int close_idle_connections() noexcept;

  /// The options it was opened with.
  [[nodiscard]] const Options& options() const noexcept;

 private:
  friend class ResilientDatabase;
  friend class QueryApi<Database>;
  explicit Database(std::unique_ptr<detail::DatabaseImpl> impl) noexcept;
  // The Query of `sql` if it was prepared before (no SQLite call, no wait); nullopt otherwise.
  std::optional<Query> prepared(std::string_view sql);
  Status run_statement(QueryRef q, detail::StatementBody body);
  // BEGIN, fn and COMMIT (through `commit`, tx.commit() unless given); on any failure the
  // transaction is rolled back (Transaction::abandon()).
  Status run_transaction(detail::TransactionBody fn, TxnMode mode);
  Status run_transaction(detail::TransactionBody fn, TxnMode mode, detail::TransactionBody commit);

  std::unique_ptr<detail::DatabaseImpl> impl_;
};

template <class Fn>
auto Database::transaction(Fn&& fn, Operation, TxnMode mode)
    -> std::invoke_result_t<Fn&, Transaction&> {
  return holdfast::detail::run_through<Transaction&>(
      fn, [&](detail::TransactionBody b) { return run_transaction(b, mode); });
}

namespace detail {
// The body of once() inside its transaction (database.cpp): the key's recorded result, or
// `fn` run and its result recorded with the key, in `table` (checked by Database::open()).
Result<KeyedResult> run_once(Transaction& tx, const std::string& table, std::string_view key,
                             holdfast::detail::StatusRef<Transaction&, std::string&> fn);

// once()'s function, returning Status or Result<std::string>, as run_once() calls it.
template <class Fn>
auto once_body(Fn& fn) {
  using R = std::invoke_result_t<Fn&, Transaction&>;
  static_assert(std::is_same_v<R, Status> || std::is_same_v<R, Result<std::string>>,
                "the once() function must return holdfast::Status or "
                "holdfast::Result<std::string>");
  return [&fn](Transaction& tx, std::string& result) -> Status {
    if constexpr (std::is_same_v<R, Status>) {
      return fn(tx);
    } else {
      Result<std::string> r = fn(tx);
      if (r.ok()) result = std::move(*r);
      return r.status();
    }
  };
}
}  // namespace detail

template <class Fn>
Result<KeyedResult> Database::once(std::string_view key, Fn&& fn, TxnMode mode) {
  auto body = detail::once_body(fn);
  return transaction(
      [&](Transaction& tx) {
        return detail::run_once(tx, options().idempotency_table, key,
                                holdfast::detail::StatusRef<Transaction&, std::string&>(body));
      },
      Operation{Idempotency::kIdempotent, true, Priority::kNormal, "sqlite.once"}, mode);
}

}  // namespace holdfast::sqlite
