// Shield: what an application holds per database — circuit breaker, retry throttle,
// default retry policies and metrics, composed in one place.
//
//   holdfast::Shield shield("main");
//   {
//     holdfast::RequestScope scope;                       // one 6 s window per request
//     auto rows = shield.run(holdfast::Operation::read("schedule.games"),
//                            [&] { return db.query(sql); });
//   }
//
// A request goes RequestScope -> retry loop -> throttle -> breaker -> attempt:
//   - every attempt asks the breaker first. Refused while open: if the next probe is due
//     inside the request's window, the request waits for it; otherwise it fails at once
//     with kUnavailable, stop_reason kBreakerOpen and retry_after() set (HTTP 503 +
//     Retry-After). That Status is not an overload fault: shedding never feeds the breaker.
//   - when a probe succeeds the waiters are woken at once (each after a small jitter) and
//     go through a gate of release_concurrency (32) slots: a released waiter holds a slot
//     for its attempt and hands it back when the attempt ends. A database that answers in
//     a millisecond takes the whole crowd within milliseconds; one that is still weak is
//     never sent more than 32 of them at a time (the herd that would close it again).
//   - a failed attempt goes to the retry loop (RetryState: backoff, window, attempts, what
//     may be repeated). Before each retry the throttle is asked; refused: stop, kThrottled.
//   - results: success -> breaker success, throttle success; overload fault -> breaker
//     failure; transient fault -> throttle failure; anything else -> neutral.
// Reads (idempotent operations) use the reads policy (the origin's: 5 attempts,
// 200/600/1500/3000 ms ±50%, 6 s window); everything else uses the writes policy, whose
// schedule is the same: the Operation already limits a write's retries to faults that prove
// nothing was applied.
//
// The same decisions are available without blocking, for event loops and the simulator:
// Shield::Call (admit -> attempt -> succeeded/failed) is what run() itself is built on.
//
// Thread safety: a Shield may be used from any number of threads. A Call belongs to one
// request and is not thread-safe. The success path of run() takes no lock and allocates
// nothing.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "holdfast/circuit_breaker.hpp"
#include "holdfast/clock.hpp"
#include "holdfast/metrics.hpp"
#include "holdfast/random.hpp"
#include "holdfast/result.hpp"
#include "holdfast/retry.hpp"
#include "holdfast/retry_throttle.hpp"
#include "holdfast/status.hpp"
#include "holdfast/window.hpp"

namespace holdfast {

class Shield {
 public:
  // Copyable configuration, validated by the constructor (std::invalid_argument).
  struct Options {
    CircuitBreaker::Options breaker;
    RetryThrottle::Options throttle;
    RetryPolicy reads = RetryPolicy::origin_reads();
    RetryPolicy writes = RetryPolicy::origin_reads();
    // After a successful probe wakes a waiting request, it waits a further uniform
    // [0, wake_jitter] so the waiters do not all arrive at once. >= 0.
    Duration wake_jitter = std::chrono::milliseconds(50);
    // Requests that waited for the breaker's probe make their next attempt through a gate
    // of this many slots, each held for one attempt: the most of them the database is sent
    // at once after it comes back. >= 1.
    int release_concurrency = 32;
  };

  class Call;
  struct Admission;
  struct Verdict;

  // `name` labels the metrics (db="name"). Every timed decision uses `clock`; the clocks of
  // the two policies are set to it.
  explicit Shield(std::string name, Clock& clock = Clock::system());
  Shield(std::string name, Options options, Clock& clock = Clock::system());
  Shield(const Shield&) = delete;
  Shield& operator=(const Shield&) = delete;
  ~Shield();

  // Runs `attempt` (returning Status or Result<T>) under the policy for `op` (reads for an
  // idempotent operation, writes otherwise) until it succeeds or the Shield stops it; the
  // returned failure says why (stop_reason). Blocks (on the Shield's clock) for backoff and
  // for the breaker's probe. If `attempt` throws, the exception propagates and the attempt
  // counts as neutral.
  template <class F>
  auto run(Operation op, F&& attempt, RetryStats* stats = nullptr) -> std::invoke_result_t<F&> {
    return run(policy_for(op), op, std::forward<F>(attempt), stats);
  }
  // The same with the caller's policy. REQUIRES: `policy` outlives the call.
  template <class F>
  auto run(const RetryPolicy& policy, Operation op, F&& attempt, RetryStats* stats = nullptr)
      -> std::invoke_result_t<F&>;

