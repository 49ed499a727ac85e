-- ---- 1.5: bounds on what a writer passes (issue 24, items 2 and 4)
-- Tracked counters: how far past the current time counter.add accepts an
-- event time (as src/sql/35_buffered.sql makes it).
ALTER TABLE counter.tracked ADD COLUMN max_future interval NOT NULL DEFAULT interval '1 day'
    CHECK (max_future >= interval '0' AND max_future <= interval '3660 days');
-- counter.track takes max_future: the old signature goes (50_code.sql makes
-- the new one).
DROP FUNCTION IF EXISTS counter.track(text, regclass, name, name, text, text, interval, interval, integer, integer,
    bigint, bigint, interval, interval, boolean, boolean);

-- Rollups: the precision of the distinct sketches, fixed at registration
-- (issue 24, item 4; as src/sql/50_rollup.sql makes it). A rollup made by
-- 1.4 takes the precision this session has (the server's default unless
-- the session set another); 62_inputs.sql rebuilds its SQL with it.
ALTER TABLE counter.rollups ADD COLUMN hll_precision integer NOT NULL DEFAULT 14
    CHECK (hll_precision BETWEEN 4 AND 18);
UPDATE counter.rollups SET hll_precision = coalesce(pg_catalog.current_setting('counter_ext.hll_default_precision', true)::integer, 14);
