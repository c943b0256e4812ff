// How the panel talks to its database: holdfast, or one of the baselines the drill compares
// it with.
//
//   none            one attempt per query; SQLite's busy_timeout (5 s, the origin's) only
//   naive           immediate retry, 3 more tries
//   backoff         per-call exponential backoff with the Vietnamese origin's Tenacity
//                   settings: stop_after_attempt(3), wait_exponential(multiplier=1, min=1,
//                   max=10)
//   origin-breaker  that backoff plus the origin's consecutive-failure breaker (threshold 5,
//                   30 s recovery)
//   holdfast        a Shield (breaker, throttle, the origin's schedule) and one 6 s
//                   RequestScope per page render; logs through the overload-aware sink
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string_view>
#include <vector>

#include "holdfast/core/clock.hpp"

namespace holdfast::panel {

enum class Strategy : std::uint8_t { kNone, kNaive, kBackoff, kOriginBreaker, kHoldfast };

[[nodiscard]] std::string_view to_string(Strategy strategy) noexcept;
[[nodiscard]] bool parse_strategy(std::string_view text, Strategy& out) noexcept;
[[nodiscard]] const std::vector<Strategy>& all_strategies();

// The Vietnamese origin's DatabaseCircuitBreaker, as the article describes it: count
// failures; at `threshold` open; after `recovery` let calls through again (half-open); any
// success closes it and zeroes the count. A baseline: holdfast's CircuitBreaker replaces it.
class OriginBreaker {
 public:
  enum class State : std::uint8_t { kClosed, kOpen, kHalfOpen };

  OriginBreaker(Clock& clock, int threshold = 5,
                Duration recovery = std::chrono::seconds(30)) noexcept
      : clock_(&clock), threshold_(threshold), recovery_(recovery) {}

  bool can_attempt();
  void record_success();
  void record_failure();
  [[nodiscard]] State state() const;

 private:
  Clock* clock_;
  const int threshold_;
  const Duration recovery_;
  mutable std::mutex mutex_;
  int failures_ = 0;
  TimePoint last_failure_{};
  State state_ = State::kClosed;
};

}  // namespace holdfast::panel
