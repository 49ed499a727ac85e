-- A counted table given to another role (ALTER TABLE ... OWNER TO, REASSIGN
-- OWNED): its tracked counters, rollups and jobs become the new owner's
-- (their checks, their state and rollup tables, the role their jobs run
-- as), and the old owner keeps no right over them.
CREATE EXTENSION counter_ext;
\set VERBOSITY terse
SET client_min_messages = warning;
SET timezone = 'UTC';
CREATE ROLE ow_a LOGIN;
CREATE ROLE ow_b LOGIN;
CREATE ROLE ow_c LOGIN;
GRANT CREATE ON SCHEMA public TO ow_a, ow_b, ow_c;
SET ROLE ow_a;
CREATE TABLE public.ow_clicks (link int NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON public.ow_clicks (at);
INSERT INTO public.ow_clicks SELECT g % 3, now() - interval '2 hours' FROM generate_series(1, 30) g;
SELECT counter.track('ow_tracked', 'public.ow_clicks', 'link', 'at') IS NOT NULL AS tracked;
SELECT counter.rollup_create('ow_hourly', 'public.ow_clicks', 'at', '{link}') IS NOT NULL AS rolled;
CREATE TABLE public.ow_ev (id bigint, at timestamptz NOT NULL) PARTITION BY RANGE (at);
SELECT counter.partition_manage('public.ow_ev', 'at', premake => 1) > 0 AS managed;
RESET ROLE;
CREATE VIEW public.ow_owners AS
SELECT 'tracked' AS what, owner::text FROM counter.tracked WHERE name = 'ow_tracked'
UNION ALL SELECT 'state tables', string_agg(DISTINCT c.relowner::regrole::text, ',') FROM pg_class c
    WHERE c.relname IN (SELECT format('tracked_%s_%s', counter_id, p) FROM counter.tracked, unnest('{base,delta}'::text[]) p
                        WHERE name = 'ow_tracked')
UNION ALL SELECT 'rollup', owner::text FROM counter.rollups WHERE name = 'ow_hourly'
UNION ALL SELECT 'rollup table', c.relowner::regrole::text FROM counter.rollups r JOIN pg_class c ON c.oid = r.rollup_table
    WHERE r.name = 'ow_hourly'
UNION ALL SELECT 'job ' || kind, owner::text FROM counter.jobs
    WHERE target IN ('ow_tracked', 'ow_hourly', 'public.ow_ev');
SELECT * FROM public.ow_owners ORDER BY what;

ALTER TABLE public.ow_clicks OWNER TO ow_b;
ALTER TABLE public.ow_ev OWNER TO ow_b;   -- and its partitions (OWNER TO does not recurse):
DO $$
DECLARE p regclass;
BEGIN
    FOR p IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'public.ow_ev'::regclass LOOP
        EXECUTE format('ALTER TABLE %s OWNER TO ow_b', p);
    END LOOP;
END $$;
SELECT * FROM public.ow_owners ORDER BY what;
-- the old owner has no right left over them; the new one has them all
SET ROLE ow_a;
SELECT counter.reconcile('ow_tracked');
CALL counter.rollup_refresh('ow_hourly', date_trunc('hour', now()) - interval '3 hours', date_trunc('hour', now()));
SELECT counter.rollup_drop('ow_hourly');
RESET ROLE;
SET ROLE ow_b;
SELECT outcome FROM counter.reconcile('ow_tracked', all_keys => true);
INSERT INTO public.ow_clicks SELECT 1, now() - interval '1 hour' FROM generate_series(1, 5);
SELECT (SELECT sum(count) FROM public.ow_hourly) AS rolled_up, (SELECT count(*) FROM public.ow_clicks) AS rows,
       counter.value('ow_tracked', 1) AS link_1, (SELECT count(*) FROM public.ow_clicks WHERE link = 1) AS link_1_rows;
RESET ROLE;
-- the jobs run as the new owner
SELECT job_id AS reconcile_job FROM counter.jobs WHERE kind = 'reconcile' AND target = 'ow_tracked' \gset
SELECT job_id AS rollup_job FROM counter.jobs WHERE kind = 'rollup_refresh' AND target = 'ow_hourly' \gset
SELECT job_id AS partition_job FROM counter.jobs WHERE kind = 'partition_maintenance' AND target = 'public.ow_ev' \gset
CALL counter.run_job(:reconcile_job);
CALL counter.run_job(:rollup_job);
-- 0, or 1 when an hour turned since partition_manage (the next slot made)
CALL counter.run_job(:partition_job) \gset
SELECT :rows_affected <= 1 AS partitions_kept_ahead;
SELECT kind, outcome, run_as::text FROM counter.job_runs WHERE runner <> 'call' ORDER BY run_id;

-- REASSIGN OWNED moves everything of ow_b to ow_c: counter_ext follows
-- (PostgreSQL fires no event trigger for REASSIGN OWNED: the job runner
-- makes every target follow before it hands out jobs, and anyone may call
-- counter.follow_owners)
REASSIGN OWNED BY ow_b TO ow_c;
SELECT * FROM public.ow_owners ORDER BY what;
CALL counter.run_job(:reconcile_job);
SELECT * FROM public.ow_owners ORDER BY what;
SET ROLE ow_c;
CALL counter.rollup_refresh('ow_hourly', date_trunc('hour', now()) - interval '3 hours', date_trunc('hour', now()));
RESET ROLE;
SELECT counter.follow_owners() AS nothing_left;
-- after REASSIGN OWNED without a job run, a call does the same
SET ROLE ow_c;
CREATE TABLE public.ow_more (link int NOT NULL, at timestamptz NOT NULL);
SELECT counter.track('ow_more', 'public.ow_more', 'link', 'at') IS NOT NULL AS tracked;
RESET ROLE;
REASSIGN OWNED BY ow_c TO ow_a;
SELECT owner::text FROM counter.tracked WHERE name = 'ow_more';
-- bad input
SELECT counter.follow_owners('no_such_kind', 'x');
SELECT counter.follow_owners('reconcile', NULL);
SELECT counter.follow_owners() > 0 AS followed;
SELECT owner::text FROM counter.tracked WHERE name = 'ow_more';
SELECT kind, outcome, run_as::text FROM counter.job_runs WHERE runner <> 'call' ORDER BY run_id DESC LIMIT 1;

-- Any legal role name: capitals, a space, quotes (1.4 quoted the name twice:
-- role ""Bob"" does not exist; after REASSIGN OWNED every job pass failed).
CREATE ROLE "Bob Smith" LOGIN;
CREATE ROLE "O'Hara ""Q""" LOGIN;
GRANT CREATE ON SCHEMA public TO "Bob Smith";
SET ROLE ow_a;
CREATE TABLE public.ow_bob (link int NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON public.ow_bob (at);
INSERT INTO public.ow_bob SELECT g % 3, now() - interval '2 hours' FROM generate_series(1, 12) g;
SELECT counter.track('ow_bob', 'public.ow_bob', 'link', 'at') IS NOT NULL AS tracked;
SELECT counter.rollup_create('ow_bob_hourly', 'public.ow_bob', 'at', '{link}') IS NOT NULL AS rolled;
CREATE TABLE public.ow_bob_ev (id bigint, at timestamptz NOT NULL) PARTITION BY RANGE (at);
GRANT SELECT ON public.ow_bob_ev TO "O'Hara ""Q""";
SELECT counter.partition_manage('public.ow_bob_ev', 'at', premake => 1) > 0 AS managed;
RESET ROLE;
ALTER TABLE public.ow_bob OWNER TO "Bob Smith";
ALTER TABLE public.ow_bob_ev OWNER TO "Bob Smith";
DO $$
DECLARE p regclass;
BEGIN
    FOR p IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'public.ow_bob_ev'::regclass LOOP
        EXECUTE format('ALTER TABLE %s OWNER TO "Bob Smith"', p);
    END LOOP;
END $$;
SELECT 'tracked' AS what, owner::text FROM counter.tracked WHERE name = 'ow_bob'
UNION ALL SELECT 'state tables', string_agg(DISTINCT c.relowner::regrole::text, ',') FROM pg_class c
    WHERE c.relname IN (SELECT format('tracked_%s_%s', counter_id, p) FROM counter.tracked, unnest('{base,delta}'::text[]) p
                        WHERE name = 'ow_bob')
UNION ALL SELECT 'rollup', owner::text FROM counter.rollups WHERE name = 'ow_bob_hourly'
UNION ALL SELECT 'rollup table', relowner::regrole::text FROM pg_class WHERE oid = 'public.ow_bob_hourly'::regclass
ORDER BY 1;
SET ROLE "Bob Smith";
INSERT INTO public.ow_bob SELECT 1, now() - interval '1 hour' FROM generate_series(1, 4);
SELECT outcome FROM counter.reconcile('ow_bob', all_keys => true);
SELECT counter.value('ow_bob', 1) = (SELECT count(*) FROM public.ow_bob WHERE link = 1) AS counts_right;
-- partitions made for the new owner get the parent's grants (to a quoted name too)
SELECT created > 0 AS made, outcome, error FROM counter.partition_maintain('public.ow_bob_ev', now() + interval '3 hours');
RESET ROLE;
SELECT bool_and(has_table_privilege((SELECT oid FROM pg_roles WHERE rolname = 'O''Hara "Q"'), b.partition, 'SELECT')) AS grants_kept
FROM counter.partition_bounds('public.ow_bob_ev') b
WHERE b.partition::text <> 'ow_bob_ev_default' AND b.lo > now();
-- REASSIGN OWNED (no event trigger) to a name with quotes: the job pass
-- settles it, and one object that cannot be settled (a filter calling a
-- function the new owner does not own) stops no other
CREATE FUNCTION public.ow_keep(int) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';
ALTER FUNCTION public.ow_keep(int) OWNER TO ow_b;
SET ROLE "Bob Smith";
CREATE TABLE public.ow_bob2 (link int NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON public.ow_bob2 (at);
SELECT counter.track('ow_bob2', 'public.ow_bob2', 'link', 'at', filter => 'public.ow_keep(link)') IS NOT NULL AS tracked;
RESET ROLE;
REASSIGN OWNED BY "Bob Smith" TO "O'Hara ""Q""";
CALL counter.run_jobs();
SELECT name, owner::text FROM counter.tracked WHERE name LIKE 'ow_bob%' ORDER BY name;
SELECT owner::text FROM counter.rollups WHERE name = 'ow_bob_hourly';
SELECT kind, target, owner::text FROM counter.jobs WHERE target IN ('ow_bob', 'ow_bob_hourly', 'public.ow_bob_ev', 'ow_bob2')
ORDER BY kind, target;
SET ROLE "O'Hara ""Q""";
SELECT outcome FROM counter.reconcile('ow_bob', all_keys => true);
RESET ROLE;
DROP TABLE public.ow_bob, public.ow_bob2, public.ow_bob_ev CASCADE;
DROP FUNCTION public.ow_keep(int);
REVOKE CREATE ON SCHEMA public FROM "Bob Smith";
DROP OWNED BY "Bob Smith", "O'Hara ""Q""";
DROP ROLE "Bob Smith";
DROP ROLE "O'Hara ""Q""";

DROP VIEW public.ow_owners;
DROP EXTENSION counter_ext CASCADE;
DROP TABLE public.ow_clicks, public.ow_ev, public.ow_more CASCADE;
REVOKE CREATE ON SCHEMA public FROM ow_a, ow_b, ow_c;
DROP OWNED BY ow_a, ow_b, ow_c;
DROP ROLE ow_a;
DROP ROLE ow_b;
DROP ROLE ow_c;
