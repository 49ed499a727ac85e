-- ---- trigger-mode counters on distributed tables reconcile a key range of
-- every shard per batch, with two statements per shard (issue 21, item 4;
-- 31_tracked_code.sql, tracked_citus_batch): their batch functions are made
-- again, as counter.track makes them now (same signature, new body).
DO $upd$
DECLARE
    t counter.tracked;
    fn text;
BEGIN
    FOR t IN SELECT c.* FROM counter.tracked c WHERE c.distributed ORDER BY c.counter_id LOOP
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
