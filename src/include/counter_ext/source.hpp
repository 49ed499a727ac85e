// A counter's source and the tables its row triggers fire on.
//
// A row trigger made on a partitioned table is cloned onto every partition,
// those made later (counter.partition_manage) and those attached later
// (ALTER TABLE ... ATTACH PARTITION); the clone keeps the parent's firing
// state, so a replicated counter's or rollup's row trigger (enabled for
// replicas) fires on the partition the apply worker of a subscription writes
// into. A trigger function that checks its table against the counter's
// source accepts such a partition, and no other table.
#pragma once

#include "counter_ext/pg.hpp"

extern "C" {
#include "utils/rel.h"
}

namespace ce::source {

// True when 'rel' is 'source', or a partition of it at any depth. The answer
// for a partition is kept per backend until the next relcache invalidation
// (an ATTACH or DETACH sends one). Owns nothing C++: may be called inside
// pg_guard.
bool accepts(Relation rel, Oid source);

// True while counter_ext moves rows between the partitions of a table
// (counter_internal.partition_move: out of the default partition, with
// session_replication_role = replica so that no trigger sees a delete and an
// insert). A move changes no row, so no counter counts it; but the row
// triggers of replicated counters and rollups are enabled for replicas, and
// would see it: they return at once while this is true. Set only by
// counter_internal.rows_moving (EXECUTE revoked from PUBLIC); forgotten when
// the (sub)transaction that set it ends with an error, and at transaction end.
bool moving_rows();

} // namespace ce::source
