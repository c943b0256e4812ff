/// @file
/// holdfast::sqlite::ResilientDatabase: a Database that retries what is safe to retry.
///
/// The same API as Database, so swapping the handle is one line:
///
/// @code
///   auto db = holdfast::sqlite::ResilientDatabase::open({.path = "club.db"});
///   holdfast::RequestScope request;                      // one 6 s window per page render
///   auto games = db->query<std::int64_t, std::string>(schedule, day);   // retried reads
/// @endcode
///
/// What is retried (each error's Fault decides; docs/faults.md): reads, on any transient
/// fault; an autocommit write only after SQLITE_BUSY (nothing applied); in a transaction,
/// waiting for the writer, BEGIN and a busy COMMIT, and the whole function only when it is
/// declared re-runnable (Operation::transaction(true)); once(key, fn) always (the key makes
/// it safe). Every wait draws from the RequestScope's window, or a window of the policy's
/// length outside one.
///
/// Thread safety: as Database. Copies (with_policy()) share the Database and the Shields.
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "holdfast/core/operation.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/core/status.hpp"
#include "holdfast/detail/run_attempts.hpp"
#include "holdfast/sqlite/database.hpp"
#include "holdfast/sqlite/options.hpp"
#include "holdfast/sqlite/query.hpp"

namespace holdfast {
class RetryPolicy;  // holdfast/core/retry_policy.hpp
class Shield;       // holdfast/core/shield.hpp
}  // namespace holdfast

namespace holdfast::sqlite {

/// A Database whose reads are retried within the request's window and whose writes are
/// never doubled, optionally behind Shields (see the top of this file).
class ResilientDatabase : public QueryApi<ResilientDatabase> {
 public:
  /// RetryPolicy::standard(), the policy of every form that is given none (so that this
  /// header needs no holdfast/core/retry_policy.hpp).
  [[nodiscard]] static const RetryPolicy& standard_policy() noexcept;
  /// Opens as Database::open() (not retried: it happens once, at start-up).
  static Result<ResilientDatabase> open(Options options,
                                        const RetryPolicy& policy = standard_policy());
  /// Takes over an open Database.
  explicit ResilientDatabase(Database db, const RetryPolicy& policy = standard_policy());
  /// With a Shield (one per database): every operation also goes through its circuit
  /// breaker and retry throttle, so while the database stays locked only probes reach it
  /// and requests get "breaker open, retry after N" instead of waiting out their windows.
  /// REQUIRES: `shield` outlives this object; its clock is the policy's clock.
  static Result<ResilientDatabase> open(Options options, Shield& shield,
                                        const RetryPolicy& policy = standard_policy());
  /// The same, taking over an open Database.
  ResilientDatabase(Database db, Shield& shield, const RetryPolicy& policy = standard_policy());
  /// With one Shield for reads and one for writes (docs/adr/0006): a batch job holding the
  /// write lock opens the writes' breaker only, and WAL reads, which it does not block, go on.
  /// Statements SQLite proves read-only (and preparing SQL) go through `reads`; writes,
  /// BEGIN, transactions and COMMIT through `writes`. REQUIRES: both outlive this object.
  static Result<ResilientDatabase> open(Options options, Shield& reads, Shield& writes,
                                        const RetryPolicy& policy = standard_policy());
  /// The same, taking over an open Database.
  ResilientDatabase(Database db, Shield& reads, Shield& writes,
                    const RetryPolicy& policy = standard_policy());

  /// As Database::prepare(), retried as a read.
  Result<Query> prepare(std::string_view sql);
  /// As Database::judge_access(), retried as a read.
  Result<AccessVerdict> judge_access(std::string_view sql);
  /// As Database::begin(); waiting for the writer and BEGIN are retried.
  Result<Transaction> begin(TxnMode mode = TxnMode::kImmediate);

  /// As Database::transaction(), retried as described above. `op` says whether fn may be
  /// run again after a rollback (Operation::transaction(rerunnable)).
  template <class Fn>
  auto transaction(Fn&& fn, Operation op = Operation::transaction(false),
                   TxnMode mode = TxnMode::kImmediate) -> std::invoke_result_t<Fn&, Transaction&>;

  /// As Database::execute_script(); the script runs as one transaction, so it is re-run
  /// whole after a rollback.
  Status execute_script(std::string_view sql);

  /// As Database::create_idempotency_table(), retried.
  Status create_idempotency_table();
  /// As Database::once(), retried as a re-runnable, idempotent transaction: whatever went
  /// wrong before, a repeat with the same key applies fn at most once.
  template <class Fn>
  Result<KeyedResult> once(std::string_view key, Fn&& fn, TxnMode mode = TxnMode::kImmediate);

  /// This database with another retry policy, sharing the connections and the Shields: for
  /// calls that follow their own schedule, such as the session read every page makes first
  /// @code
  ///   auto sessions = db.with_policy(holdfast::RetryPolicy::session_reads());
  /// @endcode
  [[nodiscard]] ResilientDatabase with_policy(const RetryPolicy& policy) const;
  /// This database with every operation one attempt and no Shield, sharing the
  /// connections: for a caller that makes the retry decisions itself, such as
  /// holdfast::asio::async_run, whose attempt runs one operation of it on a thread that may
  /// block (inside a RequestScope of the request's window, which caps the busy wait). Each
  /// error is classified as usual (its Fault) and carries no StopReason, so the caller's
  /// loop decides on it (a StopReason would be final there: ADR 0001). Nothing is retried,
  /// not even a COMMIT that met SQLITE_BUSY (the transaction is rolled back and the attempt
  /// fails busy).
  [[nodiscard]] ResilientDatabase one_attempt() const;

