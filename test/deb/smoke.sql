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

SELECT pg_temp.expect('extension version', counter.version(), '1.5');
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
SELECT keys_corrected > 0 FROM counter.reconcile('clicks_per_link', all_keys => true);
SELECT pg_temp.expect('tracked value after reconcile', counter.value('clicks_per_link', 1::bigint), 110::bigint);

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
