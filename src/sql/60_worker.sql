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

-- One registry of the locks counter_ext takes to coordinate its own work
-- (src/include/counter_ext/locks.hpp; doc/reference/worker.md documents it):
-- object locks in counter_ext's own lock space, which no role can take.
-- counter_internal.lock_take(class, id, at, wait) takes one for the
-- transaction (SQL's only way to them; EXECUTE revoked from PUBLIC),
-- counter_internal.lock_classes lists the classes.
CREATE OR REPLACE FUNCTION counter_internal.lock_take(class text, id bigint, at timestamptz DEFAULT NULL,
    wait boolean DEFAULT true)
RETURNS boolean
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_lock_take';
CREATE OR REPLACE FUNCTION counter_internal.lock_classes(OUT class text, OUT number smallint, OUT id text)
RETURNS SETOF record
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_lock_classes';

-- A row lock that never waits (src/locks.cpp): the newest version of row
-- row_id of table rel, locked for update for this transaction, or false when
-- another transaction holds or is changing it (or it is gone). SELECT ... FOR
-- UPDATE SKIP LOCKED can still wait, on the update chain of a row whose
-- updater just ended; a reconciliation locks the delta rows of its batch with
-- this instead (31_tracked_code.sql). PUBLIC may execute it (99_internal.sql):
-- it locks only rows of a table whose owner's rights the caller has. Its cost
-- puts it after every other condition of the scan that calls it.
CREATE OR REPLACE FUNCTION counter_internal.row_lock_skip(rel regclass, row_id tid)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE COST 10000
AS 'MODULE_PATHNAME', 'counter_row_lock_skip';

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
CREATE OR REPLACE VIEW counter.running_jobs WITH (security_barrier) AS
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

-- The runs that raised the alert (counter_internal.alert), as far as the
-- reader may see them: a reconciliation's to the members of the counter's
-- owner, a partition maintenance run's to the members of the table's owner,
-- any other to the members of the role it ran as. A listener on channel
-- counter_ext_drift reads the run its payload names here: no row means an
-- alert it may not see, or a forged one (doc/security.md, "Alerts").
CREATE OR REPLACE VIEW counter.alerts WITH (security_barrier) AS
SELECT r.run_id, r.kind, r.target, r.started_at, r.finished_at, r.outcome, r.message, r.info
FROM counter.job_runs r
WHERE r.info OPERATOR(pg_catalog.@>) '{"alerted": true}'
  AND pg_catalog.pg_has_role(coalesce(
          CASE r.kind
              WHEN 'reconcile' THEN (SELECT t.owner::oid FROM counter.tracked t
                                     WHERE t.counter_id::bigint OPERATOR(pg_catalog.=) r.object_id)
              WHEN 'partition_maintenance' THEN (SELECT c.relowner FROM counter.partitioned_tables p
                                                 JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) p.parent
                                                 WHERE p.job_target OPERATOR(pg_catalog.=) r.target)
          END, r.run_as::oid), 'USAGE');
COMMENT ON VIEW counter.alerts IS 'the runs that raised the alert (NOTIFY counter_ext_drift {"run_id": N}) the reader may see';
GRANT SELECT ON counter.alerts TO PUBLIC;
