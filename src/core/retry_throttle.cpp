#include "holdfast/core/retry_throttle.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace holdfast {
namespace {

[[noreturn]] void bad_option(const char* field, const std::string& rule) {
  throw std::invalid_argument(std::string("RetryThrottle::Options::") + field + " " + rule);
}

const RetryThrottle::Options& validated(const RetryThrottle::Options& o) {
  if (!(o.max_tokens > 0.0 && o.max_tokens <= 1000.0)) {
    bad_option("max_tokens", "must be in (0, 1000], got " + std::to_string(o.max_tokens));
  }
  if (!(o.token_ratio > 0.0 && o.token_ratio <= o.max_tokens)) {
    bad_option("token_ratio", "must be in (0, max_tokens], got " + std::to_string(o.token_ratio));
  }
  if (std::llround(o.token_ratio * 1000.0) < 1) {
    bad_option("token_ratio", "must be at least 0.001 (tokens are kept to three decimals), got " +
                                  std::to_string(o.token_ratio));
  }
  if (!(o.floor_per_second >= 0.0 && o.floor_per_second <= 1e6)) {
    bad_option("floor_per_second",
               "must be in [0, 1e6], got " + std::to_string(o.floor_per_second));
  }
  return o;
}

std::int64_t floor_interval(double per_second) {
  if (per_second <= 0.0) return 0;
  return std::max<std::int64_t>(1, std::llround(1e9 / per_second));
}

std::int64_t floor_tolerance(double per_second) {
  if (per_second <= 0.0) return 0;
  // A burst of one second's worth of retries (at least one).
  const auto burst = std::max<std::int64_t>(1, static_cast<std::int64_t>(per_second));
  return (burst - 1) * floor_interval(per_second);
}

}  // namespace

RetryThrottle::RetryThrottle() : RetryThrottle(Options{}) {}

RetryThrottle::RetryThrottle(Options options)
    : options_(validated(options)),
      max_milli_(std::llround(options.max_tokens * 1000.0)),
      ratio_milli_(std::llround(options.token_ratio * 1000.0)),
      floor_interval_ns_(floor_interval(options.floor_per_second)),
      floor_tolerance_ns_(floor_tolerance(options.floor_per_second)),
      milli_(std::llround(options.max_tokens * 1000.0)) {}

void RetryThrottle::refill() noexcept {
  std::int64_t t = milli_.load(std::memory_order_relaxed);
  while (t < max_milli_) {
    const std::int64_t next = std::min(t + ratio_milli_, max_milli_);
    if (milli_.compare_exchange_weak(t, next, std::memory_order_relaxed)) return;
  }
}

void RetryThrottle::record_failure() noexcept {
  std::int64_t t = milli_.load(std::memory_order_relaxed);
  while (t > 0) {
    const std::int64_t next = std::max<std::int64_t>(t - 1000, 0);
    if (milli_.compare_exchange_weak(t, next, std::memory_order_relaxed)) return;
  }
}

bool RetryThrottle::above_half() const noexcept {
  // "tokens > max_tokens / 2", in thousandths without rounding: 2t > max.
  return 2 * milli_.load(std::memory_order_relaxed) > max_milli_;
}

bool RetryThrottle::allow_retry(TimePoint now) noexcept {
  if (above_half()) return true;
  if (floor_interval_ns_ == 0) return false;
  const std::int64_t ns = now.time_since_epoch().count();
  std::int64_t tat = floor_tat_ns_.load(std::memory_order_relaxed);
  for (;;) {
    // GCRA: allowed when the theoretical arrival time is at most `tolerance` ahead of now.
    if (tat - ns > floor_tolerance_ns_) return false;
    const std::int64_t next = std::max(tat, ns) + floor_interval_ns_;
    if (floor_tat_ns_.compare_exchange_weak(tat, next, std::memory_order_relaxed)) return true;
  }
}

Duration RetryThrottle::retry_after(TimePoint now) const noexcept {
  // Without a floor, only other calls' successes refill the bucket: nobody can say when.
  if (above_half() || floor_interval_ns_ == 0) return Duration::zero();
  const std::int64_t ns = now.time_since_epoch().count();
  const std::int64_t tat = floor_tat_ns_.load(std::memory_order_relaxed);
  return Duration(std::max<std::int64_t>(tat - floor_tolerance_ns_ - ns, 0));
}

double RetryThrottle::tokens() const noexcept {
  return static_cast<double>(milli_.load(std::memory_order_relaxed)) / 1000.0;
}

}  // namespace holdfast
