// Database's read and write paths: one call's pipeline on one server (read_once(),
// write_once()) and the entry points that classify the SQL and run it through the Shield
// (read(), write(), query()). Routing a read among the replicas is replica_state.cpp's.
//
// Every call is one pipeline, one round trip, that leaves nothing behind on its connection:
//   read:  [prefix: READ ONLY + statement_timeout (+ replay position)] [the statement] Sync
//   write: BEGIN [prefix: statement_timeout] [the statement] COMMIT [WAL position] Sync
// A read's steps run in the implicit transaction the extended protocol gives them up to the
// Sync, so the prefix's set_config(..., true) -- SET LOCAL -- governs the statement and is
// gone after it; a failed read needs no ROLLBACK. A write is an explicit transaction so that
// its commit's WAL position can be read after its COMMIT in the same round trip. See
// docs/adr/0013-postgres-read-your-writes-and-transaction-pooling.md.
#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <utility>

#include "database_impl.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/pg.hpp"
#include "pg_internal.hpp"

namespace holdfast::pg {
namespace {

using detail::ConnectionAccess;
using detail::nothing_applied;
using detail::refused;
using detail::Step;
using detail::Steps;

}  // namespace

// ---------------------------------------------------------------------------------------
// Reads

Result<Rows> Database::Impl::read_once(Endpoint& endpoint, const Work& work, bool may_wait,
                                       ReplicaView* view, Duration replica_connect,
                                       Duration* exchange) {
  // A replica's new connection gets replica_connect: the primary can answer instead.
  Result<PooledConnection> lease =
      this->lease(*endpoint.reads, may_wait, view != nullptr ? replica_connect : Duration::max());
  if (!lease.ok()) return lease.status();
  Connection& conn = **lease;
  detail::CallPipeline p;
  const std::size_t head = add_prefix(p, conn, view != nullptr ? replica_prefix_ : read_prefix_);
  const std::size_t main = add_work(p, conn, work);
  std::array<Rows, Steps::kMax> out;
  std::size_t failed = p.steps.size;
  const TimePoint sent = exchange != nullptr ? clock_->now() : TimePoint{};
  Status s = ConnectionAccess::pipeline(conn, p.steps.span(), out, &failed);
  if (exchange != nullptr) *exchange = clock_->now() - sent;
  p.marks.apply(conn, failed);
  return finish_read(endpoint, *lease, std::move(s), out, head, main, failed, view);
}

Result<Rows> Database::Impl::finish_read(Endpoint& endpoint, PooledConnection& lease, Status s,
                                         std::span<Rows> out, std::size_t head, std::size_t main,
                                         std::size_t failed, ReplicaView* view) {
  Connection& conn = *lease;
  if (!s.ok()) {
    if (detail::pooler_refused(lease, s)) return nothing_applied(std::move(s));
    if (!conn.is_open()) lease.discard();
    return failed < main ? nothing_applied(std::move(s)) : s;
  }
  if (view != nullptr) {
    view->replayed = detail::wal_position(out[head], 2);
    view->received = detail::wal_position(out[head], 3);
    view->read_committed = out[head].text(0, 4) == "t";
    view->in_recovery = out[head].text(0, 5) == "t";
    if (!view->in_recovery) [[unlikely]] {
      // The server is not in recovery: a standby that was promoted (libpq checks
      // target_session_attrs only at connect, so its sessions stayed). No session to it
      // serves this pool again; the next connect goes through the replica URL's hosts.
      endpoint.reads->drop_idle_to(conn);
      lease.discard();
    }
  }
  return std::move(out[main]);
}

Result<Rows> Database::Impl::read_work(const Work& work, const ReadOptions& options) {
  const RetryPolicy& policy =
      options.policy != nullptr ? *options.policy : primary_->shield->reads();
  std::optional<RequestScope> own;
  if (RequestScope::current_window() == nullptr) {
    own.emplace(policy.window(), primary_->shield->clock());
  }
  Operation op = options.operation;
  op.idempotency = Idempotency::kIdempotent;
  RetryStats stats;
  Result<Rows> r = read_routed(work, policy, op, stats);
  if (!r.ok() && r.status().sqlstate() == "25006") {
    // The READ ONLY transaction refused a write the SQL text hid (SELECT f() where f
    // writes): nothing was applied, so it goes once more, as a write.
    primary_->shield->metrics().count_retry();
    RetryStats written;
    r = write_work(work, Operation::write(op.label).with_priority(op.priority), &written);
    stats.attempts += written.attempts;
    stats.slept += written.slept;
    stats.stop = written.stop;
  }
  if (options.stats != nullptr) *options.stats = stats;
  return r;
}

Result<Rows> Database::Impl::read(std::string_view sql, std::span<const Param> params,
                                  const ReadOptions& options) {
  const SqlClass c = classify_sql(sql, standard_strings_.load(std::memory_order_relaxed));
  if (c.kind == SqlKind::kInvalid) return refused("refused: ", c);
  if (c.kind != SqlKind::kRead) {
    return refused("refused on the read path (use write() or transaction()): not a read: ", c);
  }
  return read_work(Work{sql, nullptr, params}, options);
}

Result<Rows> Database::Impl::read(const Statement& stmt, std::span<const Param> params,
                                  const ReadOptions& options) {
  if (stmt.name_.empty()) {
    return Status(Code::kInvalidArgument, "the Statement was not made by Database::prepare()");
  }
  if (stmt.kind_ != SqlKind::kRead) {
    return Status(Code::kInvalidArgument,
                  "refused on the read path (use write() or transaction()): not a read: " +
                      std::string(stmt.reason_));
  }
  return read_work(Work{stmt.sql_, &stmt, params}, options);
}

// ---------------------------------------------------------------------------------------
// Writes

Result<Rows> Database::Impl::write_once(const Work& work) {
  Result<PooledConnection> lease = this->lease(*primary_->writes, true);
  if (!lease.ok()) return lease.status();
  Connection& conn = **lease;
  detail::CallPipeline p;
  p.steps.add(Step{Step::Kind::kQuery, "BEGIN", {}, {}});
  add_prefix(p, conn, write_prefix_);
  const std::size_t main = add_work(p, conn, work);
  p.steps.add(Step{Step::Kind::kQuery, "COMMIT", {}, {}});
  const std::size_t position =
      p.steps.add(Step{Step::Kind::kQuery, detail::kWalPositionSql, {}, {}});
  std::array<Rows, Steps::kMax> out;
  std::size_t failed = p.steps.size;
  const std::uint64_t heard = conn.notices_received();
  Status s = ConnectionAccess::pipeline(conn, p.steps.span(), out, &failed);
  p.marks.apply(conn, failed);
  if (s.ok() || failed == position) {
    // Committed, on the primary alone when the wait for a synchronous standby was cancelled.
    if (conn.standby_wait_cancelled(heard)) [[unlikely]]
      return detail::unconfirmed_write();
    // Confirmed (a failure after the COMMIT leaves the position unknown).
    wrote(s.ok() ? detail::wal_position(out[position], 0) : 0,
          s.ok() ? detail::wal_timeline(out[position], 1) : 0, ConnectionAccess::host_id(conn),
          &conn, {});
    return std::move(out[main]);
  }
  if (detail::pooler_refused(*lease, s)) return nothing_applied(std::move(s));
  if (s.sqlstate() == "25006" && several_hosts_) {
    return detail::left_demoted_primary(*lease, *primary_->writes, std::move(s),
                                        RetryScope::kReconnect);
  }
  const TxnStatus open = conn.txn_status();
  if (open == TxnStatus::kInTransaction || open == TxnStatus::kInError) {
    if (!ConnectionAccess::query_unchecked(conn, "ROLLBACK", {}).ok()) lease->discard();
  }
  if (!conn.is_open()) lease->discard();
  return failed < main ? nothing_applied(std::move(s)) : s;
}

Result<Rows> Database::Impl::write_work(const Work& work, Operation op, RetryStats* stats) {
  // The statement is its own whole transaction: one that the server rolled back (40001,
  // 40P01) may be re-run like a re-runnable transaction.
  op.reruns_transaction = true;
  return run(
      *primary_, primary_->shield->policy_for(op), op,
      [&]() -> Result<Rows> { return write_once(work); }, stats);
}

Result<Rows> Database::Impl::write_classified(const SqlClass& c, const Work& work, Operation op) {
  if (c.kind == SqlKind::kInvalid) return refused("refused: ", c);
  if (c.changes_session) {
    return refused(
        "refused: it would leave state on a pooled connection (use transaction(), "
        "DatabaseOptions::settings or prepare()): ",
        c);
  }
  return write_work(work, op);
}

Result<Rows> Database::Impl::write(std::string_view sql, std::span<const Param> params,
                                   Operation op) {
  const SqlClass c = classify_sql(sql, standard_strings_.load(std::memory_order_relaxed));
  return write_classified(c, Work{sql, nullptr, params}, op);
}

Result<Rows> Database::Impl::write(const Statement& stmt, std::span<const Param> params,
                                   Operation op) {
  if (stmt.name_.empty()) {
    return Status(Code::kInvalidArgument, "the Statement was not made by Database::prepare()");
  }
  const SqlClass c{stmt.kind_, stmt.reason_, {}, stmt.changes_session_};
  return write_classified(c, Work{stmt.sql_, &stmt, params}, op);
}

Result<Rows> Database::Impl::query(std::string_view sql, std::span<const Param> params) {
  const SqlClass c = classify_sql(sql, standard_strings_.load(std::memory_order_relaxed));
  if (c.kind == SqlKind::kRead) return read_work(Work{sql, nullptr, params}, ReadOptions{});
  return write_classified(c, Work{sql, nullptr, params}, Operation::write("pg.write"));
}

}  // namespace holdfast::pg
