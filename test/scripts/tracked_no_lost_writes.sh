#!/usr/bin/env bash
# No lost writes: 8 writer connections insert, delete, flip the filter of and
# move rows between 5 hot keys, many of them late (event times in buckets
# the reconciler is folding), while counter.reconcile / CALL counter.run_steps('reconcile', ...)
# run every 100 ms for 22 s with watermark lag 0 and 1-second buckets. When
# the writers stop, without another reconcile, every key equals the true
# count; and no run ever found drift (there is no drift source here, so any
# drift would be a write the reconciler overwrote or subtracted twice).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
db=tracked_nlw
seconds=${CE_TRACKED_SECONDS:-22}
"$CE_PGBIN/dropdb" --if-exists $db && "$CE_PGBIN/createdb" $db
export PGDATABASE=$db
work=$(mktemp -d)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

ce_psql <<'SQL'
CREATE EXTENSION counter_ext;
CREATE TABLE hot (id bigserial PRIMARY KEY, k integer NOT NULL, t timestamptz NOT NULL,
                  hidden boolean NOT NULL DEFAULT false);
CREATE INDEX ON hot (k, t);
SELECT counter.track('hot', 'hot', 'k', 't', filter => 'NOT hidden', watermark_lag => '0',
                     bucket_width => '1 second', shards => 4, batch_size => 2, drift_log_threshold => 0);
INSERT INTO hot (k, t) SELECT 1 + g % 5, now() - g * interval '10 ms' FROM generate_series(1, 500) g;
SELECT outcome FROM counter.reconcile('hot');
SQL

cat >"$work/insert.sql" <<'SQL'
\set k random(1, 5)
INSERT INTO hot (k, t, hidden) VALUES (:k, now() - random() * interval '3 seconds', random() < 0.1);
SQL
cat >"$work/insert_many.sql" <<'SQL'
INSERT INTO hot (k, t) SELECT 1 + (random() * 4)::int, now() - random() * interval '3 seconds'
FROM generate_series(1, 20);
SQL
cat >"$work/delete.sql" <<'SQL'
\set k random(1, 5)
DELETE FROM hot WHERE id = (SELECT id FROM hot WHERE k = :k ORDER BY id LIMIT 1 OFFSET 7);
SQL
cat >"$work/delete_many.sql" <<'SQL'
\set k random(1, 5)
DELETE FROM hot WHERE id IN (SELECT id FROM hot WHERE k = :k ORDER BY id DESC LIMIT 15 OFFSET 3);
SQL
cat >"$work/flip.sql" <<'SQL'
\set k random(1, 5)
UPDATE hot SET hidden = NOT hidden WHERE id = (SELECT id FROM hot WHERE k = :k ORDER BY id DESC LIMIT 1 OFFSET 2);
SQL
cat >"$work/move.sql" <<'SQL'
\set k random(1, 5)
\set k2 random(1, 5)
UPDATE hot SET k = :k2, t = t - interval '1 second'
WHERE id = (SELECT id FROM hot WHERE k = :k ORDER BY id LIMIT 1 OFFSET 11);
SQL

"$CE_PGBIN/pgbench" -n -c 8 -j 2 -T "$seconds" \
    -f "$work/insert.sql@10" -f "$work/insert_many.sql@1" -f "$work/delete.sql@5" -f "$work/delete_many.sql@1" \
    -f "$work/flip.sql@3" -f "$work/move.sql@2" >"$work/pgbench.txt" 2>&1 &
writer=$!
pids+=("$writer")

runs=0
errors=0
while kill -0 "$writer" 2>/dev/null; do
    if [ $((runs % 2)) -eq 0 ]; then
        sql="SELECT outcome FROM counter.reconcile('hot')"
    else
        sql="CALL counter.run_steps('reconcile', 'hot')"
    fi
    if ! ce_psql -At -c "$sql" >>"$work/reconcile.txt" 2>&1; then
        errors=$((errors + 1))
    fi
    runs=$((runs + 1))
    sleep 0.1
done
wait "$writer" || { cat "$work/pgbench.txt"; echo "pgbench failed"; exit 1; }
cat "$work/pgbench.txt" | grep -E "number of transactions actually processed|number of failed|tps" || true

echo "reconcile calls: $runs, errors: $errors"
if [ "$errors" -ne 0 ]; then
    grep -i error "$work/reconcile.txt" | sort | uniq -c | head
    echo "reconciliation failed during the load"
    exit 1
fi

# Without another reconcile: every key equals the true count.
mismatch=$(ce_psql -At <<'SQL'
SELECT string_agg(format('key %s: value %s, truth %s', k, v, n), '; ')
FROM (SELECT k, counter.value('hot', k) AS v, count(*) FILTER (WHERE NOT hidden) AS n
      FROM (SELECT k FROM generate_series(1, 5) k) keys LEFT JOIN hot USING (k) GROUP BY k) s
WHERE v <> n;
SQL
)
[ -z "$mismatch" ] || { echo "lost or doubled writes: $mismatch"; exit 1; }

stats=$(ce_psql -At -F ' ' -c "SELECT count(*), count(*) FILTER (WHERE keys_checked > 0),
    coalesce(sum(drift_positive - drift_negative), 0), count(*) FILTER (WHERE outcome NOT IN ('ok', 'skipped'))
    FROM counter.tracked_history WHERE counter = 'hot'")
read -r total busy drift bad <<<"$stats"
echo "runs recorded: $total, runs that folded keys: $busy, total |drift|: $drift, runs not ok: $bad"
# (A floor that says the runs overlapped the writers, not a speed: a slow
# machine makes fewer runs.)
[ "$total" -ge 10 ] || { echo "too few reconciliation runs ($total)"; exit 1; }
[ "$busy" -ge 5 ] || { echo "too few runs did work ($busy)"; exit 1; }
[ "$drift" -eq 0 ] || { ce_psql -c "SELECT * FROM counter.tracked_key_drift_history LIMIT 20"; echo "drift found"; exit 1; }
rows=$(ce_psql -At -c "SELECT count(*) FROM hot")
echo "source rows at the end: $rows; every key exact"
"$CE_PGBIN/dropdb" $db
