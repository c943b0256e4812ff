/// @file
/// holdfast::pg::SqlKind: which path a SQL text may run on, as classify_sql()
/// (holdfast/pg/sql.hpp) decides it and a prepared pg::Statement reports it.
#pragma once

#include <cstdint>
#include <string_view>

namespace holdfast::pg {

/// Which path a SQL text may run on.
enum class SqlKind : std::uint8_t {
  kRead,     ///< may run on the read path (and be retried there)
  kWrite,    ///< must run on the write path
  kInvalid,  ///< cannot run: empty, unterminated literal or comment, more than one statement
};

/// "read", "write", "invalid".
[[nodiscard]] std::string_view to_string(SqlKind kind) noexcept;

}  // namespace holdfast::pg
