// Driver internals shared by the files of src/pg (not installed).
#pragma once

#include <span>
#include <string_view>

#include "holdfast/postgres_connection.hpp"

namespace holdfast::pg::detail {

struct ConnectionAccess {
  // Connection::query() without the one-statement check, for callers that classified the
  // SQL already (the Database) and for our own fixed statements.
  static Result<Rows> query_unchecked(Connection& c, std::string_view sql,
                                      std::span<const Param> params);
};

// True for a statement that ends (or starts) a transaction block: COMMIT, END, ABORT,
// ROLLBACK (but not ROLLBACK TO SAVEPOINT), BEGIN, START TRANSACTION, PREPARE TRANSACTION.
bool ends_transaction(std::string_view sql, bool standard_conforming_strings) noexcept;

}  // namespace holdfast::pg::detail
