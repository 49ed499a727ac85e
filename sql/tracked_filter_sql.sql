-- Tracked counters with a filter (issue 21): the batch function carries the
-- filter as SQL printed from the stored tree (counter_internal.filter_sql),
-- every name outside pg_catalog qualified, instead of a call to filter_match
-- per row (which looks the tree up in the catalog: no catalog on a Citus
-- worker). Counts equal count(*) with the filter, for an unprivileged owner,
-- whatever the search_path of the session; a renamed column is followed, a
-- dropped one fails loudly; filter_sql is not for PUBLIC.
CREATE EXTENSION counter_ext;
\set ON_ERROR_STOP 0
\set SHOW_CONTEXT never
SET client_min_messages = warning;
SET timezone = 'UTC';
CREATE ROLE tfs_owner;
CREATE ROLE tfs_other;
CREATE SCHEMA tfs AUTHORIZATION tfs_owner;
CREATE SCHEMA tfs_evil AUTHORIZATION tfs_other;
GRANT USAGE ON SCHEMA tfs, tfs_evil TO tfs_owner, tfs_other;

SET ROLE tfs_owner;
CREATE FUNCTION tfs.keep(k bigint) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT $1 % 3 <> 0';
CREATE TYPE tfs.level AS ENUM ('low', 'high');
CREATE TABLE tfs.ev (id bigint, k bigint, at timestamptz NOT NULL, lvl tfs.level NOT NULL, note text);
CREATE INDEX ON tfs.ev (at);
INSERT INTO tfs.ev SELECT g, g % 20, '2024-01-01 10:00', CASE WHEN g % 4 = 0 THEN 'high' ELSE 'low' END::tfs.level,
                          CASE WHEN g % 5 = 0 THEN 'it''s' END
FROM generate_series(1, 2000) g;
SELECT counter.track('tfs_app', 'tfs.ev', 'k', 'at', mode => 'application',
    filter => $$tfs.keep(k) AND lvl = 'low' AND coalesce(note, '') <> 'it''s'$$) > 0 AS ok;
-- the same filter in trigger mode (evaluated from the tree, in C): the two agree
SELECT counter.track('tfs_trg', 'tfs.ev', 'k', 'at',
    filter => $$tfs.keep(k) AND lvl = 'low' AND coalesce(note, '') <> 'it''s'$$) > 0 AS ok;
RESET ROLE;

-- what the batch function carries: the tree printed back, qualified
SELECT counter_internal.filter_sql(source, filter, filter_tree, filter_relid, owner, 'ce_new') AS filter_sql
FROM counter.tracked WHERE name = 'tfs_app';
SELECT p.prosrc LIKE '%filter_match%' AS calls_filter_match,
       strpos(p.prosrc, counter_internal.filter_sql(t.source, t.filter, t.filter_tree, t.filter_relid, t.owner, 'ce_new')) > 0 AS carries_filter
FROM counter.tracked t JOIN pg_proc p ON p.proname = format('tracked_%s_batch', t.counter_id)
WHERE t.name = 'tfs_app';

-- Keys where counter c and count(*) with the filter differ (none when exact).
CREATE FUNCTION public.tfs_mismatches(c text) RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*) FROM (SELECT k, count(*) AS n FROM tfs.ev
                          WHERE tfs.keep(k) AND lvl = 'low' AND coalesce(note, '') <> 'it''s' GROUP BY k) t
    FULL JOIN (SELECT key::bigint AS k, value FROM counter.tracked_values WHERE counter = c) v USING (k)
    WHERE coalesce(t.n, 0) <> coalesce(v.value, 0)
$$;

SET ROLE tfs_owner;
SELECT keys_checked > 0 AS checked, outcome FROM counter.reconcile('tfs_app', '2024-01-02', all_keys => true);
-- (the trigger-mode counter: its rows from before registration, a backfill)
SELECT outcome FROM counter.reconcile('tfs_trg', '2024-01-02', all_keys => true);
SELECT public.tfs_mismatches('tfs_app') AS app_mismatches, public.tfs_mismatches('tfs_trg') AS trg_mismatches;

-- a session whose search_path finds another keep() and another type first:
-- the batch function's names are qualified, so nothing changes
RESET ROLE;
SET ROLE tfs_other;
CREATE FUNCTION tfs_evil.keep(k bigint) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE TYPE tfs_evil.level AS ENUM ('low', 'high');
RESET ROLE;
SET ROLE tfs_owner;
SET search_path = tfs_evil, tfs, public;
INSERT INTO tfs.ev SELECT g, g % 20, '2024-01-01 11:00', 'low', NULL FROM generate_series(2001, 2300) g;
SELECT keys_checked > 0 AS checked, outcome FROM counter.reconcile('tfs_app', '2024-01-02', all_keys => true);
RESET search_path;
SELECT public.tfs_mismatches('tfs_app') AS app_mismatches, public.tfs_mismatches('tfs_trg') AS trg_mismatches;

-- drift injected into the state is found and repaired
RESET ROLE;
SELECT format('counter_internal.tracked_%s_base', counter_id) AS base FROM counter.tracked WHERE name = 'tfs_app' \gset
UPDATE :base SET base = base + 7 WHERE key = 1;
SELECT public.tfs_mismatches('tfs_app') AS app_mismatches_injected;
SET ROLE tfs_owner;
SELECT keys_corrected, max_abs_drift, outcome FROM counter.reconcile('tfs_app', '2024-01-02', all_keys => true);
SELECT public.tfs_mismatches('tfs_app') AS app_mismatches;

-- a column of the filter renamed: the next run makes the batch function again
ALTER TABLE tfs.ev RENAME COLUMN lvl TO level;
INSERT INTO tfs.ev SELECT g, g % 20, '2024-01-01 12:00', 'high', NULL FROM generate_series(2301, 2400) g;
UPDATE tfs.ev SET level = 'high' WHERE id % 7 = 0;
SELECT keys_checked > 0 AS checked, outcome FROM counter.reconcile('tfs_app', '2024-01-02', all_keys => true);
RESET ROLE;
SELECT p.prosrc LIKE '%ce_new.level%' AS follows_name
FROM counter.tracked t JOIN pg_proc p ON p.proname = format('tracked_%s_batch', t.counter_id)
WHERE t.name = 'tfs_app';
SET ROLE tfs_owner;
ALTER TABLE tfs.ev RENAME COLUMN level TO lvl;
SELECT public.tfs_mismatches('tfs_app') AS app_mismatches, public.tfs_mismatches('tfs_trg') AS trg_mismatches;

-- a column of the filter dropped: the run fails with the errcode, not a wrong count
SET ROLE tfs_owner;
ALTER TABLE tfs.ev DROP COLUMN note;
SELECT outcome FROM counter.reconcile('tfs_app', '2024-01-02', all_keys => true);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- filter_sql is not for PUBLIC
SET ROLE tfs_other;
SELECT counter_internal.filter_sql('tfs.ev', 'true', NULL, NULL, 'tfs_owner', 'x');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

SELECT counter.untrack('tfs_app'), counter.untrack('tfs_trg');
DROP SCHEMA tfs, tfs_evil CASCADE;
DROP FUNCTION public.tfs_mismatches(text);
DROP ROLE tfs_owner, tfs_other;
