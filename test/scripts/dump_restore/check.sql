-- Invariants of a database built by build.sql, source or restored: every
-- number is what the rows say, the pending work gets done, and the next
-- registration of each kind gets a fresh id. Raises on the first failure.
\set ON_ERROR_STOP 1
CREATE FUNCTION pg_temp.expect(ok boolean, what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF ok IS NOT TRUE THEN RAISE EXCEPTION 'check failed: %', what; END IF;
END $$;
-- Tracked counters: value = count(*) per key, and writes after the restore count.
CREATE TEMP VIEW truth AS
    SELECT 'clicks_per_link' AS counter, link_id::text AS key, count(*) AS n FROM public.clicks GROUP BY 2
    UNION ALL SELECT 'likes_per_post', post_id::text, count(*) FROM public.likes GROUP BY 2;
CREATE TEMP VIEW counter_mismatch AS
    SELECT * FROM (SELECT counter, key, value FROM counter.tracked_values WHERE value <> 0) v
    FULL JOIN truth t USING (counter, key) WHERE v.value IS DISTINCT FROM t.n;
SELECT pg_temp.expect(NOT EXISTS (SELECT FROM counter_mismatch), 'tracked counters equal count(*) per key');
SET ROLE app;
INSERT INTO public.clicks (link_id, occurred_at) SELECT i % 43, now() FROM generate_series(1, 300) i;
DELETE FROM public.clicks WHERE id % 89 = 0;
INSERT INTO public.likes (post_id) VALUES (7), (7);
SELECT counter.add('likes_per_post', 7, 2);
RESET ROLE;
SELECT pg_temp.expect(NOT EXISTS (SELECT FROM counter_mismatch), 'tracked counters count writes made after it');
SELECT pg_temp.expect(keys_corrected = 0, 'a full reconciliation finds no drift')
FROM counter.reconcile('clicks_per_link', all_keys => true);
-- Partitions: maintenance drains the stragglers; the rollup's job then
-- recomputes its pending hours: rollup = GROUP BY of the events.
CALL counter.run_maintenance();
SELECT pg_temp.expect((SELECT count(*) FROM public.events_default) = 0, 'maintenance drained the default partition');
CALL counter.run_steps('rollup_refresh', 'events_hourly');
SELECT pg_temp.expect(NOT EXISTS (
    SELECT FROM public.events_hourly r
    FULL JOIN (SELECT link_id, date_bin('1 hour', occurred_at, '2000-01-01 00:00+00') AS hour, count(*) AS n,
                      counter.hll_add_agg(visitor)::text AS v FROM public.events GROUP BY 1, 2) e USING (link_id, hour)
    WHERE r.count IS DISTINCT FROM e.n OR r.distinct_visitor::text IS DISTINCT FROM e.v),
    'the rollup equals GROUP BY of the events after its job ran');
-- The next registration of each kind gets a new id (no 23505), one past
-- the largest restored one.
SELECT max(counter_id) AS counter_max FROM counter.tracked \gset
SELECT counter.track('another', 'public.likes', 'post_id', 'at', mode => 'application') AS counter_new \gset
SELECT pg_temp.expect(:counter_new = :counter_max + 1, 'the next counter gets the next id');
SELECT max(rollup_id) AS rollup_max FROM counter.rollups \gset
CREATE TABLE public.more_events (link_id int NOT NULL, occurred_at timestamptz NOT NULL);
SELECT counter.rollup_create('more_hourly', 'public.more_events', 'occurred_at', '{link_id}');
SELECT pg_temp.expect((SELECT rollup_id FROM counter.rollups WHERE name = 'more_hourly') = :rollup_max + 1,
                      'the next rollup gets the next id');
SELECT max(job_id) AS job_max FROM counter.jobs \gset
CREATE PROCEDURE public.job_noop(target text, INOUT rows_affected bigint DEFAULT NULL) LANGUAGE plpgsql
AS $$ BEGIN rows_affected := 0; END $$;
INSERT INTO counter_internal.job_kinds (kind, procedure) VALUES ('noop', 'public.job_noop(text, bigint)');
SELECT counter.job_register('noop', 'x', '1 hour', owner => current_user::regrole) AS job_new \gset
SELECT pg_temp.expect(:job_new > :job_max, 'the next job gets a new id');
SELECT max(run_id) AS run_max FROM counter.job_runs \gset
CALL counter.run_jobs();
SELECT pg_temp.expect((SELECT min(run_id) FROM counter.job_runs WHERE run_id > :run_max) = :run_max + 1,
                      'job runs are numbered after the restored ones');
SELECT pg_temp.expect(NOT EXISTS (SELECT FROM counter.job_runs WHERE outcome = 'failed'), 'no job failed');
