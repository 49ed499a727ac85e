-- DROP and rename (doc/operations.md): what a user drops or renames leaves
-- no catalog row and no job pointing at nothing. Tracked counters follow
-- their own tables (30_tracked.sql); a dropped partitioned table is
-- forgotten by counter_internal.partition_forget_dropped (40_partition.sql). This
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
        PERFORM counter_internal.run_retarget('partition_maintenance', p.job_target, p.current_name);
    END LOOP;
END
$$;

-- An index made or dropped on a managed partitioned table (CREATE INDEX,
-- DROP INDEX, ALTER TABLE ... ADD/DROP CONSTRAINT) changes the index count
-- its catalog row keeps (parent_indexes), so that a dump taken later holds
-- the count the table has and its restored job waits for exactly those
-- indexes. Only while the table's maintenance job is armed (or it never
-- had one): in a database being restored, the count the dump carried is
-- what the restore's own DDL is still building towards, and stays, also
-- before the job's row is loaded (pg_restore -j loads counter.jobs and
-- makes other tables' indexes in any order). SECURITY
-- DEFINER: it runs for any role's DDL, reads only pg_index and touches only
-- counter_ext's rows.
CREATE OR REPLACE FUNCTION counter_internal.partition_follow_indexes()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE counter.partitioned_tables c SET parent_indexes = counter_internal.partition_index_count(c.parent)
    WHERE c.parent_indexes IS DISTINCT FROM counter_internal.partition_index_count(c.parent)
      AND (c.job_target IS NULL
           OR EXISTS (SELECT FROM counter.jobs j
                      JOIN counter_internal.job_armed a ON a.job_id OPERATOR(pg_catalog.=) j.job_id
                      WHERE j.kind OPERATOR(pg_catalog.=) 'partition_maintenance'
                        AND j.target OPERATOR(pg_catalog.=) c.job_target));
END
$$;

-- The functions a stored filter tree calls (directly, or as the function of
-- an operator) that the role new_owner does not own itself, outside
-- pg_catalog and not a member of an extension: "m.f(integer) (owner
-- ow_a), ...", or NULL. A counter or rollup whose table changes hands must
-- not run them as the new owner (doc/security.md, "Ownership changes").
CREATE OR REPLACE FUNCTION counter_internal.filter_foreign_code(tree text, new_owner regrole)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT string_agg(DISTINCT format('%s (owner %s)', p.oid::regprocedure, p.proowner::regrole), ', ')
    FROM (SELECT (m[1])::oid AS f FROM pg_catalog.regexp_matches(tree, ':(?:funcid|opfuncid) (\d+)', 'g') m
          UNION
          SELECT o.oprcode::oid FROM pg_catalog.regexp_matches(tree, ':opno (\d+)', 'g') m
          JOIN pg_catalog.pg_operator o ON o.oid OPERATOR(pg_catalog.=) (m[1])::oid) x
    JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) x.f
    WHERE p.proowner OPERATOR(pg_catalog.<>) new_owner
      AND p.pronamespace OPERATOR(pg_catalog.<>) 'pg_catalog'::regnamespace
      AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend d
                      WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::regclass
                        AND d.objid OPERATOR(pg_catalog.=) p.oid AND d.deptype OPERATOR(pg_catalog.=) 'e')
$$;

-- A tracked counter's hidden state table (counter_internal.tracked_N_base or
-- _delta) is counter_ext's: it carries no trigger, rule or policy but
-- counter_ext's own (the triggers calling tracked_state_written, which no
-- role but the extension's may call, 31_tracked_code.sql), and no privilege
-- but its owner's. Whatever its previous owner put there (a trigger calling
-- its own function, a rule, a policy, a grant) is dropped when the table
-- changes hands, and counter_ext's triggers are enabled as made; returns
-- what was dropped.
CREATE OR REPLACE FUNCTION counter_internal.state_table_clear(t regclass)
RETURNS text[]
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    gone text[] := '{}';
    n name;
    g record;
