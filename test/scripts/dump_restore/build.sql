-- The source database of dump_restore.sh: every feature, owned by role app
-- where a user would own it, with pending work left undone.
CREATE EXTENSION counter_ext;
GRANT CREATE ON SCHEMA public TO app;
SET ROLE app;
-- A tracked counter in trigger mode, reconciled once (a base), then deltas.
CREATE TABLE public.clicks (id bigserial PRIMARY KEY, link_id bigint NOT NULL, occurred_at timestamptz NOT NULL);
SELECT counter.track('clicks_per_link', 'public.clicks', 'link_id', 'occurred_at', watermark_lag => '0 seconds');
INSERT INTO public.clicks (link_id, occurred_at)
SELECT i % 37, now() - interval '3 hours' + (i % 7200) * interval '1 second' FROM generate_series(1, 4000) i;
SELECT keys_checked FROM counter.reconcile('clicks_per_link', all_keys => true);
INSERT INTO public.clicks (link_id, occurred_at) SELECT i % 41, now() FROM generate_series(1, 786) i;
DELETE FROM public.clicks WHERE id % 97 = 0;
-- An application-mode counter fed by counter.add.
CREATE TABLE public.likes (post_id int NOT NULL, at timestamptz NOT NULL DEFAULT now());
SELECT counter.track('likes_per_post', 'public.likes', 'post_id', 'at', mode => 'application');
INSERT INTO public.likes (post_id) SELECT i % 5 FROM generate_series(1, 50) i;
SELECT counter.add('likes_per_post', k, n) FROM (SELECT post_id AS k, count(*) AS n FROM public.likes GROUP BY 1) s;
-- An hourly-partitioned event table.
CREATE TABLE public.events (
    event_id bigint NOT NULL, link_id int NOT NULL, visitor bigint NOT NULL, occurred_at timestamptz NOT NULL,
    UNIQUE (event_id, occurred_at)) PARTITION BY RANGE (occurred_at);
-- hll and pncounter columns.
CREATE TABLE public.visitors_daily (link_id int PRIMARY KEY, visitors counter.hll(12) NOT NULL);
CREATE TABLE public.page_views (page text PRIMARY KEY, views counter.pncounter NOT NULL);
RESET ROLE;
-- Partition maintenance is for superusers (or whom a DBA grants it).
SELECT counter.partition_manage('public.events', 'occurred_at', premake => 4);
SET ROLE app;
-- A deferred rollup over it.
SELECT counter.rollup_create('events_hourly', 'public.events', 'occurred_at', '{link_id}',
                             distinct_on => '{visitor}', mode => 'deferred');
INSERT INTO public.events SELECT i, i % 13, i % 101, date_trunc('hour', now()) + (i % 3600) * interval '1 second'
FROM generate_series(1, 3000) i;
-- Older hours: the default partition, drained by maintenance below.
INSERT INTO public.events SELECT i, i % 13, i % 101, date_trunc('hour', now()) - interval '5 hours' + (i % 7200) * interval '1 second'
FROM generate_series(3001, 4786) i;
RESET ROLE;
CALL counter.run_maintenance();
CALL counter.run_jobs();   -- the rollup's refresh and the counters' reconciliation: a job history
SET ROLE app;
-- Pending work: dirty hours not refreshed yet, and stragglers in the default partition.
INSERT INTO public.events SELECT i, i % 13, i % 101, date_trunc('hour', now()) + (i % 3600) * interval '1 second'
FROM generate_series(5001, 5400) i;
DELETE FROM public.events WHERE event_id % 50 = 0;
INSERT INTO public.events SELECT i, i % 13, i % 101, date_trunc('hour', now()) - interval '9 hours' + (i % 3600) * interval '1 second'
FROM generate_series(6001, 6079) i;
INSERT INTO public.visitors_daily SELECT link_id, counter.hll_add_agg(visitor, 12) FROM public.events GROUP BY 1;
INSERT INTO public.page_views
SELECT 'p' || i, counter.pncounter_increment(counter.pncounter_increment('{}', i, 'site_a'), i * 2, 'site_b')
FROM generate_series(1, 20) i;
RESET ROLE;
