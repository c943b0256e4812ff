#include "holdfast/core/retry.hpp"

#include <stdexcept>
#include <string>

#include "holdfast/log/console.hpp"

namespace holdfast {
namespace {

// The longest wait for a server that refuses connects (a failure with retry_after() and
// no stop reason): about what a restart takes, and the PostgreSQL pool's longest connect
// backoff.
constexpr Duration kLongestWaitForARefusingServer = std::chrono::seconds(1);

void default_retry_line(const RetryEvent& e) noexcept {
  // Retries are DEBUG, console only: a WARN would be one more write to the very database
  // that is refusing us (the origin's lesson).
  if (!console::enabled(Level::kDebug)) return;
  try {
    std::string line;
    line.reserve(160);
    line.append(e.label.empty() ? std::string_view("operation") : e.label);
    line += ": attempt " + std::to_string(e.attempt) + " failed (" + e.status.to_string() +
            "); retrying in " + ms_text(e.delay) + ", window left " + ms_text(e.window_remaining);
    console::write(Level::kDebug, "retry", line);
  } catch (...) {
  }
}

}  // namespace

// retry_policy.hpp writes the default window as a number, to stay light.
static_assert(RetryWindow::kDefaultLength == std::chrono::seconds(6));

RetryPolicy::RetryPolicy() : clock_(&Clock::system()) {}

RetryPolicy RetryPolicy::session_reads() {
  RetryPolicy p;
  p.backoff(Backoff::session_reads());
  return p;
}

RetryPolicy RetryPolicy::no_retry() {
  RetryPolicy p;
  p.max_attempts(1);
  return p;
}

RetryPolicy& RetryPolicy::max_attempts(int n) {
  if (n < 1) {
    throw std::invalid_argument("RetryPolicy::max_attempts must be at least 1, got " +
                                std::to_string(n));
  }
  max_attempts_ = n;
  return *this;
}

RetryPolicy& RetryPolicy::backoff(Backoff b) {
  backoff_ = std::move(b);
  return *this;
}

RetryPolicy& RetryPolicy::window(Duration length) {
  if (length <= Duration::zero()) {
    throw std::invalid_argument("RetryPolicy::window must be greater than zero, got " +
                                ms_text(length));
  }
  window_ = length;
  return *this;
}

RetryPolicy& RetryPolicy::last_attempt_time(Duration d) {
  if (d < Duration::zero()) {
    throw std::invalid_argument("RetryPolicy::last_attempt_time must not be negative, got " +
                                ms_text(d));
  }
  last_attempt_time_ = d;
  return *this;
}

RetryPolicy& RetryPolicy::clock(Clock& c) noexcept {
  clock_ = &c;
  return *this;
}

RetryPolicy& RetryPolicy::seed(std::uint64_t seed) noexcept {
  seed_ = seed;
  return *this;
}

RetryPolicy& RetryPolicy::on_retry(RetryHook hook) {
  on_retry_ = std::move(hook);
  return *this;
}

void RetryPolicy::notify_retry(const RetryEvent& event) const noexcept {
  if (!on_retry_) {
    default_retry_line(event);
    return;
  }
  try {
    on_retry_(event);
  } catch (...) {
    // A hook must not turn a retry into a failure.
  }
}

RetryState::RetryState(const RetryPolicy& policy, Operation op, RetryWindow* window)
    : RetryState(policy, op, window,
                 policy.seed() ? Random(*policy.seed()) : Random::from_thread()) {}

RetryState::RetryState(const RetryPolicy& policy, Operation op, RetryWindow* window, Random rng)
    : policy_(&policy), op_(op), window_(window), rng_(rng) {
  if (window_ == nullptr) {
    own_window_.emplace(policy.window(), policy.clock());
    window_ = &*own_window_;
  }
}

RetryDecision RetryState::on_failure(const Status& status, TimePoint now) {
  ++attempts_;
  // A status some inner loop gave up on is final here too: nested loops never multiply
  // attempts (docs/adr/0001-nested-retry-loops.md).
  if (status.stop_reason() != StopReason::kNone) return RetryDecision::stop(status.stop_reason());
  const Fault& fault = status.fault();
  if (!fault.transient()) return RetryDecision::stop(StopReason::kPermanent);
  if (fault.scope == RetryScope::kTransaction && !op_.reruns_transaction) {
    return RetryDecision::stop(StopReason::kNotSafeToRepeat);
  }
  if (fault.outcome == Outcome::kUnknown && op_.idempotency != Idempotency::kIdempotent) {
    return RetryDecision::stop(StopReason::kNotSafeToRepeat);
  }
  window_->open(now);  // the backoff is a wait (window.hpp's rule)
  if (attempts_ >= policy_->max_attempts())
    return RetryDecision::stop(StopReason::kAttemptsExhausted);
  const Duration left = window_->remaining(now) - policy_->last_attempt_time();
  if (left <= Duration::zero()) return RetryDecision::stop(StopReason::kWindowSpent);
  Duration delay = policy_->backoff().delay(attempts_, previous_delay_, rng_);
  // Never sleep past the window: shorten the wait so one last attempt lands inside it.
  if (delay > left) delay = left;
  // The next attempt could not be served before retry_after() (a pool backing off its
  // connects): rather than wait to be refused, the caller answers now, with when.
  if (status.retry_after() > delay) return RetryDecision::stop(StopReason::kBreakerOpen);
  // A server that refuses connects is restarting, back within about a second, or away for
  // longer: the loop rides out the short waits, and answers now rather than wait longer.
  if (status.retry_after() > Duration::zero() && delay > kLongestWaitForARefusingServer) {
    return RetryDecision::stop(StopReason::kBreakerOpen);
  }
  previous_delay_ = delay;
  return RetryDecision::retry_after(delay);
}

Status RetryState::give_up(Status last, StopReason reason) const {
  if (last.stop_reason() != StopReason::kNone) return last;
  last.with_stop(reason, attempts_, last.retry_after());
  return last;
}

namespace detail {
bool PlainSteps::failed(const Status& status, TimePoint& start, Status& stop) {
  const RetryPolicy& policy = state_.policy();
  Clock& clock = policy.clock();
  const TimePoint now = clock.now();
  const RetryDecision d = state_.on_failure(status, now);
  if (!d.retry) {
    stop_ = d.reason;
    stop = state_.give_up(Status(status), d.reason);
    return false;
  }
  policy.notify_retry(RetryEvent{state_.operation().label, state_.attempts(), d.delay,
                                 state_.window().remaining(now), status});
  clock.sleep_for(d.delay);
  state_.add_slept(d.delay);
  start = now + d.delay;
  return true;
}

Status classifier_returned_ok() {
  return Status(Code::kInternal, "the exception classifier returned OK for a thrown exception");
}
}  // namespace detail

}  // namespace holdfast
