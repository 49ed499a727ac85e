-- Buffered counters: the functions (the tables are in 35_buffered.sql).
-- This piece holds code only, so the update from 1.1 includes it as it is.

-- When the shared table of buffered counters was made (NULL: the library is
-- not preloaded, nothing is buffered).
CREATE OR REPLACE FUNCTION counter_internal.tracked_buffer_epoch()
RETURNS timestamptz
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_tracked_buffer_epoch';

-- The keys among 'keys' that reconciliation up to w must leave alone (busy):
-- an add not yet published, an amount published and not flushed, or one a
-- flush wrote that the statement's snapshot does not see, in a bucket < w.
-- Called by the batch function of a buffered counter, as its owner.
CREATE OR REPLACE FUNCTION counter_internal.tracked_buffer_busy(counter_id integer, w timestamptz, keys anyarray)
RETURNS anyarray
LANGUAGE c STABLE STRICT
AS 'MODULE_PATHNAME', 'counter_tracked_buffer_busy';

-- Every key of a buffered counter with what its buffer adds to the table's
-- value (sample: any value of the key type, e.g. NULL::bigint).
CREATE OR REPLACE FUNCTION counter_internal.tracked_buffered(counter_id integer, sample anyelement)
RETURNS TABLE (key anyelement, amount bigint)
LANGUAGE c STABLE
AS 'MODULE_PATHNAME', 'counter_tracked_buffered';

-- counter.untrack: what is published for the counter is dropped.
CREATE OR REPLACE FUNCTION counter_internal.tracked_buffer_forget(counter_id integer)
RETURNS bigint
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'counter_tracked_buffer_forget';

-- Writes what is published for a buffered counter (NULL: for every buffered
-- counter of this database the caller may act for) to its delta table, as
-- the counter's owner, in the caller's transaction; the shared table lets
-- go of it when that transaction commits. Returns the entries written (0
-- when another transaction is flushing the counter right now). Needs the
-- privileges of the counter's owner.
CREATE OR REPLACE FUNCTION counter.flush(name text DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_flush';
COMMENT ON FUNCTION counter.flush(text) IS
    'writes the published, not yet flushed adds of buffered counters to their delta tables';

-- The step function of kind 'flush' (src/spine.cpp; one job per buffered
-- counter, run_every = counter_ext.flush_interval when the counter was
-- registered): one step, the flush of one buffered counter, for the caller
-- (counter.flush checks it); rows = entries written.
CREATE OR REPLACE FUNCTION counter_internal.flush_run_step(target text, args jsonb, state jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN pg_catalog.jsonb_build_object('finished', true, 'rows', counter.flush(target));
END
$fn$;

-- One row per buffered counter the caller may act for.
CREATE OR REPLACE FUNCTION counter.buffer_status()
RETURNS TABLE (counter text, preloaded boolean, entries bigint, pending bigint, in_flight bigint, pinned bigint,
               flushed_at timestamptz, flushes bigint, repairs bigint, repair_requested_at timestamptz,
               overflows bigint)
LANGUAGE c STABLE
AS 'MODULE_PATHNAME', 'counter_buffer_status';

-- For a member of pg_monitor: per owner whose privileges the caller does not
-- have, the sums of buffer_status over that owner's buffered counters, no
-- name (counter.metrics, doc/monitoring.md). Nothing for other callers.
CREATE OR REPLACE FUNCTION counter.buffer_totals()
RETURNS TABLE (owner regrole, counters bigint, entries bigint, pending bigint, in_flight bigint, overflows bigint)
LANGUAGE c STABLE
AS 'MODULE_PATHNAME', 'counter_buffer_totals';
COMMENT ON FUNCTION counter.buffer_totals() IS
    'for pg_monitor members: buffered counters of the owners the caller does not belong to, summed per owner';

-- The owners' shares of the shared table in this database (1.8): how full
-- each is against the limits every share has, its adds written directly and
-- its early flushes; the shares of the owners whose privileges the caller
-- has, every share to a member of pg_monitor.
CREATE OR REPLACE FUNCTION counter.buffer_shares()
RETURNS TABLE (owner regrole, entries bigint, reserve bigint, cap bigint, pressed_from bigint, overflows bigint,
               early_flushes bigint)
LANGUAGE c STABLE
AS 'MODULE_PATHNAME', 'counter_buffer_shares';
COMMENT ON FUNCTION counter.buffer_shares() IS
    'the shares of the shared table of buffered counters in this database: entries held, limits, adds written '
    'directly, early flushes (the caller''s owners; every share for pg_monitor members)';

CREATE OR REPLACE VIEW counter.buffered AS SELECT * FROM counter.buffer_status();
COMMENT ON VIEW counter.buffered IS
    'buffered counters: whether the library is preloaded, what the shared table holds, flushes, repairs';
GRANT SELECT ON counter.buffered TO PUBLIC;
