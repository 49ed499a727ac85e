#!/usr/bin/env bash
# No deadlock between writers and reconciliation, ever (issue 13): in a
# cluster of its own with the background worker on, 8 writers run batches
# over all the hot keys (inserts, re-delivered batches with ON CONFLICT DO
# NOTHING, deletes, event-time updates, key moves: one statement each, as
# each statement's deltas are written in key order), with 1-second buckets
# and watermark lag 0,
# while a loop reconciles every 100 ms and the worker runs the job every
# second, for 60 s (CE_DEADLOCK_SECONDS). Then: no 40P01 anywhere (pgbench's
# clients and the server log), no failed job run, and every key of the
# tracked counter (before and after a last reconciliation) and every (key,
# hour) of a trigger-mode rollup on the same table (once its dirty hours are
# recomputed) equal count(*).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
seconds=${CE_DEADLOCK_SECONDS:-60}
work=$(mktemp -d)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    ce_cluster_stop_all
    rm -rf "$work"
}
trap cleanup EXIT

ce_cluster_start deadlock "counter_ext.naptime = 1" "deadlock_timeout = 100ms" "log_lock_waits = on" \
    || { echo "cannot start the cluster"; exit 1; }
ce_cluster_use deadlock
"$CE_PGBIN/createdb" dl
export PGDATABASE=dl
ce_psql -q <<'SQL'
CREATE EXTENSION counter_ext;
CREATE TABLE ev (id bigint PRIMARY KEY, k integer NOT NULL, t timestamptz NOT NULL);
CREATE INDEX ON ev (k, t);
CREATE INDEX ON ev (t);
SELECT FROM counter.track('ev', 'ev', 'k', 't', watermark_lag => '0', bucket_width => '1 second', shards => 4,
                          batch_size => 3, reconcile_every => '1 second', verify_every => '1 minute');
SELECT FROM counter.rollup_create('ev_hourly', 'ev', 't', '{k}');
INSERT INTO ev SELECT g, 1 + g % 6, now() - g * interval '10 ms' FROM generate_series(1, 600) g;
SELECT FROM counter.reconcile('ev');
SQL

# A batch over several hot keys in random order; deletes of a few rows. The
# writers lock the source rows they change in id order (FOR UPDATE in the
# subquery), as any application must, or they deadlock on those rows alone.
cat >"$work/batch.sql" <<'SQL'
\set base random(1000, 400000)
INSERT INTO ev SELECT :base * 10 + g, 1 + (random() * 5)::int, now() - random() * interval '3 seconds'
FROM generate_series(0, 9) g ON CONFLICT (id) DO NOTHING;
SQL
cat >"$work/delete.sql" <<'SQL'
\set k1 random(1, 6)
DELETE FROM ev WHERE id IN (SELECT id FROM ev WHERE k = :k1 ORDER BY id LIMIT 3 OFFSET 9 FOR UPDATE);
SQL
# A re-delivered batch: the same ids again (counted once).
cat >"$work/redeliver.sql" <<'SQL'
\set base random(1000, 1200)
INSERT INTO ev SELECT :base * 10 + g, 1 + g % 6, now() - random() * interval '2 seconds' FROM generate_series(0, 9) g
ON CONFLICT (id) DO NOTHING;
SQL
cat >"$work/move.sql" <<'SQL'
\set k1 random(1, 6)
\set k2 random(1, 6)
UPDATE ev SET t = t - interval '1 second' WHERE id IN (SELECT id FROM ev ORDER BY id DESC LIMIT 4 OFFSET 3 FOR UPDATE);
UPDATE ev SET k = :k2 WHERE id = (SELECT id FROM ev WHERE k = :k1 ORDER BY id DESC LIMIT 1 OFFSET 5);
SQL

"$CE_PGBIN/pgbench" -n -c 8 -j 2 -T "$seconds" --max-tries=20 -f "$work/batch.sql@5" -f "$work/redeliver.sql@2" \
    -f "$work/delete.sql@2" -f "$work/move.sql@3" >"$work/pgbench.txt" 2>&1 &
bench=$!
( while true; do
      ce_psql -At -c "SELECT outcome FROM counter.reconcile('ev')" 2>>"$work/reconcile.err" >/dev/null || true
      sleep 0.1
  done ) &
pids+=($!)
wait "$bench" || true
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()

