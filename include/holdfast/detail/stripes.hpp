// Internal (not part of the API; public only so that hot counters can be inlined):
// spreading hot counters over cache lines by thread.
//
// The first time a thread counts something it claims one of kOwnedStripes stripes for
// itself, until it exits. A stripe has one writer, so its owner updates it with a plain
// load and store (no locked instruction, no cache line shared with another writer).
// Threads that find every stripe taken share kSharedStripe and update it with atomic
// read-modify-write operations. Readers sum all stripes.
#pragma once

#include <atomic>
#include <cstdint>

namespace holdfast::detail {

inline constexpr unsigned kOwnedStripes = 8;
inline constexpr unsigned kSharedStripe = kOwnedStripes;  // index of the shared stripe
inline constexpr unsigned kStripes = kOwnedStripes + 1;

inline constexpr unsigned kNoStripe = ~0u;
inline thread_local unsigned thread_stripe_index = kNoStripe;

// Claims a stripe for this thread (or the shared one) and arranges its release at exit.
unsigned claim_stripe() noexcept;

// This thread's stripe: < kOwnedStripes when the thread owns it.
inline unsigned thread_stripe() noexcept {
  const unsigned s = thread_stripe_index;
  if (s == kNoStripe) [[unlikely]]
    return claim_stripe();
  return s;
}

// Adds `n` to a counter in this thread's stripe.
inline void stripe_add(std::atomic<std::uint64_t>& cell, unsigned stripe,
                       std::uint64_t n) noexcept {
  if (stripe < kOwnedStripes) {
    cell.store(cell.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  } else {
    cell.fetch_add(n, std::memory_order_relaxed);
  }
}

}  // namespace holdfast::detail
