-- Tracked counters under attack (doc/security.md, issue 12): every attack a
-- role with no rights, a role with INSERT only, or the owner of a counted
-- table can try. Each attack function says who ran it (RAISE NOTICE with
-- session_user and current_user) and then tries to make its role a
-- superuser; after each, the roles are checked: nobody gained anything, and
-- the numbers are still count(*).
CREATE EXTENSION counter_ext;
\set ON_ERROR_STOP 0
\set SHOW_CONTEXT never
SET client_min_messages = notice;
SET timezone = 'UTC';
CREATE ROLE sec_t_victim;
CREATE ROLE sec_t_attacker;
CREATE ROLE sec_t_writer;
CREATE SCHEMA sec_t_v AUTHORIZATION sec_t_victim;
CREATE SCHEMA sec_t_a AUTHORIZATION sec_t_attacker;
GRANT USAGE ON SCHEMA sec_t_v TO sec_t_writer, sec_t_attacker;

-- Who has gained what: the one check after every attack.
CREATE FUNCTION public.sec_t_gained() RETURNS text LANGUAGE sql AS $$
    SELECT coalesce(string_agg(rolname, ', ' ORDER BY rolname), 'nobody') FROM pg_roles
    WHERE rolname LIKE 'sec_t_%' AND (rolsuper OR rolcreaterole OR rolbypassrls)
$$;

-- The victim: a table counted in trigger mode with a filter, and one in
-- application mode with text keys.
SET ROLE sec_t_victim;
CREATE TABLE sec_t_v.posts (id bigint, author bigint, at timestamptz NOT NULL, hidden boolean NOT NULL DEFAULT false);
CREATE INDEX ON sec_t_v.posts (at);
CREATE TABLE sec_t_v.calls (api text, at timestamptz NOT NULL);
CREATE INDEX ON sec_t_v.calls (at);
SELECT counter.track('sec_t_posts', 'sec_t_v.posts', 'author', 'at', filter => 'NOT hidden') > 0 AS ok;
SELECT counter.track('sec_t_calls', 'sec_t_v.calls', 'api', 'at', mode => 'application') > 0 AS ok;
INSERT INTO sec_t_v.posts SELECT g, g % 3, '2024-01-01', g % 10 = 0 FROM generate_series(1, 30) g;
SELECT counter.add('sec_t_calls', 'search'::text, 5, '2024-01-01');
GRANT INSERT ON sec_t_v.posts, sec_t_v.calls TO sec_t_writer;
RESET ROLE;

-- ---------------------------------------------------------------- 1. a user-defined cast on the key
-- A role with no rights passes a key of its own type with an implicit cast
-- to text: the cast must never run (the key is refused as a type mismatch).
SET ROLE sec_t_attacker;
CREATE TYPE sec_t_a.t AS (a int);
CREATE FUNCTION sec_t_a.f(sec_t_a.t) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'cast ran as % / %', session_user, current_user;
    EXECUTE 'ALTER ROLE sec_t_attacker SUPERUSER';
    RETURN 'search';
END $$;
CREATE CAST (sec_t_a.t AS text) WITH FUNCTION sec_t_a.f(sec_t_a.t) AS IMPLICIT;
SELECT counter.add('sec_t_calls', ROW(1)::sec_t_a.t);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.value('sec_t_calls', ROW(1)::sec_t_a.t);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM counter.values_of('sec_t_calls', ARRAY[ROW(1)::sec_t_a.t]);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- even a superuser's call does not run the cast
SELECT counter.value('sec_t_calls', ROW(1)::sec_t_a.t);
\echo :LAST_ERROR_SQLSTATE
SELECT public.sec_t_gained() AS gained;

-- ---------------------------------------------------------------- 2. operators from the caller's search_path
-- A writer (INSERT only) puts its own + and = first on its search_path: the
-- upsert of add and the trigger's plans must not use them.
CREATE SCHEMA sec_t_w AUTHORIZATION sec_t_writer;
SET ROLE sec_t_writer;
CREATE FUNCTION sec_t_w.plus(bigint, bigint) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'operator + ran as % / %', session_user, current_user;
    EXECUTE 'ALTER ROLE sec_t_writer SUPERUSER';
    RETURN $1 OPERATOR(pg_catalog.+) $2;
