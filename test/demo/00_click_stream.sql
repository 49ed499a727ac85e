-- Demo: The click stream every section uses, and what counter_ext is.
\set QUIET on
CREATE EXTENSION counter_ext;
CREATE SCHEMA demo;

-- Clicks on short links: a few links are hot (link ids skew low), visitors
-- return, and every event carries a client-made id so re-delivery is harmless.
CREATE FUNCTION demo.click_stream(events int, since timestamptz, hours int)
RETURNS TABLE (event_id uuid, link_id bigint, visitor_id bigint, occurred_at timestamptz)
LANGUAGE sql VOLATILE AS $$
    SELECT gen_random_uuid(),
           1 + floor(1000 * random() ^ 3)::bigint,
           1 + floor(50000 * random() ^ 2)::bigint,
           since + random() * make_interval(hours => hours)
    FROM generate_series(1, events)
$$;
SELECT setseed(0.42);
\set QUIET off

SELECT counter.version() AS counter_ext_version, counter.preloaded() AS worker_can_run;

SELECT p.oid::regprocedure AS "counter_ext SQL functions"
FROM pg_proc p
JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'counter_ext'
ORDER BY p.oid::regprocedure::text;

-- A taste of the stream: 5 clicks from a generated hour.
SELECT * FROM demo.click_stream(5, date_trunc('hour', now()), 1) ORDER BY occurred_at;
