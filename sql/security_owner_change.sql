-- An ownership change never carries the previous owner's code into the new
-- owner's work (issue 24, item 8). mallory counts her table, and puts a
-- trigger of her own on the counter's hidden delta table; an administrator
-- gives the table to victim. From then on the counter writes its state as
-- victim: mallory's trigger is dropped (it would run as victim), and a
-- counter whose filter calls mallory's function stays mallory's (WARNING).
CREATE EXTENSION counter_ext;
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE ROLE mallory LOGIN;
CREATE ROLE victim LOGIN;
GRANT CREATE ON SCHEMA public TO mallory, victim;
CREATE SCHEMA m AUTHORIZATION mallory;
SET ROLE mallory;
CREATE TABLE m.log (who text, what text);
GRANT INSERT ON m.log TO PUBLIC;
CREATE FUNCTION m.spy() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO m.log VALUES (current_user, TG_TABLE_NAME); RETURN NULL; END $$;
CREATE FUNCTION m.keep(k int) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN INSERT INTO m.log VALUES (current_user, 'filter'); RETURN true; END $$;
GRANT USAGE ON SCHEMA m TO PUBLIC;
CREATE TABLE public.sc_clicks (k int NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON public.sc_clicks (at);
SELECT counter.track('sc_clicks', 'public.sc_clicks', 'k', 'at') IS NOT NULL AS tracked;
SELECT counter.track('sc_filtered', 'public.sc_clicks', 'k', 'at', filter => 'm.keep(k)') IS NOT NULL AS tracked;
SELECT format('counter_internal.tracked_%s_delta', counter_id) AS delta FROM counter.tracked WHERE name = 'sc_clicks' \gset
CREATE TRIGGER spy AFTER INSERT OR UPDATE ON :delta FOR EACH ROW EXECUTE FUNCTION m.spy();
-- (and switches off the trigger that counts the table's writers for reads)
ALTER TABLE :delta DISABLE TRIGGER ce_writers;
-- (and on the state of her filtered counter, which stays hers: it keeps
-- running, as her only)
SELECT format('counter_internal.tracked_%s_delta', counter_id) AS fdelta FROM counter.tracked WHERE name = 'sc_filtered' \gset
CREATE TRIGGER spy AFTER INSERT OR UPDATE ON :fdelta FOR EACH ROW EXECUTE FUNCTION m.spy();
-- and on a rollup's table (hers too, until the move)
SELECT counter.rollup_create('sc_hourly', 'public.sc_clicks', 'at', '{k}') IS NOT NULL AS rolled;
CREATE TRIGGER spy AFTER INSERT OR UPDATE ON public.sc_hourly FOR EACH ROW EXECUTE FUNCTION m.spy();
INSERT INTO public.sc_clicks VALUES (1, now());
SELECT who, what LIKE 'tracked_%' AS state_table, count(*) > 0 AS fired FROM m.log GROUP BY 1, 2 ORDER BY 1, 2;
RESET ROLE;
TRUNCATE m.log;

-- the administrator gives the table away
SET client_min_messages = notice;
ALTER TABLE public.sc_clicks OWNER TO victim;
SET client_min_messages = warning;
SELECT name, owner::text FROM counter.tracked ORDER BY name;
-- counter_ext's own (ce_writers: 31_tracked_code.sql) stays, enabled as made
SELECT count(*) AS triggers_left FROM pg_trigger WHERE tgrelid = :'delta'::regclass AND NOT tgisinternal
   AND tgname <> 'ce_writers';
SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = :'delta'::regclass AND tgname = 'ce_writers';
SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'public.sc_hourly'::regclass AND NOT tgisinternal;
SELECT owner::text FROM counter.rollups WHERE name = 'sc_hourly';
SELECT c.relowner::regrole::text AS state_owner FROM pg_class c WHERE c.oid = :'delta'::regclass;

-- victim writes: mallory's trigger does not run (as victim or anyone); the
-- filtered counter, still mallory's, runs mallory's filter as mallory only
SET ROLE victim;
INSERT INTO public.sc_clicks SELECT g % 3, now() FROM generate_series(1, 30) g;
SELECT outcome FROM counter.reconcile('sc_clicks', all_keys => true);
SELECT counter.value('sc_clicks', 1) = (SELECT count(*) FROM public.sc_clicks WHERE k = 1) AS counts_right;
SELECT (SELECT sum(count) FROM public.sc_hourly) = (SELECT count(*) FROM public.sc_clicks) AS rolled_right;
RESET ROLE;
SELECT who, what FROM m.log WHERE who <> 'mallory' ORDER BY 1, 2;
SELECT DISTINCT who, what FROM m.log ORDER BY 1, 2;
-- the status says so, to the old owner and to the new one
SET ROLE victim;
SELECT counter, owner_not_followed FROM counter.tracked_status ORDER BY counter;
RESET ROLE;
-- every later pass says so again, and settles nothing else wrongly
SELECT counter.follow_owners() AS followed;

RESET ROLE;
DROP EXTENSION counter_ext CASCADE;
DROP TABLE IF EXISTS public.sc_clicks, public.sc_hourly;
DROP SCHEMA m CASCADE;
REVOKE CREATE ON SCHEMA public FROM mallory, victim;
DROP OWNED BY mallory, victim;
DROP ROLE mallory;
DROP ROLE victim;