BEGIN
    FOR n IN SELECT x.tgname FROM pg_catalog.pg_trigger x
             WHERE x.tgrelid OPERATOR(pg_catalog.=) t AND NOT x.tgisinternal
               AND x.tgfoid OPERATOR(pg_catalog.<>) 'counter_internal.tracked_state_written()'::pg_catalog.regprocedure
             ORDER BY 1 LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', n, t);
        gone := gone OPERATOR(pg_catalog.||) format('trigger %I on %s', n, t);
    END LOOP;
    FOR n IN SELECT x.tgname FROM pg_catalog.pg_trigger x
             WHERE x.tgrelid OPERATOR(pg_catalog.=) t
               AND x.tgfoid OPERATOR(pg_catalog.=) 'counter_internal.tracked_state_written()'::pg_catalog.regprocedure
             ORDER BY 1 LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER %I', t, n);
    END LOOP;
    FOR n IN SELECT x.rulename FROM pg_catalog.pg_rewrite x WHERE x.ev_class OPERATOR(pg_catalog.=) t ORDER BY 1 LOOP
        EXECUTE format('DROP RULE %I ON %s', n, t);
        gone := gone OPERATOR(pg_catalog.||) format('rule %I on %s', n, t);
    END LOOP;
    FOR n IN SELECT x.polname FROM pg_catalog.pg_policy x WHERE x.polrelid OPERATOR(pg_catalog.=) t ORDER BY 1 LOOP
        EXECUTE format('DROP POLICY %I ON %s', n, t);
        gone := gone OPERATOR(pg_catalog.||) format('policy %I on %s', n, t);
    END LOOP;
    IF (SELECT c.relrowsecurity OR c.relforcerowsecurity FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) t) THEN
        EXECUTE format('ALTER TABLE %s NO FORCE ROW LEVEL SECURITY, DISABLE ROW LEVEL SECURITY', t);
        gone := gone OPERATOR(pg_catalog.||) format('row level security of %s', t);
    END IF;
    FOR g IN SELECT DISTINCT a.grantee FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
             WHERE c.oid OPERATOR(pg_catalog.=) t AND a.grantee OPERATOR(pg_catalog.<>) c.relowner LOOP
        EXECUTE format('REVOKE ALL ON %s FROM %s', t,
                       CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END);
        gone := gone OPERATOR(pg_catalog.||) format('privileges of %s on %s',
                       CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END, t);
    END LOOP;
    RETURN gone;
END
$$;

-- A rollup table that changes hands with its rollup: the triggers whose
-- function the new owner does not own, and every rule, are disabled (not
-- dropped: they are the user's, on the user's table; the new owner may look
-- at them and ENABLE them). Returns what was disabled.
CREATE OR REPLACE FUNCTION counter_internal.rollup_table_disarm(t regclass, new_owner regrole)
RETURNS text[]
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    gone text[] := '{}';
    n name;
