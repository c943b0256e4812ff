#include "holdfast/core/circuit_breaker.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace holdfast {
namespace {

constexpr int kMaxBuckets = detail::kMaxWindowBuckets;
constexpr int kMaxProbes = 64;

[[noreturn]] void bad_option(const char* field, const std::string& rule) {
  throw std::invalid_argument(std::string("CircuitBreaker::Options::") + field + " " + rule);
}

const CircuitBreaker::Options& validated(const CircuitBreaker::Options& o) {
  if (!(o.failure_ratio > 0.0 && o.failure_ratio <= 1.0)) {
    bad_option("failure_ratio", "must be in (0, 1], got " + std::to_string(o.failure_ratio));
  }
  if (o.minimum_calls < 1) {
    bad_option("minimum_calls", "must be at least 1, got " + std::to_string(o.minimum_calls));
  }
  if (o.window <= Duration::zero()) {
    bad_option("window", "must be greater than zero, got " + ms_text(o.window));
  }
  if (o.window_buckets < 1 || o.window_buckets > kMaxBuckets) {
    bad_option("window_buckets", "must be in [1, 64], got " + std::to_string(o.window_buckets));
  }
  if (o.window / o.window_buckets < std::chrono::microseconds(1)) {
    bad_option("window", "divided by window_buckets must be at least 1 microsecond, got " +
                             ms_text(o.window) + " / " + std::to_string(o.window_buckets));
  }
  if (o.consecutive_failures < 0) {
    bad_option("consecutive_failures",
               "must not be negative, got " + std::to_string(o.consecutive_failures));
  }
  if (o.busy_consecutive_failures < 0) {
    bad_option("busy_consecutive_failures",
               "must not be negative, got " + std::to_string(o.busy_consecutive_failures));
  }
  if (o.slow_call_threshold < Duration::zero()) {
    bad_option("slow_call_threshold",
               "must not be negative, got " + ms_text(o.slow_call_threshold));
  }
  if (o.open_initial <= Duration::zero()) {
    bad_option("open_initial", "must be greater than zero, got " + ms_text(o.open_initial));
  }
  if (o.open_max < o.open_initial) {
    bad_option("open_max", "must be at least open_initial (" + ms_text(o.open_initial) + "), got " +
                               ms_text(o.open_max));
  }
  if (o.half_open_probes < 1 || o.half_open_probes > kMaxProbes) {
    bad_option("half_open_probes", "must be in [1, 64], got " + std::to_string(o.half_open_probes));
  }
  if (o.probe_successes_to_close < 1) {
    bad_option("probe_successes_to_close",
               "must be at least 1, got " + std::to_string(o.probe_successes_to_close));
  }
  if (o.probe_lease <= Duration::zero()) {
    bad_option("probe_lease", "must be greater than zero, got " + ms_text(o.probe_lease));
  }
  return o;
}

}  // namespace

std::string_view to_string(BreakerState state) noexcept {
  switch (state) {
    case BreakerState::kClosed:
      return "closed";
    case BreakerState::kOpen:
      return "open";
    case BreakerState::kHalfOpen:
      return "half_open";
    case BreakerState::kIsolated:
      return "isolated";
  }
  return "?";
}

std::string_view to_string(TransitionReason reason) noexcept {
  switch (reason) {
    case TransitionReason::kFailureRatio:
      return "failure ratio";
    case TransitionReason::kConsecutiveFailures:
      return "consecutive failures";
    case TransitionReason::kProbeDue:
      return "probe due";
    case TransitionReason::kProbeFailed:
      return "probe failed";
    case TransitionReason::kProbeLeaseExpired:
      return "probe lease expired";
    case TransitionReason::kProbesSucceeded:
      return "probes succeeded";
    case TransitionReason::kHealthProbeSucceeded:
      return "health probe succeeded";
    case TransitionReason::kSilence:
      return "silence";
    case TransitionReason::kIsolated:
      return "isolated";
    case TransitionReason::kReset:
      return "reset";
  }
  return "?";
}

