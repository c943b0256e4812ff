/// @file
/// holdfast::pg::Database: PostgreSQL with classified errors, a retry window per request,
/// reads retried, writes never doubled, a circuit breaker per endpoint, reads on replicas
/// that have replayed the request's own writes, and commits in doubt resolved instead of
/// guessed.
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
/// Every call is one transaction of its own that leaves nothing behind on its connection:
/// its read-only mode and statement_timeout are set inside it (SET LOCAL), so it works
/// through PgBouncer in transaction mode too (Pooling::kTransaction). A call's statements
/// travel in one round trip (a libpq pipeline).
///
/// Read path (read()): the SQL must classify as a read (classify_sql); it runs in a READ ONLY
/// transaction, so a statement misjudged as a read -- SELECT f() where f inserts -- is
/// refused with 25006 and never applied; it is then sent once more on the write path (the
/// second attempt shows in RetryStats). Transient faults are retried within the request's
/// window. Reads prefer a replica that has replayed the request's own writes (see
/// pg/lsn.hpp) and fall back to the primary while the replica's breaker is open, it
/// just failed, it is behind those writes, it lags more than max_replica_lag (which also
/// counts against its breaker), or it is not in recovery at all: a standby that was promoted
/// is no replica (its frozen replay position says nothing), so that read counts against its
/// breaker too and the replica pool closes its sessions to that host, and the next connect
/// goes through the replica URL's hosts (with target_session_attrs=standby, to the standby
/// of the moment; ADR 0025). Once a replica has been found behind a request's writes, reads
/// that need later writes go straight to the primary for a while (50 ms, doubling up to 1 s
/// while its replay stays where it was), so a standby that stopped replaying -- after the
/// primary restarted, until it streams again -- costs no second attempt per read.
///
/// Write path (write()): one attempt, unless the fault proves nothing was applied (lock
/// timeout, statement timeout, refused connection, a serialization failure of the
/// statement's own transaction). A lost connection means the outcome is unknown: not
/// retried unless the caller passes an idempotent Operation.
///
/// Transactions (transaction()): BEGIN, the transaction id (pg_current_xact_id()), the
/// function, COMMIT. Any error rolls the whole transaction back; 40001/40P01 (and any other
/// fault that a re-run can help) re-run the whole function when the caller declared it
/// re-runnable (Operation::transaction(true)). A connection lost during COMMIT is resolved
/// with pg_xact_status() on a new connection: committed -> success; aborted -> rolled back
/// (and re-run if re-runnable); no answer -> Status with txn_state kUnknown. Never guessed.
///
/// Idempotency keys (once()): the write and the key's row commit in one transaction, so a
/// call repeated with the same key -- after any failure, an unknown outcome included --
/// returns the first call's result and never applies the write twice.
///
/// Every call goes RequestScope -> Shield (retry loop, throttle, breaker) -> pool -> libpq.
/// The remaining window caps the pool wait, the server's statement_timeout and the client's
/// wait on the socket.
///
/// Thread safety: a Database may be used from any number of threads. A Transaction belongs
/// to the function it is passed to.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "holdfast/core/clock.hpp"
#include "holdfast/core/idempotency.hpp"
#include "holdfast/core/operation.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/core/retry_policy.hpp"
#include "holdfast/core/status.hpp"
#include "holdfast/detail/run_attempts.hpp"
#include "holdfast/pg/connection.hpp"
#include "holdfast/pg/options.hpp"
#include "holdfast/pg/pool.hpp"
#include "holdfast/pg/sql.hpp"

namespace holdfast {
class Shield;  // holdfast/core/shield.hpp
}  // namespace holdfast

namespace holdfast::pg {

class AttemptScope;  // holdfast/pg/attempt.hpp
struct RoutedCall;   // the same

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

class Database;
namespace detail {
struct CallPipeline;
class LostWrites;
struct CopyState;
class HedgeBudget;
}  // namespace detail

/// The transaction a transaction() function runs in. Statements may be anything but the
/// end of the transaction itself (COMMIT/ROLLBACK: the Database commits when the function
/// returns OK and rolls back otherwise). After a failed statement the transaction is
/// aborted; the function should return that Status.
class Transaction {
 public:
  /// Move-only.
  Transaction(Transaction&&) noexcept = default;
  /// Move-only.
  Transaction& operator=(Transaction&&) noexcept = default;
  /// A transaction still open here (an exception left the function) is ended by closing
  /// its connection, which makes the server roll it back.
  ~Transaction();

