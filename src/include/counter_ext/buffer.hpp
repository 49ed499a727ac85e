// Buffered counters (doc/reference/tracked.md, "Buffered counters"): adds
// of a transaction accumulate in backend memory, are published into a
// shared-memory table when the transaction commits, and are written to the
// counter's delta table by a flush (counter.flush, the 'flush' job).
//
// The shared table is a partitioned dynahash keyed by (database, counter
// id, key image); each entry holds a few event-time bucket slots. A slot
// carries:
//   pins      transactions that added to it and have not ended (they will
//             publish, or not): reconciliation treats such a key as busy;
//   pending   published amounts no flush has claimed (atomic), with the
//             number of publications in them: amounts cancel (+1 and -1 of
//             two transactions), and reconciliation must still see that
//             something was published;
//   inflight  what one flush claimed (with its transaction id): it returns
//             to pending if that flush's (sub)transaction aborts, and moves
//             to 'written' when it commits;
//   written   amounts a committed flush wrote, kept (with the flush's
//             transaction id) until every snapshot sees that transaction, so
//             that a read whose snapshot does not yet see the flush still
//             counts them from here.
// A slot is freed, and an entry removed, only when all of that is zero.
// Pins, pending amounts and publication counts are spread over 8 lanes of
// the entry, one cache line each, and a backend writes only its stripe's
// lane (process number modulo 8): the adders of one hot key do not all
// write one line. Whatever reads them sums the lanes.
//
// Shares: every entry counts against the share of (its database, the
// owner of its counter). Each share has a reserve no one else can take (a
// quarter of the table split over 128 shares) and takes at most a quarter
// of the rest, so an owner who fills its share, or whose entries are never
// flushed, falls back to the direct path alone. The share lock (taken
// before a partition lock, never while one is held) assigns shares; counts
// move by atomics, and a share with entries is never given to another owner.
//
// Lock order: partition locks in ascending order, then stripe locks in
// ascending order; nothing else is taken while one is held. An adder of a
// key its backend found before (a per-backend cache of entries, checked by
// the entry's gen) holds only its stripe's lock, shared; other adds take one
// partition lock shared (exclusive to make an entry or a slot), publishing is
// lock-free (atomics), a flush walks the table with every partition lock
// shared and then claims one partition at a time, its lock exclusive (and
// every stripe lock under it, to free slots and remove entries), and giving
// a used slot to another bucket takes every stripe lock under the
// partition's.
#pragma once

#include "counter_ext/pg.hpp"

extern "C" {
#include "utils/snapshot.h"
}

#include <cstdint>
#include <vector>

