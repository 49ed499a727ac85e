-- ---- counter.rollups.distributed (src/sql/53_rollup_citus.sql)
ALTER TABLE counter.rollups ADD COLUMN distributed boolean NOT NULL DEFAULT false;
-- gone: rollup_create asks counter_internal.citus_rollup_check instead
DROP FUNCTION IF EXISTS counter_internal.citus_refuse(regclass, text);
