-- ---- 1.5: bounds on what a writer passes (issue 24, item 2)
-- Every tracked counter's batch function, made again as 1.5 makes it: sums
-- of deltas in numeric, bounded to bigint, and in application mode the
-- delta rows past now + max_future folded (src/sql/31_tracked_code.sql).
DO $$
DECLARE
    t counter.tracked;
BEGIN
    FOR t IN SELECT * FROM counter.tracked c ORDER BY c.counter_id LOOP
        PERFORM counter_internal.tracked_build_batch(t);
        -- made inside this script, the batch function would become a member
        -- of the extension; it belongs to the counter, as after counter.track
        EXECUTE pg_catalog.format('ALTER EXTENSION counter_ext DROP FUNCTION counter_internal.%I(timestamptz,'
                                  ' timestamptz, text, boolean, integer)', pg_catalog.format('tracked_%s_batch', t.counter_id));
    END LOOP;
END
$$;

-- Every rollup's stored SQL, made again with its fixed sketch precision.
SELECT counter_internal.rollup_build_sql(r.rollup_id) FROM counter.rollups r ORDER BY r.rollup_id;
