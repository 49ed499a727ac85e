-- counter_ext 1.1 -> 1.2 (ALTER EXTENSION counter_ext UPDATE TO '1.2').
\echo Use "ALTER EXTENSION counter_ext UPDATE TO '1.2'" to load this file. \quit

-- Every change to src/sql/*.sql since 1.1 is repeated here, section by
-- section (test/scripts/upgrade.sh compares an updated installation with a
-- fresh one, object by object).

-- ---- PostgreSQL 16+ (issue 16): counter.untrack finds a dropped source by its
-- OID in pg_class, not with to_regclass (which takes an OID's text as it is).
CREATE OR REPLACE FUNCTION counter.untrack(name text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
    t counter.tracked := counter_internal.tracked_get(name);
    src regclass;
    trg text;
BEGIN
    PERFORM counter_internal.tracked_require_owner(t, 'untrack');
    PERFORM 1 FROM counter.tracked c WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id FOR UPDATE;
    -- The source, when it still exists (to_regclass of the OID's text is no such
    -- test: since PostgreSQL 16 it takes a number as the OID it names).
    SELECT c.oid INTO src FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) t.source::oid;
    IF t.mode = 'trigger' AND src IS NOT NULL THEN
        FOREACH trg IN ARRAY ARRAY['ins', 'del', 'upd', 'trunc'] LOOP
            EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', format('counter_%s_%s', t.counter_id, trg), src);
        END LOOP;
    END IF;
    EXECUTE format('DROP FUNCTION IF EXISTS counter_internal.%I(timestamptz, timestamptz, text, boolean, integer)',
                   format('tracked_%s_batch', t.counter_id));
    EXECUTE format('DROP TABLE IF EXISTS %s, %s', counter_internal.tracked_table(t, 'base'),
                   counter_internal.tracked_table(t, 'delta'));
    DELETE FROM counter.tracked c WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id;
    PERFORM counter.job_unregister('reconcile', name);
END
$fn$;
