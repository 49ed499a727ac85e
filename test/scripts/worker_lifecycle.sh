#!/usr/bin/env bash
# The background worker in a real preloaded cluster: it finds the database by
# itself, runs due jobs in short-lived workers connected as the jobs' owner
# (a worker stays for its owner's jobs that fall due again within a naptime),
# records them; a failing job backs off while the others go on;
# pg_stat_activity shows what a worker does and as whom; SIGTERM stops a
# worker in the middle of a job (the run is marked failed, the jobs go on),
# SIGHUP re-reads counter_ext.enabled; a job that outlives its timeout gets
# its worker stopped; kill -9 of a worker: the cluster restarts, the run the
# crash interrupted is marked failed and the jobs carry on; an ERROR outside
# any job is logged and retried later; CREATE EXTENSION in another database
# gets its jobs run, DROP EXTENSION leaves it without workers; DROP DATABASE
# and CREATE DATABASE ... TEMPLATE of a database with a busy worker succeed;
# a job dumped while it runs and restored beside its source runs there, and
# a restore that loads the run record before its sequence has its jobs run.
# lane: side
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
trap ce_cluster_stop_all EXIT

fail() { echo "FAIL: $*"; exit 1; }

# wait_for DB SQL SECONDS: until SQL returns t.
wait_for() {
    local db=$1 sql=$2 limit=$3 i
    for ((i = 0; i < limit * 5; i++)); do
        [ "$(ce_psql -d "$db" -At -c "$sql" 2>/dev/null || true)" = t ] && return 0
        sleep 0.2
    done
    return 1
}
q() { ce_psql -d "$1" -At -c "$2"; }
# The worker running a job of the given kind in a database.
job_pid() { q postgres "SELECT pid FROM pg_stat_activity WHERE backend_type = 'counter_ext worker' AND datname = '$1'
                        AND query LIKE '%$2(%' LIMIT 1"; }

ce_cluster_start life "counter_ext.enabled = on" "counter_ext.naptime = 1" "restart_after_crash = on"
ce_cluster_use life
q postgres "CREATE ROLE life_owner LOGIN"

q postgres "CREATE DATABASE app"
ce_psql -d app <<'SQL'
CREATE EXTENSION counter_ext;
CREATE TABLE public.ticks (target text, at timestamptz DEFAULT clock_timestamp(), run_as name DEFAULT session_user);
CREATE TABLE public.victim (x int);
GRANT INSERT ON public.ticks TO life_owner;
GRANT SELECT ON public.victim TO life_owner;
-- A job that checks its target exists, works in two committed steps.
CREATE PROCEDURE public.job_test_tick(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM target::regclass;
    INSERT INTO public.ticks (target) VALUES (target);
    COMMIT;
    INSERT INTO public.ticks (target) VALUES (target);
    rows_affected := 2;
END $$;
-- A job that takes long when its target says so.
CREATE PROCEDURE public.job_test_sleep(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.ticks (target) VALUES (target);
    COMMIT;
    PERFORM pg_catalog.pg_sleep(target::float8);
END $$;
INSERT INTO counter_internal.job_kinds (kind, procedure) VALUES ('test_tick', 'public.job_test_tick(text, bigint)'),
    ('test_sleep', 'public.job_test_sleep(text, bigint)');
SELECT counter.job_register('test_tick', 'public.ticks', '1 second', 'life_owner');
SELECT counter.job_register('test_tick', 'public.victim', '1 second', 'life_owner');
SQL

echo "== the worker finds the database and runs its jobs"
wait_for app "SELECT count(*) >= 3 FROM counter.job_runs WHERE target = 'public.ticks' AND outcome = 'succeeded'
              AND runner = 'worker' AND rows_affected = 2" 30 || fail "the worker did not run the jobs"
[ "$(q app "SELECT count(*) FROM public.ticks WHERE run_as <> 'life_owner'")" = 0 ] || fail "a job ran as another role"

echo "== a worker whose owner's jobs fall due again within a naptime stays for them"
# (the tick every second: one process runs run after run instead of a
# process started for each; doc/reference/worker.md, "Slots")
wait_for app "SELECT count(*) >= 6 AND 2 * count(DISTINCT (pid, backend_start)) <= count(*)
              FROM counter.job_runs WHERE target = 'public.ticks' AND runner = 'worker'" 30 ||
    fail "each run had its own process: $(q app "SELECT count(*) || ' runs, ' || count(DISTINCT (pid, backend_start))
        || ' processes' FROM counter.job_runs WHERE target = 'public.ticks' AND runner = 'worker'")"

echo "== counter.running_jobs and pg_stat_activity show a running job's progress"
ce_psql -d app >/dev/null <<'SQL'
CREATE PROCEDURE public.job_test_progress(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..40 LOOP
        PERFORM counter.job_progress('verifying keys', i * 100, 4000);
        PERFORM pg_catalog.pg_sleep(0.1);
    END LOOP;
    rows_affected := 4000;
END $$;
GRANT EXECUTE ON PROCEDURE public.job_test_progress(text, bigint) TO life_owner;
INSERT INTO counter_internal.job_kinds (kind, procedure) VALUES ('test_progress', 'public.job_test_progress(text, bigint)');
SELECT counter.job_register('test_progress', 'p', '1 hour', 'life_owner');
SQL
wait_for app "SELECT phase = 'verifying keys' AND done BETWEEN 100 AND 4000 AND total = 4000 AND owner = 'life_owner'::regrole
              AND activity LIKE 'counter_ext worker: job % test_progress(p) as life_owner: verifying keys %/4000%'
              FROM counter.running_jobs WHERE kind = 'test_progress'" 20 ||
    fail "the progress is not shown: $(q app "SELECT row_to_json(r) FROM counter.running_jobs r")"
wait_for app "SELECT per_second > 0 AND time_left IS NOT NULL FROM counter.running_jobs WHERE kind = 'test_progress'" 20 ||
    fail "no rate and time left: $(q app "SELECT row_to_json(r) FROM counter.running_jobs r")"
wait_for app "SELECT NOT EXISTS (SELECT FROM counter.running_jobs WHERE kind = 'test_progress')
              AND EXISTS (SELECT FROM counter.job_runs WHERE kind = 'test_progress' AND outcome = 'succeeded')" 20 ||
    fail "the progress job did not finish"

echo "== a built-in job runs in the one commit loop: its progress is shown, its timeout ends it partial, not cancelled"
ce_psql -d app >/dev/null <<'SQL'
GRANT CREATE ON SCHEMA public TO life_owner;
CREATE TABLE public.slow_src (id bigint PRIMARY KEY, k int NOT NULL, at timestamptz NOT NULL);
ALTER TABLE public.slow_src OWNER TO life_owner;
-- the owner's filter takes 0.5 s per event: one event a day for 12 days
CREATE FUNCTION public.slow_keep(timestamptz) RETURNS boolean LANGUAGE sql VOLATILE
    AS 'SELECT pg_catalog.pg_sleep(0.5) IS NOT NULL';
ALTER FUNCTION public.slow_keep(timestamptz) OWNER TO life_owner;
INSERT INTO public.slow_src SELECT g, 1, date_trunc('day', now()) - g * interval '1 day' + interval '1 hour'
FROM generate_series(1, 12) g;
-- made and given its timeout in one transaction: the owner's worker, waiting
-- for its next jobs in its process, runs the job as soon as this commits
BEGIN;
SET ROLE life_owner;
SELECT counter.rollup_create('slow_daily', 'public.slow_src', 'at', '{k}', mode => 'deferred',
                             filter => 'public.slow_keep(at)');
RESET ROLE;
SELECT counter.job_alter(job_id, timeout => '3 s', run_every => '1 s') FROM counter.jobs
WHERE kind = 'rollup_refresh' AND target = 'slow_daily';
COMMIT;
SQL
wait_for app "SELECT phase = 'days' AND total = 12 AND done BETWEEN 1 AND 11
              AND activity LIKE '%rollup_refresh(slow_daily) as life_owner: days %/12%'
              FROM counter.running_jobs WHERE kind = 'rollup_refresh' AND target = 'slow_daily'" 20 ||
    fail "the refresh's progress is not shown: $(q app "SELECT row_to_json(r) FROM counter.running_jobs r")"
wait_for app "SELECT count(*) = 12 FROM public.slow_daily" 60 ||
    fail "the refresh did not finish: $(q app "SELECT string_agg(outcome || ':' || coalesce(info ->> 'outcome', '') || ':' || coalesce(sqlstate, ''), ' ') FROM counter.job_runs WHERE target = 'slow_daily'")"
runs=$(q app "SELECT string_agg(outcome || ':' || (info ->> 'outcome'), ' ' ORDER BY run_id) FROM counter.job_runs
              WHERE kind = 'rollup_refresh' AND target = 'slow_daily' AND outcome <> 'running'")
echo "runs of the refresh with a 3 s timeout: $runs"
case " $runs " in *" succeeded:partial "*) ;; *) fail "no run ended partial at its timeout: $runs" ;; esac
case " $runs " in *failed*) fail "a run was cancelled instead of ending partial: $runs" ;; esac
[ "$(q app "SELECT count(*) FROM public.slow_daily WHERE count <> 1")" = 0 ] || fail "a day was counted wrong"
q app "SELECT counter.rollup_drop('slow_daily')" >/dev/null

echo "== a job whose target is dropped behind its back fails, backs off, and the others go on"
q app "DROP TABLE public.victim"
wait_for app "SELECT count(*) >= 3 FROM counter.job_runs WHERE target = 'public.victim' AND outcome = 'failed'
              AND sqlstate = '42P01' AND message LIKE '%public.victim%'" 40 || fail "the failing job was not recorded"
q app "SELECT failures >= 3 FROM counter.jobs WHERE target = 'public.victim'" | grep -qx t || fail "failures not counted"
# Back-off: after the n-th failure the job waits run_every (1 s) x 2^(n-1),
# minus at most 20% jitter. Scheduling delays only lengthen the gaps, so each
# gap between failed runs is at least 0.8 x 2^(n-1) s.
backoff_sql="SELECT bool_and(gap >= 0.8 * power(2, n - 1) - 0.02) AND count(*) >= 2 FROM (
         SELECT row_number() OVER w AS n,
                extract(epoch FROM lead(started_at) OVER w - started_at) AS gap
         FROM counter.job_runs WHERE target = 'public.victim' AND outcome = 'failed'
         WINDOW w AS (ORDER BY run_id)) s
       WHERE gap IS NOT NULL"
if [ "$(q app "$backoff_sql")" != t ]; then
    q app "SELECT run_id, started_at, outcome FROM counter.job_runs WHERE target = 'public.victim' ORDER BY run_id"
    fail "no exponential back-off"
fi
before=$(q app "SELECT count(*) FROM counter.job_runs WHERE target = 'public.ticks' AND outcome = 'succeeded'")
wait_for app "SELECT count(*) >= $before + 3 FROM counter.job_runs WHERE target = 'public.ticks' AND outcome = 'succeeded'" 30 ||
    fail "the healthy job stopped while the other one failed"

echo "== pg_stat_activity shows what a worker does and as whom; SIGTERM stops it in the middle of a job"
# (run_every 1 hour: after its run is marked failed it backs off, and the
# other jobs go on.)
sleep_job=$(q app "SELECT counter.job_register('test_sleep', '60', '1 hour', 'life_owner')")
wait_for app "SELECT EXISTS (SELECT 1 FROM counter.job_runs WHERE kind = 'test_sleep' AND outcome = 'running')" 30 ||
    fail "the long job did not start"
pid=$(job_pid app test_sleep)
[ -n "$pid" ] || fail "pg_stat_activity shows no worker running the long job"
q postgres "SELECT usename || ' ' || query FROM pg_stat_activity WHERE pid = $pid" |
    grep -q "^life_owner counter_ext worker: job $sleep_job test_sleep(60) as life_owner$" ||
    fail "pg_stat_activity does not say what the worker does: $(q postgres "SELECT usename || ' ' || query FROM pg_stat_activity WHERE pid = $pid")"
sleep_failures=$(q app "SELECT failures FROM counter.jobs WHERE job_id = $sleep_job")
q postgres "SELECT pg_terminate_backend($pid)" >/dev/null
gone=no
# Typically within milliseconds; the bound is 3 s for a loaded machine.
for i in $(seq 1 30); do
    if ! kill -0 "$pid" 2>/dev/null; then gone=yes; break; fi
    sleep 0.1
done
[ $gone = yes ] || fail "worker $pid still alive 3 s after SIGTERM"
# The run SIGTERM interrupted is marked failed by the database's next worker.
wait_for app "SELECT EXISTS (SELECT 1 FROM counter.job_runs WHERE kind = 'test_sleep' AND pid = $pid AND outcome = 'failed'
              AND message LIKE 'run abandoned%')" 30 || fail "the interrupted run was not marked failed"
