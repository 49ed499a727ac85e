-- ---- 1.3: rollups on a logical-replication subscriber (replicated => true)
ALTER TABLE counter.rollups ADD COLUMN replicated boolean NOT NULL DEFAULT false;
DROP FUNCTION IF EXISTS counter.rollup_create(text, regclass, name, name[], name[], text, name[], text, interval, interval);
