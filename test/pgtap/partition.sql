-- Partition maintenance properties: partitions tile time with no gap and no
-- overlap on the UTC grid, named from UTC, whatever the session TimeZone
-- (daylight saving changes, half-hour and 45-minute offsets); straggler rows
-- all end in proper partitions; retention; a 30-day catch-up.
BEGIN;
SELECT plan(47);
SET LOCAL client_min_messages = warning;

-- Checks a managed table: partitions contiguous (each ends where the next
-- starts), on the UTC grid of its interval, named from their UTC start, and
-- covering [from_ts, to_ts). Returns the problems found (empty when fine).
CREATE FUNCTION pg_temp.layout_problems(parent regclass, from_ts timestamptz, to_ts timestamptz)
RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
    step numeric := extract(epoch FROM (SELECT part_interval FROM counter.partitioned_tables WHERE partitioned_tables.parent = layout_problems.parent));
    r record;
    prev timestamptz;
BEGIN
    FOR r IN SELECT b.partition, b.lo, b.hi, c.relname FROM counter.partition_bounds(parent) b
             JOIN pg_class c ON c.oid = b.partition WHERE NOT b.is_default ORDER BY b.lo LOOP
        IF prev IS NOT NULL AND r.lo <> prev THEN
            RETURN NEXT format('%s starts at %s, previous ends at %s', r.relname, r.lo, prev);
        END IF;
        IF extract(epoch FROM r.lo) % step <> 0 OR extract(epoch FROM r.hi - r.lo) <> step THEN
            RETURN NEXT format('%s is off the grid: [%s, %s)', r.relname, r.lo, r.hi);
        END IF;
        IF r.relname <> (SELECT relname FROM pg_class WHERE oid = parent) || '_p' ||
                         to_char(r.lo AT TIME ZONE 'UTC', CASE WHEN step < 3600 THEN 'YYYYMMDDHH24MI' ELSE 'YYYYMMDDHH24' END) THEN
            RETURN NEXT format('%s is not named from its UTC start %s', r.relname, r.lo AT TIME ZONE 'UTC');
        END IF;
        prev := r.hi;
    END LOOP;
    IF (SELECT min(lo) FROM counter.partition_bounds(parent) WHERE NOT is_default) > from_ts
       OR (SELECT max(hi) FROM counter.partition_bounds(parent) WHERE NOT is_default) < to_ts THEN
        RETURN NEXT format('partitions do not cover [%s, %s)', from_ts, to_ts);
    END IF;
END $$;

-- One table per zone and interval: managed across the zone's daylight
-- saving change in that session zone, then rows every 5 minutes across the
-- range must all land in proper partitions.
CREATE FUNCTION pg_temp.zone_case(tbl text, zone text, step interval, start_local text, hours int)
RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz;
BEGIN
    PERFORM set_config('TimeZone', zone, true);
    t0 := start_local::timestamptz; -- read in the zone
    EXECUTE format('CREATE TABLE %I (id bigserial, t timestamptz NOT NULL) PARTITION BY RANGE (t)', tbl);
    PERFORM counter.partition_manage(tbl::regclass, 't', step, premake => 2, start_at => t0,
                                     as_of => t0 + make_interval(hours => hours));
    -- maintenance in the same zone one interval later changes nothing but premake
    PERFORM counter.partition_maintain(tbl::regclass, as_of => t0 + make_interval(hours => hours) + step);
    EXECUTE format('INSERT INTO %I (t) SELECT g FROM generate_series(%L::timestamptz, %L::timestamptz, %L) g',
                   tbl, t0, t0 + make_interval(hours => hours), interval '5 minutes');
    RETURN QUERY SELECT * FROM pg_temp.layout_problems(tbl::regclass, counter_internal.partition_slot(t0, extract(epoch FROM step)::bigint),
                                                       t0 + make_interval(hours => hours));
    RETURN QUERY EXECUTE format('SELECT format(''%%s rows in the default partition'', count(*)) FROM ONLY %I HAVING count(*) > 0',
                                tbl || '_default');
    PERFORM set_config('TimeZone', 'UTC', true);
END $$;

-- America/New_York: spring forward (2026-03-08 02:00 local does not exist)
-- and fall back (2026-11-01 01:00-02:00 local happens twice).
SELECT is_empty($$ SELECT * FROM pg_temp.zone_case('ny_spring_1h', 'America/New_York', '1 hour', '2026-03-07 22:00', 8) $$,
                'New York spring forward, hourly: no gap, no overlap, UTC names, no row in default');
SELECT is_empty($$ SELECT * FROM pg_temp.zone_case('ny_fall_1h', 'America/New_York', '1 hour', '2026-10-31 22:00', 8) $$,
                'New York fall back, hourly: the repeated hour has its own two partitions');
