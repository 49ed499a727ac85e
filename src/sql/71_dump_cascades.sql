-- The deletes that foreign keys between dumped tables would cascade (see
-- counter_internal.dumped_cascade in 70_dump.sql: pg_restore -j loads those
-- tables' rows in any order, so they have no FOREIGN KEY).
CREATE TRIGGER job_runs_cascade AFTER DELETE ON counter.job_runs REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.dumped_cascade();
CREATE TRIGGER partitioned_tables_cascade AFTER DELETE ON counter.partitioned_tables REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.dumped_cascade();
