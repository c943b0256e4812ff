#include "strategy.hpp"

namespace holdfast::panel {

std::string_view to_string(Strategy strategy) noexcept {
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

bool parse_strategy(std::string_view text, Strategy& out) noexcept {
  for (Strategy s : {Strategy::kNone, Strategy::kNaive, Strategy::kBackoff,
                     Strategy::kOriginBreaker, Strategy::kHoldfast}) {
    if (text == to_string(s)) {
      out = s;
      return true;
    }
  }
  return false;
}

const std::vector<Strategy>& all_strategies() {
  static const std::vector<Strategy> kAll = {Strategy::kNone, Strategy::kNaive, Strategy::kBackoff,
                                             Strategy::kOriginBreaker, Strategy::kHoldfast};
  return kAll;
}

bool OriginBreaker::can_attempt() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state_ == State::kClosed || state_ == State::kHalfOpen) return true;
  if (clock_->now() - last_failure_ >= recovery_) {
    state_ = State::kHalfOpen;
    return true;
  }
  return false;
}

void OriginBreaker::record_success() {
  std::lock_guard<std::mutex> lock(mutex_);
  failures_ = 0;
  state_ = State::kClosed;
}

void OriginBreaker::record_failure() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++failures_;
  last_failure_ = clock_->now();
  if (failures_ >= threshold_) state_ = State::kOpen;
}

OriginBreaker::State OriginBreaker::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_;
}

}  // namespace holdfast::panel
