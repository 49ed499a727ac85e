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
-- superuser can extend, to one routine identified by its OID: no routine is
-- ever found by its name (a counter.job_<kind> or <schema>.job_<kind>
-- someone creates is never called). The built-in kinds name their step
-- functions, which the one loop (src/spine.cpp) runs with a commit between
-- bounded steps:
--   reconcile              counter_internal.tracked_run_step
--   rollup_refresh         counter_internal.rollup_run_step
--   partition_maintenance  counter_internal.partition_run_step
--   flush                  counter_internal.flush_run_step
-- (target text, args jsonb, state jsonb) -> jsonb. A superuser's own kind may
-- name a procedure (target text, INOUT rows_affected bigint DEFAULT NULL)
-- instead, which the runner CALLs. Either runs under the job's statement and
-- lock timeouts, and an ERROR it raises is recorded in counter.job_runs and
-- backs the job off (the other jobs go on).

-- The kinds of job and the routine each one runs. The rows of the built-in
-- kinds are added by 61_job_kinds.sql (after the step functions exist); a superuser
-- may add a kind of their own (only superuser-owned procedures are run).
-- procedure is the routine's schema-qualified signature as text
-- ('counter_internal.tracked_run_step(text, jsonb, jsonb)'), looked up with
-- to_regprocedure when a job runs: not a regprocedure, which pg_upgrade
-- refuses in a table (function OIDs are not kept), and not an OID, which
-- would name nothing after it.
CREATE TABLE counter_internal.job_kinds (
    kind       text PRIMARY KEY CHECK (kind ~ '^[a-z][a-z0-9_]{0,58}$'),
    procedure  text NOT NULL,
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
-- ended are deleted after counter_ext.history_retention, and beyond the
-- newest counter_ext.history_runs_per_role of each role (run_as:
-- counter_internal.run_trim); a row still
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
    -- database yet (a restore still loading it; the reason in message);
    -- 'skipped': not done, because another session was doing the same work
    -- (its lock was taken; the reason in message)
    outcome        text NOT NULL CHECK (outcome IN ('running', 'succeeded', 'failed', 'held', 'skipped')),
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
-- the bound per role (counter_internal.run_trim)
CREATE INDEX job_runs_run_as_idx ON counter.job_runs (run_as, run_id);

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
