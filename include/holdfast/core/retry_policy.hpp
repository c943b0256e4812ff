/// @file
/// RetryPolicy: how one call is retried (attempts, backoff, window, clock), with the hook and
/// the statistics of a call. The loop that follows it is holdfast::retry()
/// (holdfast/core/retry.hpp) or Shield::run() (holdfast/core/shield.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

#include "holdfast/core/backoff.hpp"
#include "holdfast/core/duration.hpp"
#include "holdfast/core/status.hpp"

namespace holdfast {

class Clock;  // holdfast/core/clock.hpp

/// Passed to the on_retry hook before each wait.
struct RetryEvent {
  std::string_view label;     ///< the operation's label
  int attempt;                ///< the attempt that just failed (1-based)
  Duration delay;             ///< the wait before the next attempt
  Duration window_remaining;  ///< window time left before the wait
  const Status& status;       ///< the failure
};
/// Called before each wait of a retry loop, instead of the default DEBUG line.
using RetryHook = std::function<void(const RetryEvent&)>;

/// Statistics of one call, returned to the caller (never kept in shared state).
struct RetryStats {
  int attempts = 0;  ///< attempts made
  Duration slept{};  ///< time spent waiting (backoff, and for a Shield the breaker and the queue)
  StopReason stop = StopReason::kNone;  ///< kNone when the call succeeded
};

/// How one call is retried: attempts, backoff, window and clock. A copyable value; its
/// setters validate at once and chain.
class RetryPolicy {
 public:
  /// The default policy: 5 attempts, 200/600/1500/3000 ms ±50%, 6 s window.
  RetryPolicy();

  /// The default policy (the same as RetryPolicy()).
  static RetryPolicy standard() { return RetryPolicy(); }
  /// For the read every page makes first: 150/500/1500/3000 ms ±50%, 5 attempts, 6 s window.
  static RetryPolicy session_reads();
  /// One attempt, no retry.
  static RetryPolicy no_retry();

  /// Setters validate at once and throw std::invalid_argument naming the field.
  RetryPolicy& max_attempts(int n);  ///< n >= 1
  /// The delay schedule between attempts.
  RetryPolicy& backoff(Backoff b);
  RetryPolicy& window(Duration length);        ///< > 0; used outside any RequestScope
  RetryPolicy& last_attempt_time(Duration d);  ///< >= 0; window time a last attempt needs
  /// The clock the loop reads and sleeps on. REQUIRES: `c` outlives the policy's use.
  RetryPolicy& clock(Clock& c) noexcept;
  RetryPolicy& seed(std::uint64_t seed) noexcept;  ///< reproducible jitter (tests)
  RetryPolicy& on_retry(RetryHook hook);           ///< empty: the default DEBUG console line

  /// The most attempts one call makes.
  [[nodiscard]] int max_attempts() const noexcept { return max_attempts_; }
  /// The delay schedule.
  [[nodiscard]] const Backoff& backoff() const noexcept { return backoff_; }
  /// The window used outside any RequestScope.
  [[nodiscard]] Duration window() const noexcept { return window_; }
  /// Window time a last attempt needs: no retry starts with less left.
  [[nodiscard]] Duration last_attempt_time() const noexcept { return last_attempt_time_; }
  /// The clock the loop reads and sleeps on.
  [[nodiscard]] Clock& clock() const noexcept { return *clock_; }
  /// The jitter seed; unset: each call seeds from Random::from_thread().
  [[nodiscard]] const std::optional<std::uint64_t>& seed() const noexcept { return seed_; }

  /// Calls the hook, or writes the default DEBUG line. Never throws.
  void notify_retry(const RetryEvent& event) const noexcept;

 private:
  int max_attempts_ = 5;
  Backoff backoff_;
  Duration window_ = std::chrono::seconds(6);  // RetryWindow::kDefaultLength
  Duration last_attempt_time_ = std::chrono::milliseconds(50);
  Clock* clock_;
  std::optional<std::uint64_t> seed_;
  RetryHook on_retry_;
};

}  // namespace holdfast
