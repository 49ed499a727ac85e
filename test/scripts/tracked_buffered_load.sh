#!/usr/bin/env bash
# Buffered counters under real concurrency: in a cluster of its own with a
# small shared table (counter_ext.buffer_entries = 2048, so adds also take
# the path of a full table), 16 writers insert (many rows late), delete and
# move rows of a trigger-mode counter and insert rows with a counter.add in
# the same transaction for an application-mode one, keys drawn from a zipf
# distribution over 100,000, for 15 s, while flushes run every 200 ms and
# reconciliations (watermark lag 0) every 300 ms. When the writers stop,
# with no other step, every key equals count(*) (the reads add what is
# buffered), and no reconciliation ever found drift: there is no source of
# drift here, so any would be an add lost or counted twice.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

seconds=${CE_BUFFERED_SECONDS:-15}
work=$(mktemp -d)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    ce_cluster_stop_all
    rm -rf "$work"
}
trap cleanup EXIT

ce_cluster_start bload "counter_ext.enabled = off" "counter_ext.buffer_entries = 2048" ||
    { echo "cannot start the cluster"; exit 1; }
ce_cluster_use bload
"$CE_PGBIN/createdb" bloaddb
export PGDATABASE=bloaddb

ce_psql -v buffered="${CE_BUFFERED:-true}" <<'SQL'
CREATE EXTENSION counter_ext;
CREATE TABLE ev (id bigserial PRIMARY KEY, k bigint NOT NULL, t timestamptz NOT NULL);
CREATE INDEX ON ev (k);
CREATE INDEX ON ev (t);
SELECT counter.track('ev', 'ev', 'k', 't', watermark_lag => '0', bucket_width => '1 second', shards => 4,
                     batch_size => 500, drift_log_threshold => 0, buffered => :buffered);
CREATE TABLE calls (id bigserial PRIMARY KEY, api bigint NOT NULL, t timestamptz NOT NULL);
CREATE INDEX ON calls (api);
CREATE INDEX ON calls (t);
SELECT counter.track('calls', 'calls', 'api', 't', mode => 'application', watermark_lag => '0',
                     bucket_width => '1 second', batch_size => 500, buffered => :buffered);
SELECT outcome FROM counter.reconcile('ev');
SELECT outcome FROM counter.reconcile('calls');
SQL

cat >"$work/insert.sql" <<'SQL'
\set k random_zipfian(1, 100000, 1.2)
INSERT INTO ev (k, t) VALUES (:k, now() - random() * interval '3 seconds');
SQL
cat >"$work/delete.sql" <<'SQL'
\set k random_zipfian(1, 100000, 1.2)
DELETE FROM ev WHERE id = (SELECT id FROM ev WHERE k = :k ORDER BY id LIMIT 1);
SQL
cat >"$work/move.sql" <<'SQL'
\set k random_zipfian(1, 100000, 1.2)
\set j random(1, 100000)
UPDATE ev SET k = :j WHERE id = (SELECT id FROM ev WHERE k = :k ORDER BY id DESC LIMIT 1);
SQL
cat >"$work/call.sql" <<'SQL'
\set k random_zipfian(1, 100000, 1.2)
BEGIN;
INSERT INTO calls (api, t) VALUES (:k, now() - random() * interval '2 seconds');
SELECT counter.add('calls', :k::bigint, 1, (SELECT t FROM calls WHERE id = currval('calls_id_seq')));
COMMIT;
SQL
"$CE_PGBIN/pgbench" -n -c 16 -j 2 -T "$seconds" -f "$work/insert.sql@6" -f "$work/delete.sql@1" \
    -f "$work/move.sql@1" -f "$work/call.sql@4" >"$work/pgbench.txt" 2>&1 &