# (an interrupted run of a job armed here is a failure of the job: it backs off)
[ "$(q app "SELECT failures = $sleep_failures + 1 AND next_run > now() AND running_run IS NULL FROM counter.jobs
           WHERE job_id = $sleep_job")" = t ] ||
    fail "the job of the interrupted run did not back off: $(q app "SELECT * FROM counter.jobs WHERE job_id = $sleep_job")"
before=$(q app "SELECT count(*) FROM counter.job_runs WHERE target = 'public.ticks' AND outcome = 'succeeded'")
wait_for app "SELECT count(*) >= $before + 2 FROM counter.job_runs WHERE target = 'public.ticks' AND outcome = 'succeeded'" 30 ||
    fail "jobs did not carry on after SIGTERM"

echo "== a job that outlives its timeout (and ignores the cancel) has its worker stopped"
ce_psql -d app >/dev/null <<'SQL'
-- Swallows the statement timeout's cancel and keeps going.
CREATE PROCEDURE public.job_test_stubborn(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..600 LOOP
        BEGIN
            PERFORM pg_catalog.pg_sleep(0.1);
        EXCEPTION WHEN query_canceled THEN
            NULL;
        END;
    END LOOP;
END $$;
INSERT INTO counter_internal.job_kinds (kind, procedure) VALUES ('test_stubborn', 'public.job_test_stubborn(text, bigint)');
SQL
# Registered with its timeout in one transaction, so no run starts with the default.
stubborn=$(ce_psql -d app -At <<'SQL'
BEGIN;
SELECT counter.job_register('test_stubborn', 's', '1 hour', 'life_owner') AS id \gset
SELECT FROM counter.job_alter(:id, timeout => '1 second');
COMMIT;
SELECT :id;
SQL
)
# Stopped at timeout + 5 s of grace: well before its own 60 s.
wait_for app "SELECT EXISTS (SELECT 1 FROM counter.job_runs WHERE job_id = $stubborn AND outcome = 'failed'
              AND message LIKE 'run abandoned%' AND finished_at - started_at < interval '30 seconds')" 40 ||
    fail "the stubborn job was not stopped: $(q app "SELECT string_agg(outcome || ' ' || coalesce(message, ''), '; ') FROM counter.job_runs WHERE job_id = $stubborn")"
