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

-- Citus (1.8; doc/citus.md, "Buffered"): a buffered
-- trigger-mode counter of a hash-distributed table buffers on each node, per
-- placement of its delta shards there (src/tracked.cpp). PUBLIC may execute
-- these five on every node (99_internal.sql): each acts only on a table
-- whose owner's rights its caller has.
-- On this node: writes what its buffers hold for the placements here of the
-- shards of the delta table named 'delta' into those shards, as the owner,
-- in the caller's transaction; answers {"epoch": when this node's shared
-- table was made, "shards": [[shard id, placement id, entries], ...]}.
-- 'anchors': the anchors of a counter keyed by another column than the
-- distribution column (NULL for none), whose delta rows a shard's flush
-- anchors to the least anchor of the colocated anchors shard.
CREATE OR REPLACE FUNCTION counter_internal.tracked_node_flush(delta text, anchors text DEFAULT NULL)
RETURNS text
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_tracked_node_flush';

-- What this node's buffer adds to the value of 'key' of the counter whose
-- distributed delta table is 'delta' (0 when the key's shard is elsewhere):
-- counter.value's query, which Citus routes to the node of the key's shard,
-- adds it there.
CREATE OR REPLACE FUNCTION counter_internal.tracked_shard_pending(delta regclass, key anyelement)
RETURNS bigint
LANGUAGE c STABLE PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'counter_tracked_shard_pending';

-- Keyed by another column than the distribution column (anchored): what
-- this node's buffer of the delta shard that holds 'anchor' adds to the
-- value of 'key', when 'anchor' is the least anchor of its anchors shard
-- (0 otherwise, and when that shard is elsewhere). counter.value's query
-- calls it for each anchor of each shard, where Citus sends the query, and
-- so adds each shard's buffered amount once.
CREATE OR REPLACE FUNCTION counter_internal.tracked_anchor_pending(delta regclass, anchors regclass, anchor "any",
    key anyelement)
RETURNS bigint
LANGUAGE c STABLE PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'counter_tracked_anchor_pending';

-- The same for every key the buffer holds (counter.tracked_values); the
-- key's type is key_type's (a NULL of that type).
CREATE OR REPLACE FUNCTION counter_internal.tracked_anchor_pending_rows(delta regclass, anchors regclass,
    anchor "any", key_type anyelement)
RETURNS TABLE (key anyelement, amount bigint)
LANGUAGE c STABLE PARALLEL RESTRICTED ROWS 100
AS 'MODULE_PATHNAME', 'counter_tracked_anchor_pending_rows';

-- The keys among 'keys' that a reconciliation up to w of the delta shard
-- 'shard' must leave alone because of this node's buffer (the shard's
-- compare-and-repair statement calls it with its snapshot).
CREATE OR REPLACE FUNCTION counter_internal.tracked_shard_busy(shard regclass, w timestamptz, keys anyarray)
RETURNS anyarray
LANGUAGE c STABLE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'counter_tracked_shard_busy';

