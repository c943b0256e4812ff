// The PostgreSQL panel's schema and demo club, for club_store_pg.cpp.
#pragma once

#include <cstdint>

#include "demo_data.hpp"
#include "holdfast/pg.hpp"

namespace holdfast::panel::pgschema {

// The key table of Database::once(); keys are "<user id>:<route>:<Idempotency-Key>" and
// results "<request fingerprint>:<row id>".
inline constexpr const char* kIdempotencyTable = "idempotency_keys";

// Column `col` of row `row` as an integer, or why it is not one.
Result<std::int64_t> int_at(const pg::Rows& rows, int row, int col);

// Creates the schema and inserts the demo club, unless it is there already. Runs in the
// caller's transaction, which it first makes take an advisory lock: a second panel starting
// at the same time waits, then finds the courts and inserts nothing.
Status create_club(pg::Transaction& tx, const DemoData& data);

}  // namespace holdfast::panel::pgschema
