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
