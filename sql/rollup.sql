-- Hourly rollups: the SQL surface, bad input included.
CREATE EXTENSION IF NOT EXISTS counter_ext;
SET timezone = 'UTC';
SET datestyle = 'ISO, YMD';
\set ON_ERROR_STOP 0
\set SHOW_CONTEXT never

-- An hourly-partitioned event table with client-made ids (idempotent ingest).
CREATE TABLE clicks (
    event_id    uuid NOT NULL,
    link_id     bigint NOT NULL,
    visitor_id  bigint NOT NULL,
    kind        text NOT NULL DEFAULT 'human',
    amount      integer,
    local_time  timestamp,
    note        text,
    occurred_at timestamptz NOT NULL,
    UNIQUE (event_id, occurred_at)
) PARTITION BY RANGE (occurred_at);
CREATE TABLE clicks_h09 PARTITION OF clicks FOR VALUES FROM ('2026-10-06 09:00+00') TO ('2026-10-06 10:00+00');
CREATE TABLE clicks_h10 PARTITION OF clicks FOR VALUES FROM ('2026-10-06 10:00+00') TO ('2026-10-06 11:00+00');
CREATE TABLE clicks_h11 PARTITION OF clicks FOR VALUES FROM ('2026-10-06 11:00+00') TO ('2026-10-06 12:00+00');
CREATE TABLE clicks_default PARTITION OF clicks DEFAULT;
CREATE TABLE other (id bigint NOT NULL, count bigint NOT NULL, at timestamptz NOT NULL);
CREATE VIEW clicks_view AS SELECT * FROM clicks;

