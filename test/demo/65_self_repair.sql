-- Demo: Drift repaired by itself: rows loaded with the triggers off are found by the worker's job, with no call.
CREATE TABLE demo.repair_clicks AS SELECT * FROM demo.click_stream(5000, now() - interval '2 hours', 1);
CREATE INDEX ON demo.repair_clicks (link_id, occurred_at);
CREATE INDEX ON demo.repair_clicks (occurred_at);
SELECT counter.track('repair_clicks', 'demo.repair_clicks', 'link_id', 'occurred_at',
                     reconcile_every => '1 second', verify_every => '1 minute') > 0 AS registered;
DO $$
BEGIN   -- the worker's first run of the job is a full one
    FOR i IN 1..300 LOOP
        EXIT WHEN EXISTS (SELECT FROM counter.tracked_history WHERE counter = 'repair_clicks' AND outcome = 'ok');
        PERFORM pg_sleep(0.1);
    END LOOP;
END $$;

-- A backfill of last week's clicks with the triggers off: the counter does not see it.
SET session_replication_role = replica;
INSERT INTO demo.repair_clicks SELECT event_id, 1, visitor_id, occurred_at
FROM demo.click_stream(300, now() - interval '7 days', 1);
RESET session_replication_role;
SELECT counter.value('repair_clicks', 1::bigint) AS cached,
       (SELECT count(*) FROM demo.repair_clicks WHERE link_id = 1) AS truth;

-- Call nothing: the job's slice of the verification cycle finds it (at most ~30 s here).
DO $$
BEGIN
    FOR i IN 1..300 LOOP
        EXIT WHEN counter.value('repair_clicks', 1::bigint) = (SELECT count(*) FROM demo.repair_clicks WHERE link_id = 1);
        PERFORM pg_sleep(0.1);
    END LOOP;
END $$;
SELECT counter.value('repair_clicks', 1::bigint) AS repaired,
       (SELECT count(*) FROM demo.repair_clicks WHERE link_id = 1) AS truth;
SELECT run_id, all_keys, keys_checked, keys_verified, drift_negative
FROM counter.tracked_history WHERE counter = 'repair_clicks' AND drift_negative < 0;
SELECT counter, verify_every, last_verified IS NOT NULL AS cycle_done FROM counter.tracked_status
WHERE counter = 'repair_clicks';
SELECT counter.untrack('repair_clicks');
