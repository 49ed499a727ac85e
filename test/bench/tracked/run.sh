#!/usr/bin/env bash
# Tracked counters against what people use today, on one machine in one run.
#
# 1. Increments on ONE hot key, pgbench, 32 clients, $CE_BENCH_SECONDS s each:
#      hot_row       UPDATE t SET n = n + 1 WHERE id = 1            (the anchor)
#      hand_shards   UPDATE of one of 10 hand-made shard rows, picked at random
#      plain_insert  INSERT into an insert-only event table, no counter (for scale)
#      trigger_mode  the same INSERT with a trigger-mode tracked counter (C++ fold)
#      trigger_plpgsql  the same, folded by a PL/pgSQL statement trigger doing
#                    INSERT ... SELECT ... GROUP BY ... ON CONFLICT (the alternative)
#      add_app       SELECT counter.add(...) in application mode
#    and statements of 1,000 rows over 100 keys (2 clients): C++ vs PL/pgSQL fold.
# 2. Reconciliation of 1,000,000 keys of which 1% changed: dirty keys only
#    vs all keys, from the same state (each run inside a rolled-back
#    transaction), batch size 1000; durable defaults, no background worker.
# Part 1 runs on the test cluster's non-durable settings (test/lib.sh).
# Results go to stdout; doc/bench/tracked.md holds the last ones.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source test/lib.sh
trap ce_cluster_stop_all EXIT INT TERM
seconds=${CE_BENCH_SECONDS:-20}
clients=${CE_BENCH_CLIENTS:-32}
keys=${CE_BENCH_KEYS:-1000000}
part=${CE_BENCH_PART:-all}   # all, ingest or reconcile

ce_require_packages "${CE_TEST_PACKAGES[@]}" || exit 1
ce_build_and_stage || exit 1
ce_cluster_start bench "shared_buffers = '512MB'" "max_wal_size = '4GB'" "checkpoint_timeout = '30min'" || exit 1
ce_cluster_use bench
"$CE_PGBIN/createdb" bench || exit 1
export PGDATABASE=bench
work=$(mktemp -d)
trap 'rm -rf "$work"; ce_cluster_stop_all' EXIT INT TERM

