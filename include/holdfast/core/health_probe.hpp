/// @file
/// HealthProbe: asks the database "are you back?" while its breaker is open or half-open.
///
/// @code
///   holdfast::HealthProbe probe(shield.breaker(), [&] { return db.execute("SELECT 1"); });
/// @endcode
///
/// While the breaker is open, the probe callable runs every `interval` (on the breaker's
/// clock), outside the open period's schedule: one cheap query instead of a user request.
/// A success closes the breaker at once (and wakes the requests waiting for it); a failure
/// changes nothing. The next run is announced to the breaker, so waiting requests are told
/// to wait for it rather than for the end of a long open period, and no request is made a
/// half-open probe meanwhile: a user's request never waits on a server that may not
/// answer. If a request did become the probe (the announcement had gone stale), the probe
/// runs while it is out too, so a slow request cannot keep the breaker from closing.
/// Nothing runs while the breaker is closed or isolated.
///
/// With `background` (the default) a thread of its own does this; probe_now() runs one
/// probe on the caller's thread either way. The destructor stops and joins the thread; it
/// waits for a probe in progress. In tests, run the thread on a ManualClock in kBlocking
/// mode (in kAutoAdvance mode its sleeps would race virtual time forward), or turn
/// `background` off and call probe_now().
///
/// Thread safety: probe_now() may be called from any thread; at most one probe of a breaker
/// runs at a time (a second caller finds it out and returns without running).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

#include "holdfast/core/circuit_breaker.hpp"
#include "holdfast/core/clock.hpp"
#include "holdfast/core/status.hpp"

namespace holdfast {

/// Runs a cheap probe while a breaker is open or half-open, and closes it when the
/// database answers (see the top of this file). Not copyable.
class HealthProbe {
 public:
  /// How often to probe, and on which thread.
  struct Options {
    /// Between runs, on the breaker's clock; > 0.
    Duration interval = std::chrono::milliseconds(500);
    bool background = true;  ///< a thread of its own runs the probes; false: only probe_now()
  };
  /// Returns OK when the database answered. Should bound its own time (a short timeout): a
  /// probe that hangs delays the next one. Exceptions count as a failed probe.
  using ProbeFn = std::function<Status()>;

  /// What one probe_now() did.
  struct ProbeReport {
    bool ran = false;     ///< false: the breaker was not open, or another probe was out
    Status status;        ///< the probe's answer when it ran
    bool closed = false;  ///< the probe's success closed the breaker
  };

  /// REQUIRES: `breaker` outlives this object; `probe` is not empty (else
  /// std::invalid_argument, as is a non-positive interval).
  HealthProbe(CircuitBreaker& breaker, ProbeFn probe);
  /// The same with `options`.
  HealthProbe(CircuitBreaker& breaker, ProbeFn probe, Options options);
  ~HealthProbe();
  HealthProbe(const HealthProbe&) = delete;
  HealthProbe& operator=(const HealthProbe&) = delete;

  /// Runs the probe once now if the breaker is open; see ProbeReport.
  ProbeReport probe_now();

  /// Stops the background thread (idempotent; the destructor calls it).
  void stop() noexcept;

  /// Probes run so far.
  [[nodiscard]] std::uint64_t runs() const noexcept {
    return runs_.load(std::memory_order_relaxed);
  }
  /// Of them, the ones that returned OK.
  [[nodiscard]] std::uint64_t successes() const noexcept {
    return successes_.load(std::memory_order_relaxed);
  }

 private:
  void loop() noexcept;

  CircuitBreaker* breaker_;
  ProbeFn probe_;
  Options options_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> runs_{0};
  std::atomic<std::uint64_t> successes_{0};
  Signal stop_signal_;
  std::thread thread_;
};

}  // namespace holdfast
