/// @file
/// CircuitBreaker: stops sending work to a database that is failing from overload.
///
/// @code
///   holdfast::CircuitBreaker breaker;                  // documented defaults, system clock
///   auto permit = breaker.acquire(now);
///   if (!permit) return busy(permit.retry_after());    // open: refused, no lock, no allocation
///   Status s = db.query(...);
///   permit.record(s, latency);                          // or drop it: counts as neutral
/// @endcode
///
/// States (DESIGN.md §2):
/// @code
///   closed    every call goes through. It opens when, over a sliding time window, the share
///             of calls that failed from overload reaches `failure_ratio` (once the window
///             holds `minimum_calls` calls), or after overload faults in a row:
///             `consecutive_failures` (5) while the window holds fewer calls than that (low
///             traffic), `busy_consecutive_failures` (20) once it holds more — so a
///             database that stops answering under steady traffic is noticed within 20
///             calls, not after half a window. Refusals (CallResult::kRefused: the server
///             took no call at all) open it after `consecutive_failures` in a row at any
///             traffic: they are not a share of calls failing, they are an outage.
///   open      every call is refused until the open period ends. The period starts at
///             `open_initial`, doubles on each probe that fails from overload up to
///             `open_max`, and starts over once a probe succeeds. A probe whose caller cancels
///             it (Permit::cancel(): it ran out of the caller's window) changes nothing.
///   half-open after the open period, up to `half_open_probes` calls are admitted as probes
///             (none while a HealthProbe is announced: then it alone closes the breaker),
///             each holding a lease of `probe_lease`. `probe_successes_to_close` successful
///             probes close the breaker; a failed probe, or a lease that expires without a
///             result (a hung probe), opens it again for twice as long.
///   isolated  forced open by isolate(); nothing is admitted until reset().
/// @endcode
///
/// Silence: a server that stops answering (frozen, blackholed, a paused pooler) fails no
/// call until the calls time out, a window later. A driver that finds it silent (a liveness
/// check that got no answer, see holdfast/core/liveness.hpp) calls trip(): the breaker opens at
/// once, as if a probe had failed, and the next probe (a HealthProbe, or the check itself
/// through acquire_health_probe()) closes it when the server answers again.
///
/// What counts: only faults with fault().overload fail a call. A syntax error or constraint
/// violation, a cancellation, and our own shedding (stop_reason kBreakerOpen, kThrottled,
/// kWindowSpent, kCancelled) are neutral: they count as nothing. With `slow_call_threshold`
/// set, a success slower than it counts as a failure.
///
/// Every state change bumps a generation; a result recorded through a permit taken before
/// the change is ignored, so late answers from before an outage (or from before recovery)
/// cannot flip the new state.
///
/// Thread safety: all methods may be called from any thread. The closed-state path
/// (acquire + record) takes no lock and allocates nothing (except once per thread: its
/// first record registers a thread-exit hook); nor does a refusal while open.
/// State changes take an internal mutex; listeners and the Signal are notified after it is
/// released.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "holdfast/core/clock.hpp"
#include "holdfast/core/shield_options.hpp"
#include "holdfast/core/status.hpp"
#include "holdfast/detail/striped_window.hpp"