bool is_own_shedding(const Status& status) noexcept {
  switch (status.stop_reason()) {
    case StopReason::kBreakerOpen:
    case StopReason::kThrottled:
    case StopReason::kWindowSpent:
    case StopReason::kCancelled:
    case StopReason::kAtCapacity:
      return true;
    default:
      return false;
  }
}

namespace detail {
CallResult breaker_result_of_error(const Status& status) noexcept {
  if (status.ok()) return CallResult::kSuccess;
  if (status.code() == Code::kCancelled || is_own_shedding(status)) return CallResult::kNeutral;
  if (!status.fault().overload) return CallResult::kNeutral;
  // A refusal: the server named when it takes calls again (a pool's failed connect), or
  // refused the pool's probe of it once more.
  const bool refused =
      status.retry_after() > Duration::zero() && (status.stop_reason() == StopReason::kNone ||
                                                  status.stop_reason() == StopReason::kProbeFailed);
  return refused ? CallResult::kRefused : CallResult::kFailure;
}
}  // namespace detail

// At most one state change happens under one hold of mutex_; it is published after.
struct CircuitBreaker::Pending {
  BreakerTransition transition;
  bool set = false;
};

CircuitBreaker::CircuitBreaker() : CircuitBreaker(Options{}) {}

CircuitBreaker::CircuitBreaker(Options options, Clock& clock)
    : options_(validated(options)),
      clock_(&clock),
      slow_ns_(options.slow_call_threshold.count()),
      window_(options.window_buckets, (options.window / options.window_buckets).count()),
      open_period_ns_(options.open_initial.count()),
      leases_(static_cast<std::size_t>(options.half_open_probes)),
      listeners_(std::make_shared<const std::vector<Listener>>()) {}

CircuitBreaker::~CircuitBreaker() = default;

// ---- the window ------------------------------------------------------------------------

void CircuitBreaker::forget_window_locked(std::int64_t now_ns) noexcept {
  window_.forget(now_ns);
  consecutive_.store(0, std::memory_order_relaxed);
  refused_.store(0, std::memory_order_relaxed);
}

WindowCounts CircuitBreaker::window_counts(TimePoint now) const noexcept {
  return window_.sum(now.time_since_epoch().count());
}

// ---- state changes (under mutex_) -----------------------------------------------------

void CircuitBreaker::move_locked(BreakerState to, TransitionReason reason, std::int64_t now_ns,
                                 Pending& pending) {
  const std::uint64_t w = word_.load(std::memory_order_relaxed);
  const std::uint64_t generation = (w >> 2) + 1;
  word_.store((generation << 2) | static_cast<std::uint64_t>(to), std::memory_order_release);
  pending.transition = BreakerTransition{
      state_of(w), to, reason, TimePoint(Duration(now_ns)), generation, Duration::zero()};
  pending.set = true;
}

void CircuitBreaker::open_locked(std::int64_t now_ns, Duration period, TransitionReason reason,
                                 Pending& pending) {
  for (ProbeLease& l : leases_)
    l.busy = false;
  free_leases_.store(0, std::memory_order_relaxed);
  first_lease_expiry_ns_.store(std::numeric_limits<std::int64_t>::max(), std::memory_order_relaxed);
  probe_successes_ = 0;
  open_period_ns_.store(period.count(), std::memory_order_relaxed);
  // Published before the state word (release) so a reader that sees "open" sees its end.
  open_until_ns_.store(now_ns + period.count(), std::memory_order_relaxed);
  move_locked(BreakerState::kOpen, reason, now_ns, pending);
  pending.transition.open_for = period;
}

void CircuitBreaker::close_locked(std::int64_t now_ns, TransitionReason reason, Pending& pending) {
  for (ProbeLease& l : leases_)
    l.busy = false;
  free_leases_.store(0, std::memory_order_relaxed);
  probe_successes_ = 0;
  open_period_ns_.store(options_.open_initial.count(), std::memory_order_relaxed);
  forget_window_locked(now_ns);
  move_locked(BreakerState::kClosed, reason, now_ns, pending);
}

