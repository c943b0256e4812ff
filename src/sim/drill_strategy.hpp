// The simulator's strategies are the drill's of the same name (apps/drill/baselines, ADR
// 0046): none, naive and backoff run the drill's loops with the drill's settings
// (baselines/parameters.hpp), so that a name means the same in `holdfast sim` and in
// `holdfast drill`. The simulator has no origin-breaker.
#pragma once

#include "baselines/strategy.hpp"
#include "holdfast/sim.hpp"

namespace holdfast::sim::detail {

[[nodiscard]] constexpr baselines::Strategy drill_strategy(StrategyKind kind) noexcept {
  switch (kind) {
    case StrategyKind::kNone:
      return baselines::Strategy::kNone;
    case StrategyKind::kNaive:
      return baselines::Strategy::kNaive;
    case StrategyKind::kBackoff:
      return baselines::Strategy::kBackoff;
    case StrategyKind::kHoldfast:
      return baselines::Strategy::kHoldfast;
  }
  return baselines::Strategy::kHoldfast;
}

}  // namespace holdfast::sim::detail
