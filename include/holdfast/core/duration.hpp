/// @file
/// Duration and TimePoint: the units of time of every holdfast API. A light header: an
/// options struct or a Status holds a Duration without the clocks (holdfast/core/clock.hpp).
#pragma once

#include <chrono>

namespace holdfast {

/// Every duration in holdfast: nanoseconds.
using Duration = std::chrono::nanoseconds;
/// An instant on the steady clock (a Clock's now()), in nanoseconds.
using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;

}  // namespace holdfast
