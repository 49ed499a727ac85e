-- locks (issue 24, items 1 and 9): counter_ext's own lock space, the
-- 'skipped' outcome of the run record, the index of its bound per role.
CREATE TABLE counter_internal.lock_space ();
COMMENT ON TABLE counter_internal.lock_space IS 'counter_ext: names the lock space of its own locks (holds nothing)';
REVOKE ALL ON TABLE counter_internal.lock_space FROM PUBLIC;

-- lock_classes lists (class, number, id) now, not 1.4's advisory keys
DROP FUNCTION IF EXISTS counter_internal.lock_classes();

ALTER TABLE counter.job_runs DROP CONSTRAINT job_runs_outcome_check;
ALTER TABLE counter.job_runs ADD CONSTRAINT job_runs_outcome_check
    CHECK (outcome IN ('running', 'succeeded', 'failed', 'held', 'skipped'));
CREATE INDEX job_runs_run_as_idx ON counter.job_runs (run_as, run_id);
