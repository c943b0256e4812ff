#include "holdfast/detail/slow_copy.hpp"

#include <algorithm>

namespace holdfast::pg::detail {
namespace {

std::int64_t ns_of(TimePoint t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

void CopyLatency::record(Duration latency) noexcept {
  const std::int64_t ns = std::max<std::int64_t>(
      1, std::chrono::duration_cast<std::chrono::nanoseconds>(latency).count());
  const std::int64_t old = ewma_ns_.load(std::memory_order_relaxed);
  ewma_ns_.store(old == 0 ? ns : old + (ns - old) / 8, std::memory_order_relaxed);
  const std::uint64_t n = count_.fetch_add(1, std::memory_order_relaxed) + 1;
  ring_[(n - 1) % kRing].store(ns, std::memory_order_relaxed);
  if (n % kRefresh != 0) return;
  // Every kRefresh-th answer: the p95 of what the ring holds (a few hundred nanoseconds, so
  // 1 read in 16 pays it, not every read).
  const std::size_t size = n < kRing ? static_cast<std::size_t>(n) : kRing;
  std::array<std::int64_t, kRing> v{};
  for (std::size_t i = 0; i < size; ++i)
    v[i] = ring_[i].load(std::memory_order_relaxed);
  // The value with 95 % of the others at or below it: index ceil(0.95 n) - 1.
  const std::size_t at = (size * 95 + 99) / 100 - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(at),
                   v.begin() + static_cast<std::ptrdiff_t>(size));
  p95_ns_.store(v[at], std::memory_order_relaxed);
}

Duration slow_threshold(Duration primary_recent, const SlowCopyRule& rule) noexcept {
  const auto scaled =
      std::chrono::duration_cast<Duration>(std::chrono::duration<double, Duration::period>(
          static_cast<double>(primary_recent.count()) * rule.factor));
  return std::max(rule.floor, scaled);
}

SlowCopy::Use SlowCopy::use(TimePoint now) noexcept {
  if (!ejected_.load(std::memory_order_relaxed)) [[likely]] {
    return Use::kRead;
  }
  const std::int64_t t = ns_of(now);
  std::int64_t next = next_probe_ns_.load(std::memory_order_relaxed);
  if (t < next) return Use::kSkip;
  const std::int64_t every =
      std::chrono::duration_cast<std::chrono::nanoseconds>(rule_.probe_every).count();
  // One read of those that find the probe due wins it.
  return next_probe_ns_.compare_exchange_strong(next, t + every, std::memory_order_relaxed)
             ? Use::kProbe
             : Use::kSkip;
}

bool SlowCopy::slow(TimePoint now) noexcept {
  fast_run_.store(0, std::memory_order_relaxed);
  if (slow_run_.fetch_add(1, std::memory_order_relaxed) + 1 < rule_.slow_in_row) return false;
  if (ejected_.exchange(true, std::memory_order_relaxed)) return false;
  const std::int64_t every =
      std::chrono::duration_cast<std::chrono::nanoseconds>(rule_.probe_every).count();
  next_probe_ns_.store(ns_of(now) + every, std::memory_order_relaxed);
  ejections_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool SlowCopy::fast() noexcept {
  // The success path of a healthy copy: one load, no write.
  if (slow_run_.load(std::memory_order_relaxed) != 0) slow_run_.store(0, std::memory_order_relaxed);
  if (!ejected_.load(std::memory_order_relaxed)) [[likely]] {
    return false;
  }
  if (fast_run_.fetch_add(1, std::memory_order_relaxed) + 1 < rule_.fast_to_return) return false;
  fast_run_.store(0, std::memory_order_relaxed);
  return ejected_.exchange(false, std::memory_order_relaxed);
}

bool judge_replica(CopyState& replica, Duration primary_recent, bool lost_hedge, Duration latency,
                   TimePoint now) noexcept {
  if (!lost_hedge) replica.latency.record(latency);
  if (!replica.slow.on()) return false;
  if (lost_hedge || latency > slow_threshold(primary_recent, replica.slow.rule())) {
    return replica.slow.slow(now);
  }
  (void)replica.slow.fast();
  return false;
}

bool HedgeBudget::spend() noexcept {
  std::int64_t t = tokens_.load(std::memory_order_relaxed);
  while (t >= kOne) {
    if (tokens_.compare_exchange_weak(t, t - kOne, std::memory_order_relaxed)) return true;
  }
  return false;
}

}  // namespace holdfast::pg::detail
