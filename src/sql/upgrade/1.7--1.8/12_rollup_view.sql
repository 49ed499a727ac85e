-- ---- a trigger-mode rollup on Citus grouped by other columns than the
-- distribution column: its view (src/sql/53_rollup_citus.sql); none before 1.8.
ALTER TABLE counter.rollups ADD COLUMN rollup_view regclass;
ALTER TABLE counter.rollups ADD COLUMN view_group_by name[];