load=$!
pids+=($load)
( while true; do ce_psql -At -c "SELECT counter.flush()" >/dev/null 2>&1 || true; sleep 0.2; done ) &
pids+=($!)
( while true; do
      ce_psql -At -c "SELECT outcome FROM counter.reconcile('ev')" >/dev/null 2>&1 || true
      ce_psql -At -c "CALL counter.run_steps('reconcile', 'calls')" >/dev/null 2>&1 || true
      sleep 0.3
  done ) &
pids+=($!)
wait "$load" || { cat "$work/pgbench.txt"; echo "the load failed"; exit 1; }
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()
grep -E "number of transactions actually processed|tps" "$work/pgbench.txt" | head -2

bad=$(ce_psql -At <<'SQL'
WITH ev_truth AS (SELECT k, count(*) AS n FROM ev GROUP BY k),
ev_keys AS (SELECT array_agg(k) AS ks FROM (SELECT k FROM ev_truth UNION SELECT key::bigint FROM counter.tracked_values WHERE counter = 'ev') s),
ev_cmp AS (SELECT 'ev' AS c, v.key AS k, v.value, coalesce(t.n, 0) AS n
           FROM ev_keys, counter.values_of('ev', ev_keys.ks) v LEFT JOIN ev_truth t ON t.k = v.key),
calls_truth AS (SELECT api AS k, count(*) AS n FROM calls GROUP BY api),
calls_keys AS (SELECT array_agg(k) AS ks FROM (SELECT k FROM calls_truth UNION SELECT key::bigint FROM counter.tracked_values WHERE counter = 'calls') s),
calls_cmp AS (SELECT 'calls' AS c, v.key AS k, v.value, coalesce(t.n, 0) AS n
              FROM calls_keys, counter.values_of('calls', calls_keys.ks) v LEFT JOIN calls_truth t ON t.k = v.key)
SELECT count(*) || ' keys off, e.g. ' || coalesce(string_agg(format('%s %s: %s vs %s', c, k, value, n), '; ') FILTER (WHERE rn <= 5), '')
FROM (SELECT *, row_number() OVER () AS rn FROM (SELECT * FROM ev_cmp UNION ALL SELECT * FROM calls_cmp) x WHERE value <> n) y
HAVING count(*) > 0;
SQL
)
[ -z "$bad" ] || { echo "not exact: $bad"; ce_psql -c "SELECT counter, run_id, watermark, all_keys, keys_checked, keys_corrected, drift_positive, drift_negative FROM counter.tracked_history WHERE drift_positive <> 0 OR drift_negative <> 0" -c "SELECT * FROM counter.tracked_key_drift_history LIMIT 20" -c "SELECT * FROM counter.buffered"; exit 1; }
keys=$(ce_psql -At -c "SELECT (SELECT count(DISTINCT k) FROM ev) + (SELECT count(DISTINCT api) FROM calls)")
drift=$(ce_psql -At -c "SELECT count(*) FILTER (WHERE drift_positive <> 0 OR drift_negative <> 0) || ' of ' || count(*)
    FROM counter.tracked_history WHERE outcome = 'ok'")
case "$drift" in
    0\ of\ *) ;;
    *)  echo "runs that found drift: $drift"
        ce_psql -c "SELECT counter, run_id, watermark, all_keys, keys_checked, keys_corrected, drift_positive, drift_negative
                    FROM counter.tracked_history WHERE drift_positive <> 0 OR drift_negative <> 0"
        ce_psql -c "SELECT * FROM counter.tracked_key_drift_history LIMIT 20"
        exit 1 ;;
esac
overflows=$(ce_psql -At -c "SELECT max(overflows) FROM counter.buffered")
flushes=$(ce_psql -At -c "SELECT sum(flushes) FROM counter.buffered")
[ "$overflows" -gt 0 ] || echo "note: the shared table never filled up"
echo "$keys distinct keys exact; $drift runs found drift; $flushes flushes; $overflows adds found the table full"
ce_scan_log "$CE_bload_LOG"
echo ok
