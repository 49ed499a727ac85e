-- One run record (counter.job_runs) for every run of periodic work: a
-- direct call of each feature (reconcile, rollup refresh, partition
-- maintenance) and a job are each one row of it, the features' views are
-- views over it (same run ids), a job's run is not recorded twice, and a
-- direct call's history is trimmed after counter_ext.history_retention.
CREATE EXTENSION counter_ext;
\set VERBOSITY terse
SET client_min_messages = warning;
SET timezone = 'UTC';

CREATE TABLE public.rr_src (id bigint PRIMARY KEY, k int NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON public.rr_src (at);
CREATE TABLE public.rr_ev (id bigint NOT NULL, k int NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
INSERT INTO public.rr_src SELECT g, g % 3, '2026-07-01 10:00+00'::timestamptz + g * interval '1 minute'
FROM generate_series(1, 9) g;
SELECT counter.track('rr', 'public.rr_src', 'k', 'at') IS NOT NULL AS tracked;
SELECT counter.partition_manage('public.rr_ev', 'at', premake => 2, start_at => '2026-07-01 10:00+00',
                                as_of => '2026-07-01 10:10+00') AS created;
SELECT counter.rollup_create('rr_hourly', 'public.rr_ev', 'at', '{k}', mode => 'deferred') AS rollup_table;
INSERT INTO public.rr_ev VALUES (1, 1, '2026-07-01 10:05+00'), (2, 1, '2026-07-01 10:06+00');
UPDATE counter.jobs SET enabled = false;

-- Direct calls: one row each, runner 'call', no job.
SELECT keys_checked, outcome FROM counter.reconcile('rr', '2026-07-01 12:00+00', all_keys => true);
SELECT counter.rollup_recompute('rr_hourly', '2026-07-01 10:00+00', '2026-07-01 11:00+00') AS rows_written;
SELECT outcome FROM counter.partition_maintain('public.rr_ev', as_of => '2026-07-01 10:10+00');
SELECT kind, target, runner, job_id IS NULL AS no_job, outcome, rows_affected, info ->> 'outcome' AS feature_outcome
FROM counter.job_runs ORDER BY run_id;

-- The features' views are views over those rows.
SELECT h.run_id = (SELECT max(run_id) FROM counter.job_runs WHERE kind = 'reconcile') AS same_run,
       h.keys_checked, h.keys_corrected, h.drift_negative, h.outcome
FROM counter.tracked_history h;
SELECT s.last_outcome, s.last_rows, s.last_refresh_at = (SELECT started_at FROM counter.job_runs WHERE kind = 'rollup_refresh')
       AS same_run
FROM counter.rollup_status s;
SELECT last_outcome, last_created, last_run_at = (SELECT (info ->> 'finished_at')::timestamptz FROM counter.job_runs
                                                  WHERE kind = 'partition_maintenance') AS same_run
FROM counter.partition_status;

-- A job's run is one row too: the worker's, with the feature's part in it.
SELECT job_id AS reconcile_job FROM counter.jobs WHERE kind = 'reconcile' \gset
SELECT count(*) AS rows_before FROM counter.job_runs \gset
CALL counter.run_job(:reconcile_job);
SELECT count(*) - :rows_before AS new_rows FROM counter.job_runs;
SELECT runner, job_id = :reconcile_job AS its_job, outcome, info ->> 'outcome' AS feature_outcome,
       (info ->> 'keys_checked')::bigint >= 0 AS has_drift_numbers
FROM counter.job_runs ORDER BY run_id DESC LIMIT 1;
SELECT count(*) AS tracked_runs FROM counter.tracked_history;

-- History is bounded without a worker: a call's run that ended before the
-- retention (7 days) is deleted when the next run of that object starts.
UPDATE counter.job_runs SET started_at = started_at - interval '30 days', finished_at = finished_at - interval '30 days'
WHERE kind = 'rollup_refresh';
SELECT counter.rollup_recompute('rr_hourly', '2026-07-01 10:00+00', '2026-07-01 11:00+00') AS rows_written;
SELECT count(*) AS rollup_runs, min(started_at) > now() - interval '1 day' AS only_the_new_one
FROM counter.job_runs WHERE kind = 'rollup_refresh';

-- An object's history goes with it.
SELECT counter.untrack('rr');
SELECT count(*) AS reconcile_runs_left FROM counter.job_runs WHERE kind = 'reconcile';

SELECT counter.rollup_drop('rr_hourly');
DROP TABLE public.rr_src, public.rr_ev;
DROP EXTENSION counter_ext;