SELECT is_empty($$ SELECT * FROM pg_temp.zone_case('ny_fall_2h', 'America/New_York', '2 hours', '2026-10-31 20:00', 12) $$,
                'New York fall back, 2-hour partitions');
SELECT is_empty($$ SELECT * FROM pg_temp.zone_case('ny_spring_1d', 'America/New_York', '1 day', '2026-03-06 12:00', 72) $$,
                'New York spring forward, daily partitions are UTC days');
SELECT is_empty($$ SELECT * FROM pg_temp.zone_case('ny_fall_15m', 'America/New_York', '15 minutes', '2026-11-01 00:30', 3) $$,
                'New York fall back, 15-minute partitions');
-- Asia/Kolkata: +05:30, no DST; local hours straddle UTC hours.
SELECT is_empty($$ SELECT * FROM pg_temp.zone_case('kolkata_1h', 'Asia/Kolkata', '1 hour', '2026-07-01 04:00', 6) $$,
                'Kolkata (+05:30), hourly');
SELECT is_empty($$ SELECT * FROM pg_temp.zone_case('kolkata_30m', 'Asia/Kolkata', '30 minutes', '2026-07-01 04:45', 4) $$,
                'Kolkata (+05:30), 30-minute partitions');
-- Pacific/Chatham: +12:45 / +13:45 with DST (ends 2026-04-05, starts 2026-09-27).
SELECT is_empty($$ SELECT * FROM pg_temp.zone_case('chatham_end_1h', 'Pacific/Chatham', '1 hour', '2026-04-05 01:00', 8) $$,
                'Chatham (+13:45 to +12:45), hourly');
SELECT is_empty($$ SELECT * FROM pg_temp.zone_case('chatham_start_1h', 'Pacific/Chatham', '1 hour', '2026-09-27 00:00', 8) $$,
                'Chatham (+12:45 to +13:45), hourly');
SELECT is_empty($$ SELECT * FROM pg_temp.zone_case('chatham_start_3h', 'Pacific/Chatham', '3 hours', '2026-09-26 18:00', 24) $$,
                'Chatham, 3-hour partitions');
SELECT is_empty($$ SELECT * FROM pg_temp.zone_case('chatham_start_15m', 'Pacific/Chatham', '15 minutes', '2026-09-27 02:00', 2) $$,
                'Chatham, 15-minute partitions');

-- The same management in two zones makes the very same partitions.
SET LOCAL TimeZone = 'Pacific/Chatham';
CREATE TABLE zone_a (t timestamptz NOT NULL) PARTITION BY RANGE (t);
SELECT counter.partition_manage('zone_a', 't', '1 hour', premake => 6, start_at => '2026-11-01 05:00+00', as_of => '2026-11-01 05:30+00');
SET LOCAL TimeZone = 'America/New_York';
CREATE TABLE zone_b (t timestamptz NOT NULL) PARTITION BY RANGE (t);
SELECT counter.partition_manage('zone_b', 't', '1 hour', premake => 6, start_at => '2026-11-01 05:00+00', as_of => '2026-11-01 05:30+00');
SELECT results_eq(
    $$ SELECT lo, hi, substr(partition::text, 7) FROM counter.partition_bounds('zone_a') WHERE NOT is_default ORDER BY lo $$,
    $$ SELECT lo, hi, substr(partition::text, 7) FROM counter.partition_bounds('zone_b') WHERE NOT is_default ORDER BY lo $$,
    'the session zone changes no bound and no name');
SELECT is((SELECT count(*) FROM counter.partition_bounds('zone_b') WHERE NOT is_default), 7::bigint,
          'the current partition and 6 premade');
SET LOCAL TimeZone = 'UTC';

-- Idempotent: a second maintenance as of the same time does nothing.
SELECT results_eq($$ SELECT created, dropped, moved, outcome FROM counter.partition_maintain('zone_b', as_of => '2026-11-01 05:30+00') $$,
                  $$ VALUES (0::bigint, 0::bigint, 0::bigint, 'ok'::text) $$, 'maintenance twice: nothing to do');

-- Catch-up from 30 days behind: the table was maintained last at T0; rows
-- for the 30 days after went to the default partition; one maintenance call
-- creates every partition, moves every row, loses and duplicates none.
CREATE TABLE catchup (id bigint NOT NULL, t timestamptz NOT NULL, payload text, UNIQUE (id, t)) PARTITION BY RANGE (t);
CREATE INDEX ON catchup (t);
-- (a retention of 60 days: one run drains and fills only [as_of - retention, as_of + premake])
SELECT is(counter.partition_manage('catchup', 't', premake => 24, start_at => '2026-06-01 00:00+00',
                                   retention => interval '60 days',
                                   as_of => '2026-06-01 00:00+00', batch_rows => 40), 25::bigint,
          'catch-up table starts with 25 partitions (and its default)');
