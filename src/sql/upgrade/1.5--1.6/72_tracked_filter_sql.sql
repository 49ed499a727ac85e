-- ---- tracked counters with a filter: the batch function carries the filter
-- as SQL printed from the stored tree (counter_internal.filter_sql), instead
-- of calling counter_internal.filter_match per row, so Citus pushes it down
-- to the shards (issue 21). Each counter's batch function is made again.
DO $upd$
DECLARE
    t counter.tracked;
BEGIN
    FOR t IN SELECT * FROM counter.tracked c WHERE c.filter IS NOT NULL ORDER BY c.counter_id LOOP
        PERFORM counter_internal.tracked_build_batch(t);
        -- made inside this script, the batch function would become a member
        -- of the extension; it belongs to the counter, as after counter.track
        EXECUTE pg_catalog.format('ALTER EXTENSION counter_ext DROP FUNCTION counter_internal.%I(timestamptz,'
                                  ' timestamptz, text, boolean, integer)', pg_catalog.format('tracked_%s_batch', t.counter_id));
    END LOOP;
END
$upd$;
