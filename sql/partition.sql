-- Partition maintenance: the SQL surface, errors included. Every call acts
-- as of a fixed time (as_of) so the output never depends on the clock; the
-- session runs in a zone with daylight saving time to show it changes nothing.
CREATE EXTENSION counter_ext;
SET client_min_messages = warning;
SET TimeZone = 'America/New_York';

CREATE ROLE partition_reader;
CREATE TABLE public.events (
    event_id    bigint NOT NULL,
    link_id     bigint NOT NULL,
    occurred_at timestamptz NOT NULL,
    UNIQUE (event_id, occurred_at)
) PARTITION BY RANGE (occurred_at);
CREATE INDEX events_link_idx ON public.events (link_id, occurred_at);
GRANT SELECT, INSERT ON public.events TO partition_reader;

-- Names are UTC whatever the session zone: 22:00 in New York is 03:00 UTC.
SELECT counter.partition_manage('public.events', 'occurred_at', premake => 3,
                                start_at => '2026-07-01 22:00-04', as_of => '2026-07-01 23:10-04') AS created;
SELECT partition, lo AT TIME ZONE 'UTC' AS lo_utc, hi AT TIME ZONE 'UTC' AS hi_utc, is_default
FROM counter.partition_bounds('public.events') ORDER BY lo NULLS LAST;

-- Every partition carries the parent's indexes, unique constraint, owner and privileges.
SELECT c.relname, pg_get_userbyid(c.relowner) = current_user AS same_owner,
       has_table_privilege('partition_reader', c.oid, 'SELECT') AS reader_select,
       has_table_privilege('partition_reader', c.oid, 'INSERT') AS reader_insert,
       has_table_privilege('partition_reader', c.oid, 'DELETE') AS reader_delete,
       (SELECT count(*) FROM pg_index i WHERE i.indrelid = c.oid) AS indexes,
       (SELECT count(*) FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype = 'u') AS unique_constraints
FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid
WHERE i.inhparent = 'public.events'::regclass ORDER BY c.relname;

-- The job the background worker runs.
SELECT kind, target, run_every, enabled FROM counter.jobs WHERE kind = 'partition_maintenance';

-- Nothing to do: idempotent.
SELECT * FROM counter.partition_maintain('public.events', as_of => '2026-07-01 23:10-04');

-- Stragglers land in the default partition; maintenance moves them into
-- proper partitions (made for them) and premakes the future.
INSERT INTO public.events
SELECT g, g % 7, timestamptz '2026-07-01 12:00+00' + g * interval '7 minutes' FROM generate_series(1, 40) g;
SELECT count(*) AS in_default FROM ONLY public.events_default;
SELECT * FROM counter.partition_maintain('public.events', as_of => '2026-07-02 01:10-04');
SELECT count(*) AS in_default, (SELECT count(*) FROM public.events) AS total,
       (SELECT sum(event_id) FROM public.events) AS id_sum
FROM ONLY public.events_default;
SELECT partition, lo AT TIME ZONE 'UTC' AS lo_utc, hi AT TIME ZONE 'UTC' AS hi_utc
FROM counter.partition_bounds('public.events') WHERE NOT is_default ORDER BY lo;

-- State view (the clock-free columns).
SELECT parent, control, part_interval, premake, retention, partitions, oldest AT TIME ZONE 'UTC' AS oldest_utc,
       newest AT TIME ZONE 'UTC' AS newest_utc, default_partition, rows_in_default, rows_staged,
       last_outcome, last_error, last_created, last_dropped, last_moved
FROM counter.partition_status;

-- Retention drops whole partitions older than as_of - retention.
UPDATE counter.partitioned_tables SET retention = interval '6 hours' WHERE parent = 'public.events'::regclass;
SELECT * FROM counter.partition_maintain('public.events', as_of => '2026-07-02 01:10-04');
SELECT min(lo) AT TIME ZONE 'UTC' AS oldest_utc, count(*) AS partitions
FROM counter.partition_bounds('public.events') WHERE NOT is_default;

-- Retention that detaches and keeps the tables.
UPDATE counter.partitioned_tables SET retention = interval '5 hours', retention_keep_table = true
WHERE parent = 'public.events'::regclass;
SELECT * FROM counter.partition_maintain('public.events', as_of => '2026-07-02 01:10-04');
SELECT relname, relispartition FROM pg_class WHERE relname = 'events_p2026070123';

