-- Demo: Tracked counters: clicks per link kept by a trigger, repaired from the rows.
CREATE TABLE demo.tracked_clicks AS SELECT * FROM demo.click_stream(0, now(), 1);
ALTER TABLE demo.tracked_clicks ADD PRIMARY KEY (event_id);
CREATE INDEX ON demo.tracked_clicks (link_id, occurred_at);

-- Count clicks per link; the triggers keep it exact in every writer's transaction.
SELECT counter.track('clicks_per_link', 'demo.tracked_clicks', 'link_id', 'occurred_at') AS counter_id;
INSERT INTO demo.tracked_clicks SELECT * FROM demo.click_stream(20000, now() - interval '2 hours', 2);

-- One 20,000-row INSERT wrote one delta per (link, minute bucket), not 20,000 rows.
SELECT count(*) AS links_counted FROM counter.tracked_values WHERE counter = 'clicks_per_link';
SELECT key AS link_id, value AS clicks FROM counter.tracked_values
WHERE counter = 'clicks_per_link' ORDER BY value DESC, key LIMIT 5;

-- Someone loads a backfill with triggers off: the counter does not see it ...
SET session_replication_role = replica;
INSERT INTO demo.tracked_clicks SELECT event_id, 1, visitor_id, occurred_at
FROM demo.click_stream(250, now() - interval '3 hours', 1);
RESET session_replication_role;
SELECT counter.value('clicks_per_link', 1::bigint) AS cached,
       (SELECT count(*) FROM demo.tracked_clicks WHERE link_id = 1) AS truth;

-- ... until a full reconciliation, which repairs it and records the drift (negative: counts were missed).
SELECT keys_checked, keys_corrected, drift_positive, drift_negative, max_abs_drift
FROM counter.reconcile('clicks_per_link', all_keys => true);
SELECT counter.value('clicks_per_link', 1::bigint) AS repaired,
       (SELECT count(*) FROM demo.tracked_clicks WHERE link_id = 1) AS truth;
SELECT counter, runs, keys_corrected, drift_positive, drift_negative FROM counter.tracked_drift;
-- Every link at once, in one call, equals its rows; the run is one row of the one run record.
SELECT count(*) AS links, count(*) FILTER (WHERE v.value <> t.n) AS wrong
FROM (SELECT link_id, count(*) AS n FROM demo.tracked_clicks GROUP BY link_id) t
JOIN counter.values_of('clicks_per_link', (SELECT array_agg(DISTINCT link_id) FROM demo.tracked_clicks)) v
  ON v.key = t.link_id;
SELECT runner, kind, target, outcome, rows_affected FROM counter.job_runs ORDER BY run_id DESC LIMIT 1;

-- The background worker (or pg_cron) runs this job every minute.
SELECT kind, target, run_every FROM counter.jobs WHERE kind = 'reconcile';
SELECT counter.untrack('clicks_per_link');

-- A hot link, buffered: the triggers' adds wait in shared memory and reach the table at the next flush.
SELECT counter.track('clicks_buffered', 'demo.tracked_clicks', 'link_id', 'occurred_at', buffered => true) AS counter_id;
INSERT INTO demo.tracked_clicks SELECT pg_catalog.gen_random_uuid(), 1, visitor_id, now() FROM demo.click_stream(500, now(), 1);
SELECT counter.value('clicks_buffered', 1::bigint) AS since_registered;  -- the table plus what is buffered: 500
SELECT counter, preloaded, entries, pending FROM counter.buffered;
SELECT owner, entries, cap, pressed_from FROM counter.buffer_shares();  -- the owner's share: its flush runs early past half of it
SELECT counter.flush('clicks_buffered') AS entries_written;                -- what the flush job does every second
SELECT counter, pending, flushes FROM counter.buffered;
-- Its first (full) reconciliation counts the rows from before it was registered: a
-- backfill, not drift, and no alert (here up to a watermark past every row, so
-- that the numbers below match now).
SELECT keys_checked, drift_negative FROM counter.reconcile('clicks_buffered', now() + interval '1 minute');
SELECT backfill, drift_negative FROM counter.tracked_history WHERE counter = 'clicks_buffered';
SELECT counter.value('clicks_buffered', 1::bigint) AS clicks,
       (SELECT count(*) FROM demo.tracked_clicks WHERE link_id = 1) AS truth;
SELECT counter.untrack('clicks_buffered');

-- The table changes hands (the analytics team takes it over): its counter, the counter's
-- state and its job follow the table's owner; the old owner keeps no right over them.
CREATE ROLE demo_analytics;
SELECT counter.track('clicks_owned', 'demo.tracked_clicks', 'link_id', 'occurred_at') AS counter_id;
ALTER TABLE demo.tracked_clicks OWNER TO demo_analytics;
SELECT c.name, c.owner, j.owner AS job_runs_as FROM counter.tracked c JOIN counter.jobs j ON j.target = c.name AND j.kind = 'reconcile';
SELECT counter.untrack('clicks_owned');
ALTER TABLE demo.tracked_clicks OWNER TO CURRENT_USER;
DROP ROLE demo_analytics;
