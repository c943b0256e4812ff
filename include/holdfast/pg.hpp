/// @file
/// holdfast::pg: the PostgreSQL driver (libpq), its pool, routing to standbys and resilient
/// reads and writes. The main header of the component holdfast::pg; the parts are in
/// holdfast/pg/ (database.hpp: Database and its options; connection.hpp, lsn.hpp, ...).
#pragma once

#include "holdfast/pg/database.hpp"