INSERT INTO catchup SELECT g, timestamptz '2026-06-01 00:00+00' + g * interval '7 minutes', md5(g::text)
FROM generate_series(0, 30 * 24 * 60 / 7) g;
-- one busy hour, larger than batch_rows: drained through a staging table
INSERT INTO catchup SELECT 100000 + g, timestamptz '2026-06-15 12:00:03+00' + g * interval '30 seconds', md5(g::text)
FROM generate_series(0, 99) g;
CREATE TEMP TABLE catchup_before AS
    SELECT count(*) AS n, sum(id) AS ids, md5(string_agg(id::text || payload || t::text, ',' ORDER BY id)) AS digest FROM catchup;
SELECT cmp_ok((SELECT count(*) FROM ONLY catchup_default), '>', 5000::bigint, 'most rows start in the default partition');
SELECT results_eq(
    $$ SELECT outcome, error FROM counter.partition_maintain('catchup', as_of => '2026-07-01 00:00+00') $$,
    $$ VALUES ('ok'::text, NULL::text) $$, 'catch-up maintenance succeeds');
SELECT is((SELECT count(*) FROM ONLY catchup_default), 0::bigint, 'no row left in the default partition');
SELECT results_eq($$ SELECT n, ids, digest FROM catchup_before $$,
                  $$ SELECT count(*), sum(id), md5(string_agg(id::text || payload || t::text, ',' ORDER BY id)) FROM catchup $$,
                  'same rows before and after: count, id sum and digest');
SELECT is((SELECT count(*) FROM (SELECT id FROM catchup GROUP BY id HAVING count(*) > 1) d), 0::bigint, 'no id twice');
SELECT is_empty($$ SELECT * FROM pg_temp.layout_problems('catchup', '2026-06-01 00:00+00', '2026-07-02 00:00+00') $$,
                'catch-up leaves contiguous UTC partitions through as_of + premake');
SELECT is((SELECT last_moved FROM counter.partition_status WHERE parent = 'catchup'::regclass),
          (SELECT n FROM catchup_before) - (25 * 60 / 7 + 1), 'every row beyond the first 25 hours was moved');
SELECT is((SELECT count(*) FROM counter.partition_staging), 0::bigint, 'no drain left half done');
-- Rows of an hour larger than batch_rows went through a staging table: the
-- partition has the parent's indexes and no leftover check constraint.
SELECT is((SELECT count(*) FROM pg_index WHERE indrelid = 'catchup_p2026061512'::regclass), 2::bigint,
          'a drained partition has the parent''s two indexes');
SELECT is((SELECT count(*) FROM pg_constraint WHERE conrelid = 'catchup_p2026061512'::regclass AND contype = 'c'), 0::bigint,
          'no bounds check left on a drained partition');
SELECT is((SELECT count(*) FROM catchup_p2026061512), (SELECT count(*) FROM catchup WHERE t >= '2026-06-15 12:00+00' AND t < '2026-06-15 13:00+00'),
          'a drained hour holds its rows');

-- A staged drain, step by step: between steps the moved rows sit in the
-- staging table (invisible through the parent), never in two places.
CREATE TABLE staged (id bigint NOT NULL, t timestamptz NOT NULL) PARTITION BY RANGE (t);
SELECT counter.partition_manage('staged', 't', premake => 1, as_of => '2026-07-01 00:00+00', batch_rows => 30);
INSERT INTO staged SELECT g, timestamptz '2026-06-30 10:00+00' + g * interval '30 seconds' FROM generate_series(1, 100) g;
SELECT results_eq($$ SELECT moved, outcome FROM counter.partition_maintain('staged', as_of => '2026-07-01 00:00+00', max_steps => 2) $$,
                  $$ VALUES (60::bigint, 'partial'::text) $$, 'two steps move two batches');
SELECT results_eq($$ SELECT rows_in_default, rows_staged FROM counter.partition_status WHERE parent = 'staged'::regclass $$,
                  $$ VALUES (40::bigint, 60::bigint) $$, 'the status view shows the rows staged and left');
SELECT is((SELECT count(*) FROM staged), 40::bigint, 'staged rows are not visible through the parent yet');
SELECT results_eq($$ SELECT moved, created, outcome FROM counter.partition_maintain('staged', as_of => '2026-07-01 00:00+00') $$,
                  $$ VALUES (40::bigint, 14::bigint, 'ok'::text) $$,
                  'the last batch moves under lock and attaches (and the 13 empty hours up to the next partition are made)');
SELECT results_eq($$ SELECT count(*), sum(id) FROM staged $$, $$ VALUES (100::bigint, 5050::numeric) $$,
                  'all rows back, once each');
SELECT is((SELECT count(*) FROM counter.partition_staging), 0::bigint, 'the staging record is gone');

