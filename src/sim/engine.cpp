// The discrete-event engine: one binary heap of small POD events, a pool of request slots
// reused after completion, and holdfast's own policy objects on one ManualClock.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include "holdfast/backoff.hpp"
#include "holdfast/circuit_breaker.hpp"
#include "holdfast/classify.hpp"
#include "holdfast/health_probe.hpp"
#include "holdfast/random.hpp"
#include "holdfast/retry.hpp"
#include "holdfast/retry_throttle.hpp"
#include "holdfast/shield.hpp"
#include "holdfast/sim.hpp"
#include "holdfast/window.hpp"
#include "latency_histogram.hpp"
#include "queues.hpp"

namespace holdfast::sim {
namespace {

using detail::Event;
using detail::EventQueue;
using detail::EventType;
using detail::Job;
using detail::JobQueue;

using std::chrono::hours;
using std::chrono::seconds;

constexpr std::int64_t kSecondNs = 1'000'000'000;
constexpr std::uint32_t kNoSlot = std::numeric_limits<std::uint32_t>::max();
// The "window" of strategies that have none: they stop on attempts only.
constexpr Duration kNoWindow = hours(24 * 365);

enum class Phase : std::uint8_t { kFree, kInAttempt, kWaiting, kWaitingForProbe };

// Where the request in a slot stands. Slots are reused; `tag` only ever grows, so an event
// scheduled for an earlier attempt (or an earlier request in the same slot) never matches
// again. Kept apart from Request, in one dense array: most stale events are dismissed by
// looking at this alone.
struct Mark {
  std::uint32_t tag = 0;
  Phase phase = Phase::kFree;
};

// holdfast: one request's window, its way through its client's Shield (which refers to
// the window) and the breaker permit of the attempt in flight.
struct Guarded {
  Guarded(Shield& shield, Duration window_length, Clock& clock, Random rng)
      : window(window_length, clock),
        call(shield, shield.reads(), Operation::read("sim.read"), &window, rng) {}
  RetryWindow window;
  Shield::Call call;
  CircuitBreaker::Permit permit;
};

// One user request (the state that only live events touch).
struct Request {
  std::int64_t arrival = 0;
  std::int64_t attempt_start = 0;
  std::uint64_t id = 0;
  std::uint32_t arrival_second = 0;
  std::uint32_t client = 0;
  std::uint32_t next_free = kNoSlot;
  std::uint32_t db_attempts = 0;
  // none, naive, backoff: the retry loop's state (with a window of its own); holdfast:
  // the request's window, its way through its client's Shield and the permit in flight.
  std::variant<std::monostate, RetryState, Guarded> policy;
};

// Request slots in chunks that never move (a request's Call refers to its own window).
class RequestPool {
 public:
  [[nodiscard]] Request& operator[](std::uint32_t i) noexcept {
    return chunks_[i >> kShift][i & kMask];
  }
  [[nodiscard]] std::uint32_t size() const noexcept { return size_; }
  // A slot past the last one.
  std::uint32_t grow() {
    if (size_ == (chunks_.size() << kShift)) {
      chunks_.push_back(std::make_unique<Request[]>(std::size_t{1} << kShift));
    }
    return size_++;
  }

