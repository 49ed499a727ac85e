-- Demo: Hourly partitions for the click stream: a UTC grid made ahead, stragglers drained from the default partition, retention.
CREATE TABLE demo.clicks (
    event_id    uuid NOT NULL,
    link_id     bigint NOT NULL,
    visitor_id  bigint NOT NULL,
    occurred_at timestamptz NOT NULL,
    UNIQUE (event_id, occurred_at)          -- idempotent ingest: every partition gets it
) PARTITION BY RANGE (occurred_at);

-- The session zone has daylight saving time; bounds and names stay UTC.
SET TimeZone = 'America/New_York';
SELECT counter.partition_manage('demo.clicks', 'occurred_at', premake => 6, retention => '36 hours') AS partitions_made;

-- Two days of clicks arrive late: no partition covers those hours yet, so
-- they land in the default partition.
INSERT INTO demo.clicks SELECT * FROM demo.click_stream(5000, date_trunc('hour', now()) - interval '48 hours', 48);
SELECT parent, partitions, rows_in_default, hours_ahead FROM counter.partition_status;

-- One maintenance call (what the background worker or pg_cron runs): it
-- drains the default partition into new hourly partitions in bounded,
-- committed steps, then drops the hours older than the retention.
CALL counter.run_maintenance();
SELECT parent, partitions, oldest, newest, rows_in_default, last_outcome, last_created, last_moved, last_dropped
FROM counter.partition_status;

SELECT partition, lo AT TIME ZONE 'UTC' AS lo_utc, hi AT TIME ZONE 'UTC' AS hi_utc
FROM counter.partition_bounds('demo.clicks') WHERE NOT is_default ORDER BY lo DESC LIMIT 3;
SELECT kind, target, run_every FROM counter.jobs WHERE kind = 'partition_maintenance';
RESET TimeZone;