void CircuitBreaker::expire_leases_locked(std::int64_t now_ns, Pending& pending) {
  for (const ProbeLease& l : leases_) {
    if (l.busy && l.expires_ns <= now_ns) {
      const Duration doubled = std::min(
          Duration(open_period_ns_.load(std::memory_order_relaxed)) * 2, options_.open_max);
      open_locked(now_ns, doubled, TransitionReason::kProbeLeaseExpired, pending);
      return;
    }
  }
}

void CircuitBreaker::publish(const Pending& pending) noexcept {
  if (!pending.set) return;
  // Waiters first: they are the requests waiting for this very change. Open -> half-open
  // admits only the probe (which is not waiting), so it wakes nobody.
  if (pending.transition.to != BreakerState::kHalfOpen) signal_.notify_all();
  std::shared_ptr<const std::vector<Listener>> listeners;
  {
    std::lock_guard<std::mutex> lock(listeners_mutex_);
    listeners = listeners_;
  }
  for (const Listener& listener : *listeners) {
    try {
      listener(pending.transition);
    } catch (...) {
      // A listener must not break the breaker.
    }
  }
}

// ---- acquiring -------------------------------------------------------------------------

namespace {

// The announced health probe at `next`, every `interval`: its next run after `now_ns` (the
// one after it if that moment has passed: a probe running right now may still succeed and
// wake everybody), or 0 when the announcement is older than two intervals (the prober is
// gone or stuck).
[[gnu::noinline]] std::int64_t announced_probe_ns(std::int64_t next, std::int64_t interval,
                                                  std::int64_t now_ns) noexcept {
  if (interval <= 0 || now_ns - next > 2 * interval) return 0;
  std::int64_t at = next;
  if (at <= now_ns) at += ((now_ns - at) / interval + 1) * interval;
  return at;
}

// How long an open breaker refuses, at `now_ns`: until its open period ends at `until_ns`
// or, with a health probe due at `probe_at` (0: none), until that probe. Kept inline: the
// open-state rejection is on the overload path.
[[gnu::always_inline]] inline Duration open_wait(std::int64_t now_ns, std::int64_t until_ns,
                                                 std::int64_t probe_at) noexcept {
  std::int64_t wait = until_ns - now_ns;
  if (probe_at != 0) [[unlikely]] {
    wait = wait > 0 ? std::min(wait, probe_at - now_ns) : probe_at - now_ns;
  }
  return Duration(std::max<std::int64_t>(wait, 0));
}

// The next run of the health probe announced in `next` and `interval` (see
// announced_probe_ns()), or 0 when none is announced. Internal, so that it inlines.
inline std::int64_t next_probe_ns(const std::atomic<std::int64_t>& next,
                                  const std::atomic<std::int64_t>& interval,
                                  std::int64_t now_ns) noexcept {
  const std::int64_t at = next.load(std::memory_order_acquire);
  if (at == 0) [[likely]]
    return 0;
  return announced_probe_ns(at, interval.load(std::memory_order_relaxed), now_ns);
}

}  // namespace

