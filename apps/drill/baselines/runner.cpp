#include "baselines/runner.hpp"

namespace holdfast::baselines {

Runner::Runner(Strategy strategy, Clock& clock)
    : strategy_(strategy), policy_(retry_policy(strategy)) {
  // The baselines log nothing per retry.
  policy_.clock(clock).on_retry([](const RetryEvent&) {});
  if (strategy_ == Strategy::kOriginBreaker) breaker_ = std::make_unique<OriginBreaker>(clock);
}

}  // namespace holdfast::baselines
