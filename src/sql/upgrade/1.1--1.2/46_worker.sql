-- ---- running jobs: run_jobs and run_job hand each job to a session of its
-- owner; the runner of those sessions; the advisory-lock registry.
DROP PROCEDURE counter.run_jobs(integer);
DROP PROCEDURE counter.run_job(bigint, bigint);
DROP FUNCTION counter.job_alter(bigint, interval, boolean, interval, interval, timestamptz);
