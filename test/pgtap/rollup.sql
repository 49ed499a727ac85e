-- Hourly rollups: properties on generated click streams. Runs without a
-- wrapping transaction: the refresh procedure commits, and the statistics
-- behind pg_stat_user_tables are flushed at transaction end.
\set ON_ERROR_STOP 1
SET timezone = 'UTC';
SELECT plan(39);

CREATE TABLE ev (
    event_id    bigint NOT NULL,
    link_id     bigint NOT NULL,
    kind        text NOT NULL,
    amount      integer,
    occurred_at timestamptz NOT NULL,
    UNIQUE (event_id, occurred_at)
) PARTITION BY RANGE (occurred_at);
SELECT format('CREATE TABLE ev_%s PARTITION OF ev FOR VALUES FROM (%L) TO (%L)',
              to_char(h, 'YYYYMMDDHH24'), h, h + interval '1 hour')
FROM generate_series(timestamptz '2026-10-05 12:00+00', timestamptz '2026-10-08 11:00+00', interval '1 hour') h
\gexec
CREATE TABLE ev_default PARTITION OF ev DEFAULT;

CREATE FUNCTION pg_temp.batch(first bigint, n integer) RETURNS SETOF ev LANGUAGE sql AS $$
    SELECT e, 1 + (e * 7919) % 40, CASE WHEN e % 7 = 0 THEN 'bot' ELSE 'human' END,
           CASE WHEN e % 5 = 0 THEN NULL ELSE (e % 13)::integer END,
           timestamptz '2026-10-05 12:00+00' + make_interval(secs => (e * 104729) % (72 * 3600))
    FROM generate_series(first, first + n - 1) e
$$;
-- Rows of a rollup table that differ from a from-scratch GROUP BY (both ways).
CREATE FUNCTION pg_temp.diff(rollup regclass, filter text DEFAULT 'true', since timestamptz DEFAULT '-infinity')
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
    EXECUTE format($q$
        WITH truth AS (SELECT link_id, counter.rollup_hour(occurred_at) AS hour, count(*) AS count,
                              coalesce(sum(amount), 0) AS sum_amount
                       FROM ev WHERE %2$s AND occurred_at >= %3$L GROUP BY 1, 2),
             r AS (SELECT link_id, hour, count, sum_amount FROM %1$s WHERE hour >= %3$L)
        SELECT count(*) FROM ((SELECT * FROM truth EXCEPT SELECT * FROM r)
                              UNION ALL (SELECT * FROM r EXCEPT SELECT * FROM truth)) d$q$,
        rollup, filter, since) INTO n;
    RETURN n;
END $$;
-- n_tup_ins, n_tup_upd, n_tup_del, n_tup_hot_upd of a table, as flushed so far.
CREATE FUNCTION pg_temp.tup(t regclass) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE r bigint[];
BEGIN
    PERFORM pg_stat_clear_snapshot();
    SELECT ARRAY[n_tup_ins, n_tup_upd, n_tup_del, n_tup_hot_upd] INTO r FROM pg_stat_user_tables WHERE relid = t;
    RETURN r;
END $$;
CREATE TABLE marks (name text PRIMARY KEY, v bigint[]);

SELECT lives_ok($$SELECT counter.rollup_create('r_trig', 'ev', 'occurred_at', '{link_id}', sums => '{amount}')$$,
                'a trigger-mode rollup with a sum');
SELECT lives_ok($$SELECT counter.rollup_create('r_def', 'ev', 'occurred_at', '{link_id}', sums => '{amount}',
                                               mode => 'deferred')$$, 'a deferred-mode rollup');
SELECT has_pk('public', 'r_trig', 'the rollup table has a primary key');
SELECT col_is_pk('public', 'r_trig', ARRAY['link_id', 'hour'], 'primary key (group columns, hour)');
SELECT col_type_is('public', 'r_trig', 'hour', 'timestamp with time zone', 'hour is timestamptz');

-- Batches, single rows and COPY-like multi-statement ingest.
INSERT INTO ev SELECT * FROM pg_temp.batch(1, 5000) ON CONFLICT DO NOTHING;
INSERT INTO ev SELECT * FROM pg_temp.batch(5001, 1) ON CONFLICT DO NOTHING;
INSERT INTO ev SELECT * FROM pg_temp.batch(5002, 2999) ON CONFLICT DO NOTHING;
SELECT is(pg_temp.diff('r_trig'), 0::bigint, 'trigger mode equals a from-scratch GROUP BY without any refresh');

