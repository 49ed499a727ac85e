-- Drift that nothing wrote through the counter is found by the scheduled
-- job alone (no all_keys run by hand): rows inserted and deleted with the
-- triggers off (session_replication_role = replica, backdated), and a base
-- changed by hand. Dirty runs cannot see it; the verification cycle walks
-- every key in slices, each run checking about keys * reconcile_every /
-- verify_every of them, and rows newly past the watermark are checked in
-- the run that passes them. Outside a transaction: the job commits.
SET timezone = 'UTC';
SELECT plan(8);

CREATE TABLE ver (id serial PRIMARY KEY, k int NOT NULL, t timestamptz NOT NULL);
CREATE INDEX ON ver (t);
SELECT ok(counter.track('ver', 'ver', 'k', 't', bucket_width => '1 hour', batch_size => 10,
                        reconcile_every => '6 seconds', verify_every => '1 minute') > 0, 'registered');
INSERT INTO ver (k, t) SELECT g % 200, '2024-01-01'::timestamptz + (g % 50) * interval '1 hour'
FROM generate_series(1, 2000) g;
CALL counter.run_steps('reconcile', 'ver');          -- the first run is a full one
ANALYZE counter_internal.tracked_1_base;    -- (autovacuum does this; the slice size reads reltuples)

CREATE FUNCTION ver_mismatches() RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*) FROM (
        SELECT k, counter.value('ver', k) AS v, count(ver.id) AS n
        FROM generate_series(0, 199) k LEFT JOIN ver USING (k) GROUP BY k) s
    WHERE v <> n
$$;
SELECT is(ver_mismatches(), 0::bigint, 'exact after the first run');

-- Drift made where nothing is written through the counter.
SET session_replication_role = replica;
INSERT INTO ver (k, t) SELECT g % 37, '2023-06-01' FROM generate_series(1, 60) g;     -- backdated
DELETE FROM ver WHERE id IN (SELECT id FROM ver WHERE k BETWEEN 150 AND 170 ORDER BY id LIMIT 40);
RESET session_replication_role;
UPDATE counter_internal.tracked_1_base SET base = base + 3 WHERE key IN (190, 191);
SELECT cmp_ok(ver_mismatches(), '>=', 50::bigint, 'many keys drifted');

-- One dirty run alone does not see it (nothing is dirty)...
CREATE TEMP TABLE runs AS SELECT * FROM counter.tracked_history WHERE false;
DO $$
DECLARE
    n jsonb;
BEGIN
    FOR i IN 1..14 LOOP
        CALL counter.run_steps('reconcile', 'ver', '{}', n);
    END LOOP;
END $$;
INSERT INTO runs SELECT * FROM counter.tracked_history WHERE counter = 'ver' AND NOT all_keys;

-- ...but the cycle does, in bounded slices.
SELECT is(ver_mismatches(), 0::bigint, 'every key exact after one verification cycle of scheduled runs');
SELECT ok((SELECT last_verified IS NOT NULL FROM counter.tracked_status WHERE counter = 'ver'),
          'the cycle completed');
SELECT cmp_ok((SELECT max(keys_verified) FROM runs), '<=', 30::bigint,
              'no run verified more than its slice (20 keys) plus one batch');
SELECT is((SELECT sum(drift_positive) FROM runs), 46::numeric, 'the positive drift found: 40 uncounted deletes and the hand-made +3 +3');
SELECT is((SELECT -sum(drift_negative) FROM runs), 60::numeric,
          'the negative drift found: the 60 uncounted backdated rows');

SELECT * FROM finish();
DROP TABLE ver;
DROP FUNCTION ver_mismatches();
