-- ---- buffered rollups (src/sql/52_rollup_buffered.sql): the mode and the log
ALTER TABLE counter.rollups DROP CONSTRAINT rollups_mode_check;
ALTER TABLE counter.rollups ADD CONSTRAINT rollups_mode_check CHECK (mode IN ('trigger', 'deferred', 'buffered'));

CREATE TABLE counter_internal.rollup_buffer_log (
    rollup_id  integer NOT NULL,
    hour       timestamptz NOT NULL,
    epoch      timestamptz NOT NULL
);
COMMENT ON TABLE counter_internal.rollup_buffer_log IS
    'hours of buffered rollups folded into shared memory and not yet flushed, with the shared table''s epoch';
REVOKE ALL ON counter_internal.rollup_buffer_log FROM PUBLIC;
