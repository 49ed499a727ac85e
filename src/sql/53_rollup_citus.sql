-- (1.7; after every earlier column of counter.rollups, as the update
-- appends it) Citus (doc/citus.md, "Rollups on a distributed table"): a
-- deferred rollup of a hash-distributed table grouped by its distribution
-- column. Its table and its dirty log (counter_internal.rollup_<id>_dirty)
-- are distributed colocated with the source, its triggers run on the shards
-- (src/rollup.cpp, shard_mark), and its refresh is pushed down to them
-- (51_rollup_code.sql, rollup_citus_sql).
ALTER TABLE counter.rollups ADD COLUMN distributed boolean NOT NULL DEFAULT false;
-- (1.8) Where its dirty log is: NULL, counter_internal (1.7, or an owner
-- who may not create in the source's schema); else the source's schema, as
-- counter.tracked.state_schema (counter_internal.rollup_dirty_table).
ALTER TABLE counter.rollups ADD COLUMN state_schema name;
-- (1.8) A trigger-mode rollup grouped by other columns than the
-- distribution column (doc/citus.md, "Trigger mode, grouped by other
-- columns"): its table (rollup_table) is grouped by the distribution column
-- too, colocated with the source, so that each shard adds its rows to its
-- own; readers read the view it is summed into, named after the rollup
-- (rollup_view), grouped by the rollup's columns (view_group_by). NULL otherwise.
ALTER TABLE counter.rollups ADD COLUMN rollup_view regclass;
ALTER TABLE counter.rollups ADD COLUMN view_group_by name[];
