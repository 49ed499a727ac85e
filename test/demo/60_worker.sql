-- Demo: Jobs run by themselves: the background worker runs due jobs, records every run, backs off a failing one.
-- The worker was off while the sections above ran; switch it on (a reload is enough).
ALTER SYSTEM SET counter_ext.enabled = on;
SELECT pg_reload_conf();

-- A job kind of the demo's own, added by the superuser to
-- counter_internal.job_kinds (the counters, rollups and partitioned tables of
-- the other sections registered built-in kinds): totals per link. Every job
-- runs in a background-worker session of its owner.
CREATE TABLE demo.job_clicks AS SELECT * FROM demo.click_stream(20000, date_trunc('hour', now()) - interval '1 hour', 1);
CREATE TABLE demo.link_totals (link_id bigint PRIMARY KEY, clicks bigint);
CREATE PROCEDURE demo.job_link_totals(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM target::regclass;  -- fails when the target is gone
    DELETE FROM demo.link_totals;
    COMMIT;                    -- a job may commit between its steps
    EXECUTE format('INSERT INTO demo.link_totals SELECT link_id, count(*) FROM %s GROUP BY link_id', target);
    GET DIAGNOSTICS rows_affected = ROW_COUNT;
END $$;

INSERT INTO counter_internal.job_kinds (kind, procedure) VALUES ('demo_link_totals', 'demo.job_link_totals(text, bigint)');
SELECT counter.job_register('demo_link_totals', 'demo.job_clicks', '2 seconds', owner => current_user::regrole) AS job_id \gset
SELECT counter.job_register('demo_link_totals', 'demo.gone', '1 second', owner => current_user::regrole) AS failing_job_id \gset

-- Call nothing: wait until the worker has run the job (at most ~15 s).
DO $$
BEGIN
    FOR i IN 1..150 LOOP
        EXIT WHEN (SELECT count(*) FROM counter.job_runs WHERE kind = 'demo_link_totals' AND outcome = 'succeeded') >= 2
              AND (SELECT count(*) FROM counter.job_runs WHERE kind = 'demo_link_totals' AND outcome = 'failed') >= 2;
        PERFORM pg_sleep(0.1);
    END LOOP;
END $$;

SELECT link_id, clicks FROM demo.link_totals ORDER BY clicks DESC LIMIT 3;

-- The history: who ran what, how it ended; the failing job backs off.
SELECT run_id, target, runner, run_as, outcome, rows_affected, sqlstate, message
FROM counter.job_runs WHERE kind = 'demo_link_totals' ORDER BY run_id LIMIT 6;
-- Every job of the database (the other sections registered theirs), with its last run.
SELECT job_id, kind, target, owner, run_every, failures, last_outcome, next_run > now() AS waiting
FROM counter.job_status ORDER BY job_id;

-- What counter_ext's processes do right now: the launcher, and a worker only
-- while some database has due jobs (idle databases hold no slot).
SELECT backend_type, usename, query FROM pg_stat_activity WHERE backend_type LIKE 'counter_ext%' ORDER BY backend_type;

-- Run one job now, change it, remove the broken one. pg_cron can run them all:
-- SELECT cron.schedule('counter_ext jobs', '* * * * *', 'CALL counter.run_jobs()');
CALL counter.run_job(:job_id);
SELECT job_id, run_every, timeout FROM counter.job_alter(:job_id, run_every => '1 hour', timeout => '30 seconds');
SELECT counter.job_unregister('demo_link_totals', 'demo.gone');
