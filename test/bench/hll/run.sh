#!/usr/bin/env bash
# counter.hll beside postgresql-hll (the newest version the installed package
# ships: 2.17 on 15, 2.18 on 17, 2.21 on 18) and Redis PFADD/PFCOUNT (issue 3),
# same machine, same cluster, same data, one run. Writes doc/bench/hll.md.
# On 15, 17 and 18 in one run, one column per major: test/bench/majors.sh.
#
#   bash test/bench/hll/run.sh            # 10M-row tables, 5 timed runs each
#   CE_BENCH_ROWS=1000000 bash test/bench/hll/run.sh   # a quick smaller run
#   CE_BENCH_PART=group bash test/bench/hll/run.sh     # the GROUP BY case only:
#       prints the raw results (ms) instead of writing the page
#   CE_BENCH_RAW=DIR ...       # keeps the raw results in DIR, writes no page
#   CE_BENCH_REPORT="DIR..."   # runs nothing: writes the page from raw
#       results (one DIR per major, as test/bench/majors.sh does)
#
# Installs postgresql-N-hll and redis-server (when root), starts its own
# throwaway cluster (test/lib.sh) and a redis-server on a free loopback port,
# and stops both at the end. Times are the best of CE_BENCH_REPS interleaved
# runs after one warm-up round: CPU time of the backend for serial plans, wall time (psql's
# \timing) for parallel ones.
set -euo pipefail
cd "$(dirname "$0")/../../.."
source test/lib.sh

ROWS=${CE_BENCH_ROWS:-10000000}
REPS=${CE_BENCH_REPS:-5}
OUT=${CE_BENCH_OUT:-doc/bench/hll.md}
NGROUPS=100000

# write_page DIR...: the page from the raw results in each DIR (one per
# major). The hand-written section on GROUP BY instructions
# (test/bench/hll/callgrind.sh) is kept across regenerations.
write_page() {
    local kept
    kept=$(sed -n '/^## GROUP BY in instructions/,$p' "$OUT" 2>/dev/null || true)
    python3 test/bench/hll/report.py "$@" >"$OUT.tmp" || return 1
    [ -z "$kept" ] || printf '\n%s\n' "$kept" >>"$OUT.tmp"
    mv "$OUT.tmp" "$OUT"
    echo "wrote $OUT" >&2
}
if [ -n "${CE_BENCH_REPORT:-}" ]; then
    # shellcheck disable=SC2086
    write_page $CE_BENCH_REPORT
    exit
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/counter_ext.bench_hll.XXXXXX")
chmod 755 "$work"
redis_port=""

