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
