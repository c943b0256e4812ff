/// @file
/// Shield: what an application holds per database — circuit breaker, concurrency limit,
/// retry throttle, default retry policies and metrics, composed in one place.
///
/// @code
///   holdfast::Shield shield("main");
///   {
///     holdfast::RequestScope scope;                       // one 6 s window per request
///     auto rows = shield.run(holdfast::Operation::read("schedule.games"),
///                            [&] { return db.query(sql); });
///   }
/// @endcode
///
/// A request goes RequestScope -> retry loop -> breaker -> concurrency limit -> attempt
/// (docs/adr/0008-admission-by-learned-capacity.md):
///   - every attempt asks the breaker first. Refused while open: the request waits for the
///     next probe only when that pays — the breaker opened on lock contention (a holder that
///     will let go), the probe is due within probe_wait, and the window covers the probe and
///     one more attempt. Otherwise it fails at once with kUnavailable, stop_reason
///     kBreakerOpen and retry_after() set (HTTP 503 + Retry-After). Shedding never counts as
///     an overload fault.
///   - then the ConcurrencyLimit: the work this Shield has in flight stays within what the
///     database answers at its normal latency (learned, Gradient2). A first attempt that
///     finds it full may queue, first come first served; the line is judged by how long its
///     waiters wait, as CoDel judges a queue (docs/adr/0033-short-queues.md). Its target is
///     3 x the normal latency (at least 5 ms), its interval 10 x (at least 50 ms), both at
///     most queue_wait. A waiter that had to wait longer than the target starts the clock;
///     when waits stay above it for an interval the line is *standing*: the Shield is
///     overloaded, and stays so until nothing has waited past the target for an interval.
///     A newcomer queues only if three times its expected wait (places free up at random)
///     fits within the target while the line stands (the interval while it does not) and
///     within its window; otherwise it fails at once with stop_reason kAtCapacity and
///     retry_after(), and the line stands from then on. A waiter whose wait no longer fits
///     what it was given (the database slowed down) is told so when the next place changes
///     hands, from the end of the line. Every place that frees up is handed to the first
///     waiter, and only to it. When a probe succeeds, as many waiters go as the limit has
///     room for; a request that waited for a probe keeps its place in line while its window
///     lasts.
///   - the line is kept per class (Operation::priority, priority.hpp,
///     docs/adr/0035-priorities.md): a freed place goes to the first waiter of the highest
///     class waiting; a critical newcomer may wait for the interval even while the line
///     stands, a background one only for the target and not at all while it stands; a
///     newcomer counts only the waiters of its class and the higher ones as ahead of it; the
///     waiters that no longer fit are told from the lowest class up. A lower class passed
///     over for seven places in a row gets the eighth (its oldest waiter). Background work
///     starts at once only where a retry would (below retry_share of the limit): the last
///     places are kept for the classes above it.
///   - a failed attempt goes to the retry loop (RetryState: backoff, window, attempts, what
///     may be repeated). A retry starts only where the limit has room for retries (below
///     retry_share of it) and, while the database answers slower than normal, the throttle
///     allows it: retries use spare capacity and nothing else.
///   - results: success -> breaker, throttle and limit (a latency sample); overload fault
///     -> breaker failure; a timed-out attempt -> a dropped sample; a probe that ran out of
///     its caller's window -> nothing (no evidence against the database).
/// Reads (idempotent operations) use the reads policy (by default: 5 attempts,
/// 200/600/1500/3000 ms ±50%, 6 s window); everything else uses the writes policy, whose
/// schedule is the same: the Operation already limits a write's retries to faults that prove
/// nothing was applied.
///
/// The same decisions are available without blocking, for event loops and the simulator:
/// Shield::Call (admit -> attempt -> succeeded/failed) is what run() itself is built on.
///
/// Thread safety: a Shield may be used from any number of threads. A Call belongs to one
/// request and is not thread-safe. The success path of run() takes no lock and allocates
/// nothing; on the system clock it reads the coarse clock once and times one call per
/// clock tick and thread.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "holdfast/core/circuit_breaker.hpp"
#include "holdfast/core/clock.hpp"
#include "holdfast/core/concurrency_limit.hpp"
#include "holdfast/core/metrics.hpp"
#include "holdfast/core/random.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/core/retry.hpp"
#include "holdfast/core/retry_throttle.hpp"
#include "holdfast/core/shield_options.hpp"
#include "holdfast/core/status.hpp"
#include "holdfast/core/window.hpp"

