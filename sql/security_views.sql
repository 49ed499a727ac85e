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
-- One role's objects never make another role's read of a view fail: each
-- object is read as its owner, and the owner decides whether that read
-- works (here it revokes its own rights on its counter's state, its rollup
-- table and its default partition). Another reader gets the rest and a
-- WARNING naming the object left out; the owner itself still gets the error.
CREATE ROLE sv_breaker;
CREATE ROLE sv_reader;
CREATE SCHEMA svb AUTHORIZATION sv_breaker;
CREATE SCHEMA svr AUTHORIZATION sv_reader;
SET ROLE sv_breaker;
CREATE TABLE svb.t (k int NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON svb.t (at);
INSERT INTO svb.t VALUES (1, '2026-07-01 10:00+00');
SELECT counter.track('svb_counter', 'svb.t', 'k', 'at') > 0 AS tracked;
SELECT counter.rollup_create('svb_hourly', 'svb.t', 'at', '{k}') IS NOT NULL AS rolled;
CREATE TABLE svb.p (k int NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
SELECT counter.partition_manage('svb.p', 'at', '1 day', premake => 1, as_of => '2026-07-01') > 0 AS managed;
GRANT USAGE ON SCHEMA svb TO PUBLIC;
GRANT SELECT ON svb.t TO PUBLIC;
DO $$
BEGIN
    EXECUTE format('REVOKE ALL ON TABLE %s FROM sv_breaker',
                   (SELECT format('counter_internal.%I', format('tracked_%s_base', c.counter_id))
                    FROM counter.tracked c WHERE c.name = 'svb_counter'));
    EXECUTE format('REVOKE ALL ON TABLE %s FROM sv_breaker',
                   (SELECT r.rollup_table FROM counter.rollups r WHERE r.name = 'svb_hourly'));
    EXECUTE format('REVOKE ALL ON TABLE %s FROM sv_breaker', counter.partition_default('svb.p'));
END
$$;
RESET ROLE;
SET ROLE sv_reader;
CREATE TABLE svr.t (k int NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON svr.t (at);
INSERT INTO svr.t VALUES (7, '2026-07-01 10:00+00');
SELECT counter.track('svr_counter', 'svr.t', 'k', 'at') > 0 AS tracked;
INSERT INTO svr.t VALUES (7, '2026-07-01 11:00+00');
SELECT counter, key, value FROM counter.tracked_values ORDER BY 1, 2;
RESET ROLE;
SET ROLE sv_breaker;
SELECT counter, key, value FROM counter.tracked_values ORDER BY 1, 2;
SELECT name, newest_event_hour FROM counter.rollup_state ORDER BY 1;
SELECT parent, rows_in_default FROM counter.partition_status ORDER BY 1;
RESET ROLE;
-- a superuser reads every role's objects: the broken ones are left out
SELECT counter, key, value FROM counter.tracked_values ORDER BY 1, 2;
SELECT name, newest_event_hour FROM counter.rollup_state ORDER BY 1;
SELECT parent, rows_in_default FROM counter.partition_status ORDER BY 1;
