/// @file
/// Fault: what the classifier knows about one database error.
///
/// Four facts, decided once per native error by a pure, table-driven classifier (classify.hpp,
/// docs/faults.md). Bad input has scope kNone and is never overload; neither is our own
/// shedding (breaker open, window spent, throttled).
#pragma once

#include <cstdint>
#include <string_view>

namespace holdfast {

/// What must be re-run for a retry to make sense.
enum class RetryScope : std::uint8_t {
  kNone,         ///< permanent: retrying cannot help
  kStatement,    ///< re-running the same statement may succeed
  kTransaction,  ///< the whole transaction was (or must be) rolled back: re-run all of it
  kReconnect,    ///< the connection is gone: re-run on a new connection
};

/// Whether a failed attempt provably applied nothing.
enum class Outcome : std::uint8_t {
  kNotApplied,  ///< the failed attempt changed nothing
  kUnknown,     ///< the attempt may have been applied (e.g. connection lost during COMMIT)
};

/// How soon a retry is worth it.
enum class Pace : std::uint8_t {
  kFast,  ///< lock contention: worth retrying soon
  kSlow,  ///< overload or restart: back off
};

/// The four facts the classifier decided for one native error (see the top of this file).
struct Fault {
  /// What must be re-run for a retry to make sense.
  RetryScope scope = RetryScope::kNone;
  /// Whether the failed attempt may have applied.
  Outcome outcome = Outcome::kNotApplied;
  /// Fast (lock contention) or slow (overload, restart).
  Pace pace = Pace::kFast;
  /// Evidence that the database is struggling: counts toward opening a circuit breaker.
  bool overload = false;

  /// True when some retry (of the statement, the transaction or after a reconnect) may help.
  [[nodiscard]] constexpr bool transient() const noexcept { return scope != RetryScope::kNone; }

  /// Equal when all four facts are.
  friend constexpr bool operator==(const Fault&, const Fault&) = default;
};

/// "none", "statement", "transaction", "reconnect".
[[nodiscard]] std::string_view to_string(RetryScope scope) noexcept;
/// "not_applied", "unknown".
[[nodiscard]] std::string_view to_string(Outcome outcome) noexcept;
/// "fast", "slow".
[[nodiscard]] std::string_view to_string(Pace pace) noexcept;

}  // namespace holdfast