namespace holdfast {

/// What an application holds per database: breaker, concurrency limit, retry throttle, retry
/// policies and metrics, composed (see the top of this file). Not copyable; may be used from
/// any number of threads.
class Shield {
 public:
  /// A Shield's breaker options: CircuitBreaker's, with the open period of ShieldOptions.
  static CircuitBreaker::Options shield_breaker() { return ShieldOptions::shield_breaker(); }

  /// The Shield's options (holdfast::ShieldOptions).
  using Options = ShieldOptions;
  class Call;
  struct Admission;

  /// `name` labels the metrics (db="name"). Every timed decision uses `clock`; the clocks of
  /// the two policies are set to it.
  explicit Shield(std::string name, Clock& clock = Clock::system());
  /// The same with `options` (std::invalid_argument names a field out of range).
  Shield(std::string name, Options options, Clock& clock = Clock::system());
  Shield(const Shield&) = delete;
  Shield& operator=(const Shield&) = delete;
  ~Shield();

  /// Runs `attempt` (returning Status or Result<T>) under the policy for `op` (reads for an
  /// idempotent operation, writes otherwise) until it succeeds or the Shield stops it; the
  /// returned failure says why (stop_reason). Blocks (on the Shield's clock) for backoff and
  /// for the breaker's probe. If `attempt` throws, the exception propagates and the attempt
  /// counts as neutral.
  template <class F>
  auto run(Operation op, F&& attempt, RetryStats* stats = nullptr) -> std::invoke_result_t<F&> {
    return run(policy_for(op), op, std::forward<F>(attempt), stats);
  }
  /// The same with the caller's policy. REQUIRES: `policy` outlives the call.
  template <class F>
  auto run(const RetryPolicy& policy, Operation op, F&& attempt, RetryStats* stats = nullptr)
      -> std::invoke_result_t<F&>;

  /// The policy run() uses for `op`: reads() for an idempotent operation, writes() otherwise.
  [[nodiscard]] const RetryPolicy& policy_for(Operation op) const noexcept {
    return op.idempotency == Idempotency::kIdempotent ? options_.reads : options_.writes;
  }
  /// The policy of idempotent operations.
  [[nodiscard]] const RetryPolicy& reads() const noexcept { return options_.reads; }
  /// The policy of everything else.
  [[nodiscard]] const RetryPolicy& writes() const noexcept { return options_.writes; }

