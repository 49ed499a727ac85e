-- ---- 1.5: bounds on what a writer passes (issue 24, items 2 and 4)
-- Tracked counters: how far past the current time counter.add accepts an
-- event time (as src/sql/35_buffered.sql makes it).
ALTER TABLE counter.tracked ADD COLUMN max_future interval NOT NULL DEFAULT interval '1 day'
    CHECK (max_future >= interval '0' AND max_future <= interval '3660 days');
-- counter.track takes max_future: the old signature goes (50_code.sql makes
-- the new one).
DROP FUNCTION counter.track(text, regclass, name, name, text, text, interval, interval, integer, integer,
    bigint, bigint, interval, interval, boolean, boolean);
