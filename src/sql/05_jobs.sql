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

CREATE TABLE counter.jobs (
    job_id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind          text NOT NULL
                  CHECK (kind IN ('reconcile', 'rollup_refresh', 'partition_maintenance')),
    target        text NOT NULL,
    run_every     interval NOT NULL CHECK (run_every > interval '0'),
    enabled       boolean NOT NULL DEFAULT true,
    next_run      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    timeout       interval NOT NULL DEFAULT interval '5 minutes' CHECK (timeout > interval '0'),
    lock_timeout  interval NOT NULL DEFAULT interval '2 seconds' CHECK (lock_timeout > interval '0'),
    failures      integer NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    UNIQUE (kind, target)
);
COMMENT ON TABLE counter.jobs IS 'periodic work of counter_ext, run by its background worker or counter.run_jobs()';
SELECT pg_catalog.pg_extension_config_dump('counter.jobs', '');

-- Registers (or re-enables with a new interval) the job of a target.
CREATE FUNCTION counter.job_register(kind text, target text, run_every interval)
RETURNS bigint
LANGUAGE sql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO counter.jobs AS j (kind, target, run_every)
    VALUES (job_register.kind, job_register.target, job_register.run_every)
    ON CONFLICT (kind, target) DO UPDATE
        SET run_every = EXCLUDED.run_every, enabled = true, failures = 0, next_run = pg_catalog.now()
    RETURNING j.job_id
$$;

-- Removes the job of a target; true when there was one.
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
