// What a replica's reads tell about it: how long its replay has trailed the WAL it received
// (ReplayLag), whether it can have replayed a request's writes (CatchUp), and when its lag
// makes it unhealthy (replay_lag_status). The read path is database.cpp's.
#include <algorithm>
#include <string>

#include "database_internal.hpp"
#include "holdfast/clock.hpp"
#include "holdfast/postgres.hpp"

namespace holdfast::pg {

Duration Database::ReplayLag::observe(std::uint64_t replayed, std::uint64_t received,
                                      TimePoint now) noexcept {
  // Concurrent reads may interleave here: each sees a consistent enough picture, as the
  // positions only grow and the answer is a lower bound of the lag.
  const std::int64_t now_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  std::uint64_t target = target_.load(std::memory_order_relaxed);
  if (target != 0 && replayed >= target) {
    target_.store(0, std::memory_order_relaxed);  // caught up with what it had then
    target = 0;
  }
  if (target == 0) {
    if (received <= replayed) return Duration::zero();
    target_.store(received, std::memory_order_relaxed);
    since_ns_.store(now_ns, std::memory_order_relaxed);
    return Duration::zero();
  }
  return std::chrono::nanoseconds(now_ns - since_ns_.load(std::memory_order_relaxed));
}

void Database::ReplayLag::forget() noexcept {
  target_.store(0, std::memory_order_relaxed);
}

Status Database::replay_lag_status(Endpoint& replica, std::uint64_t replayed,
                                   std::uint64_t received, TimePoint now, Duration max_lag) {
  const Duration lag = replica.lag.observe(replayed, received, now);
  if (lag <= max_lag) return Status();
  Status s(Code::kUnavailable,
           replica.name + " has not replayed WAL it received " + ms_text(lag) +
               " ago (max_replica_lag " + ms_text(max_lag) + ")",
           Fault{RetryScope::kStatement, Outcome::kNotApplied, Pace::kSlow, true});
  s.with_sqlstate("");
  return s;
}

namespace {
constexpr std::int64_t kCatchUpHoldFirstNs = 50'000'000;   // 50 ms
constexpr std::int64_t kCatchUpHoldMaxNs = 1'000'000'000;  // 1 s

std::int64_t ns_of(TimePoint t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

void Database::CatchUp::saw(std::uint64_t replayed) noexcept {
  std::uint64_t known = known_.load(std::memory_order_relaxed);
  while (replayed > known &&
         !known_.compare_exchange_weak(known, replayed, std::memory_order_relaxed)) {
  }
}

void Database::CatchUp::behind(std::uint64_t replayed, TimePoint now) noexcept {
  // Racing reads may each set the hold; any of their answers is a fair one.
  saw(replayed);
  const std::int64_t last = hold_ns_.load(std::memory_order_relaxed);
  const bool stuck = last > 0 && stuck_at_.load(std::memory_order_relaxed) == replayed;
  const std::int64_t hold = stuck ? std::min(2 * last, kCatchUpHoldMaxNs) : kCatchUpHoldFirstNs;
  stuck_at_.store(replayed, std::memory_order_relaxed);
  hold_ns_.store(hold, std::memory_order_relaxed);
  until_ns_.store(ns_of(now) + hold, std::memory_order_relaxed);
}

bool Database::CatchUp::skip(std::uint64_t need, TimePoint now) const noexcept {
  // A replica reported past `need` can answer (the read still checks); one found behind
  // is given its hold to catch up before a read tries it again.
  return need > known_.load(std::memory_order_relaxed) &&
         ns_of(now) < until_ns_.load(std::memory_order_relaxed);
}

}  // namespace holdfast::pg