grep -q "counter_ext launcher: job $stubborn outlived its timeout" "$CE_life_LOG" || fail "the launcher did not log the stop"
q app "SELECT counter.job_unregister('test_stubborn', 's')" >/dev/null

echo "== kill -9 of a worker: the cluster restarts, the worker comes back and carries on"
q app "SELECT counter.job_alter($sleep_job, next_run => now())" >/dev/null
wait_for app "SELECT EXISTS (SELECT 1 FROM counter.job_runs WHERE kind = 'test_sleep' AND outcome = 'running')" 60 ||
    fail "the long job did not start again"
pid=$(job_pid app test_sleep)
crashed_run=$(q app "SELECT run_id FROM counter.job_runs WHERE kind = 'test_sleep' AND outcome = 'running'")
# The suite runs with synchronous_commit = off: flush the WAL so the claim
# survives the crash restart.
q app "CHECKPOINT"
killed_pid=$pid
kill -9 "$pid"
sleep 1
wait_for app "SELECT outcome = 'failed' FROM counter.job_runs WHERE run_id = $crashed_run" 30 ||
    fail "the run the crash interrupted was not marked failed"
before=$(q app "SELECT count(*) FROM counter.job_runs WHERE target = 'public.ticks' AND outcome = 'succeeded'")
wait_for app "SELECT count(*) >= $before + 2 FROM counter.job_runs WHERE target = 'public.ticks' AND outcome = 'succeeded'" 30 ||
    fail "jobs did not carry on after the crash"
