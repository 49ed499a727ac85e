-- ---- buffered counters: the tables of 1.2 (its src/sql/35_buffered.sql), before
-- the tracked counters of 1.1 are rebuilt (counter_internal.tracked_build reads t.buffered).
-- Buffered counters (doc/reference/tracked.md, "Buffered counters";
-- src/buffer.cpp): a tracked counter registered with buffered => true keeps
-- the adds of committed transactions in a shared-memory table and writes
-- them to its delta table when it is flushed (counter.flush, the 'flush'
-- job). The tables; the functions are in 36_buffered_code.sql.

ALTER TABLE counter.tracked ADD COLUMN buffered boolean NOT NULL DEFAULT false;

-- One row per buffered counter: the shared table its last flush saw (epoch:
-- when that table was made; another one means a restart, which may have
-- lost published adds, and schedules a repair), and its flushes.
CREATE TABLE counter_internal.tracked_flushes (
    counter_id          integer PRIMARY KEY REFERENCES counter.tracked ON DELETE CASCADE,
    epoch               timestamptz,
    flushed_at          timestamptz,
    flushes             bigint NOT NULL DEFAULT 0,
    entries_flushed     bigint NOT NULL DEFAULT 0,
    repairs             bigint NOT NULL DEFAULT 0,
    repair_requested_at timestamptz
);
COMMENT ON TABLE counter_internal.tracked_flushes IS
    'flushes of buffered counters and the shared table each last saw (restart detection)';
REVOKE ALL ON counter_internal.tracked_flushes FROM PUBLIC;
