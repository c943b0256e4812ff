/// @file
/// Priority: the class of an Operation, which decides who keeps a place under a Shield's
/// concurrency limit when there is not room for all (docs/adr/0035-priorities.md).
///
/// @code
///   shield.run(holdfast::Operation::write("payments.create").critical(), pay);
///   shield.run(holdfast::Operation::write("logs.insert").background(), write_batch);
/// @endcode
///
/// While the limit has room every class goes at once and nothing changes. When it is full,
/// the line for a place is kept per class: a place that frees up goes to the first waiter of
/// the highest class waiting, critical may wait longer than the others, background starts
/// at once only in spare room (as a retry) and is shed as soon as the line stands, and a
/// waiter that no longer fits is told from the lowest class up. A lower class passed over for
/// seven places in a row gets the eighth, so no class starves while places change hands.
#pragma once

#include <cstdint>
#include <string_view>

namespace holdfast {

/// Which requests keep their places when there is not room for all (docs/adr/0035-priorities.md).
/// Under overload a Shield gives places under its concurrency limit to the higher class first
/// and sheds the lowest class first; while the limit has room every class goes at once.
enum class Priority : std::uint8_t {
  kCritical,    ///< what a user is waiting on and must not lose: payments, signing in
  kNormal,      ///< pages and everything not marked otherwise (the default)
  kBackground,  ///< work nobody waits for: log writes, housekeeping, prefetch
};
/// The number of classes (Priority's values are 0 .. kPriorities - 1).
inline constexpr int kPriorities = 3;

/// "critical", "normal", "background".
[[nodiscard]] std::string_view to_string(Priority p) noexcept;
/// "critical", "normal" or "background" into `out`; false (and `out` untouched) otherwise.
[[nodiscard]] bool parse_priority(std::string_view text, Priority& out) noexcept;

}  // namespace holdfast
