/// @file
/// Priority: the class of an Operation, `Operation::write("payments.create").critical()`.
/// Under a full Shield, a freed place goes to the first waiter of the highest class waiting,
/// background is shed first, and no class starves (docs/adr/0035-priorities.md).
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
