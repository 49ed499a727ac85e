-- (1.7; after every earlier column of counter.tracked, as the update
-- appends it) Citus (doc/citus.md, "Trigger-mode counters on a distributed
-- table"): a counter on a hash-distributed table keyed by its distribution
-- column, in trigger mode (1.7) or application mode, not buffered (1.8).
-- Its base and delta tables are distributed colocated with the source, its
-- triggers run on the shards (src/tracked.cpp, shard_fold; application
-- mode: its inbox's, shard_add), and its reads and reconciliation read the
-- state as distributed tables (31_tracked_code.sql, tracked_citus_batch).
ALTER TABLE counter.tracked ADD COLUMN distributed boolean NOT NULL DEFAULT false;
-- (1.8) Where that state is: NULL, counter_internal (1.7, or an owner who
-- may not create in the source's schema); else the source's schema, where
-- the owner may create, so that Citus, which makes a moved or split shard's
-- table again as the table's owner, can move it with the source's shards
-- (doc/citus.md, "Shard moves, splits and rebalancing";
-- counter_internal.citus_state_schema, tracked_table).
ALTER TABLE counter.tracked ADD COLUMN state_schema name;
-- (1.8) A trigger-mode counter on a hash-distributed table keyed by another
-- column than its distribution column: that column's name (NULL for every
-- other counter). Its state is distributed colocated with the source as
-- above, each row of it anchored to a value of the distribution column that
-- lives on the shard that counted it (doc/citus.md, "Keyed by another
-- column"; counter_internal.tracked_anchored_batch, src/tracked.cpp).
ALTER TABLE counter.tracked ADD COLUMN anchor_column name;
-- (1.8) A buffered trigger-mode counter on a hash-distributed table keyed by
-- its distribution column (doc/citus.md, "Buffered"):
-- one row per shard of its delta table, the placement that held it and when
-- the shared table of that placement's node was made (microseconds since
-- 1970), as the last flush saw them. A flush that finds another placement
-- (a move, a split) or another shared table (a restart) schedules the repair
-- (counter_internal.tracked_citus_flush).
CREATE TABLE counter_internal.tracked_shard_flushes (
    counter_id integer NOT NULL REFERENCES counter.tracked ON DELETE CASCADE,
    shardid    bigint NOT NULL,
    placement  bigint NOT NULL,
    epoch      bigint,
    PRIMARY KEY (counter_id, shardid)
);
COMMENT ON TABLE counter_internal.tracked_shard_flushes IS
    'Citus: where each shard of a buffered counter was at its last flush (restart and move detection)';
REVOKE ALL ON counter_internal.tracked_shard_flushes FROM PUBLIC;
