// Rollups (src/rollup.cpp): the rows a trigger-mode transaction adds to a
// rollup, kept in the backend and written to the rollup table once, at the
// transaction's commit; and the pieces every mode shares (the hour of an event,
// the dirty-hours log).
#pragma once

#include "counter_ext/pg.hpp"
#include "counter_ext/spi.hpp"

#include <string>

namespace ce::rollup {

// Writes the rows this transaction added to rollup 'rid' and has not yet
// written (a recompute of its hours in the same transaction calls this before
// it reads the events, so it never counts them twice). C++: a PostgreSQL
// error comes out as ce::PgError; call it inside a boundary (CE_FUNCTION).
void apply_pending(int32 rid);

// The UTC hour of an event time, as date_bin('1 hour', ts, '2000-01-01');
// raises 22008 for an infinite time. Owns nothing C++.
int64 hour_of(TimestampTz ts);

// Appends (rid, hour) for each of 'hours' to counter.rollup_dirty, through
// one kept plan. Owns nothing C++: call it inside SPI, as the catalog's owner.
void insert_dirty(int32 rid, const int64 *hours, int n);

// A rollup statement's plan, kept for the life of the backend, and the text
// it was made from (the stored text changes with a rule change or a rename).
struct KeptStatement {
	std::string sql;
	SPIPlanPtr plan = nullptr;
};

// Runs 'sql' (a stored statement of rollup 'rid', whose one argument is the
// rollup id) through 'slot', making its plan again when the text differs.
// C++: a PostgreSQL error comes out as ce::PgError. Inside SPI, as the role
// the statement runs for.
void run_statement(int32 rid, KeptStatement &slot, const char *sql);

} // namespace ce::rollup
