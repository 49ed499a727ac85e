// Reads of a tracked counter without a query (doc/reference/tracked.md,
// "How a read works"): a backend keeps the table part of a key's value
// (base + deltas, as a read under some snapshot S0 found it) and gives it
// again, without reading the tables, to a later read under a snapshot S1 when
// no writer of the counter's state tables can make S1 see anything S0 did not:
//
//   epoch     every writer of a counter's base or delta table bumps its
//             counter's epoch when it starts writing (a BEFORE statement
//             trigger, ENABLE ALWAYS) and again when its transaction has
//             ended (after it is visible). Logical replication's apply fires
//             no statement trigger: a background worker's transaction that
//             wrote anything bumps the global epoch before it commits;
//   inflight  writers that started and have not ended;
//   bound     an xid above every xid of every writer that has ended (the
//             next xid when it ended; only grows).
//
// A value read under S0 is kept when, after the read, the epoch is what it
// was before the read, no writer is in flight, and bound <= S0's xmin (every
// writer that ever ended is finished for S0, so S0 sees exactly the committed
// ones). It is given to S1 while the epoch is still that, no writer is in
// flight and bound <= S1's xmin: then no writer started since the read (the
// epoch would differ), one that starts later is not visible to S1 (taken
// before), and every earlier one is finished for S1 as for S0. A writer's own
// reads miss (it is in flight). Counter ids share slots (id modulo slots):
// a shared slot only costs misses. A global slot, bumped by everything that
// changes counter.tracked (track, untrack, ALTER), is checked by every read.
//
// A prepared writer ends (for this) at PREPARE TRANSACTION: its xids are
// below the bound, and every snapshot's xmin stays at or below them until
// COMMIT PREPARED, so nothing is kept or given meanwhile. Shared memory
// starts empty (a server start, a crash restart, a promotion): the global
// bound starts at the next xid at the first read, above every transaction
// of before (prepared ones that wrote among them).
//
// Off (every read reads the tables): without shared_preload_libraries, in
// recovery (a standby replays writes without triggers), with
// counter_ext.read_cache off, for snapshots other than MVCC ones, and for a
// counter whose tables lack the triggers or have them disabled (checked when
// the tables are read; a relcache invalidation of either table, taken in
// before every read, checks again).
#pragma once

#include "counter_ext/buffer.hpp"
#include "counter_ext/pg.hpp"

extern "C" {
#include "utils/snapshot.h"
}

namespace ce::read_cache {

// From _PG_init, when preloading: shared memory and the end-of-transaction
// callback.
void init();

// This transaction writes counter 'counter''s state tables (global: any
// counter's catalog row). Bumps the epoch and counts the writer in flight
// until the transaction ends (once per transaction and slot). Never raises.
constexpr int32 global = -1;
void note_write(int32 counter);

// The shared state of a counter's slot and the global one, read before a
// read of its tables.
struct Stamp {
	uint64 epoch;
	uint64 global;
	bool usable; // the cache is on
};
Stamp stamp(int32 counter);

// The table part of a key's value kept from a read under an earlier
// snapshot, valid for 'snapshot' (see above); false when there is none.
// 'fence' (a FullTransactionId's value) is one more bound the snapshot's
// xmin must have passed: the next xid when the counter's triggers were last
// found in place (src/tracked.cpp, DirectRead).
bool lookup(int32 counter, const ce::buffer::Image &image, Snapshot snapshot, uint64 fence, int64 *value);

// Keeps 'value', read under 'snapshot' after 'before' was taken, if nothing
// changed meanwhile and every ended writer (and 'fence') is finished for
// 'snapshot'.
void store(int32 counter, const ce::buffer::Image &image, const Stamp &before, Snapshot snapshot, uint64 fence,
           int64 value);

// Forgets every kept value (the catalog changed).
void forget();

// Counts of this backend's lookups (hits, misses): counter_internal.read_cache_stats.
struct Stats {
	uint64 hits;
	uint64 misses;
};
Stats stats();

} // namespace ce::read_cache
