// SPI helpers shared by the C++ triggers and functions.
#pragma once

#include "counter_ext/pg.hpp"

extern "C" {
#include "executor/spi.h"
}

namespace ce {

// Prepares 'sql' and keeps the plan for the life of the backend
// (SPI_keepplan); raises on failure. Owns nothing C++: call it inside
// pg_guard, between SPI_connect and SPI_finish. Defined in src/tracked.cpp.
SPIPlanPtr prepare_kept(const char *sql, int nargs, Oid *types);

} // namespace ce
