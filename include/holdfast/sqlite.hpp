/// @file
/// holdfast::sqlite: the SQLite driver (Database) and its resilient form (ResilientDatabase),
/// without sqlite3.h. A Statement stepped by hand: holdfast/sqlite/statement.hpp.
#pragma once

#include "holdfast/sqlite/database.hpp"
#include "holdfast/sqlite/options.hpp"
#include "holdfast/sqlite/query.hpp"
#include "holdfast/sqlite/resilient.hpp"
#include "holdfast/sqlite/row.hpp"
