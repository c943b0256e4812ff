// Internal: PostgreSQL array literals, as the log store sends a batch (not installed).
#pragma once

#include <string>
#include <string_view>

namespace holdfast::pg {

// Appends `text` to `out` as one double-quoted element of a PostgreSQL array literal: '"'
// and '\' escaped, NUL bytes dropped, invalid UTF-8 replaced by U+FFFD. Returns true when
// it had to drop or replace something.
bool append_array_element(std::string& out, std::string_view text);

}  // namespace holdfast::pg
