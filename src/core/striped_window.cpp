#include "striped_window.hpp"

#include <algorithm>
#include <bit>

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
