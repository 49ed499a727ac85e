-- Partition maintenance (issue 24, item 6): a step reports the slots it
-- skipped (partition_step gains OUT skipped), a run records them
-- (partition_record gains skipped), and partition_status shows them with an
-- alert column. Their return types or signatures change: dropped here, made
-- again by the code (50_code.sql).
DROP VIEW IF EXISTS counter.partition_status;
DROP FUNCTION IF EXISTS counter.partition_state();
DROP FUNCTION IF EXISTS counter_internal.partition_step(regclass, timestamptz);
DROP FUNCTION IF EXISTS counter_internal.partition_record(regclass, text, text, bigint, bigint, bigint, bigint, jsonb);

-- Tracked counters (issue 24, item 10): a counter registered on a table with
-- rows backfills them (src/sql/30_tracked.sql). Counters registered
-- before the update have had their first run: nothing pending.
ALTER TABLE counter.tracked ADD COLUMN backfill_left bigint NOT NULL DEFAULT 0;
