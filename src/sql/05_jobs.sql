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

-- Helpers that are not API. USAGE for everyone (job sessions of ordinary
-- owners call into it); EXECUTE is granted function by function.
CREATE SCHEMA counter_internal;
COMMENT ON SCHEMA counter_internal IS 'counter_ext internals: not an API, may change in any release';
GRANT USAGE ON SCHEMA counter_internal TO PUBLIC;

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

-- Every run of a job: who ran it, when, how it ended. Rows that ended are
-- deleted after counter_ext.history_retention; a row still 'running' whose
-- process is gone (crash, termination) is marked failed by the next runner.
CREATE TABLE counter.job_runs (
    run_id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id         bigint NOT NULL,
    kind           text NOT NULL,
    target         text NOT NULL,
    runner         text NOT NULL CHECK (runner IN ('worker', 'session')),
    pid            integer NOT NULL,
    backend_start  timestamptz NOT NULL,
    started_at     timestamptz NOT NULL,
    finished_at    timestamptz,
    outcome        text NOT NULL CHECK (outcome IN ('running', 'succeeded', 'failed')),
    rows_affected  bigint,
    sqlstate       text,
    message        text,
    -- the session user of the process that ran the job (its owner)
    run_as         regrole,
    CHECK ((outcome = 'running') = (finished_at IS NULL))
);
COMMENT ON TABLE counter.job_runs IS 'run history of counter_ext jobs, trimmed after counter_ext.history_retention';
CREATE INDEX job_runs_job_idx ON counter.job_runs (job_id, run_id);
CREATE INDEX job_runs_finished_idx ON counter.job_runs (finished_at);
CREATE INDEX job_runs_running_idx ON counter.job_runs (run_id) WHERE outcome = 'running';

-- One line per job with its latest run.
CREATE VIEW counter.job_status AS
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

-- Tells the launcher (when the library is preloaded) that the database has a
-- job of 'owner' due at 'due', once the transaction commits.
CREATE FUNCTION counter_internal.job_nudge(owner oid, due timestamptz)
RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'counter_job_nudge';
REVOKE ALL ON FUNCTION counter_internal.job_nudge(oid, timestamptz) FROM PUBLIC;

-- Registers (or re-enables with a new interval) the job of a target; returns
-- its id. 'owner' is the owner of the object the job serves, given by the
-- registering feature (NULL: found from the target, see
-- counter_internal.job_target_owner).
CREATE FUNCTION counter.job_register(kind text, target text, run_every interval, owner regrole DEFAULT NULL)
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
    IF NOT (SELECT r.rolcanlogin FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) who) THEN
        RAISE WARNING 'role % cannot log in, so its % job for "%" cannot run', who, kind, target
            USING DETAIL = 'Jobs run in a background-worker session of their owner; PostgreSQL 15 refuses such '
                           'a session to a role without LOGIN.',
                  HINT = format('ALTER ROLE %s LOGIN (no password is needed: pg_hba.conf does not apply to '
                                'background workers), or give the target to a role that can log in.', who);
    END IF;
    INSERT INTO counter.jobs AS j (kind, target, run_every, owner)
    VALUES (job_register.kind, job_register.target, job_register.run_every, who)
    ON CONFLICT ON CONSTRAINT jobs_kind_target_key DO UPDATE
        SET run_every = EXCLUDED.run_every, enabled = true, failures = 0, next_run = pg_catalog.now(),
            owner = EXCLUDED.owner, disabled_reason = NULL
    RETURNING j.job_id INTO id;
    PERFORM counter_internal.job_nudge(who::oid, pg_catalog.now());
    RETURN id;
END
$$;

-- Removes the job of a target; true when there was one. Its history stays
-- until the retention trims it.
CREATE FUNCTION counter.job_unregister(kind text, target text)
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
