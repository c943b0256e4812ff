// The loop a baseline runs around each database call of the drill's panel: what the
// origin's code did, so that the drill measures holdfast against it. The panel's store
// holds one Runner and hands it every call when its strategy is not holdfast.
//
//   none            the call once
//   naive           retry(parameters.hpp's naive policy)
//   backoff         retry(the Tenacity policy)
//   origin-breaker  the Tenacity loop behind an OriginBreaker: refused at once while it is
//                   open; the loop's outcome is one success or one failure to it
//   holdfast        the call once (the library's driver retries inside it)
//
// The baselines retry whatever looks transient, idempotent or not, as a plain retry
// decorator does. Thread-safe: calls may run on many threads at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "baselines/origin_breaker.hpp"
#include "baselines/parameters.hpp"
#include "baselines/strategy.hpp"
#include "holdfast/core/clock.hpp"
#include "holdfast/core/operation.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/core/retry.hpp"
#include "holdfast/core/status.hpp"

namespace holdfast::baselines {

class Runner {
 public:
  // REQUIRES: `clock` outlives the runner; the loops wait on it.
  Runner(Strategy strategy, Clock& clock);
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // `attempt` (a callable returning a Status or a Result) run as the strategy runs it;
  // every time it is called counts as one attempt (attempts()). `op` gives the label and
  // the priority only. A failure the driver marked given up (a driver making one attempt
  // marks it so) is retried all the same: to holdfast's loops a give-up is final
  // (docs/adr/0001), and a baseline's loop sees failures as a plain driver returns them.
  template <class F>
  auto run(const Operation& op, F&& attempt) -> std::invoke_result_t<F&>;

  [[nodiscard]] Strategy strategy() const noexcept { return strategy_; }
  // The attempts run() has made so far.
  [[nodiscard]] std::uint64_t attempts() const noexcept {
    return attempts_.load(std::memory_order_relaxed);
  }
  // origin-breaker's breaker; nullptr for the other strategies.
  [[nodiscard]] OriginBreaker* breaker() noexcept { return breaker_.get(); }

 private:
  Strategy strategy_;
  RetryPolicy policy_;  // naive's or Tenacity's (unused by none and holdfast)
  std::unique_ptr<OriginBreaker> breaker_;
  std::atomic<std::uint64_t> attempts_{0};
};

template <class F>
auto Runner::run(const Operation& op, F&& attempt) -> std::invoke_result_t<F&> {
  using R = std::invoke_result_t<F&>;
  const auto counted = [&]() -> R {
    attempts_.fetch_add(1, std::memory_order_relaxed);
    R r = attempt();
    if (is_ok(r)) return r;
    Status plain(status_of(r));
    plain.with_stop(StopReason::kNone, 0);
    return R(std::move(plain));
  };
  const Operation anything{Idempotency::kIdempotent, true, op.priority, op.label};
  switch (strategy_) {
    case Strategy::kNone:
    case Strategy::kHoldfast:
      return counted();
    case Strategy::kNaive:
    case Strategy::kBackoff:
      return retry(policy_, anything, counted);
    case Strategy::kOriginBreaker: {
      if (!breaker_->can_attempt()) {
        // The origin's own words.
        return R(
            Status(Code::kUnavailable, "Circuit OPEN - database unavailable, request skipped"));
      }
      R r = retry(policy_, anything, counted);
      if (is_ok(r)) {
        breaker_->record_success();
      } else {
        breaker_->record_failure();
      }
      return r;
    }
  }
  return counted();
}

}  // namespace holdfast::baselines
