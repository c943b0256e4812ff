// Internal: the circuit breaker's sliding window of calls and overload failures, counted
// without a lock.
//
// The window is `buckets` time buckets of `bucket_ns` each. Every thread counts in a stripe
// of its own (holdfast/detail/stripes.hpp), so counting is a plain load and store on a
// cache line no other thread writes; threads past the owned stripes share one stripe and
// use compare-and-swap.
// sum() adds up every stripe's buckets that belong to the window.
//
// Thread safety: count(), sum() and forget() may be called from any thread at any time.
// Counts are relaxed: a sum taken while others count sees some of their calls, not all.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "holdfast/core/circuit_breaker.hpp"
#include "holdfast/detail/stripes.hpp"

namespace holdfast::detail {

// StripedWindow (declared in holdfast/core/circuit_breaker.hpp, where the breaker holds one):
//
//   StripedWindow(buckets, bucket_ns)
//       REQUIRES: 1 <= buckets <= kMaxWindowBuckets, bucket_ns >= 1.
//   count(end_ns, failure)
//       Counts one call that ended at `end_ns`, a failure or not. A call so old that its
//       bucket has been reused for a later one is not counted. Never allocates (except
//       once per thread: its first count claims a stripe).
//   sum(now_ns)
//       The calls and failures in the window whose last bucket holds `now_ns`, leaving out
//       the buckets before the last forget().
//   forget(now_ns)
//       The window starts afresh after the bucket of `now_ns` (whose calls may be from
//       before). Nothing is erased: only a stripe's owner writes it.
inline constexpr int kMaxWindowBuckets = 64;

namespace window_bits {
// A bucket is one 64-bit word: | tag (24 bits) | failures (20) | calls (20) |. The tag is
// the low 24 bits of the bucket's index (time / bucket width), so a reader can tell a
// bucket of this lap of the ring from a stale one. A word with no calls is empty whatever
// its tag. Counts saturate at 2^20 - 1 calls per bucket per stripe (a million calls a
// second from one thread with the default 1 s buckets).
inline constexpr unsigned kCountBits = 20;
inline constexpr std::uint64_t kCountMask = (std::uint64_t{1} << kCountBits) - 1;
inline constexpr unsigned kTagShift = 2 * kCountBits;
inline constexpr std::uint64_t kTagMask = (std::uint64_t{1} << (64 - kTagShift)) - 1;
constexpr std::uint64_t calls_of(std::uint64_t w) noexcept {
  return w & kCountMask;
}
constexpr std::uint64_t failures_of(std::uint64_t w) noexcept {
  return (w >> kCountBits) & kCountMask;
}
constexpr std::uint64_t tag_of(std::uint64_t w) noexcept {
  return w >> kTagShift;
}

// A stripe starts with where its owner last counted: [0] the bucket index, [1] the
// bucket's start time, [2] its slot in the ring; the buckets follow, so a call usually
// touches one cache line of its own. Each stripe is rounded up to whole cache lines.
inline constexpr std::size_t kCacheWords = 3;
}  // namespace window_bits

struct StripedWindow::Line {
  alignas(64) std::atomic<std::uint64_t> word[8];
};

inline std::int64_t StripedWindow::bucket_index(std::int64_t ns) const noexcept {
  return ns / bucket_ns_;
}

inline std::atomic<std::uint64_t>* StripedWindow::stripe_at(unsigned stripe) const noexcept {
  return ring_[std::size_t{stripe} << stripe_shift_].word;
}

inline void StripedWindow::forget(std::int64_t now_ns) noexcept {
  since_bucket_.store(bucket_index(now_ns) + 1, std::memory_order_release);
}

// Calls arrive in time order almost always, so the owner of a stripe rarely divides: the
// bucket it counted in last is cached at the start of its stripe.
inline void StripedWindow::count(std::int64_t end_ns, bool failure) noexcept {
  using namespace window_bits;
  const unsigned stripe_index = thread_stripe();
  const bool owned = stripe_index < kOwnedStripes;
  std::atomic<std::uint64_t>* stripe = stripe_at(stripe_index);
  std::int64_t index;
  std::size_t slot;
  auto& cached_index = stripe[0];
  auto& cached_start = stripe[1];
  auto& cached_slot = stripe[2];
  const auto start = static_cast<std::int64_t>(cached_start.load(std::memory_order_relaxed));
  if (owned && end_ns >= start && end_ns - start < bucket_ns_) [[likely]] {
    index = static_cast<std::int64_t>(cached_index.load(std::memory_order_relaxed));
    slot = static_cast<std::size_t>(cached_slot.load(std::memory_order_relaxed));
  } else {
    index = bucket_index(end_ns);
    slot = static_cast<std::size_t>(static_cast<std::uint64_t>(index) %
                                    static_cast<std::uint64_t>(buckets_));
    if (owned && index >= static_cast<std::int64_t>(cached_index.load(std::memory_order_relaxed))) {
      cached_index.store(static_cast<std::uint64_t>(index), std::memory_order_relaxed);
      cached_start.store(static_cast<std::uint64_t>(index * bucket_ns_), std::memory_order_relaxed);
      cached_slot.store(slot, std::memory_order_relaxed);
    }
  }
  std::atomic<std::uint64_t>& cell = stripe[kCacheWords + slot];
  const std::uint64_t tag = static_cast<std::uint64_t>(index) & kTagMask;
  std::uint64_t w = cell.load(std::memory_order_relaxed);
  for (;;) {
    std::uint64_t calls = 0;
    std::uint64_t failures = 0;
    if (calls_of(w) != 0) {
      if (tag_of(w) == tag) {
        calls = calls_of(w);
        failures = failures_of(w);
      } else if (((tag - tag_of(w)) & kTagMask) > kTagMask / 2) {
        // The slot already holds a later bucket: this call finished so long ago (by its
        // own timestamps) that it has left the window.
        return;
      }
    }
    if (calls < kCountMask) ++calls;
    if (failure && failures < kCountMask) ++failures;
    const std::uint64_t next = (tag << kTagShift) | (failures << kCountBits) | calls;
    if (owned) {
      // One writer: no locked instruction needed.
      cell.store(next, std::memory_order_relaxed);
      return;
    }
    if (cell.compare_exchange_weak(w, next, std::memory_order_relaxed, std::memory_order_relaxed)) {
      return;
    }
  }
}

}  // namespace holdfast::detail
