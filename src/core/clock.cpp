#include "holdfast/core/clock.hpp"

#include <time.h>

#include <algorithm>
#include <string>
#include <thread>

namespace holdfast {

void Signal::notify_all() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  changed_.notify_all();
}

Clock& Clock::system() noexcept {
  static SystemClock clock;
  return clock;
}

TimePoint SystemClock::now() const noexcept {
  return read_precise();
}

TimePoint SystemClock::read_precise() noexcept {
  return std::chrono::time_point_cast<Duration>(std::chrono::steady_clock::now());
}

bool SystemClock::sleep_until(TimePoint deadline, const Signal* wake, std::uint64_t seen) {
  if (wake == nullptr) {
    std::this_thread::sleep_until(deadline);
    return false;
  }
  std::unique_lock<std::mutex> lock(wake->mutex_);
  return wake->changed_.wait_until(lock, deadline, [&] { return wake->generation() != seen; });
}

ManualClock::ManualClock(Mode mode, TimePoint start)
    : mode_(mode), now_ns_(start.time_since_epoch().count()) {}

ManualClock::~ManualClock() = default;

TimePoint ManualClock::now() const noexcept {
  return TimePoint(Duration(now_ns_.load(std::memory_order_acquire)));
}

bool ManualClock::sleep_until(TimePoint deadline, const Signal* wake, std::uint64_t seen) {
  const TimePoint start = now();
  if (wake != nullptr && wake->generation() != seen) return true;
  if (deadline <= start) return false;
  if (mode_ == Mode::kAutoAdvance) {
    // Move time forward, never backward (another thread may have gone further).
    std::int64_t cur = now_ns_.load(std::memory_order_acquire);
    const std::int64_t target = deadline.time_since_epoch().count();
    while (cur < target && !now_ns_.compare_exchange_weak(cur, target, std::memory_order_acq_rel)) {
    }
    slept_.fetch_add((deadline - start).count(), std::memory_order_relaxed);
    return false;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  Sleeper self{deadline, next_order_++};
  sleepers_.push_back(&self);
  changed_.notify_all();
  bool woken = false;
  // The signal has no link to this clock, so a signalled sleeper is noticed by polling it
  // in real time; virtual time is unaffected.
  while (!self.released) {
    if (wake != nullptr && wake->generation() != seen) {
      woken = true;
      break;
    }
    if (wake != nullptr) {
      changed_.wait_for(lock, std::chrono::milliseconds(1));
    } else {
      changed_.wait(lock);
    }
  }
  sleepers_.erase(std::find(sleepers_.begin(), sleepers_.end(), &self));
  slept_.fetch_add((now() - start).count(), std::memory_order_relaxed);
  changed_.notify_all();
  return woken;
}

void ManualClock::release_due_locked(std::unique_lock<std::mutex>& lock, TimePoint t) {
  for (;;) {
    Sleeper* next = nullptr;
    for (Sleeper* s : sleepers_) {
      if (s->released || s->deadline > t) continue;
      if (next == nullptr || s->deadline < next->deadline ||
          (s->deadline == next->deadline && s->order < next->order)) {
        next = s;
      }
    }
    if (next == nullptr) break;
    if (next->deadline > now()) {
      now_ns_.store(next->deadline.time_since_epoch().count(), std::memory_order_release);
    }
    next->released = true;
    changed_.notify_all();
    // Wait until that sleeper has left, so wake-ups happen one at a time, in order. Compare
    // by `order`, not by address: a thread that sleeps again at once (a background loop)
    // puts its next Sleeper at the same stack address.
    const std::uint64_t order = next->order;
    changed_.wait(lock, [&] {
      return std::none_of(sleepers_.begin(), sleepers_.end(),
                          [&](const Sleeper* s) { return s->order == order; });
    });
  }
  if (t > now()) now_ns_.store(t.time_since_epoch().count(), std::memory_order_release);
}

void ManualClock::advance(Duration d) {
  advance_to(now() + d);
}

void ManualClock::advance_to(TimePoint t) {
  std::unique_lock<std::mutex> lock(mutex_);
  release_due_locked(lock, t);
}

bool ManualClock::advance_to_next_sleeper() {
  std::unique_lock<std::mutex> lock(mutex_);
  const Sleeper* next = nullptr;
  for (const Sleeper* s : sleepers_) {
    if (!s->released && (next == nullptr || s->deadline < next->deadline)) next = s;
  }
  if (next == nullptr) return false;
  release_due_locked(lock, std::max(next->deadline, now()));
  return true;
}

void ManualClock::wait_for_sleepers(std::size_t n) const {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] {
    std::size_t waiting = 0;
    for (const Sleeper* s : sleepers_)
      waiting += s->released ? 0 : 1;
    return waiting >= n;
  });
}

std::size_t ManualClock::sleepers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t waiting = 0;
  for (const Sleeper* s : sleepers_)
    waiting += s->released ? 0 : 1;
  return waiting;
}

std::string ms_text(Duration d) {
  using std::chrono::microseconds;
  using std::chrono::milliseconds;
  if (d != Duration::zero() && d > -milliseconds(1) && d < milliseconds(1)) {
    const auto us = d > Duration::zero() ? std::chrono::ceil<microseconds>(d)
                                         : std::chrono::floor<microseconds>(d);
    return std::to_string(us.count()) + " us";
  }
  const auto ms = d > Duration::zero() ? std::chrono::ceil<milliseconds>(d)
                                       : std::chrono::floor<milliseconds>(d);
  return std::to_string(ms.count()) + " ms";
}

}  // namespace holdfast
