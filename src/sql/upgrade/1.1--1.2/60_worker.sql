-- ---- running jobs: run_jobs and run_job hand each job to a session of its
-- owner; the runner of those sessions; the advisory-lock registry.
DROP PROCEDURE counter.run_jobs(integer);
DROP PROCEDURE counter.run_job(bigint, bigint);
DROP FUNCTION counter.job_alter(bigint, interval, boolean, interval, interval, timestamptz);
--@include src/sql/60_worker.sql
--@include src/sql/61_job_kinds.sql

-- The jobs of 1.1 get the owner of what they serve. A job whose owner cannot
-- be found (a kind of the user's own, whose procedure was
-- counter.job_<kind>: 1.2 runs only kinds of counter_internal.job_kinds; or a
-- target that is gone) is disabled, with the reason, and runs as no one.
UPDATE counter.jobs j SET owner = counter_internal.job_target_owner(j.kind, j.target);
UPDATE counter.jobs j
SET enabled = false,
    disabled_reason = CASE
        WHEN NOT EXISTS (SELECT 1 FROM counter_internal.job_kinds k WHERE k.kind OPERATOR(pg_catalog.=) j.kind)
            THEN pg_catalog.format('1.2 runs only the kinds of counter_internal.job_kinds; add %s there (a procedure '
                                   'owned by a superuser) and set the job''s owner', j.kind)
        ELSE 'the owner of the job''s target is unknown (is the target gone?)' END
WHERE j.owner IS NULL;
