-- ---- rollups of 1.1, after the code (45_rollup.sql changed the tables).
-- Every rollup of 1.1: its filter is resolved into a stored tree (as its
-- owner, with search_path pg_catalog, pg_temp, as 1.1 already evaluated it;
-- a filter that no longer resolves is kept as text and fails loudly until
-- counter.rollup_set_filter gives it again), its SQL is generated again, its
-- owner may evaluate the filter, and its triggers are made again.
DO $$
DECLARE
    r counter.rollups;
    compiled text[];
BEGIN
    FOR r IN SELECT * FROM counter.rollups ORDER BY rollup_id LOOP
        IF r.filter IS NOT NULL THEN
            BEGIN
                compiled := counter_internal.filter_compile(r.source, r.filter, r.owner);
                UPDATE counter.rollups c SET filter = compiled[1], filter_tree = compiled[2], filter_relid = r.source::oid
                WHERE c.rollup_id = r.rollup_id;
            EXCEPTION WHEN OTHERS THEN
                RAISE WARNING 'rollup "%": its filter % no longer resolves (%); it fails until counter.rollup_set_filter gives it again',
                    r.name, r.filter, SQLERRM;
            END;
        END IF;
        PERFORM counter_internal.rollup_build(r.rollup_id);
    END LOOP;
END
$$;
