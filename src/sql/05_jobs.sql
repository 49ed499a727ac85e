-- Periodic jobs: one row per piece of periodic work (reconcile a counter,
-- refresh a rollup's dirty hours, maintain a partitioned table). Features
-- register their job when a target is created and remove it when it is
-- dropped; the background worker and counter.run_jobs() run the due ones.
--
-- Each kind has one procedure that does the work for one target and may
-- COMMIT between bounded steps:
--   reconcile              CALL counter.job_reconcile(target, rows)
--   rollup_refresh         CALL counter.job_rollup_refresh(target, rows)
--   partition_maintenance  CALL counter.job_partition_maintenance(target, rows)
-- (target text, INOUT rows_affected bigint DEFAULT NULL)
--
-- The runner calls CALL counter.job_<kind>($1, NULL) for any kind, so a kind
-- is a name (lower-case letters, digits, '_') whose procedure exists when the
-- job is registered. A job procedure cannot carry SET clauses (PostgreSQL
-- forbids COMMIT in such procedures), so it schema-qualifies what it uses; it
-- runs under the job's statement and lock timeouts, and an ERROR it raises is
-- recorded in counter.job_runs and backs the job off (the other jobs go on).

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
       r.rows_affected AS last_rows, r.sqlstate AS last_sqlstate, r.message AS last_message
FROM counter.jobs j
LEFT JOIN LATERAL (
    SELECT x.started_at, x.finished_at, x.outcome, x.rows_affected, x.sqlstate, x.message
    FROM counter.job_runs x
    WHERE x.job_id OPERATOR(pg_catalog.=) j.job_id
    ORDER BY x.run_id DESC
    LIMIT 1) r ON true;

-- Registers (or re-enables with a new interval) the job of a target.
CREATE FUNCTION counter.job_register(kind text, target text, run_every interval)
RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    id bigint;
BEGIN
    IF kind !~ '^[a-z][a-z0-9_]{0,58}$' THEN
        RAISE EXCEPTION 'invalid job kind "%"', kind
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A kind is lower-case letters, digits and "_", starting with a letter.';
    END IF;
    IF run_every <= interval '0' THEN
        RAISE EXCEPTION 'run_every must be a positive interval, not %', run_every
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.to_regprocedure(pg_catalog.format('counter.%I(text, bigint)', 'job_' || kind)) IS NULL THEN
        RAISE EXCEPTION 'job kind "%" has no procedure counter.job_%(text, bigint)', kind, kind
            USING ERRCODE = 'undefined_function';
    END IF;
    INSERT INTO counter.jobs AS j (kind, target, run_every)
    VALUES (job_register.kind, job_register.target, job_register.run_every)
    ON CONFLICT ON CONSTRAINT jobs_kind_target_key DO UPDATE
        SET run_every = EXCLUDED.run_every, enabled = true, failures = 0, next_run = pg_catalog.now()
    RETURNING j.job_id INTO id;
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
REVOKE ALL ON FUNCTION counter.job_register(text, text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.job_unregister(text, text) FROM PUBLIC;
