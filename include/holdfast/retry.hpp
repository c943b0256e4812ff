// RetryPolicy and the retry loop.
//
// Three independent inputs decide a retry (as in google-cloud-cpp): how much to retry and
// how long to wait (RetryPolicy), whether the operation may be repeated (Operation), and
// what the failure was (the Fault inside the Status). Policies decide; the loop acts.
//
//   holdfast::RetryPolicy reads;                             // the origin's schedule
//   auto rows = holdfast::retry(reads, holdfast::Operation::read("schedule.games"),
//                               [&] { return db.query(sql); });
//
// The loop
//   - retries only transient faults, and a fault whose outcome is unknown only when the
//     operation is idempotent; a fault that needs the whole transaction re-run only when
//     the callable re-runs the whole transaction;
//   - draws every wait from the RetryWindow of the current RequestScope (or a window of
//     its own outside any scope), opened at the first transient fault;
//   - never starts a sleep that would end past the window: a delay that would is shortened
//     so one last attempt lands inside the window;
//   - never retries a Status that a retry loop already gave up on (see
//     docs/adr/0001-nested-retry-loops.md): nested loops never multiply attempts;
//   - when it stops, returns the last underlying error with StopReason and attempts set.
//
// For callers that cannot block (event loops, async servers, the simulator), RetryState
// answers the same question the loop asks: "may I retry, and after how long?".
//
// The success path reads no clock, takes no lock and allocates nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "holdfast/backoff.hpp"
#include "holdfast/clock.hpp"
#include "holdfast/random.hpp"
#include "holdfast/result.hpp"
#include "holdfast/status.hpp"
#include "holdfast/window.hpp"

namespace holdfast {

enum class Idempotency : std::uint8_t {
  kNonIdempotent,  // repeat only when the failed attempt provably applied nothing
  kIdempotent,     // repeating is harmless even if a failed attempt was applied
};

// What the callable handed to the loop is.
struct Operation {
  Idempotency idempotency = Idempotency::kNonIdempotent;
  // The callable runs a whole transaction from its start, so faults that roll the
  // transaction back (scope kTransaction) may be retried by calling it again.
  bool reruns_transaction = false;
  // Names the operation in the DEBUG line ("schedule.games").
  std::string_view label = {};

  static constexpr Operation read(std::string_view label = "read") noexcept {
    return {Idempotency::kIdempotent, false, label};
  }
  static constexpr Operation write(std::string_view label = "write") noexcept {
    return {Idempotency::kNonIdempotent, false, label};
  }
  static constexpr Operation idempotent_write(std::string_view label = "write") noexcept {
    return {Idempotency::kIdempotent, false, label};
  }
  // A transaction function. `rerunnable`: calling it again after a rollback is safe.
  static constexpr Operation transaction(bool rerunnable,
                                         std::string_view label = "transaction") noexcept {
    return {Idempotency::kNonIdempotent, rerunnable, label};
  }
};

// Passed to the on_retry hook before each wait.
struct RetryEvent {
  std::string_view label;
  int attempt;                // the attempt that just failed (1-based)
  Duration delay;             // the wait before the next attempt
  Duration window_remaining;  // window time left before the wait
  const Status& status;       // the failure
};
using RetryHook = std::function<void(const RetryEvent&)>;

// Statistics of one call, returned to the caller (never kept in shared state).
struct RetryStats {
  int attempts = 0;
  Duration slept{};
  StopReason stop = StopReason::kNone;  // kNone when the call succeeded
};

class RetryPolicy {
 public:
  // The origin's read policy: 5 attempts, 200/600/1500/3000 ms ±50%, 6 s window.
  RetryPolicy();

  static RetryPolicy origin_reads() { return RetryPolicy(); }
  // The origin's session read: 150/500/1500/3000 ms ±50%, 5 attempts, 6 s window.
  static RetryPolicy origin_session();
  // One attempt, no retry.
  static RetryPolicy no_retry();

  // Setters validate at once and throw std::invalid_argument naming the field.
  RetryPolicy& max_attempts(int n);  // n >= 1
  RetryPolicy& backoff(Backoff b);
  RetryPolicy& window(Duration length);        // > 0; used outside any RequestScope
  RetryPolicy& last_attempt_time(Duration d);  // >= 0; window time a last attempt needs
  RetryPolicy& clock(Clock& c) noexcept;
  RetryPolicy& seed(std::uint64_t seed) noexcept;  // reproducible jitter (tests)
  RetryPolicy& on_retry(RetryHook hook);           // empty: the default DEBUG console line

