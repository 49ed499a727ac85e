-- The built-in kinds of periodic work: rows of counter_internal.job_kinds,
-- each naming its step function (the one registry: src/spine.cpp runs the
-- step functions in the one loop), added once the functions exist (31, 36,
-- 41 and 51 made them).
INSERT INTO counter_internal.job_kinds (kind, procedure, builtin) VALUES
    ('reconcile', 'counter_internal.tracked_run_step(text, jsonb, jsonb)', true),
    ('rollup_refresh', 'counter_internal.rollup_run_step(text, jsonb, jsonb)', true),
    ('partition_maintenance', 'counter_internal.partition_run_step(text, jsonb, jsonb)', true),
    ('flush', 'counter_internal.flush_run_step(text, jsonb, jsonb)', true);


-- (05_jobs.sql's table, 06_jobs_code.sql's function: see jobs_inserted)
CREATE TRIGGER jobs_inserted AFTER INSERT ON counter.jobs REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.jobs_inserted();
