/// @file
/// Metrics: counters and gauges of one Shield, exposed as Prometheus text.
///
/// Counters are relaxed atomics, incremented lock-free; the success counter (touched by
/// every request) is spread over cache lines by thread, each written by one thread only, so
/// counting a success needs no locked instruction and concurrent requests do not fight over
/// one line. Gauges are read from the breaker and throttle when the text is rendered.
///
/// @code
///   # TYPE holdfast_attempts_total counter
///   holdfast_attempts_total{db="main"} 1234
/// @endcode
///
/// Families (all with a db="<shield name>" label):
/// @code
///   holdfast_attempts_total                      attempts that reached the database
///   holdfast_successes_total                     attempts that succeeded
///   holdfast_faults_total{scope,overload}        failed attempts by the fault's class
///   holdfast_retries_total                       retries started after a failed attempt
///   holdfast_windows_spent_total                 requests that gave up: window spent
///   holdfast_throttled_total                     requests that gave up: retry throttle
///   holdfast_breaker_rejected_total              requests failed at once by the breaker
///   holdfast_breaker_waits_total                 waits for a probe inside the window
///   holdfast_at_capacity_total                   requests failed at once: concurrency limit
///   holdfast_at_capacity_by_class_total{class}   the same, by the request's class (priority.hpp)
///   holdfast_silences_total                      times the server was found silent (Liveness)
///   holdfast_confirmed_writes_missing_total      confirmed writes a new writer did not hold
///   holdfast_confirmed_writes_unverified_total   confirmed writes that could not be checked
///   holdfast_split_brains_total                  writers found on an older timeline
///   holdfast_breaker_transitions_total{to}       breaker state changes by target state
///   holdfast_breaker_state{state}                gauge: 1 for the current state, else 0
///   holdfast_retry_tokens                        gauge: the throttle's tokens
///   holdfast_concurrency_limit                   gauge: the learned concurrency limit
///   holdfast_in_flight                           gauge: calls in flight
/// @endcode
///
/// Thread safety: every method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "holdfast/core/circuit_breaker.hpp"
#include "holdfast/core/concurrency_limit.hpp"
#include "holdfast/core/fault.hpp"
#include "holdfast/core/priority.hpp"
#include "holdfast/core/retry_throttle.hpp"
#include "holdfast/detail/stripes.hpp"

namespace holdfast {

/// The counters of one Shield, and its gauges rendered as Prometheus text (see the top of
/// this file). Not copyable; every method may be called from any thread.
class Metrics {
 public:
  static constexpr std::size_t kScopes = 4;  ///< RetryScope values
  static constexpr std::size_t kStates = 4;  ///< BreakerState values

  /// A copy of the counters at one moment (see snapshot()).
  struct Snapshot {
    std::uint64_t attempts = 0;          ///< successes + every fault
    std::uint64_t successes = 0;         ///< attempts that succeeded
    std::uint64_t retries = 0;           ///< retries started after a failed attempt
    std::uint64_t windows_spent = 0;     ///< requests that gave up: window spent
    std::uint64_t throttled = 0;         ///< requests that gave up: retry throttle
    std::uint64_t breaker_rejected = 0;  ///< requests failed at once by the breaker
    std::uint64_t breaker_waits = 0;     ///< waits for a probe inside the window
    std::uint64_t at_capacity = 0;       ///< requests failed at once: concurrency limit
    std::uint64_t silences = 0;          ///< times the server was found silent (Liveness)
    /// at_capacity, indexed `[Priority]`.
    std::array<std::uint64_t, kPriorities> at_capacity_by_class{};
    /// Confirmed writes a new writer did not hold (PostgreSQL, ADR 0036).
    std::uint64_t confirmed_writes_missing = 0;
    /// Confirmed writes a change of writer put in question that could not be checked.
    std::uint64_t confirmed_writes_unverified = 0;
    std::uint64_t split_brains = 0;  ///< writers found on an older timeline than the newest
    /// Failed attempts, indexed `[RetryScope][overload ? 1 : 0]`.
    std::array<std::array<std::uint64_t, 2>, kScopes> faults{};
    /// Transitions into each state, indexed `[BreakerState]`.
    std::array<std::uint64_t, kStates> transitions{};

    /// Every fault counted, all scopes.
    [[nodiscard]] std::uint64_t faults_total() const noexcept;
  };

