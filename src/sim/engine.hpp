// Internal: the discrete-event engine of one run: one binary heap of small POD events, a pool
// of request slots reused after completion, and holdfast's own policy objects on one
// ManualClock. engine.cpp runs the events and the requests' way through their Shields;
// attempts.cpp sends their attempts to the database's copies (routing, hedging, answers).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "copies.hpp"
#include "holdfast/core/backoff.hpp"
#include "holdfast/core/circuit_breaker.hpp"
#include "holdfast/core/classify.hpp"
#include "holdfast/core/health_probe.hpp"
#include "holdfast/core/liveness.hpp"
#include "holdfast/core/random.hpp"
#include "holdfast/core/retry.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/sim.hpp"
#include "load_model.hpp"
#include "queues.hpp"
#include "report_builder.hpp"
#include "request_slots.hpp"
#include "router.hpp"
#include "seeds.hpp"

namespace holdfast::sim::detail {

class Engine {
 public:
  Engine(const Scenario& sc, const Strategy& st, ManualClock& clock, const Tracer& trace);

  Report run();

 private:
  // --- time and the trigger -------------------------------------------------------------

  [[nodiscard]] TimePoint now() const noexcept { return start_ + Duration(now_); }
  // Moves the shared ManualClock to the current event's time; called before every call into
  // a policy object (most events touch none, and advance_to() takes the clock's mutex).
  void sync_clock();
  [[nodiscard]] std::int64_t ns_of(TimePoint t) const noexcept { return (t - start_).count(); }

  [[nodiscard]] bool trigger_active(TriggerKind kind) const noexcept {
    return sc_.trigger.kind == kind && now_ >= trigger_start_ns_ && now_ < trigger_end_ns_;
  }

  // The next arrival after `from`, unless the run has admitted all it may.
  void schedule_arrival(std::int64_t from);

  // --- request slots -------------------------------------------------------------------

  void release(std::uint32_t s);

  [[nodiscard]] Second& current() noexcept { return report_.current(); }
  [[nodiscard]] std::uint32_t shield_of(const Request& r) const noexcept {
    return sc_.shared_policies ? 0 : r.client;
  }

  void trace(TraceEvent e) const {
    if (trace_) trace_(e);
  }
  TraceEvent event(TraceEvent::Kind kind, const Request& r) const;

  // --- events --------------------------------------------------------------------------

  void dispatch(const Event& ev);

  void on_arrival();

  // A class at random, with the scenario's shares.
  Priority draw_class() noexcept;

  // holdfast: asks the Shield (breaker) first; then sends the attempt to the database.
  void try_attempt(std::uint32_t s);

  // Sends the attempt of request `s` to the copy its client routes it to.
  void send(std::uint32_t s);

  // One database attempt of request `s` to copy `c` (leg `which`: 0 the attempt, 1 its
  // hedge). False when the database refused it: the attempt's refusal is on its way (none
  // for a hedge, whose attempt goes on).
  bool leg_to(std::uint32_t s, int c, int which);

  // The attempt of request `s` has waited its copy's hedge delay with no answer: it also
  // goes to another copy (or the same one, on another connection) when the breaker is
  // closed, the Shield's limit has room for a retry and the budget has a hedge to spend.
  // Otherwise it looks again when it has waited half as long again, up to kHedgeLooks
  // times: the reads still waiting then are the stragglers, and the budget's last hedges
  // are kept for them (Router::spend).
  void on_hedge(std::uint32_t s);

  void on_service_done(const Event& ev);

  // A hang: a completion that was scheduled before the freeze and falls at or after its
  // start belongs to a query that was running when the database froze.
  [[nodiscard]] bool was_running_at_freeze(const Event& ev) const noexcept;

  // The attempt of request `s` is over; `answered`: the database said something.
  void attempt_over(const Request& r, bool answered);

  void on_success(std::uint32_t s);

  void on_failure(std::uint32_t s, const Status& failure);

  // After any call into Shield b: if it woke waiters (handed them places, or told them to
  // decide again), they are at the front of their class's list in its queue, and so in
  // ours, or at the back (waits that no longer fit): they go now. Each waiter is looked at
  // once, however many places come back.
  void wake_if_signalled(std::uint32_t b);
  // False when `w` still waits; otherwise (woken: its attempt goes now; or no longer
  // waiting) true.
  bool woke(const Waiter& w);

  // Listens to Shield b's breaker: its first opening since the trigger began, for the report.
  void on_transition(std::size_t b, const BreakerTransition& t);

  // One look of Shield b's Liveness watch; when it finds the database silent, the attempts
  // in flight through that Shield give up at once (pg::Database's reads do).
  void on_liveness(std::uint32_t b);

  // One turn of HealthProbe's loop for Shield b: probe_now() (a no-op unless the breaker is
  // open), then announce the next run to the breaker.
  void on_health_probe(std::uint32_t b);

  // What "SELECT 1" sent now would get: refused during an outage, a timeout during a hang,
  // 53300 at random in a brownout or when the queue is full, a timeout when the queue ahead
  // of it is longer than the client timeout, else an answer. (A model: the probe takes no
  // capacity, and its answer, a timeout included, is known at once.)
  Status health_answer();

  void finish_error(std::uint32_t s, StopReason reason) {
    report_.failed(now_ - slots_[s].arrival, reason);
    release(s);
  }

  // --- per-second statistics -----------------------------------------------------------

  void close_second();

  const Scenario& sc_;
  const Strategy& st_;
  ManualClock& clock_;
  const Tracer& trace_;
  const TimePoint start_;
  const bool holdfast_;
  const RetryPolicy policy_;
  const bool fixed_delays_;
  const Status timeout_status_;
  const Status refused_status_;
  const Status too_many_status_;
  const Status silent_status_;
  Arrivals arrivals_;
  Random brownout_rng_;
  Random health_rng_;
  Random class_rng_;  // draws each request's class, only with a class mix
  Random route_rng_;  // picks among standbys
  const std::int64_t end_ns_;
  const std::int64_t trigger_start_ns_;
  const std::int64_t trigger_end_ns_;
  const bool hang_;  // the trigger is a hang: kFreeze and kThaw are scheduled
  detail::ReportBuilder report_;
  Report& out_;  // report_'s totals

  // holdfast: one Shield per client process (or one shared). Declared before the request
  // slots, whose permits and calls refer to them: destroyed after them.
  std::vector<std::unique_ptr<Shield>> shields_;
  // Per Shield and class: the requests it queued.
  std::vector<std::array<std::deque<Waiter>, kPriorities>> waiters_;
  std::vector<std::uint64_t> seen_generation_;        // per Shield: its signal when last looked at
  std::vector<std::unique_ptr<HealthProbe>> probes_;  // per Shield, when configured
  std::vector<std::unique_ptr<Liveness>> lives_;      // per Shield, when configured
  std::vector<std::uint32_t> silenced_;               // Shields just found silent
  std::vector<bool> opened_;  // per Shield: its breaker opened since the trigger began

  EventQueue events_;
  Copies copies_;                        // the database: a primary and standbys
  std::vector<detail::Router> routers_;  // per client process: where its reads go
  // A hang is on (between kFreeze and kThaw): no query starts or finishes, nothing is
  // refused. Events scheduled before the freeze have sequence numbers below freeze_seq_.
  bool frozen_ = false;
  std::uint64_t freeze_seq_ = 0;
  detail::RequestSlots slots_;
  std::uint64_t in_flight_ = 0;

  std::int64_t now_ = 0;
  std::int64_t clock_ns_ = 0;  // where the ManualClock stands, relative to start_
};

}  // namespace holdfast::sim::detail
