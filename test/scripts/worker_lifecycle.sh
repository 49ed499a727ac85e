#!/usr/bin/env bash
# The background worker in a real preloaded cluster: it finds the database by
# itself, runs due jobs, records them; a failing job backs off while the others
# go on; pg_stat_activity shows it; SIGTERM stops it (the launcher starts it
# again), SIGHUP re-reads counter_ext.enabled; kill -9 of a worker: the
# cluster restarts, the worker comes back, the run the crash interrupted is
# marked failed and the jobs carry on; DROP EXTENSION stops it; CREATE
# EXTENSION in another database starts one there; DROP DATABASE and CREATE
# DATABASE ... TEMPLATE of a database with a busy worker succeed.
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
worker_pid() { q postgres "SELECT pid FROM pg_stat_activity WHERE backend_type = 'counter_ext worker' AND datname = '$1'"; }

ce_cluster_start life "counter_ext.enabled = on" "counter_ext.naptime = 1" "restart_after_crash = on"
ce_cluster_use life

q postgres "CREATE DATABASE app"
ce_psql -d app <<'SQL'
CREATE EXTENSION counter_ext;
CREATE TABLE public.ticks (target text, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE public.victim (x int);
-- A job that checks its target exists, works in two committed steps.
CREATE PROCEDURE counter.job_test_tick(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM target::regclass;
    INSERT INTO public.ticks (target) VALUES (target);
    COMMIT;
    INSERT INTO public.ticks (target) VALUES (target);
    rows_affected := 2;
END $$;
-- A job that takes long when its target says so.
CREATE PROCEDURE counter.job_test_sleep(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.ticks (target) VALUES (target);
    COMMIT;
    PERFORM pg_catalog.pg_sleep(target::float8);
END $$;
SELECT counter.job_register('test_tick', 'public.ticks', '1 second');
SELECT counter.job_register('test_tick', 'public.victim', '1 second');
SQL

echo "== the worker finds the database and runs its jobs"
wait_for app "SELECT count(*) >= 3 FROM counter.job_runs WHERE target = 'public.ticks' AND outcome = 'succeeded'
              AND runner = 'worker' AND rows_affected = 2" 30 || fail "the worker did not run the jobs"
[ -n "$(worker_pid app)" ] || fail "no worker in pg_stat_activity"
q postgres "SELECT query FROM pg_stat_activity WHERE backend_type = 'counter_ext worker'" | grep -q '^counter_ext worker: ' ||
    fail "pg_stat_activity does not say what the worker does"

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

echo "== SIGTERM stops the worker promptly, in the middle of a job (and the launcher starts it again)"
# (run_every 1 hour: after its run is marked failed it backs off, and the
# worker, which runs one job at a time, goes on with the others.)
sleep_job=$(q app "SELECT counter.job_register('test_sleep', '60', '1 hour')")
wait_for app "SELECT EXISTS (SELECT 1 FROM counter.job_runs WHERE kind = 'test_sleep' AND outcome = 'running')" 30 ||
    fail "the long job did not start"
pid=$(worker_pid app)
q postgres "SELECT pg_terminate_backend($pid)" >/dev/null
gone=no
# Typically within milliseconds; the bound is 3 s for a loaded machine.
for i in $(seq 1 30); do
    if ! kill -0 "$pid" 2>/dev/null; then gone=yes; break; fi
    sleep 0.1
done
[ $gone = yes ] || fail "worker $pid still alive 3 s after SIGTERM"
wait_for postgres "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'counter_ext worker' AND datname = 'app'
                   AND pid <> $pid" 30 || fail "the launcher did not start the worker again"
# The run SIGTERM interrupted is marked failed by the new worker.
wait_for app "SELECT EXISTS (SELECT 1 FROM counter.job_runs WHERE kind = 'test_sleep' AND pid = $pid AND outcome = 'failed'
              AND message LIKE 'run abandoned%')" 30 || fail "the interrupted run was not marked failed"

echo "== kill -9 of a worker: the cluster restarts, the worker comes back and carries on"
q app "SELECT counter.job_alter($sleep_job, next_run => now())" >/dev/null
wait_for app "SELECT EXISTS (SELECT 1 FROM counter.job_runs WHERE kind = 'test_sleep' AND outcome = 'running')" 60 ||
    fail "the long job did not start again"
pid=$(worker_pid app)
crashed_run=$(q app "SELECT run_id FROM counter.job_runs WHERE kind = 'test_sleep' AND outcome = 'running'")
# The suite runs with synchronous_commit = off: flush the WAL so the claim
# survives the crash restart.
q app "CHECKPOINT"
killed_pid=$pid
kill -9 "$pid"
sleep 1
wait_for postgres "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'counter_ext worker' AND datname = 'app'" 60 ||
    fail "no worker after the crash restart"
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
wait_for postgres "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'counter_ext worker'" 20 ||
    fail "the worker did not come back with counter_ext.enabled = on"

echo "== SIGHUP: a new counter_ext.role makes the workers reconnect as that role"
q postgres "CREATE ROLE jobboss LOGIN SUPERUSER"
q postgres "ALTER SYSTEM SET counter_ext.role = 'jobboss'"
q postgres "SELECT pg_reload_conf()" >/dev/null
wait_for postgres "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'counter_ext worker' AND usename = 'jobboss'" 20 ||
    fail "the worker did not reconnect as counter_ext.role"
before=$(q app "SELECT count(*) FROM counter.job_runs WHERE target = 'public.ticks' AND outcome = 'succeeded'")
wait_for app "SELECT count(*) >= $before + 2 FROM counter.job_runs WHERE target = 'public.ticks' AND outcome = 'succeeded'" 30 ||
    fail "jobs did not run under counter_ext.role"
q postgres "ALTER SYSTEM RESET counter_ext.role"
q postgres "SELECT pg_reload_conf()" >/dev/null

echo "== an ERROR outside any job is survived in the worker's loop (logged, retried later, same process)"
wait_for postgres "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'counter_ext worker' AND datname = 'app'
                   AND usename <> 'jobboss'" 20 || fail "no worker after the role reset"
# Until now no pass of a worker failed.
if grep "counter_ext worker: a pass over database" "$CE_life_LOG"; then fail "a worker pass failed"; fi
pid=$(worker_pid app)
q app "ALTER TABLE counter.jobs RENAME COLUMN running_run TO running_run_x"
for i in $(seq 1 50); do
    grep -q "counter_ext worker: a pass over database \"app\" failed" "$CE_life_LOG" && break
    sleep 0.2
done
grep -q "counter_ext worker: a pass over database \"app\" failed" "$CE_life_LOG" || fail "the broken pass was not logged"
q app "ALTER TABLE counter.jobs RENAME COLUMN running_run_x TO running_run"
before=$(q app "SELECT count(*) FROM counter.job_runs WHERE target = 'public.ticks' AND outcome = 'succeeded'")
wait_for app "SELECT count(*) >= $before + 1 FROM counter.job_runs WHERE target = 'public.ticks' AND outcome = 'succeeded'" 30 ||
    fail "the worker did not recover from the failed pass"
[ "$(worker_pid app)" = "$pid" ] || fail "the worker was replaced instead of recovering in its loop"

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

echo "== CREATE EXTENSION in another database starts its worker; DROP EXTENSION stops it"
q postgres "CREATE DATABASE other"
sleep 2
[ -z "$(worker_pid other)" ] || fail "a worker stays in a database without the extension"
q other "CREATE EXTENSION counter_ext"
wait_for postgres "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'counter_ext worker' AND datname = 'other'" 10 ||
    fail "no worker after CREATE EXTENSION"
q other "DROP EXTENSION counter_ext"
wait_for postgres "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'counter_ext worker' AND datname = 'other'" 10 ||
    fail "the worker did not exit after DROP EXTENSION"

echo "== CREATE DATABASE ... TEMPLATE and DROP DATABASE of a database whose worker is busy succeed"
long_job=$(q app "SELECT counter.job_register('test_sleep', '300', '1 hour')")
wait_for app "SELECT EXISTS (SELECT 1 FROM counter.job_runs WHERE kind = 'test_sleep' AND outcome = 'running')" 30 ||
    fail "the long job did not start"
q postgres "CREATE DATABASE app_copy TEMPLATE app" || fail "CREATE DATABASE ... TEMPLATE app failed"
wait_for postgres "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'counter_ext worker' AND datname = 'app'" 30 ||
    fail "app has no worker after the copy"
# The copy stopped the worker in the middle of the long job: that run is
# marked failed and backs off; make the job due again so the worker is busy.
wait_for app "SELECT NOT running FROM counter.job_status WHERE job_id = $long_job" 30 || fail "the stopped run stays running"
q app "SELECT counter.job_alter($long_job, next_run => now())" >/dev/null
wait_for app "SELECT EXISTS (SELECT 1 FROM counter.job_runs WHERE kind = 'test_sleep' AND outcome = 'running')" 30 ||
    fail "the long job did not start again"
# The copy has the extension: its worker starts when the launcher sees it.
wait_for postgres "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'counter_ext worker' AND datname = 'app_copy'" 30 ||
    fail "no worker in the copy"
q postgres "DROP DATABASE app" || fail "DROP DATABASE app failed"
q postgres "DROP DATABASE app_copy" || fail "DROP DATABASE app_copy failed"
wait_for postgres "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'counter_ext worker'" 10 ||
    fail "a worker outlived its database"
q postgres "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'counter_ext launcher'" | grep -qx t ||
    fail "the launcher is gone"

# The crash test killed a worker on purpose; nothing else may have crashed.
grep -v "(PID $killed_pid) was terminated by signal 9" "$CE_life_LOG" >"$CE_life_LOG.rest" || true
ce_scan_log "$CE_life_LOG.rest"

echo ok
