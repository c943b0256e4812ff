#include "fair_lock.hpp"

namespace holdfast::sqlite::detail {

bool FairLock::try_lock() noexcept {
  std::uint32_t expected = 0;
  return state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire,
                                        std::memory_order_relaxed);
}

bool FairLock::lock_until(TimePoint deadline) {
  if (try_lock()) [[likely]]
    return true;
  return lock_slow(deadline);
}

bool FairLock::lock_slow(TimePoint deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  // Either take the lock (it is free and, the queue being part of the state, nobody waits)
  // or mark it queued while it is held, so that its owner's unlock() comes here and hands
  // it over instead of freeing it.
  for (;;) {
    std::uint32_t s = state_.load(std::memory_order_relaxed);
    if ((s & kLocked) == 0) {
      if (state_.compare_exchange_weak(s, s | kLocked, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        return true;
      }
      continue;
    }
    if ((s & kQueued) != 0) break;
    if (state_.compare_exchange_weak(s, s | kQueued, std::memory_order_relaxed,
                                     std::memory_order_relaxed)) {
      break;
    }
  }
  Waiter self;
  if (tail_ != nullptr) {
    tail_->next = &self;
  } else {
    head_ = &self;
  }
  tail_ = &self;
  for (;;) {
    if (self.granted) return true;
    if (clock_->now() >= deadline) {
      remove_locked(&self);
      return false;
    }
    const std::uint64_t seen = self.wake.generation();
    lock.unlock();
    clock_->sleep_until(deadline, &self.wake, seen);
    lock.lock();
  }
}

void FairLock::remove_locked(Waiter* w) noexcept {
  Waiter* prev = nullptr;
  for (Waiter* it = head_; it != nullptr; prev = it, it = it->next) {
    if (it != w) continue;
    (prev != nullptr ? prev->next : head_) = it->next;
    if (tail_ == it) tail_ = prev;
    break;
  }
  if (head_ == nullptr) state_.fetch_and(~kQueued, std::memory_order_relaxed);
}

void FairLock::unlock() noexcept {
  std::uint32_t expected = kLocked;
  if (state_.compare_exchange_strong(expected, 0, std::memory_order_release,
                                     std::memory_order_relaxed)) [[likely]] {
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Waiter* next = head_;
  if (next == nullptr) {
    // Everybody who queued gave up meanwhile.
    state_.store(0, std::memory_order_release);
    return;
  }
  head_ = next->next;
  if (head_ == nullptr) {
    tail_ = nullptr;
    state_.store(kLocked, std::memory_order_release);  // still held: by `next` now
  }
  // The waiter cannot return (and destroy its node) before we let go of mutex_.
  next->granted = true;
  next->wake.notify_all();
}

std::size_t FairLock::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t n = 0;
  for (const Waiter* it = head_; it != nullptr; it = it->next)
    ++n;
  return n;
}

}  // namespace holdfast::sqlite::detail
