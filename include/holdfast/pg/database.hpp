/// @file
/// holdfast::pg::Database: PostgreSQL with one retry window per request, reads retried,
/// writes never doubled, replicas that have replayed the request's writes, commits in doubt
/// resolved.
///
/// @code
///   holdfast::pg::DatabaseOptions options;
///   options.url = "postgresql://app@127.0.0.1:5432/app";
///   options.replica_urls = {"postgresql://app@127.0.0.1:5433/app"};
///   holdfast::pg::Database db(options);
///   {
///     holdfast::RequestScope scope;                            // one 6 s window
///     auto games = db.read("SELECT * FROM game WHERE day = $1", {day});
///     auto paid = db.transaction(
///         [&](holdfast::pg::Transaction& tx) -> holdfast::Status {
///           auto r = tx.query("UPDATE account SET balance = balance - $1 WHERE id = $2",
///                             {amount, account});
///           return r.status();
///         },
///         {.operation = holdfast::Operation::transaction(/*rerunnable=*/true)});
///   }
/// @endcode
///
/// Every call is one transaction of its own, sent in one round trip with its settings (SET
/// LOCAL), so it works through PgBouncer in transaction mode. read() runs READ ONLY, retried
/// within the request's window, on a replica that has replayed the request's writes or on
/// the primary; write() is repeated only when nothing was applied; transaction() re-runs on
/// 40001/40P01 when declared re-runnable and resolves a COMMIT in doubt; once() records its
/// key with the write. docs/library.md and docs/scale-out.md tell each path whole.
///
/// Thread safety: a Database may be used from any number of threads. A Transaction belongs
/// to the function it is passed to.
#pragma once

#include <cstddef>
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
#include "holdfast/pg/options.hpp"
#include "holdfast/pg/param.hpp"
#include "holdfast/pg/rows.hpp"
#include "holdfast/pg/sql_kind.hpp"

namespace holdfast {
class Shield;  // holdfast/core/shield.hpp
}  // namespace holdfast

namespace holdfast::pg {

class Connection;        // holdfast/pg/connection.hpp
class Pool;              // holdfast/pg/pool.hpp
class PooledConnection;  // the same
class Transaction;
struct LostWritesReport;  // holdfast/pg/lost_writes.hpp

namespace detail {
// A transaction function seen through two pointers, run from compiled code (no allocation).
class TransactionFn {
 public:
  template <class F>
  explicit TransactionFn(F& fn) noexcept
      : object_(&fn),
        call_([](void* o, Transaction& tx) -> Status { return (*static_cast<F*>(o))(tx); }) {}
  Status operator()(Transaction& tx) const { return call_(object_, tx); }

 private:
  void* object_;
  Status (*call_)(void*, Transaction&);
};
}  // namespace detail

/// A statement prepared (lazily, once per connection) under a name of its own.
class Statement {
 public:
  Statement() = default;
  /// The SQL text.
  [[nodiscard]] std::string_view sql() const noexcept { return sql_; }
  /// How the SQL was classified (read or write).
  [[nodiscard]] SqlKind kind() const noexcept { return kind_; }
  /// Why it was classified so, in a few words.
  [[nodiscard]] std::string_view reason() const noexcept { return reason_; }

 private:
  friend class Database;
  friend class Transaction;
  std::string sql_;
  std::string name_;
  std::uint32_t id_ = 0;
  SqlKind kind_ = SqlKind::kInvalid;
  std::string_view reason_;
  bool changes_session_ = false;
};

/// The result of once(): the one holdfast::KeyedResult of every engine (idempotency.hpp).
using KeyedResult = holdfast::KeyedResult;

/// The transaction a transaction() function runs in: any statement but COMMIT or ROLLBACK
/// (the Database commits when the function returns OK). After a failed statement the
/// transaction is aborted; the function should return that Status.
class Transaction {
 public:
  /// Move-only.
  Transaction(Transaction&& other) noexcept;
  /// Move-only.
  Transaction& operator=(Transaction&& other) noexcept;
  /// A transaction still open here (an exception left the function) is ended by closing
  /// its connection, which makes the server roll it back.
  ~Transaction();

  /// Runs one statement in the transaction.
  Result<Rows> query(std::string_view sql, Params params = {});
  /// Runs a prepared Statement in the transaction.
  Result<Rows> query(const Statement& stmt, Params params = {});

