// The PostgreSQL headers, as C, for the PostgreSQL-facing translation units.
// postgres.h comes first, as PostgreSQL requires.
#pragma once

#ifdef COUNTER_EXT_CPP_ONLY
#error "a pure C++ file (cpp_only.hpp) must not include PostgreSQL headers"
#endif

extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/elog.h"
#include "utils/memutils.h"
}

// Every PostgreSQL-facing file checks the major, and may use ce::compat.
#include "counter_ext/compat.hpp"
