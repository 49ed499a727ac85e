-- Demo: Citus: the click stream spread over a coordinator and two workers, counted on the shards
-- (doc/citus.md). The same calls as on one node; the counter's and the rollup's
-- state sit beside the rows they count, on the shards.
\set QUIET on
CREATE SCHEMA demo;
CREATE FUNCTION demo.click_stream(events int, since timestamptz, hours int)
RETURNS TABLE (event_id bigint, link_id bigint, visitor_id bigint, kind text, occurred_at timestamptz)
LANGUAGE sql VOLATILE AS $$
    SELECT g, 1 + floor(1000 * random() ^ 3)::bigint, 1 + floor(50000 * random() ^ 2)::bigint,
           CASE WHEN random() < 0.05 THEN 'bot' ELSE 'view' END, since + random() * make_interval(hours => hours)
    FROM generate_series(1, events) g
$$;
SELECT setseed(0.42);
\set QUIET off

-- The event table, distributed by link over 8 shards on the two workers.
CREATE TABLE demo.clicks (event_id bigint NOT NULL, link_id bigint NOT NULL, visitor_id bigint NOT NULL,
                          kind text NOT NULL, occurred_at timestamptz NOT NULL, PRIMARY KEY (link_id, event_id));
SELECT create_distributed_table('demo.clicks', 'link_id', shard_count => 8);

-- A trigger-mode counter of clicks per link without bots, and a trigger-mode hourly
-- rollup with unique visitors: both keyed by the distribution column, so their
-- triggers write only to the shard beside the rows, in the writer's transaction.
SELECT counter.track('citus_clicks_per_link', 'demo.clicks', 'link_id', 'occurred_at', filter => $$kind <> 'bot'$$);
-- Clicks per visitor: keyed by another column than the distribution column, so a
-- visitor's clicks are on every shard; each shard counts its own, in the writer's
-- transaction, anchored to a link value of that shard (doc/citus.md).
SELECT counter.track('citus_clicks_per_visitor', 'demo.clicks', 'visitor_id', 'occurred_at');
SELECT counter.rollup_create('clicks_live', 'demo.clicks', 'occurred_at', '{link_id}', distinct_on => '{visitor_id}');
-- A deferred rollup by kind: a group has rows on every shard, so it is refreshed
-- from partial sums the shards compute.
SELECT counter.rollup_create('clicks_by_kind', 'demo.clicks', 'occurred_at', '{kind}', mode => 'deferred');
-- The same by kind, live: its table is grouped by link_id too (each shard adds
-- its own rows at the writer's commit), and the rollup is the view that sums it.
SELECT counter.rollup_create('clicks_by_kind_live', 'demo.clicks', 'occurred_at', '{kind}', distinct_on => '{visitor_id}');

-- 20,000 clicks through the coordinator, the same batch re-delivered, and
-- 2,000 more written directly through worker 1.
CREATE TEMP TABLE batch AS SELECT * FROM demo.click_stream(20000, '2026-10-06 09:00+00', 3);
INSERT INTO demo.clicks SELECT * FROM batch ON CONFLICT DO NOTHING;
INSERT INTO demo.clicks SELECT * FROM batch ON CONFLICT DO NOTHING;
\connect - - 127.0.0.1 :worker_1
INSERT INTO demo.clicks SELECT event_id + 100000, link_id, visitor_id, kind, occurred_at
FROM demo.click_stream(2000, '2026-10-06 10:00+00', 1);
\connect - - 127.0.0.1 :coordinator
-- 22,000 rows: the re-delivered batch added none (the tag of Citus's INSERT ...
-- SELECT through the coordinator counts the rows it sent, not those inserted).
SELECT count(*) AS clicks FROM demo.clicks;

-- Every link's counter equals count(*) of its rows (read the counter in a
-- statement of its own, never in one query with a distributed table).
CREATE TEMP TABLE truth AS SELECT link_id, count(*) AS n FROM demo.clicks WHERE kind <> 'bot' GROUP BY link_id;
SELECT count(*) AS links, count(*) FILTER (WHERE v.value = t.n) AS exact
FROM truth t JOIN counter.tracked_values v ON v.counter = 'citus_clicks_per_link' AND v.key = t.link_id::text;
SELECT counter.value('citus_clicks_per_link', 1::bigint) AS link_1;
-- So does every visitor's: one read sums the visitor's counts of every shard.
CREATE TEMP TABLE per_visitor AS SELECT visitor_id, count(*) AS n FROM demo.clicks GROUP BY visitor_id;
SELECT count(*) AS visitors, count(*) FILTER (WHERE v.value = t.n) AS exact
FROM per_visitor t JOIN counter.tracked_values v ON v.counter = 'citus_clicks_per_visitor' AND v.key = t.visitor_id::text;

-- The live rollup is exact at each commit, with no refresh: every (link, hour)
-- row and its visitor sketch equal GROUP BY over the rows.
CREATE TEMP TABLE hourly AS
SELECT link_id, date_bin('1 hour', occurred_at, '2000-01-01 00:00+00') AS hour, count(*) AS n,
       counter.hll_add_agg(visitor_id)::bytea AS visitors
FROM demo.clicks GROUP BY 1, 2;
CREATE TEMP TABLE live AS SELECT link_id, hour, count, distinct_visitor_id::bytea AS visitors FROM demo.clicks_live;
SELECT count(*) AS groups, count(*) FILTER (WHERE l.count = h.n AND l.visitors = h.visitors) AS equal_to_group_by
FROM hourly h FULL JOIN live l USING (link_id, hour);

