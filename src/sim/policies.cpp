// The configuration the simulator gives the library, per strategy (sim.hpp).
#include <chrono>
#include <limits>

#include "holdfast/core/backoff.hpp"
#include "holdfast/core/retry.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/sim.hpp"
#include "seeds.hpp"

namespace holdfast::sim {
namespace {

using std::chrono::hours;
using std::chrono::seconds;

// The "window" of strategies that have none: they stop on attempts only.
constexpr Duration kNoWindow = hours(24 * 365);

}  // namespace

std::uint64_t request_seed(std::uint64_t seed, std::uint64_t request) noexcept {
  return detail::mix(seed, request + 16);
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
      p = st.options ? st.options->reads : RetryPolicy::origin_reads();
      p.max_attempts(st.max_attempts).window(st.window);
      break;
  }
  // Millions of retries: no per-retry DEBUG line, whatever HOLDFAST_LOG_LEVEL says.
  p.on_retry([](const RetryEvent&) {});
  p.clock(clock);
  return p;
}

Shield::Options shield_options(const Strategy& st, Clock& clock) {
  Shield::Options o = st.options.value_or(Shield::Options{});
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

}  // namespace holdfast::sim
