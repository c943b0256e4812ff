// The engine's run: its events, the requests' arrival and their way through their Shields
// (engine.hpp).
#include "engine.hpp"

namespace holdfast::sim::detail {
namespace {

// What every simulated request is: a read (retried as one), in its class.
constexpr Operation kRead = Operation::read("sim.read");

Status refused_status() {
  const Classification c = classify_pg_connect_failure();
  Status s(c.code, "could not connect to server: Connection refused", c.fault);
  s.with_backend(Backend::kPostgres);
  return s;
}

// What pg::Database's read gets when the watch finds its server silent mid-attempt (as
// exchange.cpp says it).
Status silent_status() {
  Status s(Code::kUnavailable,
           "the server went silent (no answer to the work in flight nor to a check)",
           Fault{RetryScope::kReconnect, Outcome::kUnknown, Pace::kSlow, true});
  s.with_backend(Backend::kPostgres);
  return s;
}

}  // namespace

Engine::Engine(const Scenario& sc, const Strategy& st, ManualClock& clock, const Tracer& trace)
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
      silent_status_(silent_status()),
      arrivals_(sc, Random(mix(sc.seed, 1))),
      brownout_rng_(mix(sc.seed, 3)),
      health_rng_(mix(sc.seed, 4)),
      class_rng_(mix(sc.seed, 5)),
      route_rng_(mix(sc.seed, 6)),
      end_ns_(sc.duration.count()),
      trigger_start_ns_(sc.trigger.start.count()),
      trigger_end_ns_(sc.trigger.end().count()),
      hang_(sc.trigger.kind == TriggerKind::kHang),
      report_(sc, st.name),
      out_(report_.out()),
      copies_(sc, events_, Random(mix(sc.seed, 2)), Random(mix(sc.seed, 7))) {
  routers_.reserve(static_cast<std::size_t>(sc.clients));
  for (int i = 0; i < sc.clients; ++i)
    routers_.emplace_back(st, sc.database.copies, holdfast_);
  copies_.on_abandoned(
      [](const void* self, std::uint32_t slot, std::uint32_t tag) {
        const Mark m = static_cast<const Engine*>(self)->slots_.mark(slot);
        return m.tag != tag || m.phase != Phase::kInAttempt;
      },
      this);
  if (holdfast_) {
    const std::size_t n = sc.shared_policies ? 1 : static_cast<std::size_t>(sc.clients);
    const Shield::Options options = shield_options(st, clock);
    shields_.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      shields_.push_back(std::make_unique<Shield>("client-" + std::to_string(i), options, clock));
    }
    waiters_.resize(n);
    seen_generation_.assign(n, 0);
    opened_.assign(n, false);
    out_.breakers = static_cast<std::uint32_t>(n);
    for (std::size_t i = 0; i < n; ++i) {
      shields_[i]->breaker().add_listener(
          [this, i](const BreakerTransition& t) { on_transition(i, t); });
    }
    if (st.health_interval > Duration::zero()) {
      HealthProbe::Options po;
      po.interval = st.health_interval;
      po.background = false;  // the simulator runs its loop: see on_health_probe()
      for (std::size_t i = 0; i < n; ++i) {
        probes_.push_back(std::make_unique<HealthProbe>(
            shields_[i]->breaker(), [this] { return health_answer(); }, po));
      }
    }
    if (st.silence_after > Duration::zero()) {
      Liveness::Options lo;
      lo.suspect_after = st.silence_after;
      lo.suspect_max = std::max(lo.suspect_max, lo.suspect_after);
      lo.background = false;  // the simulator steps it: see on_liveness()
      for (std::size_t i = 0; i < n; ++i) {
        lives_.push_back(std::make_unique<Liveness>(
            *shields_[i],
            [this](TimePoint) {
              return frozen_ ? Liveness::CheckResult::kSilent : Liveness::CheckResult::kAnswered;
            },
            [this, i](bool silent) {
              if (silent) silenced_.push_back(static_cast<std::uint32_t>(i));
            },
            lo));
      }
    }
  }
}