-- The flush of such a counter (src/tracked.cpp, flush_counter): every node
-- writes what it holds for the counter's shards there
-- (tracked_node_flush, run by run_command_on_all_nodes as the owner, each
-- node in a transaction of its own: a transaction writing two nodes is
-- prepared, and a flush's claim is not) and answers where each shard is and
-- when its shared table was made. A shard on a placement, or on a node with
-- a shared table, that the last flush did not see (a move, a split, a
-- restart: what was published there and not flushed is gone, or stays on a
-- node that no longer holds the shard) schedules the repair: the counter's
-- next reconciliation checks every key (full_pending), now. 'initial'
-- (counter.track, before its tables are committed: the nodes cannot see
-- them yet): records each shard's placement from this node's metadata and
-- its node's shared table, nothing else. Returns the entries written. As
-- the catalog's owner.
CREATE OR REPLACE FUNCTION counter_internal.tracked_citus_flush(t counter.tracked, initial boolean)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    delta text := counter_internal.tracked_table(t, 'delta');
    r record;
    node jsonb;
    s jsonb;
    epochs jsonb := '{}';
    entries bigint := 0;
    moved bigint[] := '{}';
    seen bigint[] := '{}';
    old record;
BEGIN
    FOR r IN SELECT x.nodeid, x.success, x.result FROM counter_internal.exec_as_owner(t.owner,
                 'SELECT r.nodeid, r.success, r.result FROM pg_catalog.run_command_on_all_nodes($1) r',
                 pg_catalog.format('SELECT counter_internal.tracked_node_flush(%L, %L)', delta,
                                   CASE WHEN t.anchor_column IS NOT NULL
                                        THEN counter_internal.tracked_table(t, 'anchor') END))
                 AS x(nodeid integer, success boolean, result text) LOOP
        IF NOT r.success THEN
            RAISE EXCEPTION 'flushing buffered counter "%" on node % failed: %', t.name, r.nodeid, r.result
                USING ERRCODE = 'connection_failure',
                      HINT = 'Its flush job tries again at its next run; what the node holds stays there until then.';
        END IF;
        node := r.result::jsonb;
        epochs := epochs OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(r.nodeid::text, node -> 'epoch');
        FOR s IN SELECT e.v FROM pg_catalog.jsonb_array_elements(node -> 'shards') AS e(v) LOOP
            entries := entries OPERATOR(pg_catalog.+) (s ->> 2)::bigint;
            seen := seen OPERATOR(pg_catalog.||) (s ->> 0)::bigint;
            SELECT f.placement, f.epoch INTO old FROM counter_internal.tracked_shard_flushes f
            WHERE f.counter_id OPERATOR(pg_catalog.=) t.counter_id AND f.shardid OPERATOR(pg_catalog.=) (s ->> 0)::bigint;
            IF NOT FOUND OR old.placement IS DISTINCT FROM (s ->> 1)::bigint
               OR old.epoch IS DISTINCT FROM (node ->> 'epoch')::bigint THEN
                moved := moved OPERATOR(pg_catalog.||) (s ->> 0)::bigint;
                INSERT INTO counter_internal.tracked_shard_flushes AS f (counter_id, shardid, placement, epoch)
                VALUES (t.counter_id, (s ->> 0)::bigint, (s ->> 1)::bigint, (node ->> 'epoch')::bigint)
                ON CONFLICT (counter_id, shardid) DO UPDATE SET placement = excluded.placement, epoch = excluded.epoch;
            END IF;
        END LOOP;
    END LOOP;
    IF initial THEN
        -- the shards of the new delta table, as this transaction sees them
        INSERT INTO counter_internal.tracked_shard_flushes (counter_id, shardid, placement, epoch)
        SELECT t.counter_id, s.shardid, p.placementid, (epochs ->> n.nodeid::text)::bigint
        FROM pg_catalog.pg_dist_shard s
        JOIN pg_catalog.pg_dist_placement p ON p.shardid OPERATOR(pg_catalog.=) s.shardid
        JOIN pg_catalog.pg_dist_node n ON n.groupid OPERATOR(pg_catalog.=) p.groupid
        WHERE s.logicalrelid OPERATOR(pg_catalog.=) delta::pg_catalog.regclass
          AND n.noderole OPERATOR(pg_catalog.=) 'primary'
        ON CONFLICT (counter_id, shardid) DO UPDATE SET placement = excluded.placement, epoch = excluded.epoch;
        RETURN 0;
    END IF;
    DELETE FROM counter_internal.tracked_shard_flushes f
    WHERE f.counter_id OPERATOR(pg_catalog.=) t.counter_id AND f.shardid OPERATOR(pg_catalog.<>) ALL (seen);
    IF pg_catalog.cardinality(moved) OPERATOR(pg_catalog.>) 0 THEN
        UPDATE counter.tracked c SET full_pending = true WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id;
        UPDATE counter.jobs j SET next_run = pg_catalog.now()
        WHERE j.kind OPERATOR(pg_catalog.=) 'reconcile' AND j.target OPERATOR(pg_catalog.=) t.name
          AND j.next_run OPERATOR(pg_catalog.>) pg_catalog.now();
        INSERT INTO counter_internal.tracked_flushes AS f (counter_id, repairs, repair_requested_at)
        VALUES (t.counter_id, 1, pg_catalog.now())
        ON CONFLICT (counter_id) DO UPDATE SET repairs = f.repairs OPERATOR(pg_catalog.+) 1,
            repair_requested_at = excluded.repair_requested_at;
        RAISE LOG 'counter_ext: buffered counter "%" has % shards on a placement or node whose buffer its last flush did not see (a move, a split, a restart): adds published there and not flushed may be lost; a reconciliation of every key is scheduled to repair them',
            t.name, pg_catalog.cardinality(moved);
    END IF;
    IF entries OPERATOR(pg_catalog.>) 0 THEN
        INSERT INTO counter_internal.tracked_flushes AS f (counter_id, flushed_at, flushes, entries_flushed)
        VALUES (t.counter_id, pg_catalog.now(), 1, entries)
        ON CONFLICT (counter_id) DO UPDATE SET flushed_at = excluded.flushed_at,
            flushes = f.flushes OPERATOR(pg_catalog.+) 1,
            entries_flushed = f.entries_flushed OPERATOR(pg_catalog.+) excluded.entries_flushed;
    END IF;
    RETURN entries;
END
$fn$;

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
