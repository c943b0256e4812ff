/// @file
/// Clock: every timed decision in holdfast goes through one.
///
/// SystemClock reads std::chrono::steady_clock and really sleeps. ManualClock keeps virtual
/// time: tests and the simulator use it, so nothing in them sleeps for real.
///
/// Thread safety: all methods of both clocks may be called from any thread.
#pragma once

#include <time.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "holdfast/core/duration.hpp"

namespace holdfast {

/// Something sleepers can be woken by before their deadline (a breaker waking the requests
/// that wait for its probe). A sleeper remembers generation() before it sleeps; it is woken
/// once the generation has moved on.
class Signal {
 public:
  /// How many times the signal was notified; a sleeper compares it with what it saw before.
  [[nodiscard]] std::uint64_t generation() const noexcept {
    return generation_.load(std::memory_order_acquire);
  }
  /// Wakes every sleeper that is waiting on this signal. Never throws.
  void notify_all() noexcept;

 private:
  friend class SystemClock;
  friend class ManualClock;
  std::atomic<std::uint64_t> generation_{0};
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
};

/// The source of time for every timed decision: reading it and sleeping on it. Abstract:
/// SystemClock is the real one, ManualClock keeps virtual time.
class Clock {
 public:
  virtual ~Clock() = default;

  /// The current time.
  [[nodiscard]] virtual TimePoint now() const noexcept = 0;
  /// now(), or a cheaper reading of the same clock that may lag it by a clock tick (on
  /// Linux's system clock up to 4 ms): for bookkeeping that tolerates it on a hot path.
  [[nodiscard]] virtual TimePoint coarse_now() const noexcept { return now(); }

  /// Sleeps until `deadline`. With `wake`, returns early once wake->generation() differs
  /// from `seen`. Returns true when woken early, false when the deadline was reached.
  virtual bool sleep_until(TimePoint deadline, const Signal* wake = nullptr,
                           std::uint64_t seen = 0) = 0;

  /// sleep_until(now() + d), without a wake signal. Returns false.
  bool sleep_for(Duration d) { return sleep_until(now() + d); }

  /// The process-wide steady clock.
  static Clock& system() noexcept;
};

/// The real clock: std::chrono::steady_clock, with real sleeps. Clock::system() is the
/// process's instance.
class SystemClock final : public Clock {
 public:
  [[nodiscard]] TimePoint now() const noexcept override;
  /// CLOCK_MONOTONIC_COARSE: the same clock as now(), read without the time counter.
  [[nodiscard]] TimePoint coarse_now() const noexcept override { return read_coarse(); }
  /// The same, without a virtual call: for a hot path that knows its clock is this one.
  [[nodiscard]] static TimePoint read_coarse() noexcept {
    timespec ts{};
    if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0) [[unlikely]]
      return read_precise();
    return TimePoint(Duration(std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec));
  }
  bool sleep_until(TimePoint deadline, const Signal* wake = nullptr,
                   std::uint64_t seen = 0) override;

 private:
  static TimePoint read_precise() noexcept;
};

/// Virtual time for tests and the simulator.
///
/// kAutoAdvance (default): sleep_until() moves virtual time forward to the deadline and
/// returns at once. Right for one thread, or for threads that take turns.
///
/// kBlocking: sleep_until() blocks until another thread moves time past the deadline with
/// advance()/advance_to(). Due sleepers are released one at a time in deadline order (ties
/// in the order they went to sleep), and each sees now() equal to its own deadline when it
/// wakes, so several sleeping threads are woken deterministically.
class ManualClock final : public Clock {
 public:
  /// How sleep_until() moves virtual time (see above).
  enum class Mode {
    kAutoAdvance,  ///< sleep_until() moves time to the deadline and returns at once
    kBlocking      ///< sleep_until() blocks until another thread advances time past the deadline
  };

  /// Virtual time starts at an arbitrary positive instant, so `now() - 1 h` is still valid.
  static constexpr TimePoint kStart = TimePoint{std::chrono::hours(1000)};

  /// Virtual time starting at `start`.
  explicit ManualClock(Mode mode = Mode::kAutoAdvance, TimePoint start = kStart);
  ~ManualClock() override;

  [[nodiscard]] TimePoint now() const noexcept override;
  bool sleep_until(TimePoint deadline, const Signal* wake = nullptr,
                   std::uint64_t seen = 0) override;

  /// advance_to(now() + d).
  void advance(Duration d);
  /// Releases every sleeper due by `t`, one at a time in deadline order (time moves to each
  /// one's deadline as it goes), then moves time to `t`. Time never moves backwards.
  void advance_to(TimePoint t);

  /// kBlocking: moves time to the earliest sleeper's deadline and releases it. Returns false
  /// when nobody sleeps.
  bool advance_to_next_sleeper();

  /// kBlocking: blocks (in real time) until at least `n` threads sleep on this clock.
  void wait_for_sleepers(std::size_t n) const;
  /// How many threads sleep on this clock now (released ones not counted).
  [[nodiscard]] std::size_t sleepers() const;

  /// Total virtual time spent in sleep_until() by all callers (tests assert waits with it).
  [[nodiscard]] Duration total_slept() const noexcept {
    return Duration(slept_.load(std::memory_order_relaxed));
  }

 private:
  struct Sleeper {
    TimePoint deadline;
    std::uint64_t order;
    bool released = false;
  };
  void release_due_locked(std::unique_lock<std::mutex>& lock, TimePoint t);

  const Mode mode_;
  std::atomic<std::int64_t> now_ns_;
  std::atomic<std::int64_t> slept_{0};
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::vector<Sleeper*> sleepers_;
  std::uint64_t next_order_ = 0;
};

/// `d` for messages: "1500 ms"; a wait rounds up to the millisecond, so a non-zero wait
/// never reads "0 ms"; under a millisecond either way, microseconds ("-250 us").
[[nodiscard]] std::string ms_text(Duration d);

}  // namespace holdfast
