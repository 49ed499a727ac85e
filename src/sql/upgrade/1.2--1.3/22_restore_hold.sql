-- ---- 1.3: jobs held while a restore runs (doc/operations.md); the triggers,
-- whose functions the code makes, in 60_restore_hold.sql
ALTER TABLE counter.job_runs DROP CONSTRAINT job_runs_outcome_check;
ALTER TABLE counter.job_runs ADD CONSTRAINT job_runs_outcome_check
    CHECK (outcome IN ('running', 'succeeded', 'failed', 'held'));
CREATE TABLE counter_internal.job_armed (
    job_id    bigint PRIMARY KEY REFERENCES counter.jobs ON DELETE CASCADE,
    armed_at  timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);
COMMENT ON TABLE counter_internal.job_armed IS 'jobs of counter_ext whose object was seen complete in this database (not dumped)';
REVOKE ALL ON TABLE counter_internal.job_armed FROM PUBLIC;
-- every job of a database being updated serves an object made in it
INSERT INTO counter_internal.job_armed (job_id) SELECT j.job_id FROM counter.jobs j;
-- ---- 1.3: no foreign key between dumped tables (pg_restore -j loads them in
-- any order); statement triggers cascade the deletes instead (70_dump.sql)
ALTER TABLE counter.tracked_key_drift DROP CONSTRAINT tracked_key_drift_run_id_fkey;
ALTER TABLE counter.partition_staging DROP CONSTRAINT partition_staging_parent_fkey;
