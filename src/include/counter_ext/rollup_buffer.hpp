// Buffered rollups (mode 'buffered', doc/reference/rollup.md "Modes"): the
// INSERT trigger folds a statement's rows into per (rollup, key, UTC hour)
// sums in backend memory; they are added to a shared-memory table when the
// transaction commits (XACT_EVENT_PRE_COMMIT, see src/rollup_buffer.cpp for
// why) and written to the rollup table by the rollup's flush
// (counter.rollup_flush, run by its rollup_refresh job). Writers never touch
// the rollup table's rows, so they do not queue on each other.
//
// Crash: each transaction also appends one row per touched (rollup, hour) to
// counter_internal.rollup_buffer_log, tagged with the shared memory's epoch
// (ce::buffer::epoch: a new one at every start and every restart after a
// crash). A flush deletes the current epoch's rows it has written; rows of
// another epoch are hours whose sums may have been lost: the flush moves them
// to counter.rollup_dirty and the job recomputes them from the events.
#pragma once

#include "counter_ext/pg.hpp"

extern "C" {
#include "commands/trigger.h"
}

namespace ce::rollup_buffer {

// Sum columns a buffered rollup may have (rollup_create refuses more).
inline constexpr int max_sums = 8;

// GUC, shared memory request, transaction callbacks (from _PG_init, when
// preloaded).
void init();

// The INSERT statement trigger of rollup rid (src/rollup.cpp): true when the
// rollup is buffered and the statement's rows were folded (or their hours
// marked dirty); false to let the caller run the trigger/deferred path (any
// other mode; a trigger that is not on the rollup's source: the caller
// raises; no shared memory, the library not preloaded: the caller marks the
// hours dirty, as for a deferred rollup). Calls PostgreSQL; throws
// ce::PgError.
bool fire(TriggerData *td, int32 rid);

} // namespace ce::rollup_buffer