namespace holdfast {

/// The states of a breaker (see the top of this file).
enum class BreakerState : std::uint8_t {
  kClosed = 0,    ///< every call goes through
  kOpen = 1,      ///< every call is refused until the open period ends
  kHalfOpen = 2,  ///< probes are admitted
  kIsolated = 3   ///< forced open by isolate() until reset()
};

/// "closed", "open", "half_open", "isolated".
[[nodiscard]] std::string_view to_string(BreakerState state) noexcept;

/// How one finished call counts for a breaker. kRefused is a failure in which the server
/// took no call at all: a connect it refused, or a pooler in front of it that cannot reach
/// it (a failure that names when another attempt can be served: Status::retry_after() with
/// no stop reason, or with kProbeFailed when it refused a pool's probe connect once more).
enum class CallResult : std::uint8_t {
  kSuccess,  ///< the call succeeded
  kFailure,  ///< the call failed from overload
  kNeutral,  ///< counts as nothing
  kRefused   ///< the server took no call at all (see above)
};

namespace detail {
CallResult breaker_result_of_error(const Status& status) noexcept;
}  // namespace detail

/// kSuccess for OK; kRefused or kFailure for an overload fault that is not our own
/// shedding; kNeutral for everything else (bad input, cancellation, breaker open,
/// throttled, window spent).
[[nodiscard]] inline CallResult breaker_result(const Status& status) noexcept {
  return status.ok() ? CallResult::kSuccess : detail::breaker_result_of_error(status);
}

/// True for a Status that is our own shedding rather than the database's answer.
[[nodiscard]] bool is_own_shedding(const Status& status) noexcept;

/// Why a breaker changed state.
enum class TransitionReason : std::uint8_t {
  kFailureRatio,          ///< closed -> open: the failure ratio over the window
  kConsecutiveFailures,   ///< closed -> open: N overload faults in a row (see Options)
  kProbeDue,              ///< open -> half-open: the open period ended
  kProbeFailed,           ///< half-open -> open
  kProbeLeaseExpired,     ///< half-open -> open: a probe held its lease too long
  kProbesSucceeded,       ///< half-open -> closed
  kHealthProbeSucceeded,  ///< open -> closed: the background health probe got an answer
  kSilence,               ///< closed or half-open -> open: the server went silent (trip())
  kIsolated,              ///< any -> isolated (manual)
  kReset,                 ///< any -> closed (manual)
};

/// A few words for the reason ("failure ratio", "probe due", ...).
[[nodiscard]] std::string_view to_string(TransitionReason reason) noexcept;

/// One state change of a breaker, as its listeners receive it.
struct BreakerTransition {
  BreakerState from;         ///< the state it left
  BreakerState to;           ///< the state it entered
  TransitionReason reason;   ///< why
  TimePoint at;              ///< when (on the breaker's clock)
  std::uint64_t generation;  ///< the generation of the new state
  Duration open_for;         ///< to == kOpen: the length of this open period; else zero
};

/// Calls and overload failures counted in the breaker's sliding window.
struct WindowCounts {
  std::uint64_t calls = 0;     ///< calls recorded
  std::uint64_t failures = 0;  ///< of them, overload failures
};

/// Stops sending work to a database that fails from overload (see the top of this file).
/// Not copyable; every method may be called from any thread.
class CircuitBreaker {
 public:
  /// The breaker's options (holdfast::CircuitBreakerOptions).
  using Options = CircuitBreakerOptions;

  class Permit;
  /// Called after every state change (see add_listener()).
  using Listener = std::function<void(const BreakerTransition&)>;

  /// Default options on the system clock.
  CircuitBreaker();
  /// With `options` (std::invalid_argument names a field out of range), on `clock`.
  explicit CircuitBreaker(Options options, Clock& clock = Clock::system());
  ~CircuitBreaker();
  CircuitBreaker(const CircuitBreaker&) = delete;
  CircuitBreaker& operator=(const CircuitBreaker&) = delete;

  /// Asks to make one call at `now`. Closed: an admitted permit (one atomic load). Open
  /// before its period ends, half-open with every probe lease taken, or isolated: a refused
  /// permit that says when to come back. Open after its period ends, or half-open with a
  /// free lease: a probe permit. Never throws, never allocates.
  [[nodiscard]] Permit acquire(TimePoint now) noexcept;
  /// acquire() at the breaker clock's now.
  [[nodiscard]] Permit acquire() noexcept;
  /// acquire(now) while closed; otherwise a refused permit, and nothing changes (no probe
  /// lease is taken, no transition made): the caller asks acquire() next.
  [[nodiscard]] Permit acquire_if_closed(TimePoint now) noexcept;

  /// For a background health probe (HealthProbe): admitted only while open or half-open
  /// (not isolated) and while no other health probe is out, however much of the open period
  /// is left or however long a request's probe takes. Its success closes the breaker; its
  /// failure changes nothing.
  [[nodiscard]] Permit acquire_health_probe(TimePoint now) noexcept;

  /// The current state.
  [[nodiscard]] BreakerState state() const noexcept;
  /// Bumped by every state change.
  [[nodiscard]] std::uint64_t generation() const noexcept;
  /// How long until a call may be admitted: zero when closed or when a probe may be taken
  /// now; open: until the open period ends or the announced health probe (whichever comes
  /// first); half-open with all leases out: until the first lease expires; isolated:
  /// open_max (a hint: only reset() closes it).
  [[nodiscard]] Duration retry_after(TimePoint now) const noexcept;
  /// The length of the current open period (open), or of the next one.
  [[nodiscard]] Duration open_duration() const noexcept;
  /// Calls and failures in the sliding window ending at `now` (since the last close).
  [[nodiscard]] WindowCounts window_counts(TimePoint now) const noexcept;

