-- ---- counter.tracked.distributed (src/sql/37_tracked_citus.sql)
ALTER TABLE counter.tracked ADD COLUMN distributed boolean NOT NULL DEFAULT false;
