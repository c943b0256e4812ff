/// @file
/// RetryPolicy and the retry loop.
///
/// Three independent inputs decide a retry (as in google-cloud-cpp): how much to retry and
/// how long to wait (RetryPolicy), whether the operation may be repeated (Operation), and
/// what the failure was (the Fault inside the Status). Policies decide; the loop acts.
///
/// @code
///   holdfast::RetryPolicy reads;                             // the default schedule
///   auto rows = holdfast::retry(reads, holdfast::Operation::read("schedule.games"),
///                               [&] { return db.query(sql); });
/// @endcode
///
/// The loop
///   - retries only transient faults, and a fault whose outcome is unknown only when the
///     operation is idempotent; a fault that needs the whole transaction re-run only when
///     the callable re-runs the whole transaction;
///   - draws every wait from the RetryWindow of the current RequestScope (or a window of
///     its own outside any scope), opened at the first transient fault;
///   - never starts a sleep that would end past the window: a delay that would is shortened
///     so one last attempt lands inside the window;
///   - never retries a Status that a retry loop already gave up on (see
///     docs/adr/0001-nested-retry-loops.md): nested loops never multiply attempts;
///   - when it stops, returns the last underlying error with StopReason and attempts set.
///
/// For callers that cannot block (event loops, async servers, the simulator), RetryState
/// answers the same question the loop asks: "may I retry, and after how long?".
///
/// The success path reads no clock, takes no lock and allocates nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "holdfast/core/backoff.hpp"
#include "holdfast/core/clock.hpp"
#include "holdfast/core/operation.hpp"
#include "holdfast/core/priority.hpp"
#include "holdfast/core/random.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/core/retry_policy.hpp"
#include "holdfast/core/status.hpp"
#include "holdfast/core/window.hpp"

namespace holdfast {

/// What to do after a failed attempt: the one decision type of every retry loop
/// (holdfast::retry(), Shield::run() and Shield::Call::failed()).
struct RetryDecision {
  bool retry = false;                     ///< true: try again after `delay`; false: stop
  Duration delay{};                       ///< when retry: wait this long, then try again
  StopReason reason = StopReason::kNone;  ///< when not: why
  /// When not, from Shield::Call::failed(): the failure to return, marked with `reason`.
  /// (RetryState::on_failure() leaves it OK: its caller builds it with give_up().)
  Status status;

  /// A decision to retry after `delay`.
  static RetryDecision retry_after(Duration delay) {
    RetryDecision d;
    d.retry = true;
    d.delay = delay;
    return d;
  }
  /// A decision to stop, for `why`.
  static RetryDecision stop(StopReason why) {
    RetryDecision d;
    d.reason = why;
    return d;
  }
};

/// The state of one retrying operation, built fresh from a policy for each call.
/// Not thread-safe: one operation, one owner.
class RetryState {
 public:
  /// `window`: the window to draw from; by default the current RequestScope's, or one of
  /// its own (policy.window() long) outside any scope. REQUIRES: `policy` outlives this.
  explicit RetryState(const RetryPolicy& policy, Operation op = {},
                      RetryWindow* window = RequestScope::current_window());
  /// The same with a given random source (backoff jitter), for reproducible runs.
  RetryState(const RetryPolicy& policy, Operation op, RetryWindow* window, Random rng);
  RetryState(const RetryState&) = delete;
  RetryState& operator=(const RetryState&) = delete;

  /// Call after each failed attempt (REQUIRES: !status.ok()), at time `now`. A failure that
  /// names when another attempt can be served (Status::retry_after(), set without a stop
  /// reason: a pool backing off its connects) stops the loop at once with kBreakerOpen when
  /// that comes after the planned wait, since a sooner attempt would only be refused.
  RetryDecision on_failure(const Status& status, TimePoint now);
  /// Call after each successful attempt.
  void on_success() noexcept { ++attempts_; }
  /// Records time actually waited (stats only).
  void add_slept(Duration d) noexcept { slept_ += d; }

  /// `last` marked as given up for `reason` after attempts() attempts, keeping its
  /// retry_after(). A status some inner loop already gave up on is returned as it is.
  [[nodiscard]] Status give_up(Status last, StopReason reason) const;

  /// Attempts made so far.
  [[nodiscard]] int attempts() const noexcept { return attempts_; }
  /// Time waited so far, as recorded with add_slept().
  [[nodiscard]] Duration slept() const noexcept { return slept_; }
  /// The window it draws from.
  [[nodiscard]] RetryWindow& window() noexcept { return *window_; }
  /// The policy it follows.
  [[nodiscard]] const RetryPolicy& policy() const noexcept { return *policy_; }
  /// The operation it retries.
  [[nodiscard]] const Operation& operation() const noexcept { return op_; }

