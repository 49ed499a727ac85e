-- ---- every counter's batch function is made again, as counter.track makes
-- it now (same signature): it runs without JIT (31_tracked_code.sql,
-- tracked_build_batch: compiling took most of a batch of 10,000 keys), and
-- trigger-mode counters on distributed tables reconcile a key range of every
-- shard per batch, with two statements per shard (issue 21, item 4;
-- tracked_citus_batch: a new body); on one node a batch locks its delta
-- rows with row_lock_skip, looks for source rows newly past the watermark
-- only when that range is not empty, and writes only the bases that change.
DO $upd$
DECLARE
    t counter.tracked;
    fn text;
BEGIN
    FOR t IN SELECT c.* FROM counter.tracked c ORDER BY c.counter_id LOOP
        PERFORM counter_internal.tracked_build_batch(t);
        -- made inside this script, the batch function would become a member
        -- of the extension; it belongs to the counter, as after counter.track
        -- (on this node only: it is not on the workers)
        fn := pg_catalog.format('counter_internal.%I(timestamptz, timestamptz, text, boolean, integer)',
                                pg_catalog.format('tracked_%s_batch', t.counter_id));
        IF EXISTS (SELECT FROM pg_catalog.pg_depend d
                   WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                     AND d.objid OPERATOR(pg_catalog.=) fn::pg_catalog.regprocedure::pg_catalog.oid
                     AND d.deptype OPERATOR(pg_catalog.=) 'e') THEN
            PERFORM counter_internal.citus_local_ddl('ALTER EXTENSION counter_ext DROP FUNCTION ' || fn);
        END IF;
    END LOOP;
END
$upd$;
