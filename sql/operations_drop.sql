-- DROP and rename leave nothing behind (doc/operations.md): dropping a
-- rollup's table or its source, a managed partitioned table, or everything a
-- role owns (DROP OWNED BY) leaves no catalog row and no job pointing at
-- nothing; renaming a managed partitioned table keeps its job working.
CREATE EXTENSION counter_ext;
\set ON_ERROR_STOP 0
\set SHOW_CONTEXT never
SET client_min_messages = warning;
SET timezone = 'UTC';
CREATE ROLE ops_drop_owner LOGIN;   -- its jobs run in a session of its own (PostgreSQL 15 needs LOGIN for it)
CREATE SCHEMA ops AUTHORIZATION ops_drop_owner;

-- What counter_ext keeps about the objects of this test: catalog rows, jobs,
-- triggers on tables, tables in schema ops (read as a superuser).
CREATE FUNCTION pg_temp.leftovers() RETURNS TABLE (what text, n bigint) LANGUAGE sql AS $$
    SELECT 'rollups', count(*) FROM counter.rollups
    UNION ALL SELECT 'rollup_dirty', count(*) FROM counter.rollup_dirty
    UNION ALL SELECT 'rollup_status', count(*) FROM counter.rollup_status
    UNION ALL SELECT 'partitioned_tables', count(*) FROM counter.partitioned_tables
    UNION ALL SELECT 'partition_staging', count(*) FROM counter.partition_staging
    UNION ALL SELECT 'jobs', count(*) FROM counter.jobs
    UNION ALL SELECT 'triggers', count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
              WHERE c.relnamespace::regnamespace::text = 'ops' AND NOT t.tgisinternal
    UNION ALL SELECT 'tables', count(*) FROM pg_class c WHERE c.relnamespace::regnamespace::text = 'ops' AND c.relkind IN ('r', 'p')
$$;

-- A rollup, made by its owner.
SET ROLE ops_drop_owner;
CREATE TABLE ops.clicks (link_id int NOT NULL, at timestamptz NOT NULL);
SELECT counter.rollup_create('clicks_hourly', 'ops.clicks', 'at', '{link_id}', mode => 'deferred') IS NOT NULL AS made;
INSERT INTO ops.clicks VALUES (1, '2026-01-01 10:00+00'), (2, '2026-01-01 11:00+00');
RESET ROLE;
SELECT * FROM pg_temp.leftovers();
-- The owner drops the rollup table: the rollup is gone, its triggers and its
-- job too; the source stays and takes writes.
SET ROLE ops_drop_owner;
DROP TABLE ops.clicks_hourly;
INSERT INTO ops.clicks VALUES (3, '2026-01-01 12:00+00');
SELECT count(*) AS clicks FROM ops.clicks;
RESET ROLE;
SELECT * FROM pg_temp.leftovers();
-- Made again, then the source is dropped: the rollup goes with it.
SET ROLE ops_drop_owner;
SELECT counter.rollup_create('clicks_hourly', 'ops.clicks', 'at', '{link_id}') IS NOT NULL AS made;
DROP TABLE ops.clicks;
RESET ROLE;
SELECT * FROM pg_temp.leftovers();

-- A managed partitioned table, renamed: its job follows and still works.
CREATE TABLE ops.events (id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
ALTER TABLE ops.events OWNER TO ops_drop_owner;
SELECT counter.partition_manage('ops.events', 'at', premake => 2) > 0 AS made;
SELECT kind, target FROM counter.jobs;
ALTER TABLE ops.events RENAME TO events_renamed;
SELECT kind, target FROM counter.jobs;
SELECT job_id AS job FROM counter.jobs WHERE kind = 'partition_maintenance' \gset
-- rows_affected: 0, or 1 when an hour turned since partition_manage
CALL counter.run_job(:job) \gset
SELECT :rows_affected <= 1 AS kept_ahead;
SELECT outcome, sqlstate FROM counter.job_runs WHERE job_id = :job ORDER BY run_id;
CREATE SCHEMA ops2;
GRANT USAGE, CREATE ON SCHEMA ops2 TO ops_drop_owner;   -- the job runs as the owner, who makes partitions there
ALTER TABLE ops.events_renamed SET SCHEMA ops2;
ALTER SCHEMA ops2 RENAME TO "Ops 3";
SELECT kind, target FROM counter.jobs;
CALL counter.run_job(:job) \gset
SELECT :rows_affected <= 1 AS kept_ahead;
SELECT outcome, sqlstate FROM counter.job_runs WHERE job_id = :job ORDER BY run_id;
-- Unmanaged after the renames: the job goes.
SELECT counter.partition_unmanage('"Ops 3".events_renamed');
SELECT * FROM pg_temp.leftovers();
SELECT counter.partition_manage('"Ops 3".events_renamed', 'at', premake => 2) > 0 AS made;
-- Renamed, then dropped: nothing left.
ALTER TABLE "Ops 3".events_renamed RENAME TO events_again;
DROP TABLE "Ops 3".events_again;
SELECT * FROM pg_temp.leftovers();

-- DROP OWNED BY: a role's rollups and managed tables go, with their jobs.
SET ROLE ops_drop_owner;
CREATE TABLE ops.views (page text NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
SELECT counter.rollup_create('views_hourly', 'ops.views', 'at', '{page}', mode => 'deferred') IS NOT NULL AS made;
RESET ROLE;
SELECT counter.partition_manage('ops.views', 'at', premake => 2) > 0 AS made;
INSERT INTO ops.views VALUES ('/a', now()), ('/b', now() - interval '30 days');
SELECT * FROM pg_temp.leftovers();
DROP OWNED BY ops_drop_owner;
SELECT * FROM pg_temp.leftovers();
DROP ROLE ops_drop_owner;
DROP SCHEMA "Ops 3";
DROP EXTENSION counter_ext;
