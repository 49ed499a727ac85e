-- ---- one owner check (issue 22): counter_internal.require_owner replaces
-- the three copies of tracked counters, partitions and rollups.
DROP FUNCTION IF EXISTS counter_internal.tracked_require_owner(counter.tracked, text);
DROP FUNCTION IF EXISTS counter_internal.partition_require_owner(regclass);
DROP FUNCTION IF EXISTS counter_internal.rollup_require_owner(counter.rollups, text, text);
