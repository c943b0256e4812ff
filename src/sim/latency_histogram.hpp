// A fixed-size log-linear histogram of latencies in microseconds (about 3% resolution),
// for per-second p99s without storing samples. Internal to the simulator.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>

namespace holdfast::sim::detail {

class LatencyHistogram {
 public:
  void add(std::uint64_t micros) noexcept {
    ++counts_[index(micros)];
    ++total_;
  }
  void add(const LatencyHistogram& other) noexcept {
    for (std::size_t i = 0; i < kBuckets; ++i)
      counts_[i] += other.counts_[i];
    total_ += other.total_;
  }
  void clear() noexcept {
    if (total_ == 0) return;
    counts_.fill(0);
    total_ = 0;
  }
  [[nodiscard]] std::uint64_t count() const noexcept { return total_; }

  // The q-quantile (0 < q <= 1) in microseconds: the middle of the bucket that holds it.
  // 0 when empty.
  [[nodiscard]] double quantile(double q) const noexcept {
    if (total_ == 0) return 0.0;
    const auto rank = static_cast<std::uint64_t>(q * static_cast<double>(total_) + 0.999999);
    const std::uint64_t target = std::clamp<std::uint64_t>(rank, 1, total_);
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= target) return midpoint(i);
    }
    return midpoint(kBuckets - 1);
  }

 private:
  static constexpr int kSubBits = 5;  // 32 sub-buckets per power of two
  static constexpr std::uint64_t kLinear = std::uint64_t{1} << (kSubBits + 1);  // 0..63 exact
  static constexpr int kMaxExponent = 42;  // ~50 days in microseconds: more than any run
  static constexpr std::size_t kBuckets =
      kLinear + static_cast<std::size_t>(kMaxExponent - kSubBits) * (std::size_t{1} << kSubBits);

  static std::size_t index(std::uint64_t v) noexcept {
    if (v < kLinear) return static_cast<std::size_t>(v);
    int e = std::bit_width(v) - 1;  // >= kSubBits + 1
    if (e >= kMaxExponent + 1) return kBuckets - 1;
    const std::uint64_t sub = (v >> (e - kSubBits)) & ((std::uint64_t{1} << kSubBits) - 1);
    return kLinear + static_cast<std::size_t>(e - kSubBits - 1) * (std::size_t{1} << kSubBits) +
           static_cast<std::size_t>(sub);
  }
  static double midpoint(std::size_t i) noexcept {
    if (i < kLinear) return static_cast<double>(i);
    const std::size_t k = i - kLinear;
    const int e = static_cast<int>(k >> kSubBits) + kSubBits + 1;
    const std::uint64_t sub = k & ((std::size_t{1} << kSubBits) - 1);
    const std::uint64_t width = std::uint64_t{1} << (e - kSubBits);
    const std::uint64_t low = (std::uint64_t{1} << e) + sub * width;
    return static_cast<double>(low) + static_cast<double>(width) / 2.0;
  }

  std::array<std::uint32_t, kBuckets> counts_{};
  std::uint64_t total_ = 0;
};

}  // namespace holdfast::sim::detail
