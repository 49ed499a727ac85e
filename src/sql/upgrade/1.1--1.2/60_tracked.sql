-- ---- tracked counters of 1.1, after the code (30_tracked.sql changed the tables).
-- Every counter of 1.1: its state tables move, its filter is resolved (as
-- its owner, with search_path pg_catalog, pg_temp: a filter that named a
-- function outside pg_catalog without its schema is kept as text and fails
-- loudly until the counter is registered again), its generated functions
-- are replaced by the batch function and its triggers made again.
DO $$
DECLARE
    t counter.tracked;
    compiled text[];
BEGIN
    FOR t IN SELECT * FROM counter.tracked ORDER BY counter_id LOOP
        EXECUTE format('ALTER TABLE counter.%I SET SCHEMA counter_internal', format('tracked_%s_base', t.counter_id));
        EXECUTE format('ALTER TABLE counter.%I SET SCHEMA counter_internal', format('tracked_%s_delta', t.counter_id));
        EXECUTE format('DROP FUNCTION IF EXISTS counter.%I() CASCADE', format('tracked_%s_trigger', t.counter_id));
        EXECUTE format('DROP FUNCTION IF EXISTS counter.%I()', format('tracked_%s_check', t.counter_id));
        EXECUTE format('DROP FUNCTION IF EXISTS counter.%I(timestamptz, text, boolean, integer)',
                       format('tracked_%s_batch', t.counter_id));
        IF t.filter IS NOT NULL THEN
            BEGIN
                compiled := counter_internal.filter_compile(t.source, t.filter, t.owner);
                UPDATE counter.tracked c SET filter = compiled[1], filter_tree = compiled[2],
                    filter_relid = t.source::oid
                WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id
                RETURNING * INTO t;
            EXCEPTION WHEN OTHERS THEN
                RAISE WARNING 'the filter of tracked counter "%" does not resolve with search_path pg_catalog: %',
                    t.name, SQLERRM
                    USING HINT = 'Register the counter again (counter.untrack, counter.track) with schema-qualified names.';
            END;
        END IF;
        PERFORM counter_internal.tracked_build(t);
        -- made inside this script, the batch function would become a member
        -- of the extension; it belongs to the counter, as after counter.track
        EXECUTE format('ALTER EXTENSION counter_ext DROP FUNCTION counter_internal.%I(timestamptz, timestamptz, text,'
                       ' boolean, integer)', format('tracked_%s_batch', t.counter_id));
    END LOOP;
END
$$;
