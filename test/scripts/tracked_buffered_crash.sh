#!/usr/bin/env bash
# Crash of a server with buffered counters: in a cluster of its own with the
# background worker running the flush and reconcile jobs, 6 writers insert
# and delete rows of a buffered trigger-mode counter (and of one whose jobs
# run hourly, with rows a day old) and insert rows with a
# counter.add to a buffered application-mode counter in the same
# transaction. The postmaster is killed with SIGKILL under that load (what
# was published and not flushed is lost), the cluster restarted, and then,
# with no reconcile called by anyone but the worker, within a bounded wait
# every key equals count(*) of its rows: the first flush after the restart
# sees a new shared table, schedules a full reconciliation, and the worker
# runs it. Prints what the crash lost (the repair's drift) and how long the
# repair took.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

work=$(mktemp -d)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    ce_cluster_stop_all
    rm -rf "$work"
}
trap cleanup EXIT

ce_cluster_start bcrash "counter_ext.naptime = 1" "counter_ext.flush_interval = '1s'" ||
    { echo "cannot start the crash cluster"; exit 1; }
ce_cluster_use bcrash
"$CE_PGBIN/createdb" bcrashdb
export PGDATABASE=bcrashdb

ce_psql <<'SQL'
CREATE EXTENSION counter_ext;
CREATE TABLE ev (id bigserial PRIMARY KEY, k bigint NOT NULL, t timestamptz NOT NULL);
CREATE INDEX ON ev (t);
CREATE INDEX ON ev (k);
SELECT counter.track('ev', 'ev', 'k', 't', watermark_lag => '0', bucket_width => '1 second', shards => 4,
                     reconcile_every => '1 second', buffered => true);
CREATE TABLE calls (id bigserial PRIMARY KEY, api bigint NOT NULL, t timestamptz NOT NULL);
CREATE INDEX ON calls (t);
SELECT counter.track('calls', 'calls', 'api', 't', mode => 'application', watermark_lag => '0',
                     bucket_width => '1 second', reconcile_every => '1 second', buffered => true);
CREATE TABLE late_ev (id bigserial PRIMARY KEY, k bigint NOT NULL, t timestamptz NOT NULL);
CREATE INDEX ON late_ev (t);
SELECT counter.track('late', 'late_ev', 'k', 't', watermark_lag => '0', reconcile_every => '1 hour', buffered => true);
SELECT outcome FROM counter.reconcile('late');   -- its first (full) run, before any row
SELECT (counter.job_alter(job_id, run_every => '1 hour', next_run => now() + interval '1 hour')).kind
FROM counter.jobs WHERE target = 'late';
SQL

cat >"$work/insert.sql" <<'SQL'
\set k random(1, 20)
INSERT INTO ev (k, t) SELECT :k, now() - random() * interval '2 seconds' FROM generate_series(1, 1 + :k % 3);
SQL
# late rows (event time a day ago) of a counter whose jobs run hourly:
# everything it buffers is lost in the crash, and only the repair (which
# makes its reconcile job due at once) brings it back within the wait
cat >"$work/late.sql" <<'SQL'
\set k random(1, 5)
INSERT INTO late_ev (k, t) VALUES (:k, now() - interval '1 day');
SQL
cat >"$work/delete.sql" <<'SQL'
\set k random(1, 20)
DELETE FROM ev WHERE id = (SELECT id FROM ev WHERE k = :k ORDER BY id LIMIT 1 OFFSET 4);
SQL
cat >"$work/call.sql" <<'SQL'
\set k random(1, 20)
BEGIN;
INSERT INTO calls (api, t) VALUES (:k, now());
SELECT counter.add('calls', :k::bigint, 1, now());
COMMIT;
SQL
"$CE_PGBIN/pgbench" -n -c 6 -j 2 -T 60 -f "$work/insert.sql@5" -f "$work/late.sql@2" -f "$work/delete.sql@2" -f "$work/call.sql@5" \
    >"$work/pgbench.txt" 2>&1 &
pids+=($!)

# Under load for 8 s, and longer until the worker has flushed at least once
# (on 2 busy cores it may get few turns), at most 50 s.
sleep 8
for _ in $(seq 1 42); do
    flushed=$(ce_psql -At -c "SELECT coalesce(sum(flushes), 0) FROM counter.buffered")
    [ "$flushed" -gt 0 ] && break
    sleep 1
done
[ "$flushed" -gt 0 ] || { echo "the worker flushed nothing in 50 s"; cat "$work/pgbench.txt"; exit 1; }
pending=$(ce_psql -At -c "SELECT coalesce(sum(abs(pending)), 0) FROM counter.buffered")
echo "killing the postmaster under load ($flushed flushes so far, $pending buffered at the last look)"
ce_cluster_kill bcrash "${pids[@]}"
pids=()

restart=$(date +%s.%N)
ce_cluster_restart bcrash || { tail -30 "$CE_bcrash_LOG"; echo "restart failed"; exit 1; }

mismatch_sql=$(cat <<'SQL'
SELECT coalesce(string_agg(format('%s key %s: value %s, truth %s', c, k, v, n), '; '), '')
FROM (SELECT 'ev' AS c, k, counter.value('ev', k) AS v, count(e.id) AS n
      FROM generate_series(1, 20) k LEFT JOIN ev e USING (k) GROUP BY k
      UNION ALL
      SELECT 'late', k, counter.value('late', k), count(l.id)
      FROM generate_series(1, 5) k LEFT JOIN late_ev l USING (k) GROUP BY k
      UNION ALL
      SELECT 'calls', k, counter.value('calls', k), count(c.id)
      FROM generate_series(1, 20) k LEFT JOIN calls c ON c.api = k GROUP BY k) s
WHERE v <> n;
SQL
)
# Bounded wait: a flush (1 s), the full run it schedules, and one more run
# for rows whose event time was past that run's watermark.
mismatch=unknown
for _ in $(seq 1 120); do
    mismatch=$(ce_psql -At -c "$mismatch_sql" 2>/dev/null || echo "not ready")
    [ -z "$mismatch" ] && break
    sleep 0.5
done
done_at=$(date +%s.%N)
[ -z "$mismatch" ] || {
    echo "not exact 60 s after the restart: $mismatch"
    ce_psql -c "SELECT * FROM counter.buffered" -c "SELECT * FROM counter.job_status" || true
    tail -20 "$CE_bcrash_LOG"
    exit 1
}
repairs=$(ce_psql -At -c "SELECT string_agg(counter || '=' || repairs, ', ' ORDER BY counter) FROM counter.buffered")
case "$repairs" in *=0*) echo "a counter shows no repair after the restart: $repairs"; exit 1 ;; esac
grep -q "since buffered counters .* were last flushed" "$CE_bcrash_LOG" || { echo "no restart noticed in the log"; exit 1; }
ce_psql -At -F ' ' -c "SELECT 'repair runs after the restart:', coalesce(string_agg(format('%s run %s all_keys=%s drift %s/%s',
        counter, run_id, all_keys, drift_positive, drift_negative), '; ' ORDER BY run_id), 'none')
    FROM counter.tracked_history WHERE started_at >= pg_postmaster_start_time() AND (drift_positive <> 0 OR drift_negative <> 0)"
lost=$(ce_psql -At -c "SELECT coalesce(-sum(drift_negative), 0) FROM counter.tracked_history
    WHERE started_at >= pg_postmaster_start_time()")
echo "the crash lost $lost buffered adds (repaired); every key exact $(awk -v a="$restart" -v b="$done_at" 'BEGIN { printf "%.1f", b - a }') s after the restart ($repairs)"
echo ok