-- Re-delivery: the same batches again, and overlapping ones.
INSERT INTO ev SELECT * FROM pg_temp.batch(1, 5000) ON CONFLICT DO NOTHING;
INSERT INTO ev SELECT * FROM pg_temp.batch(4001, 2000) ON CONFLICT DO NOTHING;
CREATE TABLE snap AS SELECT * FROM r_trig;
INSERT INTO ev SELECT * FROM pg_temp.batch(1, 8000) ON CONFLICT DO NOTHING;
SELECT is((SELECT count(*) FROM ((TABLE snap EXCEPT TABLE r_trig) UNION ALL (TABLE r_trig EXCEPT TABLE snap)) d),
          0::bigint, 're-delivered batches leave every count unchanged');
SELECT is(pg_temp.diff('r_trig'), 0::bigint, 'and the rollup still equals the GROUP BY');
SELECT is((SELECT sum(count) FROM r_trig), 8000::numeric, 'every event counted once');

CALL counter.run_steps('rollup_refresh', 'r_def');
SELECT is(pg_temp.diff('r_def'), 0::bigint, 'deferred mode equals the GROUP BY after the job');
SELECT is((SELECT dirty_hours FROM counter.rollup_state WHERE name = 'r_def'), 0::bigint, 'no dirty hours left');

-- Unchanged rows produce no writes and no dead tuples.
CALL counter.run_steps('rollup_refresh', 'r_trig');
SELECT pg_stat_force_next_flush();
INSERT INTO marks VALUES ('before', pg_temp.tup('r_trig'));
CALL counter.rollup_refresh('r_trig', '2026-10-05 00:00+00', '2026-10-09 00:00+00');
SELECT pg_stat_force_next_flush();
INSERT INTO marks VALUES ('after', pg_temp.tup('r_trig'));
SELECT is((SELECT last_rows FROM counter.rollup_status s JOIN counter.rollups r USING (rollup_id) WHERE r.name = 'r_trig'),
          0::bigint, 'a recompute of unchanged hours reports 0 rows written');
SELECT is((SELECT v FROM marks WHERE name = 'after'), (SELECT v FROM marks WHERE name = 'before'),
          'a recompute of unchanged hours inserts, updates and deletes nothing (pg_stat_user_tables)');

-- One changed row, one vanished row: exactly one update and one delete.
DELETE FROM ev WHERE event_id = 8000;
INSERT INTO ev VALUES (9001, 1000, 'human', 1, '2026-10-06 03:10+00');
DELETE FROM r_trig WHERE link_id = 1000;
INSERT INTO r_trig VALUES (999, '2026-10-06 03:00+00', 5, 0);
SELECT pg_stat_force_next_flush();
UPDATE marks SET v = pg_temp.tup('r_trig') WHERE name = 'before';
CALL counter.rollup_refresh('r_trig', '2026-10-05 00:00+00', '2026-10-09 00:00+00');
SELECT pg_stat_force_next_flush();
UPDATE marks SET v = pg_temp.tup('r_trig') WHERE name = 'after';
SELECT is((SELECT a.v[1] - b.v[1] FROM marks a, marks b WHERE a.name = 'after' AND b.name = 'before'), 1::bigint,
          'one missing rollup row inserted');
SELECT is((SELECT a.v[2] - b.v[2] FROM marks a, marks b WHERE a.name = 'after' AND b.name = 'before'), 1::bigint,
          'one changed rollup row updated');
SELECT is((SELECT a.v[3] - b.v[3] FROM marks a, marks b WHERE a.name = 'after' AND b.name = 'before'), 1::bigint,
          'one rollup row without events deleted');
SELECT is(pg_temp.diff('r_trig'), 0::bigint, 'the recompute repaired the rollup');

