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
    END LOOP;
END
$upd$;