-- A straggler older than the oldest partition (hours before it are outside
-- the source's retention: older partitions may have been dropped).
INSERT INTO clicks VALUES ('00000000-0000-0000-0000-000000000008', 7, 1, 'human', 1, NULL, NULL, '2026-10-06 08:30+00');

-- Bad input: clear errors, nothing half-created.
SELECT counter.rollup_create('r', 'clicks', 'occurred_at', '{no_such_column}');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('r', 'clicks', 'no_such_column', '{link_id}');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('r', 'clicks', 'local_time', '{link_id}');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('r', 'clicks', 'event_id', '{link_id}');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('r', 'clicks', 'occurred_at', '{occurred_at}');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('r', 'clicks', 'occurred_at', '{link_id, link_id}');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('r', 'other', 'at', '{count}');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('r', 'clicks', 'occurred_at', '{note}');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('r', 'clicks', 'occurred_at', '{link_id}', mode => 'eventually');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('r', 'clicks', 'occurred_at', '{link_id}', sums => '{note}');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('r', 'clicks', 'occurred_at', '{link_id}', sums => '{nothing}');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('r', 'clicks', 'occurred_at', '{link_id}', distinct_on => '{visitor}');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('r', 'clicks', 'occurred_at', '{link_id}', distinct_on => '{visitor_id, visitor_id}');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('r', 'clicks_view', 'occurred_at', '{link_id}');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create(NULL, 'clicks', 'occurred_at', '{link_id}');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('', 'clicks', 'occurred_at', '{link_id}');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('r', 'clicks', 'occurred_at', '{link_id}', filter => 'no_such_column = 1');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('r', 'clicks', 'occurred_at', '{link_id}', filter => 'kind = ');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('r', 'clicks', 'occurred_at', '{link_id}', filter => 'true; DROP TABLE other');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('r', 'clicks', 'occurred_at', '{link_id}', refresh_every => '0 s');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('other', 'clicks', 'occurred_at', '{link_id}');
\echo :LAST_ERROR_SQLSTATE
-- A sum column whose name collides with a group column.
ALTER TABLE other ADD COLUMN sum_id bigint NOT NULL DEFAULT 0;
SELECT counter.rollup_create('r', 'other', 'at', '{sum_id}', sums => '{id}');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS rollups, to_regclass('r') AS no_table,
       (SELECT count(*) FROM pg_trigger WHERE tgrelid = 'clicks'::regclass) AS triggers,
       (SELECT count(*) FROM counter.jobs) AS jobs, (SELECT count(*) FROM counter.rollup_dirty) AS dirty
FROM counter.rollups;

-- A trigger-mode rollup with a sum; the straggler's hour is marked dirty.
SELECT counter.rollup_create('clicks_hourly', 'clicks', 'occurred_at', '{link_id}', sums => '{amount}');
\d clicks_hourly
SELECT counter.rollup_create('clicks_hourly', 'clicks', 'occurred_at', '{link_id}');
\echo :LAST_ERROR_SQLSTATE
SELECT kind, target, run_every FROM counter.jobs;
SELECT name, mode, source, rollup_table, newest_event_hour, dirty_hours, last_outcome FROM counter.rollup_state;

-- A batch, then the same batch re-delivered: counts unchanged.
INSERT INTO clicks (event_id, link_id, visitor_id, amount, occurred_at) VALUES
    ('00000000-0000-0000-0000-000000000001', 1, 10, 5, '2026-10-06 09:10+00'),
    ('00000000-0000-0000-0000-000000000002', 1, 11, NULL, '2026-10-06 09:20+00'),
    ('00000000-0000-0000-0000-000000000003', 2, 10, 7, '2026-10-06 10:30+00'),
    ('00000000-0000-0000-0000-000000000004', 3, 12, 1, '2026-10-06 13:30+00')
ON CONFLICT (event_id, occurred_at) DO NOTHING;
SELECT * FROM clicks_hourly ORDER BY link_id, hour;
INSERT INTO clicks (event_id, link_id, visitor_id, amount, occurred_at) VALUES
    ('00000000-0000-0000-0000-000000000001', 1, 10, 5, '2026-10-06 09:10+00'),
    ('00000000-0000-0000-0000-000000000002', 1, 11, NULL, '2026-10-06 09:20+00'),
    ('00000000-0000-0000-0000-000000000003', 2, 10, 7, '2026-10-06 10:30+00'),
    ('00000000-0000-0000-0000-000000000004', 3, 12, 1, '2026-10-06 13:30+00')
ON CONFLICT (event_id, occurred_at) DO NOTHING;
SELECT * FROM clicks_hourly ORDER BY link_id, hour;
-- A partition created after the rollup is reached too (the triggers sit on the parent).
CREATE TABLE clicks_h14 PARTITION OF clicks FOR VALUES FROM ('2026-10-06 14:00+00') TO ('2026-10-06 15:00+00');
INSERT INTO clicks (event_id, link_id, visitor_id, amount, occurred_at) VALUES
    ('00000000-0000-0000-0000-000000000031', 3, 12, 1, '2026-10-06 14:40+00');
SELECT tableoid::regclass, count(*) FROM clicks WHERE link_id = 3 GROUP BY 1 ORDER BY tableoid::regclass::text;
SELECT * FROM clicks_hourly WHERE link_id = 3;
-- COPY adds its rows too.
COPY clicks (event_id, link_id, visitor_id, kind, amount, occurred_at) FROM stdin;
00000000-0000-0000-0000-000000000005	1	13	bot	2	2026-10-06 09:40:00+00
00000000-0000-0000-0000-000000000006	2	13	bot	\N	2026-10-06 11:05:00+00
\.
SELECT * FROM clicks_hourly ORDER BY link_id, hour;

-- Renamed tables: the rollup follows them (its SQL is regenerated).
ALTER TABLE clicks_hourly RENAME TO clicks_per_hour;
ALTER TABLE clicks RENAME TO click_events;
INSERT INTO click_events (event_id, link_id, visitor_id, amount, occurred_at) VALUES
    ('00000000-0000-0000-0000-000000000032', 3, 12, 1, '2026-10-06 14:50+00');
SELECT * FROM clicks_per_hour WHERE link_id = 3;
SELECT counter.rollup_recompute('clicks_hourly', '2026-10-06 14:00+00', '2026-10-06 15:00+00') AS rows_written;
ALTER TABLE clicks_per_hour RENAME TO clicks_hourly;
ALTER TABLE click_events RENAME TO clicks;
DELETE FROM clicks WHERE event_id = '00000000-0000-0000-0000-000000000032';
SELECT counter.rollup_refresh_dirty('clicks_hourly') AS rows_written;

-- The straggler's hour is older than the oldest partition: outside the
-- retention, so the job drops it from the log with a warning.
CALL counter.run_steps('rollup_refresh', 'clicks_hourly') \gset
SELECT :'result'::jsonb ->> 'rows' AS rows_affected;
SELECT name, dirty_hours, last_outcome, last_rows FROM counter.rollup_state;

-- A deleted event (a privacy request) marks its hour dirty; the job fixes it.
DELETE FROM clicks WHERE event_id = '00000000-0000-0000-0000-000000000003';
SELECT name, newest_event_hour, dirty_hours FROM counter.rollup_state;
CALL counter.run_steps('rollup_refresh', 'clicks_hourly') \gset
SELECT :'result'::jsonb ->> 'rows' AS rows_affected;
SELECT * FROM clicks_hourly ORDER BY link_id, hour;
-- An update of the time column marks both hours.
UPDATE clicks SET occurred_at = '2026-10-06 10:15+00' WHERE event_id = '00000000-0000-0000-0000-000000000002';
SELECT hour FROM counter.rollup_dirty ORDER BY hour;
SELECT counter.rollup_refresh_dirty('clicks_hourly') AS rows_written;
SELECT * FROM clicks_hourly ORDER BY link_id, hour;
-- A second refresh of unchanged hours writes nothing.
SELECT counter.rollup_recompute('clicks_hourly', '2026-10-06 09:00+00', '2026-10-06 14:00+00') AS rows_written;

-- A deferred-mode rollup counts at the next refresh.
SELECT counter.rollup_create('clicks_deferred', 'clicks', 'occurred_at', '{link_id, kind}', mode => 'deferred',
                             distinct_on => '{visitor_id}', refresh_every => '5 minutes');
\d clicks_deferred
SELECT count(*) AS rows_before_refresh FROM clicks_deferred;
CALL counter.run_steps('rollup_refresh', 'clicks_deferred') \gset
SELECT :'result'::jsonb ->> 'rows' AS rows_affected;
SELECT link_id, kind, hour, count, counter.hll_cardinality(distinct_visitor_id) AS visitors
FROM clicks_deferred ORDER BY link_id, kind, hour;
INSERT INTO clicks (event_id, link_id, visitor_id, occurred_at) VALUES
    ('00000000-0000-0000-0000-000000000007', 2, 14, '2026-10-06 11:45+00');
SELECT name, dirty_hours FROM counter.rollup_state ORDER BY name;
CALL counter.run_steps('rollup_refresh', 'clicks_deferred') \gset
SELECT :'result'::jsonb ->> 'rows' AS rows_affected;
SELECT link_id, kind, hour, count, counter.hll_cardinality(distinct_visitor_id) AS visitors
FROM clicks_deferred WHERE link_id = 2 ORDER BY kind, hour;

-- Refresh errors.
CALL counter.rollup_refresh('clicks_hourly', '2026-10-06 09:30+00', '2026-10-06 11:00+00');
\echo :LAST_ERROR_SQLSTATE
CALL counter.rollup_refresh('clicks_hourly', '2026-10-06 11:00+00', '2026-10-06 09:00+00');
\echo :LAST_ERROR_SQLSTATE
CALL counter.rollup_refresh('no_such_rollup', '2026-10-06 09:00+00', '2026-10-06 11:00+00');
\echo :LAST_ERROR_SQLSTATE
CALL counter.run_steps('rollup_refresh', 'no_such_rollup');
\echo :LAST_ERROR_SQLSTATE
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT counter.rollup_recompute('clicks_hourly', '2026-10-06 09:00+00', '2026-10-06 11:00+00');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- The procedure form commits per chunk, so it cannot run inside a transaction block.
BEGIN;
CALL counter.rollup_refresh('clicks_hourly', '2026-10-06 09:00+00', '2026-10-06 11:00+00');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

-- Totals: a day in Asia/Taipei is 16:00 to 16:00 UTC.
INSERT INTO clicks (event_id, link_id, visitor_id, amount, occurred_at) VALUES
    ('00000000-0000-0000-0000-000000000011', 1, 10, 1, '2026-10-06 15:59+00'),
    ('00000000-0000-0000-0000-000000000012', 1, 10, 1, '2026-10-06 16:00+00');
SELECT * FROM counter.rollup_totals('clicks_hourly', '2026-10-05 16:00+00', '2026-10-07 16:00+00', 'Asia/Taipei');
SELECT * FROM counter.rollup_totals('clicks_hourly', '2026-10-06 00:00+00', '2026-10-08 00:00+00');
SELECT * FROM counter.rollup_totals('clicks_hourly', '2026-10-06 00:00+00', '2026-10-08 00:00+00', 'UTC', 'total');
SELECT * FROM counter.rollup_totals('clicks_hourly', '2026-10-06 09:00+00', '2026-10-06 11:00+00', 'UTC', 'hour');
SELECT * FROM counter.rollup_totals('clicks_deferred', '2026-10-06 00:00+00', '2026-10-07 00:00+00', 'UTC', 'day');
-- Half-hour zones cannot be assembled from UTC hours.
SELECT * FROM counter.rollup_totals('clicks_hourly', '2026-10-05 18:00+00', '2026-10-07 18:00+00', 'Asia/Kolkata');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM counter.rollup_totals('clicks_hourly', '2026-10-06 00:00+00', '2026-10-07 00:00+00', 'Mars/Olympus');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM counter.rollup_totals('clicks_hourly', '2026-10-06 00:00+00', '2026-10-07 00:00+00', 'UTC', 'fortnight');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM counter.rollup_totals('clicks_hourly', '2026-10-06 00:30+00', '2026-10-07 00:00+00');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM counter.rollup_totals('nope', '2026-10-06 00:00+00', '2026-10-07 00:00+00');
\echo :LAST_ERROR_SQLSTATE

-- Rule change: bots are excluded from now on. A full recompute equals a
-- from-scratch GROUP BY of the retained hours, and the hour outside the
-- retention (the straggler's) keeps its number.
INSERT INTO clicks_hourly VALUES (7, '2026-10-06 08:00+00', 1, 1);
SELECT counter.rollup_set_filter('clicks_hourly', 'kind <> ''bot''');
SELECT counter.rollup_set_filter('clicks_hourly', 'kind <> ');
\echo :LAST_ERROR_SQLSTATE
CALL counter.rollup_refresh('clicks_hourly', '2026-10-06 00:00+00', '2026-10-07 00:00+00');
SELECT * FROM clicks_hourly ORDER BY link_id, hour;
SELECT link_id, counter.rollup_hour(occurred_at) AS hour, count(*), coalesce(sum(amount), 0) AS sum_amount
FROM clicks WHERE kind <> 'bot' AND occurred_at >= '2026-10-06 09:00+00'
GROUP BY 1, 2
EXCEPT SELECT * FROM clicks_hourly WHERE hour >= '2026-10-06 09:00+00';
-- New events follow the new rule in the trigger too.
INSERT INTO clicks (event_id, link_id, visitor_id, kind, occurred_at) VALUES
    ('00000000-0000-0000-0000-000000000021', 1, 20, 'bot', '2026-10-06 09:50+00');
SELECT count FROM clicks_hourly WHERE link_id = 1 AND hour = '2026-10-06 09:00+00';
SELECT name, dirty_hours, last_outcome, last_error FROM counter.rollup_state ORDER BY name;

-- Drop: the table, the triggers, the catalog rows and the job go.
SELECT counter.rollup_drop('clicks_deferred');
SELECT counter.rollup_drop('clicks_deferred');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_drop('clicks_hourly');
SELECT count(*) AS rollups, to_regclass('clicks_hourly') AS no_table,
       (SELECT count(*) FROM pg_trigger WHERE tgrelid = 'clicks'::regclass) AS triggers,
       (SELECT count(*) FROM counter.jobs) AS jobs, (SELECT count(*) FROM counter.rollup_dirty) AS dirty
FROM counter.rollups;
DROP VIEW clicks_view;
DROP TABLE clicks, other;
-- Leave the database as it was (the next regression file creates the extension).
DROP EXTENSION counter_ext;
