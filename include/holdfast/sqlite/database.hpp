/// @file
/// holdfast::sqlite::Database and Transaction: SQLite with a read pool and one fair writer.
///
/// @code
///   auto db = holdfast::sqlite::Database::open({.path = "club.db"});
///   if (!db.ok()) return db.status();         // names the problem: missing, not a database...
///   auto n = db->query_one<std::int64_t>("SELECT count(*) FROM games WHERE day = ?", day);
///   Status paid = db->transaction([&](Transaction& tx) -> Status {
///     if (auto r = tx.execute("INSERT INTO payments(user, cents) VALUES (?, ?)", u, c); !r.ok())
///       return r.status();
///     return tx.execute("UPDATE users SET paid = 1 WHERE id = ?", u).status();
///   });
/// @endcode
///
/// Reads run on up to Options::read_connections connections opened with PRAGMA query_only=1
/// (taking one is an atomic flag); everything else on the one writer, which writers get
/// first come, first served. Every wait (a lock, a read connection, the writer) lasts at
/// most busy_timeout per attempt and never longer than the RequestScope's window has left,
/// then fails SQLITE_BUSY. Database never retries: ResilientDatabase does.
///
/// Thread safety: a Database may be used from many threads at once. A Transaction and the
/// Statements it hands out belong to one thread and must not outlive the Database.
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
#include "holdfast/detail/sqlite_lease.hpp"
#include "holdfast/sqlite/options.hpp"
#include "holdfast/sqlite/query.hpp"
#include "holdfast/sqlite/statement.hpp"

namespace holdfast::sqlite {

class Database;
class Transaction;

/// A write transaction on the writer connection, holding it until commit() or rollback().
/// Move-only. Destroying an open Transaction rolls it back.
class Transaction : public QueryApi<Transaction> {
 public:
  /// Takes over `other`'s transaction; `other` is left ended.
  Transaction(Transaction&& other) noexcept;
  /// Rolls this transaction back if open, then takes over `other`'s.
  Transaction& operator=(Transaction&& other) noexcept;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
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

  /// Runs body(Statement&) on a statement of `q` on the writer connection and returns what
  /// body returns (the query helpers are built on it).
  template <class Body>
  auto with_statement(QueryRef q, Body&& body) -> std::invoke_result_t<Body&, Statement&> {
    using R = std::invoke_result_t<Body&, Statement&>;
    Statement st;
    if (Status s = prepare_statement(q, st); !s.ok()) return R(std::move(s));
    return body(st);
  }

 private:
  friend class Database;
  friend class ResilientDatabase;
  Transaction(detail::DatabaseImpl* impl, detail::Lease lease, TxnMode mode) noexcept;
  // After a failure inside the transaction: rolls it back (unless SQLite already did), marks
  // the Status TxnState::kRolledBack, and turns a transient fault of one statement into a
  // fault of the whole transaction (only re-running all of it can help now).
  Status abandon(Status failure);
  Status finished() const;
  Status prepare_statement(QueryRef q, Statement& out);

  detail::DatabaseImpl* impl_ = nullptr;
  detail::Lease lease_;  // the writer, held while open
  TxnMode mode_ = TxnMode::kImmediate;
};

/// One SQLite database file: a writer connection and read connections, with the query
/// helpers (see the top of this file). Move-only; may be used from many threads at once.
class Database : public QueryApi<Database> {
 public:
  /// Opens `options.path` and checks that it is a writable SQLite database (readable, with
  /// read_only), switching it to options.journal_mode. Bad configuration throws
  /// std::invalid_argument naming the field; a file that is missing (with create=false),
  /// cannot be opened or written, or is not a database gives a Status naming the file and
  /// the problem.
  static Result<Database> open(Options options);

  /// Takes over `other`'s database; `other` is left empty.
  Database(Database&& other) noexcept;
  /// Closes this database, then takes over `other`'s.
  Database& operator=(Database&& other) noexcept;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
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

  /// Creates Options::idempotency_table if it does not exist:
  /// @code
  ///   (key TEXT PRIMARY KEY, result TEXT, created_at TEXT NOT NULL)   -- UTC, ISO-8601
  /// @endcode
  Status create_idempotency_table();
  /// Runs fn(Transaction&) -> Status or Result<std::string> in a transaction and records `key`
  /// with its result there; a key recorded already returns its result (replayed) without
  /// running fn (idempotency.hpp). A Database runs it once; ResilientDatabase retries it.
  /// REQUIRES: create_idempotency_table() was called.
  template <class Fn>
  Result<KeyedResult> once(std::string_view key, Fn&& fn, TxnMode mode = TxnMode::kImmediate);

