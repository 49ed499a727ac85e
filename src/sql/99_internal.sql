-- Last piece of the install script: EXECUTE on every function and procedure
-- of schema counter_internal is revoked from PUBLIC, whatever piece made it.
-- A registration grants what an owner needs (counter.rollup_create grants
-- filter_match to the rollup's owner). The one exception: the entry point
-- the view counter.rollup_state calls (PostgreSQL checks EXECUTE on a view's
-- functions as its reader), which answers only for the caller's rollups.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid FROM pg_catalog.pg_proc p
             WHERE p.pronamespace OPERATOR(pg_catalog.=) 'counter_internal'::regnamespace LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON %s %s FROM PUBLIC',
            CASE WHEN (SELECT p.prokind FROM pg_catalog.pg_proc p WHERE p.oid OPERATOR(pg_catalog.=) f)
                      OPERATOR(pg_catalog.=) 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END, f);
    END LOOP;
END
$$;
GRANT EXECUTE ON FUNCTION counter_internal.rollup_newest_hour(integer) TO PUBLIC;
-- The triggers of counters and rollups on tables Citus distributes: Citus
-- makes them again on a moved or split shard as the table's owner, who
-- needs EXECUTE there, on every node, new ones too. They do only what the
-- table's owner could, and only the table's owner may attach them
-- (counter_internal.citus_trigger_creator; doc/security.md).
GRANT EXECUTE ON FUNCTION counter_internal.tracked_shard_fold() TO PUBLIC;
GRANT EXECUTE ON FUNCTION counter_internal.tracked_shard_add() TO PUBLIC;
GRANT EXECUTE ON FUNCTION counter_internal.tracked_shard_reconcile() TO PUBLIC;
GRANT EXECUTE ON FUNCTION counter_internal.rollup_shard_mark() TO PUBLIC;
-- And the function a trigger-mode rollup's recompute runs on every node as
-- the rollup's owner: it holds only the hours of a table its caller owns.
GRANT EXECUTE ON FUNCTION counter_internal.rollup_node_hold(regclass, timestamptz, timestamptz, timestamptz[]) TO PUBLIC;
-- The row lock a reconciliation batch takes on each delta row it folds, run
-- as the counter's owner on this node or, on Citus, on each shard: it locks
-- only rows of a table whose owner's rights its caller has (src/locks.cpp).
GRANT EXECUTE ON FUNCTION counter_internal.row_lock_skip(regclass, tid) TO PUBLIC;
-- Buffered trigger-mode counters on Citus (1.8): a node's flush, the
-- amount a read adds on the node of a key's shard (anchored: of each shard,
-- for one key or every key), and the busy keys of a
-- shard's reconciliation, run as the counter's owner on every node: each
-- acts only on a table whose owner's rights its caller has (src/tracked.cpp).
GRANT EXECUTE ON FUNCTION counter_internal.tracked_node_flush(text, text) TO PUBLIC;
GRANT EXECUTE ON FUNCTION counter_internal.tracked_shard_pending(regclass, anyelement) TO PUBLIC;
GRANT EXECUTE ON FUNCTION counter_internal.tracked_anchor_pending(regclass, regclass, "any", anyelement) TO PUBLIC;
GRANT EXECUTE ON FUNCTION counter_internal.tracked_anchor_pending_rows(regclass, regclass, "any", anyelement) TO PUBLIC;
GRANT EXECUTE ON FUNCTION counter_internal.tracked_shard_busy(regclass, timestamptz, anyarray) TO PUBLIC;