  /// The circuit breaker.
  [[nodiscard]] CircuitBreaker& breaker() noexcept { return breaker_; }
  /// The circuit breaker.
  [[nodiscard]] const CircuitBreaker& breaker() const noexcept { return breaker_; }
  /// The concurrency limit.
  [[nodiscard]] ConcurrencyLimit& limit() noexcept { return limit_; }
  /// The concurrency limit.
  [[nodiscard]] const ConcurrencyLimit& limit() const noexcept { return limit_; }
  /// The retry throttle.
  [[nodiscard]] RetryThrottle& throttle() noexcept { return throttle_; }
  /// The retry throttle.
  [[nodiscard]] const RetryThrottle& throttle() const noexcept { return throttle_; }
  /// The counters of this Shield.
  [[nodiscard]] Metrics& metrics() noexcept { return metrics_; }
  /// The counters of this Shield.
  [[nodiscard]] const Metrics& metrics() const noexcept { return metrics_; }
  /// The name that labels the metrics.
  [[nodiscard]] std::string_view name() const noexcept { return name_; }
  /// The clock of every timed decision.
  [[nodiscard]] Clock& clock() const noexcept { return *clock_; }
  /// The options it was built with (their policies on the Shield's clock).
  [[nodiscard]] const Options& options() const noexcept { return options_; }
  /// Moved by every breaker state change that may let requests through.
  [[nodiscard]] const Signal& signal() const noexcept { return breaker_.signal(); }
  /// Moved whenever a waiting Call is woken (handed a place, or told to decide again): an
  /// event loop that keeps its waiters per class (priority_of()), each class in the order
  /// admit() said kWait to them, finds the woken ones at the front of a class (handed places,
  /// or all of them when the breaker opens) and at its back (waits that no longer fit)
  /// (Call::woken()).
  [[nodiscard]] const Signal& wakes() const noexcept { return wakes_; }
  /// Requests waiting for a place or for a probe.
  [[nodiscard]] std::int64_t waiting() const noexcept { return limit_.queued(); }
  /// The line's target: the longest a newcomer is let wait for a place while the line stands
  /// (see the top of this file). 3 x the normal latency, at least 5 ms (CoDel's target), at
  /// most queue_wait.
  [[nodiscard]] Duration queue_target() const noexcept;
  /// The line's interval: how long waits may stay above the target before the line stands,
  /// and the longest a newcomer is let wait while it does not. 10 x the normal latency, at
  /// least 50 ms (half CoDel's interval), at most queue_wait.
  [[nodiscard]] Duration queue_interval() const noexcept;
  /// True while the line stands (as of the last decision about it): newcomers that would
  /// wait longer than the target are answered at once.
  [[nodiscard]] bool queue_standing() const noexcept {
    return standing_.load(std::memory_order_relaxed);
  }

  /// The class `op` waits in: Options::priorities' entry for its label, else op.priority.
  [[nodiscard]] Priority priority_of(Operation op) const noexcept {
    return options_.priorities.empty() ? op.priority : priority_by_label(op);
  }
  /// Requests of class `p` waiting for a place or for a probe.
  [[nodiscard]] std::int64_t waiting(Priority p) const noexcept {
    return waiting_by_class_[static_cast<std::size_t>(p)].load(std::memory_order_relaxed);
  }

  /// metrics().prometheus_text(name()).
  [[nodiscard]] std::string metrics_text() const;

  /// The server was found silent at `now` (holdfast/core/liveness.hpp): the breaker trips, and
  /// the requests it refuses are answered at once (no waiting for a probe: a silent server
  /// is not a lock holder about to let go). Counted in metrics().
  void server_silent(TimePoint now);
  /// The server answered again after a silence: the breaker closes as after a health probe
  /// (a no-op unless it is open or half-open).
  void server_back(TimePoint now, Duration latency);