  /// Runs one statement in the transaction.
  Result<Rows> query(std::string_view sql, std::span<const Param> params);
  /// query() with a braced list of parameters.
  Result<Rows> query(std::string_view sql, std::initializer_list<Param> params = {}) {
    return query(sql, std::span<const Param>(params.begin(), params.size()));
  }
  /// Runs a prepared Statement in the transaction.
  Result<Rows> query(const Statement& stmt, std::span<const Param> params);
  /// query() of a Statement with a braced list of parameters.
  Result<Rows> query(const Statement& stmt, std::initializer_list<Param> params = {}) {
    return query(stmt, std::span<const Param>(params.begin(), params.size()));
  }

  /// The transaction id recorded at BEGIN (pg_current_xact_id()); empty for READ ONLY.
  [[nodiscard]] std::string_view xid() const noexcept { return xid_; }
  /// 1 for the first run of the function, 2 for its first re-run, ...
  [[nodiscard]] int run_number() const noexcept { return run_; }
  /// The connection the transaction runs on (for what the Transaction does not offer).
  [[nodiscard]] Connection& connection() noexcept { return *conn_; }

 private:
  friend class Database;
  Transaction(PooledConnection conn, int run, bool named_statements) noexcept
      : conn_(std::move(conn)), run_(run), named_statements_(named_statements) {}
  Result<Rows> record(Result<Rows> r);

  PooledConnection conn_;
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
  /// Opens the database as the SQLite driver opens its own: `options` are checked (an error
  /// naming the field; nothing is thrown) and nothing connects yet. Not movable, so it is
  /// handed back in a unique_ptr.
  static Result<std::unique_ptr<Database>> open(DatabaseOptions options);
  /// Validates `options` (std::invalid_argument naming the field). Connects lazily.
  explicit Database(DatabaseOptions options);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  /// The read path. REQUIRES: the SQL classifies as a read (else INVALID_ARGUMENT, nothing
  /// is sent). Retried within the window; runs in a READ ONLY transaction; may run on a
  /// replica; refused with 25006, sent once more on the write path.
  Result<Rows> read(std::string_view sql, std::span<const Param> params,
                    const ReadOptions& options = {});
  /// read() with a braced list of parameters.
  Result<Rows> read(std::string_view sql, std::initializer_list<Param> params = {},
                    const ReadOptions& options = {}) {
    return read(sql, std::span<const Param>(params.begin(), params.size()), options);
  }
  /// read() of a prepared Statement.
  Result<Rows> read(const Statement& stmt, std::span<const Param> params,
                    const ReadOptions& options = {});
  /// read() of a prepared Statement with a braced list of parameters.
  Result<Rows> read(const Statement& stmt, std::initializer_list<Param> params = {},
                    const ReadOptions& options = {}) {
    return read(stmt, std::span<const Param>(params.begin(), params.size()), options);
  }

  /// The write path, on the primary, in autocommit. Retried only when the fault proves
  /// nothing was applied, or, with an idempotent `op`, on any transient fault. Transaction,
  /// session, cursor and prepared-statement control are refused (they would leave state on
  /// a pooled connection): use transaction(), DatabaseOptions::settings or prepare().
  Result<Rows> write(std::string_view sql, std::span<const Param> params,
                     Operation op = Operation::write("pg.write"));
  /// write() with a braced list of parameters.
  Result<Rows> write(std::string_view sql, std::initializer_list<Param> params = {},
                     Operation op = Operation::write("pg.write")) {
    return write(sql, std::span<const Param>(params.begin(), params.size()), op);
  }
  /// write() of a prepared Statement.
  Result<Rows> write(const Statement& stmt, std::span<const Param> params,
                     Operation op = Operation::write("pg.write"));
  /// write() of a prepared Statement with a braced list of parameters.
  Result<Rows> write(const Statement& stmt, std::initializer_list<Param> params = {},
                     Operation op = Operation::write("pg.write")) {
    return write(stmt, std::span<const Param>(params.begin(), params.size()), op);
  }

