/// @file
/// ConcurrencyLimit: how much work a Shield sends its database at once, learned from the
/// latency the database answers with.
///
/// @code
///   holdfast::ConcurrencyLimit limit;
///   const auto place = limit.try_acquire(/*retry=*/false);
///   if (place == ConcurrencyLimit::Place::kRefused) return busy(limit.expected_wait(0));
///   Status s = db.query(...);
///   if (place == ConcurrencyLimit::Place::kCounted) limit.release();
///   limit.record(latency, /*dropped=*/false);   // a sample; any subset of the calls will do
/// @endcode
///
/// The rule (docs/adr/0008-admission-by-learned-capacity.md) follows Netflix's Gradient2: a
/// short moving average of the sampled latency (the last `short_samples`, 5) against the
/// normal latency, the low end of that average: it starts as the mean of the first
/// `short_samples` answers, then follows lower latencies at once (within about a hundred
/// answers) and higher ones only by creeping up by half every `long_samples` (5000)
/// samples, so a long queue does not become normal. While the short one stays within `tolerance`
/// times the normal one the database is answering at its normal pace and the limit grows by a small
/// queue allowance per sample; when the short one rises above, the limit shrinks in proportion (at
/// most by half per sample, smoothed). The allowance is per process: when the short average is more
/// than 4 times the tolerated latency it shrinks in proportion, so that many processes, each with a
/// small share, do not hold a queue of their allowances at the database
/// (docs/adr/0045-many-processes-queue-less.md). A dropped call (it timed out: the database
/// kept the work but the caller gave up) halves the target at once. The limit only grows while
/// the work in flight is at least half of it: a quiet service learns nothing about a larger
/// load.
///
/// First attempts may fill the limit; retries start only below `retry_share` of it, so that
/// under overload retries use spare capacity and nothing else.
///
/// Cost: while the database answers at its normal pace and no caller is queued, the limit is
/// relaxed: an admission reads one flag and counts nothing (Place::kUncounted). It turns
/// tight when a sample shows the latency above tolerance x normal (or a caller queues);
/// then places are counted (a plain increment in the calling thread's own stripe), the
/// stripes are summed (one cache line each) and compared with the limit. It turns relaxed
/// again when the latency is normal and the counted work is below half the limit. Calls
/// admitted while relaxed are not counted: for about one latency after the turn the limit
/// may be exceeded by what was in flight then.
///
/// Thread safety: every method may be called from any thread; none locks or allocates.
/// Samples from several threads may race: one of them is then lost, which a moving average
/// does not notice.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "holdfast/core/clock.hpp"
#include "holdfast/core/shield_options.hpp"

namespace holdfast {

/// The learned concurrency limit of one database (Gradient2; see the top of this file). Not
/// copyable; every method may be called from any thread, without a lock.
class ConcurrencyLimit {
 public:
  /// The limit's options (holdfast::ConcurrencyLimitOptions).
  using Options = ConcurrencyLimitOptions;

  ConcurrencyLimit();  ///< default options
  /// With `options`; std::invalid_argument names a field out of range.
  explicit ConcurrencyLimit(Options options);
  ConcurrencyLimit(const ConcurrencyLimit&) = delete;
  ConcurrencyLimit& operator=(const ConcurrencyLimit&) = delete;
  ~ConcurrencyLimit();

  /// What try_acquire() gave a call.
  enum class Place : std::uint8_t {
    kRefused,    ///< no room
    kUncounted,  ///< go; the limit is relaxed and counts nothing: no release()
    kCounted,    ///< go, and release() when the call ends
  };
  /// A place for one call if there is room: below the limit for a first attempt, below
  /// retry_share of it for a retry.
  [[nodiscard]] Place try_acquire(bool retry) noexcept {
    if (!tight_.load(std::memory_order_relaxed)) [[likely]] {
      return Place::kUncounted;
    }
    return try_acquire_tight(retry) ? Place::kCounted : Place::kRefused;
  }
  /// Callers queued for a place (kept by the Shield that owns this limit). While any are,
  /// try_acquire() refuses, so nobody overtakes them; places go to them as they free up.
  void queued(std::int64_t change) noexcept;
  /// How many callers are queued for a place now.
  [[nodiscard]] std::int64_t queued() const noexcept {
    return queued_.load(std::memory_order_relaxed);
  }

  /// Takes a counted place whatever the limit (a breaker's probe, a place handed from one
  /// waiter to the next); it needs one release().
  void acquire() noexcept { count(kStarted); }
  /// Gives back a counted place (Place::kCounted, or one taken with acquire()).
  void release() noexcept { count(kFinished); }

  /// One sample: a call that took `latency` to answer (dropped: it was given up on at
  /// `latency`, its work still on the database). Zero latency is no sample.
  void record(Duration latency, bool dropped) noexcept;

  /// True at most once per distinct `coarse_now` (a race may let two threads through):
  /// whether the call that starts now should be timed, so that a busy service times about
  /// one call per clock tick.
  [[nodiscard]] bool wants_sample(TimePoint coarse_now) noexcept {
    const std::int64_t now = coarse_now.time_since_epoch().count();
    if (sampled_tick_.load(std::memory_order_relaxed) == now) return false;
    sampled_tick_.store(now, std::memory_order_relaxed);
    return true;
  }

  /// The current limit: how many calls may be in flight at once (fractional, learned).
  [[nodiscard]] double limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
  /// The calls in flight now (a sum of the stripes: a snapshot).
  [[nodiscard]] std::int64_t in_flight() const noexcept;
  /// True when there is room for one more retry now.
  [[nodiscard]] bool has_room_for_retry() const noexcept;
  /// The recent latency (short average); zero before the first sample.
  [[nodiscard]] Duration recent_latency() const noexcept;
  /// The normal latency (long average); zero before the first answer (a dropped call is none).
  [[nodiscard]] Duration normal_latency() const noexcept;
  /// True while admissions are counted and checked (see above).
  [[nodiscard]] bool tight() const noexcept { return tight_.load(std::memory_order_relaxed); }
  /// True while tight with the counted work at half the limit or more, or callers queued (as
  /// of the last sample): the database has little room to spare.
  [[nodiscard]] bool busy() const noexcept { return busy_.load(std::memory_order_relaxed); }
  /// How long a caller with `ahead` callers queued before it should expect to wait for a
  /// place: (ahead + 1) x recent latency / limit.
  [[nodiscard]] Duration expected_wait(std::int64_t ahead) const noexcept;
  /// The options it was built with.
  [[nodiscard]] const Options& options() const noexcept { return options_; }

 private:
  struct Stripe;
  enum Counter : unsigned { kStarted = 0, kFinished = 1 };
  // Counts a call started or finished in this thread's stripe. Two counters rather than one
  // that goes up and down: the start and the end of a call then write different words.
  void count(Counter which) noexcept;
  bool try_acquire_tight(bool retry) noexcept;

  const Options options_;
  const double short_weight_;
  const double long_weight_;
  const double base_creep_;
  std::unique_ptr<Stripe[]> stripes_;
  alignas(64) std::atomic<bool> tight_{false};
  std::atomic<bool> busy_{false};
  std::atomic<std::int64_t> sampled_tick_{-1};
  std::atomic<std::int64_t> queued_{0};
  std::atomic<double> limit_;
  std::atomic<double> short_ns_{0.0};
  std::atomic<double> long_ns_{0.0};
  std::atomic<int> samples_{0};  // answers seen, counted up to long_samples / 50
};

}  // namespace holdfast