  /// The transaction id recorded at BEGIN (pg_current_xact_id()); empty for READ ONLY.
  [[nodiscard]] std::string_view xid() const noexcept { return xid_; }
  /// 1 for the first run of the function, 2 for its first re-run, ...
  [[nodiscard]] int run_number() const noexcept { return run_; }
  /// The connection the transaction runs on (for what the Transaction does not offer; its
  /// members are in holdfast/pg/connection.hpp).
  [[nodiscard]] Connection& connection() noexcept;

 private:
  friend class Database;
  Transaction(PooledConnection&& conn, int run, bool named_statements) noexcept;
  Result<Rows> record(Result<Rows> r);
  PooledConnection& lease() noexcept;  // the connection, as the pool lent it

  // The PooledConnection, built in place (transaction.cpp checks that it fits): no
  // allocation per transaction, and no pool.hpp here.
  alignas(void*) std::byte lease_[3 * sizeof(void*)];
  std::string xid_;
  std::string_view key_;  // once()'s idempotency key: recorded with the commit (ADR 0036)
  Status failure_;        // the first failed statement
  int run_ = 1;
  bool named_statements_ = true;  // false through a transaction pooler
};

/// A PostgreSQL database behind Shields: a primary with read and write pools, optional
/// replicas, retried reads, safe writes and transactions (see the top of this file). Not
/// copyable; every method may be called from any thread.
class Database {
 public:
  /// Checks `options` (an error naming the field; nothing is thrown); nothing connects yet.
  /// Not movable, so it is handed back in a unique_ptr.
  static Result<std::unique_ptr<Database>> open(DatabaseOptions options);
  /// Validates `options` (std::invalid_argument naming the field). Connects lazily.
  explicit Database(DatabaseOptions options);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  /// The read path. REQUIRES: the SQL classifies as a read (else INVALID_ARGUMENT, nothing
  /// is sent). Retried within the window; runs in a READ ONLY transaction; may run on a
  /// replica; refused with 25006, sent once more on the write path.
  Result<Rows> read(std::string_view sql, Params params = {}, const ReadOptions& options = {});
  /// read() of a prepared Statement.
  Result<Rows> read(const Statement& stmt, Params params = {}, const ReadOptions& options = {});

  /// The write path, on the primary, in autocommit. Retried only when the fault proves
  /// nothing was applied, or, with an idempotent `op`, on any transient fault. Transaction,
  /// session, cursor and prepared-statement control are refused (they would leave state on
  /// a pooled connection): use transaction(), DatabaseOptions::settings or prepare().
  Result<Rows> write(std::string_view sql, Params params = {},
                     Operation op = Operation::write("pg.write"));
  /// write() of a prepared Statement.
  Result<Rows> write(const Statement& stmt, Params params = {},
                     Operation op = Operation::write("pg.write"));

  /// read() for a read, write() for anything else.
  Result<Rows> query(std::string_view sql, Params params = {});

  /// Classifies `sql` once; each connection prepares it the first time it runs it.
  /// INVALID_ARGUMENT when the SQL cannot run (empty, unterminated, several statements).
  Result<Statement> prepare(std::string_view sql);

  /// Runs `fn(Transaction&)` (returning Status or Result<T>) in a transaction on the
  /// primary and commits it: a failure rolls it back; re-run on 40001/40P01 when
  /// `options.operation` is re-runnable; a COMMIT in doubt is resolved with
  /// pg_xact_status(), never guessed. The returned failure's txn_state() says what became
  /// of the transaction (kUnknown when no server answers).
  template <class F>
  auto transaction(F&& fn, TransactionOptions options = {})
      -> std::invoke_result_t<F&, Transaction&>;

  /// Creates the idempotency-key table if it does not exist: `(key text PRIMARY KEY, result
  /// text, created_at timestamptz NOT NULL DEFAULT now())`.
  Status create_idempotency_table();
  /// Runs `fn(Transaction&)` -- returning Result<std::string> (the result to remember) or
  /// Status -- and records `key` with its result in the same transaction. If `key` is
  /// recorded already, returns the recorded result (replayed = true) without running `fn`.
  /// Safe to call again with the same key after any failure: it is run as an idempotent,
  /// re-runnable transaction. REQUIRES: create_idempotency_table() was called (once).
  template <class F>
  Result<KeyedResult> once(std::string_view key, F&& fn, TransactionOptions options = {});