Report Engine::run() {
  schedule_arrival(0);
  if (hang_) {
    events_.push(trigger_start_ns_, EventType::kFreeze);
    events_.push(trigger_end_ns_, EventType::kThaw);
  }
  for (std::size_t i = 0; i < lives_.size(); ++i) {
    events_.push(lives_[i]->options().tick.count(), EventType::kLiveness,
                 static_cast<std::uint32_t>(i));
  }
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
    while (ev.t >= report_.next_second_ns()) {
      close_second();
    }
    now_ = ev.t;
    ++out_.events;
    dispatch(ev);
  }
  while (!report_.all_closed()) {
    close_second();
  }
  // Requests still in flight: their attempts so far count for their arrival second.
  for (std::uint32_t i = 0; i < slots_.size(); ++i) {
    if (slots_.mark(i).phase != Phase::kFree) {
      report_.unfinished(slots_[i].arrival_second, slots_[i].db_attempts);
    }
  }
  return report_.finish(events_.peak());
}

// Moves the shared ManualClock to the current event's time; called before every call into
// a policy object (most events touch none, and advance_to() takes the clock's mutex).
void Engine::sync_clock() {
  if (clock_ns_ == now_) return;
  clock_ns_ = now_;
  clock_.advance_to(now());
}

// The next arrival after `from`, unless the run has admitted all it may.
void Engine::schedule_arrival(std::int64_t from) {
  if (sc_.max_requests != 0 && out_.requests >= sc_.max_requests) return;
  const std::int64_t t = arrivals_.next_after(from);
  if (t != Arrivals::kNone) events_.push(t, EventType::kArrival);
}

void Engine::release(std::uint32_t s) {
  const Request& r = slots_[s];
  report_.attempts_made(r.arrival_second, r.db_attempts);
  slots_.release(s);
  --in_flight_;
}

TraceEvent Engine::event(TraceEvent::Kind kind, const Request& r) const {
  TraceEvent e;
  e.kind = kind;
  e.request = r.id;
  e.client = r.client;
  e.at = now();
  return e;
}

