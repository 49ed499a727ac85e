// Citus (doc/citus.md): the hook that refuses create_distributed_table and
// create_reference_table of a table whose counter_ext configuration does not
// work on Citus (src/citus.cpp).
#pragma once

struct RelationData;

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
Place colocated_shards(RelationData *rel, const char *const *tables, int n, char **out);

} // namespace citus

} // namespace ce
