#include "holdfast/window.hpp"

#include <stdexcept>

namespace holdfast {
RetryWindow::RetryWindow(Duration length, Clock& clock) : length_(length), clock_(&clock) {
  if (length <= Duration::zero()) {
    throw std::invalid_argument("RetryWindow: length must be greater than zero");
  }
}

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

RequestScope::RequestScope(Duration length, Clock& clock)
    : own_(length, clock),
      window_(detail::current_request_scope != nullptr ? detail::current_request_scope->window_
                                                       : &own_),
      previous_(detail::current_request_scope) {
  detail::current_request_scope = this;
}

RequestScope::RequestScope(RetryWindow& shared) noexcept
    : own_(shared.length(), shared.clock()),
      window_(&shared),
      previous_(detail::current_request_scope) {
  detail::current_request_scope = this;
}

RequestScope::~RequestScope() {
  detail::current_request_scope = previous_;
}

}  // namespace holdfast