BEGIN
    FOR n IN SELECT x.tgname FROM pg_catalog.pg_trigger x JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) x.tgfoid
             WHERE x.tgrelid OPERATOR(pg_catalog.=) t AND NOT x.tgisinternal AND x.tgenabled OPERATOR(pg_catalog.<>) 'D'
               AND p.proowner OPERATOR(pg_catalog.<>) new_owner
               AND p.pronamespace OPERATOR(pg_catalog.<>) 'pg_catalog'::regnamespace ORDER BY 1 LOOP
        EXECUTE format('ALTER TABLE %s DISABLE TRIGGER %I', t, n);
        gone := gone OPERATOR(pg_catalog.||) format('trigger %I on %s', n, t);
    END LOOP;
    FOR n IN SELECT x.rulename FROM pg_catalog.pg_rewrite x
             WHERE x.ev_class OPERATOR(pg_catalog.=) t AND x.ev_enabled OPERATOR(pg_catalog.<>) 'D' ORDER BY 1 LOOP
        EXECUTE format('ALTER TABLE %s DISABLE RULE %I', t, n);
        gone := gone OPERATOR(pg_catalog.||) format('rule %I on %s', n, t);
    END LOOP;
    RETURN gone;
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
--
-- The previous owner's code never comes along (doc/security.md, "Ownership
-- changes"): triggers, rules, policies and grants on a counter's hidden state
-- tables are dropped (counter_internal.state_table_clear); a rollup table's
-- triggers calling functions the new owner does not own, and its rules, are
-- disabled (counter_internal.rollup_table_disarm); a counter or rollup whose
-- filter calls a function the new owner does not own is not moved at all
-- (it stays its previous owner's, runs as that owner, and says so with a
-- WARNING each time until its filter is changed or the function given to
-- the new owner). Each object is settled in a subtransaction of its own: one
-- that cannot be settled is reported (WARNING) and the others go on.
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
    foreign_code text;
    gone text[];
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
                                                   AND c.name OPERATOR(pg_catalog.=) follow_owners.target))
             ORDER BY c.counter_id LOOP
        new_owner := (SELECT s.relowner::regrole FROM pg_catalog.pg_class s WHERE s.oid OPERATOR(pg_catalog.=) t.source);
        BEGIN
            foreign_code := counter_internal.filter_foreign_code(t.filter_tree, new_owner);
            IF foreign_code IS NOT NULL THEN
                RAISE EXCEPTION 'its filter calls % that % does not own', foreign_code, new_owner
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            UPDATE counter.tracked c SET owner = new_owner WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id
            RETURNING * INTO t;
            gone := counter_internal.state_table_clear(counter_internal.tracked_table(t, 'base'))
                    OPERATOR(pg_catalog.||) counter_internal.state_table_clear(counter_internal.tracked_table(t, 'delta'));
            EXECUTE format('ALTER TABLE %s OWNER TO %s', counter_internal.tracked_table(t, 'base'), new_owner);
            EXECUTE format('ALTER TABLE %s OWNER TO %s', counter_internal.tracked_table(t, 'delta'), new_owner);
            IF t.distributed AND t.mode OPERATOR(pg_catalog.=) 'application' THEN
                -- Citus: the inbox holds no row; made again, the new owner's
                EXECUTE format('DROP TABLE %s', counter_internal.tracked_table(t, 'inbox'));
                PERFORM counter_internal.tracked_make_inbox(t);
            END IF;
            PERFORM counter_internal.tracked_build(t);
            PERFORM counter_internal.tracked_invalidate();
            IF pg_catalog.cardinality(gone) OPERATOR(pg_catalog.>) 0 THEN
                RAISE WARNING 'tracked counter "%" changed hands to %: dropped what its previous owner had put on its state tables: %',
                    t.name, new_owner, pg_catalog.array_to_string(gone, ', ');
            END IF;
            changed := changed + 1;
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'tracked counter "%" does not follow its table % to %: % (SQLSTATE %)',
                t.name, t.source, new_owner, SQLERRM, SQLSTATE
                USING HINT = 'It stays its previous owner''s and runs as that role. Change its filter, or give the functions it calls to the new owner; the next counter.follow_owners() (every job pass) settles it.';
        END;
    END LOOP;
    FOR r IN SELECT c.* FROM counter.rollups c JOIN pg_catalog.pg_class s ON s.oid OPERATOR(pg_catalog.=) c.source
             WHERE c.owner::oid OPERATOR(pg_catalog.<>) s.relowner
               AND (follow_owners.kind IS NULL OR (follow_owners.kind OPERATOR(pg_catalog.=) 'rollup_refresh'
                                                   AND c.name OPERATOR(pg_catalog.=) follow_owners.target))
             ORDER BY c.rollup_id LOOP
        new_owner := (SELECT s.relowner::regrole FROM pg_catalog.pg_class s WHERE s.oid OPERATOR(pg_catalog.=) r.source);
        BEGIN
            foreign_code := counter_internal.filter_foreign_code(r.filter_tree, new_owner);
            IF foreign_code IS NOT NULL THEN
                RAISE EXCEPTION 'its filter calls % that % does not own', foreign_code, new_owner
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            UPDATE counter.rollups c SET owner = new_owner WHERE c.rollup_id OPERATOR(pg_catalog.=) r.rollup_id;
            gone := '{}';
            IF pg_catalog.to_regclass(r.rollup_table::text) IS NOT NULL THEN
                EXECUTE format('ALTER TABLE %s OWNER TO %s', r.rollup_table, new_owner);
                gone := counter_internal.rollup_table_disarm(r.rollup_table, new_owner);
            END IF;
            PERFORM counter_internal.rollup_build(r.rollup_id);
            IF pg_catalog.cardinality(gone) OPERATOR(pg_catalog.>) 0 THEN
                RAISE WARNING 'rollup "%" changed hands to %: disabled what its previous owner had put on its rollup table: %',
                    r.name, new_owner, pg_catalog.array_to_string(gone, ', ')
                    USING HINT = 'The new owner may look at them and ENABLE them again.';
            END IF;
            changed := changed + 1;
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'rollup "%" does not follow its table % to %: % (SQLSTATE %)',
                r.name, r.source, new_owner, SQLERRM, SQLSTATE
                USING HINT = 'It stays its previous owner''s and runs as that role. Change its filter, or give the functions it calls to the new owner; the next counter.follow_owners() (every job pass) settles it.';
        END;
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
