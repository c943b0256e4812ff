// The engine's attempts at the database: where each goes (routing among copies), hedges,
// answers and cancellations, and what a health probe would hear (engine.hpp).
#include "engine.hpp"

namespace holdfast::sim::detail {

// Sends the attempt of request `s` to the copy its client routes it to.
void Engine::send(std::uint32_t s) {
  Request& r = slots_[s];
  const std::uint32_t tag = ++slots_.mark(s).tag;
  slots_.mark(s).phase = Phase::kInAttempt;
  r.attempt_start = now_;
  r.hedged = false;
  r.hedge_looks = 0;
  r.legs[0] = LegRef{};
  r.legs[1] = LegRef{};
  if (!lives_.empty()) lives_[shield_of(r)]->waiting(now());
  detail::Router& router = routers_[r.client];
  r.copy = router.route(route_rng_);
  if (!leg_to(s, r.copy, 0)) return;
  router.earn();
  if (const std::int64_t delay = router.hedge_delay(r.copy); delay > 0) {
    events_.push(now_ + delay, EventType::kHedge, s, tag);
  }
  // The client's deadline for this attempt: the timeout, or what is left of the
  // request's window when that is shorter (the window caps every wait of a request).
  const Duration timeout = sc_.attempt_timeout;
  if (const Guarded* g = std::get_if<Guarded>(&r.policy); g && g->window.is_open()) {
    const Duration left = g->window.remaining(now());
    if (left < timeout) {
      events_.push(now_ + std::max<std::int64_t>(1, left.count()), EventType::kTimeout, s, tag);
      return;
    }
  }
  events_.push_after(now_, timeout.count(), EventType::kTimeout, s, tag);
}

// One database attempt of request `s` to copy `c` (leg `which`: 0 the attempt, 1 its
// hedge). False when the database refused it: the attempt's refusal is on its way (none
// for a hedge, whose attempt goes on).
bool Engine::leg_to(std::uint32_t s, int c, int which) {
  Request& r = slots_[s];
  const std::uint32_t tag = slots_.mark(s).tag;
  ++r.db_attempts;
  ++out_.db_attempts;
  ++current().db_attempts;
  report_.sent_to(c, now_);
  const std::int64_t reject = sc_.database.reject_latency.count();
  EventType refusal = EventType::kRefused;
  if (trigger_active(TriggerKind::kOutage)) {
    refusal = EventType::kRefused;
  } else if (trigger_active(TriggerKind::kBrownout) &&
             brownout_rng_.uniform() < sc_.trigger.failure_ratio) {
    refusal = EventType::kTooMany;
  } else if (copies_.send(c, s, tag, now_, r.legs[which]) == Copies::Sent::kTaken) {
    return true;
  } else {
    refusal = EventType::kTooMany;
  }
  if (which == 0) events_.push_after(now_, reject, refusal, s, tag);
  return false;
}

// The attempt of request `s` has waited its copy's hedge delay with no answer: it also
// goes to another copy (or the same one, on another connection) when the breaker is
// closed, the Shield's limit has room for a retry and the budget has a hedge to spend.
// Otherwise it looks again when it has waited half as long again, up to kHedgeLooks
// times: the reads still waiting then are the stragglers, and the budget's last hedges
// are kept for them (Router::spend).
void Engine::on_hedge(std::uint32_t s) {
  static constexpr int kHedgeLooks = 4;
  Request& r = slots_[s];
  if (r.hedged || !holdfast_) return;
  Shield& shield = *shields_[shield_of(r)];
  const ConcurrencyLimit& limit = shield.limit();
  detail::Router& router = routers_[r.client];
  const bool first_look = r.hedge_looks++ == 0;
  if (shield.breaker().state() != BreakerState::kClosed ||
      (limit.tight() && !limit.has_room_for_retry()) || !router.spend(first_look)) {
    if (r.hedge_looks < kHedgeLooks) {
      const std::int64_t waited = now_ - r.attempt_start;
      events_.push(now_ + waited / 2, EventType::kHedge, s, slots_.mark(s).tag);
    }
    return;
  }
  r.hedged = true;
  ++out_.hedged_reads;
  (void)leg_to(s, router.hedge_copy(r.copy), 1);
}

void Engine::on_service_done(const Event& ev) {
  const Copies::Leg leg = *copies_.finished(ev.slot, ev.tag);
  copies_.done(ev.slot, now_);
  const Mark m = slots_.mark(leg.slot);
  if (m.tag != leg.tag || m.phase != Phase::kInAttempt) return;  // abandoned work
  Request& r = slots_[leg.slot];
  routers_[r.client].answered(leg.copy, now_ - leg.sent_ns);
  if (r.hedged) {
    // The first answer wins; the other leg is cancelled and its worker released.
    const bool hedge_won = r.legs[1].leg == ev.slot && r.legs[1].generation == ev.tag;
    out_.hedges_won += hedge_won;
    copies_.cancel(r.legs[hedge_won ? 0 : 1], now_);
  }
  on_success(leg.slot);
}

// A hang: a completion that was scheduled before the freeze and falls at or after its
// start belongs to a query that was running when the database froze.
bool Engine::was_running_at_freeze(const Event& ev) const noexcept {
  return hang_ && ev.seq < freeze_seq_ && ev.t >= trigger_start_ns_;
}

// The attempt of request `s` is over; `answered`: the database said something.
void Engine::attempt_over(const Request& r, bool answered) {
  if (lives_.empty()) return;
  Liveness& live = *lives_[shield_of(r)];
  if (answered) live.answered(now());
  live.done();
}

// What "SELECT 1" sent now would get: refused during an outage, a timeout during a hang,
// 53300 at random in a brownout or when the queue is full, a timeout when the queue ahead
// of it is longer than the client timeout, else an answer. (A model: the probe takes no
// capacity, and its answer, a timeout included, is known at once.)
Status Engine::health_answer() {
  if (trigger_active(TriggerKind::kOutage)) return refused_status_;
  if (frozen_) return timeout_status_;  // no answer: it waits out its timeout
  if (trigger_active(TriggerKind::kBrownout) && health_rng_.uniform() < sc_.trigger.failure_ratio) {
    return too_many_status_;
  }
  const DatabaseModel& db = sc_.database;
  const int c = copies_.count() > 1 ? 1 : 0;  // where reads go first
  const std::size_t queued = copies_.queued(c);
  const int busy = copies_.busy(c);
  if (queued >= static_cast<std::size_t>(db.queue_limit) && busy >= db.workers) {
    return too_many_status_;
  }
  if (busy >= db.workers) {
    const double mean = copies_.mean_service_ns(c, now_);
    const double wait = static_cast<double>(queued + 1) * mean / db.workers;
    if (wait > static_cast<double>(sc_.attempt_timeout.count())) return timeout_status_;
  }
  return {};
}

}  // namespace holdfast::sim::detail