  /// The server was found silent at `now` (a liveness check got no answer): closed or
  /// half-open -> open (reason kSilence) for the current open period (open_initial after a
  /// success), and the results still out are ignored. Open with its period over: a new
  /// period. Open within its period, or isolated: nothing changes. True when it opened it.
  bool trip(TimePoint now);
  /// Forces the breaker open until reset(). Probe results still out are ignored.
  void isolate();
  /// Closes the breaker, forgets the window, and resets the open period to open_initial.
  void reset();

  /// `listener` is called after every state change, on the thread that caused it, outside
  /// any lock of the breaker (it may call back into the breaker). Concurrent changes may be
  /// reported out of order; BreakerTransition::generation orders them. Exceptions thrown by
  /// a listener are swallowed.
  void add_listener(Listener listener);

  /// Notified (after the state lock is released) on every state change except open ->
  /// half-open (which admits only the probe itself), so requests waiting for a probe are
  /// woken the moment it succeeds (Clock::sleep_until(deadline, &signal(), seen)), and learn
  /// at once when it failed.
  [[nodiscard]] const Signal& signal() const noexcept { return signal_; }

  /// Announces that a health probe will run at `next` and every `interval` after it, so
  /// retry_after() can point waiters at it instead of at the end of a long open period.
  /// While the announcement is fresh (renewed within two intervals), the open breaker
  /// admits no request as a half-open probe, even after its open period: the health probe
  /// alone tries the database and closes it. expect_health_probes(TimePoint{}, {})
  /// withdraws the announcement.
  void expect_health_probes(TimePoint next, Duration interval) noexcept;

  /// True when recording needs the call's latency (slow_call_threshold is set).
  [[nodiscard]] bool measures_latency() const noexcept { return slow_ns_ > 0; }
  /// The options it was built with.
  [[nodiscard]] const Options& options() const noexcept { return options_; }
  /// The clock it reads.
  [[nodiscard]] Clock& clock() const noexcept { return *clock_; }

 private:
  friend class Permit;
  friend class Shield;  // its success path keeps no Permit (call_word(), call_succeeded())
  static constexpr std::uint64_t kStateMask = 3;
  struct ProbeLease {
    bool busy = false;
    std::int64_t expires_ns = 0;
  };
  struct Pending;  // the state change to publish after the lock is released

  static BreakerState state_of(std::uint64_t word) noexcept {
    return static_cast<BreakerState>(word & kStateMask);
  }

  Permit acquire_slow(TimePoint now) noexcept;
  // The state word an ordinary call is admitted with (generation << 2 | state): closed when
  // its state bits are 0 (acquire_if_closed() without the Permit).
  [[nodiscard]] std::uint64_t call_word() const noexcept {
    return word_.load(std::memory_order_acquire);
  }
  [[nodiscard]] static bool closed(std::uint64_t word) noexcept { return (word & kStateMask) == 0; }
  // The Permit acquire_if_closed(now) gives when it reads `word` (REQUIRES: closed(word)).
  [[nodiscard]] Permit call_permit(std::uint64_t word, TimePoint now) noexcept;
  // Records the success of an ordinary call admitted with `word` at `start_ns`, after
  // `latency`: what its Permit's record(CallResult::kSuccess, latency) does.
  void call_succeeded(std::uint64_t word, std::int64_t start_ns, Duration latency) noexcept;
  void finish_call(const Permit& permit, CallResult result, Duration latency) noexcept;
  [[gnu::noinline]] void call_failed(std::uint64_t word, std::int64_t end_ns,
                                     bool refused) noexcept;
  void finish_probe(const Permit& permit, CallResult result, Duration latency) noexcept;
  // REQUIRES: mutex_ held. The window starts afresh after the bucket of `now_ns`.
  void forget_window_locked(std::int64_t now_ns) noexcept;

