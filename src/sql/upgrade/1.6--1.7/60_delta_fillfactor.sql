-- ---- delta tables with room for HOT updates (fillfactor 60, as a fresh
-- counter's; 31_tracked_code.sql): pages filled from now on keep the room
DO $$
DECLARE
    t counter.tracked;
BEGIN
    FOR t IN SELECT c.* FROM counter.tracked c
             WHERE pg_catalog.to_regclass(counter_internal.tracked_table(c, 'delta')) IS NOT NULL LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s SET (fillfactor = 60)', counter_internal.tracked_table(t, 'delta'));
    END LOOP;
END
$$;
