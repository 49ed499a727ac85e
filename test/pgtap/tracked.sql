-- Properties of tracked counters over a random workload (fixed seed): after
-- every step of inserts, deletes, key moves, filter flips and event-time
-- changes, with reconciliations at random watermarks (dirty or all keys,
-- earlier or later than before) in between, every key equals the truth, and
-- no run ever finds drift (nothing here bypasses the counter).
BEGIN;
SELECT plan(6);
SELECT setseed(0.17);
SET LOCAL timezone = 'UTC';

CREATE TABLE prop (id serial PRIMARY KEY, k int NOT NULL, t timestamptz NOT NULL, flag boolean NOT NULL);
CREATE INDEX ON prop (k, t);
SELECT ok(counter.track('prop', 'prop', 'k', 't', filter => 'flag', bucket_width => '1 hour', shards => 3,
                        batch_size => 3) > 0, 'registered');

CREATE FUNCTION prop_mismatches() RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*) FROM (
        SELECT k, counter.value('prop', k) AS v, count(*) FILTER (WHERE flag) AS n
        FROM generate_series(1, 8) k LEFT JOIN prop USING (k) GROUP BY k) s
    WHERE v <> n
$$;

CREATE TABLE prop_log (step int, mismatches bigint);
DO $$
DECLARE
    i int;
BEGIN
    FOR i IN 1..400 LOOP
        CASE floor(random() * 7)::int
        WHEN 0, 1 THEN
            INSERT INTO prop (k, t, flag)
            SELECT 1 + floor(random() * 8)::int, '2024-01-01'::timestamptz + random() * interval '3 days',
                   random() < 0.8
            FROM generate_series(1, 1 + floor(random() * 6)::int);
        WHEN 2 THEN
            DELETE FROM prop WHERE id IN (SELECT id FROM prop ORDER BY random() LIMIT 3);
        WHEN 3 THEN
            UPDATE prop SET k = 1 + floor(random() * 8)::int WHERE id IN (SELECT id FROM prop ORDER BY random() LIMIT 4);
        WHEN 4 THEN
            UPDATE prop SET flag = NOT flag, t = t + (random() - 0.5) * interval '1 day'
            WHERE id IN (SELECT id FROM prop ORDER BY random() LIMIT 4);
        ELSE
            PERFORM counter.reconcile('prop', '2024-01-01'::timestamptz + random() * interval '4 days',
                                      random() < 0.3);
        END CASE;
        INSERT INTO prop_log VALUES (i, prop_mismatches());
    END LOOP;
END $$;

SELECT is((SELECT count(*) FROM prop_log WHERE mismatches <> 0), 0::bigint,
          'after every one of 400 random steps, every key equals the truth');
SELECT cmp_ok((SELECT count(*) FROM counter.tracked_history WHERE counter = 'prop'), '>=', 50::bigint,
              'the workload reconciled often');
SELECT is((SELECT sum(drift_positive - drift_negative) FROM counter.tracked_history WHERE counter = 'prop'),
          0::numeric, 'no run found drift');
SELECT is((SELECT count(*) FROM (SELECT watermark, lag(watermark) OVER (ORDER BY run_id) AS prev
                                 FROM counter.tracked_history WHERE counter = 'prop') s
           WHERE watermark < prev), 0::bigint, 'watermarks never went back');
-- A full reconciliation at the end changes nothing.
SELECT is((SELECT keys_corrected FROM counter.reconcile('prop', '2024-01-06', all_keys => true)), 0::bigint,
          'a final full run corrects nothing');

SELECT * FROM finish();
ROLLBACK;