-- Rule change: bots excluded. A full recompute equals the GROUP BY under the
-- new rule for retained hours; hours outside the retention keep their numbers.
CREATE TABLE before_rule AS SELECT * FROM r_trig WHERE hour < '2026-10-05 12:00+00';
INSERT INTO ev_default VALUES (9100, 1, 'bot', 1, '2026-10-05 11:30+00');
INSERT INTO r_trig VALUES (1, '2026-10-05 11:00+00', 42, 42);
SELECT counter.rollup_set_filter('r_trig', 'kind <> ''bot''');
CALL counter.rollup_refresh('r_trig', '2026-10-05 00:00+00', '2026-10-09 00:00+00');
SELECT is(pg_temp.diff('r_trig', 'kind <> ''bot''', '2026-10-05 12:00+00'), 0::bigint,
          'after a rule change a full recompute equals the GROUP BY under the new rule');
SELECT is((SELECT count FROM r_trig WHERE link_id = 1 AND hour = '2026-10-05 11:00+00'), 42::bigint,
          'an hour outside the retention is left as it was');
INSERT INTO ev SELECT * FROM pg_temp.batch(20001, 3000) ON CONFLICT DO NOTHING;
SELECT is(pg_temp.diff('r_trig', 'kind <> ''bot''', '2026-10-05 12:00+00'), 0::bigint,
          'new events follow the new rule in the trigger');

-- Totals: a day in a zone is assembled from its hours, DST included.
CALL counter.run_steps('rollup_refresh', 'r_def');
SELECT is((SELECT array_agg(t.count ORDER BY t.period_start) FROM counter.rollup_totals(
               'r_def', '2026-10-04 16:00+00', '2026-10-08 16:00+00', 'Asia/Taipei', 'total') t WHERE t.key->>'link_id' = '3'),
          (SELECT ARRAY[count(*)] FROM ev WHERE link_id = 3 AND occurred_at >= '2026-10-04 16:00+00'
                                              AND occurred_at < '2026-10-08 16:00+00'),
          'a total over a range equals the events in it');
SELECT is((SELECT array_agg(t.count ORDER BY t.period_start) FROM counter.rollup_totals(
               'r_def', '2026-10-04 16:00+00', '2026-10-08 16:00+00', 'Asia/Taipei') t WHERE t.key->>'link_id' = '3'),
          (SELECT array_agg(n ORDER BY d) FROM (SELECT (occurred_at AT TIME ZONE 'Asia/Taipei')::date AS d, count(*) AS n
                                                FROM ev WHERE link_id = 3 GROUP BY 1) s),
          'days in Asia/Taipei equal the events grouped by their Taipei date');
SELECT is((SELECT array_agg(t.count ORDER BY t.period_start) FROM counter.rollup_totals(
               'r_def', '2026-10-05 04:00+00', '2026-10-08 04:00+00', 'America/New_York') t WHERE t.key->>'link_id' = '5'),
          (SELECT array_agg(n ORDER BY d) FROM (SELECT (occurred_at AT TIME ZONE 'America/New_York')::date AS d, count(*) AS n
                                                FROM ev WHERE link_id = 5 AND occurred_at >= '2026-10-05 04:00+00'
                                                  AND occurred_at < '2026-10-08 04:00+00' GROUP BY 1) s),
          'days in America/New_York equal the events grouped by their New York date');
SELECT is((SELECT sum((t.sums->>'amount')::numeric) FROM counter.rollup_totals(
               'r_def', '2026-10-05 12:00+00', '2026-10-09 00:00+00', 'UTC', 'total') t),
          (SELECT sum(amount)::numeric FROM ev WHERE occurred_at >= '2026-10-05 12:00+00'), 'sums add up');

-- Distinct counts: merged across hours, never summed, the same in both
-- modes, and a recompute of unchanged sketches writes nothing.
CREATE FUNCTION pg_temp.distinct_tests() RETURNS SETOF text LANGUAGE plpgsql AS $f$
DECLARE
    exact bigint;
    merged numeric;
    summed numeric;
    deferred_merged numeric;
