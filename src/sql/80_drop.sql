-- DROP and rename (doc/operations.md): what a user drops or renames leaves
-- no catalog row and no job pointing at nothing. Tracked counters follow
-- their own tables (30_tracked.sql); a dropped partitioned table is
-- forgotten by counter.partition_forget_dropped (40_partition.sql). This
-- piece holds functions and event triggers only, so the update includes it
-- as it is.

-- A rollup whose source or rollup table is dropped (DROP TABLE, DROP SCHEMA
-- ... CASCADE, DROP OWNED BY) is dropped with it by counter.rollup_drop,
-- which checks that the role that dropped the table may drop the rollup (its
-- owner, or a superuser): its triggers, its rollup table, its catalog rows,
-- its job. The DROP TABLE of the rollup table that rollup_drop itself runs
-- (as the owner, restricted) comes back here with the source already gone,
-- or still there without its triggers: that rollup is being dropped, and is
-- left to that drop.
CREATE OR REPLACE FUNCTION counter_internal.rollup_forget_dropped()
RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT c.name, c.rollup_id, c.source::oid AS source,
                    bool_or(d.objid OPERATOR(pg_catalog.=) c.source::oid) AS source_dropped
             FROM counter.rollups c
             JOIN pg_event_trigger_dropped_objects() d
               ON d.classid OPERATOR(pg_catalog.=) 'pg_class'::regclass AND d.objsubid OPERATOR(pg_catalog.=) 0
              AND d.objid IN (c.source::oid, c.rollup_table::oid)
             GROUP BY 1, 2, 3 LOOP
        IF r.source_dropped
           OR EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid OPERATOR(pg_catalog.=) r.source
                      AND g.tgname IN ('counter_rollup_' || r.rollup_id || '_insert',
                                       'counter_rollup_' || r.rollup_id || '_delete',
                                       'counter_rollup_' || r.rollup_id || '_update')) THEN
            PERFORM counter.rollup_drop(r.name);
        END IF;
    END LOOP;
END
$$;

-- A managed partitioned table that is renamed (ALTER TABLE ... RENAME, SET
-- SCHEMA, ALTER SCHEMA ... RENAME) keeps its job: the job's target follows
-- the new name. SECURITY DEFINER: it runs for any role's ALTER, and touches
-- only counter_ext's rows (a job target changes to the real name of the
-- table whose job it is).
CREATE OR REPLACE FUNCTION counter_internal.partition_follow_rename()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p record;
BEGIN
    FOR p IN SELECT c.parent, c.job_target, format('%I.%I', n.nspname, r.relname) AS current_name
             FROM counter.partitioned_tables c
             JOIN pg_class r ON r.oid OPERATOR(pg_catalog.=) c.parent
             JOIN pg_namespace n ON n.oid OPERATOR(pg_catalog.=) r.relnamespace
             WHERE c.job_target IS DISTINCT FROM format('%I.%I', n.nspname, r.relname) LOOP
        UPDATE counter.jobs j SET target = p.current_name
        WHERE j.kind OPERATOR(pg_catalog.=) 'partition_maintenance' AND j.target OPERATOR(pg_catalog.=) p.job_target;
        UPDATE counter.partitioned_tables c SET job_target = p.current_name
        WHERE c.parent OPERATOR(pg_catalog.=) p.parent;
        -- its runs (the one run record finds them by this name) follow it
        UPDATE counter.job_runs x SET target = p.current_name
        WHERE x.kind OPERATOR(pg_catalog.=) 'partition_maintenance' AND x.target OPERATOR(pg_catalog.=) p.job_target;
    END LOOP;
END
$$;