 private:
  static Options with_clock(Options options, Clock& clock);
  Priority priority_by_label(Operation op) const noexcept;
  class Steps;  // run()'s steps of the retry loop (detail::retry_loop): a Call's
  // run() after its first attempt, made with `first` at `t0`, failed with `r`.
  template <class F, class R>
  [[gnu::noinline]] void run_failed(const RetryPolicy& policy, Operation op,
                                    CircuitBreaker::Permit&& first, TimePoint t0, TimePoint start,
                                    F& attempt, R& r, RetryStats* stats);
  // Records an attempt's success (`latency`: zero when not measured): the breaker, the
  // throttle, the metrics and the limit's latency sample.
  void on_success(CircuitBreaker::Permit&& permit, Duration latency) noexcept;
  // on_success() of run()'s first attempt, not timed (no latency sample), admitted by a
  // closed breaker whose state word was `word` at `start`.
  void on_untimed_success(std::uint64_t word, TimePoint start) noexcept;
  void on_transition(const BreakerTransition& t);
  // The wait queue (first come, first served), under wait_mutex_. `call` joins it at `now`,
  // to wait until `until` at the latest.
  void enqueue(Call& call, TimePoint now, TimePoint until);
  // Leaves the line at `now`; true when the call had been handed a place.
  bool leave_queue(Call& call, TimePoint now);
  void release_place() noexcept;
  void wake_locked(Call& call, bool granted) noexcept;
  // REQUIRES: wait_mutex_ held. While the breaker is closed, hands the limit's room to the
  // first waiters, then tells the last ones whose wait no longer fits; true when it woke any.
  bool grant_locked(TimePoint now) noexcept;
  // REQUIRES: wait_mutex_ held. The line's state at `now` (see queue_standing()).
  bool standing_locked(TimePoint now) noexcept;
  // REQUIRES: wait_mutex_ held. A wait past the target (a waiter, or a newcomer that would
  // have had to wait longer than it was allowed) seen at `now`.
  void over_target_locked(TimePoint now) noexcept;
  // REQUIRES: wait_mutex_ held. The line could not hold a wait it had allowed (a newcomer's,
  // or a waiter's that no longer fits): it stands from `now`, whatever its age.
  void overloaded_locked(TimePoint now) noexcept;
  // REQUIRES: wait_mutex_ held. Records how long `call` waited for a place, leaving at `now`.
  void waited_locked(const Call& call, TimePoint now) noexcept;
  // What the line offers a newcomer of class `p`: the longest it may wait, and how many wait
  // ahead of it (its class and the higher ones).
  struct LineView {
    Duration allowance{};
    std::int64_t ahead = 0;
  };
  // The line for class `p` at `now` (ADR 0035); may update the line's state.
  LineView line_view(Priority p, TimePoint now);
  // REQUIRES: wait_mutex_ held. The first waiter of the highest class waiting (nullptr: none).
  [[nodiscard]] Call* first_locked() const noexcept;
  // REQUIRES: wait_mutex_ held. The waiter the next place goes to: first_locked(), or, once a
  // lower class has been passed over kShareEvery - 1 times in a row, the oldest waiter of
  // the lower classes. Counts the pass.
  Call* next_locked() noexcept;
  // REQUIRES: wait_mutex_ held. The last waiter of the lowest class waiting (nullptr: none).
  [[nodiscard]] Call* last_locked() const noexcept;
  // A newcomer at `now` would have waited longer than it was allowed.
  void turned_away(TimePoint now);

