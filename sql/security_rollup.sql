-- Rollups under attack (issue 12): every attack runs as an unprivileged role
-- (rsec_attacker: nothing but PUBLIC's rights, its own schema and tables, and
-- INSERT on one table of the victim). Each asserts that the attack fails with
-- a clear SQLSTATE and that nothing changed: no role gained a right, no
-- victim row was written, the victim's rollup is still right. Code the
-- attacker controls records the roles it ran as in public.seen.
CREATE EXTENSION counter_ext;
SET client_min_messages = warning;
\set VERBOSITY terse

CREATE ROLE rsec_victim LOGIN;       -- jobs run in a session of their owner (PostgreSQL 15 needs LOGIN for it)
CREATE ROLE rsec_attacker LOGIN;
GRANT CREATE ON SCHEMA public TO rsec_victim;
CREATE SCHEMA att AUTHORIZATION rsec_attacker;
CREATE TABLE public.seen (tag text, sess text, cur text, note text);
GRANT SELECT, INSERT, DELETE ON public.seen TO PUBLIC;
-- What the attacker's code saw: the role it ran as, and that its session
-- user is either the attacker or a superuser (never printed by name).
CREATE VIEW public.seen_by AS
SELECT DISTINCT tag, cur, note,
       sess = 'rsec_attacker' OR (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = sess) AS sess_known
FROM public.seen;
GRANT SELECT ON public.seen_by TO PUBLIC;

-- The victim: an event table with a trigger-mode rollup (sums) and a
-- deferred one keyed by varchar (no = of its own in pg_catalog).
SET ROLE rsec_victim;
CREATE TABLE public.v_ev (id bigint NOT NULL, k varchar(10) NOT NULL, n int NOT NULL, at timestamptz NOT NULL);
GRANT INSERT ON public.v_ev TO rsec_attacker;
SELECT counter.rollup_create('v_r', 'public.v_ev', 'at', '{k}', sums => '{n}');
SELECT counter.rollup_create('v_d', 'public.v_ev', 'at', '{k}', mode => 'deferred');
INSERT INTO public.v_ev VALUES (1, 'a', 10, '2026-11-30 10:00+00'), (2, 'b', 20, '2026-11-30 10:30+00');
RESET ROLE;
UPDATE counter.jobs SET enabled = false WHERE target = 'v_d';

-- The attacker's schema: functions that try to leave their role, operators
-- that would run in place of pg_catalog's, a table with a rollup.
SET ROLE rsec_attacker;
CREATE FUNCTION att.esc() RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    st text;
BEGIN
    INSERT INTO public.seen VALUES ('filter', session_user, current_user, NULL);
    BEGIN RESET ROLE; st := 'ok'; EXCEPTION WHEN OTHERS THEN st := SQLSTATE; END;
    INSERT INTO public.seen VALUES ('RESET ROLE', session_user, current_user, st);
    BEGIN SET ROLE rsec_victim; st := 'ok'; EXCEPTION WHEN OTHERS THEN st := SQLSTATE; END;
    INSERT INTO public.seen VALUES ('SET ROLE rsec_victim', session_user, current_user, st);
    BEGIN SET SESSION AUTHORIZATION DEFAULT; st := 'ok'; EXCEPTION WHEN OTHERS THEN st := SQLSTATE; END;
    INSERT INTO public.seen VALUES ('SET SESSION AUTHORIZATION', session_user, current_user, st);
    BEGIN EXECUTE 'ALTER ROLE rsec_attacker SUPERUSER'; st := 'ok'; EXCEPTION WHEN OTHERS THEN st := SQLSTATE; END;
    INSERT INTO public.seen VALUES ('ALTER ROLE', session_user, current_user, st);
    BEGIN PERFORM counter.rollup_drop('v_r'); st := 'ok'; EXCEPTION WHEN OTHERS THEN st := SQLSTATE; END;
    INSERT INTO public.seen VALUES ('rollup_drop(v_r)', session_user, current_user, st);
    RETURN true;
END
$$;
CREATE FUNCTION att.eq(varchar, varchar) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.seen VALUES ('att.=', session_user, current_user, NULL);
    RETURN $1::text OPERATOR(pg_catalog.=) $2::text;
