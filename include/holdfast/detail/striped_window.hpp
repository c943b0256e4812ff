// Internal (not part of the API; public only so that the breaker's success path is inlined):
// the circuit breaker's sliding window of calls and overload failures, counted without a
// lock.
//
// The window is `buckets` time buckets of `bucket_ns` each. Every thread counts in a stripe
// of its own (holdfast/detail/stripes.hpp), so counting is a plain load and store on a
// cache line no other thread writes; threads past the owned stripes share one stripe and
// use compare-and-swap. sum() adds up every stripe's buckets that belong to the window.
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
//
// Thread safety: count(), sum() and forget() may be called from any thread at any time.
// Counts are relaxed: a sum taken while others count sees some of their calls, not all.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "holdfast/detail/stripes.hpp"

namespace holdfast {
struct WindowCounts;  // holdfast/core/circuit_breaker.hpp
}  // namespace holdfast

namespace holdfast::detail {

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

// The breaker's sliding window (see the top of this file).
class StripedWindow {
 public:
  StripedWindow(int buckets, std::int64_t bucket_ns);
  ~StripedWindow();
  StripedWindow(const StripedWindow&) = delete;
  StripedWindow& operator=(const StripedWindow&) = delete;

  inline void count(std::int64_t end_ns, bool failure) noexcept;
  [[nodiscard]] WindowCounts sum(std::int64_t now_ns) const noexcept;
  inline void forget(std::int64_t now_ns) noexcept;

 private:
  struct Line {
    alignas(64) std::atomic<std::uint64_t> word[8];
  };
  // count() when the inline case does not apply (striped_window.cpp).
  void count_slow(std::int64_t end_ns, bool failure) noexcept;
  [[nodiscard]] std::int64_t bucket_index(std::int64_t ns) const noexcept {
    return ns / bucket_ns_;
  }
  [[nodiscard]] std::atomic<std::uint64_t>* stripe_at(unsigned stripe) const noexcept {
    return ring_[std::size_t{stripe} << stripe_shift_].word;
  }

  const std::int64_t bucket_ns_;
  const int buckets_;
  // Cache lines per stripe: a power of two (1 << stripe_shift_), so a stripe is found
  // with a shift.
  const unsigned stripe_shift_;
  std::unique_ptr<Line[]> ring_;
  std::atomic<std::int64_t> since_bucket_{0};
};

inline void StripedWindow::forget(std::int64_t now_ns) noexcept {
  since_bucket_.store(bucket_index(now_ns) + 1, std::memory_order_release);
}

// The common case inline: the thread owns its stripe, the call ended in the bucket the
// stripe counted in last, and that bucket's word holds calls of it. Its new word is then the
// old one plus one call (and one failure) where the counts have room, which is what
// count_slow() would store.
inline void StripedWindow::count(std::int64_t end_ns, bool failure) noexcept {
  using namespace window_bits;
  // A thread with no stripe yet (kNoStripe) claims one in count_slow().
  const unsigned stripe_index = thread_stripe_index;
  if (stripe_index < kOwnedStripes) [[likely]] {
    std::atomic<std::uint64_t>* stripe = stripe_at(stripe_index);
    const auto start = static_cast<std::int64_t>(stripe[1].load(std::memory_order_relaxed));
    if (end_ns >= start && end_ns - start < bucket_ns_) [[likely]] {
      const std::uint64_t tag = stripe[0].load(std::memory_order_relaxed) & kTagMask;
      std::atomic<std::uint64_t>& cell =
          stripe[kCacheWords + static_cast<std::size_t>(stripe[2].load(std::memory_order_relaxed))];
      const std::uint64_t w = cell.load(std::memory_order_relaxed);
      if (tag_of(w) == tag && calls_of(w) != 0) [[likely]] {
        // The counts saturate; one writer: no locked instruction needed.
        std::uint64_t next = w + std::uint64_t{calls_of(w) < kCountMask};
        if (failure && failures_of(w) < kCountMask) next += std::uint64_t{1} << kCountBits;
        cell.store(next, std::memory_order_relaxed);
        return;
      }
    }
  }
  count_slow(end_ns, failure);
}

}  // namespace holdfast::detail