 private:
  static constexpr unsigned kShift = 10;
  static constexpr std::uint32_t kMask = (1u << kShift) - 1;
  std::vector<std::unique_ptr<Request[]>> chunks_;
  std::uint32_t size_ = 0;
};

// A request waiting for a breaker's probe or for a place under its Shield's concurrency
// limit, in the order the Shield queued it.
struct Waiter {
  std::uint32_t slot;
  std::uint32_t tag;
};

std::uint64_t mix(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Status refused_status() {
  const Classification c = classify_pg_connect_failure();
  Status s(c.code, "could not connect to server: Connection refused", c.fault);
  s.with_backend(Backend::kPostgres);
  return s;
}

class Engine {
 public:
  Engine(const Scenario& sc, const Strategy& st, ManualClock& clock, const Tracer& trace)
      : sc_(sc),
        st_(st),
        clock_(clock),
        trace_(trace),
        start_(clock.now()),
        holdfast_(st.kind == StrategyKind::kHoldfast),
        policy_(retry_policy(st, clock)),
        // Un-jittered schedules repeat a few delays: those timers go to FIFO lanes.
        fixed_delays_(!holdfast_ && policy_.backoff().jitter().kind() == Jitter::Kind::kNone),
        timeout_status_(postgres_status(
            "", "no answer within the client timeout: the client closed the connection")),
        refused_status_(refused_status()),
        too_many_status_(postgres_status("53300", "sorry, too many clients already")),
        arrival_rng_(mix(sc.seed, 1)),
        service_rng_(mix(sc.seed, 2)),
        brownout_rng_(mix(sc.seed, 3)),
        health_rng_(mix(sc.seed, 4)),
        end_ns_(sc.duration.count()),
        trigger_start_ns_(sc.trigger.start.count()),
        trigger_end_ns_(sc.trigger.end().count()),
        seconds_count_(static_cast<std::size_t>((end_ns_ + kSecondNs - 1) / kSecondNs)) {
    out_.strategy = st.name;
    out_.seconds.resize(seconds_count_);
    attempts_by_arrival_.assign(seconds_count_, 0);
    if (holdfast_) {
      const std::size_t n = sc.shared_policies ? 1 : static_cast<std::size_t>(sc.clients);
      const Shield::Options options = shield_options(st, clock);
      shields_.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        shields_.push_back(std::make_unique<Shield>("client-" + std::to_string(i), options, clock));
      }
      waiters_.resize(n);
      seen_generation_.assign(n, 0);
      if (st.health_interval > Duration::zero()) {
        HealthProbe::Options po;
        po.interval = st.health_interval;
        po.background = false;  // the simulator runs its loop: see on_health_probe()
        for (std::size_t i = 0; i < n; ++i) {
          probes_.push_back(std::make_unique<HealthProbe>(
              shields_[i]->breaker(), [this] { return health_answer(); }, po));
        }
      }
    }
    // The mean of the lognormal exp(mu + sigma Z) is exp(mu + sigma^2 / 2): keep it at the
    // configured mean.
    const double sigma = sc.database.lognormal_sigma;
    lognormal_mu_ =
        std::log(static_cast<double>(sc.database.mean_service.count())) - sigma * sigma / 2.0;
  }

  Report run() {
    schedule_arrival(0);
    for (std::size_t i = 0; i < probes_.size(); ++i) {
      // HealthProbe's background loop, step by step: announce the next run, then run it.
      const std::int64_t next = st_.health_interval.count();
      shields_[i]->breaker().expect_health_probes(now() + Duration(next), st_.health_interval);
      events_.push(next, EventType::kHealthProbe, static_cast<std::uint32_t>(i));
    }
    while (!events_.empty()) {
      const Event ev = events_.top();
      if (ev.t >= end_ns_) break;
      events_.pop();
      while (ev.t >= next_second_ns_) {
        close_second();
      }
      now_ = ev.t;
      ++out_.events;
      dispatch(ev);
    }
    while (closed_seconds_ < seconds_count_) {
      close_second();
    }
    finish();
    return std::move(out_);
  }

 private:
  // --- time and the trigger -------------------------------------------------------------

  [[nodiscard]] TimePoint now() const noexcept { return start_ + Duration(now_); }
  // Moves the shared ManualClock to the current event's time; called before every call into
  // a policy object (most events touch none, and advance_to() takes the clock's mutex).
  void sync_clock() {
    if (clock_ns_ == now_) return;
    clock_ns_ = now_;
    clock_.advance_to(now());
  }
  [[nodiscard]] std::int64_t ns_of(TimePoint t) const noexcept { return (t - start_).count(); }

  [[nodiscard]] bool trigger_active(TriggerKind kind) const noexcept {
    return sc_.trigger.kind == kind && now_ >= trigger_start_ns_ && now_ < trigger_end_ns_;
  }

  [[nodiscard]] double rate_per_ns(std::int64_t t) const noexcept {
    double rate = sc_.offered_rps;
    if (sc_.trigger.kind == TriggerKind::kLoadSpike && t >= trigger_start_ns_ &&
        t < trigger_end_ns_) {
      rate *= sc_.trigger.factor;
    }
    return rate / 1e9;
  }

  // Poisson arrivals whose rate changes at the spike's edges: one Exp(1) draw of
  // integrated rate is spent across the pieces (time rescaling).
  void schedule_arrival(std::int64_t from) {
    if (sc_.max_requests != 0 && out_.requests >= sc_.max_requests) return;
    double budget = -std::log1p(-arrival_rng_.uniform());
    std::int64_t t = from;
    for (;;) {
      std::int64_t edge = std::numeric_limits<std::int64_t>::max();
      if (sc_.trigger.kind == TriggerKind::kLoadSpike) {
        if (t < trigger_start_ns_) {
          edge = trigger_start_ns_;
        } else if (t < trigger_end_ns_) {
          edge = trigger_end_ns_;
        }
      }
      const double rate = rate_per_ns(t);
      const bool last_piece = edge == std::numeric_limits<std::int64_t>::max();
      if (last_piece || budget < rate * static_cast<double>(edge - t)) {
        const double dt = budget / rate;
        if (static_cast<double>(t) + dt >= static_cast<double>(end_ns_)) return;
        t += static_cast<std::int64_t>(dt);
        break;
      }
      budget -= rate * static_cast<double>(edge - t);
      t = edge;
    }
    events_.push(t, EventType::kArrival);
  }

  [[nodiscard]] std::int64_t service_time() noexcept {
    const DatabaseModel& db = sc_.database;
    double ns = static_cast<double>(db.mean_service.count());
    switch (db.distribution) {
      case ServiceDistribution::kExponential:
        ns *= -std::log1p(-service_rng_.uniform());
        break;
      case ServiceDistribution::kLognormal: {
        // Box-Muller, one normal per draw.
        const double u1 = 1.0 - service_rng_.uniform();
        const double u2 = service_rng_.uniform();
        const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
        ns = std::exp(lognormal_mu_ + db.lognormal_sigma * z);
        break;
      }
      case ServiceDistribution::kFixed:
        break;
    }
    if (trigger_active(TriggerKind::kCapacityDrop)) ns *= sc_.trigger.factor;
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(ns));
  }

