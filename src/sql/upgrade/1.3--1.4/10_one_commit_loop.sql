-- The one commit loop (counter.run_steps, 06_jobs_code.sql) replaces the
-- hand-written loops and their steps: each feature has one step function
-- (counter.tracked_run_step, counter.rollup_run_step,
-- counter.partition_run_step with a new signature). Functions whose
-- arguments changed are dropped first and made again by the code.
DROP FUNCTION IF EXISTS counter.tracked_job_begin(text);
DROP FUNCTION IF EXISTS counter.tracked_job_verified(text, bigint, text, boolean, bigint);
DROP FUNCTION IF EXISTS counter.tracked_job_step(text, bigint, timestamptz, boolean, timestamptz, text);
DROP FUNCTION IF EXISTS counter.tracked_job_end(text, bigint, text);
DROP FUNCTION IF EXISTS counter.partition_run_step(regclass, integer, bigint, bigint, bigint);
DROP PROCEDURE IF EXISTS counter.partition_maintain_steps(regclass, bigint, bigint, bigint, text, text);
DROP FUNCTION IF EXISTS counter.rollup_record(integer, timestamptz, text, bigint, text);
DROP FUNCTION IF EXISTS counter_internal.run_end(bigint, jsonb, boolean, bigint, text);
DROP FUNCTION IF EXISTS counter_internal.tracked_finish_run(counter.tracked, bigint, text);
DROP FUNCTION IF EXISTS counter_internal.partition_record(regclass, text, text, bigint, bigint, bigint, bigint);
