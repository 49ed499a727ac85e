#!/usr/bin/env bash
# Benchmark: counter_ext partition maintenance beside pg_partman (4.7 on 15,
# 5.x on 17 and 18: create_parent is called as the installed version takes
# it), in one throwaway cluster, one run. Figures: the best and the median of CE_BENCH_RUNS (5) runs:
#   setup   - 720 hourly partitions from scratch (696 hours back, the
#             current hour, 24 ahead, plus the default partition), one call:
#             partman.create_parent vs counter.partition_manage;
#   noop    - one maintenance call on a table with 2,000 hourly partitions and
#             nothing to do: partman.run_maintenance(table) vs
#             CALL counter.run_maintenance(table), in a new session (cold
#             caches) and as the second call of one session (warm);
#   churn   - one maintenance call that must create 24 partitions (the newest
#             day was dropped) and drop 24 (720 hours back, retention 696 hours).
# pg_partman's tables get infinite_time_partitions = true: by default 4.x makes
# no new partition for a table without new rows, and these tables are empty.
# A third column, "plain DDL", is the floor: the same partitions made by a
# loop of CREATE TABLE ... PARTITION OF in one DO block.
# Each run checks its answers (partition counts of all three, what each
# maintenance call created and dropped) and stops on a wrong one.
# Writes the table to doc/bench/partition.md (or $1).
#   CE_BENCH_RAW=DIR ...       keeps the raw results in DIR, writes no page
#   CE_BENCH_REPORT="DIR..."   runs nothing: writes the page from raw results,
#                              one DIR per major (test/bench/majors.sh)
set -uo pipefail
cd "$(dirname "$0")/../../.."
source test/lib.sh
out=${1:-${CE_BENCH_OUT:-doc/bench/partition.md}}
if [ -n "${CE_BENCH_REPORT:-}" ]; then
    # shellcheck disable=SC2086
    python3 test/bench/partition/report.py $CE_BENCH_REPORT >"$out.tmp" && mv "$out.tmp" "$out" && cat "$out"
    exit
fi
raw=${CE_BENCH_RAW:-$(mktemp -d "${TMPDIR:-/tmp}/counter_ext.bench_partition.XXXXXX")}
trap '[ -n "${CE_BENCH_RAW:-}" ] || rm -rf "$raw"; ce_cluster_stop_all' EXIT
trap 'exit 130' INT TERM
mkdir -p "$raw" && : >"$raw/results.txt" || exit 1
runs=${CE_BENCH_RUNS:-5}
load0=$(cut -d' ' -f1-3 /proc/loadavg)

ce_require_packages "${CE_TEST_PACKAGES[@]}" postgresql-$CE_PG_MAJOR-partman || exit 1
ce_build_and_stage || exit 1
# counter_ext's scheduler off: partition_manage makes a maintenance job, and a
# worker running it between a set-up and the timed call leaves that call
# nothing to do (as pg_partman's background worker, not loaded here, would).
ce_cluster_start bench "max_locks_per_transaction = 1024" "counter_ext.enabled = off" || exit 1
ce_cluster_use bench
"$CE_PGBIN/createdb" bench || exit 1
export PGDATABASE=bench
psql_() { "$CE_PGBIN/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }
psql_ -c "CREATE SCHEMA partman; CREATE EXTENSION pg_partman SCHEMA partman; CREATE EXTENSION counter_ext;" || exit 1
partman_version=$(psql_ -At -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_partman'")
# pg_partman 5 dropped trigger-based partitioning: its p_type is 'range' for
# what 4.x called 'native' (both take the interval as text, by name here).
case $partman_version in
4.*) partman_type=native ;;
*) partman_type=range ;;
esac
# fail MESSAGE: a wrong answer stops the run (no figure for it is written).
fail() { ce_die "wrong result: $*"; }