CircuitBreaker::Permit CircuitBreaker::acquire_slow(TimePoint now) noexcept {
  const std::int64_t ns = now.time_since_epoch().count();
  for (;;) {
    const std::uint64_t w = word_.load(std::memory_order_acquire);
    const BreakerState s = state_of(w);
    if (s == BreakerState::kClosed) return Permit(this, w, ns, Permit::Kind::kCall, s, 0);
    if (s == BreakerState::kIsolated) {
      return Permit(nullptr, w, options_.open_max.count(), Permit::Kind::kRefused, s, 0);
    }
    if (s == BreakerState::kOpen) {
      // While a health probe is announced, it alone tries the database: no request is
      // made the half-open trial (and kept waiting by a server that may not answer).
      const std::int64_t until = open_until_ns_.load(std::memory_order_acquire);
      const std::int64_t probe_at = next_probe_ns(health_next_ns_, health_interval_ns_, ns);
      if (ns < until || probe_at != 0) {
        return Permit(nullptr, w, open_wait(ns, until, probe_at).count(), Permit::Kind::kRefused, s,
                      0);
      }
    } else if (free_leases_.load(std::memory_order_acquire) == 0 &&
               ns < first_lease_expiry_ns_.load(std::memory_order_acquire)) {
      // Half-open with every lease out and none expired: refuse without the lock.
      return Permit(nullptr, w, first_lease_expiry_ns_.load(std::memory_order_relaxed) - ns,
                    Permit::Kind::kRefused, s, 0);
    }

    Pending pending;
    Permit result;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (word_.load(std::memory_order_relaxed) != w) continue;  // changed: look again
      if (s == BreakerState::kOpen) {
        move_locked(BreakerState::kHalfOpen, TransitionReason::kProbeDue, ns, pending);
        free_leases_.store(options_.half_open_probes, std::memory_order_relaxed);
        first_lease_expiry_ns_.store(std::numeric_limits<std::int64_t>::max(),
                                     std::memory_order_relaxed);
      } else {
        expire_leases_locked(ns, pending);
      }
      const std::uint64_t now_word = word_.load(std::memory_order_relaxed);
      if (state_of(now_word) == BreakerState::kOpen) {
        // A lease expired: the breaker just opened again.
        const std::int64_t until = open_until_ns_.load(std::memory_order_relaxed);
        result = Permit(
            nullptr, now_word,
            open_wait(ns, until, next_probe_ns(health_next_ns_, health_interval_ns_, ns)).count(),
            Permit::Kind::kRefused, BreakerState::kOpen, 0);
      } else {
        std::int64_t first_expiry = std::numeric_limits<std::int64_t>::max();
        int taken = -1;
        for (std::size_t i = 0; i < leases_.size(); ++i) {
          ProbeLease& l = leases_[i];
          if (!l.busy && taken < 0) {
            l.busy = true;
            l.expires_ns = ns + options_.probe_lease.count();
            taken = static_cast<int>(i);
          }
          if (l.busy) first_expiry = std::min(first_expiry, l.expires_ns);
        }
        first_lease_expiry_ns_.store(first_expiry, std::memory_order_relaxed);
        if (taken >= 0) {
          free_leases_.fetch_sub(1, std::memory_order_release);
          result = Permit(this, now_word, ns, Permit::Kind::kProbe, BreakerState::kHalfOpen,
                          static_cast<std::uint8_t>(taken));
        } else {
          result = Permit(nullptr, now_word, std::max<std::int64_t>(first_expiry - ns, 0),
                          Permit::Kind::kRefused, BreakerState::kHalfOpen, 0);
        }
      }
    }
    publish(pending);
    return result;
  }
}

CircuitBreaker::Permit CircuitBreaker::acquire_health_probe(TimePoint now) noexcept {
  const std::int64_t ns = now.time_since_epoch().count();
  const std::uint64_t w = word_.load(std::memory_order_acquire);
  const BreakerState s = state_of(w);
  // Half-open too: a request's probe may be slow to answer (a pooler holding it), and the
  // breaker must not wait for it when the database is back.
  const bool admissible = s == BreakerState::kOpen || s == BreakerState::kHalfOpen;
  if (!admissible || health_out_.exchange(true, std::memory_order_acq_rel)) {
    return Permit(nullptr, w, retry_after(now).count(), Permit::Kind::kRefused, s, 0);
  }
  return Permit(this, w, ns, Permit::Kind::kHealthProbe, s, 0);
}

