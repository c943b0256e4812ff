// What shield.cpp (the Shield and its Call) and shield_line.cpp (the wait queue for a place
// under the concurrency limit, by class) share: the line's constants. Not installed.
#pragma once

#include "holdfast/core/shield.hpp"

namespace holdfast::shield_detail {

// Our own shedding: worth trying again later (HTTP 503), but never an overload fault, so
// it can never feed a breaker.
inline constexpr Fault kShedding{RetryScope::kStatement, Outcome::kNotApplied, Pace::kSlow, false};

// The line's target and interval in units of the normal latency, and their floors for a
// database that answers in a millisecond or two: CoDel's 5 ms target, and half its 100 ms
// interval (a network's round trip; a query's is shorter) (ADR 0033).
inline constexpr int kTargetLatencies = 3;
inline constexpr int kIntervalLatencies = 10;
inline constexpr Duration kTargetFloor = std::chrono::milliseconds(5);
inline constexpr Duration kIntervalFloor = std::chrono::milliseconds(50);
// Places free up at random moments: a wait expected to take all of what a waiter is given
// overruns it about one time in three (answer times spread like an exponential), and the
// waiter would learn it only then. A newcomer queues when three times its expected wait
// fits (an exponential wait exceeds three times its mean 5 % of the time), and a waiter is
// told to go when three times its wait no longer fits.
inline constexpr int kWaitMargin = 3;
// Classes (ADR 0035): a lower class passed over for this many places in a row while it waits
// gets the next one (its oldest waiter), so that no class starves while places change hands.
inline constexpr int kShareEvery = 8;

inline int line_of(Priority p) noexcept {
  return static_cast<int>(p);
}

}  // namespace holdfast::shield_detail