  std::string name_;
  Clock* clock_;
  const bool system_clock_;  // clock_ is Clock::system(): read its coarse time inline
  Options options_;
  CircuitBreaker breaker_;
  ConcurrencyLimit limit_;
  RetryThrottle throttle_;
  Metrics metrics_;
  Signal wakes_;
  // 1 when the last overload fault was lock contention (see Options::probe_wait).
  std::atomic<bool> last_overload_fast_{false};
  std::mutex wait_mutex_;
  // The line, one list per class (Priority), guarded by wait_mutex_.
  std::array<Call*, kPriorities> heads_{};
  std::array<Call*, kPriorities> tails_{};
  // Waiters per class (written under wait_mutex_, read by waiting(p) without it).
  std::array<std::atomic<std::int64_t>, kPriorities> waiting_by_class_{};
  // Places in a row handed to a higher class while a lower one waited (guarded by wait_mutex_).
  int passed_ = 0;
  // The line's waiting-time state (ADR 0033), guarded by wait_mutex_: since when waits have
  // been above the target (TimePoint{}: they are not), and the last time one was.
  TimePoint over_since_{};
  TimePoint last_over_{};
  std::atomic<bool> standing_{false};  // written under wait_mutex_
};

/// What to do next, before an attempt.
struct Shield::Admission {
  /// What the caller does next.
  enum class Kind : std::uint8_t {
    kAttempt,  ///< make the attempt now, then report it with the permit
    kWait,     ///< wait until `until` or until `wake` moves past `seen`, then admit() again
    kStop,     ///< give up with `status`
  };
  /// Which of the three; the members marked with it are set.
  Kind kind = Kind::kStop;
  CircuitBreaker::Permit permit;  ///< kAttempt
  TimePoint until{};              ///< kWait
  const Signal* wake = nullptr;   ///< kWait
  std::uint64_t seen = 0;         ///< kWait
  Status status;                  ///< kStop
};

/// One request's way through the Shield, step by step, without blocking:
///
/// @code
///   Shield::Call call(shield, shield.reads(), op, &request_window);
///   for (;;) {
///     Shield::Admission a = call.admit(now);
///     kAttempt: run it; call.succeeded(std::move(a.permit), latency) -> done, or
///               RetryDecision d = call.failed(std::move(a.permit), status, now, latency):
///               d.retry -> come back after d.delay; otherwise fail with d.status
///     kWait:    come back at a.until, or when a.wake moves past a.seen
///     kStop:    fail with a.status
///   }
/// @endcode
///
/// Not thread-safe; not movable. REQUIRES: the Shield, the policy and the window outlive it.
class Shield::Call {
 public:
  /// `window`: the retry window to draw from; by default the current RequestScope's, or one
  /// of the Call's own (policy.window() long) outside any scope.
  Call(Shield& shield, const RetryPolicy& policy, Operation op,
       RetryWindow* window = RequestScope::current_window()) noexcept
      : shield_(&shield),
        policy_(&policy),
        op_(op),
        window_(window),
        spare_only_(shield.priority_of(op) == Priority::kBackground) {}
  /// The same with a given random source (backoff), for reproducible runs.
  Call(Shield& shield, const RetryPolicy& policy, Operation op, RetryWindow* window,
       Random rng) noexcept
      : shield_(&shield),
        policy_(&policy),
        op_(op),
        window_(window),
        rng_(rng),
        spare_only_(shield.priority_of(op) == Priority::kBackground) {}
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;
  ~Call() {
    if (queued_ || holds_place_) [[unlikely]]
      abandon();
  }

  /// May the next attempt start at `now`? Asks the breaker, then the concurrency limit;
  /// never blocks.
  [[nodiscard]] Admission admit(TimePoint now) {
    if (queued_) [[unlikely]]
      return admit_after_wait(now);
    CircuitBreaker::Permit permit = shield_->breaker_.acquire(now);
    if (permit) [[likely]] {
      if (!permit.is_probe()) [[likely]] {
        // Retries and background work use spare capacity only (below retry_share).
        const ConcurrencyLimit::Place place =
            shield_->limit_.try_acquire(attempts_ > 0 || spare_only_);
        if (place != ConcurrencyLimit::Place::kRefused) [[likely]] {
          return attempt(std::move(permit), place == ConcurrencyLimit::Place::kCounted);
        }
      }
      return admit_slow(std::move(permit), now);
    }
    return refused(permit, now);
  }

  /// The attempt admitted with `permit` succeeded after `latency` (zero when not measured:
  /// then it is no latency sample).
  void succeeded(CircuitBreaker::Permit&& permit, Duration latency = Duration::zero()) noexcept;

  /// The attempt admitted with `permit` failed with `status` (REQUIRES: !status.ok()) at
  /// `now`, after `latency`. Records it and decides: retry after a delay, or stop.
  [[nodiscard]] RetryDecision failed(CircuitBreaker::Permit&& permit, const Status& status,
                                     TimePoint now, Duration latency);

  /// For a blocking caller (Shield::run): the attempt admitted with `permit` and started at
  /// `t0` failed with `status`. Records it and decides (failed() at the Shield clock's now);
  /// to retry, sleeps the backoff, sets `start` to the time it woke and returns true;
  /// otherwise sets `stop` to the failure to return and returns false.
  [[nodiscard]] bool after_failure(CircuitBreaker::Permit&& permit, const Status& status,
                                   TimePoint t0, TimePoint& start, Status& stop);

  /// Time spent waiting (backoff and breaker), for stats().
  void add_slept(Duration d) noexcept { slept_ += d; }