  // REQUIRES: mutex_ held. Moves to `to` and records the transition in `pending`.
  void move_locked(BreakerState to, TransitionReason reason, std::int64_t now_ns, Pending& pending);
  void open_locked(std::int64_t now_ns, Duration period, TransitionReason reason, Pending& pending);
  void close_locked(std::int64_t now_ns, TransitionReason reason, Pending& pending);
  void publish(const Pending& pending) noexcept;
  void expire_leases_locked(std::int64_t now_ns, Pending& pending);

  const Options options_;
  Clock* clock_;

  // What every call reads: one cache line, written only on failures and state changes.
  // generation << 2 | state; written only under mutex_.
  alignas(64) std::atomic<std::uint64_t> word_{0};
  std::atomic<int> consecutive_{0};
  std::atomic<int> refused_{0};  // of consecutive_, the refusals in a row at its end
  const std::int64_t slow_ns_;
  // The sliding window of calls since the last close.
  detail::StripedWindow window_;

  alignas(64) std::atomic<std::int64_t> open_until_ns_{0};
  std::atomic<std::int64_t> open_period_ns_;
  std::atomic<std::int64_t> first_lease_expiry_ns_{0};
  std::atomic<int> free_leases_{0};
  std::atomic<std::int64_t> health_next_ns_{0};
  std::atomic<std::int64_t> health_interval_ns_{0};
  std::atomic<bool> health_out_{false};

  std::mutex mutex_;
  std::vector<ProbeLease> leases_;  // half_open_probes entries; guarded by mutex_
  int probe_successes_ = 0;         // guarded by mutex_

  std::mutex listeners_mutex_;
  std::shared_ptr<const std::vector<Listener>> listeners_;
  Signal signal_;
};

/// The right to make one call (or the refusal of it). Move-only. An admitted permit must be
/// recorded once; one that is destroyed unrecorded (an exception, a cancelled request)
/// records a neutral result, so it can never leave a probe lease taken.
class CircuitBreaker::Permit {
 public:
  /// What a permit allows.
  enum class Kind : std::uint8_t {
    kRefused,     ///< the call may not be made
    kCall,        ///< an ordinary call, while closed
    kProbe,       ///< a half-open probe
    kHealthProbe  ///< a background health probe (acquire_health_probe())
  };

  /// A refused permit that refers to no breaker.
  Permit() noexcept = default;
  /// Takes over `other`'s permit; `other` is left refused and recorded.
  Permit(Permit&& other) noexcept
      : breaker_(std::exchange(other.breaker_, nullptr)),
        word_(other.word_),
        time_ns_(other.time_ns_),
        kind_(other.kind_),
        state_(other.state_),
        lease_(other.lease_) {}
  /// Records this permit as neutral if still pending, then takes over `other`'s.
  Permit& operator=(Permit&& other) noexcept {
    if (this != &other) {
      if (breaker_ != nullptr) record(CallResult::kNeutral);
      breaker_ = std::exchange(other.breaker_, nullptr);
      word_ = other.word_;
      time_ns_ = other.time_ns_;
      kind_ = other.kind_;
      state_ = other.state_;
      lease_ = other.lease_;
    }
    return *this;
  }
  Permit(const Permit&) = delete;
  Permit& operator=(const Permit&) = delete;
  ~Permit() {
    if (breaker_ != nullptr) record(CallResult::kNeutral);
  }

  /// True when the call may be made (even after it was recorded).
  [[nodiscard]] bool admitted() const noexcept { return kind_ != Kind::kRefused; }
  /// admitted().
  explicit operator bool() const noexcept { return admitted(); }
  /// What this permit allows.
  [[nodiscard]] Kind kind() const noexcept { return kind_; }
  /// True for a probe (a half-open probe or a health probe).
  [[nodiscard]] bool is_probe() const noexcept {
    return kind_ == Kind::kProbe || kind_ == Kind::kHealthProbe;
  }
  /// True until the result is recorded.
  [[nodiscard]] bool pending() const noexcept { return breaker_ != nullptr; }
  /// The state the breaker was in when it admitted or refused this permit.
  [[nodiscard]] BreakerState state() const noexcept { return state_; }
  /// Refused: how long until coming back is worth it (see CircuitBreaker::retry_after).
  [[nodiscard]] Duration retry_after() const noexcept {
    return kind_ == Kind::kRefused ? Duration(time_ns_) : Duration::zero();
  }
  /// The breaker's generation when this permit was admitted or refused.
  [[nodiscard]] std::uint64_t generation() const noexcept { return word_ >> 2; }
  /// Admitted: the `now` passed to acquire().
  [[nodiscard]] TimePoint started_at() const noexcept {
    return kind_ == Kind::kRefused ? TimePoint{} : TimePoint(Duration(time_ns_));
  }

