#!/usr/bin/env bash
# Issue 24, items 1 and 9 (second bullet). counter_ext's locks are object
# locks in its own lock space, which no role can take:
#  1. "mallory", a role with no rights, takes and holds every advisory lock
#     key 1.4 used (the classes of 1.4's registry, with the small ids, the
#     table's oid, counter_internal.rollup_lock_key of every rollup id for this hour
#     and day); meanwhile, in other sessions, the victim's INSERTs into a
#     table with a trigger-mode rollup, a trigger-mode tracked counter and a
#     buffered counter complete (statement_timeout makes a hang fail fast),
#     reconcile, partition_maintain, flush, CALL counter.run_steps and a
#     superuser's CALL counter.run_job do their work and are recorded
#     succeeded, and every count equals count(*).
#  2. when the work really is busy (the superuser holds the real locks in an
#     open transaction: a counter's, the table's, the flush's, the rollup's
#     day), each run is recorded 'skipped' with its reason in
#     counter.job_runs and counter.job_status (never 'succeeded'), and the
#     third skipped run of a counter raises the drift alert (WARNING+NOTIFY).
#  3. counter.job_runs is bounded per role: with history_runs_per_role = 50, a
#     loop of 200 reconcile calls by the victim leaves at most 50 of its runs,
#     and another owner's runs are all kept; so do 5 more runs of its job.
# lane: side
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ce_trap_holders