Duration CircuitBreaker::retry_after(TimePoint now) const noexcept {
  const std::int64_t ns = now.time_since_epoch().count();
  switch (state()) {
    case BreakerState::kClosed:
      return Duration::zero();
    case BreakerState::kIsolated:
      return options_.open_max;
    case BreakerState::kOpen: {
      const std::int64_t until = open_until_ns_.load(std::memory_order_acquire);
      const std::int64_t probe_at = next_probe_ns(health_next_ns_, health_interval_ns_, ns);
      return ns >= until && probe_at == 0 ? Duration::zero() : open_wait(ns, until, probe_at);
    }
    case BreakerState::kHalfOpen: {
      if (free_leases_.load(std::memory_order_acquire) > 0) return Duration::zero();
      const std::int64_t first = first_lease_expiry_ns_.load(std::memory_order_acquire);
      return Duration(std::max<std::int64_t>(first - ns, 0));
    }
  }
  return Duration::zero();
}

Duration CircuitBreaker::open_duration() const noexcept {
  return Duration(open_period_ns_.load(std::memory_order_relaxed));
}

// ---- recording -------------------------------------------------------------------------

void CircuitBreaker::finish_call(const Permit& permit, CallResult result,
                                 Duration latency) noexcept {
  if (result == CallResult::kSuccess) [[likely]] {
    call_succeeded(permit.word_, permit.time_ns_, latency);
    return;
  }
  if (result == CallResult::kNeutral) return;
  // A result from before the last state change (generation) says nothing about now.
  if (word_.load(std::memory_order_acquire) != permit.word_) return;
  const std::int64_t lat = std::max<std::int64_t>(latency.count(), 0);
  call_failed(permit.word_, permit.time_ns_ + lat, result == CallResult::kRefused);
}

void CircuitBreaker::call_failed(std::uint64_t word, std::int64_t end_ns, bool refused) noexcept {
  window_.count(end_ns, true);
  const int run = consecutive_.fetch_add(1, std::memory_order_relaxed) + 1;
  int refusals = 0;
  if (refused) {
    refusals = refused_.fetch_add(1, std::memory_order_relaxed) + 1;
  } else if (refused_.load(std::memory_order_relaxed) != 0) {
    refused_.store(0, std::memory_order_relaxed);
  }
  const WindowCounts counts = window_.sum(end_ns);
  TransitionReason reason;
  if (counts.calls >= static_cast<std::uint64_t>(options_.minimum_calls)) {
    if (static_cast<double>(counts.failures) >=
        options_.failure_ratio * static_cast<double>(counts.calls)) {
      reason = TransitionReason::kFailureRatio;
    } else if (options_.busy_consecutive_failures > 0 &&
               run >= options_.busy_consecutive_failures) {
      // High traffic, and a whole sample's worth of calls failed in a row: the database
      // stopped answering (see ADR 0007). The ratio would take up to half a window.
      reason = TransitionReason::kConsecutiveFailures;
    } else if (options_.consecutive_failures > 0 && refusals >= options_.consecutive_failures) {
      // Refused outright, again and again: no server took these calls, whatever the
      // successes before them (ADR 0018).
      reason = TransitionReason::kConsecutiveFailures;
    } else {
      return;
    }
  } else if (options_.consecutive_failures > 0 && run >= options_.consecutive_failures) {
    // Low traffic: too few calls for a ratio to mean anything (see the ADR).
    reason = TransitionReason::kConsecutiveFailures;
  } else {
    return;
  }
  Pending pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (word_.load(std::memory_order_relaxed) != word) return;
    open_locked(end_ns, options_.open_initial, reason, pending);
    consecutive_.store(0, std::memory_order_relaxed);
    refused_.store(0, std::memory_order_relaxed);
  }
  publish(pending);
}