q app "SELECT counter.job_unregister('test_sleep', '60')" >/dev/null

echo "== SIGHUP: counter_ext.enabled = off stops the workers, on starts them"
q postgres "ALTER SYSTEM SET counter_ext.enabled = off"
q postgres "SELECT pg_reload_conf()" >/dev/null
wait_for postgres "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'counter_ext worker'" 20 ||
    fail "workers still running with counter_ext.enabled = off"
q postgres "ALTER SYSTEM RESET counter_ext.enabled"
q postgres "SELECT pg_reload_conf()" >/dev/null
before=$(q app "SELECT count(*) FROM counter.job_runs WHERE target = 'public.ticks' AND outcome = 'succeeded'")
wait_for app "SELECT count(*) >= $before + 2 FROM counter.job_runs WHERE target = 'public.ticks' AND outcome = 'succeeded'" 30 ||
    fail "jobs did not run again with counter_ext.enabled = on"

echo "== an ERROR outside any job is logged, and the launcher tries again later"
# Until now no pass of a worker failed.
if grep "counter_ext worker for database app: a pass failed" "$CE_life_LOG"; then fail "a worker pass failed"; fi
q app "ALTER TABLE counter.jobs RENAME COLUMN running_run TO running_run_x"
for i in $(seq 1 50); do
    grep -q "counter_ext worker for database app: a pass failed" "$CE_life_LOG" && break
    sleep 0.2
