-- ---- the triggers that count the writers of each counter's state tables
-- (reads without a query, src/read_cache.cpp), on the counters already there
DO $$
DECLARE
    t counter.tracked;
BEGIN
    FOR t IN SELECT c.* FROM counter.tracked c
             WHERE pg_catalog.to_regclass(counter_internal.tracked_table(c, 'base')) IS NOT NULL
               AND pg_catalog.to_regclass(counter_internal.tracked_table(c, 'delta')) IS NOT NULL LOOP
        PERFORM counter_internal.tracked_state_triggers(t);
    END LOOP;
END
$$;
