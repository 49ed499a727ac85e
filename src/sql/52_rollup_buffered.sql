-- Buffered rollups (mode 'buffered', doc/reference/rollup.md "Modes";
-- src/rollup_buffer.cpp): the INSERT trigger folds a transaction's rows into
-- per (rollup, key, UTC hour) sums in shared memory at commit, and the
-- rollup's job (its flush, counter.rollup_flush) writes them to the rollup
-- table. The tables; the functions are in 51_rollup_code.sql.

ALTER TABLE counter.rollups DROP CONSTRAINT rollups_mode_check;
ALTER TABLE counter.rollups ADD CONSTRAINT rollups_mode_check CHECK (mode IN ('trigger', 'deferred', 'buffered'));

-- One row per (rollup, UTC hour) a transaction folded into the shared table,
-- appended by the trigger in that transaction, with the shared table's epoch
-- (counter_internal.rollup_buffer_epoch(): a new one at every start and every
-- restart after a crash). No key and no index on purpose: writers never wait
-- on each other. A flush deletes the rows of the current epoch it can see
-- (their sums are in what it writes); rows of another epoch are hours whose
-- sums a restart may have lost: the flush marks them dirty (counter.rollup_dirty)
-- and the job recomputes them from the events. Nobody but counter_ext's code
-- reads or writes it.
CREATE TABLE counter_internal.rollup_buffer_log (
    rollup_id  integer NOT NULL,
    hour       timestamptz NOT NULL,
    epoch      timestamptz NOT NULL
);
COMMENT ON TABLE counter_internal.rollup_buffer_log IS
    'hours of buffered rollups folded into shared memory and not yet flushed, with the shared table''s epoch';
REVOKE ALL ON counter_internal.rollup_buffer_log FROM PUBLIC;