  /// Records the call's result; `latency` is how long it took (it places the call in the
  /// window and feeds slow_call_threshold; zero when unknown). Only the first record of an
  /// admitted permit counts; recording a refused permit does nothing.
  void record(const Status& status, Duration latency = Duration::zero()) noexcept {
    record(breaker_result(status), latency);
  }
  /// Records the call's result as the breaker counts it (see breaker_result()).
  void record(CallResult result, Duration latency = Duration::zero()) noexcept {
    CircuitBreaker* b = std::exchange(breaker_, nullptr);
    if (b == nullptr) return;
    if (kind_ == Kind::kCall) [[likely]] {
      b->finish_call(*this, result, latency);
    } else {
      b->finish_probe(*this, result, latency);
    }
  }
  /// record(CallResult::kSuccess, latency).
  void record_success(Duration latency = Duration::zero()) noexcept {
    record(CallResult::kSuccess, latency);
  }
  /// record(CallResult::kFailure, latency).
  void record_failure(Duration latency = Duration::zero()) noexcept {
    record(CallResult::kFailure, latency);
  }
  /// Cancellation: counts as neither success nor failure; frees a probe lease.
  void cancel() noexcept { record(CallResult::kNeutral); }

 private:
  friend class CircuitBreaker;
  Permit(CircuitBreaker* breaker, std::uint64_t word, std::int64_t time_ns, Kind kind,
         BreakerState state, std::uint8_t lease) noexcept
      : breaker_(breaker),
        word_(word),
        time_ns_(time_ns),
        kind_(kind),
        state_(state),
        lease_(lease) {}

  CircuitBreaker* breaker_ = nullptr;
  std::uint64_t word_ = 0;
  std::int64_t time_ns_ = 0;  // admitted: start time; refused: retry_after
  Kind kind_ = Kind::kRefused;
  BreakerState state_ = BreakerState::kClosed;
  std::uint8_t lease_ = 0;
};

inline CircuitBreaker::Permit CircuitBreaker::call_permit(std::uint64_t word,
                                                          TimePoint now) noexcept {
  return Permit(this, word, now.time_since_epoch().count(), Permit::Kind::kCall,
                BreakerState::kClosed, 0);
}

inline CircuitBreaker::Permit CircuitBreaker::acquire_if_closed(TimePoint now) noexcept {
  const std::uint64_t w = call_word();
  if (closed(w)) [[likely]]
    return call_permit(w, now);
  return Permit();
}

inline void CircuitBreaker::call_succeeded(std::uint64_t word, std::int64_t start_ns,
                                           Duration latency) noexcept {
  // A result from before the last state change (generation) says nothing about now.
  if (word_.load(std::memory_order_acquire) != word) return;
  const std::int64_t lat = latency.count() > 0 ? latency.count() : 0;
  if (slow_ns_ > 0 && lat > slow_ns_) [[unlikely]] {
    call_failed(word, start_ns + lat, false);  // slower than slow_call_threshold
    return;
  }
  window_.count(start_ns + lat, false);
  if (consecutive_.load(std::memory_order_relaxed) != 0) [[unlikely]] {
    consecutive_.store(0, std::memory_order_relaxed);
    refused_.store(0, std::memory_order_relaxed);
  }
}

inline CircuitBreaker::Permit CircuitBreaker::acquire(TimePoint now) noexcept {
  if (Permit p = acquire_if_closed(now); p) [[likely]]
    return p;
  return acquire_slow(now);
}

inline CircuitBreaker::Permit CircuitBreaker::acquire() noexcept {
  return acquire(clock_->now());
}

inline BreakerState CircuitBreaker::state() const noexcept {
  return state_of(word_.load(std::memory_order_acquire));
}

inline std::uint64_t CircuitBreaker::generation() const noexcept {
  return word_.load(std::memory_order_acquire) >> 2;
}

}  // namespace holdfast