-- The deferred rollup after its refresh (the worker's job; here by hand).
CALL counter.run_steps('rollup_refresh', 'clicks_by_kind');
SELECT kind, sum(count) AS clicks FROM demo.clicks_by_kind GROUP BY kind ORDER BY kind;
-- The live one by kind needs no refresh: the same numbers, and its visitors.
SELECT kind, sum(count) AS clicks, round(counter.hll_cardinality(counter.hll_union_agg(distinct_visitor_id))) AS visitors
FROM demo.clicks_by_kind_live GROUP BY kind ORDER BY kind;

-- Unique visitors per kind, computed on the shards: with this setting Citus
-- refuses any aggregate it would compute from rows pulled to the coordinator.
SET citus.coordinator_aggregation_strategy = 'disabled';
SELECT kind, counter.hll_count_distinct(visitor_id) AS visitors FROM demo.clicks GROUP BY kind ORDER BY kind;
RESET citus.coordinator_aggregation_strategy;

-- Reconciliation compares each shard's rows with the counter's state on that
-- shard, in one snapshot per shard: nothing to repair.
SELECT keys_checked, keys_corrected FROM counter.reconcile('citus_clicks_per_link', all_keys => true);

-- An application-mode counter keyed by the distribution column keeps its state
-- beside the rows too: each add reaches the link's shard in the application's
-- own transaction, committed with its row. The rows from before the counter
-- are taken in by its first reconciliation.
SELECT counter.track('citus_app_clicks', 'demo.clicks', 'link_id', 'occurred_at', mode => 'application');
BEGIN;
INSERT INTO demo.clicks VALUES (900001, 7, 42, 'view', '2026-10-06 11:30+00'), (900002, 7, 43, 'view', '2026-10-06 11:31+00');
SELECT counter.add('citus_app_clicks', 7::bigint, 2, '2026-10-06 11:30+00');
COMMIT;
-- The same through a worker node: the row and its add commit there.
\connect - - 127.0.0.1 :worker_1
BEGIN;
INSERT INTO demo.clicks VALUES (900003, 7, 44, 'view', '2026-10-06 11:32+00');
SELECT counter.add('citus_app_clicks', 7::bigint, 1, '2026-10-06 11:32+00');
COMMIT;
\connect - - 127.0.0.1 :coordinator
SELECT keys_checked, keys_corrected FROM counter.reconcile('citus_app_clicks', all_keys => true);
SELECT counter.value('citus_app_clicks', 7::bigint) AS link_7;
SELECT count(*) AS link_7_rows FROM demo.clicks WHERE link_id = 7;
-- A buffered trigger-mode counter: each shard's trigger adds to the shared
-- memory of its node, not to a delta row; counter.value adds what the key's
-- node holds, and the flush (its job, every second; here by hand) has every
-- node write what it holds to its delta shards. The rows from before the
-- counter are taken in by its first reconciliation.
SELECT counter.track('citus_buffered_clicks', 'demo.clicks', 'link_id', 'occurred_at', buffered => true);
SELECT keys_checked, keys_corrected FROM counter.reconcile('citus_buffered_clicks', all_keys => true);
BEGIN;
INSERT INTO demo.clicks VALUES (900004, 7, 45, 'view', '2026-10-06 11:33+00');
SELECT counter.add('citus_app_clicks', 7::bigint, 1, '2026-10-06 11:33+00');  -- the application's add, as above
COMMIT;
SELECT counter.value('citus_buffered_clicks', 7::bigint) AS link_7;
SELECT count(*) AS link_7_rows FROM demo.clicks WHERE link_id = 7;
SELECT counter.flush('citus_buffered_clicks') > 0 AS flushed;
-- Buffered and keyed by another column than the distribution column (here
-- the visitor): each shard anchors its part of a visitor's count, its node
-- buffers the adds, and counter.value sums every shard's part, what each
-- node holds included.
SELECT counter.track('citus_buffered_visits', 'demo.clicks', 'visitor_id', 'occurred_at', buffered => true);
SELECT keys_checked, keys_corrected FROM counter.reconcile('citus_buffered_visits', all_keys => true);
BEGIN;
INSERT INTO demo.clicks VALUES (900005, 8, 42, 'view', '2026-10-06 11:34+00'), (900006, 9, 42, 'view', '2026-10-06 11:35+00');
SELECT counter.add('citus_app_clicks', 8::bigint, 1, '2026-10-06 11:34+00'),  -- the application's adds, as above
       counter.add('citus_app_clicks', 9::bigint, 1, '2026-10-06 11:35+00');
COMMIT;
SELECT counter.value('citus_buffered_visits', 42::bigint) AS visitor_42,
       (SELECT count(*) FROM demo.clicks WHERE visitor_id = 42) AS visitor_42_rows;
SELECT counter.flush('citus_buffered_visits') >= 0 AS flushed;
-- Read through the worker node as well: there counter.tracked_values lists
-- the counters whose state is beside their rows (all of them), with the
-- coordinator's numbers.
\connect - - 127.0.0.1 :worker_1
SELECT counter, key, value FROM counter.tracked_values WHERE key = '7';
\connect - - 127.0.0.1 :coordinator