END
$$;
CREATE OPERATOR att.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = att.eq);
CREATE FUNCTION att.plus(bigint, bigint) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.seen VALUES ('att.+', session_user, current_user, NULL);
    RETURN $1 OPERATOR(pg_catalog.+) $2 OPERATOR(pg_catalog.+) 1000;
END
$$;
CREATE OPERATOR att.+ (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = att.plus);
CREATE TABLE att.ev (id bigint NOT NULL, k varchar(10) NOT NULL, at timestamptz NOT NULL);

-- A filter cannot escape its parentheses: it is one expression, compiled
-- once into a tree and never pasted into SQL. 'false) OR (true' is the
-- expression (false OR true), so a recompute of one day still reads only
-- that day (pasted into "... AND (filter)" it read every row).
SELECT counter.rollup_create('att_x', 'att.ev', 'at', '{k}', mode => 'deferred', filter => 'false) OR (true')
    IS NOT NULL AS created;
SELECT filter FROM counter.rollups WHERE name = 'att_x';
INSERT INTO att.ev VALUES (10, 'y', '2026-11-29 10:00+00'), (11, 'y', '2026-11-30 10:00+00');
SELECT counter.rollup_recompute('att_x', '2026-11-30 00:00+00', '2026-12-01 00:00+00') AS rows_written;
SELECT k, hour AT TIME ZONE 'UTC' AS hour_utc, count FROM att.att_x;
SELECT counter.rollup_create('att_y', 'att.ev', 'at', '{k}', filter => 'true; ALTER ROLE rsec_attacker SUPERUSER');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_create('att_y', 'att.ev', 'at', '{k}', filter => 'true) UNION SELECT 1 WHERE (true');
\echo :LAST_ERROR_SQLSTATE
DELETE FROM att.ev;

-- Path 4: a filter that runs RESET ROLE when its session user is a superuser.
SELECT counter.rollup_create('att_r', 'att.ev', 'at', '{k}', mode => 'deferred', filter => 'att.esc()') IS NOT NULL AS created;
INSERT INTO att.ev VALUES (1, 'x', '2026-11-30 10:00+00');
-- and a trigger on its own rollup table, fired by every refresh
CREATE FUNCTION att.on_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.seen VALUES ('trigger on rollup table', session_user, current_user, NULL);
    BEGIN RESET ROLE; EXCEPTION WHEN OTHERS THEN
        INSERT INTO public.seen VALUES ('trigger RESET ROLE', session_user, current_user, SQLSTATE);
    END;
    RETURN NULL;
END
$$;
CREATE TRIGGER att_on_write AFTER INSERT OR UPDATE ON att.att_r FOR EACH ROW EXECUTE FUNCTION att.on_write();
RESET ROLE;

