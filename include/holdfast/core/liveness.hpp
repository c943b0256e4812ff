/// @file
/// Liveness: tells a server that is slow from one that is silent, and trips the Shield's
/// breaker the moment it is sure the server went silent (DESIGN.md §10,
/// docs/adr/0023-silence-is-a-fault.md).
///
/// @code
///   holdfast::Liveness live(shield, check);     // one per server; `check` asks it "are you
///                                               // there?" (a fresh connection and SELECT 1)
///   // the driver, around every wait for the server (one exchange):
///   live.waiting(now);  ...  live.answered(now) whenever bytes come back  ...  live.done();
/// @endcode
///
/// A frozen process or VM, a blackholed network or a paused pooler refuses nothing: calls
/// simply never come back, so no breaker rule fires until they time out a window later.
/// Liveness watches for that:
///   - Suspicion: work has waited on the server for `suspect_after` and nothing at all came
///     back from it meanwhile (no answer to any exchange). A slow server that still works (a
///     brownout, a long lock, a long query) answers something, or answers the check.
///   - Confirmation: the driver's check (bounded by check_timeout) gets no answer. Then the
///     server is silent: the Shield's breaker trips (opens at once, see
///     CircuitBreaker::trip()), the driver is told (on_change(true): it wakes its exchanges
///     and pool waits, which give up at once instead of at the end of their window), and
///     requests are answered in milliseconds (a stale copy, another copy, or 503 with
///     Retry-After) for as long as the silence lasts.
///   - Back: while silent the check runs again every `recheck`; the first one answered ends
///     the silence (on_change(false)) and closes the breaker as a health probe would: the
///     first fresh page comes within about recheck + one round trip of the thaw.
///   - Cost to a slow-but-working server: one check per suspicion. A check that was answered
///     while work still waits doubles the quiet time needed for the next suspicion (up to
///     `suspect_max`); any ordinary answer resets it.
///   - With `each_wait`, the evidence is each wait's own quiet time instead of all work's: the
///     longest any one wait has heard nothing (since the last check answered, at most). A
///     pooler that cannot get one wait a server connection answers the others' queries; all
///     work is then never quiet, but that wait is. Both PostgreSQL drivers judge this way.
///
/// With `background` (the default) a thread of its own looks every `tick` and runs the
/// checks; tick(now) does the same on the caller's thread (tests, the simulator). A driver on
/// an event loop runs the checks itself, without a thread: begin_check(now) says a check is due
/// and end_check() takes what it found; the rules above stay the watch's (both PostgreSQL
/// drivers judge a server with them, ADR 0058).
///
/// Thread safety: waiting(), answered() and done() are the hot path: relaxed atomics, no
/// lock, no allocation. Everything may be called from any thread. At most one check runs at
/// a time. The destructor stops and joins the thread (waiting for a check in progress,
/// which check_timeout bounds).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "holdfast/core/clock.hpp"

namespace holdfast {

class Shield;

/// Watches one server's exchanges, checks a suspected silence and trips the Shield's breaker
/// when it is confirmed (see the top of this file). Not copyable.
class Liveness {
 public:
  /// The thresholds; the constructor checks them.
  struct Options {
    /// Work waiting this long with nothing heard from the server makes it suspect. > 0.
    Duration suspect_after = std::chrono::milliseconds(500);
    /// The longest quiet time a suspicion can need after answered checks. >= suspect_after.
    Duration suspect_max = std::chrono::seconds(2);
    /// What the check may take; the driver bounds its check by it. > 0.
    Duration check_timeout = std::chrono::milliseconds(500);
    /// While silent, the pause between the end of one check and the start of the next. > 0.
    Duration recheck = std::chrono::milliseconds(100);
    /// How often the background thread looks. > 0.
    Duration tick = std::chrono::milliseconds(50);
    bool background = true;  ///< a thread of its own looks every `tick`; false: only tick()
    /// tick() judges the longest quiet time of any one wait (see waiting()), not all work's.
    bool each_wait = false;
  };

  /// What waiting() returns when all its slots are taken: that wait counts in all work's
  /// quiet time only.
  static constexpr std::uint32_t kNoSlot = ~std::uint32_t{0};

  /// What one check found.
  enum class CheckResult : std::uint8_t {
    kAnswered,  ///< the server answered (whatever it said: a refusal is an answer too)
    kSilent,    ///< nothing came back within check_timeout
  };
  /// Asks the server once, within `deadline`. Exceptions count as kAnswered (no evidence).
  using CheckFn = std::function<CheckResult(TimePoint deadline)>;
  /// Called (on the thread that noticed) when the server turns silent (true) and when it
  /// answers again (false). Must not throw.
  using ChangeFn = std::function<void(bool silent)>;

