-- ---- 1.3, after the code: the triggers of jobs held while a restore runs
-- and of the cascades (their functions are made by the code; the tables
-- changed in 22_restore_hold.sql)
CREATE TRIGGER jobs_inserted AFTER INSERT ON counter.jobs REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.jobs_inserted();
CREATE TRIGGER job_runs_cascade AFTER DELETE ON counter.job_runs REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.dumped_cascade();
CREATE TRIGGER partitioned_tables_cascade AFTER DELETE ON counter.partitioned_tables REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.dumped_cascade();