-- A superuser runs the attacker's job (as the worker and pg_cron's CALL
-- counter.run_jobs() do): every statement of the refresh runs as the owner,
-- restricted, so nothing the filter or the trigger tries leaves that role.
CALL counter.run_steps('rollup_refresh', 'att_r') \gset
SELECT :'result'::jsonb ->> 'rows' AS rows_affected;
SELECT rolsuper FROM pg_roles WHERE rolname = 'rsec_attacker';
SELECT * FROM public.seen_by ORDER BY tag;
SELECT k, count FROM att.att_r;
SELECT count(*) AS victim_rollup_still_there FROM counter.rollups WHERE name = 'v_r';
DELETE FROM public.seen;
-- The same filter in trigger mode, when a superuser inserts: the trigger
-- applies it as the owner, restricted.
SET ROLE rsec_attacker;
CREATE TABLE att.ev2 (id bigint NOT NULL, k varchar(10) NOT NULL, at timestamptz NOT NULL);
GRANT INSERT ON att.ev2 TO PUBLIC;
SELECT counter.rollup_create('att_t', 'att.ev2', 'at', '{k}', filter => 'att.esc()') IS NOT NULL AS created;
-- and a trigger on its rollup table, fired by the upsert at the writer's commit
CREATE TRIGGER att_t_on_write AFTER INSERT OR UPDATE ON att.att_t FOR EACH ROW EXECUTE FUNCTION att.on_write();
RESET ROLE;
INSERT INTO att.ev2 VALUES (1, 'z', '2026-11-30 10:00+00');
SELECT rolsuper FROM pg_roles WHERE rolname = 'rsec_attacker';
SELECT * FROM public.seen_by ORDER BY tag;
SELECT k, count FROM att.att_t;
DELETE FROM public.seen;
-- the same through the runner a superuser's pg_cron calls
INSERT INTO att.ev VALUES (2, 'x', '2026-11-30 11:00+00');
SELECT job_id AS att_job FROM counter.jobs WHERE kind = 'rollup_refresh' AND target = 'att_r' \gset
CALL counter.run_job(:att_job);
SELECT rolsuper FROM pg_roles WHERE rolname = 'rsec_attacker';
SELECT DISTINCT tag, cur, note FROM public.seen WHERE tag IN ('RESET ROLE', 'ALTER ROLE') ORDER BY tag;
DELETE FROM public.seen;
-- the same through a full recompute
SELECT counter.rollup_recompute('att_r', '2026-11-30 00:00+00', '2026-12-01 00:00+00') >= 0 AS recomputed;
SELECT rolsuper FROM pg_roles WHERE rolname = 'rsec_attacker';
SELECT DISTINCT tag, cur, note FROM public.seen WHERE tag IN ('RESET ROLE', 'ALTER ROLE') ORDER BY tag;
DELETE FROM public.seen;

-- The trigger path plans and runs as the owner under a pinned search_path:
-- a writer with only INSERT and its own = and + first in its path runs
-- neither, and the victim's numbers are right.
SET ROLE rsec_attacker;
SET search_path = att, pg_catalog, public;
INSERT INTO public.v_ev VALUES (3, 'a', 5, '2026-11-30 10:40+00'), (4, 'c', 7, '2026-11-30 11:00+00');
RESET search_path;
RESET ROLE;
SELECT count(*) AS attacker_operators_ran FROM public.seen;
SELECT k, hour AT TIME ZONE 'UTC' AS hour_utc, count, sum_n FROM public.v_r ORDER BY k, hour;
-- the deferred varchar rollup's refresh (the owner's = comes from the key
-- type's btree class, never from a search_path)
SET search_path = att, pg_catalog, public;
SELECT counter.rollup_recompute('v_d', '2026-11-30 00:00+00', '2026-12-01 00:00+00') >= 0 AS recomputed;
RESET search_path;
SELECT count(*) AS attacker_operators_ran FROM public.seen;
SELECT k, count FROM public.v_d ORDER BY k;

