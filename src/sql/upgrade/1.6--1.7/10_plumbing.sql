-- ---- Schema counter is only the API (issue 22): the plumbing of the 1.6
-- commit loop goes. The loop is the library's (src/spine.cpp); the kinds name
-- their step functions in counter_internal (60_job_kinds.sql); the refresh's
-- helpers are called in counter_internal by the code below (50_code.sql).
DROP FUNCTION IF EXISTS counter.run_step(text, text, jsonb, jsonb);
DROP FUNCTION IF EXISTS counter.run_deadline();
DROP FUNCTION IF EXISTS counter.run_reraise(text, text, text, text, text);
DROP FUNCTION IF EXISTS counter.tracked_run_step(text, jsonb, jsonb);
DROP FUNCTION IF EXISTS counter.rollup_run_step(text, jsonb, jsonb);
DROP FUNCTION IF EXISTS counter.partition_run_step(text, jsonb, jsonb);
DROP PROCEDURE IF EXISTS counter.job_reconcile(text, bigint);
DROP PROCEDURE IF EXISTS counter.job_rollup_refresh(text, bigint);
DROP PROCEDURE IF EXISTS counter.job_partition_maintenance(text, bigint);
DROP PROCEDURE IF EXISTS counter.job_flush(text, bigint);
DROP FUNCTION IF EXISTS counter.rollup_record(integer, timestamptz, text, bigint, jsonb);
DROP FUNCTION IF EXISTS counter.rollup_refresh_chunk(integer, timestamptz, timestamptz, timestamptz[], boolean);
DROP FUNCTION IF EXISTS counter.rollup_dirty_chunks(text);
DROP FUNCTION IF EXISTS counter.rollup_range_chunks(text, timestamptz, timestamptz);