# timed SQL-to-time [set-up SQL]: milliseconds of the timed statements (summed)
timed() {
    local res
    res=$(psql_ -c "${2:-SELECT 1}" -c '\timing on' -c "$1" 2>&1) || { echo "$res" >&2; return 1; }
    echo "$res" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | awk '{s += $1} END {printf "%.3f\n", s}'
}
table_sql() { # the same event table for both
    echo "DROP TABLE IF EXISTS $1; CREATE TABLE $1 (event_id uuid NOT NULL, link_id bigint NOT NULL,
          occurred_at timestamptz NOT NULL, UNIQUE (event_id, occurred_at)) PARTITION BY RANGE (occurred_at);
          CREATE INDEX ON $1 (link_id, occurred_at);"
}
forget() { # removes a table from both tools' configuration
    echo "DELETE FROM partman.part_config WHERE parent_table = 'public.$1';
          SELECT counter.partition_unmanage(to_regclass('public.$1')) WHERE to_regclass('public.$1') IS NOT NULL;
          DROP TABLE IF EXISTS $1; DROP TABLE IF EXISTS partman.template_public_$1;"
}
partman_parent() { # table hours_back premake
    echo "SELECT partman.create_parent(p_parent_table := 'public.$1', p_control := 'occurred_at',
          p_type := '$partman_type', p_interval := '1 hour', p_premake := $3,
          p_start_partition := to_char(date_trunc('hour', now() AT TIME ZONE 'UTC') - interval '$2 hours', 'YYYY-MM-DD HH24:MI:SS'),
          p_jobmon := false);
          UPDATE partman.part_config SET infinite_time_partitions = true WHERE parent_table = 'public.$1';"
}
counter_parent() {
    echo "SELECT counter.partition_manage('public.$1', 'occurred_at', '1 hour', premake := $3,
          start_at := now() - interval '$2 hours')"
}
nparts() { psql_ -At -c "SELECT count(*) FROM pg_inherits WHERE inhparent = '$1'::regclass"; }

