#include "holdfast/window.hpp"

#include <stdexcept>

namespace holdfast {
namespace detail {
void window_length_not_positive() {
  throw std::invalid_argument("RetryWindow: length must be greater than zero");
}
}  // namespace detail

void RetryWindow::open(TimePoint now) noexcept {
  std::int64_t expected = kClosed;
  const std::int64_t deadline = (now + length_).time_since_epoch().count();
  deadline_ns_.compare_exchange_strong(expected, deadline, std::memory_order_acq_rel);
}

TimePoint RetryWindow::deadline() const noexcept {
  const std::int64_t d = deadline_ns_.load(std::memory_order_acquire);
  return d == kClosed ? TimePoint::max() : TimePoint(Duration(d));
}

Duration RetryWindow::remaining(TimePoint now) const noexcept {
  const std::int64_t d = deadline_ns_.load(std::memory_order_acquire);
  if (d == kClosed) return length_;
  const Duration left = TimePoint(Duration(d)) - now;
  return left > Duration::zero() ? left : Duration::zero();
}

}  // namespace holdfast
