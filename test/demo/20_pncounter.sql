-- Demo: counter.pncounter: two sites count clicks on their own and merge,
-- Demo: in any order and any number of times, into the same totals.
-- Each site (here two tables; in production two primaries) keeps one state
-- per link and only ever adds to its own node; states travel between sites
-- (postgres_fdw, logical replication, a file) and merge with ||.
CREATE TABLE demo.clicks_site_a (link_id bigint PRIMARY KEY, clicks counter.pncounter NOT NULL);
CREATE TABLE demo.clicks_site_b (link_id bigint PRIMARY KEY, clicks counter.pncounter NOT NULL);

-- Site A sees 3000 clicks, site B 2000; each counts them for its own node.
INSERT INTO demo.clicks_site_a
SELECT link_id, counter.pncounter_increment(NULL, count(*), node => 'site_a')
FROM demo.click_stream(3000, '2026-11-30 10:00+00', 1) GROUP BY link_id;
INSERT INTO demo.clicks_site_b
SELECT link_id, counter.pncounter_increment(NULL, count(*), node => 'site_b')
FROM demo.click_stream(2000, '2026-11-30 10:00+00', 1) GROUP BY link_id;

-- Site B later removes 7 clicks on link 1 it found to be from a bot.
UPDATE demo.clicks_site_b SET clicks = counter.pncounter_decrement(clicks, 7, node => 'site_b') WHERE link_id = 1;

-- Merged, the hottest links: each site's share and the total.
SELECT link_id, a.clicks::bigint AS site_a, b.clicks::bigint AS site_b,
       counter.pncounter_value(a.clicks OPERATOR(counter.||) b.clicks) AS merged, a.clicks OPERATOR(counter.||) b.clicks AS state
FROM demo.clicks_site_a a JOIN demo.clicks_site_b b USING (link_id)
ORDER BY merged DESC LIMIT 5;

-- Every click counted once, whichever way the states travel: merging B into
-- A, A into B, or A twice and B three times (re-delivery) gives one answer.
SELECT (SELECT sum(counter.pncounter_value(coalesce(a.clicks OPERATOR(counter.||) b.clicks, a.clicks, b.clicks)))
          FROM demo.clicks_site_a a FULL JOIN demo.clicks_site_b b USING (link_id)) AS a_then_b,
       (SELECT sum(counter.pncounter_value(m)) FROM (
          SELECT counter.pncounter_merge_agg(clicks) AS m FROM (
              SELECT link_id, clicks FROM demo.clicks_site_b
              UNION ALL SELECT link_id, clicks FROM demo.clicks_site_a
              UNION ALL SELECT link_id, clicks FROM demo.clicks_site_a
              UNION ALL SELECT link_id, clicks FROM demo.clicks_site_b
              UNION ALL SELECT link_id, clicks FROM demo.clicks_site_b) s
          GROUP BY link_id) x) AS b_then_a_with_duplicates,
       3000 + 2000 - 7 AS clicks_minus_bot_clicks;

-- What a state holds: per node, increments and decrements.
SELECT n.* FROM demo.clicks_site_a a JOIN demo.clicks_site_b b USING (link_id),
     counter.pncounter_nodes(a.clicks OPERATOR(counter.||) b.clicks) n
WHERE link_id = 1;
