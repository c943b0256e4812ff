// Transactions: Transaction, and Database's begin / commit / resolve of a COMMIT in doubt,
// and the idempotency keys of once().
#include <algorithm>
#include <array>
#include <new>
#include <string>
#include <utility>

#include "database_impl.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/pg.hpp"
#include "pg_internal.hpp"
#include "server_watch.hpp"

namespace holdfast::pg {
namespace {

using detail::ConnectionAccess;
using detail::in_transaction;
using detail::nothing_applied;
using detail::Step;
using detail::Steps;

// Resolving a COMMIT in doubt may take this long even when the window is nearly spent:
// knowing the outcome matters more than the window.
constexpr Duration kMinResolveTime = std::chrono::seconds(2);
constexpr Duration kResolvePauseFirst = std::chrono::milliseconds(10);
constexpr Duration kResolvePauseMax = std::chrono::milliseconds(200);

// Runs a Statement on `conn`, preparing it there the first time.
Result<Rows> run_prepared(Connection& conn, const std::string& name, const std::string& sql,
                          std::uint32_t id, std::span<const Param> params) {
  if (!ConnectionAccess::is_prepared(conn, id)) {
    if (Status s = conn.prepare(name, sql, params); !s.ok()) return nothing_applied(s);
    ConnectionAccess::mark_prepared(conn, id);
  }
  return conn.query_prepared(name, params);
}

// Ends a transaction that is still open on `conn` (ROLLBACK), or closes `conn`.
void roll_back(PooledConnection& conn) {
  const TxnStatus st = conn->txn_status();
  if (st == TxnStatus::kInTransaction || st == TxnStatus::kInError) {
    if (ConnectionAccess::query_unchecked(*conn, "ROLLBACK", {}).ok()) return;
  }
  if (conn->txn_status() != TxnStatus::kIdle) conn.discard();
}

}  // namespace

std::string_view begin_statement(Isolation isolation, bool read_only) noexcept {
  static constexpr std::array<std::string_view, 8> kBegin = {
      "BEGIN",
      "BEGIN READ ONLY",
      "BEGIN ISOLATION LEVEL READ COMMITTED",
      "BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY",
      "BEGIN ISOLATION LEVEL REPEATABLE READ",
      "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
      "BEGIN ISOLATION LEVEL SERIALIZABLE",
      "BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY",
  };
  return kBegin[static_cast<std::size_t>(isolation) * 2 + (read_only ? 1 : 0)];
}

// ---------------------------------------------------------------------------------------
// Transaction

Transaction::Transaction(PooledConnection&& conn, int run, bool named_statements) noexcept
    : run_(run), named_statements_(named_statements) {
  static_assert(
      sizeof(PooledConnection) <= sizeof(lease_) && alignof(PooledConnection) <= alignof(void*),
      "Transaction::lease_ must hold a PooledConnection");
  new (lease_) PooledConnection(std::move(conn));
}

Transaction::Transaction(Transaction&& other) noexcept
    : xid_(std::move(other.xid_)),
      key_(other.key_),
      failure_(std::move(other.failure_)),
      run_(other.run_),
      named_statements_(other.named_statements_) {
  new (lease_) PooledConnection(std::move(other.lease()));
}

Transaction& Transaction::operator=(Transaction&& other) noexcept {
  lease() = std::move(other.lease());
  xid_ = std::move(other.xid_);
  key_ = other.key_;
  failure_ = std::move(other.failure_);
  run_ = other.run_;
  named_statements_ = other.named_statements_;
  return *this;
}

Transaction::~Transaction() {
  PooledConnection& conn = lease();
  if (conn->txn_status() != TxnStatus::kIdle) conn.discard();
  conn.~PooledConnection();
}

PooledConnection& Transaction::lease() noexcept {
  return *std::launder(reinterpret_cast<PooledConnection*>(lease_));
}

Connection& Transaction::connection() noexcept {
  return *lease();
}

Result<Rows> Transaction::record(Result<Rows> r) {
  if (!r.ok()) {
    Status s = in_transaction(r.status());
    if (failure_.ok()) failure_ = s;
    return s;
  }
  return r;
}

Result<Rows> Transaction::query(std::string_view sql, Params params) {
  if (!failure_.ok()) return failure_;
  const bool scs = lease()->standard_conforming_strings();
  if (const SqlClass c = classify_sql(sql, scs); c.kind == SqlKind::kInvalid) {
    return detail::refused("refused: ", c);
  }
  if (detail::ends_transaction(sql, scs)) {
    Status s(Code::kInvalidArgument,
             "refused inside transaction(): the Database begins, commits and rolls back the "
             "transaction itself (return OK to commit, an error to roll back)");
    s.with_sqlstate("");
    return s;
  }
  return record(ConnectionAccess::query_unchecked(*lease(), sql, params));
}

Result<Rows> Transaction::query(const Statement& stmt, Params params) {
  if (!failure_.ok()) return failure_;
  if (stmt.name_.empty()) {
    return Status(Code::kInvalidArgument, "the Statement was not made by Database::prepare()");
  }
  if (detail::ends_transaction(stmt.sql_, lease()->standard_conforming_strings())) {
    return Status(Code::kInvalidArgument,
                  "refused inside transaction(): the Statement ends the transaction");
  }
  if (!named_statements_)
    return record(ConnectionAccess::query_unchecked(*lease(), stmt.sql_, params));
  return record(run_prepared(*lease(), stmt.name_, stmt.sql_, stmt.id_, params));
}

// ---------------------------------------------------------------------------------------
// Begin and finish

Result<Transaction> Database::Impl::begin(const TransactionOptions& options, int run) {
  Pool& pool = options.read_only ? *primary_->reads : *primary_->writes;
  Result<PooledConnection> lease = this->lease(pool, true);
  if (!lease.ok()) return lease.status();
  Connection& conn = **lease;
  // BEGIN, then statement_timeout (SET LOCAL) and the transaction id: one round trip.
  detail::CallPipeline p;
  p.steps.add(
      Step{Step::Kind::kQuery, begin_statement(options.isolation, options.read_only), {}, {}});
  const std::size_t head = add_prefix(p, conn, options.read_only ? write_prefix_ : begin_prefix_);
  std::array<Rows, 3> out;
  std::size_t failed = p.steps.size;
  Status s = ConnectionAccess::pipeline(conn, p.steps.span(), out, &failed);
  p.marks.apply(conn, failed);
  if (!s.ok()) {
    if (detail::pooler_refused(*lease, s)) return nothing_applied(std::move(s));
    roll_back(*lease);  // the transaction may be open and failed
    if (!conn.is_open()) lease->discard();
    return nothing_applied(failed == 0 ? std::move(s) : in_transaction(std::move(s)));
  }
  Transaction tx(std::move(*lease), run, options_.pooling == Pooling::kSession);
  // Recorded now, so a COMMIT whose connection is lost can be resolved later.
  if (!options.read_only) tx.xid_ = std::string(out[head].text(0, 1));
  return tx;
}

Status Database::Impl::finish(Transaction& tx, const Status& fn_status, TransactionReport& report) {
  if (several_hosts_ && (fn_status.sqlstate() == "25006" || tx.failure_.sqlstate() == "25006"))
      [[unlikely]] {
    // A re-runnable transaction runs again on the writer; any other is answered with the
    // refusal (its function may have done more than SQL).
    Status s = detail::left_demoted_primary(
        tx.lease(), *primary_->writes, fn_status.sqlstate() == "25006" ? fn_status : tx.failure_,
        RetryScope::kTransaction);
    s.with_txn_state(TxnState::kRolledBack);
    return s;
  }
  if (!fn_status.ok()) {
    roll_back(tx.lease());
    return in_transaction(fn_status);
  }
  if (!tx.failure_.ok()) {
    roll_back(tx.lease());
    Status s = tx.failure_;
    s.annotate("the transaction function returned OK after a failed statement");
    return s;
  }
  if (tx.connection().txn_status() != TxnStatus::kInTransaction) {
    roll_back(tx.lease());
    Status s(Code::kInternal, "the transaction is no longer open at COMMIT");
    s.with_txn_state(TxnState::kUnknown);
    return s;
  }
  return commit(tx, report);
}

Status Database::Impl::commit(Transaction& tx, TransactionReport& report) {
  Connection& conn = tx.connection();
  // COMMIT and, for a transaction that may have written, the WAL position after it (for
  // the request's reads on replicas): one round trip.
  const bool wrote = !tx.xid_.empty();
  Steps steps;
  steps.add(Step{Step::Kind::kQuery, "COMMIT", {}, {}});
  if (wrote) steps.add(Step{Step::Kind::kQuery, detail::kWalPositionSql, {}, {}});
  std::array<Rows, 2> out;
  std::size_t failed = steps.size;
  const std::uint64_t heard = conn.notices_received();
  Status committed = ConnectionAccess::pipeline(conn, steps.span(), out, &failed);
  if (committed.ok() || (wrote && failed == 1)) {
    if (out[0].command() == "ROLLBACK") {
      Status s(Code::kAborted, "COMMIT rolled the transaction back",
               Fault{RetryScope::kTransaction, Outcome::kNotApplied, Pace::kFast, false});
      s.with_txn_state(TxnState::kRolledBack);
      return s;
    }
    if (conn.standby_wait_cancelled(heard)) [[unlikely]]
      return detail::unconfirmed_write();
    if (wrote) {
      this->wrote(committed.ok() ? detail::wal_position(out[1], 0) : 0,
                  committed.ok() ? detail::wal_timeline(out[1], 1) : 0,
                  ConnectionAccess::host_id(conn), &conn, tx.key_);
    }
    return Status();
  }
  if (conn.is_open()) {
    // The server refused the COMMIT (a serialization failure, a deferred constraint): it
    // rolled the transaction back.
    roll_back(tx.lease());
    return in_transaction(committed);
  }
  // The connection was lost during COMMIT: the transaction may or may not have committed.
  // A backend terminated while its COMMIT waited for a synchronous standby says so first.
  const bool alone = conn.standby_wait_cancelled(heard);
  tx.lease().discard();
  ++report.commits_in_doubt;
  return commit_in_doubt(tx, committed, alone, report);
}

Status Database::Impl::commit_in_doubt(Transaction& tx, const Status& lost, bool alone,
                                       TransactionReport& report) {
  if (tx.xid_.empty()) {
    // A READ ONLY transaction wrote nothing: its outcome does not matter.
    return in_transaction(lost);
  }
  Status why;
  std::uint64_t position = 0;
  std::uint32_t timeline = 0;
  std::uintptr_t host = 0;
  const TxnState state = resolve(tx.xid_, why, position, timeline, host);
  report.resolution = state;
  if (state == TxnState::kCommitted) {
    if (alone) [[unlikely]]
      return detail::unconfirmed_write();  // on the primary alone: never confirmed
    wrote(position, timeline, host, nullptr, tx.key_);
    return Status();
  }
  const std::string head = "COMMIT lost its connection (" + std::string(lost.message()) + "); ";
  if (state == TxnState::kRolledBack) {
    Status s(
        Code::kAborted,
        head + "pg_xact_status() says transaction " + tx.xid_ + " was aborted: nothing was applied",
        Fault{RetryScope::kTransaction, Outcome::kNotApplied, Pace::kSlow, lost.fault().overload});
    s.with_sqlstate(lost.sqlstate());
    s.with_txn_state(TxnState::kRolledBack);
    return s;
  }
  Status s(Code::kUnavailable,
           head + "the outcome of transaction " + tx.xid_ +
               " could not be resolved: " + std::string(why.message()),
           Fault{RetryScope::kReconnect, Outcome::kUnknown, Pace::kSlow, lost.fault().overload});
  s.with_sqlstate(lost.sqlstate());
  s.with_txn_state(TxnState::kUnknown);
  return s;
}

TxnState Database::Impl::resolve(std::string_view xid, Status& why, std::uint64_t& lsn,
                                 std::uint32_t& timeline, std::uintptr_t& host) {
  const RetryWindow* w = RequestScope::current_window();
  const Duration left = std::max(
      w != nullptr ? w->remaining() : primary_->shield->writes().window(), kMinResolveTime);
  const TimePoint deadline = clock_->now() + left;
  const Param params[] = {Param(xid)};
  // Its outcome, then the WAL position and timeline as after a COMMIT (columns 1 and 2).
  static const std::string resolve_sql =
      "SELECT pg_catalog.pg_xact_status($1::pg_catalog.xid8), w.* FROM (" +
      std::string(detail::kWalPositionSql) + ") w";
  Duration pause = kResolvePauseFirst;
  for (;;) {
    Result<PooledConnection> lease = primary_->writes->acquire(deadline);
    if (lease.ok()) {
      (*lease)->set_deadline(deadline);
      Result<Rows> r = ConnectionAccess::query_unchecked(**lease, resolve_sql, params);
      if (r.ok()) {
        if (r->is_null(0, 0)) {
          why = Status(Code::kUnknown,
                       "pg_xact_status() no longer knows transaction " + std::string(xid));
          return TxnState::kUnknown;
        }
        const std::string_view answer = r->text(0, 0);
        lsn = detail::wal_position(*r, 1);
        timeline = detail::wal_timeline(*r, 2);
        host = ConnectionAccess::host_id(**lease);
        if (answer == "committed") return TxnState::kCommitted;
        if (answer == "aborted") return TxnState::kRolledBack;
        why = Status(Code::kUnavailable,
                     "transaction " + std::string(xid) + " was still " + std::string(answer));
      } else {
        why = r.status();
        if (!(*lease)->is_open()) lease->discard();
      }
    } else {
      why = lease.status();
    }
    // A server found silent will not answer in the time left either: the outcome stays
    // unknown now rather than after kMinResolveTime past the window (the drill's blackhole
    // showed an 8 s answer).
    if (primary_->watch != nullptr && primary_->watch->silent()) return TxnState::kUnknown;
    if (clock_->now() + pause >= deadline) return TxnState::kUnknown;
    clock_->sleep_for(pause);
    pause = std::min(pause * 2, kResolvePauseMax);
  }
}

// ---------------------------------------------------------------------------------------
// Idempotency keys

Status Database::Impl::create_idempotency_table() {
  const std::string sql = "CREATE TABLE IF NOT EXISTS " + options_.idempotency_table +
                          " (key text PRIMARY KEY, result text, "
                          "created_at timestamptz NOT NULL DEFAULT now())";
  Result<Rows> r = write(sql, {}, Operation::idempotent_write("pg.idempotency_table"));
  if (r.ok()) return Status();
  // Two processes creating it at once: one wins, the other sees it exist.
  if (r.status().sqlstate() == "23505" || r.status().sqlstate() == "42P07") return Status();
  return r.status();
}

// ---------------------------------------------------------------------------------------
// transaction() and once(), behind their templates

Status Database::run_transaction(detail::TransactionFn fn, const TransactionOptions& options) {
  TransactionReport local;
  TransactionReport& report = options.report != nullptr ? *options.report : local;
  report = TransactionReport{};
  auto attempt = [&]() -> Status {
    ++report.runs;
    Result<Transaction> tx = impl_->begin(options, report.runs);
    if (!tx.ok()) return tx.status();
    const Status fn_status = fn(*tx);
    // Not OK whenever fn failed: the rollback, as the failure of the transaction.
    return impl_->finish(*tx, fn_status, report);
  };
  return impl_->run_primary(options.operation, holdfast::detail::AttemptRef(attempt),
                            &report.retry);
}

Result<KeyedResult> Database::run_once(std::string_view key, detail::TransactionFn fn,
                                       std::string& result, TransactionOptions options) {
  // Repeating is harmless whatever happened: the key makes the write apply at most once.
  options.operation.idempotency = Idempotency::kIdempotent;
  options.operation.reruns_transaction = true;
  return transaction(
      [&](Transaction& tx) -> Result<KeyedResult> {
        tx.key_ = key;
        Result<bool> claimed = impl_->claim_key(tx, key);
        if (!claimed.ok()) return claimed.status();
        if (!*claimed) {
          Result<std::string> recorded = impl_->recorded_result(tx, key);
          if (!recorded.ok()) return recorded.status();
          return KeyedResult{std::move(*recorded), true};
        }
        result.clear();  // fn's of this run only (empty when fn returns Status)
        if (Status s = fn(tx); !s.ok()) return s;
        if (Status s = impl_->record_result(tx, key, result); !s.ok()) return s;
        return KeyedResult{std::move(result), false};
      },
      options);
}

Result<bool> Database::Impl::claim_key(Transaction& tx, std::string_view key) {
  const Param params[] = {Param(key)};
  Result<Rows> r = tx.query(claim_sql_, params);
  if (!r.ok()) return r.status();
  return r->affected() == 1;
}

Result<std::string> Database::Impl::recorded_result(Transaction& tx, std::string_view key) {
  const Param params[] = {Param(key)};
  Result<Rows> r = tx.query(recorded_sql_, params);
  if (!r.ok()) return r.status();
  if (r->empty()) {
    // The row that conflicted was rolled back after all: run the transaction again.
    return Status(Code::kAborted,
                  "idempotency key '" + std::string(key) + "' conflicted but is not recorded",
                  Fault{RetryScope::kTransaction, Outcome::kNotApplied, Pace::kFast, false});
  }
  return std::string(r->text(0, 0));
}

Status Database::Impl::record_result(Transaction& tx, std::string_view key,
                                     std::string_view result) {
  const Param params[] = {Param(key), Param(result)};
  Result<Rows> r = tx.query(record_sql_, params);
  return r.ok() ? Status() : r.status();
}

}  // namespace holdfast::pg
