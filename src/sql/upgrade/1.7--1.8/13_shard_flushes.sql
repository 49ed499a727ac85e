-- ---- buffered trigger-mode counters on Citus (37_tracked_citus.sql): none before 1.8.
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
