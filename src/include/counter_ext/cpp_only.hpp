// Include first in translation units that must stay pure C++: algorithms,
// Boost and the STL, unit-testable without a server. Including a PostgreSQL
// header after this one (or before it) stops the build.
#pragma once

#ifdef PG_VERSION_NUM
#error "this file is pure C++ and must not include PostgreSQL headers"
#endif
#define COUNTER_EXT_CPP_ONLY 1
