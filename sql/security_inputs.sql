-- What a writer passes (issue 24, item 2): a role with INSERT only on a
-- counted table tries to make a counter permanently wrong or another key
-- unreadable, with event times far in the future and deltas that overflow.
-- Each attempt is refused with its errcode before anything is written;
-- reads never fail; reconciliation converges to the rows.
CREATE EXTENSION counter_ext;
\set ON_ERROR_STOP 0
\set SHOW_CONTEXT never
\set VERBOSITY terse
SET client_min_messages = warning;
SET timezone = 'UTC';
CREATE ROLE sec_i_victim;
CREATE ROLE sec_i_writer;
CREATE SCHEMA sec_i AUTHORIZATION sec_i_victim;
GRANT USAGE ON SCHEMA sec_i TO sec_i_writer;

-- The SQLSTATE a statement ends with ('ok' when it succeeds), run as the
-- caller (not SECURITY DEFINER).
CREATE FUNCTION public.sec_i_try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- The victim: application mode with text keys (unbuffered and buffered),
-- and trigger mode; five rows per key, added as they were inserted.
SET ROLE sec_i_victim;
CREATE TABLE sec_i.calls (k text NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON sec_i.calls (at);
CREATE TABLE sec_i.bcalls (k text NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON sec_i.bcalls (at);
CREATE TABLE sec_i.posts (k int NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON sec_i.posts (at);
SELECT counter.track('v_app', 'sec_i.calls', 'k', 'at', mode => 'application') > 0 AS ok;
SELECT counter.track('v_buf', 'sec_i.bcalls', 'k', 'at', mode => 'application', buffered => true) > 0 AS ok;
SELECT counter.track('v_trg', 'sec_i.posts', 'k', 'at') > 0 AS ok;
INSERT INTO sec_i.calls SELECT 'k' || (g % 4 + 1), '2024-01-01' FROM generate_series(1, 20) g;
INSERT INTO sec_i.bcalls SELECT 'k' || (g % 4 + 1), '2024-01-01' FROM generate_series(1, 20) g;
INSERT INTO sec_i.posts SELECT g % 4 + 1, '2024-01-01' FROM generate_series(1, 20) g;
SELECT count(counter.add('v_app', k, 1, at)) FROM sec_i.calls;
SELECT count(counter.add('v_buf', k, 1, at)) FROM sec_i.bcalls;
GRANT INSERT ON sec_i.calls, sec_i.bcalls, sec_i.posts TO sec_i_writer;
RESET ROLE;

-- Every key of every counter against count(*) of its rows (as a superuser).
CREATE FUNCTION public.sec_i_wrong() RETURNS text LANGUAGE sql AS $$
    SELECT coalesce(string_agg(format('%s/%s: %s <> %s', v.counter, v.key, v.value, v.n), ', '
                               ORDER BY v.counter, v.key), 'none')
    FROM (SELECT t.counter, t.key, t.value,
                 CASE t.counter WHEN 'v_app' THEN (SELECT count(*) FROM sec_i.calls c WHERE c.k = t.key)
                                WHEN 'v_buf' THEN (SELECT count(*) FROM sec_i.bcalls c WHERE c.k = t.key)
                                ELSE (SELECT count(*) FROM sec_i.posts c WHERE c.k::text = t.key) END AS n
          FROM counter.tracked_values t) v
    WHERE v.value IS DISTINCT FROM v.n
$$;
SELECT public.sec_i_wrong() AS wrong;

-- ---------------------------------------------------------------- 1. the sequence of the issue
SET ROLE sec_i_writer;
SELECT public.sec_i_try($$SELECT counter.add('v_app', 'k1'::text, 1000000, '2999-01-01')$$);
SELECT public.sec_i_try($$SELECT counter.add('v_app', 'k2'::text, 9223372036854775807, '2999-01-01')$$);
SELECT public.sec_i_try($$SELECT counter.add('v_app', 'k2'::text, 9223372036854775807, '2998-01-01')$$);
SELECT public.sec_i_try($$SELECT counter.add('v_app', 'k3'::text, 1, 'infinity')$$);
SELECT public.sec_i_try($$SELECT counter.add('v_app', 'k3'::text, 1, '-infinity')$$);
-- the bound is the counter's max_future (1 day by default) past now
SELECT split_part(public.sec_i_try($$SELECT counter.add('v_app', 'k3'::text, 1, now() + interval '25 hours')$$), ':', 1);
SELECT public.sec_i_try($$SELECT counter.add('v_app', 'k3'::text, 0, now() + interval '23 hours')$$);
-- the same through the buffered path
SELECT public.sec_i_try($$SELECT counter.add('v_buf', 'k1'::text, 1000000, '2999-01-01')$$);
SELECT public.sec_i_try($$SELECT counter.add('v_buf', 'k3'::text, 1, 'infinity')$$);
RESET ROLE;
SELECT count(*) AS delta_rows_past_a_day FROM counter_internal.tracked_1_delta WHERE bucket > now() + interval '1 day';
SELECT public.sec_i_wrong() AS wrong;

-- ---------------------------------------------------------------- 2. deltas that overflow
-- An add that would take a delta row past bigint is refused (22003), and
-- nothing of it is written; one that fits is kept. Events in the past are
-- accepted (they are folded by the next reconciliation).
SET ROLE sec_i_writer;
SELECT public.sec_i_try($$SELECT counter.add('v_app', 'k2'::text, 9223372036854775807, '2024-01-01')$$);
SELECT public.sec_i_try($$SELECT counter.add('v_app', 'k2'::text, 9223372036854775807, '2023-06-01')$$);
SELECT public.sec_i_try($$SELECT counter.add('v_app', 'k2'::text, 9223372036854775807, '2023-06-01')$$);
SELECT public.sec_i_try($$SELECT counter.add('v_app', 'k2'::text, 9223372036854775807, '2023-01-01')$$);
SELECT public.sec_i_try($$SELECT counter.add('v_app', 'k2'::text, -9223372036854775807, '2022-01-01')$$);
SELECT public.sec_i_try($$SELECT counter.add('v_app', 'k2'::text, -9223372036854775807, '2022-01-01')$$);
SELECT public.sec_i_try($$SELECT counter.add('v_app', 'k2'::text, 9223372036854775807, '2021-01-01')$$);
-- buffered: large amounts go the direct way; within one transaction and
-- across many, what the shared table holds never overflows
SELECT public.sec_i_try($$SELECT counter.add('v_buf', 'k2'::text, 9223372036854775807, '2024-01-01')$$);
SELECT public.sec_i_try($$SELECT counter.add('v_buf', 'k2'::text, 9223372036854775807, '2024-01-01')$$);
SELECT public.sec_i_try($$SELECT count(counter.add('v_buf', 'k2'::text, 1099511627776, '2023-06-01')) FROM generate_series(1, 3)$$);
SELECT public.sec_i_try($$SELECT count(counter.add('v_buf', 'k2'::text, 1099511627776, '2023-06-01')) FROM generate_series(1, 3)$$);
RESET ROLE;
SELECT key, bucket, delta FROM counter_internal.tracked_1_delta WHERE key = 'k2' AND bucket < '2024-01-01' ORDER BY bucket;

-- ---------------------------------------------------------------- 3. reads never fail
-- k2's sums are far past bigint: its own reads are bounded, every other key
-- reads right, through every way of reading.
SET ROLE sec_i_victim;
SELECT counter.value('v_app', 'k1'::text) AS k1, counter.value('v_app', 'k2'::text) AS k2,
       counter.value('v_app', 'k3'::text) AS k3;
SELECT * FROM counter.values_of('v_app', ARRAY['k1', 'k2', 'k3', 'k4']);
SELECT * FROM counter.tracked_values WHERE counter = 'v_app' ORDER BY key;
SELECT counter, count(*) FROM counter.tracked_all_values() GROUP BY 1 ORDER BY 1;
SELECT * FROM counter.values_of('v_buf', ARRAY['k1', 'k2']);
RESET ROLE;

-- ---------------------------------------------------------------- 4. state left by 1.4
-- Deltas 1.4 accepted far in the future (and past bigint together) are
-- folded by reconciliation in application mode: it converges to the rows.
INSERT INTO counter_internal.tracked_1_delta VALUES
    ('k1', '2999-01-01', 0, 1000000), ('k3', 'infinity', 0, 1),
    ('k4', '2998-01-01', 1, 9223372036854775807), ('k4', '2999-01-01', 1, 9223372036854775807);
SET ROLE sec_i_victim;
SELECT * FROM counter.values_of('v_app', ARRAY['k1', 'k2', 'k3', 'k4']);
SELECT outcome, keys_checked > 0 AS checked, drift_positive, drift_negative
FROM counter.reconcile('v_app', watermark => '2024-06-01', all_keys => true);
SELECT outcome, keys_corrected FROM counter.reconcile('v_app', watermark => '2024-06-01', all_keys => true);
SELECT outcome, keys_corrected FROM counter.reconcile('v_buf', watermark => '2024-06-01', all_keys => true);
SELECT key, cached, truth, drift FROM counter.tracked_key_drift_history WHERE counter = 'v_app' ORDER BY run_id, key;
RESET ROLE;
SELECT count(*) AS delta_rows_left FROM counter_internal.tracked_1_delta;
SELECT public.sec_i_wrong() AS wrong;

-- ---------------------------------------------------------------- 5. trigger mode: rows far in the future
-- The rows are the truth: a row with any event time is inserted and
-- counted, and reconciliation keeps the count (doc/reference/tracked.md).
SET ROLE sec_i_writer;
INSERT INTO sec_i.posts VALUES (1, 'infinity'), (1, '-infinity'), (2, '2999-01-01'), (3, '294276-12-31 23:00:00+00');
RESET ROLE;
SELECT public.sec_i_wrong() AS wrong;
SET ROLE sec_i_victim;
SELECT outcome FROM counter.reconcile('v_trg', watermark => '2024-06-01', all_keys => true);
SELECT outcome, keys_corrected FROM counter.reconcile('v_trg', all_keys => true);
RESET ROLE;
SELECT public.sec_i_wrong() AS wrong;

-- ---------------------------------------------------------------- 6. max_future
SET ROLE sec_i_victim;
CREATE TABLE sec_i.soon (k int NOT NULL, at timestamptz NOT NULL);
SELECT public.sec_i_try($$SELECT counter.track('v_bad', 'sec_i.soon', 'k', 'at', mode => 'application', max_future => interval '1 month')$$);
SELECT public.sec_i_try($$SELECT counter.track('v_bad', 'sec_i.soon', 'k', 'at', mode => 'application', max_future => interval '-1 second')$$);
SELECT counter.track('v_soon', 'sec_i.soon', 'k', 'at', mode => 'application', max_future => interval '1 hour') > 0 AS ok;
SELECT max_future FROM counter.tracked WHERE name = 'v_soon';
GRANT INSERT ON sec_i.soon TO sec_i_writer;
SET ROLE sec_i_writer;
SELECT split_part(public.sec_i_try($$SELECT counter.add('v_soon', 1, 1, now() + interval '61 minutes')$$), ':', 1);
SELECT public.sec_i_try($$SELECT counter.add('v_soon', 1, 1, now() + interval '59 minutes')$$);
RESET ROLE;
SELECT count(*) AS soon_rows FROM counter_internal.tracked_4_delta;

DROP EXTENSION counter_ext CASCADE;
DROP SCHEMA sec_i CASCADE;
DROP FUNCTION public.sec_i_try(text), public.sec_i_wrong();
DROP ROLE sec_i_victim;
DROP ROLE sec_i_writer;