  /// read() for a read, write() for anything else.
  Result<Rows> query(std::string_view sql, std::span<const Param> params);
  /// query() with a braced list of parameters.
  Result<Rows> query(std::string_view sql, std::initializer_list<Param> params = {}) {
    return query(sql, std::span<const Param>(params.begin(), params.size()));
  }

  /// Classifies `sql` once; each connection prepares it the first time it runs it.
  /// INVALID_ARGUMENT when the SQL cannot run (empty, unterminated, several statements).
  Result<Statement> prepare(std::string_view sql);

  /// Runs `fn(Transaction&)` (returning Status or Result<T>) in a transaction on the
  /// primary and commits it; see the header comment for rollbacks, re-runs and commits in
  /// doubt. The returned failure's txn_state() says what became of the transaction.
  template <class F>
  auto transaction(F&& fn, TransactionOptions options = {})
      -> std::invoke_result_t<F&, Transaction&>;

  /// Creates the idempotency-key table if it does not exist:
  /// @code
  ///   (key text PRIMARY KEY, result text, created_at timestamptz NOT NULL DEFAULT now()).
  /// @endcode
  Status create_idempotency_table();
  /// Runs `fn(Transaction&)` -- returning Result<std::string> (the result to remember) or
  /// Status -- and records `key` with its result in the same transaction. If `key` is
  /// recorded already, returns the recorded result (replayed = true) without running `fn`.
  /// Safe to call again with the same key after any failure: it is run as an idempotent,
  /// re-runnable transaction. REQUIRES: create_idempotency_table() was called (once).
  template <class F>
  Result<KeyedResult> once(std::string_view key, F&& fn, TransactionOptions options = {});

  /// Whether the primary (or replica i) is silent now (see silence_after).
  [[nodiscard]] bool silent() const noexcept;
  /// Whether replica `i` is silent now (std::out_of_range for a bad index).
  [[nodiscard]] bool replica_silent(std::size_t i) const;

  /// Whether replica `i` is used less now because it answers far slower than the primary
  /// (DatabaseOptions::slow_copy_floor; std::out_of_range for a bad index).
  [[nodiscard]] bool replica_slow(std::size_t i) const;
  /// Replica reads also sent to the primary (DatabaseOptions::hedge_budget), probes of a
  /// slow replica included.
  [[nodiscard]] std::uint64_t hedged_reads() const noexcept {
    return hedged_.load(std::memory_order_relaxed);
  }
  /// Hedged reads the primary answered first.
  [[nodiscard]] std::uint64_t hedges_won() const noexcept {
    return hedges_won_.load(std::memory_order_relaxed);
  }

  /// The primary's Shield (breaker, throttle, metrics), and each replica's.
  [[nodiscard]] Shield& shield() noexcept;
  /// Replica `i`'s Shield (std::out_of_range for a bad index).
  [[nodiscard]] Shield& replica_shield(std::size_t i);
  /// The primary's pool for reads.
  [[nodiscard]] Pool& read_pool() noexcept;
  /// The primary's pool for writes and transactions.
  [[nodiscard]] Pool& write_pool() noexcept;
  /// Replica `i`'s read pool (std::out_of_range for a bad index).
  [[nodiscard]] Pool& replica_pool(std::size_t i);
  /// How many replicas there are.
  [[nodiscard]] std::size_t replica_count() const noexcept { return replicas_.size(); }
  /// The options it was built with.
  [[nodiscard]] const DatabaseOptions& options() const noexcept { return options_; }
  /// What the watch for confirmed writes a change of writer lost has found so far
  /// (holdfast/pg/lost_writes.hpp): empty when DatabaseOptions::lost_writes.remember
  /// is 0. Takes a lock: for a status page, not for every request.
  [[nodiscard]] LostWritesReport lost_writes() const;

