/// @file
/// Backoff: a delay schedule plus jitter.
///
/// @code
///   Backoff::steps({200ms, 600ms, 1500ms, 3000ms})          // the default schedule,
///                                                            // ±50% proportional jitter
///   Backoff::exponential(1s, 2.0, 10s, Jitter::none())       // Tenacity's wait_exponential
/// @endcode
///
/// Retry n (n = 1 before the second attempt) has a nominal delay d, which a Jitter spreads
/// (Jitter::Kind says how). Bad configuration throws std::invalid_argument naming the field.
#pragma once

#include <initializer_list>
#include <vector>

#include "holdfast/core/duration.hpp"

namespace holdfast {

class Random;  // holdfast/core/random.hpp

/// How a Backoff spreads its nominal delay d. A copyable value.
class Jitter {
 public:
  /// Which spread a Jitter applies.
  enum class Kind : std::uint8_t {
    kNone,          ///< exactly d
    kProportional,  ///< uniform in [d(1-r), d(1+r)], r = ratio()
    kFull,          ///< uniform in [0, d]
    kEqual,         ///< uniform in [d/2, d]
    kDecorrelated   ///< uniform in [first, 3 * previous], capped at the largest nominal delay
  };

  /// No jitter: every delay is exactly the nominal one.
  static Jitter none() noexcept { return Jitter(Kind::kNone, 0.0); }
  /// Uniform in [d(1-ratio), d(1+ratio)]. REQUIRES: 0 <= ratio <= 1, else
  /// std::invalid_argument.
  static Jitter proportional(double ratio);
  /// Uniform in [0, d].
  static Jitter full() noexcept { return Jitter(Kind::kFull, 0.0); }
  /// Uniform in [d/2, d].
  static Jitter equal() noexcept { return Jitter(Kind::kEqual, 0.0); }
  /// AWS "decorrelated jitter": uniform in [first, 3 * previous], capped at the largest
  /// nominal delay.
  static Jitter decorrelated() noexcept { return Jitter(Kind::kDecorrelated, 0.0); }

  /// Which spread this is.
  [[nodiscard]] Kind kind() const noexcept { return kind_; }
  /// The ratio of proportional jitter; 0 for the other kinds.
  [[nodiscard]] double ratio() const noexcept { return ratio_; }

 private:
  Jitter(Kind kind, double ratio) noexcept : kind_(kind), ratio_(ratio) {}
  Kind kind_;
  double ratio_;
};

/// A delay schedule plus jitter: the wait before each retry. A copyable value; computing a
/// delay allocates nothing.
class Backoff {
 public:
  /// The default schedule (standard()): 200/600/1500/3000 ms, each ±50%.
  Backoff();

  /// Fixed steps; the last one repeats. REQUIRES: at least one step, none negative.
  static Backoff steps(std::vector<Duration> delays, Jitter jitter = Jitter::proportional(0.5));
  /// The same, from a braced list of delays.
  static Backoff steps(std::initializer_list<Duration> delays,
                       Jitter jitter = Jitter::proportional(0.5)) {
    return steps(std::vector<Duration>(delays), jitter);
  }
  /// base * factor^(n-1), at most cap. REQUIRES: base >= 0, factor >= 1, cap >= base.
  static Backoff exponential(Duration base, double factor, Duration cap,
                             Jitter jitter = Jitter::full());

  /// The default schedule: 200/600/1500/3000 ms ±50%.
  static Backoff standard();
  /// A quicker first retry, for the read every page makes first: 150/500/1500/3000 ms ±50%.
  static Backoff session_reads();

  /// The un-jittered delay before retry n (n >= 1).
  [[nodiscard]] Duration nominal(int retry) const noexcept;
  /// The jittered delay before retry n. `previous` is the delay actually used before retry
  /// n-1 (zero before the first retry); only decorrelated jitter reads it.
  [[nodiscard]] Duration delay(int retry, Duration previous, Random& rng) const noexcept;
  /// No delay() is ever larger than this.
  [[nodiscard]] Duration max_delay() const noexcept;

  /// The jitter this schedule applies.
  [[nodiscard]] const Jitter& jitter() const noexcept { return jitter_; }

 private:
  Backoff(std::vector<Duration> steps, Duration base, double factor, Duration cap, Jitter jitter);

  std::vector<Duration> steps_;  // empty for exponential
  Duration base_{};
  double factor_ = 1.0;
  Duration cap_{};
  Jitter jitter_;
};

}  // namespace holdfast
