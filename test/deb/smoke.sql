-- Smoke test of an installed counter_ext package (test/deb/test.sh): every
-- feature once, each result checked; run with ON_ERROR_STOP in a fresh
-- database of a server that preloads counter_ext with counter_ext.naptime = 1.
\set QUIET on
\o /dev/null
CREATE EXTENSION counter_ext;

CREATE FUNCTION pg_temp.expect(what text, got anyelement, want anyelement) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF got IS DISTINCT FROM want THEN
        RAISE EXCEPTION 'smoke: % is %, expected %', what, got, want;
    END IF;
    RAISE NOTICE 'ok: %', what;
END $$;
SET client_min_messages = notice;

SELECT pg_temp.expect('extension version', counter.version(), '1.8');
SELECT pg_temp.expect('library preloaded', counter.preloaded(), true);

-- counter.hll: small sets are exact; a union of halves is the whole.
SELECT pg_temp.expect('hll cardinality of 100 values',
    round(counter.hll_cardinality(counter.hll_add_agg(i)))::bigint, 100::bigint)
FROM generate_series(1, 100) i;
SELECT pg_temp.expect('hll union of two halves',
    (SELECT counter.hll_add_agg(i) FROM generate_series(1, 1000) i)
        OPERATOR(counter.=)
    (SELECT counter.hll_union_agg(s) FROM (
        SELECT counter.hll_add_agg(i) AS s FROM generate_series(1, 500) i
        UNION ALL SELECT counter.hll_add_agg(i) FROM generate_series(501, 1000) i) x), true);

-- counter.pncounter: two nodes merged in any order, twice, give one value.
SELECT pg_temp.expect('pncounter merge',
    counter.pncounter_value(a OPERATOR(counter.||) b OPERATOR(counter.||) a), 10 + 5 - 2::bigint)
FROM (SELECT counter.pncounter_increment(NULL, 10, node => 'a') AS a,
             counter.pncounter_decrement(counter.pncounter_increment(NULL, 5, node => 'b'), 2, node => 'b') AS b) s;

-- Tracked counters: the trigger keeps the count; rows written behind its
-- back are drift, and reconciliation repairs it from the rows.
CREATE TABLE public.clicks (id bigint PRIMARY KEY, link_id bigint NOT NULL, occurred_at timestamptz NOT NULL);
CREATE INDEX ON public.clicks (occurred_at);
SELECT counter.track('clicks_per_link', 'public.clicks', 'link_id', 'occurred_at', reconcile_every => '1 second') IS NOT NULL;
INSERT INTO public.clicks SELECT i, i % 3, now() - interval '2 hours' FROM generate_series(1, 300) i;
SELECT pg_temp.expect('tracked value from the trigger', counter.value('clicks_per_link', 1::bigint), 100::bigint);
SET session_replication_role = replica;
INSERT INTO public.clicks SELECT i, 1, now() - interval '2 hours' FROM generate_series(301, 310) i;
RESET session_replication_role;
-- An all-keys run; the worker's own run may hold the counter (outcome
-- 'skipped'): try again until one run of ours is done.
DO $$
BEGIN
    FOR i IN 1..300 LOOP
        EXIT WHEN (SELECT outcome FROM counter.reconcile('clicks_per_link', all_keys => true)) OPERATOR(pg_catalog.=) 'ok';
        PERFORM pg_sleep(0.1);
    END LOOP;
END $$;
SELECT pg_temp.expect('tracked value after reconcile', counter.value('clicks_per_link', 1::bigint), 110::bigint);
SELECT pg_temp.expect('tracked values equal the rows',
    (SELECT sum(counter.value('clicks_per_link', k)) FROM generate_series(0, 2) k)::bigint,
    (SELECT count(*) FROM public.clicks));

-- Application mode (text keys): counter.add in the application's own
-- transaction; a rolled-back transaction's add does not count.
CREATE TABLE public.orders (id bigint PRIMARY KEY, customer text NOT NULL, placed_at timestamptz NOT NULL);
CREATE INDEX ON public.orders (placed_at);
SELECT counter.track('orders_per_customer', 'public.orders', 'customer', 'placed_at', mode => 'application') IS NOT NULL;
BEGIN;
INSERT INTO public.orders VALUES (1, 'ann', now()), (2, 'ann', now()), (3, 'bob', now());
SELECT counter.add('orders_per_customer', 'ann'::text, 2), counter.add('orders_per_customer', 'bob'::text);
COMMIT;
BEGIN;
INSERT INTO public.orders VALUES (4, 'ann', now());
SELECT counter.add('orders_per_customer', 'ann'::text);
ROLLBACK;
SELECT pg_temp.expect('application-mode values',
    (SELECT array_agg(value ORDER BY key) FROM counter.values_of('orders_per_customer', ARRAY['ann', 'bob', 'cid'])),
    ARRAY[2, 1, 0]::bigint[]);