BEGIN
    PERFORM counter.rollup_refresh_dirty('dv_def');
    SELECT count(DISTINCT visitor_id) INTO exact FROM dv;
    EXECUTE $q$SELECT (t.distinct_counts->>'visitor_id')::numeric FROM counter.rollup_totals('dv_trig',
               '2026-10-06 00:00+00', '2026-10-07 00:00+00') t$q$ INTO merged;
    EXECUTE $q$SELECT (t.distinct_counts->>'visitor_id')::numeric FROM counter.rollup_totals('dv_def',
               '2026-10-06 00:00+00', '2026-10-07 00:00+00') t$q$ INTO deferred_merged;
    EXECUTE $q$SELECT sum((t.distinct_counts->>'visitor_id')::numeric) FROM counter.rollup_totals('dv_trig',
               '2026-10-06 00:00+00', '2026-10-07 00:00+00', 'UTC', 'hour') t$q$ INTO summed;
    RETURN NEXT ok(abs(merged - exact) <= exact * 0.03,
                   format('a day''s distinct count merges the hours'' sketches (%s, exact %s)', merged, exact));
    RETURN NEXT ok(summed > merged * 2, format('and is not the sum of the hours'' counts (%s)', summed));
    RETURN NEXT is(deferred_merged, merged, 'deferred mode gives the same distinct count');
    RETURN NEXT is(counter.rollup_recompute('dv_trig', '2026-10-06 00:00+00', '2026-10-07 00:00+00'), 0::bigint,
                   'the sketches the trigger merged equal the recomputed ones byte for byte');
    DELETE FROM dv WHERE visitor_id < 1000;
    PERFORM counter.rollup_refresh_dirty('dv_trig');
    EXECUTE $q$SELECT (t.distinct_counts->>'visitor_id')::numeric FROM counter.rollup_totals('dv_trig',
               '2026-10-06 00:00+00', '2026-10-07 00:00+00') t$q$ INTO merged;
    RETURN NEXT ok(abs(merged - 1000) <= 30, format('deleted visitors leave the sketches at the next refresh (%s)', merged));
    PERFORM counter.rollup_drop('dv_trig');
    PERFORM counter.rollup_drop('dv_def');
    DROP TABLE dv;
END $f$;
-- The rows, committed first: trigger mode writes a transaction's rows to the
-- rollup table at its commit.
CREATE TABLE dv (event_id bigint NOT NULL, link_id bigint NOT NULL, visitor_id bigint NOT NULL,
                 occurred_at timestamptz NOT NULL, UNIQUE (event_id, occurred_at));
SELECT counter.rollup_create('dv_trig', 'dv', 'occurred_at', '{link_id}', distinct_on => '{visitor_id}');
SELECT counter.rollup_create('dv_def', 'dv', 'occurred_at', '{link_id}', distinct_on => '{visitor_id}',
                             mode => 'deferred');
-- 6 hours, the same 2,000 visitors coming back every hour.
INSERT INTO dv SELECT e, 1, e % 2000, timestamptz '2026-10-06 00:00+00' + make_interval(secs => (e * 7) % 21600)
FROM generate_series(1, 30000) e ORDER BY e;
SELECT * FROM pg_temp.distinct_tests();

-- An explicit retention: hours older than now() - retention are never
-- recomputed, whatever the partitions say. One now() for the test (t0): its
-- hours do not move if the clock passes an hour or hh:10 meanwhile.
SELECT now() AS t0 \gset
CREATE TABLE recent_ev (event_id bigint NOT NULL, link_id bigint NOT NULL, occurred_at timestamptz NOT NULL);
INSERT INTO recent_ev VALUES (1, 1, (:'t0'::timestamptz) - interval '5 hours'), (2, 1, (:'t0'::timestamptz) - interval '10 minutes');
SELECT counter.rollup_create('r_recent', 'recent_ev', 'occurred_at', '{link_id}', mode => 'deferred',
                             retention => '3 hours');
CALL counter.run_steps('rollup_refresh', 'r_recent');
SELECT is((SELECT array_agg(hour ORDER BY hour) FROM r_recent), ARRAY[counter.rollup_hour((:'t0'::timestamptz) - interval '10 minutes')],
          'the job fills the retained hour and leaves the old one');
INSERT INTO r_recent VALUES (1, counter.rollup_hour((:'t0'::timestamptz) - interval '5 hours'), 42);
CALL counter.rollup_refresh('r_recent', counter.rollup_hour((:'t0'::timestamptz) - interval '1 day'), counter.rollup_hour(:'t0'::timestamptz) + interval '1 hour');
SELECT is((SELECT count FROM r_recent WHERE hour = counter.rollup_hour((:'t0'::timestamptz) - interval '5 hours')), 42::bigint,
          'a full recompute leaves an hour outside the retention as it was');