 private:
  const RetryPolicy* policy_;
  Operation op_;
  std::optional<RetryWindow> own_window_;
  RetryWindow* window_;
  Random rng_;
  int attempts_ = 0;
  Duration previous_delay_{};
  Duration slept_{};
};

namespace detail {
Status classifier_returned_ok();

// The retry loop: the one loop of holdfast::retry() and Shield::run(). `steps` decides and
// the loop acts. It is entered at an admission (retry_loop, which returns the outcome) or
// after a failed first attempt (retry_after_failure, which leaves it in `r`). Steps provides
//   Step admit(TimePoint start)        may an attempt start at `start`?
//   bool admitted(const Step&)         yes: attempt now with this step
//   TimePoint attempt_start(start)     the attempt's start time (for its latency), or start
//   void succeeded(Step&, t0)          record the success
//   bool after_failure(Step&, status, t0, TimePoint& start, R& r)
//                                      record the failure; true after waiting its backoff
//                                      (start: when it woke), false with the failure in r
//   bool wait(Step&, TimePoint& start, Status& refused)
//                                      not admitted: true after waiting (start: when it
//                                      woke), false with the refusal in `refused`
template <class R, class Steps, class F>
R retry_loop(Steps& steps, TimePoint start, F& attempt) {
  for (;;) {
    auto step = steps.admit(start);
    if (steps.admitted(step)) [[likely]] {
      const TimePoint t0 = steps.attempt_start(start);
      R r = attempt();
      if (is_ok(r)) [[likely]] {
        steps.succeeded(step, t0);
        return r;
      }
      if (!steps.after_failure(step, status_of(r), t0, start, r)) return r;
      continue;
    }
    Status refused;
    if (!steps.wait(step, start, refused)) return R(std::move(refused));
  }
}

// The loop after a first attempt, made with `step` at `t0`, failed with `r`.
template <class Steps, class Step, class F, class R>
void retry_after_failure(Steps& steps, Step& step, TimePoint t0, TimePoint start, F& attempt,
                         R& r) {
  if (steps.after_failure(step, status_of(r), t0, start, r))
    r = retry_loop<R>(steps, start, attempt);
}

// holdfast::retry()'s steps: the loop with no breaker, limit or throttle in front. Every
// attempt goes at once, and RetryState decides after each failure.
class PlainSteps {
 public:
  struct Step {};

  PlainSteps(const RetryPolicy& policy, Operation op) : state_(policy, op) {}

  Step admit(TimePoint /*start*/) const noexcept { return {}; }
  static constexpr bool admitted(const Step& /*step*/) noexcept { return true; }
  TimePoint attempt_start(TimePoint start) const noexcept { return start; }
  void succeeded(Step& /*step*/, TimePoint /*t0*/) noexcept {
    state_.on_success();
    stop_ = StopReason::kNone;
  }
  template <class R>
  bool after_failure(Step& /*step*/, const Status& status, TimePoint /*t0*/, TimePoint& start,
                     R& r) {
    Status stop;
    if (failed(status, start, stop)) return true;
    r = R(std::move(stop));
    return false;
  }
  bool wait(Step& /*step*/, TimePoint& /*start*/, Status& /*refused*/) const noexcept {
    return true;  // never called: admit() always admits
  }

  [[nodiscard]] RetryStats stats() const noexcept {
    return {state_.attempts(), state_.slept(), stop_};
  }

 private:
  // Decides after a failure; true after sleeping the backoff, false with `stop` set.
  bool failed(const Status& status, TimePoint& start, Status& stop);

  RetryState state_;
  StopReason stop_ = StopReason::kNone;
};
}  // namespace detail

namespace detail {
template <class F, class R>
[[gnu::noinline]] void retry_failed(const RetryPolicy& policy, Operation op, F& attempt, R& r,
                                    RetryStats* stats) {
  PlainSteps steps(policy, op);
  PlainSteps::Step first;
  retry_after_failure(steps, first, TimePoint{}, TimePoint{}, attempt, r);
  if (stats) *stats = steps.stats();
}
}  // namespace detail

/// Calls `attempt` (returning Status or Result<T>) until it succeeds or the policy stops.
template <class F>
auto retry(const RetryPolicy& policy, Operation op, F&& attempt, RetryStats* stats = nullptr)
    -> std::invoke_result_t<F&> {
  using R = std::invoke_result_t<F&>;
  static_assert(std::is_same_v<R, Status> || is_result<R>::value,
                "holdfast::retry: the callable must return holdfast::Status or Result<T>");
  R r = attempt();
  if (is_ok(r)) [[likely]] {
    if (stats) *stats = {1, {}, StopReason::kNone};
  } else {
    detail::retry_failed(policy, op, attempt, r, stats);
  }
  return r;  // one named result on every path: returned without a copy
}

/// retry() for an Operation{} (a non-idempotent write), without stats.
template <class F>
auto retry(const RetryPolicy& policy, F&& attempt) -> std::invoke_result_t<F&> {
  return retry(policy, Operation{}, std::forward<F>(attempt));
}

/// The adapter for a callable that throws (a user's own driver): exceptions of type E are
/// turned into a Status by `classify(const E&)` and retried by its Fault; any other
/// exception propagates unchanged. Returns Result<T> for a callable returning T.
template <class E, class F, class Classify>
auto retry_throwing(const RetryPolicy& policy, Operation op, F&& fn, Classify&& classify,
                    RetryStats* stats = nullptr) -> Result<std::invoke_result_t<F&>> {
  using T = std::invoke_result_t<F&>;
  return retry(
      policy, op,
      [&]() -> Result<T> {
        try {
          if constexpr (std::is_void_v<T>) {
            fn();
            return Result<void>();
          } else {
            return Result<T>(fn());
          }
        } catch (const E& e) {
          Status s = classify(e);
          if (s.ok()) return detail::classifier_returned_ok();
          return s;
        }
      },
      stats);
}

}  // namespace holdfast
