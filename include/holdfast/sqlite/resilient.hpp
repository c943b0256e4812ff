/// @file
/// holdfast::sqlite::ResilientDatabase: Database's API, retried where each error's Fault
/// says it is safe (docs/library.md) within the request's window, optionally behind
/// Shields. Thread safety: as Database; copies share the Database and the Shields.
///
/// @code
///   auto db = holdfast::sqlite::ResilientDatabase::open({.path = "club.db"});
///   holdfast::RequestScope request;                      // one 6 s window per page render
///   auto games = db->query<std::int64_t, std::string>(schedule, day);   // retried reads
/// @endcode
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
  /// RetryPolicy::standard(), the policy of every form that is given none.
  [[nodiscard]] static const RetryPolicy& standard_policy() noexcept;
  /// Opens as Database::open() (not retried: it happens once, at start-up).
  static Result<ResilientDatabase> open(Options options,
                                        const RetryPolicy& policy = standard_policy());
  /// Takes over an open Database.
  explicit ResilientDatabase(Database db, const RetryPolicy& policy = standard_policy());
  /// With a Shield: every operation also goes through its breaker, limit and throttle, so
  /// while the database stays locked requests get "breaker open, retry after N" instead of
  /// waiting out their windows. REQUIRES: `shield` outlives this object.
  static Result<ResilientDatabase> open(Options options, Shield& shield,
                                        const RetryPolicy& policy = standard_policy());
  /// The same, taking over an open Database.
  ResilientDatabase(Database db, Shield& shield, const RetryPolicy& policy = standard_policy());
  /// With one Shield for what SQLite proves read-only (and preparing SQL) and one for writes
  /// (ADR 0006): a batch job holding the write lock opens the writes' breaker only, and WAL
  /// reads go on. REQUIRES: both outlive this object.
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
  /// connections, for a caller whose own loop retries (holdfast::asio::async_run): errors
  /// are classified as usual and carry no StopReason (ADR 0001). Nothing is retried, not
  /// even a busy COMMIT (the transaction is rolled back and the attempt fails busy).
  [[nodiscard]] ResilientDatabase one_attempt() const;

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
  friend class QueryApi<ResilientDatabase>;
  // Every operation this class retries passes through run(), once per operation (reads,
  // autocommit writes, BEGIN, whole transactions, COMMIT, preparing SQL text); resilient.cpp.
  template <class F>
  auto run(Shield* shield, Operation op, F&& attempt) -> std::invoke_result_t<F&>;
  Status run_attempts(Shield* shield, Operation op, holdfast::detail::AttemptRef attempt);
  Status run_statement(QueryRef q, detail::StatementBody body);
  Status run_statement(const Query& query, detail::StatementBody body);
  Status run_transaction(detail::TransactionBody fn, Operation op, TxnMode mode);
  Status retry_commit(Transaction& tx);  // the COMMIT alone, by holdfast::retry()
  Result<Query> resolve(QueryRef q);

  ResilientDatabase(std::shared_ptr<Database> db, std::shared_ptr<const RetryPolicy> policy,
                    Shield* reads, Shield* writes, bool one_attempt = false);

  std::shared_ptr<Database> db_;               // never null
  std::shared_ptr<const RetryPolicy> policy_;  // never null; shared by copies
  Shield* shield_ = nullptr;                   // reads
  Shield* write_shield_ = nullptr;             // writes
  bool one_attempt_ = false;                   // one_attempt(): run() calls the attempt, once
};

template <class Fn>
auto ResilientDatabase::transaction(Fn&& fn, Operation op, TxnMode mode)
    -> std::invoke_result_t<Fn&, Transaction&> {
  return holdfast::detail::run_through<Transaction&>(
      fn, [&](detail::TransactionBody b) { return run_transaction(b, op, mode); });
}

template <class Fn>
Result<KeyedResult> ResilientDatabase::once(std::string_view key, Fn&& fn, TxnMode mode) {
  auto body = detail::once_body(fn);
  return transaction(
      [&](Transaction& tx) {
        return detail::run_once(tx, db_->options().idempotency_table, key,
                                holdfast::detail::StatusRef<Transaction&, std::string&>(body));
      },
      Operation{Idempotency::kIdempotent, true, Priority::kNormal, "sqlite.once"}, mode);
}

}  // namespace holdfast::sqlite