SELECT is((SELECT count FROM r_recent WHERE hour = counter.rollup_hour((:'t0'::timestamptz) - interval '10 minutes')), 1::bigint,
          'and recomputes the retained hours');
SELECT counter.rollup_drop('r_recent');
DROP TABLE recent_ev;

-- Updates of rollup rows touch no index (HOT): the trigger changes counts
-- and sums only, and the table leaves room on its pages for the new versions.
CREATE TABLE hot_ev (event_id bigint NOT NULL, link_id bigint NOT NULL, occurred_at timestamptz NOT NULL);
SELECT counter.rollup_create('r_hot', 'hot_ev', 'occurred_at', '{link_id}');
SELECT is((SELECT reloptions FROM pg_class WHERE oid = 'r_hot'::regclass), '{fillfactor=60}'::text[],
          'the rollup table is created with fillfactor 60');
DO $$
BEGIN
    FOR i IN 1..10 LOOP
        INSERT INTO hot_ev SELECT i * 100 + l, l, '2026-10-06 09:00+00' FROM generate_series(1, 10) l;
        COMMIT;
    END LOOP;
END $$;
SELECT pg_stat_force_next_flush();
SELECT is(pg_temp.tup('r_hot'), ARRAY[10, 90, 0, 90]::bigint[],
          'ten transactions on ten keys: ten rows inserted, then updated in place (HOT)');
-- Trigger mode writes a transaction's rows once, at its commit: ten more
-- statements in one transaction update each of the ten rows once.
DO $$
BEGIN
    FOR i IN 11..20 LOOP
        INSERT INTO hot_ev SELECT i * 100 + l, l, '2026-10-06 09:00+00' FROM generate_series(1, 10) l;
    END LOOP;
END $$;
SELECT pg_stat_force_next_flush();
SELECT is(pg_temp.tup('r_hot'), ARRAY[10, 100, 0, 100]::bigint[],
          'ten statements in one transaction: each row updated once, at the commit');
SELECT is((SELECT array_agg(count) FROM r_hot), array_fill(20::bigint, ARRAY[10]), 'and every row counts all 20 events');
SELECT counter.rollup_drop('r_hot');
DROP TABLE hot_ev;

-- A refresh runs the rollup's SQL as the rollup's owner, also when a
-- superuser (the background worker) runs the job: the filter below only
-- lets events through for the owner, and the role is back afterwards.
CREATE ROLE counter_rollup_test_owner;
CREATE TABLE owned_ev (event_id bigint NOT NULL, link_id bigint NOT NULL, occurred_at timestamptz NOT NULL);
ALTER TABLE owned_ev OWNER TO counter_rollup_test_owner;
GRANT CREATE ON SCHEMA public TO counter_rollup_test_owner;
SET ROLE counter_rollup_test_owner;
SELECT counter.rollup_create('r_owned', 'owned_ev', 'occurred_at', '{link_id}', mode => 'deferred',
                             filter => 'current_user = ''counter_rollup_test_owner''');
RESET ROLE;
INSERT INTO owned_ev VALUES (1, 1, '2026-10-06 09:00+00'), (2, 1, '2026-10-06 09:30+00');
CALL counter.run_steps('rollup_refresh', 'r_owned');
SELECT is((SELECT count FROM r_owned), 2::bigint, 'the job ran the filter as the rollup owner');
SELECT is(current_user::text, session_user::text, 'and the caller''s role is back after the job');
SELECT is((SELECT tableowner::text FROM pg_tables WHERE tablename = 'r_owned'), 'counter_rollup_test_owner',
          'the rollup table belongs to the role that created it');
SELECT counter.rollup_drop('r_owned');
DROP TABLE owned_ev;
REVOKE CREATE ON SCHEMA public FROM counter_rollup_test_owner;
DROP OWNED BY counter_rollup_test_owner;  -- EXECUTE on filter_match, granted by rollup_create
DROP ROLE counter_rollup_test_owner;

SELECT * FROM finish();