  [[nodiscard]] int max_attempts() const noexcept { return max_attempts_; }
  [[nodiscard]] const Backoff& backoff() const noexcept { return backoff_; }
  [[nodiscard]] Duration window() const noexcept { return window_; }
  [[nodiscard]] Duration last_attempt_time() const noexcept { return last_attempt_time_; }
  [[nodiscard]] Clock& clock() const noexcept { return *clock_; }
  [[nodiscard]] const std::optional<std::uint64_t>& seed() const noexcept { return seed_; }

  // Calls the hook, or writes the default DEBUG line. Never throws.
  void notify_retry(const RetryEvent& event) const noexcept;

 private:
  int max_attempts_ = 5;
  Backoff backoff_;
  Duration window_ = RetryWindow::kDefaultLength;
  Duration last_attempt_time_ = std::chrono::milliseconds(50);
  Clock* clock_;
  std::optional<std::uint64_t> seed_;
  RetryHook on_retry_;
};

// What to do after a failed attempt: the one decision type of every retry loop
// (holdfast::retry(), Shield::run() and Shield::Call::failed()).
struct RetryDecision {
  bool retry = false;
  Duration delay{};                       // when retry: wait this long, then try again
  StopReason reason = StopReason::kNone;  // when not: why
  // When not, from Shield::Call::failed(): the failure to return, marked with `reason`.
  // (RetryState::on_failure() leaves it OK: its caller builds it with give_up().)
  Status status;

  static RetryDecision retry_after(Duration delay) {
    RetryDecision d;
    d.retry = true;
    d.delay = delay;
    return d;
  }
  static RetryDecision stop(StopReason why) {
    RetryDecision d;
    d.reason = why;
    return d;
  }
};

// The state of one retrying operation, built fresh from a policy for each call.
// Not thread-safe: one operation, one owner.
class RetryState {
 public:
  // `window`: the window to draw from; by default the current RequestScope's, or one of
  // its own (policy.window() long) outside any scope. REQUIRES: `policy` outlives this.
  explicit RetryState(const RetryPolicy& policy, Operation op = {},
                      RetryWindow* window = RequestScope::current_window());
  RetryState(const RetryPolicy& policy, Operation op, RetryWindow* window, Random rng);
  RetryState(const RetryState&) = delete;
  RetryState& operator=(const RetryState&) = delete;

  // Call after each failed attempt (REQUIRES: !status.ok()), at time `now`.
  RetryDecision on_failure(const Status& status, TimePoint now);
  // Call after each successful attempt.
  void on_success() noexcept { ++attempts_; }
  // Records time actually waited (stats only).
  void add_slept(Duration d) noexcept { slept_ += d; }

  // `last` marked as given up for `reason` after attempts() attempts. A status some inner
  // loop already gave up on is returned as it is.
  [[nodiscard]] Status give_up(Status last, StopReason reason) const;

  [[nodiscard]] int attempts() const noexcept { return attempts_; }
  [[nodiscard]] Duration slept() const noexcept { return slept_; }
  [[nodiscard]] RetryWindow& window() noexcept { return *window_; }
  [[nodiscard]] const RetryPolicy& policy() const noexcept { return *policy_; }
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

// The failure path of retry(): keeps calling `attempt` and leaves the outcome in `r`.
template <class F, class R>
[[gnu::noinline]] void retry_after_failure(const RetryPolicy& policy, Operation op, F& attempt,
                                           R& r, RetryStats* stats) {
  RetryState state(policy, op);
  Clock& clock = policy.clock();
  for (;;) {
    const TimePoint now = clock.now();
    const RetryDecision d = state.on_failure(status_of(r), now);
    if (!d.retry) {
      if (stats) *stats = {state.attempts(), state.slept(), d.reason};
      r = R(state.give_up(Status(status_of(r)), d.reason));
      return;
    }
    policy.notify_retry(RetryEvent{op.label, state.attempts(), d.delay,
                                   state.window().remaining(now), status_of(r)});
    clock.sleep_for(d.delay);
    state.add_slept(d.delay);
    r = attempt();
    if (is_ok(r)) {
      state.on_success();
      if (stats) *stats = {state.attempts(), state.slept(), StopReason::kNone};
      return;
    }
  }
}
}  // namespace detail

// Calls `attempt` (returning Status or Result<T>) until it succeeds or the policy stops.
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
    detail::retry_after_failure(policy, op, attempt, r, stats);
  }
  return r;  // one named result on every path: returned without a copy
}

template <class F>
auto retry(const RetryPolicy& policy, F&& attempt) -> std::invoke_result_t<F&> {
  return retry(policy, Operation{}, std::forward<F>(attempt));
}

// The adapter for a callable that throws (a user's own driver): exceptions of type E are
// turned into a Status by `classify(const E&)` and retried by its Fault; any other
// exception propagates unchanged. Returns Result<T> for a callable returning T.
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