  // --- request slots -------------------------------------------------------------------

  std::uint32_t allocate() {
    if (free_ != kNoSlot) {
      const std::uint32_t s = free_;
      free_ = slots_[s].next_free;
      return s;
    }
    marks_.emplace_back();
    return slots_.grow();
  }

  void release(std::uint32_t s) {
    Request& r = slots_[s];
    attempts_by_arrival_[r.arrival_second] += r.db_attempts;
    marks_[s].phase = Phase::kFree;
    ++marks_[s].tag;
    r.policy.emplace<std::monostate>();
    r.next_free = free_;
    free_ = s;
    --in_flight_;
  }

  [[nodiscard]] Second& current() noexcept { return out_.seconds[closed_seconds_]; }
  [[nodiscard]] std::uint32_t shield_of(const Request& r) const noexcept {
    return sc_.shared_policies ? 0 : r.client;
  }

  void trace(TraceEvent e) const {
    if (trace_) trace_(e);
  }
  TraceEvent event(TraceEvent::Kind kind, const Request& r) const {
    TraceEvent e;
    e.kind = kind;
    e.request = r.id;
    e.client = r.client;
    e.at = now();
    return e;
  }

  // --- events --------------------------------------------------------------------------

  void dispatch(const Event& ev) {
    if (ev.type == EventType::kArrival) {
      on_arrival();
      return;
    }
    if (ev.type == EventType::kServiceDone) {
      on_service_done(ev);
      return;
    }
    if (ev.type == EventType::kHealthProbe) {
      on_health_probe(ev.slot);
      return;
    }
    const Mark m = marks_[ev.slot];
    if (m.tag != ev.tag) return;  // about an attempt (or a request) that is over
    switch (ev.type) {
      case EventType::kAttempt:
        if (m.phase == Phase::kWaiting || m.phase == Phase::kWaitingForProbe) {
          try_attempt(ev.slot);
        }
        return;
      case EventType::kTimeout:
        if (m.phase == Phase::kInAttempt) on_failure(ev.slot, timeout_status_);
        return;
      case EventType::kRefused:
        if (m.phase == Phase::kInAttempt) on_failure(ev.slot, refused_status_);
        return;
      case EventType::kTooMany:
        if (m.phase == Phase::kInAttempt) on_failure(ev.slot, too_many_status_);
        return;
      default:
        return;
    }
  }

