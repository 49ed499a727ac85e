-- counter_ext 1.4: generated from src/sql/*.sql by make; edit those.
\echo Use "CREATE EXTENSION counter_ext" to load this file. \quit

-- ---- src/sql/00_core.sql
-- The schema itself is created by CREATE EXTENSION (schema = counter in the
-- control file). Objects are always schema-qualified; functions that run SQL
-- pin their search_path.

COMMENT ON SCHEMA counter IS 'counter_ext: counters that stay correct next to the rows they count';

-- Every role may reach the schema: the types (hll, pncounter) and tracked
-- counters on tables a role owns are for everyone. What may harm is revoked
-- from PUBLIC function by function, and functions check their caller.
GRANT USAGE ON SCHEMA counter TO PUBLIC;

-- Helpers and the per-object state (tracked counters' tables) live in schema
-- counter_internal (doc/security.md). Nobody but the extension creates
-- anything there. USAGE is granted because an object's owner reaches its own
-- state tables there (as itself); EXECUTE on every function of the schema is
-- revoked from PUBLIC at the end of the script (99_internal.sql), so a helper
-- is callable only by the extension's own functions, or by the owner a
-- registration grants it to.
CREATE SCHEMA counter_internal;
COMMENT ON SCHEMA counter_internal IS 'counter_ext: internal helpers and per-object state; not an API';
GRANT USAGE ON SCHEMA counter_internal TO PUBLIC;

-- The catalog row of a user column of a table, or undefined_column (42703):
-- the one check every feature makes of the columns it is given.
CREATE FUNCTION counter.column_of(rel regclass, col name)
RETURNS pg_catalog.pg_attribute
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    att pg_catalog.pg_attribute;
BEGIN
    SELECT * INTO att FROM pg_catalog.pg_attribute a
    WHERE a.attrelid OPERATOR(pg_catalog.=) rel AND a.attname OPERATOR(pg_catalog.=) col
      AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column "%" of % does not exist', col, rel USING ERRCODE = 'undefined_column';
    END IF;
    RETURN att;
END
$$;

CREATE FUNCTION counter.version()
RETURNS text
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_version';

COMMENT ON FUNCTION counter.version() IS 'version of the loaded counter_ext library';

CREATE FUNCTION counter.preloaded()
RETURNS boolean
LANGUAGE c STABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_preloaded';

COMMENT ON FUNCTION counter.preloaded() IS
    'true when shared_preload_libraries loaded counter_ext (needed by the background worker)';

-- ---- src/sql/01_internal.sql
-- The mechanisms every feature uses (doc/security.md): functions only, so
-- the update from 1.1 includes this piece as it is.

-- The one mechanism that runs work as the owner of the object it serves
-- (src/owner.cpp): the SQL runs as 'owner' in a security-restricted
-- operation with search_path pg_catalog, pg_temp; parameters are the
-- variadic arguments ($1, $2, ...). Called only by the extension's functions,
-- after they have checked the caller's privilege.
CREATE OR REPLACE FUNCTION counter_internal.exec_as_owner(owner regrole, sql text, VARIADIC args "any")
RETURNS SETOF record
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_exec_as_owner';

CREATE OR REPLACE FUNCTION counter_internal.exec_as_owner_cmd(owner regrole, sql text, VARIADIC args "any")
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_exec_as_owner_cmd';

-- The one filter compiler (src/filter.cpp): resolves a filter as the owner,
-- once, and returns {canonical text, tree}; filter_match applies the stored
-- tree of a tracked counter ('tracked') or rollup ('rollup') to a source row.
CREATE OR REPLACE FUNCTION counter_internal.filter_compile(source regclass, filter text, owner regrole)
RETURNS text[]
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'counter_filter_compile';

CREATE OR REPLACE FUNCTION counter_internal.filter_match(kind text, id integer, source_row anyelement)
RETURNS boolean
LANGUAGE c STABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_filter_match';

-- {=, <, >} of a key type's default btree operator class, written as
-- OPERATOR(schema.op): resolved from the catalog, never from a search_path.
CREATE OR REPLACE FUNCTION counter_internal.key_operators(key_type regtype)
RETURNS text[]
LANGUAGE c STABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_key_operators';

-- ---- src/sql/05_jobs.sql
-- Periodic jobs: one row per piece of periodic work (reconcile a counter,
-- refresh a rollup's dirty hours, maintain a partitioned table). Features
-- register their job when a target is created and remove it when it is
-- dropped; the background worker and counter.run_jobs() run the due ones.
--
-- Every job runs in a background-worker session connected as the job's
-- owner (the owner of the object it serves), whoever asked for the run: the
-- scheduler, or a superuser's CALL counter.run_jobs() from psql or pg_cron.
--
-- A kind is dispatched through counter_internal.job_kinds, a list only a
-- superuser can extend, to one procedure identified by its OID: no procedure
-- is ever found by its name (a counter.job_<kind> or <schema>.job_<kind>
-- someone creates is never called). The procedure does the work for one
-- target and may COMMIT between bounded steps:
--   reconcile              counter.job_reconcile(target, rows)
--   rollup_refresh         counter.job_rollup_refresh(target, rows)
--   partition_maintenance  counter.job_partition_maintenance(target, rows)
-- (target text, INOUT rows_affected bigint DEFAULT NULL). A job procedure
-- cannot carry SET clauses (PostgreSQL forbids COMMIT in such procedures), so
-- it schema-qualifies what it uses; it runs under the job's statement and lock
-- timeouts, and an ERROR it raises is recorded in counter.job_runs and backs
-- the job off (the other jobs go on).

-- The kinds of job and the procedure each one runs. The rows of the built-in
-- kinds are added by 60_worker.sql (after the procedures exist); a superuser
-- may add a kind of their own (only superuser-owned procedures are run).
CREATE TABLE counter_internal.job_kinds (
    kind       text PRIMARY KEY CHECK (kind ~ '^[a-z][a-z0-9_]{0,58}$'),
    procedure  regprocedure NOT NULL,
    builtin    boolean NOT NULL DEFAULT false
);
COMMENT ON TABLE counter_internal.job_kinds IS 'job kinds of counter_ext and the procedure each runs (superuser only)';
REVOKE ALL ON TABLE counter_internal.job_kinds FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('counter_internal.job_kinds', 'WHERE NOT builtin');

CREATE TABLE counter.jobs (
    job_id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind          text NOT NULL CHECK (kind ~ '^[a-z][a-z0-9_]{0,58}$'),
    target        text NOT NULL,
    run_every     interval NOT NULL CHECK (run_every > interval '0'),
    enabled       boolean NOT NULL DEFAULT true,
    next_run      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    timeout       interval NOT NULL DEFAULT interval '5 minutes'
                  CHECK (timeout > interval '0' AND timeout <= interval '24 days'),
    lock_timeout  interval NOT NULL DEFAULT interval '2 seconds'
                  CHECK (lock_timeout > interval '0' AND lock_timeout <= interval '24 days'),
    failures      integer NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- the run in progress (counter.job_runs.run_id), NULL when idle
    running_run   bigint,
    -- the role whose session runs the job: the owner of the object it serves
    -- (NULL only for a job whose owner could not be found; never run)
    owner         regrole,
    -- why the job was disabled by counter_ext itself (its owner was dropped)
    disabled_reason text,
    UNIQUE (kind, target)
);
COMMENT ON TABLE counter.jobs IS 'periodic work of counter_ext, run by its background worker or counter.run_jobs()';
SELECT pg_catalog.pg_extension_config_dump('counter.jobs', '');

-- The one record of periodic work: every run of a job, and every run of the
-- same work started by a direct call (counter.reconcile, rollup_refresh,
-- partition_maintain, ...: runner 'call', no job_id). Who ran it, when, how
-- it ended, the error whole, and the feature's own part (info: a tracked
-- run's drift, a refresh's rows, a maintenance run's partitions), for the
-- object object_id (counter_id, rollup_id; NULL for a partitioned table,
-- whose oid a restore changes: its runs are found by target, the
-- schema-qualified name its job has). The features'
-- views (counter.tracked_history, rollup_state, partition_status, ...) are
-- views over it (counter_internal.run_begin/run_end write it). Rows that
-- ended are deleted after counter_ext.history_retention; a row still
-- 'running' whose process is gone (crash, termination) is marked failed by
-- the next runner.
CREATE TABLE counter.job_runs (
    run_id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id         bigint,
    kind           text NOT NULL,
    target         text NOT NULL,
    runner         text NOT NULL CHECK (runner IN ('worker', 'session', 'call')),
    pid            integer NOT NULL,
    backend_start  timestamptz NOT NULL,
    started_at     timestamptz NOT NULL,
    finished_at    timestamptz,
    -- 'held': not run, because the job's object is not complete in this
    -- database yet (a restore still loading it; the reason in message)
    outcome        text NOT NULL CHECK (outcome IN ('running', 'succeeded', 'failed', 'held')),
    rows_affected  bigint,
    sqlstate       text,
    message        text,
    -- the session user of the process that ran the job (its owner)
    run_as         regrole,
    -- the rest of the error, kept whole (1.3)
    detail         text,
    hint           text,
    context        text,
    -- the object the run served, and the feature's own part of the record
    object_id      bigint,
    info           jsonb,
    CHECK ((outcome = 'running') = (finished_at IS NULL)),
    CONSTRAINT job_runs_call_check CHECK ((job_id IS NULL) = (runner = 'call'))
);
COMMENT ON TABLE counter.job_runs IS
    'every run of counter_ext''s periodic work (jobs and direct calls), trimmed after counter_ext.history_retention';
CREATE INDEX job_runs_job_idx ON counter.job_runs (job_id, run_id);
CREATE INDEX job_runs_object_idx ON counter.job_runs (kind, object_id, run_id);
CREATE INDEX job_runs_target_idx ON counter.job_runs (kind, target, run_id);
CREATE INDEX job_runs_finished_idx ON counter.job_runs (finished_at);
CREATE INDEX job_runs_running_idx ON counter.job_runs (run_id) WHERE outcome = 'running';

-- The jobs that may act on this database: a job is armed here once the
-- object it serves was seen complete in this database (counter.job_register
-- arms the job of an object it has just made). Not dumped, on purpose: a
-- restored job starts unarmed, and the runner holds it (outcome 'held',
-- with the reason) until every piece the restore makes for its object is
-- there (counter_internal.job_hold, doc/operations.md "While a restore
-- runs"). pg_upgrade copies it with the rest.
CREATE TABLE counter_internal.job_armed (
    job_id    bigint PRIMARY KEY REFERENCES counter.jobs ON DELETE CASCADE,
    armed_at  timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);
COMMENT ON TABLE counter_internal.job_armed IS 'jobs of counter_ext whose object was seen complete in this database (not dumped)';
REVOKE ALL ON TABLE counter_internal.job_armed FROM PUBLIC;

-- ---- src/sql/06_jobs_code.sql
-- The code of the jobs' catalog (05_jobs.sql): the status view, who owns a
-- job's target, the launcher's nudge, registering and removing jobs.
-- Functions and views only, so the update from 1.1 includes this piece as it
-- is.

-- One line per job with its latest run.
CREATE OR REPLACE VIEW counter.job_status AS
SELECT j.job_id, j.kind, j.target, j.enabled, j.run_every, j.next_run, j.failures,
       j.running_run IS NOT NULL AS running,
       r.started_at AS last_started, r.finished_at AS last_finished, r.outcome AS last_outcome,
       r.rows_affected AS last_rows, r.sqlstate AS last_sqlstate, r.message AS last_message,
       j.owner, j.disabled_reason
FROM counter.jobs j
LEFT JOIN LATERAL (
    SELECT x.started_at, x.finished_at, x.outcome, x.rows_affected, x.sqlstate, x.message
    FROM counter.job_runs x
    WHERE x.job_id OPERATOR(pg_catalog.=) j.job_id
    ORDER BY x.run_id DESC
    LIMIT 1) r ON true;

-- The one run record (counter.job_runs), written by every feature's
-- periodic work the same way, whether a job or a direct call started it.
-- run_begin: the run of (kind, target) this backend is running as a job (the
-- worker recorded its start), given the object and the feature's part; or,
-- for a direct call, a new row (runner 'call'). Without a worker nothing else
-- trims a call's history, so a start also deletes that object's runs that
-- ended before counter_ext.history_retention (a hundred at most).
CREATE OR REPLACE FUNCTION counter_internal.run_begin(kind text, target text, object_id bigint, info jsonb,
    started timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    run bigint;
    keep interval := coalesce(NULLIF(pg_catalog.current_setting('counter_ext.history_retention', true), ''),
                              '7 days')::interval;
BEGIN
    SELECT x.run_id INTO run
    FROM counter.jobs j JOIN counter.job_runs x ON x.run_id OPERATOR(pg_catalog.=) j.running_run
    WHERE j.kind OPERATOR(pg_catalog.=) run_begin.kind AND j.target OPERATOR(pg_catalog.=) run_begin.target
      AND x.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() AND x.outcome OPERATOR(pg_catalog.=) 'running';
    IF run IS NOT NULL THEN
        UPDATE counter.job_runs x SET object_id = run_begin.object_id,
            info = coalesce(x.info, '{}') OPERATOR(pg_catalog.||) run_begin.info
        WHERE x.run_id OPERATOR(pg_catalog.=) run;
        RETURN run;
    END IF;
    DELETE FROM counter.job_runs x WHERE x.run_id IN (
        SELECT y.run_id FROM counter.job_runs y
        WHERE y.kind OPERATOR(pg_catalog.=) run_begin.kind AND y.target OPERATOR(pg_catalog.=) run_begin.target
          AND y.finished_at OPERATOR(pg_catalog.<) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) keep)
        ORDER BY y.run_id LIMIT 100);
    INSERT INTO counter.job_runs AS x (job_id, kind, target, runner, pid, backend_start, started_at, outcome, run_as,
                                       object_id, info)
    VALUES (NULL, kind, target, 'call', pg_catalog.pg_backend_pid(),
            (SELECT a.backend_start FROM pg_catalog.pg_stat_get_activity(pg_catalog.pg_backend_pid()) a),
            coalesce(started, pg_catalog.clock_timestamp()), 'running', session_user::regrole, object_id, info)
    RETURNING x.run_id INTO run;
    RETURN run;
END
$$;

-- run_end: the feature's last part of run 'run' (and when it ended); a
-- direct call's row is finished here too (a job's by the worker, after the
-- job's procedure returns: rows_affected, outcome, the error whole). error,
-- when the run failed: {sqlstate, message, detail, hint, context}, kept whole
-- in a direct call's row.
CREATE OR REPLACE FUNCTION counter_internal.run_end(run bigint, info jsonb, rows_affected bigint DEFAULT NULL,
    error jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    now_ timestamptz := pg_catalog.clock_timestamp();
BEGIN
    UPDATE counter.job_runs x
    SET info = coalesce(x.info, '{}') OPERATOR(pg_catalog.||) run_end.info
               OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('finished_at', now_),
        outcome = CASE WHEN x.runner OPERATOR(pg_catalog.<>) 'call' THEN x.outcome
                       WHEN error IS NOT NULL THEN 'failed' ELSE 'succeeded' END,
        finished_at = CASE WHEN x.runner OPERATOR(pg_catalog.<>) 'call' THEN x.finished_at ELSE now_ END,
        rows_affected = CASE WHEN x.runner OPERATOR(pg_catalog.<>) 'call' THEN x.rows_affected
                             ELSE run_end.rows_affected END,
        sqlstate = CASE WHEN x.runner OPERATOR(pg_catalog.=) 'call' AND error IS NOT NULL
                        THEN error ->> 'sqlstate' ELSE x.sqlstate END,
        message = CASE WHEN x.runner OPERATOR(pg_catalog.=) 'call' AND error IS NOT NULL
                       THEN error ->> 'message' ELSE x.message END,
        detail = CASE WHEN x.runner OPERATOR(pg_catalog.=) 'call' AND error IS NOT NULL
                      THEN error ->> 'detail' ELSE x.detail END,
        hint = CASE WHEN x.runner OPERATOR(pg_catalog.=) 'call' AND error IS NOT NULL
                    THEN error ->> 'hint' ELSE x.hint END,
        context = CASE WHEN x.runner OPERATOR(pg_catalog.=) 'call' AND error IS NOT NULL
                       THEN error ->> 'context' ELSE x.context END
    WHERE x.run_id OPERATOR(pg_catalog.=) run;
END
$$;

-- run_interrupted: the runs of an object whose feature part still says
-- 'running' died (the caller holds the object's lock, so none runs): their
-- feature part says 'interrupted'; a direct call's row is failed (a job's
-- row is the worker's to fail: its process is gone).
CREATE OR REPLACE FUNCTION counter_internal.run_interrupted(kind text, object_id bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE counter.job_runs x
    SET info = x.info OPERATOR(pg_catalog.||) '{"outcome": "interrupted"}',
        outcome = CASE WHEN x.runner OPERATOR(pg_catalog.=) 'call' THEN 'failed' ELSE x.outcome END,
        finished_at = CASE WHEN x.runner OPERATOR(pg_catalog.=) 'call'
                           THEN coalesce(x.finished_at, pg_catalog.clock_timestamp()) ELSE x.finished_at END,
        message = CASE WHEN x.runner OPERATOR(pg_catalog.=) 'call' AND x.outcome OPERATOR(pg_catalog.=) 'running'
                       THEN 'interrupted: its session ended before it finished' ELSE x.message END
    WHERE x.kind OPERATOR(pg_catalog.=) run_interrupted.kind
      AND x.object_id OPERATOR(pg_catalog.=) run_interrupted.object_id
      AND x.info ->> 'outcome' OPERATOR(pg_catalog.=) 'running';
END
$$;

-- run_forget: an object's history goes with the object (found by its id,
-- or by its target when it has none).
CREATE OR REPLACE FUNCTION counter_internal.run_forget(kind text, object_id bigint, target text DEFAULT NULL)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    DELETE FROM counter.job_runs x
    WHERE x.kind OPERATOR(pg_catalog.=) run_forget.kind
      AND (x.object_id OPERATOR(pg_catalog.=) run_forget.object_id
           OR (run_forget.object_id IS NULL AND x.target OPERATOR(pg_catalog.=) run_forget.target))
$$;

-- The owner of the object a job serves, found from its target: the owner
-- the feature records (counter.tracked.owner, counter.rollups.owner: the
-- role its own checks and its state belong to), or the partitioned table's
-- owner (which follows ALTER TABLE ... OWNER TO and REASSIGN OWNED). NULL when
-- the target is gone or the kind is not a built-in one. (PL/pgSQL: the
-- features' catalogs are made by later pieces.)
CREATE OR REPLACE FUNCTION counter_internal.job_target_owner(kind text, target text)
RETURNS regrole
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN CASE kind
        WHEN 'reconcile' THEN
            (SELECT t.owner FROM counter.tracked t WHERE t.name OPERATOR(pg_catalog.=) target)
        WHEN 'flush' THEN
            (SELECT t.owner FROM counter.tracked t WHERE t.name OPERATOR(pg_catalog.=) target)
        WHEN 'rollup_refresh' THEN
            (SELECT r.owner FROM counter.rollups r WHERE r.name OPERATOR(pg_catalog.=) target)
        WHEN 'partition_maintenance' THEN
            (SELECT c.relowner::regrole FROM pg_catalog.pg_class c
             WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(target))
        END;
END
$$;
REVOKE ALL ON FUNCTION counter_internal.job_target_owner(text, text) FROM PUBLIC;

-- Tells the launcher (when the library is preloaded) that the database has a
-- job of 'owner' due at 'due', once the transaction commits.
CREATE OR REPLACE FUNCTION counter_internal.job_nudge(owner oid, due timestamptz)
RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'counter_job_nudge';
REVOKE ALL ON FUNCTION counter_internal.job_nudge(oid, timestamptz) FROM PUBLIC;

-- Registers (or re-enables with a new interval) the job of a target; returns
-- its id. 'owner' is the owner of the object the job serves, given by the
-- registering feature (NULL: found from the target, see
-- counter_internal.job_target_owner).
CREATE OR REPLACE FUNCTION counter.job_register(kind text, target text, run_every interval, owner regrole DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    id bigint;
    who regrole := job_register.owner;
BEGIN
    IF kind IS NULL OR target IS NULL OR run_every IS NULL THEN
        RAISE EXCEPTION 'kind, target and run_every must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF kind !~ '^[a-z][a-z0-9_]{0,58}$' THEN
        RAISE EXCEPTION 'invalid job kind "%"', kind
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A kind is lower-case letters, digits and "_", starting with a letter.';
    END IF;
    IF run_every <= interval '0' THEN
        RAISE EXCEPTION 'run_every must be a positive interval, not %', run_every
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM counter_internal.job_kinds k WHERE k.kind OPERATOR(pg_catalog.=) job_register.kind) THEN
        RAISE EXCEPTION 'unknown job kind "%"', kind
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'The kinds are the rows of counter_internal.job_kinds.';
    END IF;
    who := coalesce(who, counter_internal.job_target_owner(kind, target));
    IF who IS NULL THEN
        RAISE EXCEPTION 'the owner of job target "%" (kind %) is unknown', target, kind
            USING ERRCODE = 'undefined_object', HINT = 'Pass owner => the role that owns the target.';
    END IF;
    INSERT INTO counter.jobs AS j (kind, target, run_every, owner)
    VALUES (job_register.kind, job_register.target, job_register.run_every, who)
    ON CONFLICT ON CONSTRAINT jobs_kind_target_key DO UPDATE
        SET run_every = EXCLUDED.run_every, enabled = true, failures = 0, next_run = pg_catalog.now(),
            owner = EXCLUDED.owner, disabled_reason = NULL
    RETURNING j.job_id INTO id;
    -- the feature registering the job has just made its object: armed here
    INSERT INTO counter_internal.job_armed AS a (job_id) VALUES (id)
    ON CONFLICT (job_id) DO NOTHING;
    PERFORM counter_internal.job_nudge(who::oid, pg_catalog.now());
    RETURN id;
END
$$;

-- Removes the job of a target; true when there was one. Its history stays
-- until the retention trims it.
CREATE OR REPLACE FUNCTION counter.job_unregister(kind text, target text)
RETURNS boolean
LANGUAGE sql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    WITH gone AS (
        DELETE FROM counter.jobs j
        WHERE j.kind OPERATOR(pg_catalog.=) job_unregister.kind
          AND j.target OPERATOR(pg_catalog.=) job_unregister.target
        RETURNING 1)
    SELECT count(*) > 0 FROM gone
$$;
REVOKE ALL ON FUNCTION counter.job_register(text, text, interval, regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.job_unregister(text, text) FROM PUBLIC;

-- ---- While a restore runs (doc/operations.md, "While a restore runs")
--
-- pg_restore (without --single-transaction, with -j N or not) makes a
-- database in steps that other sessions see one by one: CREATE EXTENSION,
-- the tables, then the rows (counter_ext's catalog rows among them: they are
-- extension configuration, dumped as data), then indexes, constraints and
-- triggers. pg_restore creates a table's indexes, constraints and triggers
-- only after that table's rows are loaded (it makes every post-data item of
-- a table wait for the table's data, -j included). So the pieces below,
-- which every object of counter_ext has once it is complete, are proof that
-- the rows they depend on are all in:
--   tracked counter (reconcile, flush): its catalog row; its triggers on the
--     source (trigger mode), enabled; the primary keys of its state tables
--     tracked_N_base and tracked_N_delta;
--   rollup (rollup_refresh): its catalog row; its three triggers on the
--     source, enabled; the primary key of its rollup table;
--   managed partitioned table (partition_maintenance): its catalog row;
--   and for a partitioned source or managed table: every index of the
--     parent valid (a partitioned index is valid once the index of every
--     partition is attached, which pg_restore does after that partition's
--     rows).
-- What this cannot see is documented: a partitioned table without any
-- index, the source of an application-mode counter, other kinds' targets.
--
-- Returns why the job's object is not complete in this database (NULL when
-- it is). Reads catalogs only.
CREATE OR REPLACE FUNCTION counter_internal.job_incomplete(kind text, target text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t counter.tracked;
    r counter.rollups;
    managed regclass;
    src regclass;
    want name[];
    missing text;
    off text;
    tbl regclass;
BEGIN
    IF kind OPERATOR(pg_catalog.=) ANY (ARRAY['reconcile', 'flush']) THEN
        SELECT * INTO t FROM counter.tracked c WHERE c.name OPERATOR(pg_catalog.=) target;
        IF NOT FOUND THEN
            RETURN format('tracked counter "%s" is not in counter.tracked (a restore loads that table''s rows later)',
                          target);
        END IF;
        src := t.source;
        IF t.mode OPERATOR(pg_catalog.=) 'trigger' THEN
            want := ARRAY[format('counter_%s_ins', t.counter_id), format('counter_%s_del', t.counter_id),
                          format('counter_%s_upd', t.counter_id), format('counter_%s_trunc', t.counter_id)]::name[];
            IF t.replicated THEN
                want := want OPERATOR(pg_catalog.||) ARRAY[format('counter_%s_rins', t.counter_id),
                    format('counter_%s_rdel', t.counter_id), format('counter_%s_rupd', t.counter_id),
                    format('counter_%s_rtrunc', t.counter_id)]::name[];
            END IF;
        END IF;
        FOREACH tbl IN ARRAY ARRAY[pg_catalog.to_regclass(counter_internal.tracked_table(t, 'base')),
                                   pg_catalog.to_regclass(counter_internal.tracked_table(t, 'delta'))] LOOP
            IF tbl IS NULL OR NOT EXISTS (SELECT FROM pg_catalog.pg_index i
                                          WHERE i.indrelid OPERATOR(pg_catalog.=) tbl AND i.indisprimary
                                            AND i.indisvalid) THEN
                RETURN format('the state table %s of tracked counter "%s" has no primary key yet '
                              '(a restore makes it after the table''s rows)',
                              coalesce(tbl::text, counter_internal.tracked_table(t, 'base')), t.name);
            END IF;
        END LOOP;
    ELSIF kind OPERATOR(pg_catalog.=) 'rollup_refresh' THEN
        SELECT * INTO r FROM counter.rollups c WHERE c.name OPERATOR(pg_catalog.=) target;
        IF NOT FOUND THEN
            RETURN format('rollup "%s" is not in counter.rollups (a restore loads that table''s rows later)', target);
        END IF;
        src := r.source;
        want := ARRAY[format('counter_rollup_%s_insert', r.rollup_id), format('counter_rollup_%s_delete', r.rollup_id),
                      format('counter_rollup_%s_update', r.rollup_id)]::name[];
        IF r.replicated THEN
            want := want OPERATOR(pg_catalog.||) ARRAY[format('counter_rollup_%s_rinsert', r.rollup_id),
                format('counter_rollup_%s_rdelete', r.rollup_id), format('counter_rollup_%s_rupdate', r.rollup_id)]::name[];
        END IF;
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_index i
                       WHERE i.indrelid OPERATOR(pg_catalog.=) r.rollup_table AND i.indisprimary AND i.indisvalid) THEN
            RETURN format('the rollup table %s of rollup "%s" has no primary key yet '
                          '(a restore makes it after the table''s rows)', r.rollup_table, r.name);
        END IF;
    ELSIF kind OPERATOR(pg_catalog.=) 'partition_maintenance' THEN
        managed := pg_catalog.to_regclass(target);
        IF managed IS NULL OR NOT EXISTS (SELECT FROM counter.partitioned_tables p
                                          WHERE p.parent OPERATOR(pg_catalog.=) managed) THEN
            RETURN format('table %s is not in counter.partitioned_tables (a restore loads that table''s rows later)',
                          target);
        END IF;
        src := managed;
    ELSE
        RETURN NULL;   -- a kind of a superuser's own: its target is not known here
    END IF;
    IF want IS NOT NULL THEN
        SELECT pg_catalog.string_agg(w, ', ' ORDER BY w) INTO missing
        FROM pg_catalog.unnest(want) w
        WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_trigger g
                          WHERE g.tgrelid OPERATOR(pg_catalog.=) src AND g.tgname OPERATOR(pg_catalog.=) w);
        IF missing IS NOT NULL THEN
            RETURN format('trigger(s) %s on %s not there yet (a restore creates a table''s triggers after its rows)',
                          missing, src);
        END IF;
        -- (a counter whose triggers its owner disabled, triggers_off, was
        -- dumped with them disabled: that is its complete state)
        SELECT pg_catalog.string_agg(g.tgname::text, ', ' ORDER BY g.tgname) INTO off
        FROM pg_catalog.pg_trigger g
        WHERE g.tgrelid OPERATOR(pg_catalog.=) src AND g.tgname OPERATOR(pg_catalog.=) ANY (want)
          AND g.tgenabled OPERATOR(pg_catalog.=) 'D' AND NOT coalesce(t.triggers_off, false);
        IF off IS NOT NULL THEN
            RETURN format('trigger(s) %s on %s are disabled (pg_restore --disable-triggers loads rows with them off; '
                          'ALTER TABLE %s ENABLE TRIGGER ... once the rows are in)', off, src, src);
        END IF;
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) src
                                                   AND c.relkind OPERATOR(pg_catalog.=) 'p') THEN
        SELECT pg_catalog.string_agg(i.indexrelid::regclass::text, ', ' ORDER BY i.indexrelid::regclass::text)
        INTO missing
        FROM pg_catalog.pg_index i
        WHERE i.indrelid OPERATOR(pg_catalog.=) src AND NOT i.indisvalid;
        IF missing IS NOT NULL THEN
            RETURN format('index(es) %s of the partitioned table %s are not valid yet (a restore attaches each '
                          'partition''s index after the partition''s rows)', missing, src);
        END IF;
    END IF;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION counter_internal.job_incomplete(text, text) FROM PUBLIC;

-- Called by the job runner (as the extension's owner) before it runs a job:
-- NULL when the job may act on this database, else why it is held. A job not
-- yet armed here (a restored one) is armed once its object is complete; a
-- restored tracked counter's first armed run then verifies every key (its
-- rows were loaded without its triggers).
CREATE OR REPLACE FUNCTION counter_internal.job_hold(job_id bigint)
RETURNS text
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    j counter.jobs;
    why text;
BEGIN
    IF EXISTS (SELECT FROM counter_internal.job_armed a WHERE a.job_id OPERATOR(pg_catalog.=) job_hold.job_id) THEN
        RETURN NULL;
    END IF;
    SELECT * INTO j FROM counter.jobs x WHERE x.job_id OPERATOR(pg_catalog.=) job_hold.job_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    why := counter_internal.job_incomplete(j.kind, j.target);
    IF why IS NOT NULL THEN
        RETURN why;
    END IF;
    INSERT INTO counter_internal.job_armed AS a (job_id) VALUES (j.job_id) ON CONFLICT (job_id) DO NOTHING;
    IF j.kind OPERATOR(pg_catalog.=) 'reconcile' THEN
        UPDATE counter.tracked c SET full_pending = true, verify_after = NULL
        WHERE c.name OPERATOR(pg_catalog.=) j.target;
    END IF;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION counter_internal.job_hold(bigint) FROM PUBLIC;

-- Rows added to counter.jobs by anything but counter.job_register (a restore
-- loading them with COPY) are told to the launcher at commit, so a restored
-- job is tried, and held or run, when it falls due, not at the next survey.
CREATE OR REPLACE FUNCTION counter_internal.jobs_inserted()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM counter_internal.job_nudge(n.owner::oid, pg_catalog.min(n.next_run))
    FROM new_jobs n
    WHERE n.enabled AND n.owner IS NOT NULL
    GROUP BY n.owner;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION counter_internal.jobs_inserted() FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- The one commit loop of periodic work (doc/reference/worker.md, "How
-- periodic work runs"). A feature provides a step function,
--   counter.<feature>_run_step(target text, args jsonb, state jsonb) -> jsonb,
-- an entry point that checks its caller (the owner of what it serves) and
-- does one bounded piece of work in the caller's transaction:
--   state NULL          begin: check, lock, start the run (run_begin);
--   state               the next step;
--   state with 'stop'   end the run now as partial (the time is up);
--   state with 'error'  the last step failed (its work rolled back): record
--                       the error, whole, and end the run.
-- It returns the state for the next step, with 'finished' (the run ended:
-- run_end was called), 'rows' (rows_affected so far), and its progress:
-- 'phase', 'done', 'total'. The shared part, below, commits after every
-- step, reports the progress (counter.running_jobs, pg_stat_activity),
-- stops before the statement's timeout would cancel a step, and on an error
-- has it recorded and committed, then raises it again whole.

-- The step of kind 'kind': the feature's step function (every kind that
-- runs through counter.run_steps is named here, and nothing else runs).
CREATE OR REPLACE FUNCTION counter.run_step(kind text, target text, args jsonb, state jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    result jsonb;
BEGIN
    IF kind IS NULL OR args IS NULL THEN
        RAISE EXCEPTION 'kind and args of counter.run_step must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    result := CASE kind
        WHEN 'reconcile' THEN counter.tracked_run_step(target, args, state)
        WHEN 'rollup_refresh' THEN counter.rollup_run_step(target, args, state)
        WHEN 'partition_maintenance' THEN counter.partition_run_step(target, args, state)
    END;
    IF result IS NULL THEN
        RAISE EXCEPTION 'counter_ext has no periodic work of kind "%"', kind USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT coalesce((result ->> 'finished')::boolean, false) THEN
        PERFORM counter.job_progress(result ->> 'phase', (result ->> 'done')::bigint, (result ->> 'total')::bigint);
    END IF;
    RETURN result;
END
$$;
COMMENT ON FUNCTION counter.run_step(text, text, jsonb, jsonb) IS
    'one step of counter_ext''s periodic work of a kind (called by counter.run_steps)';

-- When the statement running now is cancelled by its timeout (a job's
-- timeout, or statement_timeout), or NULL when no timeout is armed.
CREATE OR REPLACE FUNCTION counter.run_deadline()
RETURNS timestamptz
LANGUAGE c VOLATILE PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'counter_run_deadline';
COMMENT ON FUNCTION counter.run_deadline() IS
    'when the running statement''s timeout (a job''s, or statement_timeout) would cancel it; NULL without one';

-- Raises an error given its parts (what a failed step raised, again, after
-- the failure is recorded); the original context goes first in the context.
CREATE OR REPLACE FUNCTION counter.run_reraise(sqlstate text, message text, detail text DEFAULT NULL,
    hint text DEFAULT NULL, context text DEFAULT NULL)
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_run_reraise';
COMMENT ON FUNCTION counter.run_reraise(text, text, text, text, text) IS
    'raises an error of the given SQLSTATE, message, detail, hint and context (a failed step''s, after its record)';

-- The loop: one transaction per step. A procedure that COMMITs may have
-- neither SET nor SECURITY DEFINER, so it only calls schema-qualified
-- functions and uses schema-qualified operators; result = the last state.
-- A step that would likely not end before the deadline is not started: the
-- run ends as partial instead (twice the longest step so far must fit).
CREATE OR REPLACE PROCEDURE counter.run_steps(kind text, target text, args jsonb DEFAULT '{}',
    INOUT result jsonb DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    st pg_catalog.jsonb;
    deadline pg_catalog.timestamptz;
    began pg_catalog.timestamptz;
    longest pg_catalog.interval := '0';
    e_state pg_catalog.text;
    e_message pg_catalog.text;
    e_detail pg_catalog.text;
    e_hint pg_catalog.text;
    e_context pg_catalog.text;
BEGIN
    st := counter.run_step(kind, target, args, NULL);
    LOOP
        EXIT WHEN pg_catalog.jsonb_extract_path_text(st, 'finished') OPERATOR(pg_catalog.=) 'true';
        COMMIT;
        deadline := counter.run_deadline();
        IF deadline IS NOT NULL AND pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) longest
                OPERATOR(pg_catalog.+) longest OPERATOR(pg_catalog.>=) deadline THEN
            st := counter.run_step(kind, target, args,
                                   st OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('stop', 'timeout'));
            EXIT;
        END IF;
        began := pg_catalog.clock_timestamp();
        BEGIN
            st := counter.run_step(kind, target, args, st);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT,
                e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT, e_context = PG_EXCEPTION_CONTEXT;
        END;
        IF e_state IS NOT NULL THEN
            st := counter.run_step(kind, target, args, st OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('error',
                pg_catalog.jsonb_build_object('sqlstate', e_state, 'message', e_message,
                    'detail', NULLIF(e_detail, ''), 'hint', NULLIF(e_hint, ''), 'context', NULLIF(e_context, ''))));
            COMMIT;
            PERFORM counter.run_reraise(e_state, e_message, e_detail, e_hint, e_context);
        END IF;
        longest := pg_catalog.interval_larger(longest, pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) began);
    END LOOP;
    COMMIT;
    result := st;
END
$$;
COMMENT ON PROCEDURE counter.run_steps(text, text, jsonb, jsonb) IS
    'runs counter_ext''s periodic work of a kind on a target, one transaction per step (CALL it outside a transaction block)';

-- ---- src/sql/10_hll.sql
-- counter.hll: a HyperLogLog-family distinct-count sketch (doc/reference/hll.md,
-- storage format in doc/hll-storage.md). Sketches merge with a union that is
-- commutative, associative and idempotent; the same set of values gives the
-- same bytes however it was added, split and merged.

CREATE TYPE counter.hll;

CREATE FUNCTION counter.hll_in(cstring, oid, integer) RETURNS counter.hll
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_in';
CREATE FUNCTION counter.hll_out(counter.hll) RETURNS cstring
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_out';
CREATE FUNCTION counter.hll_recv(internal, oid, integer) RETURNS counter.hll
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_recv';
CREATE FUNCTION counter.hll_send(counter.hll) RETURNS bytea
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_send';
CREATE FUNCTION counter.hll_typmod_in(cstring[]) RETURNS integer
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_typmod_in';
CREATE FUNCTION counter.hll_typmod_out(integer) RETURNS cstring
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_typmod_out';

CREATE TYPE counter.hll (
    INPUT = counter.hll_in,
    OUTPUT = counter.hll_out,
    RECEIVE = counter.hll_recv,
    SEND = counter.hll_send,
    TYPMOD_IN = counter.hll_typmod_in,
    TYPMOD_OUT = counter.hll_typmod_out,
    INTERNALLENGTH = VARIABLE,
    STORAGE = extended
);
COMMENT ON TYPE counter.hll IS
    'HyperLogLog distinct-count sketch; typmod = precision (4..18), e.g. counter.hll(14)';

-- The typmod cast: a sketch of higher precision folds down to the column's.
CREATE FUNCTION counter.hll(counter.hll, integer, boolean) RETURNS counter.hll
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_enforce_typmod';
CREATE CAST (counter.hll AS counter.hll) WITH FUNCTION counter.hll(counter.hll, integer, boolean) AS IMPLICIT;

-- bytea holds the same bytes; the way in is validated, the way out is free.
CREATE FUNCTION counter.hll_from_bytea(bytea) RETURNS counter.hll
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_from_bytea';
CREATE CAST (bytea AS counter.hll) WITH FUNCTION counter.hll_from_bytea(bytea);
CREATE CAST (counter.hll AS bytea) WITHOUT FUNCTION;

-- ---- scalar functions

CREATE FUNCTION counter.hll_empty("precision" integer DEFAULT NULL) RETURNS counter.hll
LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_empty';
COMMENT ON FUNCTION counter.hll_empty(integer) IS
    'an empty sketch of the given precision (NULL: counter_ext.hll_default_precision)';

CREATE FUNCTION counter.hll_add(counter.hll, anyelement) RETURNS counter.hll
LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_add';
COMMENT ON FUNCTION counter.hll_add(counter.hll, anyelement) IS
    'the sketch with one value added (a NULL value leaves it unchanged)';

CREATE FUNCTION counter.hll_add_array(counter.hll, anyarray) RETURNS counter.hll
LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_add_array';
COMMENT ON FUNCTION counter.hll_add_array(counter.hll, anyarray) IS
    'the sketch with every non-NULL element of the array added (a NULL array leaves it unchanged)';

CREATE FUNCTION counter.hll_union(counter.hll, counter.hll) RETURNS counter.hll
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_union';
COMMENT ON FUNCTION counter.hll_union(counter.hll, counter.hll) IS
    'union of two sketches, at the lower precision of the non-empty ones';

CREATE OPERATOR counter.|| (
    LEFTARG = counter.hll, RIGHTARG = counter.hll, FUNCTION = counter.hll_union, COMMUTATOR = OPERATOR(counter.||)
);

CREATE FUNCTION counter.hll_cardinality(counter.hll) RETURNS double precision
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_cardinality';
COMMENT ON FUNCTION counter.hll_cardinality(counter.hll) IS 'estimated number of distinct values';

CREATE OPERATOR counter.# (RIGHTARG = counter.hll, FUNCTION = counter.hll_cardinality);

CREATE FUNCTION counter.hll_info(sketch counter.hll, OUT "precision" integer, OUT representation text,
                                 OUT bytes integer, OUT format_version integer, OUT entries bigint)
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_info';
COMMENT ON FUNCTION counter.hll_info(counter.hll) IS
    'precision, representation (empty, sparse, dense), serialized bytes, format version, entries or set registers';

CREATE FUNCTION counter.hll_hash(anyelement) RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_hash_value';
COMMENT ON FUNCTION counter.hll_hash(anyelement) IS
    'the pinned 64-bit hash (XXH3-64, seed 0) a sketch uses for a value, as a signed bigint';

-- ---- comparison: bytewise over the canonical form, so equal sets are equal

CREATE FUNCTION counter.hll_eq(counter.hll, counter.hll) RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'MODULE_PATHNAME', 'counter_hll_eq';
CREATE FUNCTION counter.hll_ne(counter.hll, counter.hll) RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'MODULE_PATHNAME', 'counter_hll_ne';
CREATE FUNCTION counter.hll_lt(counter.hll, counter.hll) RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'MODULE_PATHNAME', 'counter_hll_lt';
CREATE FUNCTION counter.hll_le(counter.hll, counter.hll) RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'MODULE_PATHNAME', 'counter_hll_le';
CREATE FUNCTION counter.hll_gt(counter.hll, counter.hll) RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'MODULE_PATHNAME', 'counter_hll_gt';
CREATE FUNCTION counter.hll_ge(counter.hll, counter.hll) RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'MODULE_PATHNAME', 'counter_hll_ge';
CREATE FUNCTION counter.hll_cmp(counter.hll, counter.hll) RETURNS integer
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'MODULE_PATHNAME', 'counter_hll_cmp';
CREATE FUNCTION counter.hll_hash_sketch(counter.hll) RETURNS integer
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'MODULE_PATHNAME', 'counter_hll_hash';
CREATE FUNCTION counter.hll_hash_sketch_extended(counter.hll, bigint) RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'MODULE_PATHNAME', 'counter_hll_hash_extended';

CREATE OPERATOR counter.= (
    LEFTARG = counter.hll, RIGHTARG = counter.hll, FUNCTION = counter.hll_eq,
    COMMUTATOR = OPERATOR(counter.=), NEGATOR = OPERATOR(counter.<>),
    RESTRICT = eqsel, JOIN = eqjoinsel, HASHES, MERGES
);
CREATE OPERATOR counter.<> (
    LEFTARG = counter.hll, RIGHTARG = counter.hll, FUNCTION = counter.hll_ne,
    COMMUTATOR = OPERATOR(counter.<>), NEGATOR = OPERATOR(counter.=),
    RESTRICT = neqsel, JOIN = neqjoinsel
);
CREATE OPERATOR counter.< (
    LEFTARG = counter.hll, RIGHTARG = counter.hll, FUNCTION = counter.hll_lt,
    COMMUTATOR = OPERATOR(counter.>), NEGATOR = OPERATOR(counter.>=),
    RESTRICT = scalarltsel, JOIN = scalarltjoinsel
);
CREATE OPERATOR counter.<= (
    LEFTARG = counter.hll, RIGHTARG = counter.hll, FUNCTION = counter.hll_le,
    COMMUTATOR = OPERATOR(counter.>=), NEGATOR = OPERATOR(counter.>),
    RESTRICT = scalarlesel, JOIN = scalarlejoinsel
);
CREATE OPERATOR counter.> (
    LEFTARG = counter.hll, RIGHTARG = counter.hll, FUNCTION = counter.hll_gt,
    COMMUTATOR = OPERATOR(counter.<), NEGATOR = OPERATOR(counter.<=),
    RESTRICT = scalargtsel, JOIN = scalargtjoinsel
);
CREATE OPERATOR counter.>= (
    LEFTARG = counter.hll, RIGHTARG = counter.hll, FUNCTION = counter.hll_ge,
    COMMUTATOR = OPERATOR(counter.<=), NEGATOR = OPERATOR(counter.<),
    RESTRICT = scalargesel, JOIN = scalargejoinsel
);

CREATE OPERATOR CLASS counter.hll_ops DEFAULT FOR TYPE counter.hll USING btree AS
    OPERATOR 1 counter.<, OPERATOR 2 counter.<=, OPERATOR 3 counter.=,
    OPERATOR 4 counter.>=, OPERATOR 5 counter.>,
    FUNCTION 1 counter.hll_cmp(counter.hll, counter.hll);
CREATE OPERATOR CLASS counter.hll_hash_ops DEFAULT FOR TYPE counter.hll USING hash AS
    OPERATOR 1 counter.=,
    FUNCTION 1 counter.hll_hash_sketch(counter.hll),
    FUNCTION 2 counter.hll_hash_sketch_extended(counter.hll, bigint);

-- ---- aggregates: internal state that starts sparse and small, palloc'd in
-- the aggregate context; combine/serialize/deserialize for parallel query.

CREATE FUNCTION counter.hll_add_trans(internal, anyelement) RETURNS internal
LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_add_trans';
CREATE FUNCTION counter.hll_add_trans(internal, anyelement, integer) RETURNS internal
LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_add_trans';
CREATE FUNCTION counter.hll_union_trans(internal, counter.hll) RETURNS internal
LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_union_trans';
CREATE FUNCTION counter.hll_combine(internal, internal) RETURNS internal
LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_combine';
CREATE FUNCTION counter.hll_serialize(internal) RETURNS bytea
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_serialize';
CREATE FUNCTION counter.hll_deserialize(bytea, internal) RETURNS internal
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_deserialize';
CREATE FUNCTION counter.hll_final(internal) RETURNS counter.hll
LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_final';
CREATE FUNCTION counter.hll_count_final(internal) RETURNS bigint
LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_count_final';

CREATE AGGREGATE counter.hll_add_agg(anyelement) (
    SFUNC = counter.hll_add_trans, STYPE = internal, SSPACE = 1024,
    FINALFUNC = counter.hll_final,
    COMBINEFUNC = counter.hll_combine, SERIALFUNC = counter.hll_serialize, DESERIALFUNC = counter.hll_deserialize,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE counter.hll_add_agg(anyelement) IS
    'sketch of the distinct non-NULL values (empty sketch over no rows), at the default precision';

CREATE AGGREGATE counter.hll_add_agg(anyelement, integer) (
    SFUNC = counter.hll_add_trans, STYPE = internal, SSPACE = 1024,
    FINALFUNC = counter.hll_final,
    COMBINEFUNC = counter.hll_combine, SERIALFUNC = counter.hll_serialize, DESERIALFUNC = counter.hll_deserialize,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE counter.hll_add_agg(anyelement, integer) IS
    'sketch of the distinct non-NULL values at the given precision (4..18)';

CREATE AGGREGATE counter.hll_union_agg(counter.hll) (
    SFUNC = counter.hll_union_trans, STYPE = internal, SSPACE = 1024,
    FINALFUNC = counter.hll_final,
    COMBINEFUNC = counter.hll_combine, SERIALFUNC = counter.hll_serialize, DESERIALFUNC = counter.hll_deserialize,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE counter.hll_union_agg(counter.hll) IS
    'union of the non-NULL sketches (empty sketch over no rows), at the lowest precision among the non-empty ones';

CREATE AGGREGATE counter.hll_count_distinct(anyelement) (
    SFUNC = counter.hll_add_trans, STYPE = internal, SSPACE = 1024,
    FINALFUNC = counter.hll_count_final,
    COMBINEFUNC = counter.hll_combine, SERIALFUNC = counter.hll_serialize, DESERIALFUNC = counter.hll_deserialize,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE counter.hll_count_distinct(anyelement) IS
    'estimated count of distinct non-NULL values, rounded (0 over no rows); one pass, no sketch kept';

-- ---- src/sql/20_pncounter.sql
-- counter.pncounter: the PN-counter CRDT (the Riak counter). Per node id, a
-- total of increments (P) and of decrements (N); merge takes the per-node
-- maximum, the value is sum(P) - sum(N). Primaries that exchange states in any
-- order, any number of times, converge. See doc/reference/pncounter.md.

CREATE TYPE counter.pncounter;

CREATE FUNCTION counter.pncounter_in(cstring)
RETURNS counter.pncounter
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_in';

CREATE FUNCTION counter.pncounter_out(counter.pncounter)
RETURNS cstring
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_out';

CREATE FUNCTION counter.pncounter_recv(internal)
RETURNS counter.pncounter
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_recv';

CREATE FUNCTION counter.pncounter_send(counter.pncounter)
RETURNS bytea
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_send';

CREATE TYPE counter.pncounter (
    INPUT = counter.pncounter_in,
    OUTPUT = counter.pncounter_out,
    RECEIVE = counter.pncounter_recv,
    SEND = counter.pncounter_send,
    INTERNALLENGTH = VARIABLE,
    STORAGE = extended
);
COMMENT ON TYPE counter.pncounter IS
    'PN-counter CRDT: per-node increment and decrement totals that merge across primaries; text form {"node":[P,N],...}';

-- Increments and decrements count for one node: the node argument, or this
-- server's counter_ext.node_id. The amount is positive; a NULL state is the
-- empty counter. STABLE: the default node is a setting.
CREATE FUNCTION counter.pncounter_increment(c counter.pncounter, amount bigint DEFAULT 1, node text DEFAULT NULL)
RETURNS counter.pncounter
LANGUAGE c STABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_increment';
COMMENT ON FUNCTION counter.pncounter_increment(counter.pncounter, bigint, text) IS
    'adds amount (> 0) to the increments of node (default counter_ext.node_id)';

CREATE FUNCTION counter.pncounter_decrement(c counter.pncounter, amount bigint DEFAULT 1, node text DEFAULT NULL)
RETURNS counter.pncounter
LANGUAGE c STABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_decrement';
COMMENT ON FUNCTION counter.pncounter_decrement(counter.pncounter, bigint, text) IS
    'adds amount (> 0) to the decrements of node (default counter_ext.node_id)';

CREATE FUNCTION counter.pncounter_value(c counter.pncounter)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_value';
COMMENT ON FUNCTION counter.pncounter_value(counter.pncounter) IS
    'sum of increments minus sum of decrements over all nodes';

CREATE CAST (counter.pncounter AS bigint) WITH FUNCTION counter.pncounter_value(counter.pncounter);

-- bytea holds the same bytes (the binary form): the way in is validated like
-- recv, the way out is free.
CREATE FUNCTION counter.pncounter_from_bytea(bytea)
RETURNS counter.pncounter
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_from_bytea';
CREATE CAST (bytea AS counter.pncounter) WITH FUNCTION counter.pncounter_from_bytea(bytea);
CREATE CAST (counter.pncounter AS bytea) WITHOUT FUNCTION;

CREATE FUNCTION counter.pncounter_merge(a counter.pncounter, b counter.pncounter)
RETURNS counter.pncounter
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_merge';
COMMENT ON FUNCTION counter.pncounter_merge(counter.pncounter, counter.pncounter) IS
    'per-node maximum of two states: commutative, associative, idempotent';

CREATE OPERATOR counter.|| (
    LEFTARG = counter.pncounter,
    RIGHTARG = counter.pncounter,
    FUNCTION = counter.pncounter_merge,
    COMMUTATOR = OPERATOR(counter.||)
);

CREATE FUNCTION counter.pncounter_nodes(c counter.pncounter,
    OUT node text, OUT increments bigint, OUT decrements bigint)
RETURNS SETOF record
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE ROWS 4
AS 'MODULE_PATHNAME', 'counter_pncounter_nodes';
COMMENT ON FUNCTION counter.pncounter_nodes(counter.pncounter) IS
    'one row per node: its increment and decrement totals, in node id order';

-- Equality: states are canonical, so equal states have equal bytes.
CREATE FUNCTION counter.pncounter_eq(counter.pncounter, counter.pncounter)
RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF
AS 'MODULE_PATHNAME', 'counter_pncounter_eq';

CREATE FUNCTION counter.pncounter_ne(counter.pncounter, counter.pncounter)
RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF
AS 'MODULE_PATHNAME', 'counter_pncounter_ne';

CREATE FUNCTION counter.pncounter_hash(counter.pncounter)
RETURNS integer
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_hash';

CREATE FUNCTION counter.pncounter_hash_extended(counter.pncounter, bigint)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_hash_extended';

CREATE OPERATOR counter.= (
    LEFTARG = counter.pncounter,
    RIGHTARG = counter.pncounter,
    FUNCTION = counter.pncounter_eq,
    COMMUTATOR = OPERATOR(counter.=),
    NEGATOR = OPERATOR(counter.<>),
    RESTRICT = pg_catalog.eqsel,
    JOIN = pg_catalog.eqjoinsel,
    HASHES
);

CREATE OPERATOR counter.<> (
    LEFTARG = counter.pncounter,
    RIGHTARG = counter.pncounter,
    FUNCTION = counter.pncounter_ne,
    COMMUTATOR = OPERATOR(counter.<>),
    NEGATOR = OPERATOR(counter.=),
    RESTRICT = pg_catalog.neqsel,
    JOIN = pg_catalog.neqjoinsel
);

-- GROUP BY, DISTINCT, UNION and hash joins on states.
CREATE OPERATOR CLASS counter.pncounter_hash_ops
DEFAULT FOR TYPE counter.pncounter USING hash AS
    OPERATOR 1 counter.= (counter.pncounter, counter.pncounter),
    FUNCTION 1 counter.pncounter_hash(counter.pncounter),
    FUNCTION 2 counter.pncounter_hash_extended(counter.pncounter, bigint);

-- The merge aggregate. The state lives in the aggregate context; partial
-- states travel between parallel workers as the canonical bytes.
CREATE FUNCTION counter.pncounter_agg_trans(internal, counter.pncounter)
RETURNS internal
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_agg_trans';

CREATE FUNCTION counter.pncounter_agg_combine(internal, internal)
RETURNS internal
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_agg_combine';

CREATE FUNCTION counter.pncounter_agg_serialize(internal)
RETURNS bytea
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_agg_serialize';

CREATE FUNCTION counter.pncounter_agg_deserialize(bytea, internal)
RETURNS internal
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_agg_deserialize';

CREATE FUNCTION counter.pncounter_agg_final(internal)
RETURNS counter.pncounter
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_agg_final';

CREATE AGGREGATE counter.pncounter_merge_agg(counter.pncounter) (
    SFUNC = counter.pncounter_agg_trans,
    STYPE = internal,
    FINALFUNC = counter.pncounter_agg_final,
    COMBINEFUNC = counter.pncounter_agg_combine,
    SERIALFUNC = counter.pncounter_agg_serialize,
    DESERIALFUNC = counter.pncounter_agg_deserialize,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE counter.pncounter_merge_agg(counter.pncounter) IS
    'merge of all non-NULL states (NULL when there are none)';

-- ---- src/sql/30_tracked.sql
-- Tracked counters: a cache of count(*) over a source table's rows per key,
-- written as small deltas on the hot path and repaired from the rows by
-- reconciliation (doc/reference/tracked.md).
--
-- State of counter N (its id), created by counter.track in schema
-- counter_internal, owned by the source table's owner, with the key column's
-- real type:
--   counter_internal.tracked_N_base   (key PRIMARY KEY, base)       reconciliation's
--   counter_internal.tracked_N_delta  (key, bucket, shard, delta)   the hot path's
-- value(key) = base + sum(delta). A delta is attributed to the event-time
-- bucket of the row it stands for. Reconciliation up to watermark W (a bucket
-- boundary) sets base to count(rows with time < W) and subtracts from each
-- delta row with bucket < W exactly the amount its snapshot saw, so a
-- concurrent write is never overwritten.
-- One function is generated per counter (owned by the same owner, run only
-- through counter_internal.exec_as_owner): tracked_N_batch, one
-- reconciliation batch.
--
-- Privileges (doc/security.md): everything that touches a counter's state or
-- its source runs as the source table's owner in a security-restricted
-- operation (src/owner.cpp); the SECURITY DEFINER functions below touch only
-- the catalogs of this file and hand the rest to exec_as_owner. The hot paths
-- are C++ (src/tracked.cpp): the trigger counter_internal.tracked_fold and
-- counter.add / counter.value / counter.values_of, which run as the caller
-- and switch to the owner after checking the caller's privilege.
--
-- Advisory locks (transaction level): pg_try_advisory_xact_lock(
-- counter_internal.lock_class('tracked'), counter_id); the classes are one
-- registry, documented in doc/reference/worker.md "Advisory-lock classes".

CREATE TABLE counter.tracked (
    counter_id          integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9_.-]{1,63}$'),
    source              regclass NOT NULL,
    key_column          name NOT NULL,
    key_type            regtype NOT NULL,
    time_column         name NOT NULL,
    filter              text,           -- canonical text of the stored filter (src/filter.cpp)
    filter_tree         text,           -- the resolved tree (nodeToString)
    filter_relid        oid,            -- the source's oid the tree was resolved against
    mode                text NOT NULL CHECK (mode IN ('trigger', 'application')),
    watermark_lag       interval NOT NULL CHECK (watermark_lag >= interval '0'),
    bucket_width        interval NOT NULL,
    shards              integer NOT NULL CHECK (shards BETWEEN 1 AND 1024),
    batch_size          integer NOT NULL CHECK (batch_size BETWEEN 1 AND 1000000),
    drift_log_threshold bigint NOT NULL CHECK (drift_log_threshold >= 0),
    alert_threshold     bigint NOT NULL CHECK (alert_threshold >= 0),
    reconcile_every     interval NOT NULL,
    full_pending        boolean NOT NULL DEFAULT true,
    last_watermark      timestamptz,
    owner               regrole NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- the verification cycle: scheduled runs also check a slice of every
    -- key, walking them from verify_after, so the whole key space is checked
    -- once per verify_every (doc/reference/tracked.md, "What each run finds")
    verify_every        interval NOT NULL DEFAULT interval '1 day' CHECK (verify_every >= interval '1 minute'),
    verify_after        text,
    verify_started      timestamptz,
    last_verified       timestamptz,
    source_relid        oid,            -- the source's oid when registered: another one means a restore
    triggers_off        boolean NOT NULL DEFAULT false,
    replicated          boolean NOT NULL DEFAULT false   -- also counts rows applied by logical replication
);
COMMENT ON TABLE counter.tracked IS 'tracked counters: count(*) per key of a source table, cached and reconciled';
SELECT pg_catalog.pg_extension_config_dump('counter.tracked', '');

-- A counter's reconciliation runs are rows of the one run record,
-- counter.job_runs (kind 'reconcile', object_id = counter_id; the drift in
-- info), shown by the view counter.tracked_runs (31_tracked_code.sql). The
-- keys that drifted past drift_log_threshold in a run are its detail:
CREATE TABLE counter.tracked_key_drift (
    -- counter.job_runs: no FOREIGN KEY between dumped tables (pg_restore -j
    -- loads their rows in any order); counter_internal.dumped_cascade deletes
    -- a run's rows here with it (71_dump_cascades.sql)
    run_id  bigint NOT NULL,
    key     text NOT NULL,
    cached  bigint NOT NULL,
    truth   bigint NOT NULL,
    drift   bigint NOT NULL
);
CREATE INDEX ON counter.tracked_key_drift (run_id);

COMMENT ON TABLE counter.tracked_key_drift IS
    'keys whose drift exceeded the counter''s drift_log_threshold in a run (drift = cached - truth)';

-- What counter.reconcile returns.
CREATE TYPE counter.reconcile_result AS (
    counter text, run_id bigint, watermark timestamptz, all_keys boolean, keys_checked bigint,
    keys_corrected bigint, drift_positive bigint, drift_negative bigint, max_abs_drift bigint,
    duration interval, outcome text);


-- ---- src/sql/31_tracked_code.sql
-- Tracked counters: the functions and views (the tables are in
-- 30_tracked.sql). This piece holds code only, so the update from 1.3
-- (src/sql/upgrade/1.3--1.4/50_code.sql) includes it as it is
-- (everything here is CREATE OR REPLACE).

-- A tracked counter's reconciliation runs: the rows of the one run record
-- (counter.job_runs, kind 'reconcile') with the tracked part of each
-- (info), in the columns the table counter.tracked_runs had up to 1.2.
-- Each role sees the runs of the counters it owns (or belongs to the owner
-- of).
CREATE OR REPLACE VIEW counter.tracked_runs AS
SELECT r.run_id, r.object_id::integer AS counter_id, r.started_at,
       (r.info ->> 'finished_at')::timestamptz AS finished_at, (r.info ->> 'watermark')::timestamptz AS watermark,
       (r.info ->> 'all_keys')::boolean AS all_keys, (r.info ->> 'keys_checked')::bigint AS keys_checked,
       (r.info ->> 'keys_corrected')::bigint AS keys_corrected, (r.info ->> 'drift_positive')::bigint AS drift_positive,
       (r.info ->> 'drift_negative')::bigint AS drift_negative, (r.info ->> 'max_abs_drift')::bigint AS max_abs_drift,
       (r.info ->> 'keys_busy')::bigint AS keys_busy, (r.info ->> 'keys_verified')::bigint AS keys_verified,
       r.info ->> 'outcome' AS outcome
FROM counter.job_runs r JOIN counter.tracked c ON c.counter_id = r.object_id
WHERE r.kind = 'reconcile' AND r.info ? 'watermark' AND pg_catalog.pg_has_role(c.owner, 'USAGE');
COMMENT ON VIEW counter.tracked_runs IS 'one row per reconciliation run of a tracked counter, with its drift';
GRANT SELECT ON counter.tracked_runs TO PUBLIC;

-- The role that called the outermost function (for SECURITY DEFINER code).
CREATE OR REPLACE FUNCTION counter_internal.caller()
RETURNS regrole
LANGUAGE c STABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_tracked_caller';

-- The hot path of trigger mode (src/tracked.cpp): folds a statement's
-- transition tables into one delta per (key, bucket) and writes them in
-- order, as the counter's owner; on TRUNCATE, empties the counter. Its one
-- argument is the counter id; everything else comes from counter.tracked.
-- Only counter.track attaches it.
CREATE OR REPLACE FUNCTION counter_internal.tracked_fold()
RETURNS trigger
LANGUAGE c
AS 'MODULE_PATHNAME', 'counter_tracked_fold';

-- Every backend forgets the counter rows it keeps (src/tracked.cpp): called
-- by every function here that changes a row's registration.
CREATE OR REPLACE FUNCTION counter_internal.tracked_invalidate()
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_tracked_invalidate';

-- The counter row, or an errcode'd error.
CREATE OR REPLACE FUNCTION counter_internal.tracked_get(counter_name text)
RETURNS counter.tracked
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t counter.tracked;
BEGIN
    IF counter_name IS NULL THEN
        RAISE EXCEPTION 'counter name must not be NULL' USING ERRCODE = '22004';
    END IF;
    SELECT * INTO t FROM counter.tracked c WHERE c.name OPERATOR(pg_catalog.=) counter_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'tracked counter "%" does not exist', counter_name
            USING ERRCODE = '42704', HINT = 'See counter.tracked for the registered counters.';
    END IF;
    RETURN t;
END
$$;

-- Raises unless the calling role may manage counter t (a member of the
-- source table's owner, or a superuser).
CREATE OR REPLACE FUNCTION counter_internal.tracked_require_owner(t counter.tracked, action text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := counter_internal.caller();
BEGIN
    IF NOT (pg_catalog.pg_has_role(caller, t.owner, 'USAGE')
            OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) caller)) THEN
        RAISE EXCEPTION 'permission denied to % tracked counter "%"', action, t.name
            USING ERRCODE = '42501', DETAIL = format('Only the owner of %s (or a superuser) may.', t.source);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION counter_internal.tracked_table(t counter.tracked, part text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT pg_catalog.format('counter_internal.%I', pg_catalog.format('tracked_%s_%s', t.counter_id, part)) $$;

-- (Re)creates what counter t needs beyond its state tables: the batch
-- function and, in trigger mode, the triggers on the source. Used by
-- counter.track and by the update from 1.1.
CREATE OR REPLACE FUNCTION counter_internal.tracked_build(t counter.tracked)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    ops text[] := counter_internal.key_operators(t.key_type);
    fn_batch text := format('counter_internal.%I', format('tracked_%s_batch', t.counter_id));
    f text;
    body text;
    trg text;
BEGIN
    f := CASE WHEN t.filter IS NULL THEN 'true'
              ELSE format('counter_internal.filter_match(''tracked'', %s, ce_new)', t.counter_id) END;
    -- One reconciliation batch: the next ce_limit keys after ce_after (keys
    -- with deltas before the watermark, keys with source rows whose event
    -- time is in [ce_from, ce_w), and with ce_all every key with a base),
    -- compared and repaired. It never waits for a writer: delta rows locked
    -- by a writer are skipped, and so is every key with a delta row it did
    -- not lock (busy; it stays dirty and the next run takes it), so the rows
    -- it folds are exactly the rows it locked.
    body := format($b$
#variable_conflict use_column
DECLARE
    ce_keys %5$s[];
    ce_after_key %5$s := ce_after::%5$s;
    ce_lk %5$s[];
    ce_lb timestamptz[];
    ce_ls smallint[];
BEGIN
    IF ce_after IS NULL THEN
        SELECT pg_catalog.array_agg(s.k ORDER BY s.k) INTO ce_keys FROM (
            SELECT DISTINCT u.k FROM (
                (SELECT b.key AS k FROM %6$s b WHERE ce_all ORDER BY 1 LIMIT ce_limit)
                UNION ALL
                (SELECT DISTINCT d.key FROM %7$s d WHERE d.bucket < ce_w ORDER BY 1 LIMIT ce_limit)
                UNION ALL
                (SELECT DISTINCT ce_new.%2$s FROM %1$s AS ce_new
                 WHERE ce_new.%2$s IS NOT NULL AND ce_new.%3$s >= ce_from AND ce_new.%3$s < ce_w AND %4$s
                 ORDER BY 1 LIMIT ce_limit)
            ) u ORDER BY 1 LIMIT ce_limit) s;
    ELSE
        SELECT pg_catalog.array_agg(s.k ORDER BY s.k) INTO ce_keys FROM (
            SELECT DISTINCT u.k FROM (
                (SELECT b.key AS k FROM %6$s b WHERE ce_all AND b.key %9$s ce_after_key ORDER BY 1 LIMIT ce_limit)
                UNION ALL
                (SELECT DISTINCT d.key FROM %7$s d WHERE d.key %9$s ce_after_key AND d.bucket < ce_w
                 ORDER BY 1 LIMIT ce_limit)
                UNION ALL
                (SELECT DISTINCT ce_new.%2$s FROM %1$s AS ce_new
                 WHERE ce_new.%2$s %9$s ce_after_key AND ce_new.%3$s >= ce_from AND ce_new.%3$s < ce_w AND %4$s
                 ORDER BY 1 LIMIT ce_limit)
            ) u ORDER BY 1 LIMIT ce_limit) s;
    END IF;
    IF ce_keys IS NULL THEN
        RETURN;
    END IF;
    SELECT pg_catalog.array_agg(l.key), pg_catalog.array_agg(l.bucket), pg_catalog.array_agg(l.shard)
    INTO ce_lk, ce_lb, ce_ls
    FROM (SELECT d.key, d.bucket, d.shard FROM %7$s d WHERE d.key %8$s ANY (ce_keys) AND d.bucket < ce_w
          FOR UPDATE SKIP LOCKED) l;

    RETURN QUERY
    WITH locked AS MATERIALIZED (
        SELECT l.key, l.bucket, l.shard
        FROM ROWS FROM (pg_catalog.unnest(ce_lk), pg_catalog.unnest(ce_lb), pg_catalog.unnest(ce_ls))
             AS l(key, bucket, shard)
    ), seen AS MATERIALIZED (
        SELECT d.key, d.bucket, d.shard, d.delta FROM %7$s d
        JOIN locked l ON d.key %8$s l.key AND d.bucket = l.bucket AND d.shard = l.shard
    ), busy AS MATERIALIZED (
        SELECT DISTINCT d.key FROM %7$s d WHERE d.key %8$s ANY (ce_keys) AND d.bucket < ce_w
          AND NOT EXISTS (SELECT FROM locked l WHERE l.key %8$s d.key AND l.bucket = d.bucket AND l.shard = d.shard)
        %10$s
    ), keys AS MATERIALIZED (
        SELECT k.key, k.o, EXISTS (SELECT FROM busy WHERE busy.key %8$s k.key) AS busy
        FROM pg_catalog.unnest(ce_keys) WITH ORDINALITY AS k(key, o)
    ), truth AS MATERIALIZED (
        SELECT ce_new.%2$s AS key, pg_catalog.count(*) AS n FROM %1$s AS ce_new
        WHERE ce_new.%2$s %8$s ANY (ce_keys) AND ce_new.%3$s < ce_w AND %4$s
        GROUP BY 1
    ), cmp AS MATERIALIZED (
        SELECT k.key, coalesce(b.base, 0) + coalesce(sd.s, 0) AS cached, coalesce(t.n, 0) AS truth
        FROM keys k
        LEFT JOIN %6$s b ON b.key %8$s k.key
        LEFT JOIN (SELECT seen.key, pg_catalog.sum(seen.delta)::bigint AS s FROM seen GROUP BY 1) sd
               ON sd.key %8$s k.key
        LEFT JOIN truth t ON t.key %8$s k.key
        WHERE NOT k.busy
    ), absorbed AS (
        UPDATE %7$s d SET delta = d.delta - seen.delta FROM seen
        WHERE d.key %8$s seen.key AND d.bucket = seen.bucket AND d.shard = seen.shard
          AND EXISTS (SELECT FROM cmp WHERE cmp.key %8$s seen.key)
        RETURNING 1
    ), installed AS (
        INSERT INTO %6$s AS b (key, base) SELECT cmp.key, cmp.truth FROM cmp WHERE cmp.truth <> 0
        ON CONFLICT (key) DO UPDATE SET base = excluded.base
        RETURNING 1
    ), emptied AS (
        DELETE FROM %6$s b USING cmp WHERE b.key %8$s cmp.key AND cmp.truth = 0
        RETURNING 1
    )
    SELECT k.key::text, c.cached, c.truth, k.busy, k.o FROM keys k LEFT JOIN cmp c ON c.key %8$s k.key;

    DELETE FROM %7$s d
    USING ROWS FROM (pg_catalog.unnest(ce_lk), pg_catalog.unnest(ce_lb), pg_catalog.unnest(ce_ls)) AS l(key, bucket, shard)
    WHERE d.key %8$s l.key AND d.bucket = l.bucket AND d.shard = l.shard AND d.delta = 0;
END
$b$, t.source::text, format('%I', t.key_column), format('%I', t.time_column), f, t.key_type::text,
        counter_internal.tracked_table(t, 'base'), counter_internal.tracked_table(t, 'delta'), ops[1], ops[3],
        -- a buffered counter: keys with buffered amounts before the watermark
        -- that the batch's snapshot cannot account for are busy too
        CASE WHEN t.buffered THEN format('UNION SELECT bk.k FROM pg_catalog.unnest('
            'counter_internal.tracked_buffer_busy(%s, ce_w, ce_keys)) AS bk(k)', t.counter_id) ELSE '' END);
    IF pg_catalog.to_regprocedure(fn_batch || '(timestamptz, timestamptz, text, boolean, integer)') IS NOT NULL THEN
        EXECUTE format('DROP FUNCTION %s(timestamptz, timestamptz, text, boolean, integer)', fn_batch);
    END IF;
    EXECUTE format('CREATE FUNCTION %s(ce_w timestamptz, ce_from timestamptz, ce_after text, ce_all boolean,'
                   ' ce_limit integer) RETURNS TABLE (key text, cached bigint, truth bigint, busy boolean, n bigint)'
                   ' LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp'
                   -- plans made for each batch's arrays (a generic plan takes
                   -- every unnest for 10 rows and joins 1,000 keys in loops)
                   ' SET plan_cache_mode = force_custom_plan AS %L', fn_batch, body);
    EXECUTE format('ALTER FUNCTION %s(timestamptz, timestamptz, text, boolean, integer) OWNER TO %I',
                   fn_batch, t.owner);
    EXECUTE format('REVOKE ALL ON FUNCTION %s(timestamptz, timestamptz, text, boolean, integer) FROM PUBLIC',
                   fn_batch);
    IF t.filter IS NOT NULL THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION counter_internal.filter_match(text, integer, anyelement) TO %I',
                       t.owner);
    END IF;
    IF t.buffered THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION counter_internal.tracked_buffer_busy(integer, timestamptz, anyarray),'
                       ' counter_internal.tracked_buffered(integer, anyelement) TO %I', t.owner);
    END IF;

    IF t.mode = 'trigger' THEN
        FOR trg IN SELECT g.tgname FROM pg_catalog.pg_trigger g
                   WHERE g.tgrelid OPERATOR(pg_catalog.=) t.source
                     AND g.tgname OPERATOR(pg_catalog.~) format('^counter_%s_r?(ins|del|upd|trunc)$', t.counter_id) LOOP
            EXECUTE format('DROP TRIGGER %I ON %s', trg, t.source);
        END LOOP;
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON %s REFERENCING NEW TABLE AS ce_new'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.tracked_fold(%L)',
                       format('counter_%s_ins', t.counter_id), t.source, t.counter_id);
        EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON %s REFERENCING OLD TABLE AS ce_old'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.tracked_fold(%L)',
                       format('counter_%s_del', t.counter_id), t.source, t.counter_id);
        EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON %s REFERENCING OLD TABLE AS ce_old NEW TABLE AS ce_new'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.tracked_fold(%L)',
                       format('counter_%s_upd', t.counter_id), t.source, t.counter_id);
        EXECUTE format('CREATE TRIGGER %I AFTER TRUNCATE ON %s'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.tracked_fold(%L)',
                       format('counter_%s_trunc', t.counter_id), t.source, t.counter_id);
    END IF;
    -- Replicated: the apply worker of a subscription (session_replication_role
    -- = replica) fires only row triggers enabled for replicas, and none of the
    -- above; these count what it applies, row by row.
    IF t.mode = 'trigger' AND t.replicated THEN
        FOREACH trg IN ARRAY ARRAY['ins', 'del', 'upd'] LOOP
            EXECUTE format('CREATE TRIGGER %I AFTER %s ON %s FOR EACH ROW EXECUTE FUNCTION counter_internal.tracked_fold(%L)',
                           format('counter_%s_r%s', t.counter_id, trg),
                           CASE trg WHEN 'ins' THEN 'INSERT' WHEN 'del' THEN 'DELETE' ELSE 'UPDATE' END,
                           t.source, t.counter_id);
        END LOOP;
        EXECUTE format('CREATE TRIGGER %I AFTER TRUNCATE ON %s'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.tracked_fold(%L)',
                       format('counter_%s_rtrunc', t.counter_id), t.source, t.counter_id);
        FOREACH trg IN ARRAY ARRAY['rins', 'rdel', 'rupd', 'rtrunc'] LOOP
            EXECUTE format('ALTER TABLE %s ENABLE REPLICA TRIGGER %I', t.source, format('counter_%s_%s', t.counter_id, trg));
        END LOOP;
    END IF;
END
$fn$;

-- Registers a tracked counter. See doc/reference/tracked.md.
CREATE OR REPLACE FUNCTION counter.track(
    name text,
    source regclass,
    key_column name,
    time_column name,
    filter text DEFAULT NULL,
    mode text DEFAULT 'trigger',
    watermark_lag interval DEFAULT interval '5 seconds',
    bucket_width interval DEFAULT interval '1 minute',
    shards integer DEFAULT 64,
    batch_size integer DEFAULT 1000,
    drift_log_threshold bigint DEFAULT 0,
    alert_threshold bigint DEFAULT 1000,
    reconcile_every interval DEFAULT interval '1 minute',
    verify_every interval DEFAULT interval '1 day',
    replicated boolean DEFAULT false,
    buffered boolean DEFAULT false)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
    caller regrole := counter_internal.caller();
    rel record;
    kcol record;
    tcol record;
    t counter.tracked;
    compiled text[];
    base_t text;
    delta_t text;
BEGIN
    IF name IS NULL OR source IS NULL OR key_column IS NULL OR time_column IS NULL OR mode IS NULL
       OR watermark_lag IS NULL OR bucket_width IS NULL OR shards IS NULL OR batch_size IS NULL
       OR drift_log_threshold IS NULL OR alert_threshold IS NULL OR reconcile_every IS NULL
       OR verify_every IS NULL OR replicated IS NULL OR buffered IS NULL THEN
        RAISE EXCEPTION 'counter.track: only filter may be NULL' USING ERRCODE = '22004';
    END IF;
    IF name !~ '^[A-Za-z0-9_.-]{1,63}$' THEN
        RAISE EXCEPTION 'invalid tracked counter name "%"', name
            USING ERRCODE = '22023', DETAIL = 'A name is 1 to 63 letters, digits, ''_'', ''-'' or ''.''.';
    END IF;
    IF mode NOT IN ('trigger', 'application') THEN
        RAISE EXCEPTION 'invalid mode "%"', mode
            USING ERRCODE = '22023', HINT = 'mode is ''trigger'' or ''application''.';
    END IF;
    IF replicated AND mode OPERATOR(pg_catalog.<>) 'trigger' THEN
        RAISE EXCEPTION 'replicated => true needs mode ''trigger''' USING ERRCODE = '22023';
    END IF;
    IF shards < 1 OR shards > 1024 THEN
        RAISE EXCEPTION 'shards must be between 1 and 1024' USING ERRCODE = '22023';
    END IF;
    IF batch_size < 1 OR batch_size > 1000000 THEN
        RAISE EXCEPTION 'batch_size must be between 1 and 1000000' USING ERRCODE = '22023';
    END IF;
    IF watermark_lag < interval '0' THEN
        RAISE EXCEPTION 'watermark_lag must not be negative' USING ERRCODE = '22023';
    END IF;
    IF bucket_width <= interval '0' OR pg_catalog.date_part('month', bucket_width) <> 0
       OR pg_catalog.date_part('year', bucket_width) <> 0 OR bucket_width > interval '1 day' THEN
        RAISE EXCEPTION 'bucket_width must be positive, at most 1 day, without months'
            USING ERRCODE = '22023';
    END IF;
    IF reconcile_every < interval '1 second' THEN
        RAISE EXCEPTION 'reconcile_every must be at least 1 second' USING ERRCODE = '22023';
    END IF;
    IF verify_every < interval '1 minute' OR verify_every < reconcile_every THEN
        RAISE EXCEPTION 'verify_every must be at least 1 minute and at least reconcile_every' USING ERRCODE = '22023';
    END IF;
    IF drift_log_threshold < 0 OR alert_threshold < 0 THEN
        RAISE EXCEPTION 'thresholds must not be negative' USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT FROM counter.tracked c WHERE c.name OPERATOR(pg_catalog.=) name) THEN
        RAISE EXCEPTION 'tracked counter "%" already exists', name USING ERRCODE = '42710';
    END IF;

    SELECT c.oid, c.relkind, c.relowner::regrole AS owner, c.relpersistence INTO rel
    FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) source;
    IF rel.relkind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION '% is not a table', source USING ERRCODE = '42809';
    END IF;
    IF rel.relpersistence OPERATOR(pg_catalog.=) 't' THEN
        RAISE EXCEPTION '% is a temporary table', source USING ERRCODE = '42809';
    END IF;
    IF NOT (pg_catalog.pg_has_role(caller, rel.owner, 'USAGE')
            OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) caller)) THEN
        RAISE EXCEPTION 'permission denied to track %', source
            USING ERRCODE = '42501', DETAIL = 'Only the owner of the source table (or a superuser) may.';
    END IF;

    SELECT c.attname, c.atttypid::regtype AS typ INTO kcol FROM counter.column_of(source, key_column) c;
    SELECT c.attname, c.atttypid::regtype AS typ INTO tcol FROM counter.column_of(source, time_column) c;
    IF tcol.typ OPERATOR(pg_catalog.<>) 'timestamptz'::regtype THEN
        RAISE EXCEPTION 'time column "%" of % has type %, not timestamp with time zone', time_column, source, tcol.typ
            USING ERRCODE = '42804', HINT = 'Event times are compared with the watermark as timestamptz.';
    END IF;
    PERFORM counter_internal.key_operators(kcol.typ);   -- 42883 unless the key type can be compared
    -- The filter is resolved here, once, as the owner (src/filter.cpp).
    IF filter IS NOT NULL THEN
        compiled := counter_internal.filter_compile(source, filter, rel.owner);
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_index i
                   WHERE i.indrelid OPERATOR(pg_catalog.=) source
                     AND (i.indkey[0] OPERATOR(pg_catalog.=) (counter.column_of(source, time_column)).attnum
                          OR i.indkey[1] OPERATOR(pg_catalog.=) (counter.column_of(source, time_column)).attnum)) THEN
        RAISE WARNING 'no index on %(%): each scheduled reconciliation scans the table for rows newly past the watermark',
            source, time_column
            USING HINT = format('CREATE INDEX ON %s (%I)', source, time_column);
    END IF;

    INSERT INTO counter.tracked AS c (name, source, key_column, key_type, time_column, filter, filter_tree,
        filter_relid, mode, watermark_lag, bucket_width, shards, batch_size, drift_log_threshold, alert_threshold,
        reconcile_every, owner, verify_every, source_relid, replicated, buffered)
    VALUES (name, source, key_column, kcol.typ, time_column, compiled[1], compiled[2],
        CASE WHEN compiled IS NOT NULL THEN source::oid END, mode, watermark_lag, bucket_width, shards,
        batch_size, drift_log_threshold, alert_threshold, reconcile_every, rel.owner, verify_every, source::oid,
        replicated, buffered)
    RETURNING * INTO t;

    base_t := counter_internal.tracked_table(t, 'base');
    delta_t := counter_internal.tracked_table(t, 'delta');
    EXECUTE format('CREATE TABLE %s (key %s PRIMARY KEY, base bigint NOT NULL)', base_t, kcol.typ);
    EXECUTE format('CREATE TABLE %s (key %s NOT NULL, bucket timestamptz NOT NULL, shard smallint NOT NULL,'
                   ' delta bigint NOT NULL, PRIMARY KEY (key, bucket, shard))', delta_t, kcol.typ);
    EXECUTE format('ALTER TABLE %s OWNER TO %I', base_t, rel.owner);
    EXECUTE format('ALTER TABLE %s OWNER TO %I', delta_t, rel.owner);
    EXECUTE format('REVOKE ALL ON %s, %s FROM PUBLIC', base_t, delta_t);
    PERFORM counter_internal.tracked_build(t);
    PERFORM counter_internal.tracked_invalidate();

    PERFORM counter.job_register('reconcile', name, reconcile_every);
    IF buffered THEN
        INSERT INTO counter_internal.tracked_flushes (counter_id, epoch)
        VALUES (t.counter_id, counter_internal.tracked_buffer_epoch());
        PERFORM counter.job_register('flush', name,
            coalesce(pg_catalog.current_setting('counter_ext.flush_interval', true), '1s')::interval);
        IF counter_internal.tracked_buffer_epoch() IS NULL THEN
            RAISE WARNING 'counter_ext is not loaded by shared_preload_libraries: the adds of buffered counter "%" are written directly', name
                USING HINT = 'Add counter_ext to shared_preload_libraries and restart the server.';
        END IF;
    END IF;
    RETURN t.counter_id;
END
$fn$;
COMMENT ON FUNCTION counter.track(text, regclass, name, name, text, text, interval, interval, integer, integer,
    bigint, bigint, interval, interval, boolean, boolean) IS 'registers a tracked counter of count(*) per key of a source table';

-- Removes a tracked counter and every object track created for it.
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
        FOR trg IN SELECT g.tgname FROM pg_catalog.pg_trigger g
                   WHERE g.tgrelid OPERATOR(pg_catalog.=) src
                     AND g.tgname OPERATOR(pg_catalog.~) format('^counter_%s_r?(ins|del|upd|trunc)$', t.counter_id) LOOP
            EXECUTE format('DROP TRIGGER %I ON %s', trg, src);
        END LOOP;
    END IF;
    EXECUTE format('DROP FUNCTION IF EXISTS counter_internal.%I(timestamptz, timestamptz, text, boolean, integer)',
                   format('tracked_%s_batch', t.counter_id));
    EXECUTE format('DROP TABLE IF EXISTS %s, %s', counter_internal.tracked_table(t, 'base'),
                   counter_internal.tracked_table(t, 'delta'));
    IF t.buffered THEN
        PERFORM counter_internal.tracked_buffer_forget(t.counter_id);
        PERFORM counter.job_unregister('flush', name);
    END IF;
    DELETE FROM counter.tracked c WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id;
    PERFORM counter_internal.run_forget('reconcile', t.counter_id);
    PERFORM counter_internal.tracked_invalidate();
    PERFORM counter.job_unregister('reconcile', name);
END
$fn$;
COMMENT ON FUNCTION counter.untrack(text) IS 'removes a tracked counter, its state, triggers, history and job';

-- Application mode: adds delta to key, attributed to event time 'at'. The
-- key is of the counter's key type, or text (through the type's input
-- function). src/tracked.cpp: runs as the caller, checks INSERT on the
-- source, then writes as the source's owner.
CREATE OR REPLACE FUNCTION counter.add(name text, key anyelement, delta bigint DEFAULT 1,
                            at timestamptz DEFAULT pg_catalog.now())
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_tracked_add';
COMMENT ON FUNCTION counter.add(text, anyelement, bigint, timestamptz) IS
    'application mode: adds delta (default 1) to a key of a tracked counter at event time "at"';

-- Value of one key: base + every delta; 0 for a key never seen. Needs SELECT
-- on the source.
CREATE OR REPLACE FUNCTION counter.value(name text, key anyelement)
RETURNS bigint
LANGUAGE c STABLE
AS 'MODULE_PATHNAME', 'counter_tracked_value';
COMMENT ON FUNCTION counter.value(text, anyelement) IS 'value of one key of a tracked counter (0 when never seen)';

-- Values of many keys, one row per distinct key given, in key order.
CREATE OR REPLACE FUNCTION counter.values_of(name text, keys anyarray)
RETURNS TABLE (key anyelement, value bigint)
LANGUAGE c STABLE
AS 'MODULE_PATHNAME', 'counter_tracked_values_of';
COMMENT ON FUNCTION counter.values_of(text, anyarray) IS 'values of many keys of a tracked counter';

-- Every key with state of every tracked counter the caller may read (SELECT
-- on the source), each read as its owner. It touches only counter.tracked
-- itself; the state is read through exec_as_owner.
CREATE OR REPLACE FUNCTION counter.tracked_all_values()
RETURNS TABLE (counter text, key text, value bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    t counter.tracked;
    caller regrole := counter_internal.caller();
BEGIN
    FOR t IN SELECT * FROM counter.tracked c ORDER BY c.name LOOP
        CONTINUE WHEN NOT pg_catalog.has_table_privilege(caller, t.source, 'SELECT');
        -- a buffered counter adds what its buffer holds beyond the table
        RETURN QUERY SELECT t.name, v.key, v.value FROM counter_internal.exec_as_owner(t.owner, format(
            'WITH m AS MATERIALIZED (%4$s)'
            ' SELECT k.key::text, (coalesce(b.base, 0) + coalesce(d.s, 0) + coalesce(m.amount, 0))::bigint'
            ' FROM (SELECT key FROM %1$s UNION SELECT key FROM %2$s UNION SELECT key FROM m) k'
            ' LEFT JOIN %1$s b ON b.key %3$s k.key'
            ' LEFT JOIN (SELECT key, pg_catalog.sum(delta) AS s FROM %2$s GROUP BY key) d ON d.key %3$s k.key'
            ' LEFT JOIN m ON m.key %3$s k.key'
            ' WHERE $1 ORDER BY k.key',
            counter_internal.tracked_table(t, 'base'), counter_internal.tracked_table(t, 'delta'),
            (counter_internal.key_operators(t.key_type))[1],
            CASE WHEN t.buffered
                 THEN format('SELECT x.key, x.amount FROM counter_internal.tracked_buffered(%s, NULL::%s) x',
                             t.counter_id, t.key_type)
                 ELSE format('SELECT NULL::%s AS key, 0::bigint AS amount WHERE false', t.key_type) END),
            true) AS v(key text, value bigint);
    END LOOP;
END
$fn$;

CREATE OR REPLACE VIEW counter.tracked_values AS SELECT * FROM counter.tracked_all_values();
COMMENT ON VIEW counter.tracked_values IS 'every key with state of every tracked counter the caller may read';

-- The watermark a run uses: the given one (or now - lag), down to a bucket
-- boundary.
CREATE OR REPLACE FUNCTION counter_internal.tracked_watermark(t counter.tracked, w timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.date_bin(t.bucket_width, coalesce(w, pg_catalog.now() OPERATOR(pg_catalog.-) t.watermark_lag),
                               '2000-01-01 00:00:00+00'::timestamptz)
$$;

-- One batch of a run, inside the caller's transaction: takes the counter's
-- advisory lock (false when another reconciler holds it), runs the counter's
-- batch function as the owner, records drifted keys; 'after' moves to the
-- batch's last key.
CREATE OR REPLACE FUNCTION counter_internal.tracked_run_batch(t counter.tracked, run bigint, w timestamptz,
    w_from timestamptz, all_keys boolean, INOUT after text, OUT locked boolean, OUT checked bigint,
    OUT corrected bigint, OUT pos bigint, OUT neg bigint, OUT max_abs bigint, OUT busy bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    locked := pg_catalog.pg_try_advisory_xact_lock(counter_internal.lock_class('tracked'), t.counter_id);
    IF NOT locked THEN
        RETURN;
    END IF;
    WITH r AS MATERIALIZED (
        SELECT * FROM counter_internal.exec_as_owner(t.owner,
            format('SELECT * FROM counter_internal.%I($1, $2, $3, $4, $5)', format('tracked_%s_batch', t.counter_id)),
            w, CASE WHEN all_keys THEN '-infinity'::timestamptz ELSE w_from END, after, all_keys, t.batch_size)
        AS x(key text, cached bigint, truth bigint, busy boolean, n bigint)
    ), logged AS (
        INSERT INTO counter.tracked_key_drift (run_id, key, cached, truth, drift)
        SELECT run, r.key, r.cached, r.truth, r.cached - r.truth FROM r
        WHERE NOT r.busy AND r.cached <> r.truth AND abs(r.cached - r.truth) > t.drift_log_threshold
    )
    SELECT count(*) FILTER (WHERE NOT r.busy), count(*) FILTER (WHERE r.cached <> r.truth),
        coalesce(sum(r.cached - r.truth) FILTER (WHERE r.cached > r.truth), 0),
        coalesce(sum(r.cached - r.truth) FILTER (WHERE r.cached < r.truth), 0),
        coalesce(max(abs(r.cached - r.truth)), 0), count(*) FILTER (WHERE r.busy),
        (SELECT r2.key FROM r r2 ORDER BY r2.n DESC LIMIT 1)
    INTO checked, corrected, pos, neg, max_abs, busy, after
    FROM r;
    IF after IS NULL THEN
        checked := 0;   -- no key left
    ELSIF checked = 0 THEN
        checked := -1;  -- every key of this batch was busy: go on after it
    END IF;
END
$fn$;

-- Closes a run: totals, outcome, and the alert (WARNING + NOTIFY on channel
-- counter_ext_drift) when total |drift| exceeds the counter's threshold.
CREATE OR REPLACE FUNCTION counter_internal.tracked_finish_run(t counter.tracked, run bigint, run_outcome text,
    error jsonb DEFAULT NULL)
RETURNS counter.tracked_runs
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    r counter.tracked_runs;
BEGIN
    PERFORM counter_internal.run_end(run, pg_catalog.jsonb_build_object('outcome', run_outcome, 'error', error ->> 'message'),
        rows_affected => (SELECT x.keys_corrected FROM counter.tracked_runs x WHERE x.run_id OPERATOR(pg_catalog.=) run),
        error => error);
    SELECT * INTO r FROM counter.tracked_runs x
    WHERE x.run_id OPERATOR(pg_catalog.=) run AND x.counter_id OPERATOR(pg_catalog.=) t.counter_id;
    IF r.drift_positive - r.drift_negative > t.alert_threshold THEN
        RAISE WARNING 'tracked counter "%" drifted by % (+%, %) over % keys', t.name,
            r.drift_positive - r.drift_negative, r.drift_positive, r.drift_negative, r.keys_corrected
            USING DETAIL = format('Run %s up to %s; see counter.tracked_history.', r.run_id, r.watermark);
        PERFORM pg_catalog.pg_notify('counter_ext_drift', pg_catalog.json_build_object(
            'counter', t.name, 'run_id', r.run_id, 'watermark', r.watermark,
            'keys_checked', r.keys_checked, 'keys_corrected', r.keys_corrected,
            'drift_positive', r.drift_positive, 'drift_negative', r.drift_negative,
            'max_abs_drift', r.max_abs_drift, 'alert_threshold', t.alert_threshold)::text);
    END IF;
    RETURN r;
END
$fn$;

-- Starts a run. Watermarks never go back: a base holds the truth before the
-- watermark its key was last reconciled at, and the deltas before it are
-- gone, so a run uses the greatest watermark ever used for the counter.
-- run_from is the previous watermark: source rows in [run_from, watermark)
-- are newly past it, and their keys are checked even when nothing was
-- written through the counter.
CREATE OR REPLACE FUNCTION counter_internal.tracked_start_run(t counter.tracked, w timestamptz, all_keys boolean,
    OUT run bigint, OUT run_watermark timestamptz, OUT run_from timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    SELECT coalesce(c.last_watermark, '-infinity') INTO run_from FROM counter.tracked c
    WHERE c.counter_id = t.counter_id FOR UPDATE;
    UPDATE counter.tracked c SET last_watermark = GREATEST(c.last_watermark, w)
    WHERE c.counter_id = t.counter_id
    RETURNING c.last_watermark INTO run_watermark;
    -- a run of this counter still running died (we hold the counter's lock)
    PERFORM counter_internal.run_interrupted('reconcile', t.counter_id);
    run := counter_internal.run_begin('reconcile', t.name, t.counter_id, pg_catalog.jsonb_build_object(
        'watermark', run_watermark, 'all_keys', all_keys, 'keys_checked', 0, 'keys_corrected', 0,
        'drift_positive', 0, 'drift_negative', 0, 'max_abs_drift', 0, 'keys_busy', 0, 'keys_verified', 0,
        'outcome', 'running'));
END
$fn$;

CREATE OR REPLACE FUNCTION counter_internal.tracked_add_batch(t counter.tracked, run bigint, b record)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    UPDATE counter.job_runs x SET info = x.info OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(
        'keys_checked', (x.info ->> 'keys_checked')::bigint + GREATEST(b.checked, 0),
        'keys_corrected', (x.info ->> 'keys_corrected')::bigint + b.corrected,
        'drift_positive', (x.info ->> 'drift_positive')::bigint + b.pos,
        'drift_negative', (x.info ->> 'drift_negative')::bigint + b.neg,
        'max_abs_drift', GREATEST((x.info ->> 'max_abs_drift')::bigint, b.max_abs),
        'keys_busy', (x.info ->> 'keys_busy')::bigint + b.busy)
    WHERE x.run_id = run AND x.kind = 'reconcile' AND x.object_id = t.counter_id;
END
$fn$;

-- The run of counter t with id 'run', while it runs; or 42704.
CREATE OR REPLACE FUNCTION counter_internal.tracked_require_run(t counter.tracked, run bigint)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF NOT EXISTS (SELECT FROM counter.tracked_runs x WHERE x.run_id = run AND x.counter_id = t.counter_id
                   AND x.outcome = 'running') THEN
        RAISE EXCEPTION 'tracked counter "%" has no running run %', t.name, run USING ERRCODE = '42704';
    END IF;
END
$fn$;

-- Reconciles a tracked counter up to watermark W (default now() - lag, down
-- to a bucket boundary), in the caller's transaction: dirty keys, or every
-- key when all_keys (or after registration, until one full run finished).
-- A counter whose source has another oid than at registration was restored
-- from a dump (or its table replaced): its rows were loaded without its
-- triggers, so every key is verified in the next run, and a stored filter is
-- resolved again against the new table (as the owner, from its canonical
-- text). Returns the row as it now is.
CREATE OR REPLACE FUNCTION counter_internal.tracked_check_restored(t counter.tracked)
RETURNS counter.tracked
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    compiled text[];
BEGIN
    IF t.source_relid IS NOT DISTINCT FROM t.source::oid THEN
        RETURN t;
    END IF;
    IF t.filter IS NOT NULL AND t.filter_relid IS DISTINCT FROM t.source::oid THEN
        compiled := counter_internal.filter_compile(t.source, t.filter, t.owner);
    END IF;
    UPDATE counter.tracked c SET full_pending = true, source_relid = t.source::oid, verify_after = NULL,
        filter = coalesce(compiled[1], c.filter), filter_tree = coalesce(compiled[2], c.filter_tree),
        filter_relid = CASE WHEN compiled IS NULL THEN c.filter_relid ELSE t.source::oid END
    WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id
    RETURNING * INTO t;
    PERFORM counter_internal.tracked_invalidate();
    RAISE NOTICE 'tracked counter "%": its source % is not the table it was registered on (restored?); every key is verified now',
        t.name, t.source;
    RETURN t;
END
$fn$;

CREATE OR REPLACE FUNCTION counter.reconcile(name text, watermark timestamptz DEFAULT NULL, all_keys boolean DEFAULT false)
RETURNS counter.reconcile_result
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
    t counter.tracked := counter_internal.tracked_get(name);
    w timestamptz;
    w_from timestamptz;
    every_key boolean;
    run bigint;
    after text;
    b record;
    r counter.tracked_runs;
BEGIN
    PERFORM counter_internal.tracked_require_owner(t, 'reconcile');
    -- a buffered counter is flushed first (in this transaction: the batches
    -- see what it wrote); the flush may schedule a repair (full_pending)
    IF t.buffered THEN
        PERFORM counter.flush(t.name);
        t := counter_internal.tracked_get(name);
    END IF;
    IF all_keys IS NULL THEN
        RAISE EXCEPTION 'all_keys must not be NULL' USING ERRCODE = '22004';
    END IF;
    t := counter_internal.tracked_check_restored(t);
    w := counter_internal.tracked_watermark(t, watermark);
    every_key := all_keys OR t.full_pending;
    IF NOT pg_catalog.pg_try_advisory_xact_lock(counter_internal.lock_class('tracked'), t.counter_id) THEN
        RAISE NOTICE 'tracked counter "%" is being reconciled by another session; skipped', t.name;
        RETURN ROW(t.name, NULL::bigint, w, every_key, 0::bigint, 0::bigint, 0::bigint, 0::bigint,
            0::bigint, interval '0', 'skipped'::text)::counter.reconcile_result;
    END IF;
    SELECT s.run, s.run_watermark, s.run_from INTO run, w, w_from FROM counter_internal.tracked_start_run(t, w, every_key) s;
    LOOP
        b := counter_internal.tracked_run_batch(t, run, w, w_from, every_key, after);
        EXIT WHEN b.checked IS NULL OR b.checked = 0;
        PERFORM counter_internal.tracked_add_batch(t, run, b);
        after := b.after;
    END LOOP;
    IF every_key AND t.full_pending THEN
        UPDATE counter.tracked c SET full_pending = false WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id;
    END IF;
    r := counter_internal.tracked_finish_run(t, run, 'ok');
    RETURN ROW(t.name, r.run_id, r.watermark, r.all_keys, r.keys_checked, r.keys_corrected,
        r.drift_positive, r.drift_negative, r.max_abs_drift, r.finished_at - r.started_at,
        r.outcome)::counter.reconcile_result;
END
$fn$;
COMMENT ON FUNCTION counter.reconcile(text, timestamptz, boolean) IS
    'reconciles a tracked counter from its source rows up to a watermark; one summary row';

-- The reconciliation's step function for the one commit loop
-- (counter.run_steps, 06_jobs_code.sql; an entry point: checks the caller
-- owns the counter, and from the second step on that the run is this
-- counter's running run). One run, with the default watermark: the dirty
-- keys (every key while a full run is pending), phase 'keys', a batch per
-- step; then this run's slice of the verification cycle, phase 'verify'.
CREATE OR REPLACE FUNCTION counter.tracked_run_step(target text, args jsonb, state jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    t counter.tracked := counter_internal.tracked_get(target);
    run bigint;
    w timestamptz;
    w_from timestamptz;
    every_key boolean;
    est double precision;
    slice bigint;
    verifying boolean;
    cycle_done boolean := false;
    b record;
    outcome text;
    r counter.tracked_runs;
BEGIN
    PERFORM counter_internal.tracked_require_owner(t, 'reconcile');
    IF state IS NULL THEN
        -- a buffered counter is flushed first (this transaction commits
        -- before the steps); the flush may schedule a repair (full_pending)
        IF t.buffered THEN
            PERFORM counter.flush(t.name);
            t := counter_internal.tracked_get(target);
        END IF;
        IF NOT pg_catalog.pg_try_advisory_xact_lock(counter_internal.lock_class('tracked'), t.counter_id) THEN
            RAISE NOTICE 'tracked counter "%" is being reconciled by another session; skipped', t.name;
            RETURN '{"finished": true, "rows": 0, "outcome": "skipped"}';
        END IF;
        t := counter_internal.tracked_check_restored(t);
        w := pg_catalog.date_bin(t.bucket_width, pg_catalog.clock_timestamp() - t.watermark_lag,
                                 '2000-01-01 00:00:00+00'::timestamptz);
        every_key := t.full_pending;
        SELECT s.run, s.run_watermark, s.run_from INTO run, w, w_from FROM counter_internal.tracked_start_run(t, w, every_key) s;
        SELECT GREATEST(c.reltuples, 0) INTO est FROM pg_catalog.pg_class c
        WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(counter_internal.tracked_table(t, 'base'));
        -- This run's slice of the verification cycle: enough keys that every
        -- key is checked once per verify_every at this job's interval.
        IF NOT every_key THEN
            slice := GREATEST(1, pg_catalog.ceil(coalesce(est, 0) * pg_catalog.date_part('epoch', t.reconcile_every)
                                           / pg_catalog.date_part('epoch', t.verify_every)))::bigint;
            IF t.verify_after IS NULL THEN
                UPDATE counter.tracked c SET verify_started = pg_catalog.clock_timestamp()
                WHERE c.counter_id = t.counter_id;
            END IF;
        END IF;
        RETURN pg_catalog.jsonb_build_object('run', run, 'watermark', w, 'from', w_from, 'every_key', every_key,
            'verify_slice', slice, 'verify_from', t.verify_after, 'verified', 0, 'after', NULL,
            'phase', CASE WHEN every_key THEN 'every key' ELSE 'dirty keys' END, 'done', 0,
            'total', CASE WHEN every_key THEN est::bigint END, 'rows', 0, 'finished', false);
    END IF;
    run := (state ->> 'run')::bigint;
    PERFORM counter_internal.tracked_require_run(t, run);
    w := (state ->> 'watermark')::timestamptz;
    IF w OPERATOR(pg_catalog.<>) (SELECT x.watermark FROM counter.tracked_runs x WHERE x.run_id = run) THEN
        RAISE EXCEPTION 'run % of tracked counter "%" has another watermark', run, t.name USING ERRCODE = '22023';
    END IF;
    verifying := state ->> 'phase' = 'verify';
    IF state ? 'error' OR state ? 'stop' THEN
        outcome := CASE WHEN state ? 'error' THEN 'error' ELSE 'partial' END;
    ELSE
        b := counter_internal.tracked_run_batch(t, run, w, (state ->> 'from')::timestamptz,
                                                verifying OR (state ->> 'every_key')::boolean, state ->> 'after');
        IF NOT b.locked THEN
            outcome := 'partial';
        ELSIF b.checked <> 0 THEN
            PERFORM counter_internal.tracked_add_batch(t, run, b);
            state := state || pg_catalog.jsonb_build_object('after', b.after,
                'done', (state ->> 'done')::bigint + abs(b.checked));
            IF NOT verifying THEN
                RETURN state;
            END IF;
            state := state || pg_catalog.jsonb_build_object(
                'verified', (state ->> 'verified')::bigint + abs(b.checked));
            IF (state ->> 'verified')::bigint < (state ->> 'verify_slice')::bigint THEN
                RETURN state;
            END IF;
            outcome := 'ok';   -- this run's slice is verified
        ELSIF NOT verifying AND state ->> 'verify_slice' IS NOT NULL THEN
            -- the dirty keys are done: the verification slice, from where the last run left it
            RETURN state || pg_catalog.jsonb_build_object('phase', 'verify', 'after', state -> 'verify_from',
                'done', 0, 'total', (state ->> 'verify_slice')::bigint);
        ELSE
            outcome := 'ok';   -- no key left
            IF verifying THEN   -- the cycle is complete: the next one starts from the first key
                UPDATE counter.tracked c SET verify_after = NULL, last_verified = pg_catalog.clock_timestamp()
                WHERE c.counter_id = t.counter_id;
                cycle_done := true;
            END IF;
        END IF;
    END IF;
    -- the run ends: the verification cycle moves on to where it got
    IF verifying AND NOT cycle_done THEN
        UPDATE counter.tracked c SET verify_after = state ->> 'after' WHERE c.counter_id = t.counter_id;
    END IF;
    IF verifying THEN
        UPDATE counter.job_runs x SET info = x.info OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(
            'keys_verified', (x.info ->> 'keys_verified')::bigint + (state ->> 'verified')::bigint)
        WHERE x.run_id = run AND x.kind = 'reconcile' AND x.object_id = t.counter_id;
    END IF;
    IF outcome = 'ok' AND (state ->> 'every_key')::boolean THEN
        UPDATE counter.tracked c SET full_pending = false WHERE c.counter_id = t.counter_id;
    END IF;
    r := counter_internal.tracked_finish_run(t, run, outcome, state -> 'error');
    RETURN state || pg_catalog.jsonb_build_object('finished', true, 'outcome', outcome, 'rows', r.keys_corrected);
END
$fn$;

-- The job the background worker (or pg_cron) runs, in a session of the
-- counter's owner: one reconciliation run, one transaction per batch (the
-- one commit loop). rows_affected = keys corrected.
CREATE OR REPLACE PROCEDURE counter.job_reconcile(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql
AS $fn$
DECLARE
    st pg_catalog.jsonb;
BEGIN
    CALL counter.run_steps('reconcile', target, '{}', st);
    rows_affected := pg_catalog.jsonb_extract_path_text(st, 'rows')::pg_catalog.int8;
END
$fn$;
COMMENT ON PROCEDURE counter.job_reconcile(text, bigint) IS
    'reconciliation job of a tracked counter (one transaction per batch); rows_affected = keys corrected';

CREATE OR REPLACE VIEW counter.tracked_history AS
SELECT c.name AS counter, r.run_id, r.started_at, r.finished_at - r.started_at AS duration, r.watermark,
       r.all_keys, r.keys_checked, r.keys_corrected, r.drift_positive, r.drift_negative, r.max_abs_drift,
       r.outcome, r.keys_busy, r.keys_verified
FROM counter.tracked_runs r JOIN counter.tracked c USING (counter_id)
WHERE pg_catalog.pg_has_role(c.owner, 'USAGE');
COMMENT ON VIEW counter.tracked_history IS 'reconciliation runs of every tracked counter, with their drift';

CREATE OR REPLACE VIEW counter.tracked_drift AS
SELECT c.name AS counter, count(r.run_id) AS runs, max(r.started_at) AS last_run,
       coalesce(sum(r.keys_corrected), 0) AS keys_corrected, coalesce(sum(r.drift_positive), 0) AS drift_positive,
       coalesce(sum(r.drift_negative), 0) AS drift_negative, coalesce(max(r.max_abs_drift), 0) AS max_abs_drift,
       (SELECT x.drift_positive - x.drift_negative FROM counter.tracked_runs x
        WHERE x.counter_id = c.counter_id AND x.outcome <> 'running' ORDER BY x.run_id DESC LIMIT 1) AS last_abs_drift
FROM counter.tracked c LEFT JOIN counter.tracked_runs r ON r.counter_id = c.counter_id AND r.outcome <> 'running'
WHERE pg_catalog.pg_has_role(c.owner, 'USAGE')
GROUP BY c.counter_id, c.name;
COMMENT ON VIEW counter.tracked_drift IS 'per tracked counter: runs and total drift found';

CREATE OR REPLACE VIEW counter.tracked_key_drift_history AS
SELECT c.name AS counter, r.run_id, r.started_at, k.key, k.cached, k.truth, k.drift
FROM counter.tracked_key_drift k JOIN counter.tracked_runs r USING (run_id) JOIN counter.tracked c USING (counter_id)
WHERE pg_catalog.pg_has_role(c.owner, 'USAGE');
COMMENT ON VIEW counter.tracked_key_drift_history IS 'keys that drifted past their counter''s drift_log_threshold';

-- Triggers switched off and on again: rows written meanwhile were not
-- counted, so when a counter's triggers are enabled again (ALTER TABLE ...
-- ENABLE TRIGGER), every key is verified in its next run. (Rows written with
-- session_replication_role = replica cannot be seen this way; the
-- verification cycle and the check of rows newly past the watermark find
-- them.) It reads pg_trigger and writes counter.tracked only.
CREATE OR REPLACE FUNCTION counter_internal.tracked_ddl()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    t counter.tracked;
    off boolean;
BEGIN
    FOR t IN SELECT c.* FROM counter.tracked c
             WHERE c.mode OPERATOR(pg_catalog.=) 'trigger'
               AND c.source::oid IN (SELECT d.objid FROM pg_catalog.pg_event_trigger_ddl_commands() d
                                     WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass) LOOP
        off := EXISTS (SELECT FROM pg_catalog.pg_trigger g
                       WHERE g.tgrelid OPERATOR(pg_catalog.=) t.source
                         AND g.tgname OPERATOR(pg_catalog.=) ANY (ARRAY[format('counter_%s_ins', t.counter_id),
                             format('counter_%s_del', t.counter_id), format('counter_%s_upd', t.counter_id)]::name[])
                         AND g.tgenabled OPERATOR(pg_catalog.=) ANY (ARRAY['D', 'R']::"char"[]));
        IF off AND NOT t.triggers_off THEN
            UPDATE counter.tracked c SET triggers_off = true WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id;
            RAISE WARNING 'tracked counter "%" stops counting while the triggers of % are disabled', t.name, t.source
                USING HINT = 'Every key is verified once they are enabled again.';
        ELSIF NOT off AND t.triggers_off THEN
            UPDATE counter.tracked c SET triggers_off = false, full_pending = true, verify_after = NULL
            WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id;
        END IF;
    END LOOP;
END
$fn$;

-- A source table dropped (DROP TABLE, DROP SCHEMA, DROP OWNED): its counters
-- go with it, state, catalog rows, history and jobs.
CREATE OR REPLACE FUNCTION counter_internal.tracked_forget_dropped()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    t counter.tracked;
BEGIN
    FOR t IN SELECT c.* FROM counter.tracked c
             WHERE c.source::oid IN (SELECT d.objid FROM pg_catalog.pg_event_trigger_dropped_objects() d
                                     WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                                       AND d.objsubid OPERATOR(pg_catalog.=) 0) LOOP
        EXECUTE format('DROP FUNCTION IF EXISTS counter_internal.%I(timestamptz, timestamptz, text, boolean, integer)',
                       format('tracked_%s_batch', t.counter_id));
        EXECUTE format('DROP TABLE IF EXISTS %s, %s', counter_internal.tracked_table(t, 'base'),
                       counter_internal.tracked_table(t, 'delta'));
        DELETE FROM counter.tracked c WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id;
        PERFORM counter_internal.run_forget('reconcile', t.counter_id);
        PERFORM counter_internal.tracked_invalidate();
        PERFORM counter.job_unregister('reconcile', t.name);
    END LOOP;
END
$fn$;

-- Where each counter stands: the watermark, pending full runs, the
-- verification cycle, triggers switched off.
CREATE OR REPLACE VIEW counter.tracked_status AS
SELECT c.name AS counter, c.source, c.mode, c.last_watermark, c.full_pending, c.triggers_off, c.verify_every,
       c.verify_started AS verify_cycle_started, c.verify_after AS verify_cursor, c.last_verified,
       c.last_verified IS NULL OR c.last_verified < pg_catalog.now() - c.verify_every AS verify_overdue
FROM counter.tracked c
WHERE pg_catalog.pg_has_role(c.owner, 'USAGE');
COMMENT ON VIEW counter.tracked_status IS 'per tracked counter: watermark, pending full run, verification cycle';

-- The views show the counters of the roles the reader belongs to.
GRANT SELECT ON counter.tracked_values, counter.tracked_history, counter.tracked_drift,
    counter.tracked_key_drift_history, counter.tracked_status TO PUBLIC;

-- ---- src/sql/32_tracked_acl.sql
-- Tracked counters: who reads the catalogs (the update from 1.1 includes
-- this piece as it is).

-- Every role reads the catalog rows of the counters it owns (or belongs to
-- the owner of), and nothing else; nobody writes them but this file's
-- functions.
ALTER TABLE counter.tracked ENABLE ROW LEVEL SECURITY;
ALTER TABLE counter.tracked_key_drift ENABLE ROW LEVEL SECURITY;
CREATE POLICY tracked_read ON counter.tracked FOR SELECT USING (pg_catalog.pg_has_role(owner, 'USAGE'));
CREATE POLICY tracked_key_drift_read ON counter.tracked_key_drift FOR SELECT
    USING (EXISTS (SELECT FROM counter.tracked_runs r WHERE r.run_id OPERATOR(pg_catalog.=) tracked_key_drift.run_id));
-- (counter.tracked_runs is a view over the run record that shows each role
-- only its counters' runs: 31_tracked_code.sql.)
GRANT SELECT ON counter.tracked, counter.tracked_key_drift TO PUBLIC;

-- ---- src/sql/35_buffered.sql
-- Buffered counters (doc/reference/tracked.md, "Buffered counters";
-- src/buffer.cpp): a tracked counter registered with buffered => true keeps
-- the adds of committed transactions in a shared-memory table and writes
-- them to its delta table when it is flushed (counter.flush, the 'flush'
-- job). The tables; the functions are in 36_buffered_code.sql.
--
-- Advisory locks (transaction level): (class 'flush' of the one registry,
-- doc/reference/worker.md "Advisory-lock classes"; counter_id): held by a
-- flush of the counter until its writes commit or abort.

ALTER TABLE counter.tracked ADD COLUMN buffered boolean NOT NULL DEFAULT false;

-- One row per buffered counter: the shared table its last flush saw (epoch:
-- when that table was made; another one means a restart, which may have
-- lost published adds, and schedules a repair), and its flushes.
CREATE TABLE counter_internal.tracked_flushes (
    counter_id          integer PRIMARY KEY REFERENCES counter.tracked ON DELETE CASCADE,
    epoch               timestamptz,
    flushed_at          timestamptz,
    flushes             bigint NOT NULL DEFAULT 0,
    entries_flushed     bigint NOT NULL DEFAULT 0,
    repairs             bigint NOT NULL DEFAULT 0,
    repair_requested_at timestamptz
);
COMMENT ON TABLE counter_internal.tracked_flushes IS
    'flushes of buffered counters and the shared table each last saw (restart detection)';
REVOKE ALL ON counter_internal.tracked_flushes FROM PUBLIC;

-- ---- src/sql/36_buffered_code.sql
-- Buffered counters: the functions (the tables are in 35_buffered.sql).
-- This piece holds code only, so the update from 1.1 includes it as it is.

-- When the shared table of buffered counters was made (NULL: the library is
-- not preloaded, nothing is buffered).
CREATE OR REPLACE FUNCTION counter_internal.tracked_buffer_epoch()
RETURNS timestamptz
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_tracked_buffer_epoch';

-- The keys among 'keys' that reconciliation up to w must leave alone (busy):
-- an add not yet published, an amount published and not flushed, or one a
-- flush wrote that the statement's snapshot does not see, in a bucket < w.
-- Called by the batch function of a buffered counter, as its owner.
CREATE OR REPLACE FUNCTION counter_internal.tracked_buffer_busy(counter_id integer, w timestamptz, keys anyarray)
RETURNS anyarray
LANGUAGE c STABLE STRICT
AS 'MODULE_PATHNAME', 'counter_tracked_buffer_busy';

-- Every key of a buffered counter with what its buffer adds to the table's
-- value (sample: any value of the key type, e.g. NULL::bigint).
CREATE OR REPLACE FUNCTION counter_internal.tracked_buffered(counter_id integer, sample anyelement)
RETURNS TABLE (key anyelement, amount bigint)
LANGUAGE c STABLE
AS 'MODULE_PATHNAME', 'counter_tracked_buffered';

-- counter.untrack: what is published for the counter is dropped.
CREATE OR REPLACE FUNCTION counter_internal.tracked_buffer_forget(counter_id integer)
RETURNS bigint
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'counter_tracked_buffer_forget';

-- Writes what is published for a buffered counter (NULL: for every buffered
-- counter of this database the caller may act for) to its delta table, as
-- the counter's owner, in the caller's transaction; the shared table lets
-- go of it when that transaction commits. Returns the entries written (0
-- when another transaction is flushing the counter right now). Needs the
-- privileges of the counter's owner.
CREATE OR REPLACE FUNCTION counter.flush(name text DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_flush';
COMMENT ON FUNCTION counter.flush(text) IS
    'writes the published, not yet flushed adds of buffered counters to their delta tables';

-- The job kind 'flush' (one job per buffered counter, run_every =
-- counter_ext.flush_interval when the counter was registered).
CREATE OR REPLACE PROCEDURE counter.job_flush(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    rows_affected := counter.flush(target);
END
$fn$;
COMMENT ON PROCEDURE counter.job_flush(text, bigint) IS
    'flush job of a buffered counter; rows_affected = entries written';

-- One row per buffered counter the caller may act for.
CREATE OR REPLACE FUNCTION counter.buffer_status()
RETURNS TABLE (counter text, preloaded boolean, entries bigint, pending bigint, in_flight bigint, pinned bigint,
               flushed_at timestamptz, flushes bigint, repairs bigint, repair_requested_at timestamptz,
               overflows bigint)
LANGUAGE c STABLE
AS 'MODULE_PATHNAME', 'counter_buffer_status';

CREATE OR REPLACE VIEW counter.buffered AS SELECT * FROM counter.buffer_status();
COMMENT ON VIEW counter.buffered IS
    'buffered counters: whether the library is preloaded, what the shared table holds, flushes, repairs';
GRANT SELECT ON counter.buffered TO PUBLIC;

-- ---- src/sql/40_partition.sql
-- Partition maintenance for append-only event tables declared
-- PARTITION BY RANGE (<timestamptz column>): partitions on a UTC grid
-- (intervals that divide a day), created ahead, a default partition for
-- stragglers drained back into proper partitions in bounded batches, whole
-- partitions expired by retention. Reference: doc/reference/partition.md.
--
-- Privileges (doc/security.md): a managed table is served as its owner.
-- The entry points (partition_manage, partition_unmanage, partition_maintain,
-- run_maintenance, the job) are open to every role and check their caller:
-- a member of the table's owner, or a superuser. Every statement that touches
-- the table or its partitions (CREATE TABLE, ATTACH, the moves out of the
-- default partition, DROP, LOCK, reading rows) runs as the table's owner in
-- a security-restricted operation with search_path pg_catalog, pg_temp
-- (counter_internal.exec_as_owner): a CHECK constraint or a default that
-- calls the owner's function runs as the owner, whoever started the
-- maintenance. The SECURITY DEFINER functions themselves touch only this
-- file's catalogs, which everyone reads as far as they own the tables
-- (row-level security) and nobody writes directly.
--
-- Bounded by construction: one run never creates a partition outside
-- [as_of - retention, as_of + premake] (without retention, 7 days back);
-- rows of the default partition outside that window are
-- reported (last_outside, a WARNING) and left where they are.
--
-- Bounds and names come from UTC epoch arithmetic, and every function that
-- turns a timestamptz into text pins TimeZone and DateStyle, so the
-- session's settings never change a bound or a name.
--
-- Locks: each bounded step runs in its own transaction and first takes the
-- transaction-level advisory lock (class counter_internal.lock_class(
-- 'partition'), the one registry of doc/reference/worker.md "Advisory-lock
-- classes"; second int the parent's oid as int4); a second caller that finds
-- it taken skips the table.
-- DDL waits at most the table's lock_timeout, retried lock_retries times.

CREATE TABLE counter.partitioned_tables (
    parent               regclass PRIMARY KEY,
    control              name NOT NULL,
    part_interval        interval NOT NULL,
    premake              integer NOT NULL CHECK (premake >= 1),
    retention            interval,
    retention_keep_table boolean NOT NULL DEFAULT false,
    batch_rows           integer NOT NULL DEFAULT 10000 CHECK (batch_rows >= 1),
    step_partitions      integer NOT NULL DEFAULT 24 CHECK (step_partitions >= 1),
    lock_timeout         interval NOT NULL DEFAULT interval '500 milliseconds'
                         CHECK (lock_timeout > interval '0'),
    lock_retries         integer NOT NULL DEFAULT 3 CHECK (lock_retries >= 0),
    created_at           timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- (each maintenance run is a row of the one run record, counter.job_runs,
    -- kind 'partition_maintenance', object_id = the parent's oid; the view
    -- counter.partition_status shows the last one's last_* columns)
    -- the target of its job (schema.table when registered), followed through
    -- renames by counter_internal.partition_follow_rename (80_drop.sql)
    job_target           text
);
COMMENT ON TABLE counter.partitioned_tables IS
    'tables whose hourly (or daily) partitions counter_ext maintains, with their last maintenance outcome';
SELECT pg_catalog.pg_extension_config_dump('counter.partitioned_tables', '');
ALTER TABLE counter.partitioned_tables ENABLE ROW LEVEL SECURITY;
CREATE POLICY partitioned_tables_read ON counter.partitioned_tables FOR SELECT
    USING (pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                   WHERE c.oid OPERATOR(pg_catalog.=) parent), 'USAGE'));
GRANT SELECT ON counter.partitioned_tables TO PUBLIC;

-- An hour being drained in several transactions: its rows go first into a
-- standalone table (the future partition), attached once the last rows moved.
CREATE TABLE counter.partition_staging (
    -- counter.partitioned_tables (no FOREIGN KEY between dumped tables:
    -- pg_restore -j loads their rows in any order; 71_dump_cascades.sql)
    parent     regclass PRIMARY KEY,
    staging    regclass NOT NULL,
    lo         timestamptz NOT NULL,
    hi         timestamptz NOT NULL,
    started_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE counter.partition_staging IS
    'partitions being filled from the default partition over several transactions (attached when full)';
SELECT pg_catalog.pg_extension_config_dump('counter.partition_staging', '');
ALTER TABLE counter.partition_staging ENABLE ROW LEVEL SECURITY;
CREATE POLICY partition_staging_read ON counter.partition_staging FOR SELECT
    USING (EXISTS (SELECT FROM counter.partitioned_tables t WHERE t.parent OPERATOR(pg_catalog.=) partition_staging.parent));
GRANT SELECT ON counter.partition_staging TO PUBLIC;

-- The name of a partition or of the default partition: parent || suffix when
-- that fits in 63 bytes; otherwise the parent's name cut on a character
-- boundary, '_', the first 8 hex digits of md5(parent name) (a pinned hash:
-- the same name forever) and the suffix. Never a silent truncation.
CREATE FUNCTION counter.partition_name_for(parent_name name, suffix text)
RETURNS name
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    full_name text := parent_name::text OPERATOR(pg_catalog.||) suffix;
    tag text;
    budget int;
    cut text;
BEGIN
    IF octet_length(suffix) OPERATOR(pg_catalog.>) 40 THEN
        RAISE EXCEPTION 'partition name suffix "%" is too long', suffix USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF octet_length(full_name) OPERATOR(pg_catalog.<=) 63 THEN
        RETURN full_name::name;
    END IF;
    tag := '_' OPERATOR(pg_catalog.||) left(md5(parent_name::text), 8);
    budget := 63 OPERATOR(pg_catalog.-) octet_length(tag) OPERATOR(pg_catalog.-) octet_length(suffix);
    cut := parent_name::text;
    WHILE octet_length(cut) OPERATOR(pg_catalog.>) budget LOOP
        cut := left(cut, -1);
    END LOOP;
    RETURN (cut OPERATOR(pg_catalog.||) tag OPERATOR(pg_catalog.||) suffix)::name;
END
$$;
COMMENT ON FUNCTION counter.partition_name_for(name, text) IS
    'parent name plus suffix, shortened with a pinned md5 tag when longer than 63 bytes';

-- The UTC suffix of the partition starting at lo: _pYYYYMMDDHH24, plus MI
-- for intervals shorter than an hour.
CREATE FUNCTION counter.partition_suffix(lo timestamptz, part_interval interval)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT '_p' OPERATOR(pg_catalog.||) to_char(timezone('UTC', lo),
        CASE WHEN extract(epoch FROM part_interval) OPERATOR(pg_catalog.<) 3600
             THEN 'YYYYMMDDHH24MI' ELSE 'YYYYMMDDHH24' END)
$$;

-- The start of the UTC slot holding ts, for a slot length in seconds that
-- divides a day (slots then line up with UTC midnight).
CREATE FUNCTION counter.partition_slot(ts timestamptz, step_seconds bigint)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT to_timestamp((floor(extract(epoch FROM ts) OPERATOR(pg_catalog./) step_seconds)
                          OPERATOR(pg_catalog.*) step_seconds)::double precision)
$$;

-- Checks an interval for partitioning; returns its length in seconds.
CREATE FUNCTION counter.partition_interval_seconds(part_interval interval)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s numeric := extract(epoch FROM part_interval);
BEGIN
    IF extract(month FROM part_interval) OPERATOR(pg_catalog.<>) 0
       OR extract(year FROM part_interval) OPERATOR(pg_catalog.<>) 0
       OR s OPERATOR(pg_catalog.<) 900 OR s OPERATOR(pg_catalog.>) 86400
       OR s OPERATOR(pg_catalog.%) 60 OPERATOR(pg_catalog.<>) 0
       OR 86400 OPERATOR(pg_catalog.%) s OPERATOR(pg_catalog.<>) 0 THEN
        RAISE EXCEPTION 'partition interval % does not divide a day evenly', part_interval
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use a whole number of minutes from 15 minutes to 1 day that divides 24 hours, e.g. 1, 2, 3, 4, 6, 12 hours or 1 day.';
    END IF;
    RETURN s::bigint;
END
$$;

-- Every partition of a parent with its bounds, ordered by lower bound, then
-- the default partition (NULL bounds); MINVALUE/MAXVALUE are -infinity and
-- infinity. Read from the relcache's partition descriptor (src/partition.cpp).
CREATE FUNCTION counter.partition_bounds(parent regclass)
RETURNS TABLE (partition regclass, lo timestamptz, hi timestamptz, is_default boolean)
LANGUAGE c STABLE STRICT ROWS 1000
AS 'MODULE_PATHNAME', 'counter_partition_bounds';
COMMENT ON FUNCTION counter.partition_bounds(regclass) IS
    'partitions of a range-partitioned table with their bounds as timestamptz';

-- The default partition of a parent, or NULL.
CREATE FUNCTION counter.partition_default(parent regclass)
RETURNS regclass
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p.partdefid::regclass FROM pg_partitioned_table p
    WHERE p.partrelid OPERATOR(pg_catalog.=) partition_default.parent
      AND p.partdefid OPERATOR(pg_catalog.<>) 0
$$;

-- A managed table that is dropped is forgotten, with its job. SECURITY
-- DEFINER: it runs for every DROP TABLE in the database, by any role, and
-- must not need privileges on schema counter; it touches only rows of the
-- tables that very command dropped.
CREATE FUNCTION counter.partition_forget_dropped()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    o record;
BEGIN
    FOR o IN SELECT d.objid, coalesce(c.job_target, d.object_identity) AS target
             FROM pg_event_trigger_dropped_objects() d
             JOIN counter.partitioned_tables c ON c.parent::oid = d.objid
             WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.object_type = 'table' LOOP
        DELETE FROM counter.partitioned_tables c WHERE c.parent::oid = o.objid;
        PERFORM counter.job_unregister('partition_maintenance', o.target);
    END LOOP;
END
$$;
CREATE EVENT TRIGGER counter_partition_forget_dropped ON sql_drop
    WHEN TAG IN ('DROP TABLE', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION counter.partition_forget_dropped();
REVOKE ALL ON FUNCTION counter.partition_forget_dropped() FROM PUBLIC;

-- ---- src/sql/41_partition_code.sql
-- Partition maintenance: the functions and views that changed in 1.2 (the
-- catalog tables and the functions kept from 1.1 are in 40_partition.sql).
-- Only functions and views: the update from 1.1 includes this file as it is.

-- The owner of a managed table: the role its maintenance runs as.
CREATE OR REPLACE FUNCTION counter_internal.partition_owner(parent regclass)
RETURNS regrole
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT c.relowner::pg_catalog.regrole FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) parent $$;

-- Runs a command built by this file (identifiers through %I or regclass
-- output, values as literals of timestamptz or numbers only) as the owner of
-- parent, restricted. Returns the rows it processed.
CREATE OR REPLACE FUNCTION counter_internal.partition_exec(parent regclass, sql text)
RETURNS bigint
LANGUAGE sql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT counter_internal.exec_as_owner_cmd(counter_internal.partition_owner(parent), sql, true) $$;

-- Raises unless the calling role may manage parent (a member of its owner,
-- or a superuser).
CREATE OR REPLACE FUNCTION counter_internal.partition_require_owner(parent regclass)
RETURNS void
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := counter_internal.caller();
BEGIN
    IF NOT (pg_catalog.pg_has_role(caller, counter_internal.partition_owner(parent), 'USAGE')
            OR (SELECT a.rolsuper FROM pg_catalog.pg_roles a WHERE a.oid OPERATOR(pg_catalog.=) caller)) THEN
        RAISE EXCEPTION 'must be owner of table %', parent USING ERRCODE = 'insufficient_privilege',
            DETAIL = 'Partition maintenance of a table is for members of its owner (or a superuser).';
    END IF;
END
$$;

-- The parent's columns that an INSERT can list (not dropped, not generated).
CREATE OR REPLACE FUNCTION counter_internal.partition_column_list(parent regclass)
RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum)
    FROM pg_attribute a
    WHERE a.attrelid OPERATOR(pg_catalog.=) partition_column_list.parent
      AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped AND a.attgenerated OPERATOR(pg_catalog.=) ''
$$;

-- Logical replication (doc/operations.md): a partition made by counter_ext
-- is replicated as its parent is, set as the parent's owner.
--   REPLICA IDENTITY: PostgreSQL does not copy it, and a partition that is
--   published without one refuses UPDATE and DELETE. USING INDEX maps to the
--   partition's index attached to the parent's identity index, so t must be
--   attached already.
--   Publications that list partitions of the parent one by one (not the
--   parent, an ancestor, their schema, nor all tables, which include new
--   partitions by themselves) get t too, when t is a new partition. That
--   needs the publication's owner (ALTER PUBLICATION); a maintenance run as
--   another role warns and goes on.
CREATE OR REPLACE FUNCTION counter_internal.partition_replicate_like_parent(parent regclass, t regclass, new_partition boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ident "char" := (SELECT c.relreplident FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) parent);
    idx regclass;
    pub name;
BEGIN
    IF ident OPERATOR(pg_catalog.<>) (SELECT c.relreplident FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) t)
       OR ident OPERATOR(pg_catalog.=) 'i' THEN
        CASE ident
        WHEN 'f' THEN PERFORM counter_internal.partition_exec(parent, format('ALTER TABLE %s REPLICA IDENTITY FULL', t));
        WHEN 'n' THEN PERFORM counter_internal.partition_exec(parent, format('ALTER TABLE %s REPLICA IDENTITY NOTHING', t));
        WHEN 'd' THEN PERFORM counter_internal.partition_exec(parent, format('ALTER TABLE %s REPLICA IDENTITY DEFAULT', t));
        ELSE
            SELECT h.inhrelid::regclass INTO idx
            FROM pg_index pi
            JOIN pg_inherits h ON h.inhparent OPERATOR(pg_catalog.=) pi.indexrelid
            JOIN pg_index ci ON ci.indexrelid OPERATOR(pg_catalog.=) h.inhrelid
            WHERE pi.indrelid OPERATOR(pg_catalog.=) parent AND pi.indisreplident
              AND ci.indrelid OPERATOR(pg_catalog.=) t;
            IF idx IS NULL THEN
                RAISE EXCEPTION 'partition % has no index attached to the replica identity index of %', t, parent
                    USING ERRCODE = 'object_not_in_prerequisite_state';
            END IF;
            PERFORM counter_internal.partition_exec(parent, format('ALTER TABLE %s REPLICA IDENTITY USING INDEX %I', t,
                (SELECT c.relname FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) idx)));
        END CASE;
    END IF;
    FOR pub IN
        SELECT DISTINCT p.pubname FROM pg_publication p
        JOIN pg_publication_rel pr ON pr.prpubid OPERATOR(pg_catalog.=) p.oid
        JOIN pg_inherits h ON h.inhrelid OPERATOR(pg_catalog.=) pr.prrelid
                          AND h.inhparent OPERATOR(pg_catalog.=) parent
        WHERE new_partition AND NOT p.puballtables AND h.inhrelid OPERATOR(pg_catalog.<>) t
          AND NOT EXISTS (SELECT 1 FROM pg_publication_rel x
                          WHERE x.prpubid OPERATOR(pg_catalog.=) p.oid
                            AND x.prrelid IN (SELECT a.relid FROM pg_partition_ancestors(parent) a
                                              UNION ALL SELECT t))
          AND NOT EXISTS (SELECT 1 FROM pg_publication_namespace x
                          WHERE x.pnpubid OPERATOR(pg_catalog.=) p.oid
                            AND x.pnnspid IN (SELECT c.relnamespace FROM pg_class c
                                              WHERE c.oid OPERATOR(pg_catalog.=) t))
        ORDER BY 1
    LOOP
        BEGIN
            PERFORM counter_internal.partition_exec(parent, format('ALTER PUBLICATION %I ADD TABLE %s', pub, t));
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE WARNING 'partition % of % is not added to publication %: %', t, parent, pub, SQLERRM
                USING HINT = 'The publication''s owner can add it: ALTER PUBLICATION ... ADD TABLE.';
        END;
    END LOOP;
END
$$;

-- True when a DELETE from the parent's default partition is published by a
-- publication of this database (FOR ALL TABLES, the parent or an ancestor,
-- the default partition itself, or their schema): a drain must then be
-- published as the rows it moves. A publication of inserts only sees no
-- drain at all (neither its deletes nor its inserts into a table not yet
-- attached), which is right for it as it is.
CREATE OR REPLACE FUNCTION counter_internal.partition_published(parent regclass)
RETURNS boolean
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_publication_tables pt
        JOIN pg_publication p ON p.pubname OPERATOR(pg_catalog.=) pt.pubname AND p.pubdelete
        JOIN pg_class c ON c.relname OPERATOR(pg_catalog.=) pt.tablename
        JOIN pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
                           AND n.nspname OPERATOR(pg_catalog.=) pt.schemaname
        WHERE c.oid IN (SELECT a.relid FROM pg_partition_ancestors(partition_published.parent) a
                        UNION ALL SELECT counter.partition_default(partition_published.parent)))
$$;

-- Creates, as the parent's owner, the standalone table that becomes the
-- partition [lo, hi): the parent's columns, defaults, constraints and indexes
-- (LIKE ... INCLUDING ALL, so ATTACH adopts the indexes instead of building
-- them), privileges and tablespace. With bounded = true it also gets NOT NULL and a
-- CHECK of the bounds, so rows put in it are checked on the way in and ATTACH
-- need not scan it. With how = 'direct' it is created straight as a partition
-- (CREATE TABLE ... PARTITION OF: faster, but it locks the parent in ACCESS
-- EXCLUSIVE mode, so only partition_manage uses it, on a table being set up).
CREATE OR REPLACE FUNCTION counter_internal.partition_make_table(parent regclass, lo timestamptz, hi timestamptz, how text)
RETURNS regclass
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
AS $$
DECLARE
    cfg counter.partitioned_tables;
    rel pg_class;
    nsp name;
    tname name;
    t regclass;
    g record;
BEGIN
    SELECT * INTO STRICT cfg FROM counter.partitioned_tables c WHERE c.parent OPERATOR(pg_catalog.=) partition_make_table.parent;
    SELECT * INTO STRICT rel FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) partition_make_table.parent;
    SELECT n.nspname INTO STRICT nsp FROM pg_namespace n WHERE n.oid OPERATOR(pg_catalog.=) rel.relnamespace;
    tname := counter.partition_name_for(rel.relname, counter.partition_suffix(lo, cfg.part_interval));
    IF how = 'direct' THEN
        PERFORM counter_internal.partition_exec(parent, format('CREATE TABLE %I.%I PARTITION OF %I.%I FOR VALUES FROM (%L) TO (%L)',
                       nsp, tname, nsp, rel.relname, lo, hi));
        PERFORM counter_internal.partition_replicate_like_parent(parent, format('%I.%I', nsp, tname)::regclass, true);
    ELSE
        PERFORM counter_internal.partition_exec(parent, format('CREATE TABLE %I.%I (LIKE %I.%I INCLUDING ALL)%s', nsp, tname, nsp, rel.relname,
                       CASE WHEN rel.reltablespace <> 0
                            THEN format(' TABLESPACE %I', (SELECT s.spcname FROM pg_tablespace s
                                                           WHERE s.oid = rel.reltablespace))
                            ELSE '' END));
    END IF;
    t := format('%I.%I', nsp, tname)::regclass;
    IF how = 'bounded' THEN
        PERFORM counter_internal.partition_exec(parent, format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL, ADD CONSTRAINT counter_ext_bounds CHECK (%I >= %L AND %I < %L)',
                       t, cfg.control, cfg.control, lo, cfg.control, hi));
    END IF;
    -- PostgreSQL does not copy a parent's privileges to new partitions.
    IF rel.relacl IS NOT NULL THEN
        FOR g IN SELECT a.grantee, a.privilege_type, a.is_grantable FROM aclexplode(rel.relacl) a
                 WHERE a.grantee OPERATOR(pg_catalog.<>) rel.relowner LOOP
            PERFORM counter_internal.partition_exec(parent, format('GRANT %s ON %s TO %s%s', g.privilege_type, t,
                           CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' ELSE quote_ident(g.grantee::regrole::text) END,
                           CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END));
        END LOOP;
    END IF;
    RETURN t;
END
$$;

-- Moves up to max_rows rows of [lo, hi) (every row when lo is NULL) from
-- ONLY from_rel into to_rel (the parent: the rows are routed to its
-- partitions), all of them when max_rows is NULL, in one statement: a row is
-- deleted and inserted atomically, so it is never lost nor duplicated; the statement runs as the parent's owner (a CHECK
-- constraint or default calling the owner's function runs as the owner).
-- Triggers and foreign-key actions do not fire (a move is not a delete):
-- that needs session_replication_role = replica, which is set only for a
-- table whose owner is a superuser; tables of other owners may move rows only
-- without triggers and without referencing foreign keys.
CREATE OR REPLACE FUNCTION counter_internal.partition_move(parent regclass, from_rel regclass, to_rel regclass, lo timestamptz,
                                                hi timestamptz, max_rows bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
AS $$
DECLARE
    ctl name := (SELECT c.control FROM counter.partitioned_tables c WHERE c.parent OPERATOR(pg_catalog.=) partition_move.parent);
    cols text := counter_internal.partition_column_list(parent);
    old_role text := current_setting('session_replication_role');
    n bigint;
BEGIN
    IF (SELECT r.rolsuper FROM pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) counter_internal.partition_owner(parent)) THEN
        PERFORM set_config('session_replication_role', 'replica', true);
    ELSIF EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid IN (from_rel, to_rel) AND NOT g.tgisinternal)
       OR EXISTS (SELECT 1 FROM pg_constraint k WHERE k.contype OPERATOR(pg_catalog.=) 'f'
                  AND k.confrelid IN (parent, from_rel)) THEN
        RAISE EXCEPTION 'moving rows out of the default partition of % needs a table owned by a superuser', parent
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'The table has triggers or is referenced by foreign keys, which must not fire for a move.';
    END IF;
    n := counter_internal.partition_exec(parent,
        format('WITH moved AS (DELETE FROM ONLY %1$s WHERE ctid = ANY (ARRAY(SELECT ctid FROM ONLY %1$s '
               '%2$s %3$s)) RETURNING %4$s) '
               'INSERT INTO %5$s (%4$s) OVERRIDING SYSTEM VALUE SELECT %4$s FROM moved',
               from_rel,
               CASE WHEN lo IS NULL THEN '' ELSE format('WHERE %1$I >= %2$L AND %1$I < %3$L', ctl, lo, hi) END,
               CASE WHEN max_rows IS NULL THEN '' ELSE format('LIMIT %s', max_rows) END, cols, to_rel));
    PERFORM set_config('session_replication_role', old_role, true);
    RETURN n;
END
$$;

-- Attaches a table made by partition_make_table as the partition [lo, hi),
-- as the parent's owner, with the parent's replica identity. A bounded t
-- holds rows a drain moved out of the default partition. When deletes from
-- that partition are published, the move was published as DELETEs only (t
-- is not published before it is attached), so a subscriber would lose the
-- rows: then t is set aside under another name, an empty partition is
-- attached in its place, and the rows are moved into it (published as
-- INSERTs, as the partition's or the root's), in this transaction. The
-- parent's statement triggers do not fire for that (a move is no insert; a
-- row trigger cloned to the partition is handled as for every move). A
-- subscriber applies the drain's transaction as deletes from the default
-- partition and inserts of the same rows.
CREATE OR REPLACE FUNCTION counter_internal.partition_attach(parent regclass, t regclass, lo timestamptz, hi timestamptz, bounded boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
AS $$
DECLARE
    held regclass;
    held_name name;
    has_rows boolean := false;
BEGIN
    IF bounded AND counter_internal.partition_published(parent) THEN
        SELECT x.e INTO STRICT has_rows FROM counter_internal.exec_as_owner(counter_internal.partition_owner(parent),
            format('SELECT EXISTS (SELECT 1 FROM ONLY %s) WHERE $1', t), true) AS x(e boolean);
    END IF;
    IF has_rows THEN
        held_name := counter.partition_name_for(
            (SELECT c.relname FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) parent),
            counter.partition_suffix(lo, (SELECT c.part_interval FROM counter.partitioned_tables c
                                          WHERE c.parent OPERATOR(pg_catalog.=) partition_attach.parent)) || '_held');
        PERFORM counter_internal.partition_exec(parent, format('ALTER TABLE %s RENAME TO %I', t, held_name));
        held := t;
        t := counter_internal.partition_make_table(parent, lo, hi, 'bounded');
    END IF;
    PERFORM counter_internal.partition_exec(parent,
        format('ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%L) TO (%L)', parent, t, lo, hi));
    IF bounded THEN
        PERFORM counter_internal.partition_exec(parent, format('ALTER TABLE %s DROP CONSTRAINT counter_ext_bounds', t));
    END IF;
    PERFORM counter_internal.partition_replicate_like_parent(parent, t, true);
    IF held IS NOT NULL THEN
        PERFORM counter_internal.partition_move(parent, held, t, NULL, NULL, NULL);
        PERFORM counter_internal.partition_exec(parent, format('DROP TABLE %s', held));
    END IF;
END
$$;

-- Moves up to max_rows rows of [lo, hi) from the default partition into t
-- (all of them when max_rows is NULL): counter_internal.partition_move.
CREATE OR REPLACE FUNCTION counter_internal.partition_move_rows(parent regclass, t regclass, lo timestamptz, hi timestamptz, max_rows bigint)
RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT counter_internal.partition_move(parent, counter.partition_default(parent), t, lo, hi, max_rows)
$$;

-- One bounded step of maintenance of one table, in the caller's transaction:
-- finish or continue a staged drain; else drop/detach up to step_partitions
-- partitions past retention; else create up to step_partitions missing
-- partitions up to as_of + premake intervals; else drain one slot of the
-- default partition (at most batch_rows rows, or the whole slot under lock
-- when that is small), only slots inside [as_of - retention (or 7 days),
-- as_of + premake]; when done, outside = the rows of the default
-- partition outside that window (left there). status: 'more' (call again),
-- 'done', 'busy' (another session maintains the table), 'skipped' (locks not
-- obtained within lock_timeout after lock_retries retries), 'error' (message
-- in error). Every statement on the table runs as its owner.
CREATE OR REPLACE FUNCTION counter_internal.partition_step(parent regclass, as_of timestamptz,
    OUT created integer, OUT dropped integer, OUT moved bigint, OUT status text, OUT error text,
    OUT outside bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
SET lock_timeout = 0
AS $$
DECLARE
    cfg counter.partitioned_tables;
    stg counter.partition_staging;
    step bigint;
    d regclass;
    cur timestamptz;
    upto timestamptz;
    cutoff timestamptz;
    win_lo timestamptz;
    r record;
    t regclass;
    lo timestamptz;
    hi timestamptz;
    n bigint;
    todo timestamptz[];
    busy_slots timestamptz[];
    covered tstzmultirange;
    expired regclass[];
    action text;
    attempt int := 0;
    near boolean;
    i int;
    drain_lo timestamptz;
    drain_hi timestamptz;
BEGIN
    created := 0; dropped := 0; moved := 0; status := 'done';
    as_of := coalesce(as_of, now());
    SELECT * INTO cfg FROM counter.partitioned_tables c WHERE c.parent OPERATOR(pg_catalog.=) partition_step.parent;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table % is not managed by counter_ext', parent USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT pg_catalog.pg_try_advisory_xact_lock(counter_internal.lock_class('partition'), parent::oid::int4) THEN
        status := 'busy';
        RETURN;
    END IF;
    PERFORM set_config('lock_timeout', (extract(epoch FROM cfg.lock_timeout) OPERATOR(pg_catalog.*) 1000)::bigint::text, true);
    step := counter.partition_interval_seconds(cfg.part_interval);
    d := counter.partition_default(parent);
    cur := counter.partition_slot(as_of, step);
    upto := cur OPERATOR(pg_catalog.+) make_interval(secs => step OPERATOR(pg_catalog.*) cfg.premake);
    cutoff := CASE WHEN cfg.retention IS NOT NULL THEN as_of OPERATOR(pg_catalog.-) cfg.retention END;

    LOOP -- attempts: a lock_not_available rolls the attempt back, waits, retries
        attempt := attempt OPERATOR(pg_catalog.+) 1;
        BEGIN
            created := 0; dropped := 0; moved := 0; status := 'done'; outside := NULL;
            SELECT * INTO stg FROM counter.partition_staging s WHERE s.parent OPERATOR(pg_catalog.=) partition_step.parent;
            IF FOUND THEN
                -- A staged drain: move another batch, or the rest under lock and attach.
                action := 'drain';
                IF d IS NULL THEN
                    RAISE EXCEPTION 'table % lost its default partition during a drain', parent
                        USING ERRCODE = 'object_not_in_prerequisite_state';
                END IF;
                SELECT x.n INTO n FROM counter_internal.exec_as_owner(counter_internal.partition_owner(parent),
                    format('SELECT count(*) FROM (SELECT 1 FROM ONLY %s WHERE %I >= %L AND %I < %L LIMIT %s) x WHERE $1',
                           d, cfg.control, stg.lo, cfg.control, stg.hi, cfg.batch_rows OPERATOR(pg_catalog.+) 1), true)
                    AS x(n bigint);
                IF n OPERATOR(pg_catalog.>) cfg.batch_rows THEN
                    moved := counter_internal.partition_move_rows(parent, stg.staging, stg.lo, stg.hi, cfg.batch_rows);
                    status := 'more';
                ELSE
                    PERFORM counter_internal.partition_exec(parent, format('LOCK TABLE %s IN SHARE MODE', parent));
                    PERFORM counter_internal.partition_exec(parent, format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', d));
                    moved := counter_internal.partition_move_rows(parent, stg.staging, stg.lo, stg.hi, NULL);
                    PERFORM counter_internal.partition_attach(parent, stg.staging, stg.lo, stg.hi, true);
                    DELETE FROM counter.partition_staging s WHERE s.parent OPERATOR(pg_catalog.=) partition_step.parent;
                    created := 1;
                    status := 'more';
                END IF;
                EXIT;
            END IF;

            -- One look at the partitions: what they cover, the oldest start, and
            -- those wholly at or before as_of - retention (oldest first).
            SELECT coalesce(range_agg(tstzrange(b.lo, b.hi)), '{}'::tstzmultirange),
                   min(b.lo) FILTER (WHERE b.lo > '-infinity'),
                   (array_agg(b.partition ORDER BY b.hi) FILTER (WHERE b.hi <= cutoff))[1:cfg.step_partitions]
            INTO covered, win_lo, expired
            FROM counter.partition_bounds(parent) b WHERE NOT b.is_default;

            -- Missing slots from the oldest partition (or the current slot) up to
            -- as_of + premake, not overlapping any partition, without rows in default.
            action := 'create';
            win_lo := least(coalesce(counter.partition_slot(win_lo, step), cur), cur);
            -- The window: [as_of - retention (7 days without one), as_of +
            -- premake]. No partition is made outside it, for a gap or for a
            -- row of the default partition, however old or far ahead.
            drain_lo := counter.partition_slot(coalesce(cutoff, as_of OPERATOR(pg_catalog.-) interval '7 days'), step);
            drain_hi := upto OPERATOR(pg_catalog.+) make_interval(secs => step);
            win_lo := greatest(win_lo, drain_lo);
            IF d IS NOT NULL THEN
                SELECT x.a INTO busy_slots FROM counter_internal.exec_as_owner(counter_internal.partition_owner(parent),
                    format('SELECT array_agg(DISTINCT counter.partition_slot(%1$I, %4$s)) FROM ONLY %2$s '
                           'WHERE %1$I >= %3$L AND %1$I <= %5$L AND $1',
                           cfg.control, d, win_lo, step, upto), true) AS x(a timestamptz[]);
            END IF;
            SELECT array_agg(g ORDER BY g) INTO todo FROM (
                SELECT g FROM generate_series(win_lo, upto, make_interval(secs => step)) g
                WHERE NOT (covered && tstzrange(g, g + make_interval(secs => step)))
                  AND NOT (g = ANY (coalesce(busy_slots, '{}')))
                ORDER BY g LIMIT cfg.step_partitions) s;
            IF todo IS NOT NULL THEN
                near := false;
                FOREACH lo IN ARRAY todo LOOP
                    hi := lo + make_interval(secs => step);
                    -- A slot writers may be filling right now: hold writers of
                    -- the parent so none routes a row there with a stale
                    -- partition list (it would fail after the ATTACH).
                    IF NOT near AND lo <= cur + make_interval(secs => step) THEN
                        PERFORM counter_internal.partition_exec(parent, format('LOCK TABLE %s IN SHARE MODE', parent));
                        near := true;
                    END IF;
                    t := counter_internal.partition_make_table(parent, lo, hi, 'standalone');
                    PERFORM counter_internal.partition_attach(parent, t, lo, hi, false);
                    covered := covered + tstzmultirange(tstzrange(lo, hi));
                    created := created + 1;
                END LOOP;
                IF created >= cfg.step_partitions THEN
                    status := 'more';
                    EXIT; -- bounded: the rest in the next step
                END IF;
            END IF;

            -- Drain, oldest slot first: up to step_partitions slots of at most
            -- batch_rows rows each, each moved and attached under a lock that
            -- holds writers for that moment; a larger slot starts a staged
            -- drain (one batch per step, the last under lock).
            action := 'drain';
            IF d IS NOT NULL THEN
                FOR i IN 1..cfg.step_partitions LOOP
                    lo := NULL;
                    SELECT x.t INTO lo FROM counter_internal.exec_as_owner(counter_internal.partition_owner(parent),
                        format('SELECT %1$I FROM ONLY %2$s WHERE %1$I >= %3$L AND %1$I < %4$L AND $1 ORDER BY %1$I LIMIT 1',
                               cfg.control, d, drain_lo, drain_hi), true) AS x(t timestamptz);
                    EXIT WHEN lo IS NULL;
                    lo := counter.partition_slot(lo, step);
                    hi := lo + make_interval(secs => step);
                    IF covered && tstzrange(lo, hi) THEN
                        RAISE EXCEPTION 'rows of % in the default partition of % cannot be moved: the slot overlaps an existing partition',
                            lo, parent USING ERRCODE = 'object_not_in_prerequisite_state';
                    END IF;
                    SELECT x.n INTO n FROM counter_internal.exec_as_owner(counter_internal.partition_owner(parent),
                        format('SELECT count(*) FROM (SELECT 1 FROM ONLY %s WHERE %I >= %L AND %I < %L LIMIT %s) x WHERE $1',
                               d, cfg.control, lo, cfg.control, hi, cfg.batch_rows + 1), true) AS x(n bigint);
                    IF n > cfg.batch_rows THEN
                        EXIT WHEN i > 1; -- the next step stages it
                        t := counter_internal.partition_make_table(parent, lo, hi, 'bounded');
                        INSERT INTO counter.partition_staging (parent, staging, lo, hi) VALUES (parent, t, lo, hi);
                        moved := counter_internal.partition_move_rows(parent, t, lo, hi, cfg.batch_rows);
                        status := 'more';
                        EXIT;
                    END IF;
                    t := counter_internal.partition_make_table(parent, lo, hi, 'bounded');
                    IF i = 1 THEN
                        PERFORM counter_internal.partition_exec(parent, format('LOCK TABLE %s IN SHARE MODE', parent));
                        PERFORM counter_internal.partition_exec(parent, format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', d));
                    END IF;
                    moved := moved + counter_internal.partition_move_rows(parent, t, lo, hi, NULL);
                    PERFORM counter_internal.partition_attach(parent, t, lo, hi, true);
                    covered := covered + tstzmultirange(tstzrange(lo, hi));
                    created := created + 1;
                    status := 'more';
                END LOOP;
            END IF;

            -- Retention, last (its ACCESS EXCLUSIVE lock on the parent is held only
            -- until the commit): drop (or detach) up to step_partitions expired partitions.
            IF expired IS NOT NULL THEN
                action := 'retention';
                FOREACH t IN ARRAY expired LOOP
                    IF cfg.retention_keep_table THEN
                        PERFORM counter_internal.partition_exec(parent, format('ALTER TABLE %s DETACH PARTITION %s', parent, t));
                    ELSE
                        PERFORM counter_internal.partition_exec(parent, format('DROP TABLE %s', t));
                    END IF;
                    dropped := dropped + 1;
                END LOOP;
                IF dropped >= cfg.step_partitions THEN
                    status := 'more';
                END IF;
            END IF;

            -- Done: count what is left outside the window (reported, left there).
            IF status = 'done' AND d IS NOT NULL THEN
                SELECT x.n INTO outside FROM counter_internal.exec_as_owner(counter_internal.partition_owner(parent),
                    format('SELECT count(*) FROM ONLY %1$s WHERE NOT (%2$I >= %3$L AND %2$I < %4$L) AND $1',
                           d, cfg.control, drain_lo, drain_hi), true) AS x(n bigint);
            END IF;
            EXIT;
        EXCEPTION
            WHEN lock_not_available THEN
                IF attempt OPERATOR(pg_catalog.>) cfg.lock_retries THEN
                    created := 0; dropped := 0; moved := 0;
                    status := 'skipped';
                    error := format('%s: could not lock %s within lock_timeout %s (%s attempts): %s',
                                    action, parent, cfg.lock_timeout, attempt, SQLERRM);
                    RETURN;
                END IF;
                PERFORM pg_sleep(least(extract(epoch FROM cfg.lock_timeout), 1));
            WHEN check_violation THEN
                -- a row arrived in the default partition for a slot being
                -- created: the next attempt sees it and drains that slot.
                IF action <> 'create' OR attempt > cfg.lock_retries THEN
                    created := 0; dropped := 0; moved := 0;
                    status := 'error';
                    error := format('%s: %s (SQLSTATE %s)', action, SQLERRM, SQLSTATE);
                    RETURN;
                END IF;
            WHEN OTHERS THEN
                created := 0; dropped := 0; moved := 0;
                status := 'error';
                error := format('%s: %s (SQLSTATE %s)', action, SQLERRM, SQLSTATE);
                RETURN;
        END;
    END LOOP;
END
$$;

-- Records a maintenance run of one table in the one run record
-- (counter.job_runs, kind 'partition_maintenance': the job's run, or a row
-- of its own for a direct call; the partitions made, dropped and moved in
-- info); a WARNING names the rows left outside the window.
CREATE OR REPLACE FUNCTION counter_internal.partition_record(parent regclass, outcome text, error text,
                                                  created bigint, dropped bigint, moved bigint, outside bigint,
                                                  failure jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM counter_internal.run_end(
        counter_internal.run_begin('partition_maintenance',
            coalesce((SELECT c.job_target FROM counter.partitioned_tables c
                      WHERE c.parent OPERATOR(pg_catalog.=) partition_record.parent), parent::text),
            NULL, '{}'),
        pg_catalog.jsonb_build_object('outcome', outcome, 'error', error, 'created', created, 'dropped', dropped,
                                      'moved', moved, 'outside', outside),
        rows_affected => created OPERATOR(pg_catalog.+) dropped OPERATOR(pg_catalog.+) moved,
        error => CASE WHEN outcome OPERATOR(pg_catalog.=) 'error'
                      THEN coalesce(failure, pg_catalog.jsonb_build_object('message', error)) END);
    IF outside OPERATOR(pg_catalog.>) 0 THEN
        RAISE WARNING '% rows in the default partition of % are outside [now - retention (or 7 days), now + premake] and were left there',
            outside, parent
            USING HINT = 'Move or delete them by hand, or widen retention; maintenance never makes partitions outside that window.';
    END IF;
END
$$;

-- Partition maintenance's step function for the one commit loop
-- (counter.run_steps, 06_jobs_code.sql; an entry point: checks its caller
-- owns the table). args: {"parent": oid}. One bounded step of
-- counter_internal.partition_step per call; when the run ends (done, skipped,
-- error, the step limit, or the time is up) its outcome is recorded; 'busy'
-- (another session maintains the table) records nothing.
CREATE OR REPLACE FUNCTION counter.partition_run_step(target text, args jsonb, state jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parent regclass := (args ->> 'parent')::oid::regclass;
    s record;
    outcome text;
    error text;
    outside bigint;
BEGIN
    IF parent IS NULL OR NOT EXISTS (SELECT 1 FROM counter.partitioned_tables t
                                     WHERE t.parent OPERATOR(pg_catalog.=) (args ->> 'parent')::oid) THEN
        RAISE EXCEPTION 'table % is not managed by counter_ext', coalesce(parent::text, target)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM counter_internal.partition_require_owner(parent);
    IF state IS NULL THEN
        RETURN '{"phase": "steps", "done": 0, "created": 0, "dropped": 0, "moved": 0, "rows": 0, "finished": false}';
    END IF;
    IF state ? 'error' THEN
        outcome := 'error';
        error := state #>> '{error,message}';
    ELSIF state ? 'stop' THEN
        outcome := 'partial';
    ELSE
        s := counter_internal.partition_step(parent, NULL);
        state := state || pg_catalog.jsonb_build_object('done', (state ->> 'done')::bigint + 1,
            'created', (state ->> 'created')::bigint + s.created, 'dropped', (state ->> 'dropped')::bigint + s.dropped,
            'moved', (state ->> 'moved')::bigint + s.moved);
        state := state || pg_catalog.jsonb_build_object('rows',
            (state ->> 'created')::bigint + (state ->> 'dropped')::bigint + (state ->> 'moved')::bigint);
        IF s.status = 'busy' THEN
            RETURN state || '{"finished": true, "outcome": "busy"}';
        END IF;
        outcome := CASE WHEN s.status IN ('skipped', 'error') THEN s.status
                        WHEN s.status = 'done' THEN 'ok'
                        WHEN s.status = 'more' AND (state ->> 'done')::bigint >= 100000 THEN 'partial' END;
        IF outcome IS NULL THEN
            RETURN state;
        END IF;
        error := s.error;
        outside := s.outside;
    END IF;
    PERFORM counter_internal.partition_record(parent, outcome, error, (state ->> 'created')::bigint,
        (state ->> 'dropped')::bigint, (state ->> 'moved')::bigint, outside, state -> 'error');
    RETURN state || pg_catalog.jsonb_build_object('finished', true, 'outcome', outcome, 'error', error);
END
$$;

-- Maintenance of one table in the caller's transaction (no COMMIT): steps
-- until done, skipped, failed or max_steps. For use inside a transaction;
-- CALL counter.run_maintenance() commits after every step instead.
CREATE OR REPLACE FUNCTION counter.partition_maintain(parent regclass, as_of timestamptz DEFAULT NULL, max_steps integer DEFAULT 100000,
    OUT created bigint, OUT dropped bigint, OUT moved bigint, OUT outcome text, OUT error text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s record;
    i int := 0;
BEGIN
    IF parent IS NULL THEN
        RAISE EXCEPTION 'parent must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM counter_internal.partition_require_owner(parent);
    created := 0; dropped := 0; moved := 0; outcome := 'ok';
    LOOP
        i := i + 1;
        s := counter_internal.partition_step(parent, as_of);
        created := created + s.created; dropped := dropped + s.dropped; moved := moved + s.moved;
        IF s.status = 'busy' THEN
            outcome := 'busy';
            RETURN;
        ELSIF s.status IN ('skipped', 'error') THEN
            outcome := s.status; error := s.error;
            EXIT;
        ELSIF s.status = 'done' THEN
            EXIT;
        ELSIF i >= max_steps THEN
            outcome := 'partial';
            EXIT;
        END IF;
    END LOOP;
    PERFORM counter_internal.partition_record(parent, outcome, error, created, dropped, moved, s.outside);
END
$$;
COMMENT ON FUNCTION counter.partition_maintain(regclass, timestamptz, integer) IS
    'maintains one table in the current transaction (no commits); CALL counter.run_maintenance() commits per step';

-- CALL counter.run_maintenance() maintains every managed table;
-- CALL counter.run_maintenance('public.events') one. Commits after every
-- bounded step; a table that is locked past its lock_timeout (or fails) is
-- recorded and skipped, the others go on. Call it outside a transaction
-- block (pg_cron does); inside one, use counter.partition_maintain().
CREATE OR REPLACE PROCEDURE counter.run_maintenance(parent regclass DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    tables regclass[];
    p regclass;
    st pg_catalog.jsonb;
BEGIN
    IF parent IS NOT NULL AND NOT EXISTS (SELECT 1 FROM counter.partitioned_tables t
                                          WHERE t.parent OPERATOR(pg_catalog.=) run_maintenance.parent) THEN
        RAISE EXCEPTION 'table % is not managed by counter_ext', parent USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT pg_catalog.array_agg(t.parent ORDER BY t.parent::pg_catalog.oid) INTO tables
    FROM counter.partitioned_tables t
    WHERE run_maintenance.parent IS NULL OR t.parent OPERATOR(pg_catalog.=) run_maintenance.parent;
    COMMIT;
    FOREACH p IN ARRAY COALESCE(tables, '{}') LOOP
        st := NULL;
        CALL counter.run_steps('partition_maintenance', p::pg_catalog.text,
                               pg_catalog.jsonb_build_object('parent', p::pg_catalog.oid), st);
    END LOOP;
END
$$;

-- The job the background worker (or counter.run_jobs()) runs for a target
-- registered by partition_manage: maintains that table, committing per step.
-- rows_affected = partitions created + partitions dropped or detached + rows
-- moved out of the default partition. A table skipped for locks ends in
-- SQLSTATE 55P03, any other failure in 55000, after its outcome is recorded.
CREATE OR REPLACE PROCEDURE counter.job_partition_maintenance(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    p regclass := pg_catalog.to_regclass(target);
    st pg_catalog.jsonb;
    o pg_catalog.text;
    e pg_catalog.text;
BEGIN
    IF p IS NULL OR NOT EXISTS (SELECT 1 FROM counter.partitioned_tables t WHERE t.parent OPERATOR(pg_catalog.=) p) THEN
        RAISE EXCEPTION 'table % is not managed by counter_ext', target USING ERRCODE = 'invalid_parameter_value';
    END IF;
    CALL counter.run_steps('partition_maintenance', target, pg_catalog.jsonb_build_object('parent', p::pg_catalog.oid), st);
    rows_affected := pg_catalog.jsonb_extract_path_text(st, 'rows')::pg_catalog.int8;
    o := pg_catalog.jsonb_extract_path_text(st, 'outcome');
    e := pg_catalog.jsonb_extract_path_text(st, 'error');
    IF o OPERATOR(pg_catalog.=) 'skipped' THEN
        RAISE EXCEPTION 'partition maintenance of % skipped', target USING ERRCODE = 'lock_not_available', DETAIL = e;
    ELSIF o OPERATOR(pg_catalog.=) 'error' THEN
        RAISE EXCEPTION 'partition maintenance of % failed', target USING ERRCODE = 'object_not_in_prerequisite_state', DETAIL = e;
    END IF;
END
$$;

-- Puts a table under maintenance: checks it, records it, creates its default
-- partition (if it has none) and its partitions from start_at (default: the
-- current slot; never before as_of - retention) through as_of + premake
-- intervals, at most 10,000 of them, registers its job. Returns the number of
-- partitions created. For the table's owner (or a superuser); the partitions
-- are made by the owner.
CREATE OR REPLACE FUNCTION counter.partition_manage(parent regclass, control name, part_interval interval DEFAULT '1 hour',
    premake integer DEFAULT 48, retention interval DEFAULT NULL, retention_keep_table boolean DEFAULT false,
    start_at timestamptz DEFAULT NULL, batch_rows integer DEFAULT 10000,
    lock_timeout interval DEFAULT '500 milliseconds', as_of timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
AS $$
DECLARE
    caller regrole := counter_internal.caller();
    first_slot timestamptz;
    rel pg_class;
    pt pg_partitioned_table;
    att pg_attribute;
    nsp name;
    step bigint;
    made bigint := 0;
    d regclass;
    lo timestamptz;
    t regclass;
    busy_slots timestamptz[];
    covered tstzmultirange;
    s record;
BEGIN
    IF parent IS NULL OR control IS NULL OR part_interval IS NULL OR premake IS NULL
       OR retention_keep_table IS NULL OR batch_rows IS NULL OR lock_timeout IS NULL THEN
        RAISE EXCEPTION 'partition_manage: only retention, start_at and as_of may be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO STRICT rel FROM pg_class c WHERE c.oid = parent;
    SELECT n.nspname INTO STRICT nsp FROM pg_namespace n WHERE n.oid = rel.relnamespace;
    IF rel.relkind <> 'p' THEN
        RAISE EXCEPTION '% is not a partitioned table', parent
            USING ERRCODE = 'wrong_object_type', HINT = 'Declare it PARTITION BY RANGE (a timestamptz column).';
    END IF;
    IF NOT (pg_has_role(caller, rel.relowner, 'USAGE')
            OR (SELECT a.rolsuper FROM pg_roles a WHERE a.oid OPERATOR(pg_catalog.=) caller)) THEN
        RAISE EXCEPTION 'must be owner of table %', parent USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF rel.relpersistence = 't' THEN
        RAISE EXCEPTION '% is a temporary table', parent USING ERRCODE = 'wrong_object_type';
    END IF;
    SELECT * INTO STRICT pt FROM pg_partitioned_table p WHERE p.partrelid = parent;
    IF pt.partstrat <> 'r' OR pt.partnatts <> 1 OR pt.partattrs[0] = 0 THEN
        RAISE EXCEPTION '% is not partitioned by range over one column', parent
            USING ERRCODE = 'wrong_object_type', HINT = 'Declare it PARTITION BY RANGE (a timestamptz column).';
    END IF;
    att := counter.column_of(parent, control);
    IF att.attnum <> pt.partattrs[0] THEN
        RAISE EXCEPTION 'column "%" is not the partition key of %', control, parent
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF att.atttypid <> 'timestamptz'::regtype THEN
        RAISE EXCEPTION 'partition key "%" of % is %, not timestamptz', control, parent, att.atttypid::regtype
            USING ERRCODE = 'datatype_mismatch';
    END IF;
    step := counter.partition_interval_seconds(part_interval);
    IF premake < 1 THEN
        RAISE EXCEPTION 'premake must be at least 1, not %', premake USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF retention IS NOT NULL AND (extract(epoch FROM retention) < step OR retention <= interval '0') THEN
        RAISE EXCEPTION 'retention % is shorter than the partition interval %', retention, part_interval
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF batch_rows < 1 THEN
        RAISE EXCEPTION 'batch_rows must be at least 1, not %', batch_rows USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF lock_timeout <= interval '0' THEN
        RAISE EXCEPTION 'lock_timeout must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM counter.partitioned_tables c WHERE c.parent = partition_manage.parent) THEN
        RAISE EXCEPTION 'table % is already managed', parent USING ERRCODE = 'duplicate_object',
            HINT = 'Use counter.partition_unmanage() first to change its settings.';
    END IF;
    as_of := coalesce(as_of, now());
    first_slot := counter.partition_slot(least(coalesce(start_at, as_of), as_of), step);
    IF retention IS NOT NULL THEN
        first_slot := greatest(first_slot, counter.partition_slot(as_of - retention, step));
    END IF;
    IF extract(epoch FROM counter.partition_slot(as_of, step) - first_slot) / step + premake + 1 > 10000 THEN
        RAISE EXCEPTION 'partition_manage would create more than 10000 partitions'
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'Give a later start_at, a retention, or a longer part_interval.';
    END IF;
    INSERT INTO counter.partitioned_tables (parent, control, part_interval, premake, retention, retention_keep_table,
                                            batch_rows, lock_timeout)
    VALUES (parent, control, part_interval, premake, retention, retention_keep_table, batch_rows, lock_timeout);

    d := counter.partition_default(parent);
    IF d IS NOT NULL THEN
        SELECT x.a INTO busy_slots FROM counter_internal.exec_as_owner(rel.relowner::regrole,
            format('SELECT array_agg(DISTINCT counter.partition_slot(%1$I, %3$s)) FROM ONLY %2$s WHERE $1',
                   control, d, step), true) AS x(a timestamptz[]);
    END IF;

    -- The initial partitions, in this transaction; later ones come in bounded steps.
    SELECT coalesce(range_agg(tstzrange(b.lo, b.hi)), '{}'::tstzmultirange) INTO covered
    FROM counter.partition_bounds(parent) b WHERE NOT b.is_default;
    FOR lo IN
        SELECT g FROM generate_series(first_slot,
                                      counter.partition_slot(as_of, step) + make_interval(secs => step * premake),
                                      make_interval(secs => step)) g
        WHERE NOT (covered && tstzrange(g, g + make_interval(secs => step)))
          AND NOT (g = ANY (coalesce(busy_slots, '{}')))
        ORDER BY g
    LOOP
        PERFORM counter_internal.partition_make_table(parent, lo, lo + make_interval(secs => step), 'direct');
        made := made + 1;
    END LOOP;

    -- The default partition last: each partition made before it skipped the
    -- check of the default partition's rows.
    IF d IS NULL THEN
        PERFORM counter_internal.partition_exec(parent, format('CREATE TABLE %I.%I PARTITION OF %s DEFAULT', nsp,
                       counter.partition_name_for(rel.relname, '_default'), parent));
        d := counter.partition_default(parent);
        t := d;
        -- privileges as for every partition
        IF rel.relacl IS NOT NULL THEN
            FOR s IN SELECT a.grantee, a.privilege_type, a.is_grantable FROM aclexplode(rel.relacl) a
                     WHERE a.grantee <> rel.relowner LOOP
                PERFORM counter_internal.partition_exec(parent, format('GRANT %s ON %s TO %s%s', s.privilege_type, t,
                               CASE WHEN s.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(s.grantee::regrole::text) END,
                               CASE WHEN s.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END));
            END LOOP;
        END IF;
    END IF;

    -- Every partition, those made before too, gets the parent's replica identity.
    PERFORM counter_internal.partition_replicate_like_parent(parent, b.partition, false)
    FROM counter.partition_bounds(parent) b;
    PERFORM counter.job_register('partition_maintenance', format('%I.%I', nsp, rel.relname),
                                 least(part_interval, interval '1 hour'));
    UPDATE counter.partitioned_tables c SET job_target = format('%I.%I', nsp, rel.relname)
    WHERE c.parent = partition_manage.parent;
    -- the runs of a table of this name that was dropped are not this one's
    PERFORM counter_internal.run_forget('partition_maintenance', NULL, format('%I.%I', nsp, rel.relname));
    RETURN made;
END
$$;
COMMENT ON FUNCTION counter.partition_manage(regclass, name, interval, integer, interval, boolean, timestamptz, integer, interval, timestamptz) IS
    'puts a range-partitioned event table under hourly (or other) partition maintenance';

-- Takes a table out of maintenance (its partitions stay). Refuses while an
-- hour is half drained (its moved rows sit in a table not yet attached).
CREATE OR REPLACE FUNCTION counter.partition_unmanage(parent regclass)
RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    target text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM counter.partitioned_tables c WHERE c.parent = partition_unmanage.parent) THEN
        RETURN false;
    END IF;
    PERFORM counter_internal.partition_require_owner(parent);
    IF NOT pg_catalog.pg_try_advisory_xact_lock(counter_internal.lock_class('partition'), parent::oid::int4) THEN
        RAISE EXCEPTION 'table % is being maintained right now', parent USING ERRCODE = 'lock_not_available',
            HINT = 'Try again in a moment.';
    END IF;
    IF EXISTS (SELECT 1 FROM counter.partition_staging s WHERE s.parent = partition_unmanage.parent) THEN
        RAISE EXCEPTION 'table % has rows half way out of its default partition', parent
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'CALL counter.run_maintenance() to finish the drain first.';
    END IF;
    SELECT coalesce(t.job_target, format('%I.%I', n.nspname, c.relname)) INTO target
    FROM counter.partitioned_tables t JOIN pg_class c ON c.oid = t.parent JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE t.parent = partition_unmanage.parent;
    PERFORM counter.job_unregister('partition_maintenance', target);
    DELETE FROM counter.partitioned_tables c WHERE c.parent = partition_unmanage.parent;
    PERFORM counter_internal.run_forget('partition_maintenance', NULL, target);
    RETURN true;
END
$$;

-- The state of every managed table the caller owns (or belongs to the owner
-- of; a superuser: every one). Rows are counted as the table's owner.
CREATE OR REPLACE FUNCTION counter.partition_state()
RETURNS TABLE (parent regclass, control name, part_interval interval, premake integer, retention interval,
               partitions bigint, oldest timestamptz, newest timestamptz, hours_ahead numeric,
               default_partition regclass, rows_in_default bigint, rows_staged bigint,
               last_run_at timestamptz, last_outcome text, last_error text,
               last_created bigint, last_dropped bigint, last_moved bigint, last_outside bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := counter_internal.caller();
    su boolean := (SELECT a.rolsuper FROM pg_roles a WHERE a.oid OPERATOR(pg_catalog.=) caller);
    c counter.partitioned_tables;
    stg regclass;
BEGIN
    FOR c IN SELECT * FROM counter.partitioned_tables p
             WHERE su OR pg_has_role(caller, counter_internal.partition_owner(p.parent), 'USAGE')
             ORDER BY p.parent::oid LOOP
        parent := c.parent; control := c.control; part_interval := c.part_interval; premake := c.premake;
        retention := c.retention;
        -- the last maintenance run, from the one run record
        SELECT (x.info ->> 'finished_at')::timestamptz, x.info ->> 'outcome', x.info ->> 'error',
               (x.info ->> 'created')::bigint, (x.info ->> 'dropped')::bigint, (x.info ->> 'moved')::bigint,
               (x.info ->> 'outside')::bigint
        INTO last_run_at, last_outcome, last_error, last_created, last_dropped, last_moved, last_outside
        FROM counter.job_runs x
        WHERE x.kind OPERATOR(pg_catalog.=) 'partition_maintenance'
          AND x.target OPERATOR(pg_catalog.=) coalesce(c.job_target, c.parent::text)
          AND x.info ? 'outcome'
        ORDER BY x.run_id DESC LIMIT 1;
        SELECT count(*), min(b.lo), max(b.hi) INTO partitions, oldest, newest
        FROM counter.partition_bounds(c.parent) b WHERE NOT b.is_default;
        hours_ahead := round(extract(epoch FROM newest - now()) / 3600, 2);
        default_partition := counter.partition_default(c.parent);
        rows_in_default := NULL;
        IF default_partition IS NOT NULL THEN
            SELECT x.n INTO rows_in_default FROM counter_internal.exec_as_owner(counter_internal.partition_owner(c.parent),
                format('SELECT count(*) FROM ONLY %s WHERE $1', default_partition), true) AS x(n bigint);
        END IF;
        rows_staged := NULL;
        SELECT s.staging INTO stg FROM counter.partition_staging s WHERE s.parent = c.parent;
        IF stg IS NOT NULL AND EXISTS (SELECT FROM pg_class k WHERE k.oid OPERATOR(pg_catalog.=) stg) THEN
            SELECT x.n INTO rows_staged FROM counter_internal.exec_as_owner(counter_internal.partition_owner(c.parent),
                format('SELECT count(*) FROM %s WHERE $1', stg), true) AS x(n bigint);
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

CREATE OR REPLACE VIEW counter.partition_status AS SELECT * FROM counter.partition_state();
COMMENT ON VIEW counter.partition_status IS
    'managed partitioned tables: oldest and newest partition, hours premade ahead, rows in default, last maintenance';
GRANT SELECT ON counter.partition_status TO PUBLIC;

-- partition_manage, partition_unmanage, partition_maintain, run_maintenance
-- and the job are for every role: each checks that its caller may manage
-- the table. The helpers live in counter_internal (EXECUTE revoked from
-- PUBLIC by 99_internal.sql).

-- ---- src/sql/50_rollup.sql
-- Hourly rollups: one row per group key per UTC hour, next to an event table,
-- exact under re-delivery (only rows a statement really inserted are added),
-- late commits (no high-water mark: hours are recomputed from raw events) and
-- rule changes (a recompute of any retained hour).
--
-- Catalog
--   counter.rollups        one row per rollup (configuration; dumped by pg_dump)
--   counter.rollup_dirty   append-only log of (rollup, hour) pairs to recompute
--   counter.rollup_status  view: outcome of each rollup's last refresh (from counter.job_runs)
--   counter.rollup_state   view: newest hours, pending dirty hours, last refresh
--
-- Advisory locks (transaction level, two-int key space; the classes come from
-- the one registry, counter_internal.lock_class(name), documented in
-- doc/reference/worker.md "Advisory-lock classes"):
--   (lock_class('rollup_day'), counter.rollup_lock_key(rollup_id, UTC day number))
--       one refresh chunk (a UTC day) of one rollup; a routine refresh
--       (dirty hours, the job) tries and skips, a full recompute waits.
--   (lock_class('rollup_hour'), counter.rollup_lock_key(rollup_id, UTC hour number))
--       one hour of a trigger-mode rollup: writers take it shared (in hour
--       order) before adding to the rollup, a recompute takes it exclusive (in
--       hour order) before reading the events, so it never overwrites an
--       increment it could not see.
--
-- Privileges (doc/security.md): a rollup serves its source table's owner
-- (counter.rollups.owner). Everything that touches the source or the rollup
-- table runs as that owner in a security-restricted operation with
-- search_path pg_catalog, pg_temp (counter_internal.exec_as_owner; in the
-- trigger, ce::as_owner): a refresh, the trigger's upsert, the filter. The
-- SECURITY DEFINER functions below check their caller (a member of the owner
-- role, or a superuser) and themselves touch only this file's catalogs.
-- Nobody writes the catalogs directly: SELECT is granted, and row-level
-- security shows a role the rows of the rollups it owns (or belongs to the
-- owner of). The filter is compiled once, as the owner, into a stored tree
-- (src/filter.cpp); it is never pasted into SQL.

CREATE TABLE counter.rollups (
    rollup_id      integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name           text NOT NULL UNIQUE,
    source         regclass NOT NULL,
    rollup_table   regclass NOT NULL,
    time_column    name NOT NULL,
    group_by       name[] NOT NULL,
    distinct_on    name[] NOT NULL DEFAULT '{}',
    sums           name[] NOT NULL DEFAULT '{}',
    mode           text NOT NULL CHECK (mode IN ('trigger', 'deferred')),
    filter         text,            -- canonical text of the stored filter (src/filter.cpp)
    filter_tree    text,            -- the resolved tree (nodeToString)
    filter_relid   oid,             -- the source's oid the tree was resolved against
    retention      interval CHECK (retention > interval '0'),
    refresh_every  interval NOT NULL CHECK (refresh_every > interval '0'),
    owner          regrole NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- SQL generated from the columns above by counter_internal.rollup_sql(),
    -- for the source and rollup table names in sql_for (a rename makes it
    -- stale); run only as the owner
    sql_for        text,
    add_sql        text,
    refresh_sql    text,
    -- also counts rows applied by logical replication (a subscriber): row
    -- triggers enabled for replicas mark their hours dirty
    replicated     boolean NOT NULL DEFAULT false
);
COMMENT ON TABLE counter.rollups IS 'hourly rollups of counter_ext (see counter.rollup_create)';
SELECT pg_catalog.pg_extension_config_dump('counter.rollups', '');

CREATE TABLE counter.rollup_dirty (
    rollup_id  integer NOT NULL,
    hour       timestamptz NOT NULL
);
-- No primary key on purpose: a writer whose transaction is still open must
-- keep its own row, so a refresh that ran before its commit cannot consume it.
CREATE INDEX rollup_dirty_rollup_hour ON counter.rollup_dirty (rollup_id, hour);
COMMENT ON TABLE counter.rollup_dirty IS 'hours of a rollup to recompute from the events (append-only log)';

-- Each refresh is a row of the one run record, counter.job_runs (kind
-- 'rollup_refresh', object_id = rollup_id); the view counter.rollup_status
-- (51_rollup_code.sql) shows each rollup's last.

-- Every role reads the catalog rows of the rollups it owns (or belongs to
-- the owner of), and nothing else; nobody writes them but this file's
-- functions (no INSERT, UPDATE or DELETE is granted: ids, source and
-- rollup_table cannot be forged or repointed).
ALTER TABLE counter.rollups ENABLE ROW LEVEL SECURITY;
CREATE POLICY rollups_read ON counter.rollups FOR SELECT USING (pg_catalog.pg_has_role(owner, 'USAGE'));
GRANT SELECT ON counter.rollups TO PUBLIC;

ALTER TABLE counter.rollup_dirty ENABLE ROW LEVEL SECURITY;
CREATE POLICY rollup_dirty_read ON counter.rollup_dirty FOR SELECT
    USING (EXISTS (SELECT FROM counter.rollups r WHERE r.rollup_id OPERATOR(pg_catalog.=) rollup_dirty.rollup_id));
GRANT SELECT ON counter.rollup_dirty TO PUBLIC;


-- The second int of an advisory lock key: rollup id and a day or hour number
-- folded into 32 bits (collisions only make two chunks wait for each other).
CREATE FUNCTION counter.rollup_lock_key(rollup_id integer, n bigint)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT (((rollup_id::bigint OPERATOR(pg_catalog.*) 1048576
              OPERATOR(pg_catalog.+) (n OPERATOR(pg_catalog.%) 1048576))
             OPERATOR(pg_catalog.%) 4294967296) OPERATOR(pg_catalog.-) 2147483648)::integer
$$;

-- Hour and day numbers (since 1970-01-01 00:00 UTC) of an instant.
CREATE FUNCTION counter.rollup_hour_number(ts timestamptz)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT pg_catalog.floor(pg_catalog.date_part('epoch', ts) OPERATOR(pg_catalog./) 3600)::bigint $$;

CREATE FUNCTION counter.rollup_day_number(ts timestamptz)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT pg_catalog.floor(pg_catalog.date_part('epoch', ts) OPERATOR(pg_catalog./) 86400)::bigint $$;

-- The UTC hour an instant belongs to (date_bin needs no time zone).
CREATE FUNCTION counter.rollup_hour(ts timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT pg_catalog.date_bin('01:00:00'::pg_catalog.interval, ts, '2000-01-01 00:00:00+00'::pg_catalog.timestamptz) $$;

-- The id of a rollup the caller can see (counter.rollups shows a role its
-- own rollups), or undefined_object.
CREATE FUNCTION counter.rollup_id(rollup_name text)
RETURNS integer
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rid integer;
BEGIN
    SELECT r.rollup_id INTO rid FROM counter.rollups r WHERE r.name = rollup_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'rollup "%" does not exist', rollup_name USING ERRCODE = 'undefined_object';
    END IF;
    RETURN rid;
END
$$;

-- ---- src/sql/51_rollup_code.sql
-- Hourly rollups: the functions and views that changed in 1.2 (the catalog
-- tables and the functions kept from 1.1 are in 50_rollup.sql). Only
-- functions and views: the update from 1.1 includes this file as it is.

-- The rollup row, or undefined_object.
CREATE OR REPLACE FUNCTION counter_internal.rollup_get(rollup_name text)
RETURNS counter.rollups
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
BEGIN
    IF rollup_name IS NULL THEN
        RAISE EXCEPTION 'rollup name must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO r FROM counter.rollups c WHERE c.name OPERATOR(pg_catalog.=) rollup_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'rollup "%" does not exist', rollup_name USING ERRCODE = 'undefined_object';
    END IF;
    RETURN r;
END
$$;

-- Raises unless the calling role may manage rollup r (a member of its
-- owner, or a superuser).
CREATE OR REPLACE FUNCTION counter_internal.rollup_require_owner(r counter.rollups, action text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := counter_internal.caller();
BEGIN
    IF NOT (pg_catalog.pg_has_role(caller, r.owner, 'USAGE')
            OR (SELECT a.rolsuper FROM pg_catalog.pg_roles a WHERE a.oid OPERATOR(pg_catalog.=) caller)) THEN
        RAISE EXCEPTION 'must be owner of rollup "%" to %', r.name, action
            USING ERRCODE = 'insufficient_privilege', DETAIL = format('Only members of %s (or a superuser) may.', r.owner);
    END IF;
END
$$;

-- The SQL a rollup runs, generated from its catalog row with the current
-- names of its tables (regclass output under a pinned search_path is
-- always schema-qualified).
CREATE OR REPLACE FUNCTION counter_internal.rollup_sql(rid integer)
RETURNS counter.rollups
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
    hour_expr text;
    keys text := '';        -- "g1, g2, "
    ev_vals text;           -- 1, x, NULL::bigint, NULL::bigint (events branch)
    ro_vals text;           -- 0, NULL::int4, r.count, r.sum_x (rollup branch)
    agg_vals text;          -- sum(n)::bigint AS count, coalesce(sum(x), 0) AS sum_x, max(oc), ...
    agg_new text;           -- ROW of the fresh values
    agg_old text;           -- ROW of the old values
    keys_ddr text := '';    -- "d.g1 OPERATOR(..) r.g1 AND "
    st text;                -- type of a sum column
    vals text;              -- count(*) AS count, coalesce(sum(x), 0) AS sum_x
    cols text;              -- count, sum_x
    add_set text;
    fresh_set text;
    old_vals text;
    new_vals text;
    g name;
    t oid;
    where_filter text;
BEGIN
    SELECT * INTO STRICT r FROM counter.rollups WHERE rollup_id = rid;
    hour_expr := format('pg_catalog.date_bin(''01:00:00''::pg_catalog.interval, %I, '
                        '''2000-01-01 00:00:00+00''::pg_catalog.timestamptz)', r.time_column);
    FOREACH g IN ARRAY r.group_by LOOP
        SELECT a.atttypid INTO STRICT t FROM pg_attribute a WHERE a.attrelid = r.source AND a.attname = g;
        keys := keys || format('%I, ', g);
        keys_ddr := keys_ddr || format('d.%1$I %2$s r.%1$I AND ', g, (counter_internal.key_operators(t))[1]);
    END LOOP;
    vals := 'pg_catalog.count(*) AS count';
    cols := 'count';
    add_set := 'count = r.count + EXCLUDED.count';
    fresh_set := 'count = EXCLUDED.count';
    old_vals := 'r.count';
    ev_vals := '1 AS "n$", NULL::bigint AS "o$count"';
    ro_vals := '0, r.count';
    agg_vals := 'pg_catalog.sum("n$")::bigint AS count';
    agg_new := 'pg_catalog.sum("n$")::bigint';
    agg_old := 'pg_catalog.max("o$count")';
    new_vals := 'EXCLUDED.count';
    FOREACH g IN ARRAY r.sums LOOP
        vals := vals || format(', coalesce(pg_catalog.sum(%1$I), 0) AS %2$I', g, 'sum_' || g);
        cols := cols || format(', %I', 'sum_' || g);
        add_set := add_set || format(', %1$I = r.%1$I + EXCLUDED.%1$I', 'sum_' || g);
        fresh_set := fresh_set || format(', %1$I = EXCLUDED.%1$I', 'sum_' || g);
        old_vals := old_vals || format(', r.%I', 'sum_' || g);
        SELECT CASE WHEN a.atttypid IN ('int2'::regtype, 'int4'::regtype) THEN 'bigint' ELSE 'numeric' END
        INTO STRICT st FROM pg_attribute a WHERE a.attrelid = r.source AND a.attname = g;
        ev_vals := ev_vals || format(', %1$I AS %2$I, NULL::%3$s AS %4$I', g, 'v$' || g, st, 'o$sum_' || g);
        ro_vals := ro_vals || format(', NULL::%1$s, r.%2$I', (SELECT format_type(a.atttypid, NULL) FROM pg_attribute a
                                     WHERE a.attrelid = r.source AND a.attname = g), 'sum_' || g);
        agg_vals := agg_vals || format(', coalesce(pg_catalog.sum(%1$I), 0)::%2$s AS %3$I', 'v$' || g, st, 'sum_' || g);
        agg_new := agg_new || format(', coalesce(pg_catalog.sum(%1$I), 0)::%2$s', 'v$' || g, st);
        agg_old := agg_old || format(', pg_catalog.max(%I)', 'o$sum_' || g);
        new_vals := new_vals || format(', EXCLUDED.%I', 'sum_' || g);
    END LOOP;
    FOREACH g IN ARRAY r.distinct_on LOOP
        -- Sketches are canonical (equal sets give equal bytes): compare bytes.
        vals := vals || format(', counter.hll_add_agg(%1$I) AS %2$I', g, 'distinct_' || g);
        cols := cols || format(', %I', 'distinct_' || g);
        add_set := add_set || format(', %1$I = counter.hll_union(r.%1$I, EXCLUDED.%1$I)', 'distinct_' || g);
        fresh_set := fresh_set || format(', %1$I = EXCLUDED.%1$I', 'distinct_' || g);
        old_vals := old_vals || format(', r.%I::bytea', 'distinct_' || g);
        new_vals := new_vals || format(', EXCLUDED.%I::bytea', 'distinct_' || g);
        ev_vals := ev_vals || format(', %1$I AS %2$I, NULL::counter.hll AS %3$I', g, 'w$' || g, 'o$distinct_' || g);
        ro_vals := ro_vals || format(', NULL::%1$s, r.%2$I', (SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
                                     WHERE a.attrelid = r.source AND a.attname = g), 'distinct_' || g);
        agg_vals := agg_vals || format(', counter.hll_add_agg(%1$I) AS %2$I', 'w$' || g, 'distinct_' || g);
        agg_new := agg_new || format(', counter.hll_add_agg(%I)::bytea', 'w$' || g);
        agg_old := agg_old || format(', counter.hll_union_agg(%I)::bytea', 'o$distinct_' || g);
    END LOOP;
    -- The stored tree, applied to each event row (src/filter.cpp); the
    -- trigger applies it in C++ before add_sql sees new_rows.
    where_filter := CASE WHEN r.filter IS NULL THEN 'true'
                         ELSE format('counter_internal.filter_match(''rollup'', %s, e)', r.rollup_id) END;

    -- Trigger mode, per statement: shared hour locks in hour order, then one
    -- upsert per (key, hour) in (key, hour) order. new_rows holds the rows
    -- that pass the filter (src/rollup.cpp).
    -- (One statement: the hour locks are an InitPlan, taken before the
    -- first row reaches the upsert. The lock class is resolved here, once,
    -- from the registry, and stored in the text as a number: the trigger's
    -- kept plan costs nothing more per statement.)
    r.add_sql := format($f$
        WITH l AS MATERIALIZED (
            SELECT pg_catalog.count(*) AS n
            FROM (SELECT pg_catalog.pg_advisory_xact_lock_shared(
                             %7$s, counter.rollup_lock_key($1, counter.rollup_hour_number(h)))
                  FROM (SELECT DISTINCT %4$s AS h FROM new_rows ORDER BY 1) s) x)
        INSERT INTO %1$s AS r (%2$shour, %3$s)
        SELECT %2$s%4$s AS hour, %5$s FROM new_rows WHERE (SELECT l.n FROM l) >= 0
        GROUP BY %2$s%4$s ORDER BY %2$s%4$s
        ON CONFLICT (%2$shour) DO UPDATE SET %6$s$f$,
        r.rollup_table, keys, cols, hour_expr, vals, add_set, counter_internal.lock_class('rollup_hour'));
    -- Recompute [$1, $2) (or only the hours in $3): one GROUP BY over the
    -- events and the rollup rows of those hours together finds the rows that
    -- differ (no join, no per-row lock or probe of unchanged rows); write only
    -- those, and delete rows whose hour has no events any more (count 0).
    r.refresh_sql := format($f$
        WITH diff AS MATERIALIZED (
            SELECT %2$shour, %5$s
            FROM (SELECT %2$s%4$s AS hour, %6$s FROM %8$s AS e
                  WHERE %9$I >= $1 AND %9$I < $2 AND ($3 IS NULL OR %4$s = ANY ($3)) AND %7$s
                  UNION ALL
                  SELECT %2$shour, %10$s FROM %1$s r
                  WHERE r.hour >= $1 AND r.hour < $2 AND ($3 IS NULL OR r.hour = ANY ($3))) u
            GROUP BY %2$shour
            HAVING ROW(%11$s) IS DISTINCT FROM ROW(%12$s)),
        up AS (
            INSERT INTO %1$s AS r (%2$shour, %3$s)
            SELECT %2$shour, %3$s FROM diff d WHERE d.count > 0
            ON CONFLICT (%2$shour) DO UPDATE SET %13$s
            WHERE ROW(%14$s) IS DISTINCT FROM ROW(%15$s)
            RETURNING 1),
        del AS (
            DELETE FROM %1$s AS r USING diff d
            WHERE d.count = 0 AND %16$sd.hour OPERATOR(pg_catalog.=) r.hour
            RETURNING 1)
        SELECT (SELECT pg_catalog.count(*) FROM up) + (SELECT pg_catalog.count(*) FROM del)$f$,
        r.rollup_table, keys, cols, hour_expr, agg_vals, ev_vals, where_filter, r.source, r.time_column,
        ro_vals, agg_new, agg_old, fresh_set, old_vals, new_vals, keys_ddr);
    r.sql_for := format('%s|%s', r.source, r.rollup_table);
    RETURN r;
END
$$;

-- Stores the rollup's SQL in the catalog (at creation and rule changes).
CREATE OR REPLACE FUNCTION counter_internal.rollup_build_sql(rid integer)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups := counter_internal.rollup_sql(rid);
BEGIN
    UPDATE counter.rollups u SET sql_for = r.sql_for, add_sql = r.add_sql, refresh_sql = r.refresh_sql
    WHERE u.rollup_id = rid;
END
$$;

-- Makes what rollup rid needs beyond its table, from its catalog row: the
-- stored SQL, EXECUTE on filter_match for its owner (the refresh applies the
-- stored filter as the owner), and the triggers on the source (dropped and
-- made again). Used by counter.rollup_create and by the update from 1.1.
CREATE OR REPLACE FUNCTION counter_internal.rollup_build(rid integer)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
    trg name;
BEGIN
    PERFORM counter_internal.rollup_build_sql(rid);
    SELECT * INTO STRICT r FROM counter.rollups c WHERE c.rollup_id OPERATOR(pg_catalog.=) rid;
    IF r.filter IS NOT NULL THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION counter_internal.filter_match(text, integer, anyelement) TO %I',
                       r.owner);
    END IF;
    FOR trg IN SELECT g.tgname FROM pg_catalog.pg_trigger g
               WHERE g.tgrelid OPERATOR(pg_catalog.=) r.source
                 AND g.tgname OPERATOR(pg_catalog.~) format('^counter_rollup_%s_r?(insert|delete|update)$', rid) LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', trg, r.source);
    END LOOP;
    EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON %s REFERENCING NEW TABLE AS new_rows '
                   'FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.rollup_trigger(%L)',
                   'counter_rollup_' || rid || '_insert', r.source, rid);
    EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON %s REFERENCING OLD TABLE AS old_rows '
                   'FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.rollup_trigger(%L)',
                   'counter_rollup_' || rid || '_delete', r.source, rid);
    EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON %s REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows '
                   'FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.rollup_trigger(%L)',
                   'counter_rollup_' || rid || '_update', r.source, rid);
    -- Replicated: the apply worker of a subscription (session_replication_role
    -- = replica) fires only row triggers enabled for replicas, and none of the
    -- above; these mark the hours of the rows it applies dirty (once per
    -- (hour, transaction)), and the refresh recomputes them from the rows.
    IF r.replicated THEN
        FOREACH trg IN ARRAY ARRAY['insert', 'delete', 'update']::name[] LOOP
            EXECUTE format('CREATE TRIGGER %I AFTER %s ON %s FOR EACH ROW EXECUTE FUNCTION counter_internal.rollup_trigger(%L)',
                           'counter_rollup_' || rid || '_r' || trg, pg_catalog.upper(trg), r.source, rid);
            EXECUTE format('ALTER TABLE %s ENABLE REPLICA TRIGGER %I', r.source, 'counter_rollup_' || rid || '_r' || trg);
        END LOOP;
    END IF;
END
$$;

-- The statement-level trigger on the source (argument: rollup id), in C++
-- (src/rollup.cpp). It runs as the writer, reads the catalog row as the
-- catalog's owner, checks the table it fires on is the rollup's source,
-- records the hours of deferred inserts, deletes and updates in the dirty
-- log (computed in C++: no SQL runs on the rows), and in trigger mode runs
-- add_sql as the rollup's owner (restricted, search_path pinned) on the rows
-- that pass the stored filter, with plans kept per backend. Only
-- counter.rollup_create attaches it.
CREATE OR REPLACE FUNCTION counter_internal.rollup_trigger()
RETURNS trigger
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_rollup_fire';

-- Registers or removes the job of a rollup so it mirrors counter.rollups.
CREATE OR REPLACE FUNCTION counter_internal.rollup_job_sync(rollup_name text)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    every interval;
BEGIN
    SELECT r.refresh_every INTO every FROM counter.rollups r WHERE r.name OPERATOR(pg_catalog.=) rollup_name;
    IF FOUND THEN
        PERFORM counter.job_register('rollup_refresh', rollup_name, every);
    ELSE
        PERFORM counter.job_unregister('rollup_refresh', rollup_name);
    END IF;
END
$$;

-- The oldest hour of a rollup that may be recomputed: hours before the lowest
-- range partition of the source (older partitions may have been dropped) and
-- before now() - retention are outside the source's retention. Reads only
-- catalogs (pg_class, pg_inherits, the relcache's partition descriptor).
CREATE OR REPLACE FUNCTION counter_internal.rollup_horizon(rid integer)
RETURNS timestamptz
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
    lowest timestamptz;
    bound text;
    h timestamptz := '-infinity';
BEGIN
    SELECT * INTO STRICT r FROM counter.rollups WHERE rollup_id = rid;
    IF EXISTS (SELECT FROM pg_partitioned_table p
               JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]
               WHERE p.partrelid = r.source AND p.partstrat = 'r' AND p.partnatts = 1
                 AND a.attname = r.time_column) THEN
        FOR bound IN
            SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM '^FOR VALUES FROM \(''([^'']*)''\)')
            FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = r.source
        LOOP
            IF bound IS NOT NULL AND (lowest IS NULL OR bound::timestamptz < lowest) THEN
                lowest := bound::timestamptz;
            END IF;
        END LOOP;
        IF lowest IS NOT NULL THEN
            h := lowest;
        END IF;
    END IF;
    IF r.retention IS NOT NULL THEN
        h := greatest(h, now() - r.retention);
    END IF;
    IF isfinite(h) AND counter.rollup_hour(h) <> h THEN
        h := counter.rollup_hour(h) + interval '1 hour';  -- a partial hour is outside
    END IF;
    RETURN h;
END
$$;

-- Recomputes hours of one chunk (one UTC day) of a rollup from the events:
-- all hours in [from_h, to_h), or only those in hours. wait = false skips a
-- chunk another session is refreshing (returns NULL). Returns the rollup rows
-- written or deleted. Needs READ COMMITTED: each step must see what the
-- previous step waited for. An entry point of the refresh procedures: it
-- checks its caller, takes the locks and consumes the dirty marks itself, and
-- runs the recompute (the source, the filter, the rollup table) as the
-- rollup's owner, restricted: whoever calls (a superuser's run_jobs, the
-- worker), the owner's code cannot leave the owner's rights.
CREATE OR REPLACE FUNCTION counter.rollup_refresh_chunk(rid integer, from_h timestamptz, to_h timestamptz,
                                             hours timestamptz[], wait boolean)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
    n bigint;
BEGIN
    IF rid IS NULL OR from_h IS NULL OR to_h IS NULL OR wait IS NULL THEN
        RAISE EXCEPTION 'only hours of counter.rollup_refresh_chunk may be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO r FROM counter.rollups c WHERE c.rollup_id OPERATOR(pg_catalog.=) rid;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'rollup % does not exist', rid USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM counter_internal.rollup_require_owner(r, 'refresh it');
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'a rollup refresh needs READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'invalid_transaction_state';
    END IF;
    r := counter_internal.rollup_sql(rid);
    IF counter.rollup_day_number(from_h) <> counter.rollup_day_number(to_h - interval '1 hour') THEN
        RAISE EXCEPTION 'a refresh chunk is at most one UTC day' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF wait THEN
        PERFORM pg_catalog.pg_advisory_xact_lock(counter_internal.lock_class('rollup_day'), counter.rollup_lock_key(rid, counter.rollup_day_number(from_h)));
    ELSIF NOT pg_catalog.pg_try_advisory_xact_lock(counter_internal.lock_class('rollup_day'), counter.rollup_lock_key(rid, counter.rollup_day_number(from_h))) THEN
        RETURN NULL;
    END IF;
    IF r.mode = 'trigger' THEN
        -- Wait for writers still adding to these hours; later ones wait for us.
        PERFORM pg_catalog.pg_advisory_xact_lock(counter_internal.lock_class('rollup_hour'), counter.rollup_lock_key(rid, counter.rollup_hour_number(h)))
        FROM (SELECT h FROM generate_series(from_h, to_h - interval '1 hour', interval '1 hour') h
              WHERE hours IS NULL OR h = ANY (hours) ORDER BY h) s;
    END IF;
    -- Consume the dirty marks first: a mark committed after this point
    -- survives, so its events are recomputed by the next refresh.
    DELETE FROM counter.rollup_dirty d
    WHERE d.rollup_id = rid AND d.hour >= from_h AND d.hour < to_h AND (hours IS NULL OR d.hour = ANY (hours));
    SELECT x.n INTO n FROM counter_internal.exec_as_owner(r.owner, r.refresh_sql, from_h, to_h, hours) AS x(n bigint);
    RETURN n;
END
$$;

-- The chunks (UTC days, clamped to the source's retention) of a full
-- recompute of [from_ts, to_ts). An entry point of the refresh procedures
-- (checks its caller).
CREATE OR REPLACE FUNCTION counter.rollup_range_chunks(rollup_name text, from_ts timestamptz, to_ts timestamptz)
RETURNS TABLE (rollup_id integer, from_h timestamptz, to_h timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
    horizon timestamptz;
    a timestamptz := from_ts;
BEGIN
    IF rollup_name IS NULL OR from_ts IS NULL OR to_ts IS NULL THEN
        RAISE EXCEPTION 'rollup name and range must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    r := counter_internal.rollup_get(rollup_name);
    PERFORM counter_internal.rollup_require_owner(r, 'refresh it');
    IF NOT isfinite(from_ts) OR NOT isfinite(to_ts) OR counter.rollup_hour(from_ts) <> from_ts
       OR counter.rollup_hour(to_ts) <> to_ts THEN
        RAISE EXCEPTION 'a refresh range must be whole UTC hours: % to %', from_ts, to_ts
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF to_ts < from_ts THEN
        RAISE EXCEPTION 'a refresh range must not end before it starts' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    horizon := counter_internal.rollup_horizon(r.rollup_id);
    IF a < horizon THEN
        RAISE NOTICE 'rollup "%": % hours before % are outside the source''s retention and were left as they were',
            rollup_name, (extract(epoch FROM least(horizon, to_ts) - a) / 3600)::bigint, horizon;
        a := least(horizon, to_ts);
    END IF;
    WHILE a < to_ts LOOP
        rollup_id := r.rollup_id;
        from_h := a;
        to_h := least(to_ts, date_trunc('day', a, 'UTC') + interval '1 day');
        RETURN NEXT;
        a := to_h;
    END LOOP;
END
$$;

-- The chunks of a routine refresh: the dirty hours grouped by UTC day. Dirty
-- hours outside the source's retention are dropped from the log (they can
-- never be recomputed into a smaller number). An entry point of the refresh
-- procedures (checks its caller).
CREATE OR REPLACE FUNCTION counter.rollup_dirty_chunks(rollup_name text)
RETURNS TABLE (rollup_id integer, from_h timestamptz, to_h timestamptz, hours timestamptz[])
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups := counter_internal.rollup_get(rollup_name);
    rid integer := r.rollup_id;
    horizon timestamptz;
    dropped bigint;
BEGIN
    PERFORM counter_internal.rollup_require_owner(r, 'refresh it');
    horizon := counter_internal.rollup_horizon(rid);
    WITH gone AS (DELETE FROM counter.rollup_dirty d WHERE d.rollup_id = rid AND d.hour < horizon RETURNING d.hour)
    SELECT count(DISTINCT hour) INTO dropped FROM gone;
    IF dropped > 0 THEN
        RAISE WARNING 'rollup "%": % dirty hours before % are outside the source''s retention and were left as they were',
            rollup_name, dropped, horizon;
    END IF;
    RETURN QUERY
        SELECT rid, min(d.hour), max(d.hour) + interval '1 hour', array_agg(DISTINCT d.hour ORDER BY d.hour)
        FROM counter.rollup_dirty d
        WHERE d.rollup_id = rid
        GROUP BY counter.rollup_day_number(d.hour)
        ORDER BY 2;
END
$$;

-- Records a refresh in the one run record (counter.job_runs, kind
-- 'rollup_refresh': the job's run, or a row of its own for a direct call;
-- the rollup's part in info). Every refresh has its row, so none waits for
-- another's. error: {sqlstate, message, detail, hint, context} of a failed
-- refresh. An entry point of the refresh functions (checks its caller).
CREATE OR REPLACE FUNCTION counter.rollup_record(rid integer, started timestamptz, outcome text, n bigint,
    error jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
BEGIN
    SELECT * INTO r FROM counter.rollups c WHERE c.rollup_id OPERATOR(pg_catalog.=) rid;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'rollup % does not exist', rid USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM counter_internal.rollup_require_owner(r, 'record its refresh');
    PERFORM counter_internal.run_end(
        counter_internal.run_begin('rollup_refresh', r.name, rid, '{}', started),
        pg_catalog.jsonb_build_object('outcome', outcome, 'rows', n, 'error', error ->> 'message'),
        rows_affected => n, error => error);
END
$$;

-- Full recompute of [from_ts, to_ts) in the caller's transaction; waits for
-- chunks being refreshed elsewhere. Returns the rollup rows written or deleted.
CREATE OR REPLACE FUNCTION counter.rollup_recompute(name text, from_ts timestamptz, to_ts timestamptz)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    total bigint := 0;
    started timestamptz := clock_timestamp();
BEGIN
    FOR c IN SELECT * FROM counter.rollup_range_chunks(name, from_ts, to_ts) LOOP
        total := total + counter.rollup_refresh_chunk(c.rollup_id, c.from_h, c.to_h, NULL, true);
    END LOOP;
    PERFORM counter.rollup_record(counter.rollup_id(name), started, 'ok', total, NULL);
    RETURN total;
END
$$;

-- Recomputes the dirty hours of a rollup in the caller's transaction,
-- skipping chunks another session is refreshing. Returns the rollup rows
-- written or deleted.
CREATE OR REPLACE FUNCTION counter.rollup_refresh_dirty(name text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    n bigint;
    total bigint := 0;
    skipped integer := 0;
    started timestamptz := clock_timestamp();
BEGIN
    FOR c IN SELECT * FROM counter.rollup_dirty_chunks(name) LOOP
        n := counter.rollup_refresh_chunk(c.rollup_id, c.from_h, c.to_h, c.hours, false);
        IF n IS NULL THEN
            skipped := skipped + 1;
            RAISE NOTICE 'rollup "%": the chunk from % is being refreshed by another session; skipped', name, c.from_h;
        ELSE
            total := total + n;
        END IF;
    END LOOP;
    PERFORM counter.rollup_record(counter.rollup_id(name), started,
                                  CASE WHEN skipped = 0 THEN 'ok' ELSE format('skipped %s locked chunks', skipped) END,
                                  total, NULL);
    RETURN total;
END
$$;

-- The refresh's step function for the one commit loop (counter.run_steps,
-- 06_jobs_code.sql; an entry point: checks its caller owns the rollup). One
-- chunk (a UTC day at most) per step. args {"from", "to"}: a full recompute
-- of that range, waiting for chunks refreshed elsewhere; args {}: the dirty
-- hours, a day at a time in day order, skipping a day another session is
-- refreshing (its marks stay for the next refresh). The refresh is recorded
-- when it ends.
CREATE OR REPLACE FUNCTION counter.rollup_run_step(target text, args jsonb, state jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ranged boolean := args ? 'from' OR args ? 'to';
    r counter.rollups;
    rid integer;
    from_h timestamptz;
    to_h timestamptz;
    hours timestamptz[];
    n bigint;
    outcome text;
BEGIN
    IF target IS NULL THEN
        RAISE EXCEPTION 'rollup name must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    r := counter_internal.rollup_get(target);
    rid := r.rollup_id;
    PERFORM counter_internal.rollup_require_owner(r, 'refresh it');
    IF state IS NULL THEN
        -- checks the range (or drops dirty hours outside the retention), and counts the chunks
        IF ranged THEN
            SELECT count(*), min(x.from_h) INTO n, from_h FROM counter.rollup_range_chunks(target,
                (args ->> 'from')::timestamptz, (args ->> 'to')::timestamptz) x;
        ELSE
            SELECT count(*) INTO n FROM counter.rollup_dirty_chunks(target);
        END IF;
        RETURN pg_catalog.jsonb_build_object('started', pg_catalog.clock_timestamp(), 'phase', 'days', 'done', 0,
            'total', n, 'rows', 0, 'skipped', 0, 'next', from_h, 'after_day', NULL,
            'finished', false);
    END IF;
    IF state ? 'error' OR state ? 'stop' THEN
        outcome := CASE WHEN state ? 'error' THEN 'error' ELSE 'partial' END;
    ELSE
        IF ranged THEN
            from_h := (state ->> 'next')::timestamptz;
            IF from_h >= (args ->> 'to')::timestamptz THEN
                from_h := NULL;
            END IF;
            to_h := least((args ->> 'to')::timestamptz, date_trunc('day', from_h, 'UTC') + interval '1 day');
        ELSE
            SELECT min(d.hour), max(d.hour) + interval '1 hour', array_agg(DISTINCT d.hour ORDER BY d.hour)
            INTO from_h, to_h, hours
            FROM counter.rollup_dirty d
            WHERE d.rollup_id = rid AND counter.rollup_day_number(d.hour) > coalesce((state ->> 'after_day')::bigint, -9223372036854775808)
            GROUP BY counter.rollup_day_number(d.hour)
            ORDER BY 1
            LIMIT 1;
        END IF;
        IF from_h IS NOT NULL THEN
            n := counter.rollup_refresh_chunk(rid, from_h, to_h, hours, ranged);
            IF n IS NULL THEN
                RAISE NOTICE 'rollup "%": the chunk from % is being refreshed by another session; skipped', target, from_h;
            END IF;
            RETURN state || pg_catalog.jsonb_build_object('done', (state ->> 'done')::bigint + 1,
                'rows', (state ->> 'rows')::bigint + coalesce(n, 0),
                'skipped', (state ->> 'skipped')::bigint + CASE WHEN n IS NULL THEN 1 ELSE 0 END,
                'next', to_h, 'after_day', counter.rollup_day_number(from_h));
        END IF;
        outcome := CASE WHEN (state ->> 'skipped')::bigint = 0 THEN 'ok'
                        ELSE format('skipped %s locked chunks', state ->> 'skipped') END;
    END IF;
    PERFORM counter.rollup_record(rid, (state ->> 'started')::timestamptz, outcome, (state ->> 'rows')::bigint,
                                  state -> 'error');
    RETURN state || pg_catalog.jsonb_build_object('finished', true, 'outcome', outcome);
END
$$;

-- Procedure forms: one transaction per chunk (a UTC day at most), in the
-- one commit loop (counter.run_steps). A full recompute of [from_ts, to_ts):
CREATE OR REPLACE PROCEDURE counter.rollup_refresh(name text, from_ts timestamptz, to_ts timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    st pg_catalog.jsonb;
BEGIN
    CALL counter.run_steps('rollup_refresh', name, pg_catalog.jsonb_build_object('from', from_ts, 'to', to_ts), st);
END
$$;

-- The job the background worker (or counter.run_jobs(), or pg_cron) runs:
-- recompute the dirty hours of one rollup, one UTC day per transaction,
-- skipping chunks another session is refreshing.
CREATE OR REPLACE PROCEDURE counter.job_rollup_refresh(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    st pg_catalog.jsonb;
BEGIN
    CALL counter.run_steps('rollup_refresh', target, '{}', st);
    rows_affected := pg_catalog.jsonb_extract_path_text(st, 'rows')::pg_catalog.int8;
END
$$;

-- Creates a rollup: its table, its triggers on the source, its catalog row
-- and its refresh job, and marks every hour that already has events dirty
-- (the job fills them in). Nothing is created when any argument is wrong.
CREATE OR REPLACE FUNCTION counter.rollup_create(
    name text,
    source regclass,
    time_column name,
    group_by name[],
    distinct_on name[] DEFAULT '{}',
    mode text DEFAULT 'trigger',
    sums name[] DEFAULT '{}',
    filter text DEFAULT NULL,
    retention interval DEFAULT NULL,
    refresh_every interval DEFAULT '1 minute',
    replicated boolean DEFAULT false)
RETURNS regclass
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := counter_internal.caller();
    compiled text[];
    rel record;
    col record;
    g name;
    seen name[] := '{}';
    outcols text[] := ARRAY['hour', 'count'];
    ddl text := '';
    keys text := '';
    tbl regclass;
    rid integer;
BEGIN
    IF name IS NULL OR source IS NULL OR time_column IS NULL OR group_by IS NULL OR distinct_on IS NULL
       OR mode IS NULL OR sums IS NULL OR refresh_every IS NULL OR replicated IS NULL THEN
        RAISE EXCEPTION 'only filter and retention of counter.rollup_create may be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF name = '' OR octet_length(name) > 63 THEN
        RAISE EXCEPTION 'a rollup name must be 1 to 63 bytes long' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF mode NOT IN ('trigger', 'deferred') THEN
        RAISE EXCEPTION 'unknown rollup mode "%"', mode USING ERRCODE = 'invalid_parameter_value',
            HINT = 'use ''trigger'' or ''deferred''';
    END IF;
    IF refresh_every < interval '1 second' OR retention <= interval '0' THEN
        RAISE EXCEPTION 'refresh_every must be at least 1 second and retention positive'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT FROM counter.rollups r WHERE r.name = rollup_create.name) THEN
        RAISE EXCEPTION 'rollup "%" already exists', name USING ERRCODE = 'duplicate_object';
    END IF;
    SELECT c.relkind, c.relowner::regrole AS owner, c.relpersistence, n.nspname AS nsp
    INTO rel FROM pg_class c JOIN pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
    WHERE c.oid = source;
    IF rel.relkind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION '"%" is not a table', source USING ERRCODE = 'wrong_object_type';
    END IF;
    IF rel.relpersistence = 't' THEN
        RAISE EXCEPTION '% is a temporary table', source USING ERRCODE = 'wrong_object_type';
    END IF;
    IF NOT (pg_has_role(caller, rel.owner, 'USAGE')
            OR (SELECT a.rolsuper FROM pg_roles a WHERE a.oid OPERATOR(pg_catalog.=) caller)) THEN
        RAISE EXCEPTION 'must be owner of table %', source USING ERRCODE = 'insufficient_privilege';
    END IF;

    SELECT c.atttypid, c.attnotnull INTO col FROM counter.column_of(source, time_column) c;
    IF col.atttypid <> 'timestamptz'::regtype THEN
        RAISE EXCEPTION 'time column "%" is %, not timestamp with time zone', time_column, format_type(col.atttypid, NULL)
            USING ERRCODE = 'datatype_mismatch',
                  HINT = 'UTC hours need instants; a timestamp without time zone depends on the TimeZone setting';
    END IF;
    IF NOT col.attnotnull THEN
        RAISE EXCEPTION 'time column "%" must be NOT NULL', time_column USING ERRCODE = 'invalid_parameter_value';
    END IF;

    FOREACH g IN ARRAY group_by LOOP
        IF g IS NULL THEN
            RAISE EXCEPTION 'group_by must not contain NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF g = time_column THEN
            RAISE EXCEPTION 'group column "%" is the time column', g USING ERRCODE = 'invalid_parameter_value',
                HINT = 'the rollup groups by the UTC hour of the time column already';
        END IF;
        IF g = ANY (seen) THEN
            RAISE EXCEPTION 'column "%" appears twice in group_by', g USING ERRCODE = 'duplicate_column';
        END IF;
        IF g = ANY (outcols) THEN
            RAISE EXCEPTION 'group column "%" collides with the rollup column of that name', g
                USING ERRCODE = 'duplicate_column';
        END IF;
        SELECT c.atttypid, c.atttypmod, c.attnotnull, c.attcollation INTO col FROM counter.column_of(source, g) c;
        IF NOT col.attnotnull THEN
            RAISE EXCEPTION 'group column "%" must be NOT NULL', g USING ERRCODE = 'invalid_parameter_value',
                HINT = 'the group columns form the primary key of the rollup';
        END IF;
        PERFORM counter_internal.key_operators(col.atttypid);  -- 42883 unless the key type can be compared
        seen := seen || g;
        ddl := ddl || format('%I %s%s NOT NULL, ', g, format_type(col.atttypid, col.atttypmod),
            (SELECT format(' COLLATE %I.%I', cn.nspname, co.collname) FROM pg_collation co
             JOIN pg_namespace cn ON cn.oid = co.collnamespace WHERE co.oid = col.attcollation));
        keys := keys || format('%I, ', g);
    END LOOP;
    outcols := outcols || seen::text[];

    ddl := ddl || 'hour timestamptz NOT NULL, count bigint NOT NULL';
    seen := '{}';
    FOREACH g IN ARRAY sums LOOP
        IF g IS NULL THEN
            RAISE EXCEPTION 'sums must not contain NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF g = ANY (seen) THEN
            RAISE EXCEPTION 'column "%" appears twice in sums', g USING ERRCODE = 'duplicate_column';
        END IF;
        SELECT c.atttypid INTO col FROM counter.column_of(source, g) c;
        IF col.atttypid NOT IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype, 'numeric'::regtype) THEN
            RAISE EXCEPTION 'cannot sum column "%" of type %', g, format_type(col.atttypid, NULL)
                USING ERRCODE = 'datatype_mismatch', HINT = 'sums are exact: smallint, integer, bigint or numeric';
        END IF;
        IF octet_length('sum_' || g) > 63 THEN
            RAISE EXCEPTION 'sum column name "sum_%" is too long', g USING ERRCODE = 'name_too_long';
        END IF;
        IF 'sum_' || g = ANY (outcols) THEN
            RAISE EXCEPTION 'sum column "sum_%" collides with a rollup column of that name', g
                USING ERRCODE = 'duplicate_column';
        END IF;
        seen := seen || g;
        outcols := outcols || ('sum_' || g);
        ddl := ddl || format(', %I %s NOT NULL', 'sum_' || g,
                             CASE WHEN col.atttypid IN ('int2'::regtype, 'int4'::regtype) THEN 'bigint' ELSE 'numeric' END);
    END LOOP;

    -- One sketch per distinct_on column: merged across hours, never summed.
    seen := '{}';
    FOREACH g IN ARRAY distinct_on LOOP
        IF g IS NULL THEN
            RAISE EXCEPTION 'distinct_on must not contain NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF g = ANY (seen) THEN
            RAISE EXCEPTION 'column "%" appears twice in distinct_on', g USING ERRCODE = 'duplicate_column';
        END IF;
        PERFORM counter.column_of(source, g);
        IF octet_length('distinct_' || g) > 63 THEN
            RAISE EXCEPTION 'distinct column name "distinct_%" is too long', g USING ERRCODE = 'name_too_long';
        END IF;
        IF 'distinct_' || g = ANY (outcols) THEN
            RAISE EXCEPTION 'distinct column "distinct_%" collides with a rollup column of that name', g
                USING ERRCODE = 'duplicate_column';
        END IF;
        seen := seen || g;
        outcols := outcols || ('distinct_' || g);
        ddl := ddl || format(', %I counter.hll NOT NULL', 'distinct_' || g);
    END LOOP;

    IF to_regclass(format('%I.%I', rel.nsp, name)) IS NOT NULL THEN
        RAISE EXCEPTION 'relation "%.%" already exists', rel.nsp, name USING ERRCODE = 'duplicate_table',
            HINT = 'the rollup table is created in the schema of the source, named after the rollup';
    END IF;
    -- The filter is resolved here, once, as the owner (src/filter.cpp).
    IF filter IS NOT NULL THEN
        compiled := counter_internal.filter_compile(source, filter, rel.owner);
    END IF;

    -- The rollup table is made by the owner, in the source's schema.
    -- fillfactor: each row is updated many times in its hour; room on its
    -- page keeps those updates HOT (no index entries, pruned in place).
    PERFORM counter_internal.exec_as_owner_cmd(rel.owner,
        format('CREATE TABLE %I.%I (%s, PRIMARY KEY (%shour)) WITH (fillfactor = 60)', rel.nsp, name, ddl, keys), true);
    tbl := format('%I.%I', rel.nsp, name)::regclass;
    PERFORM counter_internal.exec_as_owner_cmd(rel.owner, format('CREATE INDEX ON %s (hour)', tbl), true);
    PERFORM counter_internal.exec_as_owner_cmd(rel.owner, format('COMMENT ON TABLE %s IS %L', tbl,
        format('counter_ext rollup %s of %s by UTC hour (%s mode)', name, source, mode)), true);

    INSERT INTO counter.rollups (name, source, rollup_table, time_column, group_by, distinct_on, sums, mode,
                                 filter, filter_tree, filter_relid, retention, refresh_every, owner, replicated)
    VALUES (name, source, tbl, time_column, group_by, distinct_on, sums, mode, compiled[1], compiled[2],
            CASE WHEN compiled IS NOT NULL THEN source::oid END, retention, refresh_every, rel.owner, replicated)
    RETURNING rollup_id INTO rid;
    PERFORM counter_internal.rollup_build(rid);

    -- CREATE TRIGGER waited for every open writer of the source and holds
    -- them off until commit, so these are all the events the triggers miss
    -- (read as the owner; only the hours reach the catalog).
    INSERT INTO counter.rollup_dirty (rollup_id, hour)
    SELECT rid, x.h FROM counter_internal.exec_as_owner(rel.owner,
        format('SELECT DISTINCT counter.rollup_hour(%I) FROM %s WHERE $1', time_column, source), true)
        AS x(h timestamptz);
    PERFORM counter_internal.rollup_job_sync(name);
    RETURN tbl;
END
$$;

-- Drops a rollup: its triggers, its table (as the owner: a table the owner
-- no longer owns is refused), its catalog rows and its job.
CREATE OR REPLACE FUNCTION counter.rollup_drop(name text)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups := counter_internal.rollup_get(name);
    op text;
BEGIN
    PERFORM counter_internal.rollup_require_owner(r, 'drop it');
    PERFORM 1 FROM counter.rollups c WHERE c.rollup_id OPERATOR(pg_catalog.=) r.rollup_id FOR UPDATE;
    FOR op IN SELECT g.tgname FROM pg_catalog.pg_trigger g
              WHERE g.tgrelid OPERATOR(pg_catalog.=) r.source
                AND g.tgname OPERATOR(pg_catalog.~) format('^counter_rollup_%s_r?(insert|delete|update)$', r.rollup_id) LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', op, r.source);
    END LOOP;
    IF EXISTS (SELECT FROM pg_class c WHERE c.oid = r.rollup_table) THEN
        PERFORM counter_internal.exec_as_owner_cmd(r.owner, format('DROP TABLE %s', r.rollup_table), true);
    END IF;
    DELETE FROM counter.rollup_dirty d WHERE d.rollup_id = r.rollup_id;
    PERFORM counter_internal.run_forget('rollup_refresh', r.rollup_id);
    DELETE FROM counter.rollups c WHERE c.rollup_id = r.rollup_id;
    PERFORM counter_internal.rollup_job_sync(name);
END
$$;

-- Changes the rule of a rollup (which events count), compiled as the owner.
-- Existing hours keep their numbers until recomputed:
-- CALL counter.rollup_refresh(name, from, to).
CREATE OR REPLACE FUNCTION counter.rollup_set_filter(name text, filter text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups := counter_internal.rollup_get(name);
    compiled text[];
BEGIN
    PERFORM counter_internal.rollup_require_owner(r, 'change its filter');
    IF filter IS NOT NULL THEN
        compiled := counter_internal.filter_compile(r.source, filter, r.owner);
    END IF;
    UPDATE counter.rollups c SET filter = compiled[1], filter_tree = compiled[2],
        filter_relid = CASE WHEN compiled IS NOT NULL THEN r.source::oid END
    WHERE c.rollup_id = r.rollup_id;
    PERFORM counter_internal.rollup_build_sql(r.rollup_id);
    IF compiled IS NOT NULL THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION counter_internal.filter_match(text, integer, anyelement) TO %I',
                       r.owner);
    END IF;
END
$$;

-- Totals per group and period (hour, day, week, month, year or total) in a
-- time zone, over the whole UTC hours [from_ts, to_ts). Periods must start on
-- whole UTC hours in that zone (zones with half-hour offsets cannot be
-- assembled from hours and are refused).
CREATE OR REPLACE FUNCTION counter.rollup_totals(name text, from_ts timestamptz, to_ts timestamptz,
                                      time_zone text DEFAULT 'UTC', per text DEFAULT 'day')
RETURNS TABLE (period_start timestamptz, key jsonb, count bigint, sums jsonb, distinct_counts jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := counter_internal.caller();
    r counter.rollups;
    period text;
    key_expr text := 'jsonb_build_object(';
    grp text := '';
    sums_expr text := 'jsonb_build_object(';
    distinct_expr text := 'jsonb_build_object(';
    bad timestamptz;
    g name;
    sep text := '';
BEGIN
    IF name IS NULL OR from_ts IS NULL OR to_ts IS NULL OR time_zone IS NULL OR per IS NULL THEN
        RAISE EXCEPTION 'arguments of counter.rollup_totals must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    r := counter_internal.rollup_get(rollup_totals.name);
    -- Readers of the rollup table may read its totals; the table is read as
    -- its owner (never with more rights than the owner's).
    IF NOT pg_catalog.has_table_privilege(caller, r.rollup_table, 'SELECT') THEN
        RAISE EXCEPTION 'permission denied for rollup "%"', name USING ERRCODE = 'insufficient_privilege',
            DETAIL = format('Reading its totals needs SELECT on %s.', r.rollup_table);
    END IF;
    IF per NOT IN ('hour', 'day', 'week', 'month', 'year', 'total') THEN
        RAISE EXCEPTION 'unknown period "%"', per USING ERRCODE = 'invalid_parameter_value',
            HINT = 'use hour, day, week, month, year or total';
    END IF;
    PERFORM now() AT TIME ZONE time_zone;  -- 22023 for an unknown zone
    IF NOT isfinite(from_ts) OR NOT isfinite(to_ts) OR counter.rollup_hour(from_ts) <> from_ts
       OR counter.rollup_hour(to_ts) <> to_ts OR to_ts < from_ts THEN
        RAISE EXCEPTION 'a totals range must be whole UTC hours, from before to: % to %', from_ts, to_ts
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF per <> 'total' THEN
        SELECT p INTO bad FROM (
            SELECT date_trunc(per, h, time_zone) AS p
            FROM generate_series(from_ts, to_ts - interval '1 hour', interval '1 hour') h) s
        WHERE counter.rollup_hour(p) <> p LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'a % in time zone "%" starts at %, which is not a whole UTC hour', per, time_zone, bad
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'hourly rollups assemble periods of zones with whole-hour offsets only';
        END IF;
        period := format('pg_catalog.date_trunc(%L, hour, %L)', per, time_zone);
    ELSE
        period := format('%L::timestamptz', from_ts);
    END IF;
    FOREACH g IN ARRAY r.group_by LOOP
        key_expr := key_expr || sep || format('%L, %I', g, g);
        grp := grp || format(', %I', g);
        sep := ', ';
    END LOOP;
    sep := '';
    FOREACH g IN ARRAY r.sums LOOP
        sums_expr := sums_expr || sep || format('%L, pg_catalog.sum(%I)', g, 'sum_' || g);
        sep := ', ';
    END LOOP;
    sep := '';
    -- Distinct counts merge the hours' sketches (never a sum of counts).
    FOREACH g IN ARRAY r.distinct_on LOOP
        distinct_expr := distinct_expr || sep
            || format('%L, pg_catalog.round(counter.hll_cardinality(counter.hll_union_agg(%I)))::bigint', g, 'distinct_' || g);
        sep := ', ';
    END LOOP;
    RETURN QUERY SELECT * FROM counter_internal.exec_as_owner(r.owner, format(
        'SELECT %1$s AS p, %2$s), pg_catalog.sum(count)::bigint, %3$s), %6$s) FROM %4$s '
        'WHERE hour >= $1 AND hour < $2 GROUP BY 1%5$s ORDER BY 1%5$s',
        period, key_expr, sums_expr, r.rollup_table, grp, distinct_expr), from_ts, to_ts)
        AS x(p timestamptz, k jsonb, n bigint, s jsonb, d jsonb);
END
$$;

-- Newest hour the rollup knows of (its table, read as its owner, and its
-- dirty log); NULL for a rollup the caller does not own.
CREATE OR REPLACE FUNCTION counter.rollup_newest_hour(rid integer)
RETURNS timestamptz
LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := counter_internal.caller();
    r counter.rollups;
    h timestamptz;
BEGIN
    SELECT * INTO r FROM counter.rollups c WHERE c.rollup_id OPERATOR(pg_catalog.=) rid;
    IF NOT FOUND OR NOT (pg_has_role(caller, r.owner, 'USAGE')
                         OR (SELECT a.rolsuper FROM pg_roles a WHERE a.oid OPERATOR(pg_catalog.=) caller))
       OR NOT EXISTS (SELECT FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) r.rollup_table) THEN
        RETURN NULL;
    END IF;
    SELECT x.h INTO h FROM counter_internal.exec_as_owner(r.owner,
        format('SELECT pg_catalog.max(hour) FROM %s WHERE $1', r.rollup_table), true) AS x(h timestamptz);
    RETURN greatest(h, (SELECT max(d.hour) FROM counter.rollup_dirty d WHERE d.rollup_id = rid));
END
$$;

-- The last refresh of each rollup, from the one run record (the table of
-- that name up to 1.2); each role sees its rollups' rows.
CREATE OR REPLACE VIEW counter.rollup_status AS
SELECT r.rollup_id, x.started_at AS last_refresh_at, x.info ->> 'outcome' AS last_outcome,
       (x.info ->> 'finished_at')::timestamptz OPERATOR(pg_catalog.-) x.started_at AS last_duration,
       (x.info ->> 'rows')::bigint AS last_rows, x.info ->> 'error' AS last_error
FROM counter.rollups r
LEFT JOIN LATERAL (
    SELECT y.started_at, y.info FROM counter.job_runs y
    WHERE y.kind OPERATOR(pg_catalog.=) 'rollup_refresh' AND y.object_id OPERATOR(pg_catalog.=) r.rollup_id
      AND y.info ? 'outcome'
    ORDER BY y.run_id DESC LIMIT 1) x ON true
WHERE pg_catalog.pg_has_role(r.owner, 'USAGE');
COMMENT ON VIEW counter.rollup_status IS 'outcome of the last refresh of each rollup';
GRANT SELECT ON counter.rollup_status TO PUBLIC;

CREATE OR REPLACE VIEW counter.rollup_state AS
SELECT r.name,
       r.mode,
       r.source,
       r.rollup_table,
       counter.rollup_newest_hour(r.rollup_id) AS newest_event_hour,
       least(pg_catalog.date_trunc('hour', pg_catalog.now(), 'UTC') OPERATOR(pg_catalog.-) interval '1 hour',
             d.oldest_dirty OPERATOR(pg_catalog.-) interval '1 hour') AS newest_complete_hour,
       coalesce(d.dirty_hours, 0) AS dirty_hours,
       s.last_refresh_at,
       s.last_outcome,
       s.last_duration,
       s.last_rows,
       s.last_error
FROM counter.rollups r
LEFT JOIN (SELECT dd.rollup_id, pg_catalog.count(DISTINCT dd.hour) AS dirty_hours, pg_catalog.min(dd.hour) AS oldest_dirty
           FROM counter.rollup_dirty dd GROUP BY dd.rollup_id) d ON d.rollup_id OPERATOR(pg_catalog.=) r.rollup_id
LEFT JOIN counter.rollup_status s ON s.rollup_id OPERATOR(pg_catalog.=) r.rollup_id
WHERE pg_catalog.pg_has_role(r.owner, 'USAGE');
COMMENT ON VIEW counter.rollup_state IS 'per rollup of the roles the reader belongs to: newest hours, dirty hours pending, last refresh';
GRANT SELECT ON counter.rollup_state TO PUBLIC;

-- ---- src/sql/60_worker.sql
-- Functions and procedures only, so the update from 1.1 includes this piece
-- as it is.
--
-- Running jobs: counter.run_jobs() runs every due job once, the same code the
-- background worker runs, so pg_cron can schedule it instead; run_job runs
-- one job now; job_alter changes a job. See doc/reference/worker.md.
--
-- run_jobs and run_job never run a job in the calling session: each job is
-- handed to a background-worker session connected as the job's owner, and
-- the call waits for it and reports its outcome. They are procedures without
-- SET clauses because a job may COMMIT between its steps; their C code
-- schema-qualifies everything it runs.

-- Runs the jobs handed to this background-worker session (connected as
-- their owner); refuses to run anywhere else. The job worker passes the
-- EXECUTE check of its CALL as the extension's owner (no PUBLIC grant), and
-- the procedure goes back to the session's user, the owner, at once.
CREATE OR REPLACE PROCEDURE counter_internal.owner_session_run()
LANGUAGE c
AS 'MODULE_PATHNAME', 'counter_owner_session_run';

CREATE OR REPLACE PROCEDURE counter.run_jobs(INOUT jobs_run integer DEFAULT NULL)
LANGUAGE c
AS 'MODULE_PATHNAME', 'counter_run_jobs';
COMMENT ON PROCEDURE counter.run_jobs(integer) IS 'runs every due counter_ext job once (CALL it outside a transaction block)';

CREATE OR REPLACE PROCEDURE counter.run_job(job_id bigint, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE c
AS 'MODULE_PATHNAME', 'counter_run_job';
COMMENT ON PROCEDURE counter.run_job(bigint, bigint) IS 'runs one counter_ext job now, due or not; raises its error if it fails';

-- Changes a job; a NULL argument leaves that setting as it is. A shorter
-- run_every brings next_run forward to at most now() + run_every.
CREATE OR REPLACE FUNCTION counter.job_alter(job_id bigint, run_every interval DEFAULT NULL, enabled boolean DEFAULT NULL,
                                  timeout interval DEFAULT NULL, lock_timeout interval DEFAULT NULL,
                                  next_run timestamptz DEFAULT NULL)
RETURNS counter.jobs
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    j counter.jobs;
BEGIN
    IF job_alter.job_id IS NULL THEN
        RAISE EXCEPTION 'job_id must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF job_alter.run_every IS NOT NULL AND job_alter.run_every <= interval '0' THEN
        RAISE EXCEPTION 'run_every must be a positive interval, not %', job_alter.run_every
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF job_alter.timeout IS NOT NULL
       AND (job_alter.timeout <= interval '0' OR job_alter.timeout > interval '24 days') THEN
        RAISE EXCEPTION 'timeout must be more than 0 and at most 24 days, not %', job_alter.timeout
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF job_alter.lock_timeout IS NOT NULL
       AND (job_alter.lock_timeout <= interval '0' OR job_alter.lock_timeout > interval '24 days') THEN
        RAISE EXCEPTION 'lock_timeout must be more than 0 and at most 24 days, not %', job_alter.lock_timeout
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE counter.jobs AS x
    SET run_every = coalesce(job_alter.run_every, x.run_every),
        enabled = coalesce(job_alter.enabled, x.enabled),
        disabled_reason = CASE WHEN job_alter.enabled THEN NULL ELSE x.disabled_reason END,
        timeout = coalesce(job_alter.timeout, x.timeout),
        lock_timeout = coalesce(job_alter.lock_timeout, x.lock_timeout),
        next_run = CASE
            WHEN job_alter.next_run IS NOT NULL THEN job_alter.next_run
            WHEN job_alter.run_every IS NOT NULL
                THEN least(x.next_run, pg_catalog.now() OPERATOR(pg_catalog.+) job_alter.run_every)
            ELSE x.next_run END
    WHERE x.job_id OPERATOR(pg_catalog.=) job_alter.job_id
    RETURNING x.* INTO j;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job % does not exist', job_alter.job_id USING ERRCODE = 'undefined_object';
    END IF;
    IF j.enabled AND j.owner IS NOT NULL THEN
        PERFORM counter_internal.job_nudge(j.owner::oid, j.next_run);
    END IF;
    RETURN j;
END
$$;

REVOKE ALL ON PROCEDURE counter.run_jobs(integer) FROM PUBLIC;
REVOKE ALL ON PROCEDURE counter.run_job(bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.job_alter(bigint, interval, boolean, interval, interval, timestamptz) FROM PUBLIC;

-- One registry of advisory-lock classes (the first int of the two-int
-- advisory lock keys every feature takes): counter_internal.lock_class(name)
-- gives a class's key, counter_internal.lock_classes lists them
-- (src/include/counter_ext/locks.hpp is the table; doc/reference/worker.md
-- documents it).
CREATE OR REPLACE FUNCTION counter_internal.lock_class(class text)
RETURNS integer
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_lock_class';
CREATE OR REPLACE FUNCTION counter_internal.lock_classes(OUT class text, OUT key integer, OUT second_key text)
RETURNS SETOF record
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_lock_classes';

-- Progress of running work: a job's code calls counter.job_progress(phase,
-- done, total) between its steps; its worker's pg_stat_activity.query says it
-- at once, and counter.running_jobs shows it with the rate and time left.
CREATE OR REPLACE FUNCTION counter.job_progress(phase text, done bigint, total bigint DEFAULT NULL)
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_job_progress';
COMMENT ON FUNCTION counter.job_progress(text, bigint, bigint) IS
    'called by a running job: what it does and how far it is (shown in counter.running_jobs and pg_stat_activity)';

CREATE OR REPLACE FUNCTION counter_internal.job_progress_entries(OUT pid integer, OUT job_id bigint, OUT run_id bigint,
    OUT phase text, OUT phase_started timestamptz, OUT done bigint, OUT total bigint, OUT updated timestamptz)
RETURNS SETOF record
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_job_progress_entries';

-- The jobs running now: who runs them, since when, and how far they are
-- (phase, done of total, rate, time left: what the job's code reported with
-- counter.job_progress; NULL until it does, and without the preload).
CREATE OR REPLACE VIEW counter.running_jobs AS
SELECT j.job_id, j.kind, j.target, j.owner, r.run_id, r.runner, r.pid, r.started_at,
       pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) r.started_at AS running_for,
       p.phase, p.done, p.total,
       CASE WHEN p.updated OPERATOR(pg_catalog.>) p.phase_started AND p.done OPERATOR(pg_catalog.>) 0
            THEN p.done::float8 OPERATOR(pg_catalog./)
                 pg_catalog.date_part('epoch', p.updated OPERATOR(pg_catalog.-) p.phase_started) END AS per_second,
       CASE WHEN p.updated OPERATOR(pg_catalog.>) p.phase_started AND p.done OPERATOR(pg_catalog.>) 0
                 AND p.total IS NOT NULL
            THEN pg_catalog.make_interval(secs => greatest(p.total OPERATOR(pg_catalog.-) p.done, 0)::float8
                 OPERATOR(pg_catalog.*) pg_catalog.date_part('epoch', p.updated OPERATOR(pg_catalog.-) p.phase_started)
                 OPERATOR(pg_catalog./) p.done::float8) END AS time_left,
       a.query AS activity
FROM counter.jobs j
JOIN counter.job_runs r ON r.run_id OPERATOR(pg_catalog.=) j.running_run
LEFT JOIN counter_internal.job_progress_entries() p ON p.run_id OPERATOR(pg_catalog.=) r.run_id
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) r.pid;
COMMENT ON VIEW counter.running_jobs IS 'counter_ext jobs running now, with the progress their code reports';

-- ---- src/sql/61_job_kinds.sql
-- The built-in job kinds: rows of counter_internal.job_kinds, added once the
-- procedures exist (30, 36, 40 and 50 made them). Included as it is by the update
-- from 1.1, after the procedures of 1.2 are made.
INSERT INTO counter_internal.job_kinds (kind, procedure, builtin) VALUES
    ('reconcile', 'counter.job_reconcile(text, bigint)', true),
    ('rollup_refresh', 'counter.job_rollup_refresh(text, bigint)', true),
    ('partition_maintenance', 'counter.job_partition_maintenance(text, bigint)', true),
    ('flush', 'counter.job_flush(text, bigint)', true);


-- (05_jobs.sql's table, 06_jobs_code.sql's function: see jobs_inserted)
CREATE TRIGGER jobs_inserted AFTER INSERT ON counter.jobs REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.jobs_inserted();

-- ---- src/sql/70_dump.sql
-- What pg_dump carries (doc/operations.md). The tables that hold user state
-- are extension members, so pg_dump dumps their rows only when they are
-- marked here; the identity sequences that number them are marked too, so a
-- restored database hands out the next id, not one already in use. The
-- configuration tables mark themselves where they are created
-- (counter.tracked, counter.rollups, counter.partitioned_tables,
-- counter.partition_staging, counter.jobs); this file adds what was left out:
--   pending work   counter.rollup_dirty (hours a deferred rollup must
--                  recompute; without it a restored rollup stays wrong)
--   history        counter.job_runs (the one run record: jobs, tracked
--                  reconciliations, rollup refreshes, partition maintenance)
--                  and counter.tracked_key_drift: carried over (bounded by
--                  counter_ext.history_retention), so drift, last outcomes
--                  and job history survive a move to a new server
--   identities     the sequences of every identity column above.
-- No foreign key joins two of them (below).

SELECT pg_catalog.pg_extension_config_dump('counter.rollup_dirty', '');
SELECT pg_catalog.pg_extension_config_dump('counter.job_runs', '');
SELECT pg_catalog.pg_extension_config_dump('counter.tracked_key_drift', '');
-- (One call a statement: each call updates the extension's catalog row.)
SELECT pg_catalog.pg_extension_config_dump('counter.tracked_counter_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('counter.rollups_rollup_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('counter.jobs_job_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('counter.job_runs_run_id_seq', '');

-- No FOREIGN KEY joins two of the dumped tables: pg_restore -j loads the rows
-- of extension tables in any order (by size), so a referencing table's rows
-- may come before the rows they reference, and the restore stops at the
-- foreign key (tracked_key_drift before its runs did). What ON DELETE
-- CASCADE did is done by statement triggers (71_dump_cascades.sql), as the
-- extension's owner like a foreign key's own action: deleting a run deletes
-- its logged drift, a managed table its staged drain.
CREATE OR REPLACE FUNCTION counter_internal.dumped_cascade()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_TABLE_NAME OPERATOR(pg_catalog.=) 'job_runs' THEN
        DELETE FROM counter.tracked_key_drift x WHERE x.run_id IN (SELECT o.run_id FROM gone o);
    ELSIF TG_TABLE_NAME OPERATOR(pg_catalog.=) 'partitioned_tables' THEN
        DELETE FROM counter.partition_staging x WHERE x.parent IN (SELECT o.parent FROM gone o);
    END IF;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION counter_internal.dumped_cascade() FROM PUBLIC;

-- ---- src/sql/71_dump_cascades.sql
-- The deletes that foreign keys between dumped tables would cascade (see
-- counter_internal.dumped_cascade in 70_dump.sql: pg_restore -j loads those
-- tables' rows in any order, so they have no FOREIGN KEY).
CREATE TRIGGER job_runs_cascade AFTER DELETE ON counter.job_runs REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.dumped_cascade();
CREATE TRIGGER partitioned_tables_cascade AFTER DELETE ON counter.partitioned_tables REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.dumped_cascade();

-- ---- src/sql/80_drop.sql
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

-- ---- src/sql/85_event_triggers.sql
-- Event triggers, made once the functions they call exist. Not included by an
-- update: an update that changes one of these functions replaces the function
-- (CREATE OR REPLACE in its piece), and the trigger keeps calling it.

CREATE EVENT TRIGGER counter_tracked_ddl ON ddl_command_end WHEN TAG IN ('ALTER TABLE')
    EXECUTE FUNCTION counter_internal.tracked_ddl();
CREATE EVENT TRIGGER counter_tracked_forget_dropped ON sql_drop
    WHEN TAG IN ('DROP TABLE', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION counter_internal.tracked_forget_dropped();
CREATE EVENT TRIGGER counter_rollup_forget_dropped ON sql_drop
    WHEN TAG IN ('DROP TABLE', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION counter_internal.rollup_forget_dropped();
CREATE EVENT TRIGGER counter_partition_follow_rename ON ddl_command_end
    WHEN TAG IN ('ALTER TABLE', 'ALTER SCHEMA')
    EXECUTE FUNCTION counter_internal.partition_follow_rename();
CREATE EVENT TRIGGER counter_follow_owner ON ddl_command_end
    WHEN TAG IN ('ALTER TABLE')
    EXECUTE FUNCTION counter_internal.follow_owner();

-- ---- src/sql/99_internal.sql
-- Last piece of the install script: EXECUTE on every function and procedure
-- of schema counter_internal is revoked from PUBLIC, whatever piece made it.
-- A registration grants what an owner needs (counter.track grants
-- filter_match to the counter's owner).
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid FROM pg_catalog.pg_proc p
             WHERE p.pronamespace OPERATOR(pg_catalog.=) 'counter_internal'::regnamespace LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON %s %s FROM PUBLIC',
            CASE WHEN (SELECT p.prokind FROM pg_catalog.pg_proc p WHERE p.oid OPERATOR(pg_catalog.=) f)
                      OPERATOR(pg_catalog.=) 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END, f);
    END LOOP;
END
$$;
