/// @file
/// Random: a small, seedable, copyable random source (xoshiro256++ seeded by SplitMix64).
///
/// Backoff jitter draws from one of these. Each retry operation owns its own copy, so no
/// random state is shared between threads; tests and the simulator seed it for exact
/// reproducibility.
#pragma once

#include <cstdint>

namespace holdfast {

/// A small, seedable, copyable random source (xoshiro256++). Not thread-safe: each user
/// owns its copy.
class Random {
 public:
  /// Seeded from `seed` (through SplitMix64): equal seeds give equal sequences.
  explicit Random(std::uint64_t seed) noexcept;

  /// A generator seeded from the thread's own entropy-seeded sequence (no lock, no syscall
  /// after the first call on a thread).
  static Random from_thread() noexcept;

  /// The next 64 random bits.
  std::uint64_t next() noexcept;
  /// Uniform in [0, 1).
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform in [lo, hi].
  double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform(); }

 private:
  std::uint64_t s_[4];
};

}  // namespace holdfast