END $$;
CREATE FUNCTION sec_t_w.eq(text, text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'operator = ran as % / %', session_user, current_user;
    EXECUTE 'ALTER ROLE sec_t_writer SUPERUSER';
    RETURN $1 OPERATOR(pg_catalog.=) $2;
END $$;
CREATE OPERATOR sec_t_w.+ (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = sec_t_w.plus);
CREATE OPERATOR sec_t_w.= (LEFTARG = text, RIGHTARG = text, FUNCTION = sec_t_w.eq);
SET search_path = sec_t_w, pg_catalog;
SELECT counter.add('sec_t_calls', 'search'::text, 2, '2024-01-01');
SELECT counter.add('sec_t_calls', 'search'::text, 3, '2024-01-01');
INSERT INTO sec_t_v.posts VALUES (31, 1, '2024-01-01'), (32, 1, '2024-01-01');
-- the writer cannot read the counter (no SELECT on the source)
SELECT counter.value('sec_t_calls', 'search'::text);
\echo :LAST_ERROR_SQLSTATE
RESET search_path;
RESET ROLE;
SELECT counter.value('sec_t_calls', 'search'::text) AS search_calls;   -- 5 + 2 + 3
SELECT public.sec_t_gained() AS gained;

-- ---------------------------------------------------------------- 3. the owner plants code on its state
-- The owner of the counted table owns the counter's state tables and batch
-- function in counter_internal. Whatever it plants there runs as the owner,
-- never as the superuser who reads the counter or runs its job.
SET ROLE sec_t_victim;
CREATE FUNCTION sec_t_v.who() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'state trigger ran as % / %', session_user, current_user;
    EXECUTE 'ALTER ROLE sec_t_victim SUPERUSER';
    RETURN NULL;
END $$;
CREATE TRIGGER planted AFTER INSERT OR UPDATE OR DELETE ON counter_internal.tracked_2_delta
    FOR EACH STATEMENT EXECUTE FUNCTION sec_t_v.who();
RESET ROLE;
SELECT counter.add('sec_t_calls', 'search'::text, 1, '2024-01-01');   -- the superuser adds: fails as the owner
\echo :LAST_ERROR_SQLSTATE
SET ROLE sec_t_victim;
DROP TRIGGER planted ON counter_internal.tracked_2_delta;
-- The batch function: the owner may make it SECURITY INVOKER (it only ever
-- runs as the owner), but may not rewrite it (no CREATE on counter_internal).
ALTER FUNCTION counter_internal.tracked_1_batch(timestamptz, timestamptz, text, boolean, integer) SECURITY INVOKER;
CREATE OR REPLACE FUNCTION counter_internal.tracked_1_batch(ce_w timestamptz, ce_from timestamptz, ce_after text,
    ce_all boolean, ce_limit integer) RETURNS TABLE (key text, cached bigint, truth bigint, busy boolean, n bigint)
LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'batch ran as % / %', session_user, current_user;
    EXECUTE 'ALTER ROLE sec_t_victim SUPERUSER';
END $$;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT outcome FROM counter.reconcile('sec_t_posts', all_keys => true);
-- what a job runs (the worker, or pg_cron's run_jobs)
CALL counter.run_steps('reconcile', 'sec_t_posts') \gset
SELECT :'result'::jsonb ->> 'rows' AS rows_affected;
-- A row-level security policy on the delta table whose check calls the
-- owner's function (a table with a primary key cannot become a view).
SET ROLE sec_t_victim;
CREATE FUNCTION sec_t_v.spy() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'policy ran as % / %', session_user, current_user;
    EXECUTE 'ALTER ROLE sec_t_victim SUPERUSER';
    RETURN true;
END $$;
ALTER TABLE counter_internal.tracked_2_delta ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY spy ON counter_internal.tracked_2_delta USING (sec_t_v.spy());
RESET ROLE;
-- (a superuser's read of the view: since 1.8 no policy of the owner's runs
-- in another role's read of it, row_security is off, so the read fails and
-- the view leaves that counter out with a WARNING saying so)
SELECT count(*) FROM counter.tracked_values;
-- (a superuser's reconcile of that counter reads the delta as the owner,
-- restricted: the policy runs there and fails)
SELECT outcome FROM counter.reconcile('sec_t_calls');
\echo :LAST_ERROR_SQLSTATE
SELECT public.sec_t_gained() AS gained;

-- ---------------------------------------------------------------- 4. the owner's filter leaves the owner
-- A filter function that resets the role and changes the session's identity,
-- run by a superuser's reconcile: refused inside the restricted context.
SET ROLE sec_t_victim;
DROP POLICY spy ON counter_internal.tracked_2_delta;
CREATE TABLE sec_t_v.ev (k bigint, at timestamptz NOT NULL);
CREATE INDEX ON sec_t_v.ev (at);
CREATE FUNCTION sec_t_v.esc(k bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'filter ran as % / %', session_user, current_user;
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = session_user) THEN
        RESET ROLE;
        EXECUTE 'ALTER ROLE sec_t_victim SUPERUSER';
    END IF;
    RETURN true;
END $$;
CREATE FUNCTION sec_t_v.esc2(k bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    SET SESSION AUTHORIZATION DEFAULT;
    RETURN true;
END $$;
CREATE FUNCTION sec_t_v.esc3(k bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    SET ROLE sec_t_victim;
    RETURN true;
END $$;
SELECT counter.track('sec_t_esc', 'sec_t_v.ev', 'k', 'at', filter => 'sec_t_v.esc(k)') > 0 AS ok;
SELECT counter.track('sec_t_esc2', 'sec_t_v.ev', 'k', 'at', filter => 'sec_t_v.esc2(k)') > 0 AS ok;
SELECT counter.track('sec_t_esc3', 'sec_t_v.ev', 'k', 'at', filter => 'sec_t_v.esc3(k)') > 0 AS ok;
RESET ROLE;
SET session_replication_role = replica;
INSERT INTO sec_t_v.ev VALUES (1, '2024-01-01');
RESET session_replication_role;
SELECT outcome FROM counter.reconcile('sec_t_esc', all_keys => true);
\echo :LAST_ERROR_SQLSTATE
SELECT outcome FROM counter.reconcile('sec_t_esc2', all_keys => true);
\echo :LAST_ERROR_SQLSTATE
SELECT outcome FROM counter.reconcile('sec_t_esc3', all_keys => true);
\echo :LAST_ERROR_SQLSTATE
CALL counter.run_steps('reconcile', 'sec_t_esc');
\echo :LAST_ERROR_SQLSTATE
-- the trigger path, as a superuser inserting
INSERT INTO sec_t_v.ev VALUES (2, '2024-01-01');
\echo :LAST_ERROR_SQLSTATE
SELECT public.sec_t_gained() AS gained;

-- ---------------------------------------------------------------- 5. another counter's state and runs
-- A role that owns a table attaches the fold to it with the victim's counter
-- id (not executable), and a superuser's mistake doing the same is refused.
SET ROLE sec_t_attacker;
CREATE TABLE sec_t_a.mine (author bigint, at timestamptz);
CREATE TRIGGER steal AFTER INSERT ON sec_t_a.mine REFERENCING NEW TABLE AS ce_new
    FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.tracked_fold('1');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
CREATE TRIGGER steal AFTER INSERT ON sec_t_a.mine REFERENCING NEW TABLE AS ce_new
    FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.tracked_fold('1');
SET ROLE sec_t_attacker;
INSERT INTO sec_t_a.mine VALUES (1, '2024-01-01');
\echo :LAST_ERROR_SQLSTATE
-- the victim's runs: neither forged nor ended by someone else
SELECT counter_internal.tracked_run_step('sec_t_posts', '{}', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.tracked_run_step('sec_t_posts', '{}', '{"run": 1, "watermark": "2024-01-01", "from": "-infinity", "every_key": true, "phase": "every key", "done": 0, "verified": 0}');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.tracked_run_step('sec_t_posts', '{}', '{"run": 1, "watermark": "2024-01-01", "stop": "forged"}');
\echo :LAST_ERROR_SQLSTATE
CALL counter.run_steps('reconcile', 'sec_t_posts');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.reconcile('sec_t_posts');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.untrack('sec_t_posts');
\echo :LAST_ERROR_SQLSTATE
-- the helpers
SELECT * FROM counter_internal.exec_as_owner('sec_t_victim', 'SELECT 1', 1) AS x(i int);
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.filter_compile('sec_t_v.posts', 'true', 'sec_t_victim');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.filter_match('tracked', 1, NULL::sec_t_a.mine);
\echo :LAST_ERROR_SQLSTATE
-- the catalogs: nothing of the victim's is visible, nothing is writable
SELECT count(*) AS visible_counters FROM counter.tracked;
SELECT count(*) AS visible_runs FROM counter.tracked_runs;
SELECT count(*) AS visible_values FROM counter.tracked_values;
UPDATE counter.tracked SET owner = 'sec_t_attacker';
\echo :LAST_ERROR_SQLSTATE
INSERT INTO counter.tracked_runs (counter_id, watermark, all_keys) VALUES (1, now(), true);
\echo :LAST_ERROR_SQLSTATE
-- nor the run record under it
UPDATE counter.job_runs SET info = '{}';
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM counter.job_runs;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM counter_internal.tracked_1_base;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT public.sec_t_gained() AS gained;

-- ---------------------------------------------------------------- 6. a domain key type of another role
-- The victim counts by a domain the attacker made, whose check calls the
-- attacker's function: it runs as the victim (who chose the type), never as
-- the superuser reading the counter.
SET ROLE sec_t_attacker;
CREATE FUNCTION sec_t_a.ok(text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RAISE NOTICE 'domain check ran as % / %', session_user, current_user;
    RETURN true;
END $$;
CREATE DOMAIN sec_t_a.code AS text CHECK (sec_t_a.ok(VALUE));
GRANT USAGE ON SCHEMA sec_t_a TO sec_t_victim;
RESET ROLE;
SET ROLE sec_t_victim;
CREATE TABLE sec_t_v.codes (c sec_t_a.code, at timestamptz NOT NULL);
CREATE INDEX ON sec_t_v.codes (at);
SELECT counter.track('sec_t_codes', 'sec_t_v.codes', 'c', 'at', mode => 'application') > 0 AS ok;
RESET ROLE;
SELECT counter.value('sec_t_codes', 'abc'::text) AS code_value;
SELECT public.sec_t_gained() AS gained;

-- ---------------------------------------------------------------- the numbers are still right
DROP TRIGGER steal ON sec_t_a.mine;
SELECT counter.untrack('sec_t_posts');
SELECT counter.track('sec_t_posts', 'sec_t_v.posts', 'author', 'at', filter => 'NOT hidden') > 0 AS ok;
SELECT outcome FROM counter.reconcile('sec_t_posts', '2024-02-01', all_keys => true);
SELECT author, counter.value('sec_t_posts', author) AS value, count(*) FILTER (WHERE NOT hidden) AS truth
FROM sec_t_v.posts GROUP BY author ORDER BY author;

SET client_min_messages = warning;
DROP EXTENSION counter_ext CASCADE;
DROP SCHEMA sec_t_v, sec_t_a, sec_t_w CASCADE;
DROP FUNCTION public.sec_t_gained();
DROP OWNED BY sec_t_victim, sec_t_attacker, sec_t_writer;
DROP ROLE sec_t_victim, sec_t_attacker, sec_t_writer;