-- Retention: drop whole partitions wholly older than as_of - retention.
UPDATE counter.partitioned_tables SET retention = interval '10 days' WHERE parent = 'catchup'::regclass;
SELECT results_eq($$ SELECT dropped, outcome FROM counter.partition_maintain('catchup', as_of => '2026-07-01 00:30+00') $$,
                  $$ VALUES (20::bigint * 24, 'ok'::text) $$, 'retention drops 20 days of hourly partitions');
SELECT is((SELECT min(lo) FROM counter.partition_bounds('catchup') WHERE NOT is_default), '2026-06-21 00:00+00'::timestamptz,
          'the oldest partition left ends after the cutoff');
SELECT is((SELECT count(*) FROM catchup WHERE t < '2026-06-21 00:00+00'), 0::bigint, 'rows of dropped partitions are gone');
SELECT is((SELECT count(*) FROM pg_class WHERE relname LIKE 'catchup_p202606%' AND relname < 'catchup_p2026062100'), 0::bigint,
          'dropped partitions are gone as tables');
-- Retention that detaches and keeps the tables.
UPDATE counter.partitioned_tables SET retention = interval '9 days', retention_keep_table = true WHERE parent = 'catchup'::regclass;
SELECT results_eq($$ SELECT dropped, outcome FROM counter.partition_maintain('catchup', as_of => '2026-07-01 00:30+00') $$,
                  $$ VALUES (24::bigint, 'ok'::text) $$, 'retention detaches one more day');
SELECT is((SELECT count(*) FROM pg_class WHERE relname LIKE 'catchup_p20260621%' AND relkind = 'r' AND NOT relispartition), 24::bigint,
          'detached partitions stay as plain tables');
SELECT is((SELECT count(*) FROM catchup_p2026062105), (SELECT count(*) FROM generate_series(0, 30 * 24 * 60 / 7) g
                                                      WHERE timestamptz '2026-06-01 00:00+00' + g * interval '7 minutes' >= '2026-06-21 05:00+00'
                                                        AND timestamptz '2026-06-01 00:00+00' + g * interval '7 minutes' < '2026-06-21 06:00+00'),
          'a detached partition keeps its rows');
SELECT is((SELECT count(*) FROM catchup WHERE t < '2026-06-22 00:00+00'), 0::bigint, 'detached rows are no longer in the parent');

-- Rows that cannot go anywhere stay in the default partition and do not stop
-- maintenance: NULL keys (range partitioning sends them to default),
-- infinities, and rows outside [as_of - retention (7 days without one),
-- as_of + premake]: no row makes a partition outside that window (bounded:
-- a row a year ahead or a century back creates nothing); they are counted.
CREATE TABLE odd (t timestamptz) PARTITION BY RANGE (t);
SELECT counter.partition_manage('odd', 't', premake => 1, as_of => '2026-07-01 00:00+00');
INSERT INTO odd VALUES (NULL), ('infinity'), ('-infinity'), ('2026-08-01 10:10+00'), ('1026-08-01 10:10+00'),
    ('2026-06-28 10:00+00');
SELECT results_eq($$ SELECT created, moved, outcome FROM counter.partition_maintain('odd', as_of => '2026-07-01 00:00+00') $$,
                  $$ VALUES (62::bigint, 1::bigint, 'ok'::text) $$, 'only the row inside the window is moved (into a partition made for it, and the hours after it are filled: 62 partitions, never one outside the window)');
SELECT is((SELECT count(*) FROM ONLY odd_default), 5::bigint, 'NULL, infinite and out-of-window keys stay in default');
SELECT is((SELECT rows_in_default FROM counter.partition_status WHERE parent = 'odd'::regclass), 5::bigint,
          'the status view counts them');
SELECT is((SELECT last_outside FROM counter.partition_status WHERE parent = 'odd'::regclass), 4::bigint,
          'the run reports the rows left outside the window');

-- A table whose partition cannot be created (a foreign table of the same
-- name is in the way) is recorded as an error; maintenance does not throw.
CREATE TABLE blocked (t timestamptz) PARTITION BY RANGE (t);
SELECT counter.partition_manage('blocked', 't', premake => 1, as_of => '2026-07-01 00:00+00');
CREATE TABLE blocked_p2026070102 (x int);
SELECT results_eq($$ SELECT outcome, error ~ 'already exists' FROM counter.partition_maintain('blocked', as_of => '2026-07-01 01:00+00') $$,
                  $$ VALUES ('error'::text, true) $$, 'a failing table is recorded as error');
SELECT is((SELECT last_outcome FROM counter.partition_status WHERE parent = 'blocked'::regclass), 'error', 'the status view shows it');
SELECT ok((SELECT last_error FROM counter.partition_status WHERE parent = 'blocked'::regclass) ~ 'blocked_p2026070102',
          'with the error text');

SELECT * FROM finish();
ROLLBACK;
