/// @file
/// holdfast::sqlite: the SQLite driver and its resilient read/write paths.
///
/// Options (sqlite/options.hpp), Statement and Row (sqlite/statement.hpp), Query and the
/// query helpers (sqlite/query.hpp), Database and Transaction (sqlite/database.hpp) and
/// ResilientDatabase, the same API retried (sqlite/resilient.hpp); no sqlite3.h. Every error
/// is a Status carrying the SQLite extended result code and its Fault.
#pragma once

#include "holdfast/sqlite/database.hpp"
#include "holdfast/sqlite/options.hpp"
#include "holdfast/sqlite/query.hpp"
#include "holdfast/sqlite/resilient.hpp"
#include "holdfast/sqlite/statement.hpp"
