// The strategies the drill compares: holdfast, and the baselines it is measured against
// (the ways the Vietnamese origin called its database). What each baseline does is
// parameters.hpp (its settings), runner.hpp (its loop) and origin_breaker.hpp.
//
//   none            one attempt per query
//   naive           immediate retry
//   backoff         the origin's Tenacity decorator: exponential waits, a few attempts
//   origin-breaker  that backoff behind the origin's consecutive-failure breaker
//   holdfast        the library (the panel runs it; not a baseline)
//
// Header-only and std-only: the simulator (src/sim) takes the names without linking the
// drill. It runs none, naive and backoff; the panel all five.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace holdfast::baselines {

enum class Strategy : std::uint8_t { kNone, kNaive, kBackoff, kOriginBreaker, kHoldfast };

inline constexpr std::array<Strategy, 5> kAllStrategies = {
    Strategy::kNone, Strategy::kNaive, Strategy::kBackoff, Strategy::kOriginBreaker,
    Strategy::kHoldfast};

// "none", "naive", "backoff", "origin-breaker", "holdfast": the names of the panel's
// --strategy, the drill's --strategies and the simulator's --strategies.
[[nodiscard]] constexpr std::string_view to_string(Strategy strategy) noexcept {
  switch (strategy) {
    case Strategy::kNone:
      return "none";
    case Strategy::kNaive:
      return "naive";
    case Strategy::kBackoff:
      return "backoff";
    case Strategy::kOriginBreaker:
      return "origin-breaker";
    case Strategy::kHoldfast:
      return "holdfast";
  }
  return "?";
}

// Sets `out` and answers true when `text` is one of the names above.
[[nodiscard]] constexpr bool parse_strategy(std::string_view text, Strategy& out) noexcept {
  for (Strategy s : kAllStrategies) {
    if (text == to_string(s)) {
      out = s;
      return true;
    }
  }
  return false;
}

// Every strategy, in the drill's order (the baselines first, holdfast last).
[[nodiscard]] inline std::vector<Strategy> all_strategies() {
  return {kAllStrategies.begin(), kAllStrategies.end()};
}

// "none, naive, backoff, origin-breaker, holdfast": for a message refusing another name.
[[nodiscard]] inline std::string strategy_names() {
  std::string names;
  for (Strategy s : kAllStrategies) {
    if (!names.empty()) names += ", ";
    names += to_string(s);
  }
  return names;
}

}  // namespace holdfast::baselines
