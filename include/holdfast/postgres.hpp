/// @file
/// The same as holdfast/pg.hpp, the PostgreSQL driver's main header (an alias of it).
#pragma once

#include "holdfast/pg.hpp"