  /// Attempts made so far.
  [[nodiscard]] int attempts() const noexcept { return attempts_; }
  /// The operation this call runs (its class: Shield::priority_of(operation())).
  [[nodiscard]] Operation operation() const noexcept { return op_; }
  /// The call's statistics so far.
  [[nodiscard]] RetryStats stats() const noexcept { return {attempts_, slept_, stop_}; }
  /// After kWait: true once the Shield has woken this call (for single-threaded event loops;
  /// see Shield::wakes()).
  [[nodiscard]] bool woken() const noexcept { return woken_; }

 private:
  friend class Shield;
  // Go with `permit`; `counted`: the call holds a counted place under the limit.
  Admission attempt(CircuitBreaker::Permit&& permit, bool counted = true) noexcept {
    holds_place_ = counted;
    Admission a;
    a.kind = Admission::Kind::kAttempt;
    a.permit = std::move(permit);
    return a;
  }
  Admission admit_slow(CircuitBreaker::Permit&& permit, TimePoint now);
  Admission admit_after_wait(TimePoint now);
  Admission refused(const CircuitBreaker::Permit& permit, TimePoint now);
  Admission at_capacity(TimePoint now);
  Admission wait(TimePoint now, TimePoint until);
  Admission stop(StopReason reason, Status status);
  // The decision to stop with `status` (marked with its stop reason) after a failure.
  RetryDecision stop_after_failure(Status status);
  void release_place() noexcept;
  void abandon() noexcept;
  // Window time an attempt needs: the policy's last-attempt reserve, or twice the
  // database's normal latency when that is longer.
  Duration attempt_time() const noexcept;
  RetryState& state();

  Shield* shield_;
  const RetryPolicy* policy_;
  Operation op_;
  RetryWindow* window_;
  std::optional<Random> rng_;
  std::optional<RetryState> state_;  // built at the first failure or refusal
  std::optional<Signal> signal_;     // built at the first wait: what this call sleeps on
  int attempts_ = 0;
  bool spare_only_;  // background: even its first attempt takes spare capacity only
  Duration slept_{};
  StopReason stop_ = StopReason::kNone;
  TimePoint queue_deadline_{};  // set at the first wait for a place
  bool holds_place_ = false;    // holds a place under the concurrency limit
  bool queued_ = false;         // admit() said kWait and the call has not looked since
  bool waited_for_probe_ = false;
  // Guarded by the Shield's wait_mutex_:
  Call* next_ = nullptr;
  Call* prev_ = nullptr;
  TimePoint queued_at_{};   // when it joined the line
  TimePoint until_{};       // the end of the wait it was given
  bool for_probe_ = false;  // waits for the breaker's probe (not judged by the line's rule)
  std::uint8_t line_ = 0;   // the class whose list it waits in
  bool linked_ = false;     // in the Shield's wait queue
  bool granted_ = false;    // woken with a place handed to it
  bool woken_ = false;
};

// Shield::run()'s steps of the retry loop (detail::retry_loop in retry.hpp): a Call,
// blocking on the Shield's clock for backoff and waits.
class Shield::Steps {
 public:
  using Step = Admission;

  explicit Steps(Call& call) noexcept : call_(&call), shield_(call.shield_) {}

  Admission admit(TimePoint start) { return call_->admit(start); }
  static bool admitted(const Admission& a) noexcept { return a.kind == Admission::Kind::kAttempt; }
  // One call per clock tick and thread is timed, as the limit's latency sample.
  TimePoint attempt_start(TimePoint start) {
    timed_ = shield_->breaker_.measures_latency() || shield_->limit_.wants_sample(start);
    return timed_ ? shield_->clock_->now() : start;
  }
  void succeeded(Admission& a, TimePoint t0) noexcept {
    call_->succeeded(std::move(a.permit), timed_ ? shield_->clock_->now() - t0 : Duration::zero());
  }
  template <class R>
  bool after_failure(Admission& a, const Status& status, TimePoint t0, TimePoint& start, R& r) {
    Status stop;
    if (call_->after_failure(std::move(a.permit), status, t0, start, stop)) return true;
    r = R(std::move(stop));
    return false;
  }
  bool wait(Admission& a, TimePoint& start, Status& refused) {
    if (a.kind != Admission::Kind::kWait) {
      refused = std::move(a.status);
      return false;
    }
    Clock& clock = *shield_->clock_;
    clock.sleep_until(a.until, a.wake, a.seen);
    const TimePoint woke = clock.now();
    call_->add_slept(woke - start);
    start = woke;
    return true;
  }
  [[nodiscard]] RetryStats stats() const noexcept { return call_->stats(); }

