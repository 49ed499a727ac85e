-- ---- where the state of a distributed counter or rollup is (37_tracked_citus.sql,
-- 53_rollup_citus.sql): the existing ones stay in counter_internal (NULL);
-- untrack and track again (drop and make again) to move it beside the source.
ALTER TABLE counter.tracked ADD COLUMN state_schema name;
ALTER TABLE counter.rollups ADD COLUMN state_schema name;