void Engine::dispatch(const Event& ev) {
  if (ev.type == EventType::kArrival) {
    on_arrival();
    return;
  }
  if (ev.type == EventType::kServiceDone) {
    if (copies_.finished(ev.slot, ev.tag) == nullptr) return;  // cancelled
    if (was_running_at_freeze(ev)) {
      // Frozen mid-query: it finishes as much later as the hang lasts.
      events_.push(ev.t + sc_.trigger.length.count(), EventType::kServiceDone, ev.slot, ev.tag);
      return;
    }
    on_service_done(ev);
    return;
  }
  if (ev.type == EventType::kHealthProbe) {
    on_health_probe(ev.slot);
    return;
  }
  if (ev.type == EventType::kLiveness) {
    on_liveness(ev.slot);
    return;
  }
  if (ev.type == EventType::kFreeze) {
    frozen_ = true;
    copies_.freeze(true);
    freeze_seq_ = events_.scheduled();
    return;
  }
  if (ev.type == EventType::kThaw) {
    frozen_ = false;
    copies_.freeze(false);
    copies_.start_queued(now_);
    return;
  }
  const Mark m = slots_.mark(ev.slot);
  if (m.tag != ev.tag) return;  // about an attempt (or a request) that is over
  switch (ev.type) {
    case EventType::kAttempt:
      if (m.phase == Phase::kWaiting || m.phase == Phase::kWaitingForProbe) {
        try_attempt(ev.slot);
      }
      return;
    case EventType::kTimeout:
      if (m.phase == Phase::kInAttempt) {
        routers_[slots_[ev.slot].client].unanswered(slots_[ev.slot].copy,
                                                    sc_.attempt_timeout.count());
        on_failure(ev.slot, timeout_status_);
      }
      return;
    case EventType::kHedge:
      if (m.phase == Phase::kInAttempt) on_hedge(ev.slot);
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

void Engine::on_arrival() {
  const std::uint64_t id = out_.requests++;
  ++current().arrivals;
  const std::uint32_t s = slots_.allocate();
  Request& r = slots_[s];
  r.id = id;
  r.arrival = now_;
  r.arrival_second = static_cast<std::uint32_t>(now_ / kSecondNs);
  r.client = arrivals_.pick_client();
  r.db_attempts = 0;
  r.priority = sc_.class_mix ? draw_class() : Priority::kNormal;
  report_.arrived(r.priority, now_);
  slots_.mark(s).phase = Phase::kWaiting;
  const Random rng(request_seed(sc_.seed, id));
  if (holdfast_) {
    // One window per request, opened by its first transient fault (or breaker refusal).
    r.policy.emplace<Guarded>(*shields_[shield_of(r)], kRead.with_priority(r.priority), st_.window,
                              clock_, rng);
  } else {
    r.policy.emplace<RetryState>(policy_, Operation::read("sim.read"), nullptr, rng);
  }
  ++in_flight_;
  out_.peak_in_flight = std::max<std::uint64_t>(out_.peak_in_flight, in_flight_);
  trace(event(TraceEvent::Kind::kArrival, r));
  try_attempt(s);
  schedule_arrival(now_);
}

// A class at random, with the scenario's shares.
Priority Engine::draw_class() noexcept {
  const ClassMix& m = *sc_.class_mix;
  double u = class_rng_.uniform() * (m[0] + m[1] + m[2]);
  for (std::size_t i = 0; i + 1 < m.size(); ++i) {
    if (u < m[i]) return static_cast<Priority>(i);
    u -= m[i];
  }
  return static_cast<Priority>(m.size() - 1);
}

// holdfast: asks the Shield (breaker) first; then sends the attempt to the database.
void Engine::try_attempt(std::uint32_t s) {
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
      // place in the Shield's queue (its class's list), mirrored here in the same order.
      ++out_.breaker_waits;
      const std::uint32_t tag = ++slots_.mark(s).tag;
      slots_.mark(s).phase = Phase::kWaitingForProbe;
      const auto line = static_cast<std::size_t>(shields_[b]->priority_of(g.call.operation()));
      waiters_[b][line].push_back(Waiter{s, tag});
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

void Engine::on_success(std::uint32_t s) {
  Request& r = slots_[s];
  const Duration latency(now_ - r.attempt_start);
  sync_clock();
  attempt_over(r, true);
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
  report_.succeeded(r.arrival, now_, r.priority);
  release(s);
}

void Engine::on_failure(std::uint32_t s, const Status& failure) {
  Request& r = slots_[s];
  const Duration latency(now_ - r.attempt_start);
  bool retry = false;
  Duration delay{};
  StopReason stop = StopReason::kNone;
  sync_clock();
  attempt_over(r, &failure != &timeout_status_ && &failure != &silent_status_);
  if (holdfast_) {
    Guarded& g = std::get<Guarded>(r.policy);
    const RetryDecision v = g.call.failed(std::move(g.permit), failure, now(), latency);
    retry = v.retry;
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
  slots_.mark(s).phase = Phase::kWaiting;
  if (fixed_delays_) {
    events_.push_after(now_, delay.count(), EventType::kAttempt, s, ++slots_.mark(s).tag);
  } else {
    events_.push(now_ + delay.count(), EventType::kAttempt, s, ++slots_.mark(s).tag);
  }
}

// After any call into Shield b: if it woke waiters (handed them places, or told them to
// decide again), they are at the front of their class's list in its queue, and so in
// ours, or at the back (waits that no longer fit): they go now. Each waiter is looked at
// once, however many places come back.
void Engine::wake_if_signalled(std::uint32_t b) {
  const std::uint64_t g = shields_[b]->wakes().generation();
  if (g == seen_generation_[b]) return;
  seen_generation_[b] = g;
  for (std::deque<Waiter>& list : waiters_[b]) {
    while (!list.empty() && woke(list.front())) {
      list.pop_front();
    }
    while (!list.empty() && woke(list.back())) {
      list.pop_back();
    }
  }
}

// False when `w` still waits; otherwise (woken: its attempt goes now; or no longer
// waiting) true.
bool Engine::woke(const Waiter& w) {
  Mark& m = slots_.mark(w.slot);
  if (m.tag != w.tag || m.phase != Phase::kWaitingForProbe) return true;
  if (!std::get<Guarded>(slots_[w.slot].policy).call.woken()) return false;
  events_.push(now_, EventType::kAttempt, w.slot, ++m.tag);
  return true;
}

// Listens to Shield b's breaker: its first opening since the trigger began, for the report.
void Engine::on_transition(std::size_t b, const BreakerTransition& t) {
  if (t.to != BreakerState::kOpen || opened_[b] || sc_.trigger.kind == TriggerKind::kNone) return;
  const std::int64_t since_start = ns_of(t.at) - trigger_start_ns_;
  if (since_start < 0) return;
  opened_[b] = true;
  const double s = static_cast<double>(since_start) / 1e9;
  std::vector<double>& list = out_.breaker_open_after_s;
  list.insert(std::upper_bound(list.begin(), list.end(), s), s);
}

// One look of Shield b's Liveness watch; when it finds the database silent, the attempts
// in flight through that Shield give up at once (pg::Database's reads do).
void Engine::on_liveness(std::uint32_t b) {
  sync_clock();
  (void)lives_[b]->tick(now());
  while (!silenced_.empty()) {
    const std::uint32_t silent = silenced_.back();
    silenced_.pop_back();
    for (std::uint32_t i = 0; i < slots_.size(); ++i) {
      if (slots_.mark(i).phase == Phase::kInAttempt && shield_of(slots_[i]) == silent) {
        on_failure(i, silent_status_);
      }
    }
  }
  wake_if_signalled(b);
  events_.push(now_ + lives_[b]->options().tick.count(), EventType::kLiveness, b);
}

// One turn of HealthProbe's loop for Shield b: probe_now() (a no-op unless the breaker is
// open), then announce the next run to the breaker.
void Engine::on_health_probe(std::uint32_t b) {
  sync_clock();
  const HealthProbe::ProbeReport out = probes_[b]->probe_now();
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

void Engine::close_second() {
  if (report_.next_second_ns() > now_) now_ = report_.next_second_ns();
  sync_clock();
  std::optional<double> open;
  if (!shields_.empty()) {
    std::size_t n = 0;
    for (const auto& sh : shields_)
      n += sh->breaker().state() != BreakerState::kClosed;
    open = static_cast<double>(n) / static_cast<double>(shields_.size());
  }
  report_.close_second(open, copies_.queued_total(), copies_.busy_total());
}

}  // namespace holdfast::sim::detail

namespace holdfast::sim {
Result<Report> run(const Scenario& scenario, const Strategy& strategy, const Tracer& trace) {
  if (Status s = scenario.validate(); !s.ok()) return s;
  if (strategy.max_attempts < 1) {
    return Status(Code::kInvalidArgument, "strategy " + strategy.name + ": attempts must be >= 1");
  }
  if (strategy.kind == StrategyKind::kHoldfast && strategy.window <= Duration::zero()) {
    return Status(Code::kInvalidArgument, "strategy " + strategy.name + ": window must be > 0");
  }
  ManualClock clock(ManualClock::Mode::kAutoAdvance);
  detail::Engine engine(scenario, strategy, clock, trace);
  return engine.run();
}

}  // namespace holdfast::sim
