-- The built-in job kinds: rows of counter_internal.job_kinds, added once the
-- procedures exist (30, 36, 40 and 50 made them). Included as it is by the update
-- from 1.1, after the procedures of 1.2 are made.
INSERT INTO counter_internal.job_kinds (kind, procedure, builtin) VALUES
    ('reconcile', 'counter.job_reconcile(text, bigint)', true),
    ('rollup_refresh', 'counter.job_rollup_refresh(text, bigint)', true),
    ('partition_maintenance', 'counter.job_partition_maintenance(text, bigint)', true),
    ('flush', 'counter.job_flush(text, bigint)', true);


-- (05_jobs.sql's table, 06_jobs_code.sql's function: see jobs_inserted)
CREATE TRIGGER jobs_inserted AFTER INSERT ON counter.jobs REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.jobs_inserted();