  /// Runs body(Statement&) on a statement of `q` bound to the right connection (a read
  /// connection for a read, the writer for a write) and returns what body returns. The
  /// statement is reset and the connection given back afterwards. Transaction control is
  /// refused (use begin()/transaction()), and so is SAVEPOINT outside a transaction.
  template <class Body>
  auto with_statement(QueryRef q, Body&& body) -> std::invoke_result_t<Body&, Statement&> {
    using R = std::invoke_result_t<Body&, Statement&>;
    detail::Lease lease;
    Statement st;  // destroyed (reset) before the lease gives the connection back
    if (Status s = lease_statement(q, lease, st); !s.ok()) [[unlikely]]
      return R(std::move(s));
    return body(st);
  }

  /// Closes every connection nobody is using; they reopen on next use. A connection that has
  /// read a WAL database keeps a lock that stops another process from taking the
  /// exclusive-locking-mode lock (see FAULTS.md). Keeps an in-memory database alive.
  /// Returns how many connections were closed.
  int close_idle_connections() noexcept;

  /// The options it was opened with.
  [[nodiscard]] const Options& options() const noexcept;

 private:
  friend class ResilientDatabase;
  explicit Database(std::unique_ptr<detail::DatabaseImpl> impl) noexcept;
  // The Query of `sql` if it was prepared before (no SQLite call, no wait); nullopt otherwise.
  std::optional<Query> prepared(std::string_view sql);
  Status lease_statement(QueryRef q, detail::Lease& lease, Statement& out);

  std::unique_ptr<detail::DatabaseImpl> impl_;
};

template <class Fn>
auto Database::transaction(Fn&& fn, Operation op, TxnMode mode)
    -> std::invoke_result_t<Fn&, Transaction&> {
  using R = std::invoke_result_t<Fn&, Transaction&>;
  static_assert(std::is_same_v<R, Status> || is_result<R>::value,
                "the transaction function must return holdfast::Status or Result<T>");
  (void)op;
  Result<Transaction> tx = begin(mode);
  if (!tx.ok()) return R(tx.status());
  R r = fn(*tx);
  if (!is_ok(r)) return R(tx->abandon(Status(status_of(r))));
  Status committed = tx->commit();
  if (!committed.ok()) return R(tx->abandon(std::move(committed)));
  return r;
}

namespace detail {
// once()'s two statements, on `table` (checked by Database::open()).
Result<std::optional<std::string>> recorded_result(Transaction& tx, const std::string& table,
                                                   std::string_view key);
Status record_result(Transaction& tx, const std::string& table, std::string_view key,
                     std::string_view result);

// The body of once() inside its transaction.
template <class Fn>
Result<KeyedResult> run_once(Transaction& tx, const std::string& table, std::string_view key,
                             Fn& fn) {
  using R = std::invoke_result_t<Fn&, Transaction&>;
  static_assert(std::is_same_v<R, Status> || std::is_same_v<R, Result<std::string>>,
                "the once() function must return holdfast::Status or "
                "holdfast::Result<std::string>");
  Result<std::optional<std::string>> seen = recorded_result(tx, table, key);
  if (!seen.ok()) return seen.status();
  if (seen->has_value()) return KeyedResult{std::move(**seen), true};
  std::string result;
  if constexpr (std::is_same_v<R, Status>) {
    if (Status s = fn(tx); !s.ok()) return s;
  } else {
    Result<std::string> r = fn(tx);
    if (!r.ok()) return r.status();
    result = std::move(*r);
  }
  if (Status s = record_result(tx, table, key, result); !s.ok()) return s;
  return KeyedResult{std::move(result), false};
}
}  // namespace detail

template <class Fn>
Result<KeyedResult> Database::once(std::string_view key, Fn&& fn, TxnMode mode) {
  return transaction(
      [&](Transaction& tx) { return detail::run_once(tx, options().idempotency_table, key, fn); },
      Operation{Idempotency::kIdempotent, true, Priority::kNormal, "sqlite.once"}, mode);
}

}  // namespace holdfast::sqlite
