/// @file
/// Operation: what a callable handed to a retry loop is (may it be repeated, does it re-run a
/// whole transaction, its class and its label). A light header: an engine's API takes an
/// Operation without the retry loop (holdfast/core/retry.hpp).
#pragma once

#include <cstdint>
#include <string_view>

#include "holdfast/core/priority.hpp"

namespace holdfast {

/// Whether repeating an operation is harmless even when a failed attempt was applied.
enum class Idempotency : std::uint8_t {
  kNonIdempotent,  ///< repeat only when the failed attempt provably applied nothing
  kIdempotent,     ///< repeating is harmless even if a failed attempt was applied
};

/// What the callable handed to the loop is.
struct Operation {
  /// Whether it may be repeated after an attempt that may have been applied.
  Idempotency idempotency = Idempotency::kNonIdempotent;
  /// The callable runs a whole transaction from its start, so faults that roll the
  /// transaction back (scope kTransaction) may be retried by calling it again.
  bool reruns_transaction = false;
  /// Its class under overload (docs/adr/0035-priorities.md): kNormal unless marked.
  Priority priority = Priority::kNormal;
  /// Names the operation in the DEBUG line ("schedule.games").
  std::string_view label = {};

  /// This operation in class `p`: `Operation::write("payments.create").with_priority(
  /// Priority::kCritical)`.
  [[nodiscard]] constexpr Operation with_priority(Priority p) const noexcept {
    Operation o = *this;
    o.priority = p;
    return o;
  }
  /// with_priority(Priority::kCritical).
  [[nodiscard]] constexpr Operation critical() const noexcept {
    return with_priority(Priority::kCritical);
  }
  /// with_priority(Priority::kBackground).
  [[nodiscard]] constexpr Operation background() const noexcept {
    return with_priority(Priority::kBackground);
  }

  /// A read: idempotent, so repeated even after an attempt that may have been applied.
  static constexpr Operation read(std::string_view label = "read") noexcept {
    return {Idempotency::kIdempotent, false, Priority::kNormal, label};
  }
  /// A write: repeated only when the failed attempt provably applied nothing.
  static constexpr Operation write(std::string_view label = "write") noexcept {
    return {Idempotency::kNonIdempotent, false, Priority::kNormal, label};
  }
  /// A write that is harmless to repeat (an upsert, a keyed insert): idempotent.
  static constexpr Operation idempotent_write(std::string_view label = "write") noexcept {
    return {Idempotency::kIdempotent, false, Priority::kNormal, label};
  }
  /// A transaction function. `rerunnable`: calling it again after a rollback is safe.
  static constexpr Operation transaction(bool rerunnable,
                                         std::string_view label = "transaction") noexcept {
    return {Idempotency::kNonIdempotent, rerunnable, Priority::kNormal, label};
  }
};

}  // namespace holdfast