 private:
  class ReplayLag;  // how far a replica's replay trails (database_internal.hpp)
  class CatchUp;    // whether a replica can have replayed a request's writes (the same)
  struct Endpoint;  // a server: its Shield, pools, probe and liveness (the same)
  // What a read or write runs: SQL text, or a prepared Statement.
  struct Work {
    std::string_view sql;
    const Statement* stmt = nullptr;
    std::span<const Param> params;
  };
  // The statement a call opens with (database.cpp): its SQL, and its name and id when it is
  // prepared on each connection (Pooling::kSession).
  struct Prefix {
    std::string sql;
    std::string name;
    std::uint32_t id = 0;
  };
  // OK, or why `replica` is unhealthy: it reported `replayed` and `received` at `now` and
  // has been behind WAL it had received for longer than `max_lag`.
  static Status replay_lag_status(Endpoint& replica, std::uint64_t replayed, std::uint64_t received,
                                  TimePoint now, Duration max_lag);
  // What a replica said about itself with a read (the replica prefix's columns).
  struct ReplicaView {
    std::uint64_t replayed = 0;
    std::uint64_t received = 0;
    bool read_committed = false;  ///< the read's snapshot came after the replay position
    bool in_recovery = true;      ///< false: not a standby (promoted), so no replica
  };

  // The one place every retried operation goes through: the endpoint's Shield (retry
  // loop, throttle, breaker), inside a RequestScope (one of its own outside any). Defined in
  // database_internal.hpp.
  template <class F>
  auto run(Endpoint& endpoint, const RetryPolicy& policy, Operation op, F&& attempt,
           RetryStats* stats = nullptr) -> std::invoke_result_t<F&>;
  // run() on the primary with its Shield's policy for `op`, for an attempt seen through a
  // reference (transaction()).
  Status run_primary(Operation op, holdfast::detail::AttemptRef attempt, RetryStats* stats);