-- The view rollup_state reads its newest hours through
-- counter_internal.rollup_newest_hour, which any role may call (PostgreSQL
-- checks EXECUTE on a view's functions as its reader); it answers for the
-- caller's rollups only, and its implementation is no role's to call.
SELECT rollup_id AS v_r_id FROM counter.rollups WHERE name = 'v_r' \gset
SET ROLE rsec_victim;
SELECT name, newest_event_hour FROM counter.rollup_state ORDER BY name;
SELECT counter_internal.rollup_newest_hour(:v_r_id) AS own_newest_hour;
RESET ROLE;
SET ROLE rsec_attacker;
SELECT counter_internal.rollup_newest_hour(:v_r_id) IS NULL AS others_hidden;
SELECT counter_internal.rollup_newest_hour_impl(:v_r_id);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- The catalogs: nobody writes them directly; a role sees its own rows only.
SET ROLE rsec_attacker;
UPDATE counter.rollups SET source = 'public.v_ev'::regclass, rollup_table = 'public.v_r'::regclass WHERE name = 'att_r';
\echo :LAST_ERROR_SQLSTATE
INSERT INTO counter.rollups (rollup_id, name, source, rollup_table, time_column, group_by, mode, refresh_every, owner)
OVERRIDING SYSTEM VALUE VALUES (1000, 'forged', 'public.v_ev', 'public.v_r', 'at', '{k}', 'trigger', '1 minute', 'rsec_attacker');
\echo :LAST_ERROR_SQLSTATE
DELETE FROM counter.rollups WHERE name = 'v_r';
\echo :LAST_ERROR_SQLSTATE
INSERT INTO counter.rollup_dirty VALUES ((SELECT 1), 'infinity');
\echo :LAST_ERROR_SQLSTATE
UPDATE counter.rollup_status SET last_error = 'forged';
\echo :LAST_ERROR_SQLSTATE
SELECT name FROM counter.rollups ORDER BY name;
SELECT count(*) AS visible_status_rows FROM counter.rollup_status;
SELECT count(*) AS visible_dirty_rows FROM counter.rollup_dirty
WHERE rollup_id IN (SELECT rollup_id FROM counter.rollups WHERE name LIKE 'v\_%');
SELECT name FROM counter.rollup_state ORDER BY name;
-- Another owner's rollup: not to drop, refilter, refresh, read or re-enable.
SELECT counter.rollup_drop('v_r');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_set_filter('v_r', 'false');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_recompute('v_r', '2026-11-30 00:00+00', '2026-12-01 00:00+00');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.rollup_refresh_dirty('v_r');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.rollup_id('v_r');
\echo :LAST_ERROR_SQLSTATE
CALL counter.run_steps('rollup_refresh', 'v_d');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM counter.rollup_totals('v_r', '2026-11-30 00:00+00', '2026-12-01 00:00+00');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.rollup_refresh_chunk(1, '2026-11-30 00:00+00', '2026-11-30 01:00+00', NULL, true);
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.rollup_record(1, now(), 'ok', 0, NULL);
\echo :LAST_ERROR_SQLSTATE
-- issue 24, item 5: a rollup that does not exist says exactly what a hidden
-- one says (the same message, the same errcode): nothing tells them apart
SELECT counter_internal.rollup_record(999999, now(), 'ok', 0, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.rollup_refresh_chunk(999999, '2026-11-30 00:00+00', '2026-11-30 01:00+00', NULL, true);
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.rollup_job_sync('v_d');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.exec_as_owner_cmd('rsec_victim', 'DELETE FROM public.v_ev', true);
\echo :LAST_ERROR_SQLSTATE
-- A trigger of the victim's rollup copied onto the attacker's table is refused.
CREATE TABLE att.copy (id bigint NOT NULL, k varchar(10) NOT NULL, n int NOT NULL, at timestamptz NOT NULL);
CREATE TRIGGER fake AFTER INSERT ON att.copy REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.rollup_trigger('1');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
CREATE TRIGGER fake AFTER INSERT ON att.copy REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.rollup_trigger('1');
SET ROLE rsec_attacker;
INSERT INTO att.copy VALUES (9, 'a', 1000, '2026-11-30 10:00+00');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- Nothing changed for the victim.
SELECT rolsuper FROM pg_roles WHERE rolname = 'rsec_attacker';
SELECT r.name, r.source, r.rollup_table, r.owner, r.filter FROM counter.rollups r ORDER BY r.name;
SELECT enabled AS victim_job_still_disabled FROM counter.jobs WHERE target = 'v_d';
SELECT count(*) AS forged_dirty_rows FROM counter.rollup_dirty WHERE hour = 'infinity';
SELECT k, hour AT TIME ZONE 'UTC' AS hour_utc, count, sum_n FROM public.v_r ORDER BY k, hour;
SELECT count(*) AS attacker_operators_ran FROM public.seen;

-- Clean up.
SELECT counter.rollup_drop('att_r');
SELECT counter.rollup_drop('att_t');
SELECT counter.rollup_drop('att_x');
SELECT counter.rollup_drop('v_r');
SELECT counter.rollup_drop('v_d');
DROP TABLE public.v_ev, public.seen CASCADE;
DROP SCHEMA att CASCADE;
REVOKE CREATE ON SCHEMA public FROM rsec_victim;
DROP OWNED BY rsec_victim, rsec_attacker;
DROP ROLE rsec_victim, rsec_attacker;
DROP EXTENSION counter_ext;
