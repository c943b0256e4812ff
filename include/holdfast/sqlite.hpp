/// @file
/// holdfast::sqlite: the SQLite driver and its resilient read/write paths.
///
/// A thin RAII layer over the sqlite3 C API (no sqlite3.h in these headers):
/// @code
///   sqlite/options.hpp    Options: path, WAL, synchronous, foreign_keys, busy_timeout,
///                         read connections, statement cache
///   sqlite/statement.hpp  Statement (bind by index or name, step, reset) and Row (typed,
///                         checked column access)
///   sqlite/query.hpp      Query (prepared once, classified read or write by the engine),
///                         the query helpers execute / query_one / query / for_each
///   sqlite/database.hpp   Database (read connections with PRAGMA query_only=1, one writer
///                         served first come first served) and Transaction (BEGIN
///                         IMMEDIATE, rolled back when destroyed)
///   sqlite/resilient.hpp  ResilientDatabase: the same API, reads retried within the
///                         request's window, writes never doubled
/// @endcode
///
/// Every error is a Status built by holdfast::sqlite_status(): it carries the SQLite
/// extended result code and the Fault that decides whether and how it may be retried.
#pragma once

#include "holdfast/sqlite/database.hpp"
#include "holdfast/sqlite/options.hpp"
#include "holdfast/sqlite/query.hpp"
#include "holdfast/sqlite/resilient.hpp"
#include "holdfast/sqlite/statement.hpp"