-- A source given to another role (ALTER TABLE ... OWNER TO, REASSIGN
-- OWNED): what counter_ext does for it is the new owner's from now on. Its
-- tracked counters' and rollups' owner becomes the new owner, with their
-- state and rollup tables and their functions, and the jobs of every
-- counter, rollup and partitioned table whose owner changed are run as the
-- new owner (once they are not running). counter.follow_owners(kind,
-- target) does it for one job's target, or for everything (NULLs); it
-- returns the objects it changed. An event trigger calls it after every
-- ALTER TABLE; PostgreSQL fires none for REASSIGN OWNED, so the job runner
-- calls it before it hands out jobs (the scheduler's survey, run_jobs,
-- run_job), and a user may call it. SECURITY DEFINER, and for any role: it only makes
-- counter_ext's rows and tables agree with pg_class.
CREATE OR REPLACE FUNCTION counter.follow_owners(kind text DEFAULT NULL, target text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t counter.tracked;
    r counter.rollups;
    new_owner regrole;
    changed integer := 0;
    n integer;
BEGIN
    IF kind IS NOT NULL AND kind OPERATOR(pg_catalog.<>) ALL ('{reconcile,flush,rollup_refresh,partition_maintenance}'::text[]) THEN
        RAISE EXCEPTION 'counter.follow_owners knows the kinds reconcile, flush, rollup_refresh and partition_maintenance, not "%"', kind
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (kind IS NULL) <> (target IS NULL) THEN
        RAISE EXCEPTION 'kind and target of counter.follow_owners are given together, or neither'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    FOR t IN SELECT c.* FROM counter.tracked c JOIN pg_catalog.pg_class s ON s.oid OPERATOR(pg_catalog.=) c.source
             WHERE c.owner::oid OPERATOR(pg_catalog.<>) s.relowner
               AND (follow_owners.kind IS NULL OR (follow_owners.kind OPERATOR(pg_catalog.=) ANY ('{reconcile,flush}'::text[])
                                                   AND c.name OPERATOR(pg_catalog.=) follow_owners.target)) LOOP
        new_owner := (SELECT s.relowner::regrole FROM pg_catalog.pg_class s WHERE s.oid OPERATOR(pg_catalog.=) t.source);
        UPDATE counter.tracked c SET owner = new_owner WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id
        RETURNING * INTO t;
        EXECUTE format('ALTER TABLE %s OWNER TO %I', counter_internal.tracked_table(t, 'base'), new_owner);
        EXECUTE format('ALTER TABLE %s OWNER TO %I', counter_internal.tracked_table(t, 'delta'), new_owner);
        PERFORM counter_internal.tracked_build(t);
        PERFORM counter_internal.tracked_invalidate();
        changed := changed + 1;
    END LOOP;
    FOR r IN SELECT c.* FROM counter.rollups c JOIN pg_catalog.pg_class s ON s.oid OPERATOR(pg_catalog.=) c.source
             WHERE c.owner::oid OPERATOR(pg_catalog.<>) s.relowner
               AND (follow_owners.kind IS NULL OR (follow_owners.kind OPERATOR(pg_catalog.=) 'rollup_refresh'
                                                   AND c.name OPERATOR(pg_catalog.=) follow_owners.target)) LOOP
        new_owner := (SELECT s.relowner::regrole FROM pg_catalog.pg_class s WHERE s.oid OPERATOR(pg_catalog.=) r.source);
        UPDATE counter.rollups c SET owner = new_owner WHERE c.rollup_id OPERATOR(pg_catalog.=) r.rollup_id;
        IF pg_catalog.to_regclass(r.rollup_table::text) IS NOT NULL THEN
            EXECUTE format('ALTER TABLE %s OWNER TO %I', r.rollup_table, new_owner);
        END IF;
        PERFORM counter_internal.rollup_build(r.rollup_id);
        changed := changed + 1;
    END LOOP;
    -- every job of a built-in kind runs as the owner of what it serves
    WITH want AS (
        SELECT j.job_id, counter_internal.job_target_owner(j.kind, j.target) AS owner FROM counter.jobs j
        WHERE j.kind OPERATOR(pg_catalog.=) ANY ('{reconcile,flush,rollup_refresh,partition_maintenance}'::text[])
          AND (follow_owners.kind IS NULL OR (j.kind OPERATOR(pg_catalog.=) follow_owners.kind
                                              AND j.target OPERATOR(pg_catalog.=) follow_owners.target))),
    moved AS (
        UPDATE counter.jobs j SET owner = w.owner FROM want w
        WHERE j.job_id OPERATOR(pg_catalog.=) w.job_id AND w.owner IS NOT NULL AND j.owner IS DISTINCT FROM w.owner
          AND j.running_run IS NULL
        RETURNING 1)
    SELECT count(*) INTO n FROM moved;
    RETURN changed + n;
END
$$;
COMMENT ON FUNCTION counter.follow_owners(text, text) IS
    'makes counters, rollups and jobs follow their tables'' owners (after REASSIGN OWNED; ALTER TABLE does it by itself)';

-- The event trigger: after an ALTER TABLE (OWNER TO among others) of a
-- table counter_ext serves (a counter's or rollup's source, a managed
-- partitioned table); any other ALTER TABLE, counter_ext's own included, is
-- left alone.
CREATE OR REPLACE FUNCTION counter_internal.follow_owner()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_event_trigger_ddl_commands() d
               WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                 AND (d.objid IN (SELECT t.source::oid FROM counter.tracked t)
                      OR d.objid IN (SELECT r.source::oid FROM counter.rollups r)
                      OR d.objid IN (SELECT p.parent::oid FROM counter.partitioned_tables p))) THEN
        PERFORM counter.follow_owners();
    END IF;
END
$$;