done
grep -q "counter_ext worker for database app: a pass failed" "$CE_life_LOG" || fail "the broken pass was not logged"
q app "ALTER TABLE counter.jobs RENAME COLUMN running_run_x TO running_run"
before=$(q app "SELECT count(*) FROM counter.job_runs WHERE target = 'public.ticks' AND outcome = 'succeeded'")
wait_for app "SELECT count(*) >= $before + 1 FROM counter.job_runs WHERE target = 'public.ticks' AND outcome = 'succeeded'" 60 ||
    fail "the jobs did not run again after the failed pass"

echo "== the history is trimmed after counter_ext.history_retention"
q postgres "ALTER SYSTEM SET counter_ext.history_retention = '1h'"
q postgres "SELECT pg_reload_conf()" >/dev/null
old_runs=$(q app "WITH o AS (SELECT run_id FROM counter.job_runs WHERE outcome <> 'running' ORDER BY run_id LIMIT 5)
                  UPDATE counter.job_runs r SET started_at = started_at - interval '2 hours', finished_at = finished_at - interval '2 hours'
                  FROM o WHERE r.run_id = o.run_id RETURNING r.run_id" | paste -sd,)
young_runs=$(q app "WITH o AS (SELECT run_id FROM counter.job_runs WHERE outcome <> 'running' AND run_id NOT IN ($old_runs)
                    ORDER BY run_id LIMIT 5)
                    UPDATE counter.job_runs r SET started_at = started_at - interval '30 minutes', finished_at = finished_at - interval '30 minutes'
                    FROM o WHERE r.run_id = o.run_id RETURNING r.run_id" | paste -sd,)
wait_for app "SELECT count(*) = 0 FROM counter.job_runs WHERE run_id IN ($old_runs)" 30 || fail "old runs were not trimmed"
[ "$(q app "SELECT count(*) FROM counter.job_runs WHERE run_id IN ($young_runs)")" = 5 ] || fail "runs within the retention were trimmed"
q postgres "ALTER SYSTEM RESET counter_ext.history_retention"
q postgres "SELECT pg_reload_conf()" >/dev/null

echo "== CREATE EXTENSION in another database gets its jobs run; after DROP EXTENSION it has no worker"
q postgres "CREATE DATABASE other"
sleep 2
[ "$(q postgres "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'counter_ext worker' AND datname = 'other'")" = 0 ] ||
    fail "a worker stays in a database without the extension"
ce_psql -d other >/dev/null <<'SQL'
CREATE EXTENSION counter_ext;
CREATE TABLE public.ticks (target text, at timestamptz DEFAULT clock_timestamp(), run_as name DEFAULT session_user);
GRANT INSERT ON public.ticks TO life_owner;
CREATE PROCEDURE public.job_test_tick(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$ BEGIN INSERT INTO public.ticks (target) VALUES (target); rows_affected := 1; END $$;
INSERT INTO counter_internal.job_kinds (kind, procedure) VALUES ('test_tick', 'public.job_test_tick(text, bigint)');
SELECT counter.job_register('test_tick', 'public.ticks', '1 second', 'life_owner');
SQL
wait_for other "SELECT count(*) >= 2 FROM counter.job_runs WHERE runner = 'worker' AND outcome = 'succeeded'" 20 ||
    fail "the jobs of the new database did not run"
q other "DROP EXTENSION counter_ext"
sleep 3
for i in $(seq 1 10); do
    [ "$(q postgres "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'counter_ext worker' AND datname = 'other'")" = 0 ] ||
        fail "a worker runs in a database without the extension"
    sleep 0.2
done

echo "== a restore that loads the run record before it sets its sequence: the worker records its runs all along"
# A plain restore sets every sequence after all the tables' rows (for a big
# database, hours after counter.job_runs' rows and the jobs are in), so the
# restore is made in steps here: schema, rows without the run-id sequence's
# value (the jobs are in and fall due: the worker runs them), that value
# (which sets the sequence back, below the ids of runs recorded meanwhile),
# then the indexes and triggers. At no step may the worker's pass fail on an
# id the restore loaded or one it used itself, nor its runs stop.
dump=$(mktemp) && chmod 644 "$dump"
"$CE_PGBIN/pg_dump" -d app -Fc -f "$dump" || fail "pg_dump of app"
"$CE_PGBIN/pg_restore" -l "$dump" >"$dump.all"
grep -v "SEQUENCE SET counter job_runs_run_id_seq" "$dump.all" >"$dump.rest"
grep "SEQUENCE SET counter job_runs_run_id_seq" "$dump.all" >"$dump.seq" || fail "no SEQUENCE SET of the run ids in the dump"
q postgres "CREATE DATABASE app_steps"
"$CE_PGBIN/pg_restore" -d app_steps --exit-on-error --section=pre-data "$dump" || fail "pre-data"
t_rows=$(q app_steps "SELECT clock_timestamp()")
"$CE_PGBIN/pg_restore" -d app_steps --exit-on-error --section=data -L "$dump.rest" "$dump" || fail "data"
# (the sequence starts from 1: a loaded id among the first ten)
[ "$(q app_steps "SELECT min(run_id) <= 10 FROM counter.job_runs WHERE started_at < '$t_rows'")" = t ] ||
    fail "no loaded run id among the sequence's first ten: the check below would prove nothing"
wait_for app_steps "SELECT count(*) >= 10 FROM counter.job_runs WHERE started_at > '$t_rows' AND outcome = 'succeeded'" 60 ||
    fail "the restored jobs were not run while the run ids' sequence was not set:
$(grep "database app_steps" "$CE_life_LOG" | tail -3)"
"$CE_PGBIN/pg_restore" -d app_steps --exit-on-error -L "$dump.seq" "$dump" || fail "the sequence's value"
[ "$(q app_steps "SELECT (SELECT last_value FROM counter.job_runs_run_id_seq) < max(run_id) FROM counter.job_runs")" = t ] ||
    fail "the restore did not set the sequence back below the runs recorded meanwhile: the check below would prove nothing"
t_seq=$(q app_steps "SELECT clock_timestamp()")
wait_for app_steps "SELECT count(*) >= 6 FROM counter.job_runs WHERE started_at > '$t_seq' AND outcome = 'succeeded'" 60 ||
    fail "the restored jobs stopped once the restore set the run ids' sequence back"
"$CE_PGBIN/pg_restore" -d app_steps --exit-on-error --section=post-data "$dump" || fail "post-data"
if grep "counter_ext worker for database app_steps: a pass failed" "$CE_life_LOG"; then fail "a pass failed in the restore"; fi
echo "runs recorded in the restored database: $(q app_steps "SELECT count(*) FROM counter.job_runs WHERE started_at > '$t_rows'")"
q postgres "DROP DATABASE app_steps" || fail "DROP DATABASE app_steps failed"
rm -f "$dump" "$dump".*

echo "== CREATE DATABASE ... TEMPLATE and DROP DATABASE of a database whose worker is busy succeed"
long_job=$(q app "SELECT counter.job_register('test_sleep', '300', '1 hour', 'life_owner')")
wait_for app "SELECT EXISTS (SELECT 1 FROM counter.job_runs WHERE kind = 'test_sleep' AND outcome = 'running')" 30 ||
    fail "the long job did not start"
q postgres "CREATE DATABASE app_copy TEMPLATE app" || fail "CREATE DATABASE ... TEMPLATE app failed"
# The copy stopped the worker in the middle of the long job: that run is
# marked failed and backs off; make the job due again so the worker is busy.
wait_for app "SELECT NOT running FROM counter.job_status WHERE job_id = $long_job" 30 || fail "the stopped run stays running"
q app "SELECT counter.job_alter($long_job, next_run => now())" >/dev/null
wait_for app "SELECT EXISTS (SELECT 1 FROM counter.job_runs WHERE kind = 'test_sleep' AND outcome = 'running')" 30 ||
    fail "the long job did not start again"

echo "== a job dumped while it ran and restored into another database of the cluster runs there"
# The dump holds the job's run in progress, naming the app worker's process,
# alive in app and busy with it for 300 s: the restored database's runner
# must not take it for its own run in progress, left alone until that worker
# ends; and the restored run is no failure of the job here.
src_run=$(q app "SELECT running_run FROM counter.jobs WHERE job_id = $long_job")
src_failures=$(q app "SELECT failures FROM counter.jobs WHERE job_id = $long_job")
t_dump=$(q app "SELECT clock_timestamp()")
q postgres "CREATE DATABASE app_restored"
"$CE_PGBIN/pg_dump" -d app -Fc | "$CE_PGBIN/pg_restore" -d app_restored --exit-on-error || fail "pg_dump | pg_restore of app"
# (the restored database's worker may have acted already: the dumped run
# is there, running or closed as restored, and nothing else closed it)
[ "$(q app_restored "SELECT outcome IN ('running', 'failed') FROM counter.job_runs WHERE run_id = $src_run")" = t ] ||
    fail "the dump does not hold the run in progress: the check below would prove nothing"
wait_for app_restored "SELECT EXISTS (SELECT FROM counter.job_runs WHERE job_id = $long_job AND outcome = 'running'
                       AND started_at > '$t_dump')" 30 ||
    fail "the restored job does not run while the source's run goes on: $(q app_restored "SELECT * FROM counter.job_runs
          WHERE job_id = $long_job ORDER BY run_id")"
[ "$(q app "SELECT outcome FROM counter.job_runs WHERE run_id = $src_run")" = running ] ||
    fail "the source's run did not go on (the check proved nothing)"
[ "$(q app_restored "SELECT outcome || ': ' || message FROM counter.job_runs WHERE run_id = $src_run")" = \
  "failed: run abandoned: it was in progress in the database this one was restored from when the dump was taken; it never ran here" ] ||
    fail "the dumped run is not marked as restored: $(q app_restored "SELECT * FROM counter.job_runs WHERE run_id = $src_run")"
[ "$(q app_restored "SELECT failures FROM counter.jobs WHERE job_id = $long_job")" = "$src_failures" ] ||
    fail "the restored job counted the dumped run as its failure"
q postgres "DROP DATABASE app_restored" || fail "DROP DATABASE app_restored failed"

# The copy has the extension: its jobs run once the launcher sees it.
wait_for app_copy "SELECT EXISTS (SELECT 1 FROM counter.job_runs WHERE runner = 'worker' AND started_at > now() - interval '1 minute'
                   AND outcome <> 'running')" 30 || fail "the copy's jobs do not run"