  [[nodiscard]] const RetryPolicy& policy_for(Operation op) const noexcept {
    return op.idempotency == Idempotency::kIdempotent ? options_.reads : options_.writes;
  }
  [[nodiscard]] const RetryPolicy& reads() const noexcept { return options_.reads; }
  [[nodiscard]] const RetryPolicy& writes() const noexcept { return options_.writes; }

  [[nodiscard]] CircuitBreaker& breaker() noexcept { return breaker_; }
  [[nodiscard]] const CircuitBreaker& breaker() const noexcept { return breaker_; }
  [[nodiscard]] RetryThrottle& throttle() noexcept { return throttle_; }
  [[nodiscard]] const RetryThrottle& throttle() const noexcept { return throttle_; }
  [[nodiscard]] Metrics& metrics() noexcept { return metrics_; }
  [[nodiscard]] const Metrics& metrics() const noexcept { return metrics_; }
  [[nodiscard]] std::string_view name() const noexcept { return name_; }
  [[nodiscard]] Clock& clock() const noexcept { return *clock_; }
  [[nodiscard]] const Options& options() const noexcept { return options_; }
  // What waiting requests sleep on (Admission::wake): moved by every breaker state change
  // that may let them through, and by every slot handed back at the release gate.
  [[nodiscard]] const Signal& signal() const noexcept { return signal_; }

  // metrics().prometheus_text(name()).
  [[nodiscard]] std::string metrics_text() const;

 private:
  static Options with_clock(Options options, Clock& clock);

  std::string name_;
  Clock* clock_;
  Options options_;
  CircuitBreaker breaker_;
  RetryThrottle throttle_;
  Metrics metrics_;
  Signal signal_;
  // Free slots of the release gate (see Options::release_concurrency).
  alignas(64) std::atomic<int> release_slots_;
};

// What to do next, before an attempt.
struct Shield::Admission {
  enum class Kind : std::uint8_t {
    kAttempt,  // make the attempt now, then report it with the permit
    kWait,     // wait until `until` or until `wake` moves past `seen`, then admit() again
    kStop,     // give up with `status`
  };
  Kind kind = Kind::kStop;
  CircuitBreaker::Permit permit;  // kAttempt
  TimePoint until{};              // kWait
  const Signal* wake = nullptr;   // kWait
  std::uint64_t seen = 0;         // kWait
  Duration jitter{};              // kWait: if woken early, wait this much longer first
  Status status;                  // kStop
};

// What to do next, after a failed attempt.
struct Shield::Verdict {
  enum class Kind : std::uint8_t {
    kRetry,  // wait `delay`, then admit() again
    kStop,   // give up with `status`
  };
  Kind kind = Kind::kStop;
  Duration delay{};
  Status status;
};

// One request's way through the Shield, step by step, without blocking:
//
//   Shield::Call call(shield, shield.reads(), op, &request_window);
//   for (;;) {
//     Shield::Admission a = call.admit(now);
//     kAttempt: run it; call.succeeded(std::move(a.permit), latency) -> done, or
//               Verdict v = call.failed(std::move(a.permit), status, now, latency):
//               kRetry -> come back after v.delay; kStop -> fail with v.status
//     kWait:    come back at a.until, or (+ a.jitter) when a.wake moves past a.seen
//     kStop:    fail with a.status
//   }
//
// Not thread-safe; not movable. REQUIRES: the Shield, the policy and the window outlive it.
class Shield::Call {
 public:
  // `window`: the retry window to draw from; by default the current RequestScope's, or one
  // of the Call's own (policy.window() long) outside any scope.
  Call(Shield& shield, const RetryPolicy& policy, Operation op,
       RetryWindow* window = RequestScope::current_window()) noexcept
      : shield_(&shield), policy_(&policy), op_(op), window_(window) {}
  // The same with a given random source (backoff and wake jitter), for reproducible runs.
  Call(Shield& shield, const RetryPolicy& policy, Operation op, RetryWindow* window,
       Random rng) noexcept
      : shield_(&shield), policy_(&policy), op_(op), window_(window), rng_(rng) {}
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;
  ~Call() {
    if (holds_slot_) [[unlikely]]
      release_slot();
  }

