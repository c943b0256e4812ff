// Internal: the check of a table name from options before it is written into SQL (the
// drivers' idempotency-key tables).
#pragma once

#include <string_view>

namespace holdfast::detail {

// True for a plain or schema-qualified SQL identifier ("keys", "app.keys"): ASCII letters,
// digits and '_', no part starting with a digit.
[[nodiscard]] bool is_table_name(std::string_view name) noexcept;

}  // namespace holdfast::detail