q postgres "DROP DATABASE app" || fail "DROP DATABASE app failed"
# A job worker a session started with run_job holds no slot, and outlives its
# caller: DROP DATABASE stops it too.
sess_job=$(ce_psql -d app_copy -At <<'SQL'
BEGIN;
SELECT counter.job_register('test_sleep', '301', '1 hour', 'life_owner') AS id \gset
UPDATE counter.jobs SET enabled = false WHERE job_id = :id;
COMMIT;
SELECT :id;
SQL
)
ce_psql -d app_copy -c "SET application_name = 'run_job caller'" -c "CALL counter.run_job($sess_job)" >/dev/null 2>&1 &
wait_for app_copy "SELECT EXISTS (SELECT 1 FROM counter.job_runs WHERE job_id = $sess_job AND outcome = 'running')" 30 ||
    fail "the session's job did not start"
q postgres "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'run_job caller'" >/dev/null
wait
[ "$(q postgres "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'counter_ext worker' AND datname = 'app_copy'")" -ge 1 ] ||
    fail "the session's job worker did not outlive its caller"
q postgres "DROP DATABASE app_copy" || fail "DROP DATABASE app_copy failed"
wait_for postgres "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'counter_ext worker'" 10 ||
    fail "a worker outlived its database"
q postgres "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'counter_ext launcher'" | grep -qx t ||
    fail "the launcher is gone"

# The crash test killed a worker on purpose; nothing else may have crashed.
grep -v "(PID $killed_pid) was terminated by signal 9" "$CE_life_LOG" >"$CE_life_LOG.rest" || true
ce_scan_log "$CE_life_LOG.rest"

echo ok