  /// Whether the primary is silent now (see DatabaseOptions::silence_after).
  [[nodiscard]] bool silent() const noexcept;
  /// The primary's silence checks so far (as asio::pg::Client::silence_checks() counts).
  [[nodiscard]] std::uint64_t silence_checks() const noexcept;
  /// Whether replica `i` is silent now (std::out_of_range for a bad index).
  [[nodiscard]] bool replica_silent(std::size_t i) const;

  /// Whether replica `i` is used less now because it answers far slower than the primary
  /// (DatabaseOptions::slow_copy_floor; std::out_of_range for a bad index).
  [[nodiscard]] bool replica_slow(std::size_t i) const;
  /// Replica reads also sent to the primary (DatabaseOptions::hedge_budget), probes of a
  /// slow replica included.
  [[nodiscard]] std::uint64_t hedged_reads() const noexcept;
  /// Hedged reads the primary answered first.
  [[nodiscard]] std::uint64_t hedges_won() const noexcept;

  /// The primary's Shield (breaker, throttle, metrics), and each replica's.
  [[nodiscard]] Shield& shield() noexcept;
  /// Replica `i`'s Shield (std::out_of_range for a bad index).
  [[nodiscard]] Shield& replica_shield(std::size_t i);
  /// The primary's pool for reads (Pool's members are in holdfast/pg/pool.hpp).
  [[nodiscard]] Pool& read_pool() noexcept;
  /// The primary's pool for writes and transactions.
  [[nodiscard]] Pool& write_pool() noexcept;
  /// Replica `i`'s read pool (std::out_of_range for a bad index).
  [[nodiscard]] Pool& replica_pool(std::size_t i);
  /// How many replicas there are.
  [[nodiscard]] std::size_t replica_count() const noexcept;
  /// The options it was built with.
  [[nodiscard]] const DatabaseOptions& options() const noexcept;
  /// The confirmed writes a change of writer lost, found so far (holdfast/pg/lost_writes.hpp).
  /// Takes a lock: for a status page, not for every request.
  [[nodiscard]] LostWritesReport lost_writes() const;

 private:
  class Impl;  // the rest of a Database: its servers, pools and paths (src/pg/database_impl.hpp)

  // transaction() and once() without their templates (transaction.cpp): the retry loop,
  // BEGIN, `fn`, COMMIT (a COMMIT in doubt resolved), and for once() the key's row. Returns
  // the Status of the whole; `fn` leaves its own result in the caller's variable.
  Status run_transaction(detail::TransactionFn fn, const TransactionOptions& options);
  Result<KeyedResult> run_once(std::string_view key, detail::TransactionFn fn, std::string& result,
                               TransactionOptions options);

  std::unique_ptr<Impl> impl_;
};

template <class F>
auto Database::transaction(F&& fn, TransactionOptions options)
    -> std::invoke_result_t<F&, Transaction&> {
  using R = std::invoke_result_t<F&, Transaction&>;
  static_assert(std::is_same_v<R, Status> || is_result<R>::value,
                "holdfast::pg::Database::transaction: the function must return "
                "holdfast::Status or holdfast::Result<T>");
  if constexpr (std::is_same_v<R, Status>) {
    auto run = [&](Transaction& tx) -> Status { return fn(tx); };
    return run_transaction(detail::TransactionFn(run), options);
  } else {
    std::optional<R> last;  // the last run's result: the call's, when the whole succeeded
    auto run = [&](Transaction& tx) -> Status { return last.emplace(fn(tx)).status(); };
    Status s = run_transaction(detail::TransactionFn(run), options);
    if (s.ok()) [[likely]]
      return std::move(*last);
    return R(std::move(s));
  }
}

template <class F>
Result<KeyedResult> Database::once(std::string_view key, F&& fn, TransactionOptions options) {
  using R = std::invoke_result_t<F&, Transaction&>;
  static_assert(std::is_same_v<R, Status> || std::is_same_v<R, Result<std::string>>,
                "holdfast::pg::Database::once: the function must return holdfast::Status "
                "or holdfast::Result<std::string>");
  std::string result;  // what fn returned, recorded with the key
  auto run = [&](Transaction& tx) -> Status {
    if constexpr (std::is_same_v<R, Status>) {
      return fn(tx);
    } else {
      Result<std::string> r = fn(tx);
      if (!r.ok()) return r.status();
      result = std::move(*r);
      return Status();
    }
  };
  return run_once(key, detail::TransactionFn(run), result, std::move(options));
}

}  // namespace holdfast::pg
