// Slow copies (DESIGN.md §12, ADR 0041): a replica read hedged to the primary
// (replica_read()), and what each replica answer says of the replica's speed
// (judge_replica(): outlier ejection, slow_copy.hpp). No second thread: both reads are sent
// with libpq's non-blocking calls and one poll() watches both sockets; the first answer is
// the read's, the other is cancelled (off this thread, as every cancel of the driver) and
// its connection closed.
#include <algorithm>
#include <array>
#include <optional>
#include <utility>

#include "database_impl.hpp"
#include "holdfast/detail/slow_copy.hpp"
#include "holdfast/pg.hpp"
#include "pg_internal.hpp"

namespace holdfast::pg {
namespace {

using detail::ConnectionAccess;
using detail::Steps;

// A hedge takes an idle primary connection only while at least this many more stay idle:
// it never connects (that would hold the replica's answer up), and a primary that is frozen
// but not yet found silent, whose connections the lost hedges close, keeps one for the reads
// that need it, whose wait lets its silence be found (ADR 0023).
constexpr std::size_t kHedgeLeavesIdle = 1;

}  // namespace

bool Database::Impl::replica_slow(std::size_t i) const {
  return replicas_.at(i)->copy->slow.ejected();
}

void Database::Impl::judge_replica(Endpoint& replica, bool lost_hedge, Duration latency,
                                   TimePoint now) noexcept {
  (void)detail::judge_replica(*replica.copy, primary_->copy->latency.recent(), lost_hedge, latency,
                              now);
}

// A replica read (`conn`, on `replica_lease`) not answered within its normal latency: `work`
// goes to the primary too, if its Shield admits an attempt now, a connection of its is idle
// and not the last one, and the budget allows (a probe needs none). The primary's rows when
// it answered first (the replica's try abandoned); none when the replica's answer is awaited.
std::optional<Rows> Database::Impl::hedge_to_primary(Connection& conn,
                                                     PooledConnection& replica_lease,
                                                     const Work& work, bool probe, Hedge& hedge) {
  Shield& ps = *primary_->shield;
  Shield::Call pcall(ps, ps.reads(), Operation::read("pg.read.hedge"));
  const bool paid = probe || (hedges_->enabled() && hedges_->spend());
  Shield::Admission pa = paid ? pcall.admit(clock_->now()) : Shield::Admission{};
  if (paid && pa.kind != Shield::Admission::Kind::kAttempt && !probe) hedges_->refund();
  if (pa.kind == Shield::Admission::Kind::kAttempt) {
    Result<PooledConnection> plase = primary_->reads->try_idle(kHedgeLeavesIdle);
    if (!plase.ok()) {
      pa.permit.cancel();
      if (!probe) hedges_->refund();
    } else {
      hedged_.fetch_add(1, std::memory_order_relaxed);
      hedge.sent = true;
      Connection& pconn = **plase;
      detail::CallPipeline q;
      add_prefix(q, pconn, read_prefix_);
      const std::size_t pmain = add_work(q, pconn, work);
      std::array<Rows, Steps::kMax> pout;
      std::size_t pfailed = q.steps.size;
      bool psent = false;
      const TimePoint t0 = clock_->now();
      Status pst = ConnectionAccess::pipeline_send(pconn, q.steps.span(), psent);
      const RetryWindow* w = RequestScope::current_window();
      const TimePoint until =
          t0 + (w != nullptr ? w->remaining(t0) : primary_->shield->reads().window());
      const int first = pst.ok() ? ConnectionAccess::first_answer(conn, &pconn, until) : 0;
      if (first == 1) {
        pst = ConnectionAccess::pipeline_collect(pconn, q.steps.span(), psent, pout, &pfailed);
        q.marks.apply(pconn, pfailed);
        const TimePoint end = clock_->now();
        if (pst.ok()) {
          // The primary answered first: its answer is the read's; the replica's read is
          // cancelled and its connection, mid-statement, closed.
          hedge.primary_won = true;
          hedges_won_.fetch_add(1, std::memory_order_relaxed);
          ConnectionAccess::abandon(conn);
          replica_lease.discard();
          primary_->copy->latency.record(end - t0);
          pcall.succeeded(std::move(pa.permit),
                          ps.breaker().measures_latency() ? end - t0 : Duration::zero());
          return std::move(pout[pmain]);
        }
        // The primary's answer is a failure: recorded for its Shield; the replica's is
        // awaited.
        if (!detail::pooler_refused(*plase, pst) && !pconn.is_open()) plase->discard();
        (void)pcall.failed(std::move(pa.permit), pst, end, end - t0);
      } else {
        // The replica answered first (or neither before the window's end): the primary's
        // try is given up.
        ConnectionAccess::abandon(pconn);
        plase->discard();
        pa.permit.cancel();
      }
    }
  }
  return std::nullopt;
}

Result<Rows> Database::Impl::replica_read(Endpoint& replica, const Work& work, ReplicaView& view,
                                          bool probe, TimePoint start, Hedge& hedge) {
  hedge = Hedge{};
  // A copy that just answered slowly, or a probe, gets no longer than the slow threshold for
  // a new connection: a connect through a slow path would hold the read for
  // kReplicaConnectTimeout, and the primary can answer it now.
  const Duration threshold =
      detail::slow_threshold(primary_->copy->latency.recent(), replica.copy->slow.rule());
  const bool suspect = probe || replica.copy->slow.suspect();
  const Duration connect_cap = suspect ? threshold : detail::kReplicaConnectTimeout;
  // A probe, or a read of a replica whose last answer was slow, waits for it no longer than
  // an answer counts as fast: then it is hedged, or, when no hedge can go, given up (the
  // primary answers it).
  const TimePoint give_up_at = suspect ? start + threshold : TimePoint::max();
  Duration delay = threshold;
  if (!probe) {
    hedges_->earn();
    const Duration p95 = replica.copy->latency.p95();
    const bool hedges = hedges_->enabled() && p95 > Duration::zero();
    if (!hedges && !suspect)
      return read_once(replica, work, /*may_wait=*/false, &view, connect_cap);
    if (hedges) delay = std::min(std::max(options_.hedge_min_delay, p95), threshold);
  }
  Result<PooledConnection> lease = this->lease(*replica.reads, false, connect_cap);
  if (!lease.ok()) return lease.status();
  Connection& conn = **lease;
  detail::CallPipeline p;
  const std::size_t head = add_prefix(p, conn, replica_prefix_);
  const std::size_t main = add_work(p, conn, work);
  std::array<Rows, Steps::kMax> out;
  std::size_t failed = p.steps.size;
  bool sent = false;
  Status s = ConnectionAccess::pipeline_send(conn, p.steps.span(), sent);
  if (s.ok() && ConnectionAccess::first_answer(conn, nullptr, start + delay) < 0) {
    // Not answered within its normal latency: the primary is asked too (hedge_to_primary()).
    if (std::optional<Rows> won = hedge_to_primary(conn, *lease, work, probe, hedge)) {
      return std::move(*won);
    }
  }
  if (s.ok() && !hedge.sent && give_up_at != TimePoint::max() &&
      ConnectionAccess::first_answer(conn, nullptr, give_up_at) < 0) {
    // Slow again, and no hedge could go: the replica's try is given up, the primary answers.
    hedge.gave_up = true;
    ConnectionAccess::abandon(conn);
    lease->discard();
    return Status(Code::kUnavailable, replica.name + " answers far slower than the primary (" +
                                          ms_text(threshold) + "): the primary answers");
  }
  if (s.ok()) s = ConnectionAccess::pipeline_collect(conn, p.steps.span(), sent, out, &failed);
  p.marks.apply(conn, failed);
  return finish_read(replica, *lease, std::move(s), out, head, main, failed, &view);
}

}  // namespace holdfast::pg
