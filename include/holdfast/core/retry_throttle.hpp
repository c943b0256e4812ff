/// @file
/// RetryThrottle: a process-wide cap on retries to one database.
///
/// The token bucket of gRPC retry throttling (gRFC A6, "Retry Throttling"): the bucket
/// starts full at max_tokens; each successful call adds token_ratio, each retryable failure
/// takes one token away; a retry is allowed only while more than half of max_tokens remain.
/// However many requests fail, retries then stay near token_ratio per success: load
/// amplification is capped at about 1 + token_ratio.
///
/// A tiny service (a cron job, a quiet panel) would drain the bucket with a handful of
/// failures and never retry again, so a floor lets through up to floor_per_second retries a
/// second (with a burst of one second's worth) even when the bucket is low — the
/// "minimum retries per second" of Finagle's RetryBudget.
///
/// Defaults and their sources (docs/adr/0003-breaker-and-throttle.md):
/// @code
///   max_tokens = 10, token_ratio = 0.1   the values of gRFC A6's service-config example;
///                                        the ratio gives the 1.1x bound of DESIGN.md
///   floor_per_second = 10                Finagle RetryBudget's minRetriesPerSec default
/// @endcode
///
/// Thread safety: every method may be called from any thread; all are lock-free (atomic
/// compare-and-swap), never allocate and never throw.
#pragma once

#include <atomic>
#include <cstdint>

#include "holdfast/core/clock.hpp"
#include "holdfast/core/shield_options.hpp"

namespace holdfast {

/// The retry token bucket with a floor (see the top of this file). Not copyable; every
/// method may be called from any thread, lock-free.
class RetryThrottle {
 public:
  /// The throttle's options (holdfast::RetryThrottleOptions).
  using Options = RetryThrottleOptions;

  RetryThrottle();  ///< default options
  /// With `options`; std::invalid_argument names a field out of range.
  explicit RetryThrottle(Options options);
  RetryThrottle(const RetryThrottle&) = delete;
  RetryThrottle& operator=(const RetryThrottle&) = delete;

  /// A call succeeded: add token_ratio (up to max_tokens). A plain load when the bucket is
  /// full (the common case).
  void record_success() noexcept {
    if (milli_.load(std::memory_order_relaxed) >= max_milli_) [[likely]]
      return;
    refill();
  }
  /// A call failed with a fault a retry could help (a retryable failure): take one token.
  void record_failure() noexcept;

  /// May a failed call be retried now? True while more than half of max_tokens remain;
  /// otherwise takes a slot of the floor if one is free at `now`. Call once per retry.
  [[nodiscard]] bool allow_retry(TimePoint now) noexcept;

  /// After a refusal: how long until the floor has a slot again. Zero when a retry would be
  /// allowed now, and when there is no floor (then only other calls' successes refill the
  /// bucket, and nobody can say when).
  [[nodiscard]] Duration retry_after(TimePoint now) const noexcept;

  /// The tokens in the bucket now.
  [[nodiscard]] double tokens() const noexcept;
  /// True while retries are allowed without the floor.
  [[nodiscard]] bool above_half() const noexcept;
  /// The options it was built with.
  [[nodiscard]] const Options& options() const noexcept { return options_; }

 private:
  // Tokens are kept in thousandths (gRPC keeps the ratio to three decimals too).
  const Options options_;
  const std::int64_t max_milli_;
  const std::int64_t ratio_milli_;
  const std::int64_t floor_interval_ns_;   // 0: no floor
  const std::int64_t floor_tolerance_ns_;  // burst - 1 intervals
  void refill() noexcept;                  // record_success() below the full bucket

  alignas(64) std::atomic<std::int64_t> milli_;
  // The floor is a GCRA rate limiter: the theoretical arrival time of the next retry.
  alignas(64) std::atomic<std::int64_t> floor_tat_ns_{INT64_MIN / 2};
};

}  // namespace holdfast
