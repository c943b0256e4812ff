// The Vietnamese origin's DatabaseCircuitBreaker, as its article describes it: count
// failed calls; at `threshold` in a row open; `recovery` after the last failure let calls
// through again (half-open); any success closes it and zeroes the count. A baseline:
// holdfast's CircuitBreaker replaces it. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>

#include "baselines/parameters.hpp"
#include "holdfast/core/clock.hpp"

namespace holdfast::baselines {

class OriginBreaker {
 public:
  enum class State : std::uint8_t { kClosed, kOpen, kHalfOpen };

  // REQUIRES: `clock` outlives the breaker.
  explicit OriginBreaker(Clock& clock, int threshold = kBreakerThreshold,
                         Duration recovery = kBreakerRecovery) noexcept
      : clock_(&clock), threshold_(threshold), recovery_(recovery) {}

  // Whether a call may go to the database now (open: not until `recovery` has passed).
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

}  // namespace holdfast::baselines
