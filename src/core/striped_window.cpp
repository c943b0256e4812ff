#include "holdfast/detail/striped_window.hpp"

#include <algorithm>
#include <bit>

#include "holdfast/core/circuit_breaker.hpp"

namespace holdfast::detail {

using namespace window_bits;

StripedWindow::StripedWindow(int buckets, std::int64_t bucket_ns)
    : bucket_ns_(bucket_ns),
      buckets_(buckets),
      // The cached position and the buckets, in whole cache lines (a power of two of them).
      stripe_shift_(static_cast<unsigned>(
          std::bit_width((kCacheWords + static_cast<std::size_t>(buckets) + 7) / 8 - 1))),
      ring_(new Line[std::size_t{kStripes} << stripe_shift_]()) {}

StripedWindow::~StripedWindow() = default;

// Calls arrive in time order almost always, so the owner of a stripe rarely divides: the
// bucket it counted in last is cached at the start of its stripe.
void StripedWindow::count_slow(std::int64_t end_ns, bool failure) noexcept {
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

WindowCounts StripedWindow::sum(std::int64_t now_ns) const noexcept {
  WindowCounts out;
  const std::int64_t last = bucket_index(now_ns);
  const std::int64_t since =
      std::max<std::int64_t>(since_bucket_.load(std::memory_order_acquire), 0);
  for (int back = 0; back < buckets_ && last - back >= since; ++back) {
    const auto index = static_cast<std::uint64_t>(last - back);
    const auto slot = static_cast<std::size_t>(index % static_cast<std::uint64_t>(buckets_));
    const std::uint64_t tag = index & kTagMask;
    for (unsigned s = 0; s < kStripes; ++s) {
      const std::uint64_t w = stripe_at(s)[kCacheWords + slot].load(std::memory_order_relaxed);
      if (calls_of(w) != 0 && tag_of(w) == tag) {
        out.calls += calls_of(w);
        out.failures += failures_of(w);
      }
    }
  }
  return out;
}

}  // namespace holdfast::detail