  std::unique_ptr<Endpoint> make_endpoint(std::string name, const std::string& url, bool primary);
  Prefix make_prefix(std::string_view head, std::uint32_t id, std::string_view name) const;
  Result<Rows> read_work(const Work& work, const ReadOptions& options);
  Result<Rows> read_routed(const Work& work, const RetryPolicy& policy, Operation op,
                           RetryStats& stats);
  // One attempt of `scope`'s step of a read (AttemptScope).
  Result<Rows> read_step(const Work& work, AttemptScope& scope);
  // Each replica once (`again`: those `route` found only behind, past their hold) until
  // one answers; none did: `route.unanswered`. The steps of read_routed() and read_step().
  Result<Rows> replica_pass(const Work& work, RoutedCall& route, bool again, RetryStats& stats);
  // One attempt on the primary for `route`, or CANCELLED when a replica that was behind has
  // caught up since its first attempt (`route.left_to_replica`).
  Result<Rows> primary_read(const Work& work, RoutedCall& route);
  // Whether a replica marked in `behind` has been seen past the request's position.
  bool replica_caught_up(std::uint64_t behind) noexcept;
  // A write asked for in a replica step: refused, and the call left to the primary.
  static Status write_in_replica_step(AttemptScope& scope);
  // For a transaction inside an AttemptScope (`one_attempt` set): OK on the primary's step,
  // else write_in_replica_step(). Outside one: OK, `one_attempt` left false.
  static Status transaction_step(bool& one_attempt);
  Result<Rows> write_work(const Work& work, Operation op, RetryStats* stats = nullptr);
  Result<Rows> write_classified(const SqlClass& c, const Work& work, Operation op);
  // One read on `endpoint`'s read pool (`may_wait` for a free connection); fills `view` on
  // a replica, and closes the session and its idle siblings to its host when the replica
  // is not in recovery. A replica's new connection gets at most `replica_connect`.
  // `exchange` (when not null): how long the round trip took, the wait for a connection left
  // out.
  Result<Rows> read_once(Endpoint& endpoint, const Work& work, bool may_wait, ReplicaView* view,
                         Duration replica_connect = Duration::max(), Duration* exchange = nullptr);
  // One write on the primary, in a transaction of its own, and its commit's position.
  Result<Rows> write_once(const Work& work);
  // What a replica made of a read.
  enum class ReplicaAnswer : std::uint8_t {
    kAnswered,  ///< the result is the read's (rows, or a failure the primary would meet too)
    kFailed,    ///< it could not answer (breaker open, busy, down, lagging): the primary answers
    kBehind,    ///< it has not replayed the request's own writes yet: the primary answers
  };
  struct Hedge {               // what became of a replica read's hedge (hedge.cpp)
    bool sent = false;         // the read went to the primary too
    bool primary_won = false;  // the primary's answer is the read's
    bool gave_up = false;      // a slow replica's try was given up, no hedge sent
  };
  // One read on `replica` from `start`, hedged to the primary or given up (hedge.cpp).
  Result<Rows> replica_read(Endpoint& replica, const Work& work, ReplicaView& view, bool probe,
                            TimePoint start, Hedge& hedge);
  std::optional<Rows> hedge_to_primary(Connection& conn, PooledConnection& replica_lease,
                                       const Work& work, bool probe, Hedge& hedge);
  // read_once()'s end: the pipeline's status `s` (step `failed` failed) judged, the
  // connection discarded when it must be, `view` filled.
  Result<Rows> finish_read(Endpoint& endpoint, PooledConnection& lease, Status s,
                           std::span<Rows> out, std::size_t head, std::size_t main,
                           std::size_t failed, ReplicaView* view);
  // What `replica`'s answer after `latency` (or its lost hedge) says of its speed.
  void judge_replica(Endpoint& replica, bool lost_hedge, Duration latency, TimePoint now) noexcept;
  // One admitted read on a replica (counted in `stats`). A replica found behind the
  // request's writes moments ago is not asked again until its hold ends, unless
  // `past_hold`.
  Result<Rows> try_replica(Endpoint& replica, const Work& work, bool past_hold,
                           ReplicaAnswer& answer, RetryStats& stats);
  // A connection of `pool` for a call: waits for one (`may_wait`) or takes one only if free.
  // A new connection is given at most `connect_at_most` (when it does not wait).
  Result<PooledConnection> lease(Pool& pool, bool may_wait,
                                 Duration connect_at_most = Duration::max());
  // Opens the current request's window if it is not open yet (see database.cpp).
  void open_request_window() const;
  // Starts a call's pipeline on `conn`: sets the connection's deadline from the current
  // window and adds `prefix` with the statement_timeout that leaves (and, with
  // Pooling::kTransaction, the settings). Returns the prefix's step.
  std::size_t add_prefix(detail::CallPipeline& p, Connection& conn, const Prefix& prefix) const;
  // Adds the work's statement (prepared under its name with Pooling::kSession); returns its
  // step.
  std::size_t add_work(detail::CallPipeline& p, Connection& conn, const Work& work) const;
  // When a new connection must be up by: the window's end, at most connect_timeout away.
  // `cap`: at most this far away, too.
  TimePoint connect_deadline(Duration cap = Duration::max()) const;

  Result<Transaction> begin(const TransactionOptions& options, int run);
  // Commits (fn_status OK) or rolls back, resolving a COMMIT in doubt.
  Status finish(Transaction& tx, const Status& fn_status, TransactionReport& report);
  Status commit(Transaction& tx, TransactionReport& report);
  Status commit_in_doubt(Transaction& tx, const Status& lost, TransactionReport& report);
  // What became of transaction `xid`; `lsn` and `timeline`: the primary's WAL position when
  // it answered.
  // `host`: which host of the URL answered (ConnectionAccess::host_id()).
  TxnState resolve(std::string_view xid, Status& why, std::uint64_t& lsn, std::uint32_t& timeline,
                   std::uintptr_t& host);
  // A write of the current request committed at `lsn` (0: not known) on `timeline` (0: not
  // known), on the writer of `host` (`conn`, when not null, names it), with idempotency key
  // `key` (empty: none): the request's position (detail::note_write()), the newest timeline
  // seen, and the confirmed writes a change of writer checks (ADR 0036).
  void wrote(std::uint64_t lsn, std::uint32_t timeline, std::uintptr_t host, const Connection* conn,
             std::string_view key) noexcept;
  // Whether a request's position of `timeline` (0: not known) is of a timeline older than
  // the newest this Database has seen (after a promotion): only the primary may answer.
  bool predates_promotion(std::uint32_t timeline) noexcept;
  Result<bool> claim_key(Transaction& tx, std::string_view key);
  Result<std::string> recorded_result(Transaction& tx, std::string_view key);
  Status record_result(Transaction& tx, std::string_view key, std::string_view result);

