-- The one commit loop of periodic work (counter.run_steps): every feature's
-- committing work (a reconciliation job, a rollup refresh, partition
-- maintenance) is a step function driven by it. It commits each step (work
-- done before a failing step stays), records a failed step's error whole in
-- the run record and raises it again, stops before the statement's timeout
-- would cancel a step (the run ends as partial), and runs nothing but the
-- kinds it names, each checking its caller.
CREATE EXTENSION counter_ext;
SET client_min_messages = warning;
SET timezone = 'UTC';
CREATE ROLE rs_owner LOGIN;
CREATE ROLE rs_other LOGIN;
GRANT CREATE ON SCHEMA public TO rs_owner;
SET ROLE rs_owner;
-- a source with one event per UTC day for six days; the filter calls the
-- owner's function, which fails on the fourth day and is slow when asked
CREATE TABLE public.rs_src (id bigint PRIMARY KEY, k int NOT NULL, at timestamptz NOT NULL);
INSERT INTO public.rs_src SELECT g, g % 2, '2026-07-01 10:00+00'::timestamptz + (g - 1) * interval '1 day'
FROM generate_series(1, 6) g;
CREATE TABLE public.rs_mode (fail_on date, sleep_s float8);
INSERT INTO public.rs_mode VALUES (NULL, 0);
CREATE FUNCTION public.rs_keep(at timestamptz) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE m public.rs_mode;
BEGIN
    SELECT * INTO m FROM public.rs_mode;
    IF (at AT TIME ZONE 'UTC')::date = m.fail_on THEN
        RAISE EXCEPTION 'no events on %', m.fail_on USING ERRCODE = '22P05', DETAIL = 'rs_keep refused it',
            HINT = 'clear rs_mode.fail_on';
    END IF;
    PERFORM pg_catalog.pg_sleep(m.sleep_s);
    RETURN true;
END $$;
SELECT counter.rollup_create('rs_daily', 'public.rs_src', 'at', '{k}', mode => 'deferred',
                             filter => 'public.rs_keep(at)') AS rollup_table;
RESET ROLE;
UPDATE counter.jobs SET enabled = false;
SET ROLE rs_owner;

-- A refresh of six days, one transaction each: the fourth fails. The error
-- comes back whole (SQLSTATE, message, detail, hint, and the step's context
-- first), the three days before it are committed, and the run record has
-- the error whole.
UPDATE public.rs_mode SET fail_on = '2026-07-04';
\set SHOW_CONTEXT never
CALL counter.rollup_refresh('rs_daily', '2026-07-01 00:00+00', '2026-07-07 00:00+00');
\set SHOW_CONTEXT errors
SELECT hour, count FROM public.rs_daily ORDER BY hour;
RESET ROLE;
SELECT runner, outcome, sqlstate, message, detail, hint, context LIKE '%rs_keep%' AS step_context,
       info ->> 'outcome' AS feature_outcome, info ->> 'rows' AS rows_before
FROM counter.job_runs ORDER BY run_id DESC LIMIT 1;
SET ROLE rs_owner;

-- The statement's timeout: each day's step takes 0.4 s and the CALL may run
-- 2 s. The loop starts no step that twice the longest one would not see
-- ended before the deadline, so nothing is cancelled: the run ends as
-- partial, and the days it did are committed.
UPDATE public.rs_mode SET fail_on = NULL, sleep_s = 0.4;
TRUNCATE public.rs_daily;
SET statement_timeout = '2s';
CALL counter.rollup_refresh('rs_daily', '2026-07-01 00:00+00', '2026-07-07 00:00+00');
RESET statement_timeout;
SELECT count(*) BETWEEN 1 AND 5 AS some_days_done FROM public.rs_daily;
RESET ROLE;
SELECT outcome, info ->> 'outcome' AS feature_outcome,
       (info ->> 'rows')::bigint = (SELECT count(*) FROM public.rs_daily) AS rows_recorded
FROM counter.job_runs ORDER BY run_id DESC LIMIT 1;
SET ROLE rs_owner;
-- the rest is done by the next refresh (no timeout)
UPDATE public.rs_mode SET sleep_s = 0;
CALL counter.rollup_refresh('rs_daily', '2026-07-01 00:00+00', '2026-07-07 00:00+00');
SELECT count(*) AS days, sum(count) AS events FROM public.rs_daily;

-- Only the kinds it names run; bad input is refused with its SQLSTATE.
\set VERBOSITY terse
CALL counter.run_steps('no_such_kind', 'x', '{}', NULL);
CALL counter.run_steps(NULL, 'x', '{}', NULL);
CALL counter.run_steps('rollup_refresh', NULL, '{}', NULL);
CALL counter.run_steps('rollup_refresh', 'no_such_rollup', '{}', NULL);
CALL counter.run_steps('partition_maintenance', 'public.rs_src', '{"parent": 1}', NULL);

-- Another role drives nothing of the owner's: every kind's step checks its
-- caller, and the loop has no rights of its own.
RESET ROLE;
SET ROLE rs_other;
CALL counter.run_steps('rollup_refresh', 'rs_daily', '{}', NULL);
CALL counter.rollup_refresh('rs_daily', '2026-07-01 00:00+00', '2026-07-07 00:00+00');
-- the step functions are counter_ext's own (schema counter_internal): only
-- the loop calls them, for its caller; no role may call them itself
SELECT counter_internal.rollup_run_step('rs_daily', '{}', NULL);
SELECT counter_internal.rollup_run_step('rs_daily', '{}', '{"started": "2026-07-01", "rows": 0, "skipped": 0, "done": 0, "error": {"message": "x"}}');
SELECT counter_internal.run_end(1, '{}');
SELECT counter_internal.run_steps_here('rollup_refresh', 'rs_daily', '{"from": "2026-07-01", "to": "2026-07-07"}');
-- the function form goes through the same loop, for its caller
SELECT counter.rollup_recompute('rs_daily', '2026-07-01 00:00+00', '2026-07-07 00:00+00');
SELECT count(*) AS runs_seen FROM counter.rollup_status;
RESET ROLE;
SELECT count(*) AS runs_recorded, count(*) FILTER (WHERE run_as::text = 'rs_other') AS by_other FROM counter.job_runs;
-- The registry is the gate: a kind runs only a step function owned by a
-- superuser, and one outside counter_internal only for a role that may
-- execute it.
CREATE FUNCTION public.rs_step(target text, args jsonb, state jsonb) RETURNS jsonb LANGUAGE sql
    AS $$ SELECT '{"finished": true, "rows": 7}'::jsonb $$;
INSERT INTO counter_internal.job_kinds (kind, procedure) VALUES ('rs_mine', 'public.rs_step(text, jsonb, jsonb)');
CALL counter.run_steps('rs_mine', 'x');
REVOKE EXECUTE ON FUNCTION public.rs_step(text, jsonb, jsonb) FROM PUBLIC;
SET ROLE rs_other;
CALL counter.run_steps('rs_mine', 'x');
RESET ROLE;
ALTER FUNCTION public.rs_step(text, jsonb, jsonb) OWNER TO rs_owner;
CALL counter.run_steps('rs_mine', 'x');
DELETE FROM counter_internal.job_kinds WHERE kind = 'rs_mine';
DROP FUNCTION public.rs_step(text, jsonb, jsonb);

DROP EXTENSION counter_ext CASCADE;
DROP TABLE public.rs_src, public.rs_mode, public.rs_daily;
DROP FUNCTION public.rs_keep(timestamptz);
REVOKE CREATE ON SCHEMA public FROM rs_owner;
DROP ROLE rs_owner;
DROP ROLE rs_other;
