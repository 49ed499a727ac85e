#!/usr/bin/env bash
# Why 100,000 zipf keys cost more than one key (issue 23, item 1; doc/bench/
# tracked.md, "1.7: 100,000 zipf keys"). One durable cluster as in hotkey.sh;
# pgbench, $CE_BENCH_CLIENTS clients (32), interleaved rounds of
# $CE_BENCH_SECONDS s of:
#   select_1       SELECT 1
#   add_hot        SELECT counter.add('appb', 1::bigint)          (flush every 1 s)
#   select_zipf    SELECT :k::bigint, k = random_zipfian(1, 100000, 1.1)
#   add_zipf       SELECT counter.add('appz', :k::bigint)         (flush every 1 s)
#   add_zipf_held  the same with the flush job off during the run (the adds
#                  stay in shared memory; flushed, untimed, after the run)
# For the flushed runs it prints the flush job's own time (the sum of its
# runs' durations in counter.job_runs, as a share of the run's wall time) and
# the rows it wrote. Every add is checked counted once at the end.
#   CE_BENCH_SECONDS=10 CE_BENCH_ROUNDS=2 bash test/bench/tracked/zipf.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
source test/lib.sh
seconds=${CE_BENCH_SECONDS:-10}
rounds=${CE_BENCH_ROUNDS:-2}
clients=${CE_BENCH_CLIENTS:-32}
work=$(mktemp -d)
chmod 755 "$work"
cleanup() {
    ce_cluster_stop_all
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

ce_require_packages "${CE_TEST_PACKAGES[@]}" || exit 1
ce_build_and_stage || exit 1
ce_cluster_start bench "fsync = on" "synchronous_commit = on" "full_page_writes = on" \
    "shared_buffers = '512MB'" "max_wal_size = '4GB'" "checkpoint_timeout = '30min'" "max_connections = 200" \
    "counter_ext.buffer_entries = 262144" "counter_ext.naptime = 1" || exit 1
ce_cluster_use bench
"$CE_PGBIN/createdb" bench || exit 1
export PGDATABASE=bench
ce_psql <<'SQL' || exit 1
CREATE EXTENSION counter_ext;
CREATE TABLE app (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON app (at);
SELECT counter.track('appb', 'app', 'link', 'at', mode => 'application', buffered => true);
SELECT counter.track('appz', 'app', 'link', 'at', mode => 'application', buffered => true);
UPDATE counter.jobs SET enabled = false WHERE kind = 'reconcile';
SQL

echo 'SELECT 1;' >"$work/select_1.sql"
echo "SELECT counter.add('appb', 1::bigint);" >"$work/add_hot.sql"
printf '%s\n%s\n' '\set k random_zipfian(1, 100000, 1.1)' "SELECT counter.add('appz', :k::bigint);" >"$work/add_zipf.sql"
cp "$work/add_zipf.sql" "$work/add_zipf_held.sql"
printf '%s\n%s\n' '\set k random_zipfian(1, 100000, 1.1)' "SELECT :k::bigint;" >"$work/select_zipf.sql"
runs=(select_1 add_hot select_zipf add_zipf add_zipf_held)

tps_of() { sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$1"; }
tx_of() { sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$1"; }
expect_hot=0
expect_zipf=0
run() { # run NAME
    local out="$work/$1.out" t n since flush
    [ "$1" = add_zipf_held ] && ce_psql -q -c "UPDATE counter.jobs SET enabled = false WHERE kind = 'flush'"
    since=$(ce_psql -At -c "SELECT pg_catalog.clock_timestamp()")
    "$CE_PGBIN/pgbench" -n -M prepared -c "$clients" -j 2 -T "$seconds" -f "$work/$1.sql" >"$out" 2>&1
    flush=$(ce_psql -At -c "SELECT round(100 * extract(epoch FROM coalesce(sum(finished_at - started_at), '0'))
                                          / $seconds, 1) || '% of one core, ' || coalesce(sum(rows_affected), 0) || ' rows'
                             FROM counter.job_runs WHERE kind = 'flush' AND started_at >= '$since'")
    if [ "$1" = add_zipf_held ]; then
        ce_psql -q -c "UPDATE counter.jobs SET enabled = true WHERE kind = 'flush'"
        ce_psql -q -c "SELECT counter.flush()" >/dev/null
        flush="off during the run"
    fi
    t=$(tps_of "$out")
    n=$(tx_of "$out")
    echo "${t:-0}" >>"$work/$1.tps"
    case $1 in
        add_hot) expect_hot=$((expect_hot + ${n:-0})) ;;
        add_zipf | add_zipf_held) expect_zipf=$((expect_zipf + ${n:-0})) ;;
    esac
    printf '  %-14s %10s tps   flush: %-40s load %s\n' "$1" "${t:-FAILED}" "$flush" "$(cut -d' ' -f1-3 /proc/loadavg)"
}
median() { sort -n "$work/$1.tps" | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
ratio() { python3 -c "print('%.2fx' % ($1 / $2) if $2 else '-')"; }

for r in $(seq 1 "$rounds"); do
    echo "round $r of $rounds, $clients clients"
    for t in "${runs[@]}"; do run "$t"; done
done
ce_psql -q -c "SELECT counter.flush()" >/dev/null
got_hot=$(ce_psql -At -c "SELECT counter.value('appb', 1::bigint)")
got_zipf=$(ce_psql -At -c "SELECT coalesce(sum(value), 0) FROM counter.tracked_values WHERE counter = 'appz'")
overflows=$(ce_psql -At -c "SELECT overflows FROM counter.buffered WHERE counter = 'appz'")

s=$(median select_1)
z=$(median select_zipf)
echo
echo "| run | median tps | / SELECT 1 | / the zipf draw |"
echo "| --- | ---: | ---: | ---: |"
for t in "${runs[@]}"; do
    m=$(median "$t")
    printf '| %s | %.0f | %s | %s |\n' "$t" "$m" "$(ratio "$m" "$s")" "$(ratio "$m" "$z")"
done
if [ "$got_hot" = "$expect_hot" ] && [ "$got_zipf" = "$expect_zipf" ]; then
    echo "every add counted once: one key $got_hot = $expect_hot transactions, zipf keys $got_zipf = $expect_zipf"
else
    echo "ADDS MISCOUNTED: one key $got_hot, expected $expect_hot; zipf keys $got_zipf, expected $expect_zipf"
fi
echo "zipf adds that found the owner's share full: ${overflows:-?}"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg); PostgreSQL $("$CE_PGBIN/postgres" --version | awk '{print $3}')"