cleanup() {
    if [ -n "$redis_port" ]; then
        redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
    fi
    ce_cluster_stop_all
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ce_require_packages "${CE_TEST_PACKAGES[@]}" postgresql-$CE_PG_MAJOR-hll redis-server || exit 1
ce_build_and_stage || exit 1
# The cluster: preloaded counter_ext (as the suite runs it), the same memory
# for both extensions' aggregates, JIT off for both (compile time is noise).
ce_cluster_start bench "work_mem = '256MB'" "shared_buffers = '1GB'" "jit = off" \
    "max_parallel_workers = 2" "max_parallel_workers_per_gather = 2" || exit 1
ce_cluster_use bench
"$CE_PGBIN/createdb" bench
export PGDATABASE=bench

for try in 1 2 3 4 5 6 7 8; do
    port=$(ce_random_port) || continue
    if redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
        --dir "$work" --pidfile "$work/redis.pid" --logfile "$work/redis.log" >/dev/null 2>&1; then
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            redis-cli -p "$port" ping >/dev/null 2>&1 && break
            sleep 0.2
        done
        redis_port=$port
        break
    fi
done
[ -n "$redis_port" ] || ce_die "could not start redis-server"

q() { ce_psql -At "$@"; }
log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
res() { printf '%s %s\n' "$1" "$2" >>"$work/results.txt"; }

# postgresql-hll at the newest version the package ships (Debian's default
# version may be an older one).
pghll_newest=$(q -c "SELECT version FROM pg_available_extension_versions WHERE name = 'hll'
    ORDER BY pg_catalog.string_to_array(version, '.')::int[] DESC LIMIT 1")
q -c "CREATE EXTENSION counter_ext; CREATE EXTENSION hll; ALTER EXTENSION hll UPDATE TO '$pghll_newest';"
res pghll_version "$(q -c "SELECT extversion FROM pg_extension WHERE extname = 'hll'")"
res pg_version "$(q -c "SHOW server_version")"
res pg_major "$CE_PG_MAJOR"
res redis_version "$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')"
res rows "$ROWS"
res reps "$REPS"
res load_before "$(cut -d' ' -f1-3 /proc/loadavg)"

log "loading ${ROWS}-row tables"
q <<SQL
CREATE TABLE bench_big AS SELECT g::bigint AS id FROM generate_series(1, $([ "${CE_BENCH_PART:-}" = group ] && echo 0 || echo "$ROWS")) g;
CREATE TABLE bench_text AS SELECT md5(g::text) AS v FROM generate_series(1, $([ "${CE_BENCH_PART:-}" = group ] && echo 0 || echo "$ROWS")) g;
CREATE TABLE bench_grp AS SELECT (g % $NGROUPS)::int AS link, g::bigint AS visitor FROM generate_series(1, $ROWS) g;
VACUUM ANALYZE bench_big, bench_text, bench_grp;
SQL

SERIAL="SET max_parallel_workers_per_gather = 0;"
PARALLEL="SET max_parallel_workers_per_gather = 2; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0;"

# timeq SETUP KEY SQL [KEY SQL ...]: for each query, the best wall time
# (psql's \timing) and the best CPU time of the session's backend
# (/proc/self/schedstat, nanoseconds on CPU) of REPS runs after a warm-up. The
# queries run interleaved (a, b, c, a, b, c, ...), so a noisy moment on the
# shared machine hits all of them alike; noise only ever adds time.
timeq() {
    local setup=$1 i j wall cpu
    shift
    local keys=() sqls=()
    while [ $# -gt 0 ]; do
        keys+=("$1")
        sqls+=("$2")
        shift 2
    done
    {
        echo "$setup"
        for i in $(seq 0 "$REPS"); do
            for j in "${!keys[@]}"; do
                echo "SELECT split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint AS c \\gset a_"
                echo '\timing on'
                echo "${sqls[$j]};"
                echo '\timing off'
                echo "SELECT split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint AS c \\gset b_"
                echo "\\echo CPU $j $i :a_c :b_c"
            done
        done
    } | "$CE_PGBIN/psql" -X -v ON_ERROR_STOP=1 -At >"$work/timing.txt" 2>&1 || {
        cat "$work/timing.txt" >&2
        ce_die "query failed: ${sqls[*]}"
    }
    # Pair each "Time:" line with the CPU line that follows it.
    awk '/^Time: / {t = $2} /^CPU / {print $2, $3, t, ($5 - $4) / 1e6}' "$work/timing.txt" >"$work/pairs.txt"
    for j in "${!keys[@]}"; do
        wall=$(awk -v j="$j" '$1 == j && $2 > 0 {print $3}' "$work/pairs.txt" | sort -n | head -1)
        cpu=$(awk -v j="$j" '$1 == j && $2 > 0 {printf "%.3f\n", $4}' "$work/pairs.txt" | sort -n | head -1)
        res "${keys[$j]}" "$wall"
        res "${keys[$j]}_cpu" "$cpu"
        log "${keys[$j]}: $wall ms wall, $cpu ms CPU"
    done
}

# Which plan ran, and whether workers were launched (for the report).
plan_note() {
    local key=$1 setup=$2 sql=$3
    printf '%s\nEXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) %s;\n' "$setup" "$sql" |
        "$CE_PGBIN/psql" -X -At >"$work/plan-$key.txt" 2>&1
    res "plan_$key" "$(grep -Eo 'Workers Launched: [0-9]+|Batches: [0-9]+|Memory Usage: [0-9]+kB|Disk Usage: [0-9]+kB' \
        "$work/plan-$key.txt" | sort | uniq | paste -sd ';' -)"
}

log "add-aggregate, bigint"
[ "${CE_BENCH_PART:-}" = group ] || for mode in serial parallel; do
    setup=$SERIAL
    [ $mode = parallel ] && setup=$PARALLEL
    timeq "$setup" \
        "big_count_$mode" "SELECT count(id) FROM bench_big" \
        "big_pghll_$mode" "SELECT hll_cardinality(hll_add_agg(hll_hash_bigint(id), 14)) FROM bench_big" \
        "big_ours_$mode" "SELECT counter.hll_cardinality(counter.hll_add_agg(id)) FROM bench_big"
    plan_note "big_ours_$mode" "$setup" "SELECT counter.hll_add_agg(id) FROM bench_big"
    plan_note "big_pghll_$mode" "$setup" "SELECT hll_add_agg(hll_hash_bigint(id), 14) FROM bench_big"
done
[ "${CE_BENCH_PART:-}" = group ] || timeq "$SERIAL" "big_pghll11_serial" "SELECT hll_cardinality(hll_add_agg(hll_hash_bigint(id))) FROM bench_big"

log "add-aggregate, text"
[ "${CE_BENCH_PART:-}" = group ] || for mode in serial parallel; do
    setup=$SERIAL
    [ $mode = parallel ] && setup=$PARALLEL
    timeq "$setup" \
        "text_count_$mode" "SELECT count(v) FROM bench_text" \
        "text_pghll_$mode" "SELECT hll_cardinality(hll_add_agg(hll_hash_text(v), 14)) FROM bench_text" \
        "text_ours_$mode" "SELECT counter.hll_cardinality(counter.hll_add_agg(v)) FROM bench_text"
done

log "GROUP BY into $NGROUPS sketches"
grp_ours="SELECT sum(pg_column_size(s)) FROM (SELECT link, counter.hll_add_agg(visitor) AS s FROM bench_grp GROUP BY link) x"
grp_pghll="SELECT sum(pg_column_size(s)) FROM (SELECT link, hll_add_agg(hll_hash_bigint(visitor), 14) AS s FROM bench_grp GROUP BY link) x"
grp_count="SELECT sum(c) FROM (SELECT link, count(visitor) AS c FROM bench_grp GROUP BY link) x"
timeq "$SERIAL" grp_count_serial "$grp_count" grp_ours_serial "$grp_ours" grp_pghll_serial "$grp_pghll"
plan_note grp_ours "$SERIAL" "SELECT link, counter.hll_add_agg(visitor) AS s FROM bench_grp GROUP BY link"
plan_note grp_pghll "$SERIAL" "SELECT link, hll_add_agg(hll_hash_bigint(visitor), 14) AS s FROM bench_grp GROUP BY link"
plan_note grp_ours_4mb "SET work_mem = '4MB'; $SERIAL" \
    "SELECT link, counter.hll_add_agg(visitor) AS s FROM bench_grp GROUP BY link"
timeq "$PARALLEL" grp_count_parallel "$grp_count" grp_ours_parallel "$grp_ours" grp_pghll_parallel "$grp_pghll"
plan_note grp_ours_parallel "$PARALLEL" "SELECT link, counter.hll_add_agg(visitor) AS s FROM bench_grp GROUP BY link"
plan_note grp_pghll_parallel "$PARALLEL" \
    "SELECT link, hll_add_agg(hll_hash_bigint(visitor), 14) AS s FROM bench_grp GROUP BY link"
if [ "${CE_BENCH_PART:-}" = group ]; then
    res load_after "$(cut -d' ' -f1-3 /proc/loadavg)"
    cat "$work/results.txt"
    exit 0
fi

log "union-aggregate over $NGROUPS sketches"
q <<SQL
SET max_parallel_workers_per_gather = 0;
CREATE TABLE sk_ours AS SELECT link, counter.hll_add_agg(visitor) AS s FROM bench_grp GROUP BY link;
CREATE TABLE sk_pghll AS SELECT link, hll_add_agg(hll_hash_bigint(visitor), 14) AS s FROM bench_grp GROUP BY link;
VACUUM ANALYZE sk_ours, sk_pghll;
SQL
res sk_ours_mb "$(q -c "SELECT round(pg_total_relation_size('sk_ours') / 1048576.0, 1)")"
res sk_pghll_mb "$(q -c "SELECT round(pg_total_relation_size('sk_pghll') / 1048576.0, 1)")"
for mode in serial parallel; do
    setup=$SERIAL
    [ $mode = parallel ] && setup=$PARALLEL
    timeq "$setup" \
        "union_ours_$mode" "SELECT counter.hll_cardinality(counter.hll_union_agg(s)) FROM sk_ours" \
        "union_pghll_$mode" "SELECT hll_cardinality(hll_union_agg(s)) FROM sk_pghll"
done
log "union-aggregate over 1,000 dense sketches"
q <<SQL
SET max_parallel_workers_per_gather = 0;
CREATE TABLE dk_ours AS SELECT id % 1000 AS k, counter.hll_add_agg(id) AS s FROM bench_big GROUP BY 1;
CREATE TABLE dk_pghll AS SELECT id % 1000 AS k, hll_add_agg(hll_hash_bigint(id), 14) AS s FROM bench_big GROUP BY 1;
VACUUM ANALYZE dk_ours, dk_pghll;
SQL
res dk_ours_repr "$(q -c "SELECT string_agg(DISTINCT (counter.hll_info(s)).representation, ',') FROM dk_ours")"
res dk_ours_bytes "$(q -c "SELECT round(avg(pg_column_size(s))) FROM dk_ours")"
res dk_pghll_bytes "$(q -c "SELECT round(avg(pg_column_size(s))) FROM dk_pghll")"
timeq "$SERIAL" \
    "dunion_ours_serial" "SELECT counter.hll_cardinality(counter.hll_union_agg(s)) FROM dk_ours" \
    "dunion_pghll_serial" "SELECT hll_cardinality(hll_union_agg(s)) FROM dk_pghll"
res union_estimates "$(q -c "SELECT round(counter.hll_cardinality(counter.hll_union_agg(s))) FROM sk_ours") / $(q -c "SELECT round(hll_cardinality(hll_union_agg(s))) FROM sk_pghll") (true $ROWS)"
# A wrong answer must not pass: both unions estimate the ROWS distinct
# visitors within 3% (at 16384 registers the standard error is 0.8%).
off=$(q -c "SELECT string_agg(e::text, ', ') FROM (VALUES
    ((SELECT counter.hll_cardinality(counter.hll_union_agg(s)) FROM sk_ours)),
    ((SELECT hll_cardinality(hll_union_agg(s)) FROM sk_pghll))) v(e) WHERE abs(e / $ROWS - 1) > 0.03")
[ -z "$off" ] || ce_die "union estimates off by more than 3% of $ROWS: $off"

log "accuracy"
# n = 10^k, k = 0..7: 20 trials up to 10^5, 5 at 10^6, 2 at 10^7.
specs=${CE_BENCH_ACC:-"1:20 10:20 100:20 1000:20 10000:20 100000:20 1000000:5 10000000:2"}
q -c "CREATE TABLE acc (system text, p int, n bigint, trial int, estimate float8, bytes int)"
for spec in $specs; do
    n=${spec%%:*}
    t=${spec##*:}
    q <<SQL
INSERT INTO acc
SELECT 'counter_ext', p, $n, t, counter.hll_cardinality(s), pg_column_size(s)
FROM (VALUES (14), (11)) v(p), generate_series(0, $t - 1) t,
     LATERAL (SELECT counter.hll_add_agg(g, p) AS s
              FROM generate_series(t * 1000000000::bigint + 1, t * 1000000000::bigint + $n) g) x;
INSERT INTO acc
SELECT 'postgresql-hll', p, $n, t, hll_cardinality(s), pg_column_size(s)
FROM (VALUES (14), (11)) v(p), generate_series(0, $t - 1) t,
     LATERAL (SELECT hll_add_agg(hll_hash_bigint(g), p) AS s
              FROM generate_series(t * 1000000000::bigint + 1, t * 1000000000::bigint + $n) g) x;
SQL
    log "accuracy n=$n done (postgres)"
done
log "accuracy: redis"
python3 test/bench/hll/redis_hll.py "$redis_port" $specs >"$work/redis.csv"
python3 test/bench/hll/redis_hll.py "$redis_port" 1000:1 100000:1 >/dev/null # nothing left behind
q -c "CREATE TABLE acc_redis (n bigint, trial int, estimate float8, bytes int)"
ce_psql -c "\\copy acc_redis FROM '$work/redis.csv' (FORMAT csv)"
q -c "INSERT INTO acc SELECT 'redis', 14, n, trial, estimate, bytes FROM acc_redis"

q -F '|' -c "
SELECT system, p, n, count(*), avg(abs(estimate / n - 1)), max(abs(estimate / n - 1)),
       sqrt(avg((estimate / n - 1) ^ 2)), avg(estimate / n - 1)
FROM acc GROUP BY 1, 2, 3 ORDER BY 2 DESC, 3, 1" >"$work/accuracy.txt"
q -F '|' -c "
WITH s(n) AS (VALUES (10), (100), (1000), (10000), (1000000))
SELECT s.n,
  (SELECT (counter.hll_info(counter.hll_add_agg(g))).representation FROM generate_series(1, s.n) g),
  (SELECT pg_column_size(counter.hll_add_agg(g)) FROM generate_series(1, s.n) g),
  (SELECT pg_column_size(hll_add_agg(hll_hash_bigint(g), 14)) FROM generate_series(1, s.n) g),
  (SELECT pg_column_size(hll_add_agg(hll_hash_bigint(g))) FROM generate_series(1, s.n) g),
  (SELECT bytes FROM acc_redis r WHERE r.n = s.n AND trial = 0)
FROM s ORDER BY 1" >"$work/sizes.txt"
# Largest n at which every trial is exact.
q -F '|' -c "
SELECT system, p, coalesce(max(n) FILTER (WHERE exact), 0)
FROM (SELECT system, p, n, bool_and(estimate = n) AS exact FROM acc GROUP BY 1, 2, 3) x
GROUP BY 1, 2 ORDER BY 1, 2" >"$work/exact.txt"

res load_after "$(cut -d' ' -f1-3 /proc/loadavg)"
res machine "$(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(free -g | awk '/^Mem:/ {print $2}') GB RAM"
res date "$(date -u '+%Y-%m-%d %H:%M UTC')"
res git "${CE_BENCH_GIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"

if [ -n "${CE_BENCH_RAW:-}" ]; then
    mkdir -p "$CE_BENCH_RAW" && cp "$work"/{results,accuracy,sizes,exact}.txt "$CE_BENCH_RAW"/
    log "raw results in $CE_BENCH_RAW"
else
    write_page "$work"
fi
