// The one registry of the locks counter_ext takes to coordinate its own work.
//
// Every such lock is a PostgreSQL object lock (LOCKTAG_OBJECT) of this
// database whose class id is the OID of counter_internal.lock_space, an empty
// table of the extension made only to name this lock space; the object id is
// the id the class says, the object sub-id the class's number below; but
// rollup_node_hour and rollup_node_commit (Citus), whose class id is a rollup
// table's OID on the node
// (take_in). No SQL
// function takes an object lock of a class id the caller chooses (pg_advisory_*
// take LOCKTAG_ADVISORY; DDL locks objects of the system catalogs only), so no
// role can take, hold or wait out these locks: only counter_ext's own code, in
// C++ through take() or in SQL through counter_internal.lock_take (EXECUTE
// revoked from PUBLIC, called by counter_ext's SECURITY DEFINER functions). All
// are transaction-level (the job claim included: it is one short transaction;
// the committed claim keeps other runners off, not the lock). pg_locks shows
// them as locktype 'object', classid 'counter_internal.lock_space'::regclass.
// counter_internal.lock_classes() lists the classes; doc/reference/worker.md
// has the same table.
//
// Up to 1.4 these were advisory locks (class ids 0x63650004 ... kept in
// legacy_advisory below only for counter_internal.lock_class, which 1.4's SQL
// calls until ALTER EXTENSION counter_ext UPDATE). 1.1's rule that an old and
// a new runner exclude each other during an update no longer holds: between
// installing the 1.5 library and the update (or while a backend that loaded
// the 1.4 library still runs), a 1.4 runner takes the advisory lock and a 1.5
// runner the object lock, so the two may run the same work at once; each run
// is still correct on its own (every writer locks its rows), but two runs of a
// counter may both record drift they corrected. doc/changes.md says to update
// the extension and restart the worker together.
#pragma once

#include <cstdint>
#include <cstring>

namespace ce::locks {

struct LockClass {
	const char *name;
	uint16_t number; // the lock's object sub-id
	const char *id;  // what the lock's object id is
};

inline constexpr uint16_t tracked = 1;            // one tracked counter's reconciliation
inline constexpr uint16_t partition = 2;          // maintenance of one partitioned table
inline constexpr uint16_t rollup_day = 3;         // a rollup's refresh of one UTC day
inline constexpr uint16_t rollup_hour = 4;        // a rollup's hour: writers share it, a refresh takes it alone
inline constexpr uint16_t job = 5;                // claiming one job
inline constexpr uint16_t flush = 6;              // a buffered counter's flush
inline constexpr uint16_t rollup_commit = 7;      // a trigger-mode rollup's commit-time upsert: one writer at a time
inline constexpr uint16_t rollup_node_hour = 8;   // Citus: a trigger-mode rollup's hour on one node (take_in)
inline constexpr uint16_t rollup_node_commit = 9; // Citus: a trigger-mode rollup's upsert on one node (take_in)

inline constexpr LockClass classes[] = {
    {"tracked", tracked, "counter_id"},
    {"partition", partition, "the parent table's oid"},
    {"rollup_day", rollup_day, "rollup_id * 2^20 + UTC day number mod 2^20, mod 2^32"},
    {"rollup_hour", rollup_hour, "rollup_id * 2^20 + UTC hour number mod 2^20, mod 2^32"},
    {"job", job, "job_id mod 2^32"},
    {"flush", flush,
     "counter_id (a buffered counter's flush; on Citus, -(placement id): a node's flush of a delta shard)"},
    {"rollup_commit", rollup_commit, "rollup_id (a trigger-mode rollup's upsert at its writer's commit)"},
    {"rollup_node_hour", rollup_node_hour,
     "UTC hour number mod 2^32; class id: the rollup table on this node (Citus, a trigger-mode rollup)"},
    {"rollup_node_commit", rollup_node_commit,
     "a source shard's OID; class id: the rollup table on this node (Citus, a trigger-mode rollup's upsert at a "
     "writer's commit)"},
};

// The class named 'name', or nullptr.
inline const LockClass *find(const char *name) {
	for (const LockClass &c : classes)
		if (std::strcmp(c.name, name) == 0)
			return &c;
	return nullptr;
}

// The object id of a rollup's lock on one UTC day or hour: the rollup id and
// the day or hour number (since 1970-01-01 00:00 UTC) folded into 32 bits
// (collisions only make two chunks wait for each other).
inline uint32_t rollup_id(int32_t rollup, int64_t n) {
	return static_cast<uint32_t>(static_cast<uint64_t>(rollup) * 1048576u +
	                             static_cast<uint64_t>(((n % 1048576) + 1048576) % 1048576));
}

// The OID of counter_internal.lock_space in this database, or 0 when it does
// not exist (the SQL is still 1.4's). Calls PostgreSQL: use inside pg_guard.
unsigned int space();

// Takes lock (cls, id) of this database for the current transaction: shared
// or exclusive; with 'wait' false, returns false at once when another
// transaction holds it. Raises when the lock space does not exist. Calls
// PostgreSQL: use inside pg_guard.
bool take(uint16_t cls, uint32_t id, bool shared, bool wait);

// Citus (doc/citus.md, "Trigger mode"): takes lock (cls, id) in the lock
// space of one distributed trigger-mode rollup on this node, its table's OID
// here ('table': the distributed table, or Citus's metadata copy of it on a
// worker). rollup_node_hour (id: the UTC hour number since 1970): the shard
// triggers of its source share an hour, without waiting (a writer never waits
// for a recompute: it marks the hour dirty instead), and
// counter_internal.rollup_node_hold (as the table's owner only) takes it alone
// for a recompute, waiting. rollup_node_commit (id: the OID of a shard of the
// source): a writer's upsert into the rollup's colocated shard, one writer
// at a time, held to the end of its transaction. Workers have no catalog of counter_ext: the table, which
// only its owner may name to rollup_node_hold, is what keeps one role's
// rollup apart from another's. With 'wait' false, returns false at once when
// another transaction holds it or waits for it alone. Calls PostgreSQL: use
// inside pg_guard.
bool take_in(unsigned int table, uint16_t cls, uint32_t id, bool shared, bool wait);

// The advisory-lock class ids of 1.1 to 1.4, only for 1.4's SQL until the
// update (counter_internal.lock_class). Nothing of 1.5 takes them.
struct LegacyClass {
	const char *name;
	int32_t key;
};
inline constexpr LegacyClass legacy_advisory[] = {
    {"tracked", 1667563524},     {"partition", 1667576885}, {"rollup_day", 1380928579},
    {"rollup_hour", 1380928584}, {"job", 1667590754},       {"flush", 1667563535},
};

} // namespace ce::locks
