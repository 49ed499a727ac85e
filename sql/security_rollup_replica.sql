-- A rollup on a logical-replication subscriber (replicated => true), as an
-- unprivileged owner: rows applied with session_replication_role = replica
-- (what a subscription's apply worker does) by a superuser run none of the
-- owner's code in that session; only the hours are marked, as counter_ext's
-- catalog owner. The owner's filter runs at the refresh, as the owner. Bad
-- input is refused with its SQLSTATE; nobody else may make one on the table.
CREATE EXTENSION counter_ext;
SET client_min_messages = warning;
\set VERBOSITY terse
CREATE ROLE rrep_owner LOGIN;
CREATE ROLE rrep_other LOGIN;
GRANT CREATE ON SCHEMA public TO rrep_owner;
CREATE TABLE public.seen (sess text, cur text);
GRANT SELECT, INSERT ON public.seen TO PUBLIC;
CREATE SCHEMA rrep AUTHORIZATION rrep_owner;

SET ROLE rrep_owner;
CREATE TABLE public.ev (id bigint PRIMARY KEY, k int NOT NULL, t timestamptz NOT NULL, hidden boolean NOT NULL);
-- the owner's filter records who runs it
CREATE FUNCTION rrep.counts(h boolean) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.seen VALUES (session_user, current_user);
    RETURN NOT h;
END $$;
\set VERBOSITY sqlstate
SELECT counter.rollup_create('ev_r', 'public.ev', 't', '{k}', replicated => NULL);  -- 22004
\set VERBOSITY terse
SELECT counter.rollup_create('ev_r', 'public.ev', 't', '{k}', filter => 'rrep.counts(hidden)', replicated => true);
RESET ROLE;
SET ROLE rrep_other;
\set VERBOSITY sqlstate
SELECT counter.rollup_create('ev_x', 'public.ev', 't', '{k}', replicated => true);  -- 42501: not the owner
\set VERBOSITY terse
RESET ROLE;
SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'public.ev'::regclass ORDER BY tgname;
SELECT replicated FROM counter.rollups WHERE name = 'ev_r';

-- Applied as a subscription applies: row triggers enabled for replicas only.
SET session_replication_role = replica;
INSERT INTO public.ev SELECT i, i % 3, '2026-11-30 10:00+00'::timestamptz + (i % 120) * interval '1 minute', i % 5 = 0
FROM generate_series(1, 300) i;
UPDATE public.ev SET t = t + interval '3 hours', hidden = NOT hidden WHERE id % 7 = 0;
DELETE FROM public.ev WHERE id % 11 = 0;
RESET session_replication_role;
SELECT count(*) AS ran_in_the_appliers_session FROM public.seen;
-- once per (hour, transaction): each statement above is its own transaction
SELECT hour, count(*) AS marks FROM counter.rollup_dirty GROUP BY 1 ORDER BY 1;

-- The refresh recomputes the hours as the owner.
SET ROLE rrep_owner;
SELECT counter.rollup_refresh_dirty('ev_r') > 0 AS refreshed;
RESET ROLE;
SELECT DISTINCT cur FROM public.seen;
SELECT count(*) AS rows_not_equal_to_group_by FROM (
    (SELECT k, date_trunc('hour', t) AS hour, count(*) AS count FROM public.ev WHERE NOT hidden GROUP BY 1, 2
     EXCEPT SELECT k, hour, count FROM public.ev_r WHERE count > 0)
    UNION ALL
    (SELECT k, hour, count FROM public.ev_r WHERE count > 0
     EXCEPT SELECT k, date_trunc('hour', t), count(*) FROM public.ev WHERE NOT hidden GROUP BY 1, 2)) d;

-- An ordinary write fires the statement triggers only: counted once.
SET ROLE rrep_owner;
INSERT INTO public.ev VALUES (1000, 1, '2026-11-30 10:00+00', false);
SELECT count(*) AS dirty_marks_of_an_ordinary_insert FROM counter.rollup_dirty WHERE rollup_id = (SELECT rollup_id FROM counter.rollups WHERE name = 'ev_r');
SELECT count FROM public.ev_r WHERE k = 1 AND hour = '2026-11-30 10:00+00';
SELECT count(*) FROM public.ev WHERE k = 1 AND NOT hidden AND date_trunc('hour', t) = '2026-11-30 10:00+00';
-- Dropping it drops every trigger.
SELECT counter.rollup_drop('ev_r');
RESET ROLE;
SELECT count(*) AS triggers_left FROM pg_trigger WHERE tgrelid = 'public.ev'::regclass;
DROP TABLE public.ev;
DROP SCHEMA rrep CASCADE;
DROP TABLE public.seen;
REVOKE CREATE ON SCHEMA public FROM rrep_owner;
DROP OWNED BY rrep_owner, rrep_other;
DROP ROLE rrep_owner, rrep_other;
DROP EXTENSION counter_ext;
