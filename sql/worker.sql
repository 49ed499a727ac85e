-- Jobs: registering, changing and running them by hand, their run history,
-- and clear errors on bad input. Jobs here are disabled as soon as they are
-- registered (in the same transaction), so a background worker never runs
-- them: CALL counter.run_job runs a job whether it is enabled or not, in a
-- background-worker session of the job's owner (an ordinary role here).
CREATE EXTENSION counter_ext;
\set VERBOSITY terse
\set ON_ERROR_STOP 0

-- The built-in kinds.
SELECT kind, procedure, builtin FROM counter_internal.job_kinds ORDER BY kind;

-- Test-only job kinds, added by the superuser: procedures it owns,
-- (target text, INOUT rows_affected bigint), run as the jobs' owner.
CREATE ROLE worker_regress_owner LOGIN;
CREATE TABLE public.steps (target text, step int, run_as name DEFAULT session_user);
GRANT INSERT, SELECT ON public.steps TO worker_regress_owner;
CREATE PROCEDURE public.job_test_ok(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.steps VALUES (target, 1);
    COMMIT;  -- a job may commit between steps
    INSERT INTO public.steps VALUES (target, 2);
    rows_affected := 2;
END $$;
CREATE PROCEDURE public.job_test_fail(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.steps VALUES (target, 1);
    COMMIT;
    RAISE EXCEPTION 'target % is broken', target USING ERRCODE = 'data_exception',
        DETAIL = 'its detail', HINT = 'its hint';
END $$;
CREATE PROCEDURE public.job_test_slow(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.pg_sleep(30);
END $$;

INSERT INTO counter_internal.job_kinds (kind, procedure) VALUES
    ('test_ok', 'public.job_test_ok(text, bigint)'), ('test_fail', 'public.job_test_fail(text, bigint)'),
    ('test_slow', 'public.job_test_slow(text, bigint)');

BEGIN;
SELECT counter.job_register('test_ok', 'a', '1 hour', 'worker_regress_owner') AS ok_job \gset
SELECT counter.job_register('test_fail', 'b', '10 minutes', 'worker_regress_owner') AS fail_job \gset
SELECT counter.job_register('test_slow', 'c', '1 hour', 'worker_regress_owner') AS slow_job \gset
UPDATE counter.jobs SET enabled = false;
COMMIT;
SELECT kind, target, run_every, enabled, timeout, lock_timeout, failures, running_run, owner, disabled_reason
FROM counter.jobs ORDER BY job_id;

-- Registering again keeps the job and its id.
BEGIN;
SELECT counter.job_register('test_ok', 'a', '2 hours', 'worker_regress_owner') = :ok_job AS same_id;
UPDATE counter.jobs SET enabled = false WHERE job_id = :ok_job;
COMMIT;

-- Nothing is enabled, so nothing is due.
CALL counter.run_jobs();

-- A job that succeeds: its rows, its history, its next run.
-- It ran in a session of its owner, not in this superuser's session.
CALL counter.run_job(:ok_job);
SELECT step, run_as, count(*) FROM public.steps WHERE target = 'a' GROUP BY step, run_as ORDER BY step;
SELECT kind, target, runner, outcome, rows_affected, sqlstate, message, finished_at >= started_at AS ordered,
       run_as, pid <> pg_backend_pid() AS other_process
FROM counter.job_runs ORDER BY run_id;
SELECT failures, running_run, next_run > now() + interval '1 hour 59 minutes' AS next_in_run_every
FROM counter.jobs WHERE job_id = :ok_job;

-- A job that fails: its error reaches the caller, and is recorded; what it
-- committed before failing stays; the job backs off.
CALL counter.run_job(:fail_job);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS committed_before_failing FROM public.steps WHERE target = 'b';
SELECT outcome, rows_affected, sqlstate, message FROM counter.job_runs WHERE job_id = :fail_job ORDER BY run_id;
-- the error is kept whole: its detail, hint and context too
SELECT detail, hint, context ~ 'PL/pgSQL function (public\.)?job_test_fail\(text,bigint\) line \d+ at RAISE' AS context_kept
FROM counter.job_runs WHERE job_id = :fail_job ORDER BY run_id;
SELECT failures, running_run,
       next_run BETWEEN now() + interval '7 minutes 59 seconds' AND now() + interval '10 minutes 1 second' AS backed_off
FROM counter.jobs WHERE job_id = :fail_job;
CALL counter.run_job(:fail_job);
SELECT failures,
       next_run BETWEEN now() + interval '15 minutes 59 seconds' AND now() + interval '20 minutes 1 second' AS doubled
FROM counter.jobs WHERE job_id = :fail_job;

-- Failures in awkward places: inside a loop over a query that commits each
-- turn (its cursor is held across commits), and at COMMIT (a deferred
-- constraint). Each is recorded, and the session goes on.
CREATE TABLE public.deferred_parent (x int PRIMARY KEY);
CREATE TABLE public.deferred (x int);
ALTER TABLE public.deferred ADD CONSTRAINT deferred_fk FOREIGN KEY (x) REFERENCES public.deferred_parent
    DEFERRABLE INITIALLY DEFERRED;
GRANT INSERT ON public.deferred TO worker_regress_owner;
GRANT SELECT, REFERENCES ON public.deferred_parent TO worker_regress_owner;
CREATE PROCEDURE public.job_test_awkward(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    i int;
BEGIN
    IF target = 'loop' THEN
        FOR i IN SELECT g FROM generate_series(1, 3) g LOOP
            INSERT INTO public.steps VALUES (target, i);
            COMMIT;
            IF i = 2 THEN
                RAISE EXCEPTION 'failed in turn %', i USING ERRCODE = 'data_exception';
            END IF;
        END LOOP;
    ELSE
        INSERT INTO public.deferred VALUES (42);
        COMMIT;
    END IF;
END $$;
INSERT INTO counter_internal.job_kinds (kind, procedure) VALUES ('test_awkward', 'public.job_test_awkward(text, bigint)');
BEGIN;
SELECT counter.job_register('test_awkward', 'loop', '1 hour', 'worker_regress_owner') AS loop_job \gset
SELECT counter.job_register('test_awkward', 'commit', '1 hour', 'worker_regress_owner') AS commit_job \gset
UPDATE counter.jobs SET enabled = false WHERE kind = 'test_awkward';
COMMIT;
CALL counter.run_job(:loop_job);
\echo :LAST_ERROR_SQLSTATE
SELECT step FROM public.steps WHERE target = 'loop' ORDER BY step;
CALL counter.run_job(:commit_job);
\echo :LAST_ERROR_SQLSTATE
SELECT target, outcome, sqlstate FROM counter.job_runs WHERE kind = 'test_awkward' ORDER BY run_id;
SELECT count(*) AS no_orphan_row FROM public.deferred;

-- The job's own timeout stops it; the session goes on.
SELECT timeout FROM counter.job_alter(:slow_job, timeout => '200 milliseconds');
CALL counter.run_job(:slow_job);
\echo :LAST_ERROR_SQLSTATE
SELECT outcome, sqlstate, message FROM counter.job_runs WHERE job_id = :slow_job;
SELECT 1 AS still_working;

-- The status view: one line per job with its last run.
SELECT kind, target, enabled, failures, running, last_outcome, last_rows, last_sqlstate
FROM counter.job_status ORDER BY job_id;

-- Changing a job.
SELECT run_every, enabled, timeout, lock_timeout
FROM counter.job_alter(:ok_job, run_every => '5 minutes', lock_timeout => '1 second');
SELECT next_run <= now() + interval '5 minutes' AS brought_forward FROM counter.jobs WHERE job_id = :ok_job;
SELECT enabled FROM counter.job_alter(:ok_job, enabled => false);
SELECT next_run = '2030-01-01 00:00+00' AS set FROM counter.job_alter(:ok_job, next_run => '2030-01-01 00:00+00');

-- Unregistering removes the job and keeps its history.
SELECT counter.job_unregister('test_fail', 'b');
SELECT counter.job_unregister('test_fail', 'b');
SELECT count(*) AS history_kept FROM counter.job_runs WHERE job_id = :fail_job;

-- Bad input.
SELECT counter.job_alter(999999, run_every => '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.job_alter(:ok_job, run_every => '-5 minutes');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.job_alter(:ok_job, run_every => '0');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.job_alter(:ok_job, timeout => '0');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.job_alter(:ok_job, lock_timeout => '25 days');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.job_alter(NULL, enabled => true);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.job_register('test_ok', 'x', '-1 second', 'worker_regress_owner');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.job_register('Bad Kind', 'x', '1 second', 'worker_regress_owner');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.job_register('no_such_kind', 'x', '1 second', 'worker_regress_owner');
\echo :LAST_ERROR_SQLSTATE
-- A kind whose target names no owner needs one.
SELECT counter.job_register('test_ok', 'x', '1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.job_register('test_ok', NULL, '1 second', 'worker_regress_owner');
\echo :LAST_ERROR_SQLSTATE
CALL counter.run_job(999999);
\echo :LAST_ERROR_SQLSTATE
CALL counter.run_job(NULL);
\echo :LAST_ERROR_SQLSTATE
BEGIN;
CALL counter.run_jobs();
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
DO $$ DECLARE n int; BEGIN CALL counter.run_jobs(n); END $$;
\echo :LAST_ERROR_SQLSTATE
-- The table refuses what the functions refuse.
UPDATE counter.jobs SET timeout = '0' WHERE job_id = :ok_job;
\echo :LAST_ERROR_SQLSTATE

-- Only the extension owner (and whom it grants) runs and changes jobs.
CREATE ROLE worker_regress_user;
SET ROLE worker_regress_user;
CALL counter.run_jobs();
\echo :LAST_ERROR_SQLSTATE
SELECT counter.job_alter(:ok_job, enabled => true);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE worker_regress_user;

-- The job's owner cannot use the runner's own procedure, nor can anyone
-- outside a job worker.
SET ROLE worker_regress_owner;
CALL counter_internal.owner_session_run();
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
CALL counter_internal.owner_session_run();
\echo :LAST_ERROR_SQLSTATE

-- The lock registry: object locks in counter_ext's own lock space.
SELECT class, number, id FROM counter_internal.lock_classes() ORDER BY number;
BEGIN;
SELECT counter_internal.lock_take('job', 5) AND counter_internal.lock_take('rollup_hour', 3, '2026-01-01 10:20+00')
    AS taken;
SELECT c.class, l.objid, l.mode FROM pg_locks l JOIN counter_internal.lock_classes() c ON c.number = l.objsubid
WHERE l.locktype = 'object' AND l.classid = 'counter_internal.lock_space'::regclass AND l.pid = pg_backend_pid()
ORDER BY 1;
COMMIT;
SELECT count(*) AS left_after_commit FROM pg_locks
WHERE locktype = 'object' AND classid = 'counter_internal.lock_space'::regclass AND pid = pg_backend_pid();
SELECT counter_internal.lock_take('no_such_class', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.lock_take('rollup_day', 3);
\echo :LAST_ERROR_SQLSTATE
SET ROLE worker_regress_owner;
SELECT counter_internal.lock_take('job', 5);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- Citus's classes live in a rollup table's own lock space: not lock_take's
SELECT counter_internal.lock_take('rollup_node_hour', 1);
\echo :LAST_ERROR_SQLSTATE
-- rollup_node_hold (a distributed trigger-mode rollup's recompute, on every
-- node): the hours of a day, alone, in the table's lock space; only for a
-- role with the rights of the table's owner; at most one day
CREATE TABLE public.hold_t (x int);
ALTER TABLE public.hold_t OWNER TO worker_regress_owner;
SET ROLE worker_regress_owner;
BEGIN;
SELECT counter_internal.rollup_node_hold('public.hold_t', '2026-01-01 00:00+00', '2026-01-02 00:00+00', NULL) AS held;
SELECT count(*) AS hours, min(objid) = 490896 AS first_hour, count(DISTINCT objid) AS distinct_hours,
       bool_and(objsubid = 8 AND mode = 'ExclusiveLock') AS exclusive
FROM pg_locks WHERE locktype = 'object' AND classid = 'public.hold_t'::regclass AND pid = pg_backend_pid();
ROLLBACK;
BEGIN;
SELECT counter_internal.rollup_node_hold('public.hold_t', '2026-01-01 00:00+00', '2026-01-02 00:00+00',
                                         '{2026-01-01 05:20+00, 2026-01-01 07:00+00, 2026-01-03 00:00+00}') AS held;
SELECT count(*) AS hours FROM pg_locks WHERE locktype = 'object' AND classid = 'public.hold_t'::regclass
  AND pid = pg_backend_pid();
ROLLBACK;
SELECT counter_internal.rollup_node_hold('public.hold_t', '2026-01-01 00:00+00', '2026-01-03 00:00+00', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.rollup_node_hold('public.hold_t', NULL, '2026-01-03 00:00+00', NULL);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
CREATE ROLE worker_regress_other;
SET ROLE worker_regress_other;
SELECT counter_internal.rollup_node_hold('public.hold_t', '2026-01-01 00:00+00', '2026-01-02 00:00+00', NULL);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE worker_regress_other;
DROP TABLE public.hold_t;

-- The runner leaves no job marked running.
SELECT count(*) AS left_running FROM counter.job_runs WHERE outcome = 'running';
SELECT count(*) AS jobs_running FROM counter.jobs WHERE running_run IS NOT NULL;
DROP EXTENSION counter_ext;
DROP TABLE public.steps, public.deferred, public.deferred_parent;
DROP PROCEDURE public.job_test_ok, public.job_test_fail, public.job_test_slow, public.job_test_awkward;
DROP ROLE worker_regress_owner;