  // May the next attempt start at `now`? Asks the breaker (and, for a request that waited
  // for a probe, the release gate); never blocks.
  [[nodiscard]] Admission admit(TimePoint now) {
    CircuitBreaker::Permit permit = shield_->breaker_.acquire(now);
    if (permit) [[likely]] {
      if (waited_ && !permit.is_probe()) [[unlikely]] {
        // The permit is dropped if the gate says wait: unused, it counts as nothing.
        Admission gate = through_gate(now);
        if (gate.kind != Admission::Kind::kAttempt) return gate;
      }
      Admission a;
      a.kind = Admission::Kind::kAttempt;
      a.permit = std::move(permit);
      return a;
    }
    return refused(permit, now);
  }

  // The attempt admitted with `permit` succeeded after `latency` (zero when not measured;
  // needed only when shield.breaker().measures_latency()).
  void succeeded(CircuitBreaker::Permit&& permit, Duration latency = Duration::zero()) noexcept;

  // The attempt admitted with `permit` failed with `status` (REQUIRES: !status.ok()) at
  // `now`, after `latency`. Records it and decides: retry after a delay, or stop.
  [[nodiscard]] Verdict failed(CircuitBreaker::Permit&& permit, const Status& status, TimePoint now,
                               Duration latency);

  // Time spent waiting (backoff and breaker), for stats().
  void add_slept(Duration d) noexcept { slept_ += d; }

  [[nodiscard]] int attempts() const noexcept { return attempts_; }
  [[nodiscard]] RetryStats stats() const noexcept { return {attempts_, slept_, stop_}; }

 private:
  Admission refused(const CircuitBreaker::Permit& permit, TimePoint now);
  Admission through_gate(TimePoint now);
  void release_slot() noexcept;
  RetryState& state();
  Random& rng();

  Shield* shield_;
  const RetryPolicy* policy_;
  Operation op_;
  RetryWindow* window_;
  std::optional<Random> rng_;
  std::optional<RetryState> state_;  // built at the first failure or refusal
  int attempts_ = 0;
  Duration slept_{};
  StopReason stop_ = StopReason::kNone;
  bool waited_ = false;      // waited for a probe; its next attempt goes through the gate
  bool holds_slot_ = false;  // holds a slot of the release gate for its current attempt
};

template <class F>
auto Shield::run(const RetryPolicy& policy, Operation op, F&& attempt, RetryStats* stats)
    -> std::invoke_result_t<F&> {
  using R = std::invoke_result_t<F&>;
  static_assert(std::is_same_v<R, Status> || is_result<R>::value,
                "holdfast::Shield::run: the callable must return holdfast::Status or Result<T>");
  Clock& clock = *clock_;
  const bool timed = breaker_.measures_latency();
  Call call(*this, policy, op);
  for (;;) {
    const TimePoint start = clock.now();
    Admission a = call.admit(start);
    if (a.kind == Admission::Kind::kAttempt) [[likely]] {
      R r = attempt();
      if (is_ok(r)) [[likely]] {
        call.succeeded(std::move(a.permit), timed ? clock.now() - start : Duration::zero());
        if (stats != nullptr) *stats = call.stats();
        return r;
      }
      const TimePoint end = clock.now();
      Verdict v = call.failed(std::move(a.permit), status_of(r), end, end - start);
      if (v.kind == Verdict::Kind::kStop) {
        if (stats != nullptr) *stats = call.stats();
        return R(std::move(v.status));
      }
      clock.sleep_for(v.delay);
      call.add_slept(clock.now() - end);
      continue;
    }
    if (a.kind == Admission::Kind::kWait) {
      const bool woken = clock.sleep_until(a.until, a.wake, a.seen);
      if (woken && a.jitter > Duration::zero()) clock.sleep_for(a.jitter);
      call.add_slept(clock.now() - start);
      continue;
    }
    if (stats != nullptr) *stats = call.stats();
    return R(std::move(a.status));
  }
}

}  // namespace holdfast