  /// As Database::with_statement(): body runs once per attempt, on a fresh reset statement.
  template <class Body>
  auto with_statement(QueryRef q, Body&& body) -> std::invoke_result_t<Body&, Statement&>;

  /// As Database::close_idle_connections() (not retried).
  int close_idle_connections() noexcept { return db_->close_idle_connections(); }
  /// The Database underneath, shared by every copy made with with_policy().
  [[nodiscard]] Database& database() noexcept { return *db_; }
  /// The retry policy of this object.
  [[nodiscard]] const RetryPolicy& policy() const noexcept { return *policy_; }
  /// The Shield reads go through, or nullptr.
  [[nodiscard]] Shield* shield() const noexcept { return shield_; }
  /// The Shield writes go through (the same as shield() unless two were given), or nullptr.
  [[nodiscard]] Shield* write_shield() const noexcept { return write_shield_; }

 private:
  // Every operation this class retries passes through here, once per operation (reads,
  // autocommit writes, BEGIN, whole transactions, COMMIT, preparing SQL text). Outside any
  // RequestScope it opens one with the policy's window (the busy handler and the connection
  // waits read it); then it runs `attempt` through `shield` (shield_ for reads,
  // write_shield_ for writes), or through holdfast::retry() without one.
  template <class F>
  auto run(Shield* shield, Operation op, F&& attempt) -> std::invoke_result_t<F&> {
    return holdfast::detail::run_through(
        attempt, [&](holdfast::detail::AttemptRef a) { return run_attempts(shield, op, a); });
  }
  // run() for an attempt seen through `attempt` (resilient.cpp).
  Status run_attempts(Shield* shield, Operation op, holdfast::detail::AttemptRef attempt);
  // The COMMIT of a transaction, retried alone by holdfast::retry() (resilient.cpp).
  Status retry_commit(Transaction& tx);

  Result<Query> resolve(QueryRef q);
  template <class Body>
  auto run_query(const Query& query, Body& body) -> std::invoke_result_t<Body&, Statement&>;

  ResilientDatabase(std::shared_ptr<Database> db, std::shared_ptr<const RetryPolicy> policy,
                    Shield* reads, Shield* writes, bool one_attempt = false);

  std::shared_ptr<Database> db_;               // never null
  std::shared_ptr<const RetryPolicy> policy_;  // never null; shared by copies
  Shield* shield_ = nullptr;                   // reads
  Shield* write_shield_ = nullptr;             // writes
  bool one_attempt_ = false;                   // one_attempt(): run() calls the attempt, once
};

template <class Body>
auto ResilientDatabase::with_statement(QueryRef q, Body&& body)
    -> std::invoke_result_t<Body&, Statement&> {
  if (const Query* query = q.query(); query != nullptr) [[likely]]
    return run_query(*query, body);
  using R = std::invoke_result_t<Body&, Statement&>;
  Result<Query> resolved = resolve(q);
  if (!resolved.ok()) return R(resolved.status());
  return run_query(*resolved, body);
}

template <class Body>
auto ResilientDatabase::run_query(const Query& query, Body& body)
    -> std::invoke_result_t<Body&, Statement&> {
  using R = std::invoke_result_t<Body&, Statement&>;
  const bool read = query.access() == Access::kRead;
  const Operation op = read ? Operation::read(query.sql()) : Operation::write(query.sql());
  return run(read ? shield_ : write_shield_, op,
             [&]() -> R { return db_->with_statement(query, body); });
}

template <class Fn>
auto ResilientDatabase::transaction(Fn&& fn, Operation op, TxnMode mode)
    -> std::invoke_result_t<Fn&, Transaction&> {
  using R = std::invoke_result_t<Fn&, Transaction&>;
  static_assert(std::is_same_v<R, Status> || is_result<R>::value,
                "the transaction function must return holdfast::Status or Result<T>");
  return run(write_shield_, op, [&]() -> R {
    // Waiting for the writer and BEGIN: nothing has run yet, so a retry is always safe.
    Result<Transaction> tx = db_->begin(mode);
    if (!tx.ok()) return R(tx.status());
    R r = fn(*tx);
    if (!is_ok(r)) return R(tx->abandon(Status(status_of(r))));
    // COMMIT that met SQLITE_BUSY left the transaction open: retry the COMMIT alone, within
    // the attempt the Shield admitted (a second admission could wait on the place this one
    // holds).
    Status committed = one_attempt_ ? tx->commit() : retry_commit(*tx);
    if (!committed.ok()) return R(tx->abandon(std::move(committed)));
    return r;
  });
}

template <class Fn>
Result<KeyedResult> ResilientDatabase::once(std::string_view key, Fn&& fn, TxnMode mode) {
  return transaction(
      [&](Transaction& tx) {
        return detail::run_once(tx, db_->options().idempotency_table, key, fn);
      },
      Operation{Idempotency::kIdempotent, true, Priority::kNormal, "sqlite.once"}, mode);
}

}  // namespace holdfast::sqlite
