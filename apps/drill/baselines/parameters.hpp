// The baselines' settings: one definition for the drill's panel (runner.hpp) and the
// simulator (src/sim/policies.cpp), so that a name means the same loop in both. They are
// the Vietnamese origin's, as its article gives them.
//
// Header-only (holdfast::core's headers): the simulator, a library of its own, includes it
// without linking the drill.
#pragma once

#include <chrono>

#include "baselines/strategy.hpp"
#include "holdfast/core/backoff.hpp"
#include "holdfast/core/retry_policy.hpp"

namespace holdfast::baselines {

// naive: an immediate retry, 3 more tries.
inline constexpr int kNaiveAttempts = 4;

// backoff: the origin's Tenacity decorator, stop_after_attempt(3) and
// wait_exponential(multiplier=1, min=1, max=10): waits 1 s, then 2 s (with more attempts
// 4 s, 8 s, then 10 s each). No jitter.
inline constexpr int kBackoffAttempts = 3;
inline constexpr std::chrono::seconds kBackoffFirstWait{1};
inline constexpr double kBackoffMultiplier = 2.0;
inline constexpr std::chrono::seconds kBackoffMaxWait{10};

// origin-breaker: backoff behind the origin's DatabaseCircuitBreaker, which opens after this
// many failed calls in a row and lets calls through again (half-open) this long after the
// last failure.
inline constexpr int kBreakerThreshold = 5;
inline constexpr std::chrono::seconds kBreakerRecovery{30};

// The baselines have no retry window: they stop on attempts only, as stop_after_attempt
// does. A year is never reached.
inline constexpr std::chrono::hours kNoWindow{24 * 365};

// The retry loop of a baseline: `attempts` (0: the baseline's own, above) with its waits,
// no jitter and no window. origin-breaker's is backoff's; none's is one attempt (`attempts`
// ignored). The caller gives it a clock and an on_retry. REQUIRES: `strategy` is not
// holdfast (the library's policies are its own).
[[nodiscard]] inline RetryPolicy retry_policy(Strategy strategy, int attempts = 0) {
  RetryPolicy p;
  switch (strategy) {
    case Strategy::kNone:
    case Strategy::kHoldfast:
      p = RetryPolicy::no_retry();
      break;
    case Strategy::kNaive:
      p.max_attempts(attempts > 0 ? attempts : kNaiveAttempts)
          .backoff(Backoff::steps({Duration::zero()}, Jitter::none()));
      break;
    case Strategy::kBackoff:
    case Strategy::kOriginBreaker:
      p.max_attempts(attempts > 0 ? attempts : kBackoffAttempts)
          .backoff(Backoff::exponential(kBackoffFirstWait, kBackoffMultiplier, kBackoffMaxWait,
                                        Jitter::none()));
      break;
  }
  p.window(kNoWindow);
  return p;
}

}  // namespace holdfast::baselines
