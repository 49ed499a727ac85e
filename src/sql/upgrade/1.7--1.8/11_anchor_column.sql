-- ---- trigger-mode counters on Citus keyed by another column than the
-- distribution column (37_tracked_citus.sql): none before 1.8.
ALTER TABLE counter.tracked ADD COLUMN anchor_column name;
