#include "overload_pause.hpp"

namespace holdfast::log_detail {

bool OverloadPause::on_overload(TimePoint now) noexcept {
  const bool starts = !active_;
  if (starts) {
    active_ = true;
    start_ = now;
  }
  // Another overload failure during the pause (a paused ERROR write) restarts it.
  until_ = now + length_;
  next_error_at_ = now + error_interval_;
  return starts;
}

bool OverloadPause::end_if_over(TimePoint now) noexcept {
  if (!active_ || now < until_) return false;
  active_ = false;
  unreported_ += until_ - start_;
  gap_due_ = true;
  return true;
}

bool OverloadPause::stores(Level level, TimePoint now) noexcept {
  if (!active_) return true;
  if (level != Level::kError || now < next_error_at_) return false;
  next_error_at_ = now + error_interval_;
  return true;
}

}  // namespace holdfast::log_detail
