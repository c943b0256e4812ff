#include "holdfast/core/shield.hpp"

#include <limits>
#include <stdexcept>
#include <string>

#include "shield_line.hpp"

namespace holdfast {
using namespace shield_detail;

Shield::Options Shield::with_clock(Options options, Clock& clock) {
  if (options.queue_wait < Duration::zero()) {
    throw std::invalid_argument("Shield::Options::queue_wait must not be negative, got " +
                                ms_text(options.queue_wait));
  }
  if (options.probe_wait < Duration::zero()) {
    throw std::invalid_argument("Shield::Options::probe_wait must not be negative, got " +
                                ms_text(options.probe_wait));
  }
  options.reads.clock(clock);
  options.writes.clock(clock);
  return options;
}

ShieldOptions ShieldOptions::single_attempt() {
  ShieldOptions o;
  o.breaker.failure_ratio = 1.0;
  o.breaker.minimum_calls = std::numeric_limits<int>::max();
  o.breaker.consecutive_failures = 0;
  o.breaker.busy_consecutive_failures = 0;
  constexpr int kUnlimited = 1 << 20;
  o.limit.initial = o.limit.min = o.limit.max = kUnlimited;
  o.reads = RetryPolicy::no_retry();
  o.reads.window(std::chrono::hours(1));
  o.writes = o.reads;
  o.queue_wait = Duration::zero();
  o.probe_wait = Duration::zero();
  return o;
}

Shield::Shield(std::string name, Clock& clock) : Shield(std::move(name), Options{}, clock) {}

Shield::Shield(std::string name, Options options, Clock& clock)
    : name_(std::move(name)),
      clock_(&clock),
      system_clock_(&clock == &Clock::system()),
      options_(with_clock(std::move(options), clock)),
      breaker_(options_.breaker, clock),
      limit_(options_.limit),
      throttle_(options_.throttle) {
  breaker_.add_listener([this](const BreakerTransition& t) { on_transition(t); });
  metrics_.attach(&breaker_, &throttle_, &limit_);
}

Shield::~Shield() = default;

std::string Shield::metrics_text() const {
  return metrics_.prometheus_text(name_);
}

void Shield::server_silent(TimePoint now) {
  last_overload_fast_.store(false, std::memory_order_relaxed);
  metrics_.count_silence();
  (void)breaker_.trip(now);
}

void Shield::server_back(TimePoint now, Duration latency) {
  CircuitBreaker::Permit permit = breaker_.acquire_health_probe(now);
  if (permit) permit.record(Status(), latency);
}

// ---- Call ------------------------------------------------------------------------------

RetryState& Shield::Call::state() {
  if (!state_) {
    if (rng_) {
      state_.emplace(*policy_, op_, window_, *rng_);
    } else {
      state_.emplace(*policy_, op_, window_);
    }
  }
  return *state_;
}

void Shield::Call::release_place() noexcept {
  holds_place_ = false;
  shield_->release_place();
}

void Shield::Call::abandon() noexcept {
  // Gone (cancelled, an exception): its wait says nothing about the line.
  if (queued_ && shield_->leave_queue(*this, TimePoint{})) holds_place_ = true;
  if (holds_place_) release_place();
}

Duration Shield::Call::attempt_time() const noexcept {
  return std::max(policy_->last_attempt_time(), 2 * shield_->limit_.normal_latency());
}

Shield::Admission Shield::Call::admit_after_wait(TimePoint now) {
  if (!shield_->leave_queue(*this, now)) return admit(now);
  // Handed a place: it is this call's, unless the breaker refuses it now.
  CircuitBreaker::Permit permit = shield_->breaker_.acquire(now);
  if (!permit) {
    shield_->release_place();
    return refused(permit, now);
  }
  return attempt(std::move(permit));
}

Shield::Admission Shield::Call::admit_slow(CircuitBreaker::Permit&& permit, TimePoint now) {
  Shield& shield = *shield_;
  if (!permit.is_probe()) return at_capacity(now);  // the permit goes unused: neutral
  // A probe: only for a caller whose window still covers an attempt, so that a probe that
  // fails tells about the database and not about the caller's window.
  if (window_ != nullptr && window_->is_open() && window_->remaining(now) < attempt_time()) {
    permit.cancel();
    shield.metrics_.count_window_spent();
    stop_ = StopReason::kWindowSpent;
    Status s(Code::kUnavailable,
             "the database of '" + shield.name_ +
                 "' is being probed; this request's window is too short to carry the probe",
             kShedding);
    s.with_stop(StopReason::kWindowSpent, attempts_, shield.breaker_.options().open_initial);
    return stop(StopReason::kWindowSpent, std::move(s));
  }
  shield.limit_.acquire();
  return attempt(std::move(permit));
}

Shield::Admission Shield::Call::wait(TimePoint now, TimePoint until) {
  // What the signal said before joining the line: a place handed to this call during
  // enqueue(), or by another thread right after it, notifies the signal, and a sleeper that
  // had read the generation after that notice would sleep until `until` (the end of its
  // wait) with its place granted.
  if (!signal_) signal_.emplace();
  const std::uint64_t seen = signal_->generation();
  shield_->enqueue(*this, now, until);
  Admission a;
  a.kind = Admission::Kind::kWait;
  a.until = until;
  a.wake = &*signal_;
  a.seen = seen;
  return a;
}

Shield::Admission Shield::Call::stop(StopReason reason, Status status) {
  stop_ = reason;
  Admission a;
  a.kind = Admission::Kind::kStop;
  a.status = std::move(status);
  return a;
}

Shield::Admission Shield::Call::at_capacity(TimePoint now) {
  Shield& shield = *shield_;
  const Priority priority = shield.priority_of(op_);
  // What the line allows this class now, and how many wait ahead of it (its class and the
  // higher ones: a lower class never delays it).
  const LineView line = shield.line_view(priority, now);
  const Duration expected = shield.limit_.expected_wait(line.ahead);
  // Queued, a request waits: its window opens now (window.hpp's rule).
  RetryWindow& window = state().window();
  window.open(now);
  // A first attempt queues for what the line allows its class (ADR 0035: critical the
  // interval; normal the target while the line stands, else the interval; background the
  // target, and nothing while it stands), given once, at its first wait. A request that waited for
  // the breaker's probe keeps its place in line while its window lasts: the database it waited for
  // is back, and the line moves at the pace it answers. Other retries do not queue: they use spare
  // capacity only.
  if ((attempts_ == 0 || waited_for_probe_) && shield.options_.queue_wait > Duration::zero()) {
    const TimePoint last_start = window.deadline() - attempt_time();
    if (waited_for_probe_) {
      // The estimate is of no use to a request that waited out the outage: the recent
      // latency is from before it. It waits for its turn while its window lasts.
      if (now < last_start) return wait(now, last_start);
    } else {
      if (queue_deadline_ == TimePoint{}) queue_deadline_ = now + line.allowance;
      const TimePoint until = std::min(queue_deadline_, last_start);
      const Duration need = kWaitMargin * expected;
      if (now + need <= until) return wait(now, until);
      // Not even what the line allows: overload, whatever the line's age. Background is
      // allowed less than the others: its being shed says nothing about them.
      if (now + need > queue_deadline_ && priority != Priority::kBackground) {
        shield.turned_away(now);
      }
    }
  }
  shield.metrics_.count_at_capacity(priority);
  const Duration retry_after = std::max<Duration>(expected, std::chrono::milliseconds(1));
  Status s(Code::kUnavailable,
           "the database of '" + shield.name_ + "' is at its capacity (" +
               std::to_string(static_cast<long long>(shield.limit_.limit())) +
               " calls at once); retry after " + ms_text(retry_after),
           kShedding);
  s.with_stop(StopReason::kAtCapacity, attempts_, retry_after);
  return stop(StopReason::kAtCapacity, std::move(s));
}

void Shield::Call::succeeded(CircuitBreaker::Permit&& permit, Duration latency) noexcept {
  if (holds_place_) release_place();
  ++attempts_;
  stop_ = StopReason::kNone;
  shield_->on_success(std::move(permit), latency);
  if (state_) state_->on_success();
}

bool Shield::Call::after_failure(CircuitBreaker::Permit&& permit, const Status& status,
                                 TimePoint t0, TimePoint& start, Status& stop) {
  Clock& clock = *shield_->clock_;
  const TimePoint end = clock.now();
  RetryDecision d = failed(std::move(permit), status, end, end - t0);
  if (!d.retry) {
    stop = std::move(d.status);
    return false;
  }
  clock.sleep_for(d.delay);
  start = clock.now();
  add_slept(start - end);
  return true;
}

RetryDecision Shield::Call::failed(CircuitBreaker::Permit&& permit, const Status& status,
                                   TimePoint now, Duration latency) {
  if (holds_place_) release_place();
  ++attempts_;
  queue_deadline_ = {};
  waited_for_probe_ = false;
  Shield& shield = *shield_;
  const Fault& fault = status.fault();
  const bool shedding = is_own_shedding(status);
  RetryState& st = state();
  if (permit.is_probe() && st.window().is_open() && now >= st.window().deadline()) {
    // The probe ran out of its caller's window: no evidence against the database.
    permit.cancel();
  } else {
    permit.record(status, latency);
  }
  // A refusal by holdfast itself (a pool in its reconnect backoff, an inner Shield) never
  // reached the database: no attempt in the metrics.
  if (!shedding) shield.metrics_.count_fault(fault);
  if (fault.overload && !shedding) {
    shield.last_overload_fast_.store(fault.pace == Pace::kFast, std::memory_order_relaxed);
    // Timed out with its work still on the database: a dropped call for the limit.
    if (fault.outcome == Outcome::kUnknown && latency > Duration::zero()) {
      shield.limit_.record(latency, true);
    }
  }
  if (fault.transient() && !shedding) shield.throttle_.record_failure();

  RetryDecision d = st.on_failure(status, now);
  if (!d.retry) {
    if (d.reason == StopReason::kPermanent && status.code() == Code::kCancelled) {
      d.reason = StopReason::kCancelled;
    }
    if (d.reason == StopReason::kWindowSpent) shield.metrics_.count_window_spent();
    stop_ = d.reason;
    d.status = st.give_up(Status(status), d.reason);
    return d;
  }
  // Retries use spare capacity: while the database has room to spare they go (admit()
  // checks the room); once it is busy, the throttle must allow them too.
  if (shield.limit_.busy() && !shield.throttle_.allow_retry(now)) {
    shield.metrics_.count_throttled();
    return stop_after_failure(
        st.give_up(Status(status), StopReason::kThrottled)
            .with_stop(StopReason::kThrottled, st.attempts(), shield.throttle_.retry_after(now)));
  }
  // The breaker is open now (this failure may have opened it) and the database is down
  // rather than locked: the retry would only be refused after its backoff. Answer now.
  const bool contention = shield.last_overload_fast_.load(std::memory_order_relaxed);
  if (!contention && shield.breaker_.state() != BreakerState::kClosed) {
    const Duration retry_after = shield.breaker_.retry_after(now);
    shield.metrics_.count_breaker_rejected();
    return stop_after_failure(st.give_up(Status(status), StopReason::kBreakerOpen)
                                  .with_stop(StopReason::kBreakerOpen, st.attempts(), retry_after));
  }
  shield.metrics_.count_retry();
  policy_->notify_retry(
      RetryEvent{op_.label, st.attempts(), d.delay, st.window().remaining(now), status});
  return d;
}

RetryDecision Shield::Call::stop_after_failure(Status status) {
  stop_ = status.stop_reason();
  RetryDecision d;
  d.reason = stop_;
  d.status = std::move(status);
  return d;
}

Shield::Admission Shield::Call::refused(const CircuitBreaker::Permit& permit, TimePoint now) {
  Shield& shield = *shield_;
  // The breaker changes its state before it wakes anyone: if it has changed since it
  // refused us, the refusal may be stale.
  if (shield.breaker_.generation() != permit.generation()) return admit(now);

  // Refused, a request waits or gives up: its window opens now (window.hpp's rule).
  RetryWindow& window = state().window();
  window.open(now);
  const Duration retry_after = permit.retry_after();
  // Waiting for the probe pays only when the breaker opened on lock contention (the holder
  // will let go), the probe is due soon, and the window covers it and one more attempt.
  // After a refused connection or a timeout the answer is now, with Retry-After.
  const bool contention = shield.last_overload_fast_.load(std::memory_order_relaxed);
  const bool open_or_probing =
      permit.state() == BreakerState::kOpen || permit.state() == BreakerState::kHalfOpen;
  // Half-open, the probe is out and may answer at any moment.
  const bool probing = permit.state() == BreakerState::kHalfOpen;
  if (contention && open_or_probing && (probing || retry_after <= shield.options_.probe_wait)) {
    const TimePoint until = now + std::min(retry_after, shield.options_.probe_wait);
    if (until <= window.deadline() - attempt_time()) {
      shield.metrics_.count_breaker_wait();
      waited_for_probe_ = true;
      return wait(now, until);
    }
  }

  shield.metrics_.count_breaker_rejected();
  std::string message = "circuit breaker of '" + shield.name_ + "' is ";
  message += to_string(permit.state());
  message += "; retry after " + ms_text(retry_after);
  Status s(Code::kUnavailable, std::move(message), kShedding);
  s.with_stop(StopReason::kBreakerOpen, attempts_, retry_after);
  return stop(StopReason::kBreakerOpen, std::move(s));
}

}  // namespace holdfast
