// The configuration the simulator gives the library, per strategy (sim.hpp).
#include <chrono>
#include <limits>

#include "baselines/parameters.hpp"
#include "drill_strategy.hpp"
#include "holdfast/core/retry.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/sim.hpp"
#include "seeds.hpp"

namespace holdfast::sim {
std::uint64_t request_seed(std::uint64_t seed, std::uint64_t request) noexcept {
  return detail::mix(seed, request + 16);
}

RetryPolicy retry_policy(const Strategy& st, Clock& clock) {
  RetryPolicy p;
  if (st.kind == StrategyKind::kHoldfast) {
    p = st.options ? st.options->reads : RetryPolicy::standard();
    p.max_attempts(st.max_attempts).window(st.window);
  } else {
    // The drill's loop of the same name (none, naive, backoff), with st.max_attempts.
    p = baselines::retry_policy(detail::drill_strategy(st.kind), st.max_attempts);
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