 private:
  Call* call_;
  Shield* shield_;
  bool timed_ = false;
};

inline void Shield::on_success(CircuitBreaker::Permit&& permit, Duration latency) noexcept {
  permit.record(CallResult::kSuccess, latency);
  throttle_.record_success();
  metrics_.count_success();
  if (latency > Duration::zero()) limit_.record(latency, false);
}

inline void Shield::on_untimed_success(std::uint64_t word, TimePoint start) noexcept {
  breaker_.call_succeeded(word, start.time_since_epoch().count(), Duration::zero());
  throttle_.record_success();
  metrics_.count_success();
}

template <class F>
auto Shield::run(const RetryPolicy& policy, Operation op, F&& attempt, RetryStats* stats)
    -> std::invoke_result_t<F&> {
  using R = std::invoke_result_t<F&>;
  static_assert(std::is_same_v<R, Status> || is_result<R>::value,
                "holdfast::Shield::run: the callable must return holdfast::Status or Result<T>");
  Clock& clock = *clock_;
  // The coarse clock places the call in the breaker's window; one call per clock tick and
  // thread is timed precisely, as the concurrency limit's latency sample.
  TimePoint start = system_clock_ ? SystemClock::read_coarse() : clock.coarse_now();
  // The common case needs no Call: the breaker is closed and the limit relaxed (it counts
  // nothing), so the first attempt goes at once and its success has nothing to undo. It
  // holds the breaker's state word instead of a Permit (acquire_if_closed(start)): an
  // ordinary call's permit left unrecorded, if the attempt throws, records nothing.
  const std::uint64_t word = breaker_.call_word();
  if (CircuitBreaker::closed(word) && !limit_.tight()) [[likely]] {
    const bool timed = breaker_.measures_latency() || limit_.wants_sample(start);
    const TimePoint t0 = timed ? clock.now() : start;
    R r = attempt();
    if (is_ok(r)) [[likely]] {
      if (timed) {
        on_success(breaker_.call_permit(word, start), clock.now() - t0);
      } else {
        on_untimed_success(word, start);
      }
      if (stats != nullptr) *stats = RetryStats{1, Duration::zero(), StopReason::kNone};
      return r;
    }
    run_failed(policy, op, breaker_.call_permit(word, start), t0, start, attempt, r, stats);
    return r;
  }
  // Off the common path the breaker and the limit decide on the precise time: a refusal's
  // retry_after() measured from the coarse one (a tick behind) could end before the open
  // period does, and a caller who waits it out would be refused again.
  start = clock.now();
  Call call(*this, policy, op);
  Steps steps(call);
  R r = detail::retry_loop<R>(steps, start, attempt);
  if (stats != nullptr) *stats = steps.stats();
  return r;
}

template <class F, class R>
void Shield::run_failed(const RetryPolicy& policy, Operation op, CircuitBreaker::Permit&& first,
                        TimePoint t0, TimePoint start, F& attempt, R& r, RetryStats* stats) {
  Call call(*this, policy, op);
  Steps steps(call);
  Admission made;
  made.kind = Admission::Kind::kAttempt;
  made.permit = std::move(first);
  detail::retry_after_failure(steps, made, t0, start, attempt, r);
  if (stats != nullptr) *stats = steps.stats();
}

}  // namespace holdfast
