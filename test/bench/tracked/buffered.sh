#!/usr/bin/env bash
# Buffered counters against their anchors, durably, on one machine in one run.
#
# The cluster runs with PostgreSQL's durable defaults (fsync, synchronous_commit
# and full_page_writes on): a hot row's cost is its lock held across the
# commit flush, and a benchmark without that flush measures something else
# (CE_BENCH_DURABLE=off runs the same, labelled non-durable). The background
# worker runs the flush jobs (every second) during the runs, as in production.
#
# 1. One hot key, pgbench, $CE_BENCH_CLIENTS clients, $CE_BENCH_ROUNDS interleaved
#    rounds of $CE_BENCH_SECONDS s (median reported):
#      hot_row          UPDATE hot SET n = n + 1 WHERE id = 1      (the anchor)
#      select_1         SELECT 1                                   (the ceiling of any call)
#      plain_insert     INSERT into an event table, no counter
#      trigger          the same INSERT with a trigger-mode counter
#      insert_and_row   the INSERT plus an upsert of the session's own row in one
#                       statement: the floor of any counter that writes a row per
#                       statement (what unbuffered trigger mode does, by hand)
#      trigger_buffered the same with buffered => true
#      add              SELECT counter.add('app', 1::bigint)
#      add_buffered     the same, buffered
#    and Redis INCR through redis-benchmark (same clients): no persistence,
#    appendfsync everysec, appendfsync always.
# 2. The same counter runs over 100,000 keys drawn from a zipf distribution.
# 3. A crash: kill -9 of the postmaster under buffered load; what it lost
#    and how long until every key equals count(*) again (worker only).
#
# CE_BENCH_RUNS="select_1 add_buffered ..." runs only those one-hot-key runs
# (interleaved as above) and nothing of 2. and 3.: a short comparison.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source test/lib.sh
seconds=${CE_BENCH_SECONDS:-12}
rounds=${CE_BENCH_ROUNDS:-3}
clients=${CE_BENCH_CLIENTS:-32}
durable=${CE_BENCH_DURABLE:-on}
mode=${CE_BENCH_PROTOCOL:-prepared}
only=${CE_BENCH_RUNS:-}
redis_port=""
work=$(mktemp -d)
cleanup() {
    [ -n "$redis_port" ] && redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1
    ce_cluster_stop_all
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

ce_require_packages "${CE_TEST_PACKAGES[@]}" redis-server || exit 1
ce_build_and_stage || exit 1
if [ "$durable" = on ]; then
    settings=("fsync = on" "synchronous_commit = on" "full_page_writes = on")
else
    settings=("fsync = off" "synchronous_commit = off" "full_page_writes = off")
fi
ce_cluster_start bench "${settings[@]}" "shared_buffers = '512MB'" "max_wal_size = '4GB'" \
    "checkpoint_timeout = '30min'" "counter_ext.buffer_entries = 262144" "counter_ext.naptime = 1" || exit 1
ce_cluster_use bench
"$CE_PGBIN/createdb" bench || exit 1
export PGDATABASE=bench

ce_psql <<'SQL'
CREATE EXTENSION counter_ext;
CREATE TABLE hot (id int PRIMARY KEY, n bigint NOT NULL);
INSERT INTO hot VALUES (1, 0);
CREATE TABLE plain (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE TABLE trig (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON trig (at);
SELECT counter.track('trig', 'trig', 'link', 'at');
CREATE TABLE trigb (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON trigb (at);
SELECT counter.track('trigb', 'trigb', 'link', 'at', buffered => true);
CREATE TABLE floorsrc (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON floorsrc (at);
CREATE TABLE floor_rows (id int PRIMARY KEY, n bigint NOT NULL);
CREATE TABLE app (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON app (at);
SELECT counter.track('app', 'app', 'link', 'at', mode => 'application');
SELECT counter.track('appb', 'app', 'link', 'at', mode => 'application', buffered => true);
-- the jobs of this benchmark: the flush jobs run, reconciliation waits to the end
UPDATE counter.jobs SET enabled = false WHERE kind = 'reconcile';
SQL

echo 'UPDATE hot SET n = n + 1 WHERE id = 1;' >"$work/hot_row.sql"
echo 'SELECT 1;' >"$work/select_1.sql"
echo 'INSERT INTO plain (link) VALUES (1);' >"$work/plain_insert.sql"
echo 'INSERT INTO trig (link) VALUES (1);' >"$work/trigger.sql"
echo 'INSERT INTO trigb (link) VALUES (1);' >"$work/trigger_buffered.sql"
echo 'WITH i AS (INSERT INTO floorsrc (link) VALUES (1)) INSERT INTO floor_rows AS f VALUES (:client_id, 1)
  ON CONFLICT (id) DO UPDATE SET n = f.n + 1;' | tr -d '\n' >"$work/insert_and_row.sql"
echo "SELECT counter.add('app', 1::bigint);" >"$work/add.sql"
echo "SELECT counter.add('appb', 1::bigint);" >"$work/add_buffered.sql"
zipf='\set k random_zipfian(1, 100000, 1.1)'
for t in plain_insert trigger trigger_buffered add add_buffered; do
    { echo "$zipf"; sed 's/(1)/(:k)/; s/1::bigint/:k::bigint/' "$work/$t.sql"; } >"$work/zipf_$t.sql"
done

tps_of() { sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$1"; }
run() { # run NAME SCRIPT -> appends tps to $work/NAME.tps
    ce_psql -c "CHECKPOINT" >/dev/null
    "$CE_PGBIN/pgbench" -n -M "$mode" -c "$clients" -j 2 -T "$seconds" -f "$2" >"$work/$1.out" 2>&1
    local t
    t=$(tps_of "$work/$1.out")
    echo "${t:-0}" >>"$work/$1.tps"
    printf '  %-26s %10s tps\n' "$1" "${t:-FAILED}"
}
median() { sort -n "$work/$1.tps" | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

one_key=(hot_row select_1 plain_insert trigger insert_and_row trigger_buffered add add_buffered)
if [ -n "$only" ]; then
    read -r -a one_key <<<"$only"
    for t in "${one_key[@]}"; do [ -f "$work/$t.sql" ] || { echo "CE_BENCH_RUNS: no run $t"; exit 1; }; done
fi
for r in $(seq 1 "$rounds"); do
    echo "round $r of $rounds (one hot key)"
    for t in "${one_key[@]}"; do run "$t" "$work/$t.sql"; done
done
r() { [ -n "$1" ] && [ -n "$2" ] && python3 -c "print('%.2fx' % ($1 / $2) if $2 else '-')" || echo -; }
m() { [ -f "$work/$1.tps" ] && median "$1"; }
if [ -n "$only" ]; then
    echo
    echo "## Results (CE_BENCH_RUNS: $only; $([ "$durable" = on ] && echo durable || echo NON-DURABLE)," \
        "pgbench -M $mode, $clients clients, median of $rounds interleaved rounds of $seconds s)"
    echo
    echo "| run | one hot key, tps | / SELECT 1 | / plain INSERT |"
    echo "| --- | ---: | ---: | ---: |"
    for t in "${one_key[@]}"; do
        printf '| %s | %s | %s | %s |\n' "$t" "$(m "$t")" "$(r "$(m "$t")" "$(m select_1)")" \
            "$(r "$(m "$t")" "$(m plain_insert)")"
    done
    echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
    exit 0
fi
for r in $(seq 1 "$rounds"); do
    echo "round $r of $rounds (100,000 zipf keys)"
    for t in plain_insert trigger trigger_buffered add add_buffered; do run "zipf_$t" "$work/zipf_$t.sql"; done
done

# Redis INCR on one key, through its own client, the same clients.
start_redis() { # start_redis ARGS...
    local port
    for _ in 1 2 3 4 5 6 7 8; do
        port=$(ce_random_port) || continue
        if redis-server --port "$port" --bind 127.0.0.1 --save '' --daemonize yes --dir "$work" \
            --pidfile "$work/redis.pid" --logfile "$work/redis.log" "$@" >/dev/null 2>&1; then
            for _ in $(seq 1 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
            redis_port=$port
            return 0
        fi
    done
    return 1
}
redis_run() { # redis_run NAME ARGS...
    local name=$1 r t
    shift
    start_redis "$@" || { echo "  $name: redis-server did not start"; return; }
    for r in $(seq 1 "$rounds"); do
        redis-cli -p "$redis_port" del hot >/dev/null
        t=$(redis-benchmark -p "$redis_port" -c "$clients" -n $((30000 * seconds)) -t incr -q 2>/dev/null |
            tr '\r' '\n' | sed -n 's/^INCR: \([0-9.]*\) requests per second.*/\1/p' | tail -1)
        echo "${t:-0}" >>"$work/$name.tps"
        printf '  %-26s %10s requests/s\n' "$name" "${t:-FAILED}"
    done
    redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1
    redis_port=""
    rm -rf "$work"/appendonly*
}
echo "Redis $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') INCR, $clients clients"
redis_run redis_none --appendonly no
redis_run redis_everysec --appendonly yes --appendfsync everysec
redis_run redis_always --appendonly yes --appendfsync always

# Every counter agrees with its rows once flushed and reconciled.
ce_psql -q -c "SELECT counter.flush()" >/dev/null
for c in trig trigb; do ce_psql -q -c "SELECT FROM counter.reconcile('$c', now() + interval '1 hour', true)" >/dev/null; done
check=$(ce_psql -At <<'SQL'
SELECT string_agg(format('%s key %s: %s vs %s', c, k, v, n), '; ') FROM (
    SELECT 'trig' AS c, link AS k, counter.value('trig', link) AS v, count(*) AS n FROM trig GROUP BY link
    UNION ALL SELECT 'trigb', link, counter.value('trigb', link), count(*) FROM trigb GROUP BY link) s
WHERE v <> n;
SQL
)
adds=$(ce_psql -At -c "SELECT (SELECT sum(value) FROM counter.tracked_values WHERE counter = 'appb')")

# A crash under buffered load: what it loses, how long the repair takes.
ce_psql -q <<'SQL'
TRUNCATE trigb;
SELECT counter.reconcile('trigb', all_keys => true);
UPDATE counter.jobs SET enabled = true WHERE target = 'trigb';
SELECT counter.job_alter(job_id, run_every => '1 second') FROM counter.jobs WHERE kind = 'reconcile' AND target = 'trigb';
UPDATE counter.tracked SET watermark_lag = '0' WHERE name = 'trigb';
SQL
"$CE_PGBIN/pgbench" -n -M "$mode" -c "$clients" -j 2 -T 60 -f "$work/zipf_trigger_buffered.sql" >"$work/crash.out" 2>&1 &
load=$!
sleep 8
pending=$(ce_psql -At -c "SELECT pending FROM counter.buffered WHERE counter = 'trigb'")
ce_cluster_kill bench "$load"
restart=$(date +%s.%N)
ce_cluster_restart bench >/dev/null || { echo "restart failed"; exit 1; }
exact=""
for _ in $(seq 1 240); do
    off=$(ce_psql -At -c "SELECT count(*) FROM (SELECT link, count(*) AS n FROM trigb GROUP BY link) s
        WHERE counter.value('trigb', link) <> n" 2>/dev/null) || off=x
    [ "$off" = 0 ] && { exact=$(date +%s.%N); break; }
    sleep 0.5
done
lost=$(ce_psql -At -c "SELECT coalesce(-sum(drift_negative), 0) FROM counter.tracked_history
    WHERE counter = 'trigb' AND started_at >= pg_postmaster_start_time()")

echo
echo "## Results ($([ "$durable" = on ] && echo "durable: fsync, synchronous_commit, full_page_writes on" ||
    echo "NON-DURABLE: fsync, synchronous_commit, full_page_writes off"))"
echo "pgbench -M $mode, $clients clients, median of $rounds interleaved rounds of $seconds s"
echo
echo "| run | one hot key, tps | / hot row | / SELECT 1 | 100,000 zipf keys, tps |"
echo "| --- | ---: | ---: | ---: | ---: |"
for t in "${one_key[@]}"; do
    z=""
    [ -f "$work/zipf_$t.tps" ] && z=$(m "zipf_$t")
    printf '| %s | %s | %s | %s | %s |\n' "$t" "$(m "$t")" "$(r "$(m "$t")" "$(m hot_row)")" \
        "$(r "$(m "$t")" "$(m select_1)")" "${z:--}"
done
for t in redis_none redis_everysec redis_always; do
    [ -f "$work/$t.tps" ] && printf '| %s | %s | %s | %s | - |\n' "$t" "$(m "$t")" "$(r "$(m "$t")" "$(m hot_row)")" \
        "$(r "$(m "$t")" "$(m select_1)")"
done
echo
echo "targets: add_buffered / SELECT 1 = $(r "$(m add_buffered)" "$(m select_1)") (>= 0.85x);" \
    "trigger_buffered / plain_insert = $(r "$(m trigger_buffered)" "$(m plain_insert)") (>= 0.9x);" \
    "trigger / hot_row = $(r "$(m trigger)" "$(m hot_row)") (>= 5x);" \
    "trigger / insert_and_row = $(r "$(m trigger)" "$(m insert_and_row)") (its floor);" \
    "add_buffered / redis_everysec = $(r "$(m add_buffered)" "$(m redis_everysec)")"
echo "zipf: trigger_buffered / plain_insert = $(r "$(m zipf_trigger_buffered)" "$(m zipf_plain_insert)"), add_buffered / add = $(r "$(m zipf_add_buffered)" "$(m zipf_add)")"
echo "after the runs: ${check:-every trigger-mode key equals count(*)}; buffered adds counted: $adds"
if [ -n "$exact" ]; then
    echo "crash: kill -9 under buffered load ($pending buffered at the last look): lost $lost adds, every key" \
        "exact $(awk -v a="$restart" -v b="$exact" 'BEGIN { printf "%.1f", b - a }') s after the restart (worker only)"
else
    echo "crash: not exact 120 s after the restart"
fi
echo "machine: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), shared with other" \
    "sessions; PostgreSQL $("$CE_PGBIN/postgres" --version | awk '{print $3}'); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
