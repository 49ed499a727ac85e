// Trigger-mode rollups: the rows a transaction adds to a rollup, kept in the
// backend and written to the rollup table once, at the transaction's commit
// (src/rollup.cpp).
#pragma once

#include "counter_ext/pg.hpp"

namespace ce::rollup {

// Writes the rows this transaction added to rollup 'rid' and has not yet
// written (a recompute of its hours in the same transaction calls this before
// it reads the events, so it never counts them twice). C++: a PostgreSQL
// error comes out as ce::PgError; call it inside a boundary (CE_FUNCTION).
void apply_pending(int32 rid);

} // namespace ce::rollup
