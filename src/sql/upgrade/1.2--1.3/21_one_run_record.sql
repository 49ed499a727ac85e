-- ---- One run record (src/sql/05_jobs.sql): counter.job_runs holds every
-- run of periodic work, a job's or a direct call's. 1.2's other records
-- (the table counter.tracked_runs, the table counter.rollup_status, the
-- last_* columns of counter.partitioned_tables) are moved into it and
-- dropped; views of the same names and columns are made by the code below.
ALTER TABLE counter.job_runs ALTER COLUMN job_id DROP NOT NULL;
ALTER TABLE counter.job_runs DROP CONSTRAINT job_runs_runner_check;
ALTER TABLE counter.job_runs ADD CONSTRAINT job_runs_runner_check CHECK (runner IN ('worker', 'session', 'call'));
ALTER TABLE counter.job_runs ADD COLUMN object_id bigint, ADD COLUMN info jsonb;
ALTER TABLE counter.job_runs ADD CONSTRAINT job_runs_call_check CHECK ((job_id IS NULL) = (runner = 'call'));
CREATE INDEX job_runs_object_idx ON counter.job_runs (kind, object_id, run_id);
CREATE INDEX job_runs_target_idx ON counter.job_runs (kind, target, run_id);
COMMENT ON TABLE counter.job_runs IS
    'every run of counter_ext''s periodic work (jobs and direct calls), trimmed after counter_ext.history_retention';

-- What reads the old records goes first (made again by the code below).
DROP VIEW IF EXISTS counter.tracked_history, counter.tracked_drift, counter.tracked_key_drift_history,
    counter.rollup_state, counter.partition_status;
DROP FUNCTION IF EXISTS counter_internal.tracked_finish_run(counter.tracked, bigint, text);
DROP POLICY tracked_key_drift_read ON counter.tracked_key_drift;

-- Tracked runs: new run ids (the old ones may be job runs' ids); the drift
-- detail follows its run.
ALTER TABLE counter.tracked_key_drift DROP CONSTRAINT tracked_key_drift_run_id_fkey;
INSERT INTO counter.job_runs (job_id, kind, target, runner, pid, backend_start, started_at, finished_at, outcome,
                              rows_affected, message, run_as, object_id, info)
SELECT NULL, 'reconcile', c.name, 'call', 0, r.started_at, r.started_at,
       CASE WHEN r.outcome = 'running' THEN NULL ELSE coalesce(r.finished_at, r.started_at) END,
       CASE r.outcome WHEN 'running' THEN 'running' WHEN 'interrupted' THEN 'failed' ELSE 'succeeded' END,
       r.keys_corrected,
       CASE WHEN r.outcome = 'interrupted' THEN 'interrupted: its session ended before it finished' END,
       c.owner, r.counter_id,
       pg_catalog.jsonb_build_object('watermark', r.watermark, 'all_keys', r.all_keys, 'keys_checked', r.keys_checked,
           'keys_corrected', r.keys_corrected, 'drift_positive', r.drift_positive, 'drift_negative', r.drift_negative,
           'max_abs_drift', r.max_abs_drift, 'keys_busy', r.keys_busy, 'keys_verified', r.keys_verified,
           'outcome', r.outcome, 'finished_at', r.finished_at, 'run_of_1_2', r.run_id)
FROM counter.tracked_runs r JOIN counter.tracked c ON c.counter_id = r.counter_id
ORDER BY r.run_id;
UPDATE counter.tracked_key_drift k SET run_id = x.run_id
FROM counter.job_runs x
WHERE x.kind = 'reconcile' AND (x.info ->> 'run_of_1_2')::bigint = k.run_id;
DELETE FROM counter.tracked_key_drift k
WHERE NOT EXISTS (SELECT FROM counter.job_runs x WHERE x.run_id = k.run_id AND x.info ? 'run_of_1_2');
UPDATE counter.job_runs x SET info = x.info - 'run_of_1_2' WHERE x.info ? 'run_of_1_2';
ALTER TABLE counter.tracked_key_drift ADD CONSTRAINT tracked_key_drift_run_id_fkey
    FOREIGN KEY (run_id) REFERENCES counter.job_runs ON DELETE CASCADE;

-- Each rollup's last refresh.
INSERT INTO counter.job_runs (job_id, kind, target, runner, pid, backend_start, started_at, finished_at, outcome,
                              rows_affected, message, run_as, object_id, info)
SELECT NULL, 'rollup_refresh', r.name, 'call', 0, s.last_refresh_at, s.last_refresh_at,
       s.last_refresh_at + coalesce(s.last_duration, interval '0'),
       CASE WHEN s.last_error IS NULL THEN 'succeeded' ELSE 'failed' END, s.last_rows, s.last_error, r.owner,
       s.rollup_id,
       pg_catalog.jsonb_build_object('outcome', s.last_outcome, 'rows', s.last_rows, 'error', s.last_error,
           'finished_at', s.last_refresh_at + coalesce(s.last_duration, interval '0'))
FROM counter.rollup_status s JOIN counter.rollups r ON r.rollup_id = s.rollup_id
WHERE s.last_refresh_at IS NOT NULL
ORDER BY s.rollup_id;

-- Each managed table's last maintenance.
INSERT INTO counter.job_runs (job_id, kind, target, runner, pid, backend_start, started_at, finished_at, outcome,
                              message, run_as, object_id, info)
SELECT NULL, 'partition_maintenance', coalesce(p.job_target, p.parent::text), 'call', 0, p.last_run_at,
       p.last_run_at, p.last_run_at, CASE WHEN p.last_outcome = 'error' THEN 'failed' ELSE 'succeeded' END,
       p.last_error, k.relowner::regrole, NULL,
       pg_catalog.jsonb_build_object('outcome', p.last_outcome, 'error', p.last_error, 'created', p.last_created,
           'dropped', p.last_dropped, 'moved', p.last_moved, 'outside', p.last_outside, 'finished_at', p.last_run_at)
FROM counter.partitioned_tables p JOIN pg_catalog.pg_class k ON k.oid = p.parent
WHERE p.last_run_at IS NOT NULL
ORDER BY p.parent::oid;

-- The old records go (out of pg_dump's list first: a dropped table stays
-- in it otherwise).
ALTER EXTENSION counter_ext DROP TABLE counter.tracked_runs;
ALTER EXTENSION counter_ext DROP TABLE counter.rollup_status;
ALTER EXTENSION counter_ext DROP SEQUENCE counter.tracked_runs_run_id_seq;
DROP TABLE counter.tracked_runs, counter.rollup_status;
ALTER TABLE counter.partitioned_tables DROP COLUMN last_run_at, DROP COLUMN last_outcome, DROP COLUMN last_error,
    DROP COLUMN last_created, DROP COLUMN last_dropped, DROP COLUMN last_moved, DROP COLUMN last_outside;
