// What of holdfast/detail/read_route.hpp is not inline (ADR 0057): the standbys asked again,
// and the hold of a standby found behind a request's writes (CatchUp, ADR 0016).
#include "holdfast/detail/read_route.hpp"

#include <algorithm>

#include "holdfast/core/circuit_breaker.hpp"

namespace holdfast::pg::detail {
namespace {

std::int64_t ns_of(TimePoint t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

void CatchUp::saw(std::uint64_t replayed) noexcept {
  std::uint64_t known = known_.load(std::memory_order_relaxed);
  while (replayed > known &&
         !known_.compare_exchange_weak(known, replayed, std::memory_order_relaxed)) {
  }
}

void CatchUp::behind(std::uint64_t replayed, TimePoint now) noexcept {
  saw(replayed);
  const std::int64_t last = hold_ns_.load(std::memory_order_relaxed);
  const bool stuck = last > 0 && stuck_at_.load(std::memory_order_relaxed) == replayed;
  const std::int64_t hold =
      stuck ? std::min<std::int64_t>(2 * last, kLongestHold.count()) : kFirstHold.count();
  stuck_at_.store(replayed, std::memory_order_relaxed);
  hold_ns_.store(hold, std::memory_order_relaxed);
  until_ns_.store(ns_of(now) + hold, std::memory_order_relaxed);
}

bool CatchUp::skip(std::uint64_t need, TimePoint now) const noexcept {
  // A standby reported past `need` can answer (the read still checks); one found behind is
  // given its hold to catch up before such a read asks it again.
  return need > known_.load(std::memory_order_relaxed) &&
         ns_of(now) < until_ns_.load(std::memory_order_relaxed);
}

bool standbys_again_after(const Status& primary, std::uint64_t behind) noexcept {
  return !primary.ok() && behind != 0 && (is_own_shedding(primary) || primary.fault().transient());
}

}  // namespace holdfast::pg::detail
