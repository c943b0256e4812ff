#include "baselines/origin_breaker.hpp"

namespace holdfast::baselines {

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

}  // namespace holdfast::baselines
