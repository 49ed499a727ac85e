-- Every view of schema counter shows a role only the rows of the owners it
-- belongs to, and a leaky function in the role's own WHERE clause sees no
-- other row either: the views that filter rows are security barriers
-- (issue 24; 1.4's tracked_status and rollup_state handed every owner's
-- counter and rollup names to such a function).
CREATE EXTENSION counter_ext;
\set VERBOSITY terse
SET client_min_messages = notice;
CREATE ROLE sv_owner;
CREATE ROLE sv_spy;
CREATE SCHEMA sv AUTHORIZATION sv_owner;
SET ROLE sv_owner;
CREATE TABLE sv.secret_clicks (k int NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON sv.secret_clicks (at);
INSERT INTO sv.secret_clicks VALUES (1, '2026-07-01 10:00+00');
SELECT counter.track('sv_secret_counter', 'sv.secret_clicks', 'k', 'at') > 0 AS tracked;
SELECT counter.rollup_create('sv_secret_rollup', 'sv.secret_clicks', 'at', '{k}') IS NOT NULL AS rolled;
SELECT outcome FROM counter.reconcile('sv_secret_counter', '2026-07-02', all_keys => true);
RESET ROLE;
SET ROLE sv_spy;
CREATE FUNCTION pg_temp.peek(anyelement) RETURNS boolean LANGUAGE plpgsql COST 0.0000001 AS
    $$ BEGIN RAISE NOTICE 'saw %', $1; RETURN true; END $$;
SELECT count(*) FROM counter.tracked_status WHERE pg_temp.peek(counter);
SELECT count(*) FROM counter.tracked_history WHERE pg_temp.peek(counter);
SELECT count(*) FROM counter.tracked_drift WHERE pg_temp.peek(counter);
SELECT count(*) FROM counter.tracked_runs WHERE pg_temp.peek(counter_id);
SELECT count(*) FROM counter.tracked_key_drift_history WHERE pg_temp.peek(counter);
SELECT count(*) FROM counter.rollup_state WHERE pg_temp.peek(name);
SELECT count(*) FROM counter.rollup_status WHERE pg_temp.peek(rollup_id);
SELECT count(*) FROM counter.alerts WHERE pg_temp.peek(target);
SELECT count(*) FROM counter.metrics WHERE pg_temp.peek(object);
-- the owner sees its own
RESET ROLE;
SET ROLE sv_owner;
SELECT (SELECT count(*) FROM counter.tracked_status) AS counters, (SELECT count(*) FROM counter.rollup_state) AS rollups;
RESET ROLE;