void CircuitBreaker::finish_probe(const Permit& permit, CallResult result,
                                  Duration latency) noexcept {
  const bool health = permit.kind_ == Permit::Kind::kHealthProbe;
  if (health) health_out_.store(false, std::memory_order_release);
  const std::int64_t lat = std::max<std::int64_t>(latency.count(), 0);
  if (result == CallResult::kSuccess && slow_ns_ > 0 && lat > slow_ns_) {
    result = CallResult::kFailure;
  }
  const std::int64_t end_ns = permit.time_ns_ + lat;
  Pending pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (word_.load(std::memory_order_relaxed) != permit.word_) return;  // stale
    if (health) {
      // Out of band: a failure leaves the open period as it is.
      if (result == CallResult::kSuccess) {
        close_locked(end_ns, TransitionReason::kHealthProbeSucceeded, pending);
      }
    } else {
      ProbeLease& lease = leases_[permit.lease_];
      if (lease.busy) {
        lease.busy = false;
        free_leases_.fetch_add(1, std::memory_order_release);
      }
      if (result == CallResult::kSuccess) {
        if (++probe_successes_ >= options_.probe_successes_to_close) {
          close_locked(end_ns, TransitionReason::kProbesSucceeded, pending);
        }
      } else if (result == CallResult::kFailure || result == CallResult::kRefused) {
        const Duration doubled = std::min(
            Duration(open_period_ns_.load(std::memory_order_relaxed)) * 2, options_.open_max);
        open_locked(end_ns, doubled, TransitionReason::kProbeFailed, pending);
      }
      if (state_of(word_.load(std::memory_order_relaxed)) == BreakerState::kHalfOpen) {
        std::int64_t first = std::numeric_limits<std::int64_t>::max();
        for (const ProbeLease& l : leases_) {
          if (l.busy) first = std::min(first, l.expires_ns);
        }
        first_lease_expiry_ns_.store(first, std::memory_order_relaxed);
      }
    }
  }
  publish(pending);
}

// ---- silence and manual control ----------------------------------------------------------

bool CircuitBreaker::trip(TimePoint now) {
  const std::int64_t ns = now.time_since_epoch().count();
  Pending pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const BreakerState state = state_of(word_.load(std::memory_order_relaxed));
    if (state == BreakerState::kIsolated) return false;
    // Open with its period over, the next call would be a probe: a new period starts.
    if (state == BreakerState::kOpen && ns < open_until_ns_.load(std::memory_order_relaxed)) {
      return false;
    }
    open_locked(ns, Duration(open_period_ns_.load(std::memory_order_relaxed)),
                TransitionReason::kSilence, pending);
    consecutive_.store(0, std::memory_order_relaxed);
    refused_.store(0, std::memory_order_relaxed);
  }
  publish(pending);
  return true;
}

void CircuitBreaker::isolate() {
  const std::int64_t ns = clock_->now().time_since_epoch().count();
  Pending pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (state_of(word_.load(std::memory_order_relaxed)) == BreakerState::kIsolated) return;
    for (ProbeLease& l : leases_)
      l.busy = false;
    free_leases_.store(0, std::memory_order_relaxed);
    probe_successes_ = 0;
    move_locked(BreakerState::kIsolated, TransitionReason::kIsolated, ns, pending);
  }
  publish(pending);
}

void CircuitBreaker::reset() {
  const std::int64_t ns = clock_->now().time_since_epoch().count();
  Pending pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (state_of(word_.load(std::memory_order_relaxed)) == BreakerState::kClosed) {
      forget_window_locked(ns);
      open_period_ns_.store(options_.open_initial.count(), std::memory_order_relaxed);
    } else {
      close_locked(ns, TransitionReason::kReset, pending);
    }
  }
  publish(pending);
}

void CircuitBreaker::add_listener(Listener listener) {
  std::lock_guard<std::mutex> lock(listeners_mutex_);
  auto next = std::make_shared<std::vector<Listener>>(*listeners_);
  next->push_back(std::move(listener));
  listeners_ = std::move(next);
}

void CircuitBreaker::expect_health_probes(TimePoint next, Duration interval) noexcept {
  health_interval_ns_.store(interval.count(), std::memory_order_relaxed);
  health_next_ns_.store(next.time_since_epoch().count(), std::memory_order_release);
}

}  // namespace holdfast
