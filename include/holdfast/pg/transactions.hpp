/// @file
/// What both PostgreSQL drivers (pg::Database and asio::pg::Client) send and judge the same
/// way about a transaction: its BEGIN, the statements a transaction function may not send,
/// and a statement's failure as the transaction's. The Database: holdfast/pg.hpp.
#pragma once

#include <cstdint>
#include <string_view>

#include "holdfast/core/status.hpp"
#include "holdfast/pg/options.hpp"

namespace holdfast::pg {

/// The BEGIN that opens a transaction at `isolation` (READ ONLY when `read_only`), as both
/// drivers send it. Static text.
[[nodiscard]] std::string_view begin_statement(Isolation isolation, bool read_only) noexcept;

/// True for a statement that ends (or starts) a transaction block: COMMIT, END, ABORT,
/// ROLLBACK (but not ROLLBACK TO SAVEPOINT), BEGIN, START TRANSACTION, PREPARE TRANSACTION.
/// A transaction function's statements may not: the driver begins and ends the transaction.
[[nodiscard]] bool ends_transaction(std::string_view sql,
                                    bool standard_conforming_strings = true) noexcept;

/// A statement's failure inside a transaction, as the transaction's: the server rolls the
/// whole transaction back, so nothing of it was applied and only a re-run of all of it can
/// help (a retryable fault's scope becomes RetryScope::kTransaction; its state
/// TxnState::kRolledBack). A status that already has a transaction state is returned as it
/// is. Both drivers' transactions use it (pg::Database's and asio::pg::Client's).
[[nodiscard]] Status in_transaction(Status s);

}  // namespace holdfast::pg