ce_psql <<'SQL'
CREATE EXTENSION counter_ext;
CREATE TABLE hot_row (id int PRIMARY KEY, n bigint NOT NULL);
INSERT INTO hot_row VALUES (1, 0);
CREATE TABLE hand_shards (id int, shard int, n bigint NOT NULL, PRIMARY KEY (id, shard));
INSERT INTO hand_shards SELECT 1, s, 0 FROM generate_series(0, 9) s;
CREATE TABLE plain_clicks (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE TABLE clicks (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
SELECT counter.track('clicks', 'clicks', 'link', 'at');
CREATE TABLE app_clicks (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
SELECT counter.track('app_clicks', 'app_clicks', 'link', 'at', mode => 'application');
-- The PL/pgSQL alternative to the C++ fold: same delta table layout, same
-- sorted upsert, the fold done by GROUP BY over the transition table.
-- Fresh tables of their own for the 1,000-row statements (a delta table
-- updated 300,000 times by the single-row runs would not compare fairly).
CREATE TABLE pl_clicks (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
SELECT counter.track('pl_clicks', 'pl_clicks', 'link', 'at', mode => 'application');
CREATE TABLE bulk_clicks (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
SELECT counter.track('bulk_clicks', 'bulk_clicks', 'link', 'at');
CREATE TABLE bulk_pl_clicks (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
SELECT counter.track('bulk_pl_clicks', 'bulk_pl_clicks', 'link', 'at', mode => 'application');
SELECT format($f$
CREATE FUNCTION %I() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $b$
DECLARE ce_shard smallint := (pg_catalog.pg_backend_pid() %% 16)::smallint;
BEGIN
    INSERT INTO counter_internal.%I AS d (key, bucket, shard, delta)
    SELECT ce_new.link, pg_catalog.date_bin('1 minute', ce_new.at, '2000-01-01 00:00:00+00'), ce_shard, count(*)
    FROM ce_new WHERE ce_new.link IS NOT NULL AND ce_new.at IS NOT NULL AND true
    GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (key, bucket, shard) DO UPDATE SET delta = d.delta + excluded.delta;
    RETURN NULL;
END $b$;
CREATE TRIGGER pl_fold AFTER INSERT ON %I REFERENCING NEW TABLE AS ce_new
    FOR EACH STATEMENT EXECUTE FUNCTION %I()$f$,
    'fold_' || name, format('tracked_%s_delta', counter_id), name, 'fold_' || name)
FROM counter.tracked WHERE name IN ('pl_clicks', 'bulk_pl_clicks') \gexec
SQL

echo 'UPDATE hot_row SET n = n + 1 WHERE id = 1;' >"$work/hot_row.sql"
printf '%s\n' '\set s random(0, 9)' 'UPDATE hand_shards SET n = n + 1 WHERE id = 1 AND shard = :s;' >"$work/hand_shards.sql"
echo 'INSERT INTO plain_clicks (link) VALUES (1);' >"$work/plain_insert.sql"
echo 'INSERT INTO clicks (link) VALUES (1);' >"$work/trigger_mode.sql"
echo 'INSERT INTO pl_clicks (link) VALUES (1);' >"$work/trigger_plpgsql.sql"
echo "SELECT counter.add('app_clicks', 1::bigint);" >"$work/add_app.sql"
echo 'INSERT INTO bulk_clicks (link) SELECT 1 + g % 100 FROM generate_series(1, 1000) g;' >"$work/bulk_cpp.sql"
echo 'INSERT INTO bulk_pl_clicks (link) SELECT 1 + g % 100 FROM generate_series(1, 1000) g;' >"$work/bulk_plpgsql.sql"

declare -A tps
if [ "$part" != reconcile ]; then
for t in hot_row hand_shards plain_insert trigger_mode trigger_plpgsql add_app; do
    ce_psql -c "CHECKPOINT" >/dev/null
    "$CE_PGBIN/pgbench" -n -c "$clients" -j 2 -T "$seconds" -f "$work/$t.sql" >"$work/$t.txt" 2>&1
    tps[$t]=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$work/$t.txt")
    failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$work/$t.txt")
    printf '%-15s %10s tps  (failed: %s)\n' "$t" "${tps[$t]}" "${failed:-?}"
done
# The counters agree with what they count.
ce_psql -At <<'SQL'
SELECT 'hot_row n = ' || n FROM hot_row;
SELECT 'trigger-mode value = ' || counter.value('clicks', 1::bigint) || ', rows = ' || (SELECT count(*) FROM clicks);
SQL

for t in bulk_cpp bulk_plpgsql; do
    "$CE_PGBIN/pgbench" -n -c 2 -j 2 -T "$((seconds / 2))" -f "$work/$t.sql" >"$work/$t.txt" 2>&1
    tps[$t]=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$work/$t.txt")
    printf '%-13s %10s statements/s of 1,000 rows over 100 keys (2 clients)\n' "$t" "${tps[$t]}"
done

echo
echo "increments/s on one key, as a ratio to the hot-row UPDATE:"
for t in hand_shards plain_insert trigger_mode trigger_plpgsql add_app; do
    python3 -c "print('  %-15s %.2fx' % ('$t', ${tps[$t]} / ${tps[hot_row]}))"
done
python3 -c "print('C++ fold / PL/pgSQL fold: one row %.2fx, 1,000 rows %.2fx' % (${tps[trigger_mode]} / ${tps[trigger_plpgsql]}, ${tps[bulk_cpp]} / ${tps[bulk_plpgsql]}))"
fi
[ "$part" = ingest ] && exit 0

echo
echo "reconciliation: $keys keys, 1% changed"
# with the durable defaults, as a user runs it, and without the background
# worker, whose scheduled run of the counter would fold the dirty keys
# between the measured runs (both settings take effect on reload)
ce_psql -q <<'SQL'
ALTER SYSTEM SET fsync = on;
ALTER SYSTEM SET synchronous_commit = on;
ALTER SYSTEM SET full_page_writes = on;
ALTER SYSTEM SET counter_ext.enabled = off;
SELECT pg_reload_conf();
SQL
sleep 2
ce_psql -At -c "SELECT 'settings: fsync ' || current_setting('fsync') || ', synchronous_commit '
    || current_setting('synchronous_commit') || ', full_page_writes ' || current_setting('full_page_writes')
    || ', counter_ext.enabled ' || current_setting('counter_ext.enabled')"
ce_psql <<SQL
CREATE TABLE rsrc (k bigint NOT NULL, t timestamptz NOT NULL);
SELECT counter.track('rsrc', 'rsrc', 'k', 't', bucket_width => '1 hour', batch_size => 1000);
INSERT INTO rsrc SELECT g, '2024-01-01 00:00+00'::timestamptz + (g % 3600) * interval '1 second'
FROM generate_series(1, $keys) g;
CREATE INDEX ON rsrc (k, t);
VACUUM ANALYZE rsrc;
SQL
start=$(date +%s)
ce_psql -At -c "SELECT 'initial full run: ' || keys_checked || ' keys in ' || duration FROM counter.reconcile('rsrc')"
ce_psql <<SQL
VACUUM ANALYZE rsrc;
-- 1% of the keys change: a new row each
INSERT INTO rsrc SELECT g * 100, '2024-01-01 05:00+00' FROM generate_series(1, $keys / 100) g;
SELECT format('VACUUM ANALYZE counter_internal.tracked_%s_delta', counter_id) FROM counter.tracked WHERE name = 'rsrc' \gexec
SQL
# run_once LABEL [ARGS]: one reconciliation in a transaction rolled back
# (every run starts from the same state): keys, WAL written, seconds
run_once() {
    ce_psql -qAt <<SQL
BEGIN;
SELECT pg_current_wal_insert_lsn() AS l0 \gset
SELECT '$1: ' || keys_checked || ' checked, ' || keys_corrected || ' corrected, WAL '
    || pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_insert_lsn(), :'l0')) || ', '
    || extract(epoch FROM duration) || ' s' FROM counter.reconcile('rsrc', '2024-01-02'${2:-});
ROLLBACK;
SQL
}
for run in 1 2 3; do
    run_once "dirty keys"
done | tee "$work/dirty.txt"
for run in 1 2; do
    run_once "all keys" ", all_keys => true"
done | tee "$work/all.txt"
python3 - "$work/dirty.txt" "$work/all.txt" <<'PY'
import re, statistics, sys
def times(path):
    return [float(m.group(1)) for m in re.finditer(r"([0-9.]+) s$", open(path).read(), re.M)]
d, a = statistics.median(times(sys.argv[1])), statistics.median(times(sys.argv[2]))
print(f"median dirty-only {d:.3f} s, median all keys {a:.3f} s: dirty-only is {a / d:.1f}x cheaper")
PY
echo
echo "machine: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1); PostgreSQL $("$CE_PGBIN/postgres" --version | awk '{print $3}')"