declare -A res
echo "== setup: 720 hourly partitions from scratch"
for i in $(seq 1 $runs); do
    p=$(timed "$(partman_parent pm_setup 696 24)" "$(forget pm_setup) $(table_sql pm_setup)") || exit 1
    pm_n=$(nparts pm_setup)
    c=$(timed "$(counter_parent ce_setup 696 24)" "$(forget ce_setup) $(table_sql ce_setup)") || exit 1
    ce_n=$(nparts ce_setup)
    d=$(timed "DO \$\$ DECLARE s timestamptz := date_trunc('hour', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '696 hours';
        BEGIN EXECUTE 'CREATE TABLE ddl_setup_default PARTITION OF ddl_setup DEFAULT';
        FOR i IN 0..720 LOOP EXECUTE format('CREATE TABLE %I PARTITION OF ddl_setup FOR VALUES FROM (%L) TO (%L)',
            'ddl_setup_' || i, s + i * interval '1 hour', s + (i + 1) * interval '1 hour'); END LOOP; END \$\$" \
        "DROP TABLE IF EXISTS ddl_setup; $(table_sql ddl_setup)") || exit 1
    ddl_n=$(nparts ddl_setup)
    echo "  run $i: pg_partman $p ms ($pm_n partitions), counter_ext $c ms ($ce_n partitions), plain DDL $d ms ($ddl_n partitions)"
    # 696 hours back, the current one, 24 ahead and the default.
    [ "$pm_n" = 722 ] && [ "$ce_n" = 722 ] && [ "$ddl_n" = 722 ] ||
        fail "set-up made $pm_n (pg_partman), $ce_n (counter_ext), $ddl_n (plain DDL) partitions, not 722"
    res[setup_pm]+=" $p"; res[setup_ce]+=" $c"; res[setup_ddl]+=" $d"
done
psql_ -c "$(forget pm_setup)" >/dev/null; psql_ -c "$(forget ce_setup)" >/dev/null; psql_ -c "DROP TABLE ddl_setup" >/dev/null

echo "== noop: one maintenance call, 2,000 partitions, nothing to do"
psql_ -c "$(table_sql pm_big) $(partman_parent pm_big 1975 24)" >/dev/null || exit 1
psql_ -c "$(table_sql ce_big) $(counter_parent ce_big 1975 24)" >/dev/null || exit 1
pm_big_n=$(nparts pm_big); ce_big_n=$(nparts ce_big)
echo "  partitions: pg_partman $pm_big_n, counter_ext $ce_big_n"
[ "$pm_big_n" = 2001 ] && [ "$ce_big_n" = 2001 ] || fail "2,000 partitions and the default expected, got $pm_big_n / $ce_big_n"
psql_ -c "SELECT partman.run_maintenance('public.pm_big', p_jobmon := false)" -c "CALL counter.run_maintenance('public.ce_big')" >/dev/null
# The untimed first call may still make a partition (pg_partman 4.7 made one
# here: its premake counts from a partition boundary): the timed calls must
# then change nothing from where it left each table.
if [ "$(nparts pm_big)" != "$pm_big_n" ] || [ "$(nparts ce_big)" != "$ce_big_n" ]; then
    echo "  the untimed first call made partitions: pg_partman $(nparts pm_big), counter_ext $(nparts ce_big)"
    pm_big_n=$(nparts pm_big); ce_big_n=$(nparts ce_big)
fi
for i in $(seq 1 $runs); do
    p=$(timed "SELECT partman.run_maintenance('public.pm_big', p_jobmon := false)") || exit 1
    c=$(timed "CALL counter.run_maintenance('public.ce_big')") || exit 1
    pw=$(timed "SELECT partman.run_maintenance('public.pm_big', p_jobmon := false)" \
        "SELECT partman.run_maintenance('public.pm_big', p_jobmon := false)") || exit 1
    cw=$(timed "CALL counter.run_maintenance('public.ce_big')" "CALL counter.run_maintenance('public.ce_big')") || exit 1
    echo "  run $i: new session: pg_partman $p ms, counter_ext $c ms; warm session: pg_partman $pw ms, counter_ext $cw ms"
    res[noop_pm]+=" $p"; res[noop_ce]+=" $c"; res[warm_pm]+=" $pw"; res[warm_ce]+=" $cw"
done
echo "  partitions after: pg_partman $(nparts pm_big), counter_ext $(nparts ce_big)"
[ "$(nparts pm_big)" = "$pm_big_n" ] && [ "$(nparts ce_big)" = "$ce_big_n" ] || fail "a no-op maintenance call changed the partitions"
psql_ -c "$(forget pm_big)" >/dev/null
psql_ -c "$(forget ce_big)" >/dev/null

echo "== churn: one maintenance call that creates 24 and drops 24"
# 720 hours back + current + 24 ahead; the 24 newest dropped by hand; retention
# 696 hours expires the oldest 24 (their upper bound is at or before now - 696 h).
drop_newest() {
    echo "DO \$\$ DECLARE r record; BEGIN
        FOR r IN SELECT c.oid::regclass AS p FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                 WHERE i.inhparent = '$1'::regclass AND c.relname NOT LIKE '%default'
                 ORDER BY c.relname DESC LIMIT 24 LOOP
            EXECUTE format('DROP TABLE %s', r.p);
        END LOOP; END \$\$;"
}
# span TABLE: oldest lower bound|newest upper bound|hours between them
span() {
    psql_ -At -c "SELECT min(lo) || '|' || max(hi) || '|' || extract(epoch FROM max(hi) - min(lo))::bigint / 3600
        FROM (SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \\(''([^'']*)''\\) TO \\(''([^'']*)''\\)')) AS b
              FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = '$1'::regclass) x,
             LATERAL (SELECT b[1]::timestamptz AS lo, b[2]::timestamptz AS hi) y WHERE b IS NOT NULL"
}
for i in $(seq 1 $runs); do
    psql_ -c "$(forget pm_churn) $(table_sql pm_churn) $(partman_parent pm_churn 720 24)" -c "$(drop_newest pm_churn)" \
        -c "UPDATE partman.part_config SET retention = '696 hours', retention_keep_table = false WHERE parent_table = 'public.pm_churn'" \
        >/dev/null || exit 1
    psql_ -c "$(forget ce_churn) $(table_sql ce_churn) $(counter_parent ce_churn 720 24)" -c "$(drop_newest ce_churn)" \
        -c "UPDATE counter.partitioned_tables SET retention = '696 hours' WHERE parent = 'ce_churn'::regclass" >/dev/null || exit 1
    pm_before=$(nparts pm_churn); ce_before=$(nparts ce_churn)
    p=$(timed "SELECT partman.run_maintenance('public.pm_churn', p_jobmon := false)") || exit 1
    c=$(timed "CALL counter.run_maintenance('public.ce_churn')") || exit 1
    pm_after=$(nparts pm_churn); ce_after=$(nparts ce_churn)
    ce_did=$(psql_ -At -c "SELECT last_created || ' created, ' || last_dropped || ' dropped' FROM counter.partition_status WHERE parent = 'ce_churn'::regclass")
    echo "  run $i: pg_partman $p ms ($pm_before -> $pm_after partitions), counter_ext $c ms ($ce_before -> $ce_after partitions; $ce_did)"
    # 720 back + current + 24 ahead + default, the newest 24 dropped: 722;
    # the call makes those 24 again and drops the oldest 24 (25 and 25 when
    # an hour began since the set-up): 721 hours and the default after it,
    # the same hours for both.
    [ "$pm_before" = 722 ] && [ "$ce_before" = 722 ] && [ "$pm_after" = 722 ] && [ "$ce_after" = 722 ] &&
        [[ $ce_did =~ ^(24|25)\ created,\ ${ce_did%% *}\ dropped$ ]] ||
        fail "churn: pg_partman $pm_before -> $pm_after, counter_ext $ce_before -> $ce_after ($ce_did); 722 -> 722, 24 created and 24 dropped expected"
    pm_span=$(span pm_churn); ce_span=$(span ce_churn)
    [ "$pm_span" = "$ce_span" ] && [[ $pm_span =~ \|721$ ]] ||
        fail "churn: pg_partman keeps $pm_span, counter_ext $ce_span (oldest hour, newest hour, hours: 721 expected)"
    res[churn_pm]+=" $p"; res[churn_ce]+=" $c"
done
pm_range=$(psql_ -At -c "SELECT min(relname) || ' .. ' || max(relname) FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid WHERE i.inhparent = 'pm_churn'::regclass AND relname NOT LIKE '%default'")
ce_range=$(psql_ -At -c "SELECT min(relname) || ' .. ' || max(relname) FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid WHERE i.inhparent = 'ce_churn'::regclass AND relname NOT LIKE '%default'")
echo "  after: pg_partman $pm_range; counter_ext $ce_range"

# The raw results (one line each: key value...), then the page.
{
    echo "pg_major $CE_PG_MAJOR"
    echo "pg_version $("$CE_PGBIN/postgres" --version | awk '{print $3}')"
    echo "partman_version $partman_version"
    echo "counter_version $(psql_ -At -c "SELECT counter.version()")"
    echo "machine $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(awk '/MemTotal/ {printf "%.0f GB", $2 / 1048576}' /proc/meminfo)"
    echo "date $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "load_before $load0"
    echo "runs $runs"
    for k in "${!res[@]}"; do echo "$k${res[$k]}"; done
} >"$raw/results.txt"
if [ -n "${CE_BENCH_RAW:-}" ]; then
    echo "raw results in $raw"
else
    python3 test/bench/partition/report.py "$raw" >"$out.tmp" && cat "$out.tmp" && mv "$out.tmp" "$out"
fi
