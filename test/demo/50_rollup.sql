-- Demo: Hourly rollups: one row per link per UTC hour, exact under re-delivery, late commits and rule changes
-- An hourly-partitioned event table: each event carries a client-made id.
CREATE TABLE demo.rollup_clicks (
    event_id    uuid NOT NULL,
    link_id     bigint NOT NULL,
    visitor_id  bigint NOT NULL,
    occurred_at timestamptz NOT NULL,
    UNIQUE (event_id, occurred_at)
) PARTITION BY RANGE (occurred_at);
SELECT format('CREATE TABLE demo.rollup_clicks_%s PARTITION OF demo.rollup_clicks FOR VALUES FROM (%L) TO (%L)',
              to_char(h, 'HH24'), h, h + interval '1 hour')
FROM generate_series(timestamptz '2026-10-06 09:00+00', timestamptz '2026-10-06 11:00+00', interval '1 hour') h
\gexec
CREATE TABLE demo.rollup_clicks_default PARTITION OF demo.rollup_clicks DEFAULT;

-- A trigger-mode rollup: counts (and a distinct-visitor sketch per hour) land
-- in the writer's own transaction.
SELECT counter.rollup_create('clicks_hourly', 'demo.rollup_clicks', 'occurred_at', '{link_id}', distinct_on => '{visitor_id}');

-- A batch of 3,000 clicks over three hours, then the same batch re-delivered.
CREATE TEMP TABLE batch AS SELECT * FROM demo.click_stream(3000, '2026-10-06 09:00+00', 3);
INSERT INTO demo.rollup_clicks SELECT * FROM batch ORDER BY event_id ON CONFLICT (event_id, occurred_at) DO NOTHING;
INSERT INTO demo.rollup_clicks SELECT * FROM batch ORDER BY event_id ON CONFLICT (event_id, occurred_at) DO NOTHING;
SELECT sum(count) AS counted, (SELECT count(*) FROM demo.rollup_clicks) AS events FROM demo.clicks_hourly;

-- The hottest links per hour.
SELECT link_id, hour, count FROM demo.clicks_hourly ORDER BY count DESC, link_id, hour LIMIT 5;

-- Days assembled from hours in any whole-hour time zone (Taipei: 16:00 to 16:00 UTC);
-- unique visitors merge the hours' sketches (a visitor back every hour counts once).
SELECT period_start, key->>'link_id' AS link_id, count, distinct_counts->>'visitor_id' AS visitors
FROM counter.rollup_totals('clicks_hourly', '2026-10-05 16:00+00', '2026-10-07 16:00+00', 'Asia/Taipei')
ORDER BY count DESC LIMIT 3;

-- A privacy request deletes one visitor's clicks: their hours are marked dirty,
-- and the job (run by the background worker, here by hand) recomputes them.
DELETE FROM demo.rollup_clicks WHERE visitor_id = 1;
SELECT name, mode, newest_event_hour, dirty_hours FROM counter.rollup_state;
CALL counter.run_steps('rollup_refresh', 'clicks_hourly');
SELECT sum(count) AS counted, (SELECT count(*) FROM demo.rollup_clicks) AS events FROM demo.clicks_hourly;

-- A rule change: link 1 is a health check, stop counting it; recompute the day.
SELECT counter.rollup_set_filter('clicks_hourly', 'link_id <> 1');
CALL counter.rollup_refresh('clicks_hourly', '2026-10-06 00:00+00', '2026-10-07 00:00+00');
SELECT count(*) FILTER (WHERE link_id = 1) AS link_1_rows, sum(count) AS counted FROM demo.clicks_hourly;
SELECT name, dirty_hours, last_outcome, last_rows FROM counter.rollup_state;

-- Every committing run (this refresh, a reconciliation, partition maintenance)
-- goes through one commit loop: a transaction per UTC day here; a step that
-- fails is recorded whole, and the days before it stay. With a statement
-- timeout the run ends as partial instead of being cancelled.
SET statement_timeout = '30s';
CALL counter.run_steps('rollup_refresh', 'clicks_hourly', '{"from": "2026-10-05 00:00+00", "to": "2026-10-08 00:00+00"}', NULL);
RESET statement_timeout;
SELECT runner, outcome, info ->> 'outcome' AS refresh, rows_affected FROM counter.job_runs
WHERE kind = 'rollup_refresh' ORDER BY run_id DESC LIMIT 1;

-- Many writers: a buffered rollup. Writers fold their rows into shared memory
-- at commit and never touch (or wait on) the rollup's rows; the job flushes
-- them every refresh_every. Reads through rollup_totals include what is pending.
CREATE TABLE demo.rollup_views (LIKE demo.rollup_clicks INCLUDING ALL);
SELECT counter.rollup_create('views_hourly', 'demo.rollup_views', 'occurred_at', '{link_id}', mode => 'buffered',
                             refresh_every => '5 seconds');
INSERT INTO demo.rollup_views SELECT * FROM batch ORDER BY event_id ON CONFLICT (event_id, occurred_at) DO NOTHING;
INSERT INTO demo.rollup_views SELECT * FROM batch ORDER BY event_id ON CONFLICT (event_id, occurred_at) DO NOTHING;
SELECT (SELECT count(*) FROM demo.views_hourly) AS table_rows, sum(count) AS pending FROM counter.rollup_pending('views_hourly');
SELECT sum(count) AS counted, (SELECT count(*) FROM demo.rollup_views) AS events
FROM counter.rollup_totals('views_hourly', '2026-10-06 00:00+00', '2026-10-07 00:00+00');
SELECT counter.rollup_flush('views_hourly') AS rows_written;
SELECT sum(count) AS counted FROM demo.views_hourly;
