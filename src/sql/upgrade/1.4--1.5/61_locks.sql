-- locks (issue 24, item 1): nothing of 1.5 takes an advisory lock. 1.4's
-- lock_class goes (its C symbol stays for 1.4's SQL until this update), and
-- every rollup's stored statements are made again: the add statement of 1.4
-- took its advisory hour lock itself; 1.5's trigger takes the hour
-- locks in counter_ext's own lock space before it runs the statement.
DROP FUNCTION IF EXISTS counter_internal.lock_class(text);
DO $$
DECLARE
    rid integer;
BEGIN
    FOR rid IN SELECT r.rollup_id FROM counter.rollups r ORDER BY r.rollup_id LOOP
        PERFORM counter_internal.rollup_sql(rid);
    END LOOP;
END
$$;