  Metrics() noexcept = default;
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  /// On every success: a plain store to this thread's own cell (no locked instruction).
  void count_success() noexcept {
    static_assert(kCells == detail::kStripes);
    const unsigned stripe = detail::thread_stripe();
    detail::stripe_add(successes_[stripe].value, stripe, 1);
  }
  /// Counts a failed attempt by its fault's scope and overload.
  void count_fault(const Fault& fault) noexcept;
  /// Counts a retry started after a failed attempt.
  void count_retry() noexcept { retries_.fetch_add(1, std::memory_order_relaxed); }
  /// Counts a request that gave up because its window was spent.
  void count_window_spent() noexcept { windows_spent_.fetch_add(1, std::memory_order_relaxed); }
  /// Counts a request that gave up because the retry throttle refused.
  void count_throttled() noexcept { throttled_.fetch_add(1, std::memory_order_relaxed); }
  /// Counts a request failed at once by the breaker.
  void count_breaker_rejected() noexcept {
    breaker_rejected_.fetch_add(1, std::memory_order_relaxed);
  }
  /// Counts a wait for a probe inside the window.
  void count_breaker_wait() noexcept { breaker_waits_.fetch_add(1, std::memory_order_relaxed); }
  /// Counts a request of class `p` failed at once by the concurrency limit.
  void count_at_capacity(Priority p = Priority::kNormal) noexcept {
    at_capacity_.fetch_add(1, std::memory_order_relaxed);
    at_capacity_by_class_[static_cast<std::size_t>(p) % kPriorities].fetch_add(
        1, std::memory_order_relaxed);
  }
  /// Counts a time the server was found silent.
  void count_silence() noexcept { silences_.fetch_add(1, std::memory_order_relaxed); }
  /// Counts `n` confirmed writes a new writer did not hold.
  void count_confirmed_writes_missing(std::uint64_t n) noexcept {
    confirmed_writes_missing_.fetch_add(n, std::memory_order_relaxed);
  }
  /// Counts `n` confirmed writes that could not be checked against a new writer.
  void count_confirmed_writes_unverified(std::uint64_t n) noexcept {
    confirmed_writes_unverified_.fetch_add(n, std::memory_order_relaxed);
  }
  /// Counts a writer found on an older timeline than the newest seen (a split brain).
  void count_split_brain() noexcept { split_brains_.fetch_add(1, std::memory_order_relaxed); }
  /// Counts a breaker transition into `to`.
  void count_transition(BreakerState to) noexcept {
    transitions_[static_cast<std::size_t>(to) % kStates].fetch_add(1, std::memory_order_relaxed);
  }

  /// Where the gauges come from (either may be null: that gauge is left out). REQUIRES: the
  /// objects outlive every later call of prometheus_text().
  void attach(const CircuitBreaker* breaker, const RetryThrottle* throttle,
              const ConcurrencyLimit* limit = nullptr) noexcept {
    breaker_.store(breaker, std::memory_order_release);
    throttle_.store(throttle, std::memory_order_release);
    limit_.store(limit, std::memory_order_release);
  }

  /// A consistent-enough copy of the counters (each read on its own, relaxed).
  [[nodiscard]] Snapshot snapshot() const noexcept;

  /// Every family in the Prometheus text exposition format (version 0.0.4): HELP and TYPE
  /// lines, then the samples, each labelled db="<shield_name>" (escaped as the format asks).
  [[nodiscard]] std::string prometheus_text(std::string_view shield_name) const;

  /// One Shield's metrics and the name that labels them (db="name").
  struct Labelled {
    const Metrics* metrics;  ///< the Shield's metrics
    std::string_view name;   ///< the Shield's name
  };
  /// Several Shields' metrics in one exposition (a page must not repeat a family's HELP and
  /// TYPE lines): each family once, with every shield's samples under it.
  [[nodiscard]] static std::string prometheus_text(std::span<const Labelled> shields);

 private:
  struct alignas(64) Cell {
    std::atomic<std::uint64_t> value{0};
  };
  static constexpr std::size_t kCells = 9;  // one per stripe (holdfast/detail/stripes.hpp)

  std::array<Cell, kCells> successes_{};
  alignas(64) std::atomic<std::uint64_t> retries_{0};
  std::atomic<std::uint64_t> windows_spent_{0};
  std::atomic<std::uint64_t> throttled_{0};
  std::atomic<std::uint64_t> breaker_rejected_{0};
  std::atomic<std::uint64_t> breaker_waits_{0};
  std::atomic<std::uint64_t> at_capacity_{0};
  std::atomic<std::uint64_t> silences_{0};
  std::array<std::atomic<std::uint64_t>, kPriorities> at_capacity_by_class_{};
  std::atomic<std::uint64_t> confirmed_writes_missing_{0};
  std::atomic<std::uint64_t> confirmed_writes_unverified_{0};
  std::atomic<std::uint64_t> split_brains_{0};
  std::array<std::array<std::atomic<std::uint64_t>, 2>, kScopes> faults_{};
  std::array<std::atomic<std::uint64_t>, kStates> transitions_{};
  std::atomic<const CircuitBreaker*> breaker_{nullptr};
  std::atomic<const RetryThrottle*> throttle_{nullptr};
  std::atomic<const ConcurrencyLimit*> limit_{nullptr};
};

}  // namespace holdfast
