// SPI helpers shared by the C++ triggers and functions.
#pragma once

#include "counter_ext/pg.hpp"

extern "C" {
#include "executor/spi.h"
}

namespace ce {

// Prepares 'sql' and keeps the plan for the life of the backend
// (SPI_keepplan); raises on failure. cursor_options: SPI_prepare_cursor's
// (CURSOR_OPT_CUSTOM_PLAN: planned at each call with its values). Owns
// nothing C++: call it inside pg_guard, between SPI_connect and
// SPI_finish. Defined in src/tracked.cpp.
SPIPlanPtr prepare_kept(const char *sql, int nargs, Oid *types, int cursor_options = 0);

} // namespace ce
