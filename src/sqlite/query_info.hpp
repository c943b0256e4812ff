// Internal: what a Database knows of one SQL text, shared by every copy of its Query (not
// installed; sqlite/query.hpp only names it).
#pragma once

#include <cstdint>
#include <string>

#include "holdfast/sqlite/query.hpp"

namespace holdfast::sqlite::detail {

// Immutable once made by DatabaseImpl::prepare().
struct QueryInfo {
  static constexpr std::uint32_t kUncached = 0xffffffffu;
  std::uint64_t owner = 0;         // the Database that judged it
  std::uint32_t slot = kUncached;  // index into every connection's statement cache
  int parameters = -1;             // how many parameters it has (-1: ask SQLite)
  AccessVerdict verdict;
  std::string sql;
};

}  // namespace holdfast::sqlite::detail
