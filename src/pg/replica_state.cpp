// Reads routed to replicas: which replica may answer a request's read (try_replica,
// read_routed), how long a replica's replay has trailed the WAL it received (ReplayLag),
// whether it can have replayed a request's writes (CatchUp), when its lag makes it
// unhealthy (replay_lag_status), and whether what a read reported makes its answer the
// read's (replica_verdict: a server not in recovery never does), and whether a request's
// position is of a timeline before a promotion (ADR 0028). One read on one server is
// calls.cpp's read_once().
#include <algorithm>
#include <atomic>
#include <string>
#include <utility>

#include "database_impl.hpp"
#include "holdfast/core/clock.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/detail/read_route.hpp"
#include "holdfast/detail/slow_copy.hpp"
#include "holdfast/pg.hpp"
#include "lost_writes.hpp"
#include "pg_internal.hpp"

namespace holdfast::pg {

Duration detail::ReplayLag::observe(std::uint64_t replayed, std::uint64_t received,
                                    TimePoint now) noexcept {
  // Concurrent reads may interleave here: each sees a consistent enough picture, as the
  // positions only grow and the answer is a lower bound of the lag.
  const std::int64_t now_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  std::uint64_t target = target_.load(std::memory_order_relaxed);
  if (target != 0 && replayed >= target) {
    target_.store(0, std::memory_order_relaxed);  // caught up with what it had then
    target = 0;
  }
  if (target == 0) {
    if (received <= replayed) return Duration::zero();
    target_.store(received, std::memory_order_relaxed);
    since_ns_.store(now_ns, std::memory_order_relaxed);
    return Duration::zero();
  }
  return std::chrono::nanoseconds(now_ns - since_ns_.load(std::memory_order_relaxed));
}

void detail::ReplayLag::forget() noexcept {
  target_.store(0, std::memory_order_relaxed);
}

Status Database::Impl::replay_lag_status(Endpoint& replica, std::uint64_t replayed,
                                         std::uint64_t received, TimePoint now, Duration max_lag) {
  const Duration lag = replica.copy->lag.observe(replayed, received, now);
  if (lag <= max_lag) return Status();
  Status s(Code::kUnavailable,
           replica.name + " has not replayed WAL it received " + ms_text(lag) +
               " ago (max_replica_lag " + ms_text(max_lag) + ")",
           Fault{RetryScope::kStatement, Outcome::kNotApplied, Pace::kSlow, true});
  s.with_sqlstate("");
  return s;
}

namespace {
// What ends the primary's retries when a replica has caught up: nothing is recorded against
// the primary (CANCELLED is neutral to its breaker), and the retries stop.
Status left_to_a_replica() {
  Status caught_up(Code::kCancelled, "a replica has replayed the request's writes");
  caught_up.with_stop(StopReason::kCancelled, 0);
  return caught_up;
}

// The answer of a replica that has not replayed the request's own writes (yet).
Status not_replayed(const std::string& replica) {
  return Status(Code::kUnavailable, replica + " has not replayed the request's writes");
}

}  // namespace

detail::ReplicaVerdict detail::replica_verdict(bool in_recovery, std::uint64_t replayed,
                                               bool read_committed, std::uint64_t need) noexcept {
  if (!in_recovery) return ReplicaVerdict::kNotAReplica;
  if (need != 0 && replayed < need) return ReplicaVerdict::kBehind;
  if (need != 0 && !read_committed) return ReplicaVerdict::kEarlySnapshot;
  return ReplicaVerdict::kServes;
}

Status detail::not_a_replica(const std::string& name) {
  Status s(Code::kUnavailable,
           name +
               " is not in recovery (a promoted standby?): no replica; its sessions to that "
               "host are closed and the next connect looks for a standby again",
           Fault{RetryScope::kReconnect, Outcome::kNotApplied, Pace::kSlow, true});
  s.with_sqlstate("");
  return s;
}

Result<Rows> Database::Impl::try_replica(Endpoint& replica, const Work& work, bool past_hold,
                                         detail::StandbyPass& pass, ReplicaAnswer& answer,
                                         RetryStats& stats) {
  Shield& shield = *replica.shield;
  Clock& clock = shield.clock();
  const TimePoint start = clock.now();
  const std::uint64_t need = detail::request_position().lsn;
  answer = ReplicaAnswer::kBehind;
  if (need != 0 && !past_hold && replica.catch_up.skip(need, start)) {
    // Found behind the request's writes moments ago: the primary answers, no attempt here.
    return not_replayed(replica.name);
  }
  answer = ReplicaAnswer::kFailed;
  // A replica far slower than the primary gets no reads but its probes (ADR 0041); after the
  // primary failed (`past_hold`), a slow answer beats none.
  const detail::SlowCopy::Use use = replica.copy->slow.use(start, /*primary_failed=*/past_hold);
  if (use == detail::SlowCopy::Use::kSkip) [[unlikely]] {
    return Status(Code::kUnavailable,
                  replica.name + " answers far slower than the primary: the primary answers");
  }
  const bool probe = use == detail::SlowCopy::Use::kProbe;
  Shield::Call call(shield, shield.reads(), Operation::read("pg.read.replica"));
  Shield::Admission a = call.admit(start);
  if (a.kind != Shield::Admission::Kind::kAttempt) {
    // The replica's breaker is open: the primary answers, nobody waits for the replica.
    return a.status.ok() ? Status(Code::kUnavailable, "replica breaker open") : a.status;
  }
  // No waiting for a busy replica or its reconnect backoff: the primary can answer now.
  pass.asked(start);
  ReplicaView view;
  Hedge hedge;
  Result<Rows> r = replica_read(replica, work, view, probe, start, hedge);
  const TimePoint end = clock.now();
  if (hedge.sent) ++stats.attempts;  // the primary's try
  if (hedge.primary_won) {
    // The primary answered first: the answer is the read's (the primary holds every write).
    // The replica's try was given up, which says nothing to its breaker, but that it was
    // slower than the primary.
    ++stats.attempts;
    a.permit.cancel();
    judge_replica(replica, /*lost_hedge=*/true, end - start, end);
    answer = ReplicaAnswer::kAnswered;
    return r;
  }
  if (hedge.gave_up) {
    // A replica whose last answer was slow did not answer within the slow threshold and no
    // hedge could go: another slow answer for it (neutral to its breaker); the primary answers.
    ++stats.attempts;
    a.permit.cancel();
    judge_replica(replica, /*lost_hedge=*/true, end - start, end);
    return r;
  }
  if (!r.ok() && is_own_shedding(r.status())) {
    // Nothing reached the replica (its pool is busy or in its reconnect backoff): no
    // attempt, no evidence for its breaker; the primary answers.
    a.permit.cancel();
    return r;
  }
  ++stats.attempts;
  if (!r.ok()) {
    replica.copy->lag.forget();
    // Recorded for the replica's breaker and throttle; the retry, if any, is the primary's.
    (void)call.failed(std::move(a.permit), r.status(), end, end - start);
    if (!r.status().fault().transient()) answer = ReplicaAnswer::kAnswered;
    return r;
  }
  const detail::ReplicaVerdict verdict =
      detail::replica_verdict(view.in_recovery, view.replayed, view.read_committed, need);
  if (verdict == detail::ReplicaVerdict::kNotAReplica) [[unlikely]] {
    // A promoted standby (read_once() closed its sessions, so the next connect looks for a
    // standby again), and its breaker counts a failure. A read with no writes of its own to
    // see keeps the answer: the promoted server holds all a standby did, and in a failover
    // the primary's own pools may still be waiting on the old, frozen primary (measured:
    // without this, pages right after a promotion waited out their 6 s window). A read that
    // must see its writes goes to the primary, as for a replica behind them.
    replica.copy->lag.forget();
    Status s = detail::not_a_replica(replica.name);
    (void)call.failed(std::move(a.permit), s, end, end - start);
    if (need == 0) {
      answer = ReplicaAnswer::kAnswered;
      return r;
    }
    return s;
  }
  if (Status s =
          replay_lag_status(replica, view.replayed, view.received, end, options_.max_replica_lag);
      !s.ok()) {
    (void)call.failed(std::move(a.permit), s, end, end - start);
    return s;
  }
  call.succeeded(std::move(a.permit),
                 shield.breaker().measures_latency() ? end - start : Duration::zero());
  judge_replica(replica, /*lost_hedge=*/false, end - start, end);
  answer = ReplicaAnswer::kBehind;
  if (verdict == detail::ReplicaVerdict::kBehind) {
    // Healthy, but behind the request's own writes: the primary answers.
    replica.catch_up.behind(view.replayed, end);
    return not_replayed(replica.name);
  }
  replica.catch_up.saw(view.replayed);
  if (verdict == detail::ReplicaVerdict::kEarlySnapshot) {
    // Replayed them, but the read's snapshot was taken before: the primary answers.
    return not_replayed(replica.name);
  }
  answer = ReplicaAnswer::kAnswered;
  return r;
}

Result<Rows> Database::Impl::replica_pass(const Work& work, RoutedCall& route, bool again,
                                          RetryStats& stats) {
  Status why(Code::kUnavailable, "no replica answered: the primary answers");
  const detail::RequestPosition at = detail::request_position();
  if (!again && !detail::standby_may_answer(at.primary_only, at.timeline,
                                            timeline_.load(std::memory_order_relaxed))) {
    route.unanswered = true;
    return why;
  }
  // The replicas in turn (detail::StandbyPass, as the Client's reads): each thread's reads
  // start one further than its last (a count of its own, no shared write on the read path).
  static thread_local std::size_t turn = 0;
  const std::size_t n = replicas_.size();
  detail::StandbyPass pass(n, n > 1 && !again ? turn++ : 0, detail::kStandbyWait, TimePoint::max(),
                           again ? route.behind : detail::StandbyPass::kAll);
  // The clock is read again only after a replica did not answer (the first has no wait).
  TimePoint now{};
  while (const std::optional<std::size_t> i = pass.next(now)) {
    ReplicaAnswer answer{};
    Result<Rows> r = try_replica(*replicas_[*i], work, /*past_hold=*/again, pass, answer, stats);
    if (answer == ReplicaAnswer::kAnswered) {
      stats.stop = r.ok() ? StopReason::kNone : StopReason::kPermanent;
      return r;
    }
    pass.unanswered(*i, !again && answer == ReplicaAnswer::kBehind);
    why = r.status();
    now = replicas_[*i]->shield->clock().now();
  }
  if (!again) route.behind = pass.behind();
  route.unanswered = true;
  return why;
}

Result<Rows> Database::Impl::primary_read(const Work& work, RoutedCall& route) {
  // Between the primary's attempts, a replica that was only behind may have been seen past
  // the request's writes by other reads: it answers instead of a retry.
  if (route.primary_attempts > 1 && route.behind != 0 && replica_caught_up(route.behind)) {
    route.left_to_replica = true;
    return left_to_a_replica();
  }
  if (replicas_.empty()) [[likely]] {
    return read_once(*primary_, work, true, nullptr);
  }
  // With replicas, the primary's read latency (its round trips, not the waits for one of
  // its connections) is what a replica's is judged against.
  Duration took{};
  Result<Rows> r = read_once(*primary_, work, true, nullptr, Duration::max(), &took);
  if (r.ok()) primary_->copy->latency.record(took);
  return r;
}

Result<Rows> Database::Impl::read_routed(const Work& work, const RetryPolicy& policy, Operation op,
                                         RetryStats& stats) {
  RoutedCall route;
  if (Result<Rows> r = replica_pass(work, route, /*again=*/false, stats); !route.unanswered) {
    return r;
  }
  RetryStats primary;
  Result<Rows> r = run(
      *primary_, policy, op,
      [&]() -> Result<Rows> {
        ++route.primary_attempts;
        return primary_read(work, route);
      },
      &primary);
  stats.attempts += primary.attempts;
  stats.slept += primary.slept;
  stats.stop = primary.stop;
  if (r.ok() || !detail::standbys_again_after(r.status(), route.behind)) return r;
  route.unanswered = false;
  Result<Rows> again = replica_pass(work, route, /*again=*/true, stats);
  if (!route.unanswered) return again;
  // The retries were left to a replica that could not answer after all: its failure is
  // the read's (the cancellation was holdfast's own and means nothing to the caller).
  if (route.left_to_replica) {
    stats.stop = again.status().stop_reason();
    return again;
  }
  return r;
}

bool Database::Impl::replica_caught_up(std::uint64_t behind) noexcept {
  const std::uint64_t need = detail::request_position().lsn;
  for (std::size_t i = 0; i < replicas_.size() && i < 64; ++i) {
    if (((behind >> i) & 1) != 0 && replicas_[i]->catch_up.reached(need)) return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------
// Timelines (ADR 0028)

namespace {

// Raises `newest` to `timeline`.
void raise_timeline(std::atomic<std::uint32_t>& newest, std::uint32_t timeline) noexcept {
  std::uint32_t seen = newest.load(std::memory_order_relaxed);
  while (timeline > seen &&
         !newest.compare_exchange_weak(seen, timeline, std::memory_order_relaxed)) {
  }
}

}  // namespace

void Database::Impl::wrote(std::uint64_t lsn, std::uint32_t timeline, std::uintptr_t host,
                           const Connection* conn, std::string_view key) noexcept {
  detail::note_write(lsn, timeline);
  raise_timeline(timeline_, timeline);
  if (lost_ != nullptr) lost_->confirmed(lsn, timeline, host, conn, key);
}

}  // namespace holdfast::pg