-- The procedure form (commits per step) and the job procedure, on a table
-- managed as of now.
CREATE TABLE public.calls (t timestamptz NOT NULL) PARTITION BY RANGE (t);
SELECT counter.partition_manage('public.calls', 't', premake => 2) AS created;
CALL counter.run_maintenance('public.calls');
CALL counter.run_steps('partition_maintenance', 'public.calls') \gset
SELECT (:'result'::jsonb ->> 'rows')::bigint AS rows_affected \gset
SELECT :rows_affected >= 0 AS job_ran, last_outcome FROM counter.partition_status WHERE parent = 'public.calls'::regclass;
SELECT counter.partition_unmanage('public.calls');

-- Names: parent || _pYYYYMMDDHH24 (MI added below an hour), shortened with a
-- pinned md5 tag past 63 bytes (golden values: they never change).
SELECT counter_internal.partition_name_for('events', '_p2026070103');
SELECT counter_internal.partition_name_for(repeat('e', 60), '_p2026070103');
SELECT counter_internal.partition_name_for(repeat('é', 31), '_default');
SELECT octet_length(counter_internal.partition_name_for(repeat('é', 31), '_p202607010315'));
SELECT counter_internal.partition_suffix('2026-07-01 23:15-04', '15 minutes'), counter_internal.partition_suffix('2026-07-01 23:15-04', '1 day');
SELECT counter_internal.partition_slot('2026-07-01 23:15-04', 3600 * 6) AT TIME ZONE 'UTC' AS six_hour_slot;

-- Bad input: clear errors with SQLSTATEs.
\set VERBOSITY terse
CREATE TABLE public.not_partitioned (t timestamptz);
SELECT counter.partition_manage('public.not_partitioned', 't');
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE public.by_list (t timestamptz, k int) PARTITION BY LIST (k);
SELECT counter.partition_manage('public.by_list', 't');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM counter.partition_bounds('public.by_list');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS no_rows FROM counter.partition_bounds('public.not_partitioned');
CREATE TABLE public.by_date (d date, t timestamptz) PARTITION BY RANGE (d);
SELECT counter.partition_manage('public.by_date', 'd');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.partition_manage('public.by_date', 't');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.partition_manage('public.by_date', 'nope');
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE public.ok_table (t timestamptz) PARTITION BY RANGE (t);
SELECT counter.partition_manage('public.ok_table', 't', interval '7 hours');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.partition_manage('public.ok_table', 't', interval '1 month');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.partition_manage('public.ok_table', 't', interval '5 minutes');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.partition_manage('public.ok_table', 't', interval '-1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.partition_manage('public.ok_table', 't', premake => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.partition_manage('public.ok_table', 't', interval '1 day', retention => interval '12 hours');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.partition_manage('public.ok_table', 't', batch_rows => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.partition_manage('public.ok_table', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.partition_manage('public.events', 'occurred_at');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM counter.partition_maintain('public.ok_table');
\echo :LAST_ERROR_SQLSTATE
CALL counter.run_maintenance('public.ok_table');
\echo :LAST_ERROR_SQLSTATE
CALL counter.run_steps('partition_maintenance', 'public.no_such_table');
\echo :LAST_ERROR_SQLSTATE
SET ROLE partition_reader;
SELECT counter.partition_manage('public.ok_table', 't');
\echo :LAST_ERROR_SQLSTATE
-- any role may still drop its tables (the drop event trigger needs no privilege)
CREATE TEMP TABLE scratch (t timestamptz);
DROP TABLE scratch;
RESET ROLE;
-- A table that was never managed: 15 minutes and 1 day are fine.
SELECT counter.partition_manage('public.ok_table', 't', interval '15 minutes', premake => 1,
                                as_of => '2026-07-01 23:10-04') AS created;
SELECT partition FROM counter.partition_bounds('public.ok_table') ORDER BY lo NULLS LAST;

-- Unmanage: the job goes, the partitions stay.
SELECT counter.partition_unmanage('public.events');
SELECT counter.partition_unmanage('public.events');
SELECT count(*) AS jobs_left FROM counter.jobs WHERE target = 'public.events';
SELECT count(*) > 0 AS partitions_stay FROM pg_inherits WHERE inhparent = 'public.events'::regclass;

SELECT counter.partition_unmanage('public.ok_table');
DROP TABLE public.events, public.calls, public.not_partitioned, public.by_list, public.by_date, public.ok_table,
    public.events_p2026070123;
DROP OWNED BY partition_reader;
DROP ROLE partition_reader;
DROP EXTENSION counter_ext;
