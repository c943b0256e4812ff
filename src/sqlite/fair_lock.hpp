// FairLock: a mutual-exclusion lock that serves waiters first come, first served and whose
// waits end at a deadline.
//
// The writer connection is shared by every writer of a process. SQLite's own busy handler
// polls, so a thread that commits back to back wins almost every race and the others time
// out; queueing them here, in arrival order, is what makes the wait of each writer bounded
// by the work queued ahead of it.
//
// Uncontended, lock and unlock are one compare-and-swap each. A waiter queues a node on its
// own stack (no allocation) and sleeps on the Clock, so tests can drive it on ManualClock.
// unlock() hands the lock straight to the oldest waiter: a newcomer cannot barge in.
//
// Thread safety: all methods may be called from any thread; unlock() only by the owner.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "holdfast/core/clock.hpp"

namespace holdfast::sqlite::detail {

class FairLock {
 public:
  explicit FairLock(Clock& clock) noexcept : clock_(&clock) {}
  FairLock(const FairLock&) = delete;
  FairLock& operator=(const FairLock&) = delete;

  // Takes the lock if it is free and nobody is queued.
  bool try_lock() noexcept;
  // Takes the lock, waiting in line until `deadline` at the latest. False: timed out, the
  // lock is not held.
  bool lock_until(TimePoint deadline);
  // REQUIRES: held by the caller.
  void unlock() noexcept;

  // Waiters in line now (tests and diagnostics).
  [[nodiscard]] std::size_t queued() const;

 private:
  struct Waiter {
    Waiter* next = nullptr;
    bool granted = false;
    Signal wake;
  };
  static constexpr std::uint32_t kLocked = 1;
  static constexpr std::uint32_t kQueued = 2;

  bool lock_slow(TimePoint deadline);
  void remove_locked(Waiter* w) noexcept;

  Clock* clock_;
  std::atomic<std::uint32_t> state_{0};
  mutable std::mutex mutex_;  // guards the queue
  Waiter* head_ = nullptr;
  Waiter* tail_ = nullptr;
};

}  // namespace holdfast::sqlite::detail