  const DatabaseOptions options_;
  Clock* clock_;
  std::unique_ptr<Endpoint> primary_;
  std::vector<std::unique_ptr<Endpoint>> replicas_;
  std::unique_ptr<detail::HedgeBudget> hedges_;
  std::atomic<std::uint64_t> hedged_{0};
  std::atomic<std::uint64_t> hedges_won_{0};
  std::atomic<bool> standard_strings_{true};
  // The URL names several hosts (failover: the writer is the one not in recovery).
  bool several_hosts_ = false;
  // The newest timeline of the primary's writes (not of positions requests brought: a
  // client may forge those).
  std::atomic<std::uint32_t> timeline_{0};
  // Confirmed writes a change of writer lost (null: lost_writes.remember is 0).
  std::unique_ptr<detail::LostWrites> lost_;
  // Pooling::kTransaction: `settings` as prefix parameters (name, value, name, ...).
  std::vector<Param> setting_params_;
  Prefix read_prefix_;     // READ ONLY + statement_timeout
  Prefix replica_prefix_;  // the same, and the replica's replay position
  Prefix write_prefix_;    // statement_timeout
  Prefix begin_prefix_;    // statement_timeout, and the transaction id
  std::string claim_sql_;
  std::string recorded_sql_;
  std::string record_sql_;
};

template <class F>
auto Database::transaction(F&& fn, TransactionOptions options)
    -> std::invoke_result_t<F&, Transaction&> {
  using R = std::invoke_result_t<F&, Transaction&>;
  static_assert(std::is_same_v<R, Status> || is_result<R>::value,
                "holdfast::pg::Database::transaction: the function must return "
                "holdfast::Status or holdfast::Result<T>");
  TransactionReport local;
  TransactionReport& report = options.report != nullptr ? *options.report : local;
  report = TransactionReport{};
  auto attempt = [&]() -> R {
    ++report.runs;
    Result<Transaction> tx = begin(options, report.runs);
    if (!tx.ok()) return R(Status(tx.status()));
    R r = fn(*tx);
    Status s = finish(*tx, status_of(r), report);
    if (!s.ok()) return R(std::move(s));
    return r;
  };
  bool one_attempt = false;  // inside an AttemptScope: its step alone, the primary's only
  if (Status refused = transaction_step(one_attempt); !refused.ok()) [[unlikely]]
    return R(std::move(refused));
  if (one_attempt) [[unlikely]]
    return attempt();
  return holdfast::detail::run_through(attempt, [&](holdfast::detail::AttemptRef a) {
    return run_primary(options.operation, a, &report.retry);
  });
}

template <class F>
Result<KeyedResult> Database::once(std::string_view key, F&& fn, TransactionOptions options) {
  using R = std::invoke_result_t<F&, Transaction&>;
  static_assert(std::is_same_v<R, Status> || std::is_same_v<R, Result<std::string>>,
                "holdfast::pg::Database::once: the function must return holdfast::Status "
                "or holdfast::Result<std::string>");
  // Repeating is harmless whatever happened: the key makes the write apply at most once.
  options.operation.idempotency = Idempotency::kIdempotent;
  options.operation.reruns_transaction = true;
  return transaction(
      [&](Transaction& tx) -> Result<KeyedResult> {
        tx.key_ = key;
        Result<bool> claimed = claim_key(tx, key);
        if (!claimed.ok()) return claimed.status();
        if (!*claimed) {
          Result<std::string> recorded = recorded_result(tx, key);
          if (!recorded.ok()) return recorded.status();
          return KeyedResult{std::move(*recorded), true};
        }
        std::string result;
        if constexpr (std::is_same_v<R, Status>) {
          Status s = fn(tx);
          if (!s.ok()) return s;
        } else {
          Result<std::string> r = fn(tx);
          if (!r.ok()) return r.status();
          result = std::move(*r);
        }
        if (Status s = record_result(tx, key, result); !s.ok()) return s;
        return KeyedResult{std::move(result), false};
      },
      options);
}

}  // namespace holdfast::pg