fail() { echo "FAIL: $*"; exit 1; }
q() { ce_psql -d sec -At -c "$1"; }
as_role() { local r=$1; shift; "$CE_PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -U "$r" -d sec "$@"; }
expect() { # DESCRIPTION EXPECTED ACTUAL
    [ "$2" = "$3" ] || fail "$1: expected '$2', got '$3'"
    echo "ok: $1"
}
wait_for() { # SQL SECONDS
    local i
    for ((i = 0; i < $2 * 5; i++)); do
        [ "$(q "$1" 2>/dev/null || true)" = t ] && return 0
        sleep 0.2
    done
    return 1
}

ce_cluster_start sec "counter_ext.enabled = off" "counter_ext.naptime = 1"
ce_cluster_use sec
ce_psql -d postgres -c "CREATE DATABASE sec" >/dev/null
ce_psql -d sec >/dev/null <<'SQL'
CREATE EXTENSION counter_ext;
CREATE ROLE victim LOGIN;
CREATE ROLE other LOGIN;
CREATE ROLE mallory LOGIN;
CREATE SCHEMA v AUTHORIZATION victim;
CREATE SCHEMA o AUTHORIZATION other;
SQL
as_role victim >/dev/null <<'SQL'
CREATE TABLE v.ev (id bigserial, k int NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON v.ev (at);
SELECT counter.rollup_create('v_r', 'v.ev', 'at', '{k}');
SELECT counter.track('v_t', 'v.ev', 'k', 'at');
CREATE TABLE v.bev (id bigserial, k int NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON v.bev (at);
SELECT counter.track('v_b', 'v.bev', 'k', 'at', buffered => true);
CREATE TABLE v.pe (k int, at timestamptz NOT NULL) PARTITION BY RANGE (at);
SELECT counter.partition_manage('v.pe', 'at', premake => 2);
SQL
as_role other >/dev/null <<'SQL'
CREATE TABLE o.ev (id bigserial, k int NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON o.ev (at);
SELECT counter.track('o_t', 'o.ev', 'k', 'at');
SQL
t_id=$(q "SELECT counter_id FROM counter.tracked WHERE name = 'v_t'")
b_id=$(q "SELECT counter_id FROM counter.tracked WHERE name = 'v_b'")
pe_oid=$(q "SELECT 'v.pe'::regclass::oid")
job_t=$(q "SELECT job_id FROM counter.jobs WHERE kind = 'reconcile' AND target = 'v_t'")
job_p=$(q "SELECT job_id FROM counter.jobs WHERE kind = 'partition_maintenance'")
job_b=$(q "SELECT job_id FROM counter.jobs WHERE kind = 'flush'")
job_r=$(q "SELECT job_id FROM counter.jobs WHERE kind = 'rollup_refresh'")
r_id=$(q "SELECT rollup_id FROM counter.rollups WHERE name = 'v_r'")
[ -n "$job_t" ] && [ -n "$job_p" ] && [ -n "$job_b" ] && [ -n "$job_r" ] || fail "the victim's jobs are missing"

echo "== 1. mallory holds every advisory lock key 1.4 used"
keys="SELECT 1380928584 AS c, counter_internal.rollup_lock_key(id, counter_internal.rollup_hour_number(now() + h)) AS k
        FROM generate_series(1, 50) id, (VALUES (interval '0'), (interval '1 hour')) x(h)
      UNION SELECT 1380928579, counter_internal.rollup_lock_key(id, counter_internal.rollup_day_number(now() + h))
        FROM generate_series(1, 50) id, (VALUES (interval '0'), (interval '1 hour')) x(h)
      UNION SELECT c, id FROM (VALUES (1667563524), (1667563535), (1667590754)) v(c), generate_series(1, 200) id
      UNION SELECT 1667576885, $pe_oid::int4"
# (computed here: the key functions are counter_ext's own, mallory may not call them)
keys="SELECT * FROM (VALUES $(q "SELECT string_agg(format('(%s, %s)', c, k), ', ') FROM ($keys) s")) v(c, k)"
nkeys=$(q "SELECT count(*) FROM ($keys) s")
as_role mallory -c "SELECT count(pg_advisory_lock(c, k)) FROM ($keys) s" -c "SELECT pg_sleep(600)" >/dev/null 2>&1 &
ce_holders+=($!)
wait_for "SELECT count(*) = $nkeys FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE l.locktype = 'advisory' AND l.granted AND a.usename = 'mallory'" 30 ||
    fail "mallory did not get its $nkeys advisory locks"
echo "ok: mallory holds $nkeys advisory locks"

as_role victim -c "SET statement_timeout = '10s'" \
    -c "INSERT INTO v.ev (k) SELECT i % 7 FROM generate_series(1, 100) i" \
    -c "INSERT INTO v.bev (k) SELECT i % 5 FROM generate_series(1, 60) i" \
    -c "INSERT INTO v.pe (k, at) SELECT i, now() FROM generate_series(1, 10) i" >/dev/null ||
    fail "the victim's INSERTs did not complete while mallory held the advisory locks"
echo "ok: the victim's INSERTs (rollup, tracked, buffered, managed) complete"
expect "reconcile does its work" ok \
    "$(as_role victim -c "SET statement_timeout = '10s'" -c "SELECT outcome FROM counter.reconcile('v_t')")"
expect "partition_maintain does its work" ok \
    "$(as_role victim -c "SET statement_timeout = '10s'" -c "SELECT outcome FROM counter.partition_maintain('v.pe')")"
expect "flush writes the buffered adds" t \
    "$(as_role victim -c "SET statement_timeout = '10s'" -c "SELECT counter.flush('v_b') > 0")"
expect "run_steps reconciles" ok \
    "$(as_role victim -c "SET statement_timeout = '10s'" -c "CALL counter.run_steps('reconcile', 'v_t', '{}', NULL)" \
        -c "SELECT outcome FROM counter.tracked_runs ORDER BY run_id DESC LIMIT 1" | tail -n 1)"
as_role victim -c "SET statement_timeout = '10s'" -c "DELETE FROM v.ev WHERE id = 1" >/dev/null   # a dirty hour
for j in $job_t $job_p $job_b $job_r; do
    ce_psql -d sec -At -c "SET statement_timeout = '30s'" -c "CALL counter.run_job($j)" >/dev/null || fail "run_job($j) failed"
done
expect "job_status: every job of the victim succeeded" "succeeded succeeded succeeded succeeded" \
    "$(q "SELECT string_agg(last_outcome, ' ' ORDER BY job_id) FROM counter.job_status
          WHERE job_id IN ($job_t, $job_p, $job_b, $job_r)")"
expect "the rollup job refreshed the dirty hour" 0 "$(q "SELECT count(*) FROM counter.rollup_dirty WHERE rollup_id = $r_id")"
expect "no run recorded skipped while mallory held its locks" 0 \
    "$(q "SELECT count(*) FROM counter.job_runs WHERE outcome = 'skipped'")"
expect "tracked counter = count(*) for every key" t \
    "$(as_role victim -c "SELECT bool_and(counter.value('v_t', k) = n) FROM (SELECT k, count(*) n FROM v.ev GROUP BY k) s")"
expect "buffered counter = count(*) for every key" t \
    "$(as_role victim -c "SELECT bool_and(counter.value('v_b', k) = n) FROM (SELECT k, count(*) n FROM v.bev GROUP BY k) s")"
expect "rollup = count(*)" t \
    "$(as_role victim -c "SELECT (SELECT sum(count) FROM v.v_r) = (SELECT count(*) FROM v.ev)")"
expect "the managed table's partitions were made" t \
    "$(q "SELECT count(*) >= 3 FROM pg_inherits WHERE inhparent = 'v.pe'::regclass")"
q "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = 'mallory'" >/dev/null
wait_for "SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE usename = 'mallory')" 30 || fail "mallory still runs"

echo "== 2. the work really busy: runs are recorded skipped"
# (the rollup's lock is the day of the row whose delete below dirties its
# hour: the day of section 1's inserts, which may not be today's any more)
ce_psql -d sec -c "BEGIN" \
    -c "SELECT counter_internal.lock_take('tracked', $t_id), counter_internal.lock_take('partition', $pe_oid),
               counter_internal.lock_take('flush', $b_id),
               counter_internal.lock_take('rollup_day', $r_id, (SELECT at FROM v.ev WHERE id = 2))" \
    -c "SELECT pg_sleep(600)" >/dev/null 2>&1 &
ce_holders+=($!)
wait_for "SELECT count(*) = 4 FROM pg_locks WHERE locktype = 'object' AND granted
          AND classid = 'counter_internal.lock_space'::regclass" 30 || fail "the superuser did not take the real locks"
as_role victim -c "INSERT INTO v.bev (k) VALUES (1)" -c "DELETE FROM v.ev WHERE id = 2" >/dev/null
expect "reconcile says skipped" skipped "$(as_role victim -c "SELECT outcome FROM counter.reconcile('v_t')" 2>/dev/null)"
expect "its run is recorded skipped, with the reason" "skipped|another session is reconciling the counter" \
    "$(q "SELECT outcome || '|' || message FROM counter.job_runs WHERE kind = 'reconcile' AND object_id = $t_id
          ORDER BY run_id DESC LIMIT 1")"
expect "partition_maintain says busy" busy "$(as_role victim -c "SELECT outcome FROM counter.partition_maintain('v.pe')")"
expect "flush writes nothing" 0 "$(as_role victim -c "SELECT counter.flush('v_b')" 2>/dev/null)"
expect "rollup_refresh_dirty leaves the busy day" 0 \
    "$(as_role victim -c "SELECT counter.rollup_refresh_dirty('v_r')")"
expect "its run is recorded skipped, with the reason" "skipped|skipped 1 locked chunks: another session is refreshing them" \
    "$(q "SELECT outcome || '|' || message FROM counter.job_runs WHERE kind = 'rollup_refresh' ORDER BY run_id DESC LIMIT 1")"
for j in $job_t $job_p $job_b $job_r; do
    ce_psql -d sec -At -c "SET statement_timeout = '30s'" -c "CALL counter.run_job($j)" >/dev/null 2>&1 || fail "run_job($j) failed"
done
expect "job_status: every job of the victim skipped, with its reason" \
    "skipped:another session is flushing the counter skipped:another session is maintaining the table skipped:another session is reconciling the counter skipped:skipped 1 locked chunks: another session is refreshing them" \
    "$(q "SELECT string_agg(last_outcome || ':' || last_message, ' ' ORDER BY kind) FROM counter.job_status
          WHERE job_id IN ($job_t, $job_p, $job_b, $job_r)")"
expect "the skipped job runs are not backed off" 0 \
    "$(q "SELECT max(failures) FROM counter.jobs WHERE job_id IN ($job_t, $job_p, $job_b, $job_r)")"
out=$(as_role victim -c "LISTEN counter_ext_drift" -c "SELECT outcome FROM counter.reconcile('v_t')" 2>&1)
case "$out" in
*'tracked counter "v_t" was not reconciled: its last 3 runs were skipped'*) echo "ok: the third skip raises the alert" ;;
*) fail "no alert after three skipped runs: $out" ;;
esac
# the notification carries the run's id only; the owner reads that run
alert_run=$(printf '%s\n' "$out" | sed -n 's/.*with payload "{"run_id" : \([0-9]*\)}" received.*/\1/p' | sed -n 1p)
[ -n "$alert_run" ] || fail "no NOTIFY with the alert: $out"
expect "the alert is notified on counter_ext_drift: the run it names was skipped and alerted" "reconcile|v_t|skipped" \
    "$(as_role victim -c "SELECT kind, target, outcome FROM counter.alerts WHERE run_id = $alert_run")"
q "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'object'
   AND classid = 'counter_internal.lock_space'::regclass AND pid <> pg_backend_pid()" >/dev/null
wait_for "SELECT NOT EXISTS (SELECT FROM pg_locks WHERE locktype = 'object' AND classid = 'counter_internal.lock_space'::regclass)" 30 ||
    fail "the real locks were not released"
expect "after the holder is gone, reconcile works again" ok "$(as_role victim -c "SELECT outcome FROM counter.reconcile('v_t')")"
expect "the dirty hour is refreshed then" 0 \
    "$(as_role victim -c "SELECT counter.rollup_refresh_dirty('v_r') >= 0" -c "SELECT count(*) FROM counter.rollup_dirty" | tail -n 1)"
expect "rollup = count(*) again" t \
    "$(as_role victim -c "SELECT (SELECT sum(count) FROM v.v_r) = (SELECT count(*) FROM v.ev)")"
expect "and the counts are still count(*)" t \
    "$(as_role victim -c "SELECT counter.flush('v_b') >= 0 AND bool_and(counter.value('v_b', k) = n)
                          FROM (SELECT k, count(*) n FROM v.bev GROUP BY k) s")"

echo "== 3. counter.job_runs is bounded per role"
ce_psql -d sec -c "ALTER SYSTEM SET counter_ext.history_runs_per_role = 50" -c "SELECT pg_reload_conf()" >/dev/null
sleep 1
as_role other -c "SELECT count(counter.reconcile('o_t')) FROM generate_series(1, 10)" >/dev/null
other_runs=$(q "SELECT string_agg(run_id::text, ',' ORDER BY run_id) FROM counter.job_runs WHERE run_as = 'other'::regrole")
as_role victim -c "SELECT count(counter.reconcile('v_t')) FROM generate_series(1, 200)" >/dev/null
expect "the victim's 200 runs left at most 50 rows" t \
    "$(q "SELECT count(*) BETWEEN 40 AND 50 FROM counter.job_runs WHERE run_as = 'victim'::regrole")"
expect "the newest of them are kept" t \
    "$(q "SELECT max(run_id) = (SELECT max(run_id) FROM counter.job_runs) FROM counter.job_runs WHERE run_as = 'victim'::regrole")"
expect "the other owner's runs are all kept" "$other_runs" \
    "$(q "SELECT string_agg(run_id::text, ',' ORDER BY run_id) FROM counter.job_runs WHERE run_as = 'other'::regrole")"
expect "other has its 10 runs" 10 "$(q "SELECT count(*) FROM counter.job_runs WHERE run_as = 'other'::regrole")"
for _ in 1 2 3 4 5; do   # a job's runs (the worker's claim) are bounded the same way
    ce_psql -d sec -At -c "CALL counter.run_job($job_t)" >/dev/null || fail "run_job($job_t) failed"
done
expect "after 5 more job runs, still at most 50 rows of the victim, the newest a job's" "t|t" \
    "$(q "SELECT count(*) <= 50, bool_or(job_id = $job_t AND run_id = (SELECT max(run_id) FROM counter.job_runs))
          FROM counter.job_runs WHERE run_as = 'victim'::regrole")"
expect "the other owner's runs are still all kept" "$other_runs" \
    "$(q "SELECT string_agg(run_id::text, ',' ORDER BY run_id) FROM counter.job_runs WHERE run_as = 'other'::regrole")"
ce_scan_log "$CE_sec_LOG" || fail "a server process crashed"
echo ok