  void on_arrival() {
    const std::uint64_t id = out_.requests++;
    ++current().arrivals;
    const std::uint32_t s = allocate();
    Request& r = slots_[s];
    r.id = id;
    r.arrival = now_;
    r.arrival_second = static_cast<std::uint32_t>(now_ / kSecondNs);
    r.client = static_cast<std::uint32_t>(
        ((arrival_rng_.next() >> 32) * static_cast<std::uint64_t>(sc_.clients)) >> 32);
    r.db_attempts = 0;
    marks_[s].phase = Phase::kWaiting;
    const Random rng(request_seed(sc_.seed, id));
    if (holdfast_) {
      // One window per request, opened by its first transient fault (or breaker refusal).
      r.policy.emplace<Guarded>(*shields_[shield_of(r)], st_.window, clock_, rng);
    } else {
      r.policy.emplace<RetryState>(policy_, Operation::read("sim.read"), nullptr, rng);
    }
    ++in_flight_;
    out_.peak_in_flight = std::max<std::uint64_t>(out_.peak_in_flight, in_flight_);
    trace(event(TraceEvent::Kind::kArrival, r));
    try_attempt(s);
    schedule_arrival(now_);
  }

  // holdfast: asks the Shield (breaker) first; then sends the attempt to the database.
  void try_attempt(std::uint32_t s) {
    Request& r = slots_[s];
    if (!holdfast_) {
      send(s);
      return;
    }
    sync_clock();
    Guarded& g = std::get<Guarded>(r.policy);
    Shield::Admission a = g.call.admit(now());
    if (trace_) {
      TraceEvent e = event(TraceEvent::Kind::kAdmit, r);
      e.admission = a.kind;
      e.until = a.until;
      e.status = &a.status;
      trace_(e);
    }
    const std::uint32_t b = shield_of(r);
    switch (a.kind) {
      case Shield::Admission::Kind::kAttempt:
        g.permit = std::move(a.permit);
        send(s);
        break;
      case Shield::Admission::Kind::kWait: {
        // Shield::run would sleep_until(a.until, a.wake, a.seen): a timer at `until`, and a
        // place in the Shield's queue, mirrored here in the same order.
        ++out_.breaker_waits;
        const std::uint32_t tag = ++marks_[s].tag;
        marks_[s].phase = Phase::kWaitingForProbe;
        waiters_[b].push_back(Waiter{s, tag});
        events_.push(std::max(now_, ns_of(a.until)), EventType::kAttempt, s, tag);
        break;
      }
      case Shield::Admission::Kind::kStop:
        if (a.status.stop_reason() == StopReason::kBreakerOpen) ++out_.breaker_rejections;
        finish_error(s, a.status.stop_reason());
        break;
    }
    wake_if_signalled(b);
  }

