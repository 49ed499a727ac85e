-- Demo: counter.hll, distinct counts that merge: unique visitors per link per hour, rolled into days.
\set QUIET on
SELECT setseed(0.10);
CREATE TABLE demo.hll_clicks AS
    SELECT * FROM demo.click_stream(50000, '2026-11-30 00:00+00', 48);
CREATE TABLE demo.link_hourly (
    link_id  bigint,
    hour     timestamptz,
    visitors counter.hll(14),
    PRIMARY KEY (link_id, hour)
);
\set QUIET off

-- One sketch per link and hour (sparse and tiny while an hour has few visitors).
INSERT INTO demo.link_hourly
SELECT link_id, date_trunc('hour', occurred_at), counter.hll_add_agg(visitor_id)
FROM demo.hll_clicks GROUP BY 1, 2;

SELECT count(*) AS hourly_sketches, pg_size_pretty(sum(pg_column_size(visitors))) AS total_size,
       round(avg(pg_column_size(visitors))) AS avg_bytes
FROM demo.link_hourly;

-- Days from hours: the union counts a visitor who came back in another hour once.
SELECT d.link_id, d.day, d.unique_visitors, d.sum_of_hours_overcounts,
       (SELECT count(DISTINCT visitor_id) FROM demo.hll_clicks c
        WHERE c.link_id = d.link_id AND date_trunc('day', c.occurred_at) = d.day) AS exact
FROM (SELECT link_id, date_trunc('day', hour) AS day,
             round(counter.hll_cardinality(counter.hll_union_agg(visitors))) AS unique_visitors,
             sum(round(counter.hll_cardinality(visitors))) AS sum_of_hours_overcounts
      FROM demo.link_hourly
      WHERE link_id IN (1, 2, 3)
      GROUP BY 1, 2) d
ORDER BY 1, 2;

-- All links, all hours: one union of every sketch, beside the exact answer.
SELECT round(counter.hll_cardinality(counter.hll_union_agg(visitors))) AS unique_visitors_total,
       (SELECT count(DISTINCT visitor_id) FROM demo.hll_clicks) AS exact,
       counter.hll_count_distinct(1) AS one_value
FROM demo.link_hourly;

-- What a sketch looks like inside: sparse while small, dense (Rice-coded) when large.
SELECT x.sketch, (counter.hll_info(s)).* FROM (
    SELECT 'link 1' AS sketch, counter.hll_add_agg(visitor_id) AS s FROM demo.hll_clicks WHERE link_id = 1
    UNION ALL
    SELECT 'all links', counter.hll_add_agg(visitor_id) FROM demo.hll_clicks
) x ORDER BY 1 DESC;

-- Integers of any width hash alike; the same set gives the same bytes.
SELECT counter.hll_add(counter.hll_empty(), 5::smallint)
       OPERATOR(counter.=) counter.hll_add(counter.hll_empty(), 5::bigint) AS widths_agree,
       (SELECT counter.hll_add_agg(visitor_id ORDER BY random()) FROM demo.hll_clicks)
       OPERATOR(counter.=) (SELECT counter.hll_union_agg(visitors) FROM demo.link_hourly) AS same_bytes_however_merged;

-- Many values at once (a batch from an API, say): one call per array.
SELECT counter.hll_cardinality(counter.hll_add_array(visitors, ARRAY[900001, 900002, 900003]::bigint[]))
       - counter.hll_cardinality(visitors) AS three_new_visitors
FROM demo.link_hourly ORDER BY link_id, hour LIMIT 1;
