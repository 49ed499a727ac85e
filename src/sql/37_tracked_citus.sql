-- (1.7; after every earlier column of counter.tracked, as the update
-- appends it) Citus (doc/citus.md, "Trigger-mode counters on a distributed
-- table"): a trigger-mode counter on a hash-distributed table keyed by its
-- distribution column. Its base and delta tables are distributed colocated
-- with the source, its triggers run on the shards (src/tracked.cpp,
-- shard_fold), and its reads and reconciliation read the state as
-- distributed tables (31_tracked_code.sql, tracked_citus_batch).
ALTER TABLE counter.tracked ADD COLUMN distributed boolean NOT NULL DEFAULT false;