-- Buffered mode (the preloaded library's shared memory): the trigger's adds
-- wait in shared memory, are read with the table, and reach the table when
-- the worker flushes them (its flush job, or its first reconciliation, which
-- flushes first; this file never flushes); a rolled-back insert counts nothing.
CREATE TABLE public.views (id bigint PRIMARY KEY, page_id bigint NOT NULL, seen_at timestamptz NOT NULL);
CREATE INDEX ON public.views (seen_at);
SELECT counter.track('views_per_page', 'public.views', 'page_id', 'seen_at', buffered => true) IS NOT NULL;
INSERT INTO public.views SELECT i, i % 4, now() - interval '1 hour' FROM generate_series(1, 400) i;
BEGIN;
INSERT INTO public.views SELECT i, 2, now() - interval '1 hour' FROM generate_series(401, 450) i;
ROLLBACK;
SELECT pg_temp.expect('buffered value', counter.value('views_per_page', 2::bigint), 100::bigint);
DO $$
BEGIN
    FOR i IN 1..600 LOOP
        EXIT WHEN EXISTS (SELECT 1 FROM counter.job_runs
                          WHERE kind = 'flush' AND runner = 'worker' AND outcome = 'succeeded')
              AND (SELECT flushes > 0 AND pending = 0 AND in_flight = 0 FROM counter.buffered
                   WHERE counter = 'views_per_page');
        PERFORM pg_sleep(0.1);
    END LOOP;
END $$;
SELECT pg_temp.expect('a flush job run by the worker', EXISTS (SELECT 1 FROM counter.job_runs
    WHERE kind = 'flush' AND runner = 'worker' AND outcome = 'succeeded'), true);
SELECT pg_temp.expect('buffered adds flushed',
    (SELECT format('preloaded %s, flushed %s, pending %s, in flight %s', preloaded, flushes > 0, pending, in_flight)
     FROM counter.buffered WHERE counter = 'views_per_page'),
    'preloaded t, flushed t, pending 0, in flight 0');
SELECT pg_temp.expect('buffered values after the flush',
    (SELECT array_agg(value ORDER BY key) FROM counter.values_of('views_per_page', ARRAY[0, 1, 2, 3]::bigint[])),
    ARRAY[100, 100, 100, 100]::bigint[]);

-- Hourly partitions: made ahead, with a default partition.
CREATE TABLE public.events (id bigint NOT NULL, link_id bigint NOT NULL, occurred_at timestamptz NOT NULL,
    UNIQUE (id, occurred_at)) PARTITION BY RANGE (occurred_at);
SELECT counter.partition_manage('public.events', 'occurred_at', premake => 3) > 0;
SELECT counter.rollup_create('events_hourly', 'public.events', 'occurred_at', '{link_id}') IS NOT NULL;
SELECT pg_temp.expect('partitions ahead', (SELECT hours_ahead >= 3 FROM counter.partition_status
    WHERE parent = 'public.events'::regclass), true);
INSERT INTO public.events SELECT i, i % 5, date_trunc('hour', now()) + interval '10 minutes' FROM generate_series(1, 50) i;
SELECT pg_temp.expect('rows in the default partition', (SELECT rows_in_default FROM counter.partition_status
    WHERE parent = 'public.events'::regclass)::bigint, 0::bigint);

-- Hourly rollups: re-delivered events count once.
INSERT INTO public.events SELECT i, i % 5, date_trunc('hour', now()) + interval '20 minutes' FROM generate_series(51, 100) i;
INSERT INTO public.events SELECT i, i % 5, date_trunc('hour', now()) + interval '20 minutes' FROM generate_series(51, 100) i
    ON CONFLICT DO NOTHING;
SELECT pg_temp.expect('rollup total', (SELECT sum(count) FROM public.events_hourly)::bigint,
    (SELECT count(*) FROM public.events));

-- The background worker: it runs the counter's reconcile job by itself.
DO $$
BEGIN
    FOR i IN 1..600 LOOP
        EXIT WHEN EXISTS (SELECT 1 FROM counter.job_runs
                          WHERE kind = 'reconcile' AND runner = 'worker' AND outcome = 'succeeded');
        PERFORM pg_sleep(0.1);
    END LOOP;
END $$;
SELECT pg_temp.expect('a reconcile run by the worker', EXISTS (SELECT 1 FROM counter.job_runs
    WHERE kind = 'reconcile' AND runner = 'worker' AND outcome = 'succeeded'), true);
SELECT pg_temp.expect('no failed job run', (SELECT count(*) FROM counter.job_runs WHERE outcome = 'failed'), 0::bigint);
\o
\echo smoke ok
