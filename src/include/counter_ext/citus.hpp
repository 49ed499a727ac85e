// Citus (doc/citus.md): the hook that refuses create_distributed_table and
// create_reference_table of a table whose counter_ext configuration does not
// work on Citus (src/citus.cpp).
#pragma once

#include "counter_ext/spi.hpp"

extern "C" {
#include "utils/relcache.h"
}

namespace ce {

// Installs the object access hook; _PG_init calls it.
void install_citus_hook();

namespace citus {

// Where a shard trigger of counter_ext fires (src/tracked.cpp, src/rollup.cpp:
// the one lookup of a trigger's colocated state on a node without
// counter_ext's catalog).
enum class Place {
	no_citus, // Citus is not installed in this database
	shell,    // the distributed table itself (the coordinator's, or a node's metadata copy): it holds no rows
	shard,    // a shard: every table asked for has its colocated shard here
	missing,  // a shard, but some table asked for has no colocated shard on this node
};

// Inside SPI; owns nothing C++. For the table 'rel' a trigger fires on: when it
// is a shard of a hash-distributed table, the names (schema-qualified, palloc'd
// in the current context) of the shards of the distributed tables tables[0..n)
// that cover the same hash range on this node, into out[0..n).
Place colocated_shards(Relation rel, const char *const *tables, int n, char **out);

// What a backend keeps per shard trigger of counter_ext (a tracked
// counter's, a rollup's), in one bounded cache of all of them, made again
// when its table's relcache entry is invalidated.
struct ShardTrigger {
	bool valid;
	Oid relid;
	Oid owner; // the table's owner: the counter's or rollup's
	bool shell;
	MemoryContext context;
	char *state[3];      // the colocated shards of the tables asked for (shard_trigger_fill)
	bool has_anchor;     // the caller's: a tracked counter's anchor on this shard (src/tracked.cpp, shard_fold)
	Datum anchor;        // in context
	SPIPlanPtr plans[4]; // the caller's, by event
	Oid space;           // the caller's: a trigger-mode rollup's table on this node (its hour locks)
	char *sql;           // the caller's: a trigger-mode rollup's upsert into state[1], in context
	char *mark;          // the caller's: the same rows' hours marked in state[0] instead, in context
	int32 buffer;        // the caller's: a buffered tracked counter's buffer on this node (src/tracked.cpp)
	Oid key_type;        // the caller's: that counter's key type
};

// The entry of trigger tgoid on rel (zeroed when new, invalid when rel is
// another table than the one it was made for). Owns nothing C++ but the cache.
ShardTrigger *shard_trigger(Oid tgoid, Relation rel);

// Inside SPI, as the table's owner; owns nothing C++. Makes t again for
// rel: the shards of tables[0..n) (n <= 3) colocated with it
// (colocated_shards); t is valid unless the answer is no_citus or missing.
Place shard_trigger_fill(ShardTrigger *t, Relation rel, const char *const *tables, int n);

// The table a shard trigger's argument names (as to_regclass reads it), or
// InvalidOid when there is none. Owns nothing C++.
Oid relation_named(const char *name);

// The owner of relation rel (InvalidOid: none). Owns nothing C++.
Oid relation_owner(Oid rel);

// Whether relation rel exists and the current user has the rights of its
// owner: what the functions PUBLIC may execute on every node ask
// (rollup_node_hold, row_lock_skip). Wraps its PostgreSQL calls.
bool caller_has_owner_rights(Oid rel);

} // namespace citus

} // namespace ce
