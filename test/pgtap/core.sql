-- The extension's own objects: schema, functions, their volatility and
-- parallel safety, and that every object it creates lives in schema counter.
BEGIN;
SELECT plan(11);

SELECT has_schema('counter');
SELECT has_function('counter', 'version', ARRAY[]::text[]);
SELECT has_function('counter', 'preloaded', ARRAY[]::text[]);
SELECT is(counter.version(), (SELECT extversion FROM pg_extension WHERE extname = 'counter_ext'),
          'library version equals the installed script version');
SELECT ok(counter.preloaded(), 'the suite runs with shared_preload_libraries = counter_ext');

-- Every function of the extension lives in schema counter (the API) or
-- counter_internal (helpers).
SELECT is_empty($$
    SELECT p.oid::regprocedure::text
    FROM pg_proc p
    JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
    JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'counter_ext'
    WHERE p.pronamespace NOT IN ('counter'::regnamespace, 'counter_internal'::regnamespace)
$$, 'every function of the extension is in schema counter or counter_internal');

-- No helper is executable by PUBLIC (doc/security.md), but the entry point
-- the view counter.rollup_state calls (a view's functions are checked as its
-- reader; it is counter_entry, which notes its caller), and the triggers of
-- counters and rollups on Citus shards (Citus makes them again on a moved
-- shard as the table's owner; only that owner may attach them), and the two
-- functions a counter's or rollup's work runs as its owner on every node,
-- which act only on tables whose owner's rights the caller has.
SELECT set_eq($$
    SELECT p.oid::regprocedure::text FROM pg_proc p
    WHERE p.pronamespace = 'counter_internal'::regnamespace
      AND has_function_privilege('public', p.oid, 'EXECUTE')
$$, $$ VALUES ('counter_internal.rollup_newest_hour(integer)'), ('counter_internal.tracked_shard_fold()'),
              ('counter_internal.rollup_shard_mark()'), ('counter_internal.tracked_shard_add()'),
              ('counter_internal.tracked_shard_reconcile()'),
              ('counter_internal.rollup_node_hold(regclass,timestamp with time zone,timestamp with time zone,timestamp with time zone[])'),
              ('counter_internal.row_lock_skip(regclass,tid)'),
              ('counter_internal.tracked_node_flush(text,text)'),
              ('counter_internal.tracked_anchor_pending(regclass,regclass,"any",anyelement)'),
              ('counter_internal.tracked_anchor_pending_rows(regclass,regclass,"any",anyelement)'),
              ('counter_internal.tracked_shard_busy(regclass,timestamp with time zone,anyarray)'),
              ('counter_internal.tracked_shard_pending(regclass,anyelement)') $$,
   'no function of counter_internal is executable by PUBLIC but the entry point of the view rollup_state, the Citus shard triggers and the owner-checked node helpers');

-- Every SECURITY DEFINER function pins its search_path.
SELECT is_empty($$
    SELECT p.oid::regprocedure::text
    FROM pg_proc p
    JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
    JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'counter_ext'
    WHERE p.prosecdef AND NOT coalesce(p.proconfig::text ~ 'search_path=pg_catalog, pg_temp', false)
$$, 'every SECURITY DEFINER function sets search_path = pg_catalog, pg_temp');

-- The caller is never guessed (doc/security.md): no function of schema
-- counter that asks for its caller is SECURITY DEFINER; each such entry point
-- is counter_entry, over the function of the same name and arguments in
-- counter_internal, which is SECURITY DEFINER.
SELECT is_empty($$
    SELECT p.oid::regprocedure::text FROM pg_proc p
    WHERE p.pronamespace = 'counter'::regnamespace AND p.prosecdef
      AND p.prosrc ~ 'counter_internal\.(caller|[a-z]+_require_owner)\('
$$, 'no SECURITY DEFINER function of schema counter asks for its caller itself');
SELECT is_empty($$
    SELECT p.oid::regprocedure::text FROM pg_proc p
    WHERE p.pronamespace IN ('counter'::regnamespace, 'counter_internal'::regnamespace)
      AND p.prosrc = 'counter_entry'
      AND NOT EXISTS (SELECT 1 FROM pg_proc i
                      WHERE i.pronamespace = 'counter_internal'::regnamespace
                        AND i.proname = p.proname || CASE WHEN p.pronamespace = 'counter_internal'::regnamespace
                                                          THEN '_impl' ELSE '' END
                        AND i.proargtypes = p.proargtypes AND i.prorettype = p.prorettype AND i.prosecdef
                        AND i.proallargtypes IS NOT DISTINCT FROM p.proallargtypes
                        AND i.proargmodes IS NOT DISTINCT FROM p.proargmodes
                        AND i.proargnames IS NOT DISTINCT FROM p.proargnames AND i.proretset = p.proretset)
$$, 'every entry point has its SECURITY DEFINER implementation in counter_internal');

-- Functions written in SQL or PL/pgSQL that run dynamic SQL pin search_path.
SELECT is_empty($$
    SELECT p.oid::regprocedure::text
    FROM pg_proc p
    JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
    JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'counter_ext'
    JOIN pg_language l ON l.oid = p.prolang AND l.lanname = 'plpgsql'
    WHERE p.prosrc ~* 'execute' AND NOT coalesce(p.proconfig::text ~ 'search_path', false)
$$, 'plpgsql functions that EXECUTE dynamic SQL set search_path');

SELECT * FROM finish();
ROLLBACK;
