#include "holdfast/shield.hpp"

#include <stdexcept>
#include <string>

namespace holdfast {
namespace {

long long to_ms_ceil(Duration d) {
  return std::chrono::ceil<std::chrono::milliseconds>(d).count();
}

// Our own shedding: worth trying again later (HTTP 503), but never an overload fault, so
// it can never feed a breaker.
constexpr Fault kShedding{RetryScope::kStatement, Outcome::kNotApplied, Pace::kSlow, false};

}  // namespace

Shield::Options Shield::with_clock(Options options, Clock& clock) {
  if (options.wake_jitter < Duration::zero()) {
    throw std::invalid_argument("Shield::Options::wake_jitter must not be negative, got " +
                                std::to_string(to_ms_ceil(options.wake_jitter)) + " ms");
  }
  if (options.release_concurrency < 1) {
    throw std::invalid_argument("Shield::Options::release_concurrency must be at least 1, got " +
                                std::to_string(options.release_concurrency));
  }
  options.reads.clock(clock);
  options.writes.clock(clock);
  return options;
}

Shield::Shield(std::string name, Clock& clock) : Shield(std::move(name), Options{}, clock) {}

Shield::Shield(std::string name, Options options, Clock& clock)
    : name_(std::move(name)),
      clock_(&clock),
      options_(with_clock(std::move(options), clock)),
      breaker_(options_.breaker, clock),
      throttle_(options_.throttle),
      release_slots_(options_.release_concurrency) {
  breaker_.add_listener([this](const BreakerTransition& t) {
    metrics_.count_transition(t.to);
    // Open -> half-open admits only the probe, which is not waiting: it wakes nobody.
    if (t.to != BreakerState::kHalfOpen) signal_.notify_all();
  });
  metrics_.attach(&breaker_, &throttle_);
}

Shield::~Shield() = default;

std::string Shield::metrics_text() const {
  return metrics_.prometheus_text(name_);
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

Random& Shield::Call::rng() {
  if (!rng_) {
    rng_.emplace(policy_->seed() ? Random(*policy_->seed() ^ 0x5851f42d4c957f2dULL)
                                 : Random::from_thread());
  }
  return *rng_;
}

void Shield::Call::release_slot() noexcept {
  holds_slot_ = false;
  shield_->release_slots_.fetch_add(1, std::memory_order_release);
  shield_->signal_.notify_all();
}

Shield::Admission Shield::Call::through_gate(TimePoint now) {
  Shield& shield = *shield_;
  // Read before trying, so a slot handed back after the try still wakes us.
  const std::uint64_t seen = shield.signal_.generation();
  int free = shield.release_slots_.load(std::memory_order_acquire);
  while (free > 0) {
    if (shield.release_slots_.compare_exchange_weak(free, free - 1, std::memory_order_acquire)) {
      waited_ = false;
      holds_slot_ = true;
      Admission go;
      go.kind = Admission::Kind::kAttempt;
      return go;
    }
  }
  // Every slot is out: wait for one to come back while the window lasts.
  RetryWindow& window = state().window();
  const TimePoint limit = window.deadline() - policy_->last_attempt_time();
  if (limit > now) {
    Admission a;
    a.kind = Admission::Kind::kWait;
    a.until = limit;
    a.wake = &shield.signal_;
    a.seen = seen;
    return a;
  }
  shield.metrics_.count_window_spent();
  stop_ = StopReason::kWindowSpent;
  Admission a;
  a.kind = Admission::Kind::kStop;
  a.status = Status(Code::kUnavailable,
                    "the database of '" + shield.name_ +
                        "' is back, and the requests that waited for it go " +
                        std::to_string(shield.options_.release_concurrency) +
                        " at a time; this one's window ended first",
                    kShedding);
  a.status.with_stop(StopReason::kWindowSpent, attempts_, std::chrono::seconds(1));
  return a;
}

void Shield::Call::succeeded(CircuitBreaker::Permit&& permit, Duration latency) noexcept {
  if (holds_slot_) [[unlikely]]
    release_slot();
  ++attempts_;
  stop_ = StopReason::kNone;
  permit.record(CallResult::kSuccess, latency);
  shield_->throttle_.record_success();
  shield_->metrics_.count_success();
  if (state_) state_->on_success();
}

Shield::Verdict Shield::Call::failed(CircuitBreaker::Permit&& permit, const Status& status,
                                     TimePoint now, Duration latency) {
  if (holds_slot_) release_slot();
  ++attempts_;
  Shield& shield = *shield_;
  permit.record(status, latency);
  shield.metrics_.count_fault(status.fault());
  if (status.fault().transient() && !is_own_shedding(status)) shield.throttle_.record_failure();

  RetryState& st = state();
  RetryDecision d = st.on_failure(status, now);
  if (!d.retry) {
    if (d.reason == StopReason::kPermanent && status.code() == Code::kCancelled) {
      d.reason = StopReason::kCancelled;
    }
    if (d.reason == StopReason::kWindowSpent) shield.metrics_.count_window_spent();
    stop_ = d.reason;
    Verdict v;
    v.status = st.give_up(Status(status), d.reason);
    return v;
  }
  if (!shield.throttle_.allow_retry(now)) {
    shield.metrics_.count_throttled();
    stop_ = StopReason::kThrottled;
    Verdict v;
    v.status = st.give_up(Status(status), StopReason::kThrottled);
    v.status.with_stop(StopReason::kThrottled, st.attempts(), shield.throttle_.retry_after(now));
    return v;
  }
  shield.metrics_.count_retry();
  policy_->notify_retry(
      RetryEvent{op_.label, st.attempts(), d.delay, st.window().remaining(now), status});
  Verdict v;
  v.kind = Verdict::Kind::kRetry;
  v.delay = d.delay;
  return v;
}

Shield::Admission Shield::Call::refused(const CircuitBreaker::Permit& permit, TimePoint now) {
  Shield& shield = *shield_;
  const Signal& signal = shield.signal_;
  const std::uint64_t seen = signal.generation();
  // The breaker changes its state before it notifies the signal: if it has changed since it
  // refused us, the refusal may be stale and `seen` may already include the wake-up.
  if (shield.breaker_.generation() != permit.generation()) return admit(now);

  // Being refused delays the request just as a fault would: its window opens now.
  RetryWindow& window = state().window();
  window.open(now);
  const TimePoint limit = window.deadline() - policy_->last_attempt_time();
  const Duration retry_after = permit.retry_after();
  TimePoint until{};
  bool wait = false;
  switch (permit.state()) {
    case BreakerState::kOpen:
      // Wait only for a probe that is due inside the window.
      until = now + retry_after;
      wait = until <= limit;
      break;
    case BreakerState::kHalfOpen:
      // A probe is out and may answer at any moment: wait for it while the window lasts.
      until = std::min(now + retry_after, limit);
      wait = until > now;
      break;
    case BreakerState::kClosed:
    case BreakerState::kIsolated:
      break;
  }
  if (wait) {
    waited_ = true;
    shield.metrics_.count_breaker_wait();
    Admission a;
    a.kind = Admission::Kind::kWait;
    a.until = until;
    a.wake = &signal;
    a.seen = seen;
    const Duration jitter = shield.options_.wake_jitter;
    if (jitter > Duration::zero()) {
      a.jitter = Duration(
          static_cast<Duration::rep>(rng().uniform() * static_cast<double>(jitter.count())));
    }
    return a;
  }

  shield.metrics_.count_breaker_rejected();
  stop_ = StopReason::kBreakerOpen;
  std::string message = "circuit breaker of '" + shield.name_ + "' is ";
  message += to_string(permit.state());
  message += "; retry after " + std::to_string(to_ms_ceil(retry_after)) + " ms";
  Admission a;
  a.kind = Admission::Kind::kStop;
  a.status = Status(Code::kUnavailable, std::move(message), kShedding);
  a.status.with_stop(StopReason::kBreakerOpen, attempts_, retry_after);
  return a;
}

}  // namespace holdfast