sed -n 's/^number of transactions actually processed: /transactions: /p' "$work/pgbench.txt"
failures=0
# A deadlock that involves reconciliation (the loop's counter.reconcile, the
# worker's job) is what must never happen. Writers among themselves may still
# meet on the source table's own rows (two INSERT ... ON CONFLICT DO NOTHING
# of the same ids, once in a long while under load): that is the workload's,
# pgbench retries those transactions (--max-tries), and they are counted.
if grep -q "40P01\|deadlock detected" "$work/reconcile.err"; then
    grep -h -A4 "deadlock detected" "$work/reconcile.err" | head -12
    echo "a reconciliation was a deadlock victim"
    failures=1
fi
involved=$(awk '/deadlock detected/ { n = 8 } n > 0 { print; n-- }' "$CE_deadlock_LOG" | grep -c "reconcile\|counter_internal" || true)
writers=$(grep -c "deadlock detected" "$CE_deadlock_LOG" || true)
echo "deadlocks in the server log: $writers, of which with reconciliation: $involved"
if [ "$involved" -ne 0 ]; then
    awk '/deadlock detected/ { n = 8 } n > 0 { print; n-- }' "$CE_deadlock_LOG" | head -24
    # where each side waited (log_lock_waits: the statement inside the function)
    grep -B1 -A6 "still waiting for" "$CE_deadlock_LOG" | grep -B3 -A4 "reconcile" | head -40
    echo "a deadlock involved reconciliation"
    failures=1
fi
if grep -q "aborted in command" "$work/pgbench.txt"; then
    grep -h "ERROR" "$work/pgbench.txt" | head -5
    echo "a writer failed"
    failures=1
fi
# The worker ran the job, and no run of it failed.
runs=$(ce_psql -At -c "SELECT count(*) FILTER (WHERE outcome = 'succeeded'), count(*) FILTER (WHERE outcome = 'failed')
                        FROM counter.job_runs r JOIN counter.jobs j USING (job_id) WHERE j.kind = 'reconcile'")
echo "worker's reconcile runs (succeeded|failed): $runs"
[ "${runs#*|}" = 0 ] || { echo "a job run failed"; ce_psql -At -c "SELECT error FROM counter.job_runs WHERE outcome = 'failed' LIMIT 3"; failures=1; }
[ "${runs%|*}" -gt 0 ] || { echo "the worker never ran the job"; failures=1; }

check() {
    ce_psql -At <<'SQL'
SELECT (SELECT count(*) FROM (SELECT k, count(*) AS n FROM ev GROUP BY k) x WHERE counter.value('ev', k) <> n)
    || ' ' || (SELECT count(*) FROM (
        (SELECT k, hour, count FROM ev_hourly WHERE count <> 0
         EXCEPT
         SELECT k, date_trunc('hour', t AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', count(*) FROM ev GROUP BY 1, 2)
        UNION ALL
        (SELECT k, date_trunc('hour', t AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', count(*) FROM ev GROUP BY 1, 2
         EXCEPT
         SELECT k, hour, count FROM ev_hourly)) d);
SQL
}
# (DELETE and UPDATE mark a rollup's hours dirty; its job recomputes them. A
# refresh skips the hours the worker's job is recomputing at that moment, so
# refresh until no dirty hour is left.)
for _ in $(seq 1 60); do
    ce_psql -At -c "SELECT counter.rollup_refresh_dirty('ev_hourly')" >/dev/null 2>&1 || true
    [ "$(ce_psql -At -c "SELECT count(*) FROM counter.rollup_dirty")" = 0 ] && break
    sleep 0.5
done
before=$(check)
ce_psql -At -c "SELECT FROM counter.reconcile('ev', all_keys => true)" >/dev/null
after=$(check)
drift=$(ce_psql -At -c "SELECT coalesce(sum(abs(drift_positive) + abs(drift_negative)), 0) FROM counter.tracked_history
                         WHERE counter = 'ev'")
echo "mismatched keys / rollup hours: before a last reconcile $before, after $after; drift ever found $drift"
[ "$before" = "0 0" ] && [ "$after" = "0 0" ] || {
    echo "counts are not exact"
    ce_psql -c "SELECT coalesce(r.k, e.k) AS k, coalesce(r.hour, e.hour) AS hour, r.count AS rollup, e.n AS truth
        FROM ev_hourly r FULL JOIN (SELECT k, date_trunc('hour', t AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour,
                                           count(*) AS n FROM ev GROUP BY 1, 2) e ON e.k = r.k AND e.hour = r.hour
        WHERE r.count IS DISTINCT FROM e.n ORDER BY 1, 2 LIMIT 10"
    failures=1
}
[ "$drift" = 0 ] || { echo "a run found drift (a write overwritten or subtracted twice)"; failures=1; }
ce_scan_log "$CE_deadlock_LOG"
[ $failures -eq 0 ] && echo ok
exit $failures