  void send(std::uint32_t s) {
    Request& r = slots_[s];
    const std::uint32_t tag = ++marks_[s].tag;
    marks_[s].phase = Phase::kInAttempt;
    r.attempt_start = now_;
    ++r.db_attempts;
    ++out_.db_attempts;
    ++current().db_attempts;

    const DatabaseModel& db = sc_.database;
    const std::int64_t reject = db.reject_latency.count();
    if (trigger_active(TriggerKind::kOutage)) {
      events_.push_after(now_, reject, EventType::kRefused, s, tag);
      return;
    }
    if (trigger_active(TriggerKind::kBrownout) &&
        brownout_rng_.uniform() < sc_.trigger.failure_ratio) {
      events_.push_after(now_, reject, EventType::kTooMany, s, tag);
      return;
    }
    if (busy_ < db.workers) {
      ++busy_;
      events_.push(now_ + service_time(), EventType::kServiceDone, s, tag);
    } else if (jobs_.size() < static_cast<std::size_t>(db.queue_limit)) {
      jobs_.push(Job{s, tag});
    } else {
      events_.push_after(now_, reject, EventType::kTooMany, s, tag);
      return;
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

  void on_service_done(const Event& ev) {
    --busy_;
    start_queued_jobs();
    const Mark m = marks_[ev.slot];
    if (m.tag == ev.tag && m.phase == Phase::kInAttempt) on_success(ev.slot);
  }

  void start_queued_jobs() {
    while (busy_ < sc_.database.workers && !jobs_.empty()) {
      const Job j = jobs_.pop();
      if (sc_.database.drop_abandoned) {
        const Mark m = marks_[j.slot];
        if (m.tag != j.tag || m.phase != Phase::kInAttempt) continue;
      }
      ++busy_;
      events_.push(now_ + service_time(), EventType::kServiceDone, j.slot, j.tag);
    }
  }

  void on_success(std::uint32_t s) {
    Request& r = slots_[s];
    const Duration latency(now_ - r.attempt_start);
    sync_clock();
    if (holdfast_) {
      Guarded& g = std::get<Guarded>(r.policy);
      g.call.succeeded(std::move(g.permit), latency);
    } else {
      std::get<RetryState>(r.policy).on_success();
    }
    if (trace_) {
      TraceEvent e = event(TraceEvent::Kind::kSucceeded, r);
      e.latency = latency;
      trace_(e);
    }
    if (holdfast_) wake_if_signalled(shield_of(r));
    const auto micros = static_cast<std::uint64_t>((now_ - r.arrival) / 1000);
    second_latency_.add(micros);
    all_latency_.add(micros);
    ++current().successes;
    ++out_.successes;
    release(s);
  }

  void on_failure(std::uint32_t s, const Status& failure) {
    Request& r = slots_[s];
    const Duration latency(now_ - r.attempt_start);
    bool retry = false;
    Duration delay{};
    StopReason stop = StopReason::kNone;
    sync_clock();
    if (holdfast_) {
      Guarded& g = std::get<Guarded>(r.policy);
      const Shield::Verdict v = g.call.failed(std::move(g.permit), failure, now(), latency);
      retry = v.kind == Shield::Verdict::Kind::kRetry;
      delay = v.delay;
      stop = v.status.stop_reason();
    } else {
      const RetryDecision d = std::get<RetryState>(r.policy).on_failure(failure, now());
      retry = d.retry;
      delay = d.delay;
      stop = d.reason;
    }
    if (trace_) {
      TraceEvent e = event(TraceEvent::Kind::kFailed, r);
      e.latency = latency;
      e.status = &failure;
      e.retry = retry;
      e.delay = delay;
      e.stop = stop;
      trace_(e);
    }
    if (holdfast_) wake_if_signalled(shield_of(r));
    if (!retry) {
      finish_error(s, stop);
      return;
    }
    marks_[s].phase = Phase::kWaiting;
    if (fixed_delays_) {
      events_.push_after(now_, delay.count(), EventType::kAttempt, s, ++marks_[s].tag);
    } else {
      events_.push(now_ + delay.count(), EventType::kAttempt, s, ++marks_[s].tag);
    }
  }

  // After any call into Shield b: if it woke waiters (handed them places, or told them to
  // decide again), they are at the front of its queue, and so of ours: they go now. Each
  // waiter is looked at once, however many places come back.
  void wake_if_signalled(std::uint32_t b) {
    const std::uint64_t g = shields_[b]->wakes().generation();
    if (g == seen_generation_[b]) return;
    seen_generation_[b] = g;
    std::deque<Waiter>& list = waiters_[b];
    while (!list.empty()) {
      const Waiter w = list.front();
      Mark& m = marks_[w.slot];
      if (m.tag == w.tag && m.phase == Phase::kWaitingForProbe) {
        if (!std::get<Guarded>(slots_[w.slot].policy).call.woken()) break;
        events_.push(now_, EventType::kAttempt, w.slot, ++m.tag);
      }
      list.pop_front();
    }
  }

  // One turn of HealthProbe's loop for Shield b: probe_now() (a no-op unless the breaker is
  // open), then announce the next run to the breaker.
  void on_health_probe(std::uint32_t b) {
    sync_clock();
    const HealthProbe::Outcome out = probes_[b]->probe_now();
    const std::int64_t next = now_ + st_.health_interval.count();
    shields_[b]->breaker().expect_health_probes(start_ + Duration(next), st_.health_interval);
    if (trace_) {
      TraceEvent e;
      e.kind = TraceEvent::Kind::kHealthProbe;
      e.client = b;
      e.at = now();
      e.until = start_ + Duration(next);
      e.ran = out.ran;
      e.closed = out.closed;
      e.status = &out.status;
      trace_(e);
    }
    wake_if_signalled(b);
    events_.push(next, EventType::kHealthProbe, b);
  }

  // What "SELECT 1" sent now would get: refused during an outage, 53300 at random in a
  // brownout or when the queue is full, a timeout when the queue ahead of it is longer
  // than the client timeout, else an answer. (A model: the probe takes no capacity.)
  Status health_answer() {
    if (trigger_active(TriggerKind::kOutage)) return refused_status_;
    if (trigger_active(TriggerKind::kBrownout) &&
        health_rng_.uniform() < sc_.trigger.failure_ratio) {
      return too_many_status_;
    }
    const DatabaseModel& db = sc_.database;
    if (jobs_.size() >= static_cast<std::size_t>(db.queue_limit) && busy_ >= db.workers) {
      return too_many_status_;
    }
    if (busy_ >= db.workers) {
      double mean = static_cast<double>(db.mean_service.count());
      if (trigger_active(TriggerKind::kCapacityDrop)) mean *= sc_.trigger.factor;
      const double wait = static_cast<double>(jobs_.size() + 1) * mean / db.workers;
      if (wait > static_cast<double>(sc_.attempt_timeout.count())) return timeout_status_;
    }
    return {};
  }

  void finish_error(std::uint32_t s, StopReason reason) {
    failed_latency_.add(static_cast<std::uint64_t>((now_ - slots_[s].arrival) / 1000));
    ++current().errors;
    ++out_.errors;
    ++out_.errors_by_reason[static_cast<std::size_t>(reason)];
    release(s);
  }

  // --- per-second statistics -----------------------------------------------------------

  void close_second() {
    Second& sec = out_.seconds[closed_seconds_];
    if (next_second_ns_ > now_) now_ = next_second_ns_;
    sync_clock();
    sec.p99_ms = second_latency_.quantile(0.99) / 1000.0;
    second_latency_.clear();
    if (!shields_.empty()) {
      std::size_t open = 0;
      for (const auto& sh : shields_)
        open += sh->breaker().state() != BreakerState::kClosed;
      sec.breaker_open = static_cast<double>(open) / static_cast<double>(shields_.size());
    }
    sec.queue = static_cast<std::uint32_t>(jobs_.size());
    sec.busy_workers = static_cast<std::uint32_t>(busy_);
    ++closed_seconds_;
    next_second_ns_ += kSecondNs;
  }

  void finish() {
    // Requests still in flight: their attempts so far count for their arrival second.
    for (std::uint32_t i = 0; i < slots_.size(); ++i) {
      const Request& r = slots_[i];
      if (marks_[i].phase != Phase::kFree) {
        attempts_by_arrival_[r.arrival_second] += r.db_attempts;
        ++out_.seconds[r.arrival_second].unfinished;
        ++out_.in_flight_at_end;
      }
    }
    for (std::size_t i = 0; i < seconds_count_; ++i) {
      Second& sec = out_.seconds[i];
      if (sec.arrivals > 0) {
        sec.amplification =
            static_cast<double>(attempts_by_arrival_[i]) / static_cast<double>(sec.arrivals);
      }
      // A second whose requests are not all done yet has not made all its attempts.
      if (sec.unfinished == 0) {
        out_.amplification_max = std::max(out_.amplification_max, sec.amplification);
      }
    }
    // The trigger's seconds (all of the run when there is no trigger).
    std::size_t from = 0;
    std::size_t to = seconds_count_;
    if (sc_.trigger.kind != TriggerKind::kNone) {
      from = std::min(static_cast<std::size_t>(trigger_start_ns_ / kSecondNs), seconds_count_);
      to = std::min(static_cast<std::size_t>((trigger_end_ns_ + kSecondNs - 1) / kSecondNs),
                    seconds_count_);
    }
    std::uint64_t arrivals = 0;
    std::uint64_t attempts = 0;
    std::uint64_t answered = 0;
    for (std::size_t i = from; i < to; ++i) {
      arrivals += out_.seconds[i].arrivals;
      attempts += attempts_by_arrival_[i];
      answered += out_.seconds[i].successes;
    }
    if (arrivals > 0) {
      out_.amplification_during_trigger =
          static_cast<double>(attempts) / static_cast<double>(arrivals);
      out_.goodput_during_trigger = static_cast<double>(answered) / static_cast<double>(arrivals);
    }
    out_.p99_ms = all_latency_.quantile(0.99) / 1000.0;
    out_.failed_p50_ms = failed_latency_.quantile(0.50) / 1000.0;
    out_.failed_p99_ms = failed_latency_.quantile(0.99) / 1000.0;
    out_.goodput_limit_during_trigger = goodput_limit(sc_);
    if (out_.goodput_limit_during_trigger > 0.0) {
      out_.efficiency = out_.goodput_during_trigger / out_.goodput_limit_during_trigger;
    }
    out_.peak_event_queue = events_.peak();
    judge_recovery(sc_, out_);
  }

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
  Random arrival_rng_;
  Random service_rng_;
  Random brownout_rng_;
  Random health_rng_;
  const std::int64_t end_ns_;
  const std::int64_t trigger_start_ns_;
  const std::int64_t trigger_end_ns_;
  const std::size_t seconds_count_;
  double lognormal_mu_ = 0.0;

  // holdfast: one Shield per client process (or one shared). Declared before the request
  // slots, whose permits and calls refer to them: destroyed after them.
  std::vector<std::unique_ptr<Shield>> shields_;
  std::vector<std::deque<Waiter>> waiters_;           // per Shield: requests it queued
  std::vector<std::uint64_t> seen_generation_;        // per Shield: its signal when last looked at
  std::vector<std::unique_ptr<HealthProbe>> probes_;  // per Shield, when configured

  EventQueue events_;
  JobQueue jobs_;
  int busy_ = 0;
  RequestPool slots_;
  std::vector<Mark> marks_;  // per slot
  std::uint32_t free_ = kNoSlot;
  std::uint64_t in_flight_ = 0;

  std::int64_t now_ = 0;
  std::int64_t clock_ns_ = 0;  // where the ManualClock stands, relative to start_
  std::int64_t next_second_ns_ = kSecondNs;
  std::size_t closed_seconds_ = 0;
  std::vector<std::uint64_t> attempts_by_arrival_;
  detail::LatencyHistogram second_latency_;
  detail::LatencyHistogram all_latency_;
  detail::LatencyHistogram failed_latency_;
  Report out_;
};

}  // namespace

std::uint64_t request_seed(std::uint64_t seed, std::uint64_t request) noexcept {
  return mix(seed, request + 16);
}

RetryPolicy retry_policy(const Strategy& st, Clock& clock) {
  RetryPolicy p;
  switch (st.kind) {
    case StrategyKind::kNone:
      p = RetryPolicy::no_retry();
      p.window(kNoWindow);
      break;
    case StrategyKind::kNaive:
      p.max_attempts(st.max_attempts)
          .backoff(Backoff::steps({Duration::zero()}, Jitter::none()))
          .window(kNoWindow);
      break;
    case StrategyKind::kBackoff:
      // Tenacity's wait_exponential(multiplier=1, min=1, max=10): 1 s, 2 s, 4 s, 8 s, 10 s.
      p.max_attempts(st.max_attempts)
          .backoff(Backoff::exponential(seconds(1), 2.0, seconds(10), Jitter::none()))
          .window(kNoWindow);
      break;
    case StrategyKind::kHoldfast:
      p = RetryPolicy::origin_reads();
      p.max_attempts(st.max_attempts).window(st.window);
      break;
  }
  // Millions of retries: no per-retry DEBUG line, whatever HOLDFAST_LOG_LEVEL says.
  p.on_retry([](const RetryEvent&) {});
  p.clock(clock);
  return p;
}

Shield::Options shield_options(const Strategy& st, Clock& clock) {
  Shield::Options o;
  o.reads = retry_policy(st, clock);
  o.writes = o.reads;
  if (st.breaker_threshold > 0) o.breaker.consecutive_failures = st.breaker_threshold;
  if (!st.breaker) {
    o.breaker.consecutive_failures = 0;                         // no low-traffic rule
    o.breaker.busy_consecutive_failures = 0;                    // nor the busy one
    o.breaker.minimum_calls = std::numeric_limits<int>::max();  // no ratio rule
  }
  if (!st.throttle) o.throttle.floor_per_second = 1e6;  // the floor's maximum
  return o;
}

Result<Report> run(const Scenario& scenario, const Strategy& strategy, const Tracer& trace) {
  if (Status s = scenario.validate(); !s.ok()) return s;
  if (strategy.max_attempts < 1) {
    return Status(Code::kInvalidArgument, "strategy " + strategy.name + ": attempts must be >= 1");
  }
  if (strategy.kind == StrategyKind::kHoldfast && strategy.window <= Duration::zero()) {
    return Status(Code::kInvalidArgument, "strategy " + strategy.name + ": window must be > 0");
  }
  ManualClock clock(ManualClock::Mode::kAutoAdvance);
  Engine engine(scenario, strategy, clock, trace);
  return engine.run();
}

}  // namespace holdfast::sim
