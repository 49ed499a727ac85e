-- The confused deputy: counter_ext's entry points are SECURITY DEFINER and
-- check who called them. Called from another role's SECURITY DEFINER
-- function, they act for that function's owner (as PostgreSQL ran it), not
-- for the session's role: a role cannot borrow a victim's rights over
-- counters, rollups and partitioned tables by getting the victim to call its
-- function. (With the library preloaded, as here; doc/security.md.)
CREATE EXTENSION counter_ext;
\set ON_ERROR_STOP 0
\set SHOW_CONTEXT never
\set VERBOSITY terse
SET client_min_messages = warning;
SET timezone = 'UTC';
CREATE ROLE cd_victim;
CREATE ROLE cd_attacker;
CREATE SCHEMA cd_v AUTHORIZATION cd_victim;
CREATE SCHEMA cd_a AUTHORIZATION cd_attacker;
GRANT USAGE ON SCHEMA cd_a TO cd_victim;
GRANT USAGE ON SCHEMA cd_v TO cd_attacker;

SET ROLE cd_victim;
CREATE TABLE cd_v.clicks (link int NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON cd_v.clicks (at);
INSERT INTO cd_v.clicks SELECT g % 3, '2026-07-01 10:00+00' FROM generate_series(1, 30) g;
SELECT counter.track('cd_victim_clicks', 'cd_v.clicks', 'link', 'at') IS NOT NULL AS tracked;
CREATE TABLE cd_v.ev (id bigint, at timestamptz NOT NULL) PARTITION BY RANGE (at);
SELECT counter.partition_manage('cd_v.ev', 'at', premake => 1) > 0 AS managed;
CREATE TABLE cd_v.src (k int NOT NULL, at timestamptz NOT NULL);
SELECT counter.rollup_create('cd_victim_hourly', 'cd_v.src', 'at', '{k}') IS NOT NULL AS rolled;
-- the victim's own SECURITY DEFINER helper, which it lets others call
CREATE FUNCTION cd_v.reconcile_mine() RETURNS text LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog AS
    $$ SELECT outcome FROM counter.reconcile('cd_victim_clicks', all_keys => true) $$;
GRANT EXECUTE ON FUNCTION cd_v.reconcile_mine() TO cd_attacker;
RESET ROLE;

-- The attacker's SECURITY DEFINER functions, each doing one thing to the
-- victim's objects; the victim is lured into calling them.
SET ROLE cd_attacker;
CREATE TABLE cd_a.mine (link int NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON cd_a.mine (at);
SELECT counter.track('cd_attacker_mine', 'cd_a.mine', 'link', 'at') IS NOT NULL AS tracked;
CREATE FUNCTION cd_a.untrack() RETURNS void LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog AS
    $$ SELECT counter.untrack('cd_victim_clicks') $$;
CREATE FUNCTION cd_a.reconcile() RETURNS text LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog AS
    $$ SELECT outcome FROM counter.reconcile('cd_victim_clicks') $$;
CREATE FUNCTION cd_a.unmanage() RETURNS void LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog AS
    $$ SELECT counter.partition_unmanage('cd_v.ev') $$;
CREATE FUNCTION cd_a.drop_rollup() RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS
    $$ BEGIN PERFORM counter.rollup_drop('cd_victim_hourly'); END $$;
-- nested: the attacker's definer calls an invoker function that calls counter_ext
CREATE FUNCTION cd_a.inner_untrack() RETURNS void LANGUAGE sql SET search_path = pg_catalog AS
    $$ SELECT counter.untrack('cd_victim_clicks') $$;
CREATE FUNCTION cd_a.outer_untrack() RETURNS void LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog AS
    $$ SELECT cd_a.inner_untrack() $$;
-- and one on its own counter: acts for the attacker, whoever calls
CREATE FUNCTION cd_a.reconcile_own() RETURNS text LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog AS
    $$ SELECT outcome FROM counter.reconcile('cd_attacker_mine') $$;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA cd_a TO cd_victim;
-- the attacker alone is refused, of course
SELECT counter.untrack('cd_victim_clicks');
RESET ROLE;

SET ROLE cd_victim;
SELECT cd_a.untrack();
SELECT cd_a.reconcile();
SELECT cd_a.unmanage();
SELECT cd_a.drop_rollup();
SELECT cd_a.outer_untrack();
SELECT cd_a.reconcile_own() AS attacker_reconciles_its_own;
-- the victim's objects are all still there
SELECT (SELECT count(*) FROM counter.tracked WHERE name = 'cd_victim_clicks') AS counter,
       (SELECT count(*) FROM counter.partitioned_tables WHERE parent = 'cd_v.ev'::regclass) AS managed,
       (SELECT count(*) FROM counter.rollups WHERE name = 'cd_victim_hourly') AS rollup;
RESET ROLE;

-- The other way round works as PostgreSQL means it: the victim's own
-- SECURITY DEFINER helper acts for the victim when the attacker calls it.
SET ROLE cd_attacker;
SELECT cd_v.reconcile_mine() AS victim_helper;
RESET ROLE;
DROP EXTENSION counter_ext CASCADE;
DROP SCHEMA cd_v CASCADE;
DROP SCHEMA cd_a CASCADE;
DROP ROLE cd_victim;
DROP ROLE cd_attacker;
