-- ---- rollups: 1.1's rollup tables have fillfactor 60 (HOT updates); 1.1's
-- rollup_create made new ones so (the code of this version does).
-- Existing rollup tables: the same fillfactor. It applies to pages filled
-- from now on (a VACUUM FULL or CLUSTER of the table repacks old pages);
-- ALTER TABLE ... SET takes a SHARE UPDATE EXCLUSIVE lock only, which
-- writers do not conflict with.
DO $$
DECLARE
    t regclass;
BEGIN
    FOR t IN SELECT r.rollup_table FROM counter.rollups r ORDER BY r.rollup_id LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s SET (fillfactor = 60)', t);
    END LOOP;
END
$$;