namespace ce::buffer {

// Longest key image that is buffered; longer keys take the unbuffered path.
inline constexpr int max_key_bytes = 64;

// Bucket slots per key: a key with adds in more buckets at once takes the
// unbuffered path for the others.
inline constexpr int bucket_slots = 4;

// The binary image of a key: the datum of a by-value type, the bytes of a
// fixed-length one, the data of a varlena (no header, never compressed), a
// cstring with its NUL.
struct Image {
	uint16 len;
	char bytes[max_key_bytes];
};

// False when the key's image is longer than max_key_bytes. Owns nothing:
// may detoast (palloc in the current context).
bool image_of(Datum key, int16 typlen, bool byval, Image *out);

// The key of an image, palloc'd in the current context for by-reference
// types. Owns nothing.
Datum datum_of(const Image &image, int16 typlen, bool byval);

// a + b held within [-INT64_MAX, INT64_MAX] instead of overflowing: every
// sum of amounts (shared slots, reads) saturates, and a key's value is read
// within those bounds (doc/reference/tracked.md, "Bounds on what a writer
// passes"); reconciliation repairs a saturated key from the rows.
inline int64 saturating_add(int64 a, int64 b) {
	int64 r;
	if (__builtin_add_overflow(a, b, &r))
		return b > 0 ? PG_INT64_MAX : -PG_INT64_MAX;
	return r < -PG_INT64_MAX ? -PG_INT64_MAX : r;
}

// Largest |amount| one transaction buffers for a (counter, key, bucket):
// a larger add is written directly (where an overflow of the delta row is
// refused with 22003), so that published amounts stay far from overflow.
inline constexpr int64 max_buffered_amount = INT64CONST(1) << 40;

// One (key, bucket) amount, as a flush or a read hands it out.
struct Amount {
	Image key;
	int64 bucket;
	int64 amount;
};

// Writes amounts of a counter straight to its delta table (the unbuffered
// path), as the counter's owner: set by tracked.cpp, used for PREPARE
// TRANSACTION. Throws on failure.
using DirectWriter = void (*)(int32 counter, const std::vector<Amount> &amounts);
void set_direct_writer(DirectWriter writer);

// GUCs, shared memory request, transaction callbacks (from _PG_init).
void init();

// counter_ext.flush_interval, in milliseconds.
extern int flush_interval_ms;
// counter_ext.buffer_entries (shared table size).
extern int buffer_entries;

// True when the shared table exists (the library was preloaded).
bool available();

// When the shared table was made (at every postmaster start and every
// restart after a crash): a flush that finds another one recorded knows
// that published adds may have been lost.
TimestampTz epoch();

// Adds delta to (counter, key, bucket) in this transaction's memory; it is
// published when the transaction commits. A new key takes an entry from the
// share of (this database, owner: the counter's owner). False when it
// cannot be buffered (no shared table, the owner's share is used up, the
// key's bucket slots are full, a parallel worker): the caller writes the
// delta itself. May throw std::bad_alloc (nothing is changed then).
bool add(int32 counter, Oid owner, const Image &key, int64 bucket, int64 delta);

// What a read adds to the table's value of (counter, key): everything
// published that a table read with 'snapshot' does not see.
int64 amount(int32 counter, const Image &key, Snapshot snapshot);

// Every (key, bucket) of a counter with what a read with 'snapshot' adds to
// the table (zero amounts left out).
std::vector<Amount> amounts(int32 counter, Snapshot snapshot);

// Whether reconciliation must leave the key alone (busy): a slot with a
// bucket before 'before' has an add of a transaction that has not ended, a
// published amount, or an amount a flush wrote that 'snapshot' does not see.
bool busy(int32 counter, const Image &key, int64 before, Snapshot snapshot);

// Claims everything published for the counter in this database for a flush
// by the current transaction: returns the amounts to write. If the
// (sub)transaction aborts they return to pending; once it commits they are
// gone from the table (kept as 'written' for older snapshots). At most
// 'limit' entries.
std::vector<Amount> claim(int32 counter, size_t limit);

// Drops this transaction's not yet published adds of a counter (TRUNCATE
// of its source).
void drop_local(int32 counter);

// Counts of a counter's entries, for counter.buffer_status.
struct Stats {
	int64 entries;
	int64 pending;
	int64 in_flight;
	int64 pinned;
};
Stats stats(int32 counter);

// The ids below 0 (buffers of Citus placements, src/tracked.cpp) that have
// entries in this database counting against the share of 'owner', each
// once. May throw std::bad_alloc (before any lock is taken).
std::vector<int32> negative_ids(Oid owner);

// Whether a transaction that found the share of (this database, 'owner')
// pressed (half its cap or more taken, or full) asked, at its commit, for the
// owner's flush jobs to run now, since the last call; clears the ask. The
// owner's job worker calls it before it reads its due jobs.
bool take_flush_ask(Oid owner);

// The shares of this database (counter.buffer_shares, and the overflows
// of counter.buffer_status): the owner, the entries it holds, its adds that
// found no room and took the unbuffered path, and the asks for early flushes
// its job worker took (take_flush_ask), since the share was given to it;
// and the limits every share has.
struct ShareStats {
	Oid owner;
	int64 entries;
	int64 overflows;
	int64 early_flushes;
};
std::vector<ShareStats> shares();
struct ShareLimits {
	int64 reserve; // entries a share has for itself
	int64 cap;     // most entries one share holds (while the common room has them)
	int64 mark;    // from this many on a share is pressed (its flush jobs run early)
};
ShareLimits share_limits();

} // namespace ce::buffer
