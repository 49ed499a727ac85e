-- A writer's settings never reach the owner's work (issue 24, item 4). A
-- role with INSERT only writes the same rows into two identical tables of
-- a victim, each with a rollup (distinct_on a number and a text[] column,
-- a filter that formats the event time) and a tracked counter with the
-- same filter: into the first with its session's defaults, into the
-- second after setting every counter_ext.* setting it can change and every
-- setting that changes how values are parsed, formatted or sent. What is
-- stored must be the same, byte for byte.
CREATE EXTENSION counter_ext;
\set ON_ERROR_STOP 0
\set SHOW_CONTEXT never
\set VERBOSITY terse
SET client_min_messages = warning;
SET timezone = 'UTC';
CREATE ROLE sec_s_victim;
CREATE ROLE sec_s_writer;
CREATE SCHEMA sec_s AUTHORIZATION sec_s_victim;
GRANT USAGE ON SCHEMA sec_s TO sec_s_writer;

SET ROLE sec_s_victim;
CREATE TABLE sec_s.ev_ref (id bigint, k text NOT NULL, u int NOT NULL, tags text[] NOT NULL, at timestamptz NOT NULL);
CREATE TABLE sec_s.ev_odd (LIKE sec_s.ev_ref);
CREATE INDEX ON sec_s.ev_ref (at);
CREATE INDEX ON sec_s.ev_odd (at);
-- the filter turns the event time into text: it depends on TimeZone
SELECT counter.rollup_create('r_ref', 'sec_s.ev_ref', 'at', '{k}', distinct_on => '{u,tags}',
                             filter => $$to_char(at, 'HH24') >= '10'$$) IS NOT NULL AS ok;
SELECT counter.rollup_create('r_odd', 'sec_s.ev_odd', 'at', '{k}', distinct_on => '{u,tags}',
                             filter => $$to_char(at, 'HH24') >= '10'$$) IS NOT NULL AS ok;
SELECT counter.track('t_ref', 'sec_s.ev_ref', 'k', 'at', filter => $$to_char(at, 'HH24') >= '10'$$) > 0 AS ok;
SELECT counter.track('t_odd', 'sec_s.ev_odd', 'k', 'at', filter => $$to_char(at, 'HH24') >= '10'$$) > 0 AS ok;
SELECT name, hll_precision FROM counter.rollups ORDER BY name;
GRANT INSERT ON sec_s.ev_ref, sec_s.ev_odd TO sec_s_writer;
RESET ROLE;

-- ---------------------------------------------------------------- the settings a writer can change
-- Of counter_ext's own settings, a session may set hll_default_precision
-- (code run for an owner sees 14) and view_lock_timeout (1.8: how long its
-- own reads of the views that list many owners' objects wait for another
-- owner's lock; nothing else reads it); the others are refused (42501, 55P02).
SET ROLE sec_s_writer;
CREATE FUNCTION pg_temp.try_set(n text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config(n, current_setting(n), false);
    RETURN 'settable';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;
SELECT name, pg_temp.try_set(name) FROM pg_settings WHERE name LIKE 'counter_ext.%' ORDER BY name;

-- ---------------------------------------------------------------- the same rows, two sessions' settings
-- 09:00 to 12:59 UTC: the filter keeps the hours from 10 UTC on; in
-- Asia/Kathmandu (+05:45) every one of them would pass.
INSERT INTO sec_s.ev_ref
SELECT g, 'k' || (g % 3), g % 50, ARRAY['é' || (g % 40), 'x'], '2024-03-01 09:00+00'::timestamptz + g * interval '1 minute'
FROM generate_series(0, 239) g;
SET counter_ext.hll_default_precision = 4;
SET TimeZone = 'Asia/Kathmandu';
SET DateStyle = 'SQL, DMY';
SET IntervalStyle = 'sql_standard';
SET extra_float_digits = -15;
SET bytea_output = 'escape';
SET client_encoding = 'LATIN1';
SET search_path = sec_s, public;
INSERT INTO sec_s.ev_odd
SELECT g, 'k' || (g % 3), g % 50, ARRAY[convert_from('\xc3a9', 'UTF8') || (g % 40), 'x'],
       '2024-03-01 09:00+00'::timestamptz + g * interval '1 minute'
FROM generate_series(0, 239) g;
RESET ALL;
RESET ROLE;
SET timezone = 'UTC';
SET client_min_messages = warning;

-- ---------------------------------------------------------------- what was stored
SELECT r.k, r.hour, r.count, o.count AS count_odd,
       r.distinct_u::bytea = o.distinct_u::bytea AS same_u, r.distinct_tags::bytea = o.distinct_tags::bytea AS same_tags,
       round(counter.hll_cardinality(o.distinct_u)) AS distinct_u, round(counter.hll_cardinality(o.distinct_tags)) AS distinct_tags
FROM sec_s.r_ref r FULL JOIN sec_s.r_odd o USING (k, hour)
ORDER BY 1, 2;
SELECT key, value, counter.value('t_odd', key) AS value_odd,
       (SELECT count(*) FROM sec_s.ev_odd e WHERE e.k = key AND e.at >= '2024-03-01 10:00+00') AS rows
FROM counter.tracked_values WHERE counter = 't_ref' ORDER BY key;
-- and a recompute, as the owner with the defaults, agrees with both
SET ROLE sec_s_victim;
SELECT counter.rollup_recompute('r_odd', '2024-03-01', '2024-03-02') >= 0 AS recomputed;
SELECT (SELECT outcome FROM counter.reconcile('t_odd', all_keys => true)) AS outcome,
       (SELECT count(*) FROM counter.tracked_key_drift) AS drifted_keys;
RESET ROLE;
SELECT count(*) AS rows_differing FROM sec_s.r_ref r FULL JOIN sec_s.r_odd o USING (k, hour)
WHERE r.count IS DISTINCT FROM o.count OR r.distinct_u::bytea IS DISTINCT FROM o.distinct_u::bytea
   OR r.distinct_tags::bytea IS DISTINCT FROM o.distinct_tags::bytea;

DROP FUNCTION pg_temp.try_set(text);
DROP EXTENSION counter_ext CASCADE;
DROP SCHEMA sec_s CASCADE;
DROP ROLE sec_s_victim;
DROP ROLE sec_s_writer;