  /// REQUIRES: `shield` outlives this object; `check` is not empty (else
  /// std::invalid_argument, as are options out of range).
  Liveness(Shield& shield, CheckFn check, ChangeFn on_change = {});
  /// The same with `options`.
  Liveness(Shield& shield, CheckFn check, ChangeFn on_change, Options options);
  /// A watch with no Shield of its own, for a driver that runs its checks itself
  /// (begin_check(), end_check()) and acts on on_change() (several Shields share its verdict).
  /// REQUIRES: options.background is false (else std::invalid_argument, as are options out of
  /// range).
  Liveness(ChangeFn on_change, Options options);
  ~Liveness();
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  /// An exchange starts waiting for the server at `now`. Returns its slot, which the wait
  /// hands to answered() and done() (kNoSlot when none was free), for `each_wait`.
  std::uint32_t waiting(TimePoint now) noexcept {
    const std::int64_t ns = now.time_since_epoch().count();
    if (waiting_.fetch_add(1, std::memory_order_relaxed) == 0) {
      quiet_since_ns_.store(ns, std::memory_order_relaxed);
    }
    return options_.each_wait ? take_slot(ns) : kNoSlot;
  }
  /// Something came back from the server at `now` (bytes, an error, the end of the stream),
  /// to the wait in `slot` (waiting()'s).
  void answered(TimePoint now, std::uint32_t slot = kNoSlot) noexcept {
    // Stored only when it moved: exchanges on many threads answered within one (coarse)
    // clock tick do not write the shared line again.
    const std::int64_t ns = now.time_since_epoch().count();
    if (quiet_since_ns_.load(std::memory_order_relaxed) != ns) {
      quiet_since_ns_.store(ns, std::memory_order_relaxed);
    }
    if (checks_answered_.load(std::memory_order_relaxed) != 0) {
      checks_answered_.store(0, std::memory_order_relaxed);
    }
    if (slot < kSlots) slots_[slot].heard_ns.store(ns, std::memory_order_relaxed);
  }
  /// The exchange in `slot` (waiting()'s) stopped waiting (answered or given up).
  void done(std::uint32_t slot = kNoSlot) noexcept {
    if (slot < kSlots) slots_[slot].heard_ns.store(kFree, std::memory_order_relaxed);
    waiting_.fetch_sub(1, std::memory_order_relaxed);
  }

  /// True from a check that got no answer until one that did.
  [[nodiscard]] bool silent() const noexcept { return silent_.load(std::memory_order_acquire); }
  /// How long work has waited with nothing heard from the server (zero when nothing waits).
  [[nodiscard]] Duration quiet_for(TimePoint now) const noexcept;
  /// The longest any one wait with a slot has heard nothing (zero when none waits).
  [[nodiscard]] Duration longest_wait(TimePoint now) const noexcept;

  /// One look at `now`: runs a check when one is due (suspicion, or a recheck while silent),
  /// on this thread. True when a check ran. False, running none, without a `check`.
  bool tick(TimePoint now);

  /// For a driver that runs the checks itself: true when one is due at `now` (a suspicion, or
  /// a recheck while silent) and none runs; the caller then asks the server (within
  /// check_timeout) and must call end_check(). A silence an exchange heard the end of ends here.
  /// `waited`: how long the caller's own wait has heard nothing, when it knows. The suspicion
  /// is then that wait's quiet time (since the last check the server answered, at most)
  /// instead of the quiet time of all work: one wait that heard nothing is evidence enough
  /// where other exchanges may be answered while it is not (a pooler that cannot get this wait
  /// a server connection answers the others' queries).
  [[nodiscard]] bool begin_check(TimePoint now, Duration waited = Duration::max()) noexcept;
  /// What the check begin_check() started found, at `now`.
  void end_check(CheckResult result, TimePoint now) noexcept;
  /// How long until a check is due (zero: due now, or one runs), as begin_check() judges it
  /// with the same `waited`: while silent, the rest of `recheck`; else the quiet time still
  /// needed for a suspicion (all of it while nothing waits).
  [[nodiscard]] Duration check_due_in(TimePoint now,
                                      Duration waited = Duration::max()) const noexcept;

  /// Stops the background thread (idempotent; the destructor calls it).
  void stop() noexcept;

  /// Checks run so far.
  [[nodiscard]] std::uint64_t checks() const noexcept {
    return checks_.load(std::memory_order_relaxed);
  }
  /// Silences found so far (a check that got no answer while not already silent).
  [[nodiscard]] std::uint64_t silences() const noexcept {
    return silences_.load(std::memory_order_relaxed);
  }
  /// The options it was built with.
  [[nodiscard]] const Options& options() const noexcept { return options_; }

 private:
  // Waits tracked one by one (each_wait): enough for a pool's connections; the ones past it
  // count in all work's quiet time only.
  static constexpr std::uint32_t kSlots = 64;
  static constexpr std::int64_t kFree = INT64_MIN;
  struct alignas(64) Slot {  // a line each: waits on many threads do not share one
    std::atomic<std::int64_t> heard_ns{kFree};  // the wait's start or the last it heard
  };
  std::uint32_t take_slot(std::int64_t now_ns) noexcept;
  void loop() noexcept;
  // The quiet time that makes the server suspect now.
  [[nodiscard]] Duration suspicion_threshold() const noexcept;
  // The quiet time judged against it: all work's, or one wait's (`waited`, see begin_check()).
  [[nodiscard]] Duration suspicion(TimePoint now, Duration waited) const noexcept;
  void found(CheckResult result, TimePoint now) noexcept;

  Shield* shield_;  // null: the driver acts on on_change() alone
  CheckFn check_;
  ChangeFn on_change_;
  Options options_;
  std::atomic<std::int64_t> waiting_{0};
  std::atomic<std::int64_t> quiet_since_ns_{0};
  std::atomic<int> checks_answered_{0};  // answered checks since the last ordinary answer
  std::atomic<bool> silent_{false};
  std::atomic<bool> checking_{false};
  // Written under checking_; read by check_due_in() without it.
  std::atomic<std::int64_t> silent_since_ns_{0};
  std::atomic<std::int64_t> last_check_end_ns_{0};
  std::atomic<std::int64_t> check_answered_ns_{0};  // the end of the last check answered
  std::atomic<std::uint64_t> checks_{0};
  std::atomic<std::uint64_t> silences_{0};
  std::atomic<bool> stopping_{false};
  std::unique_ptr<Slot[]> slots_;  // kSlots of them with each_wait, else none
  Signal stop_signal_;
  std::thread thread_;  // last: it uses the members above
};

}  // namespace holdfast
