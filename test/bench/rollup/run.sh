#!/usr/bin/env bash
# Benchmark of hourly rollups beside their anchors, in one run on one machine:
#   ingest: plain INSERT ... ON CONFLICT DO NOTHING into an hourly-partitioned
#           event table vs the same with a trigger-mode rollup, in batches of
#           1,000 and of 100 rows per statement (one transaction per batch);
#   refresh: a recompute of one hour and of one day (unchanged rollup: no
#           writes; and an empty rollup: every row inserted) vs a plain
#           GROUP BY over the same rows, and vs the seed's hand-written
#           INSERT ... GROUP BY ... ON CONFLICT DO UPDATE ... WHERE IS DISTINCT FROM.
# Data: EVENTS events (default 3,000,000) over one UTC day and LINKS links
# (default 10,000), in time order: uniform over the links, or with HOT_LINKS=N
# skewed (90% of the events on N hot links, the rest uniform over all links).
# STEPS=insert runs only the ingest steps. Prints a table and the ratios; the
# numbers in doc/bench/rollup.md come from this script.
#
#   bash test/bench/rollup/run.sh            # full size
#   EVENTS=300000 ROUNDS=2 bash test/bench/rollup/run.sh
#   HOT_LINKS=100 STEPS=insert bash test/bench/rollup/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
source test/lib.sh
trap 'ce_cluster_stop_all; rm -rf "${tmp:-}"' EXIT INT TERM
EVENTS=${EVENTS:-3000000}
LINKS=${LINKS:-10000}
ROUNDS=${ROUNDS:-1}
HOT_LINKS=${HOT_LINKS:-0}
STEPS=${STEPS:-all}
case $STEPS in all | insert) ;; *) echo "STEPS must be all or insert" >&2; exit 2 ;; esac

ce_require_packages "${CE_TEST_PACKAGES[@]}" bc || exit 1
ce_build_and_stage || exit 1
ce_cluster_start bench "shared_buffers = '512MB'" "max_wal_size = '8GB'" "work_mem = '64MB'" \
    "maintenance_work_mem = '256MB'" "autovacuum = off" || exit 1
ce_cluster_use bench
"$CE_PGBIN/createdb" bench
export PGDATABASE=bench

echo "machine: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), $(free -g | awk '/Mem:/ {print $2}') GB RAM"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$HOT_LINKS" -gt 0 ]; then
    echo "events: $EVENTS over $LINKS links in one UTC day, 90% of them on $HOT_LINKS hot links"
else
    echo "events: $EVENTS over $LINKS links (uniform) in one UTC day"
fi

ce_psql <<SQL
CREATE EXTENSION counter_ext;
SELECT setseed(0.6);
CREATE UNLOGGED TABLE staging AS
SELECT row_number() OVER (ORDER BY occurred_at) AS seq, event_id, link_id, occurred_at
FROM (SELECT gen_random_uuid() AS event_id,
             1 + floor(CASE WHEN random() < 0.9 AND $HOT_LINKS > 0 THEN $HOT_LINKS ELSE $LINKS END * random())::bigint AS link_id,
             timestamptz '2026-10-06 00:00+00' + random() * interval '1 day' AS occurred_at
      FROM generate_series(1, $EVENTS)) s;
ALTER TABLE staging ADD PRIMARY KEY (seq);
VACUUM ANALYZE staging;

CREATE FUNCTION make_events(t text) RETURNS void LANGUAGE plpgsql AS \$\$
DECLARE
    h int;
BEGIN
    EXECUTE format('CREATE TABLE %I (event_id uuid NOT NULL, link_id bigint NOT NULL, occurred_at timestamptz NOT NULL,
                    UNIQUE (event_id, occurred_at)) PARTITION BY RANGE (occurred_at)', t);
    FOR h IN 0..23 LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)', t || '_' || h, t,
                       timestamptz '2026-10-06 00:00+00' + h * interval '1 hour',
                       timestamptz '2026-10-06 00:00+00' + (h + 1) * interval '1 hour');
    END LOOP;
    EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', t || '_default', t);
END \$\$;
SELECT make_events('ev_plain'), make_events('ev_rollup'), make_events('ev_deferred');
SELECT counter.rollup_create('bench_hourly', 'ev_rollup', 'occurred_at', '{link_id}');
SELECT counter.rollup_create('bench_deferred', 'ev_deferred', 'occurred_at', '{link_id}', mode => 'deferred');

-- One statement and one transaction per batch, as an ingest worker does.
CREATE PROCEDURE load(target text, batch int) LANGUAGE plpgsql AS \$\$
DECLARE
    n bigint;
    i bigint := 0;
BEGIN
    SELECT max(seq) INTO n FROM staging;
    WHILE i < n LOOP
        EXECUTE format('INSERT INTO %I SELECT event_id, link_id, occurred_at FROM staging
                        WHERE seq > \$1 AND seq <= \$2 ON CONFLICT (event_id, occurred_at) DO NOTHING', target)
        USING i, i + batch;
        COMMIT;
        i := i + batch;
    END LOOP;
END \$\$;
CREATE TABLE results (step text, round int, seconds float8, cpu float8);
-- The seed's hand-written hourly recompute, into a table of the same shape.
CREATE TABLE seed_hourly (link_id bigint, hour timestamptz, count bigint NOT NULL, PRIMARY KEY (link_id, hour));
SQL

# Wall time and the CPU time of the backend that ran the step (user +
# system, from /proc): on a shared machine the CPU time is the steadier
# measure, so the ratios below use it; both are reported.
tmp=$(mktemp -d)
timed() { # timed STEP ROUND SQL...
    local step=$1 round=$2 sql=$3 t0 t1
    ce_psql -c "CHECKPOINT" >/dev/null
    ce_psql -At <<SQL >/dev/null
SELECT pg_backend_pid() \g $tmp/pid
\! echo \$(awk '{print \$14 + \$15}' /proc/\$(cat $tmp/pid)/stat) \$(date +%s.%N) > $tmp/t0
$sql;
\! echo \$(awk '{print \$14 + \$15}' /proc/\$(cat $tmp/pid)/stat) \$(date +%s.%N) > $tmp/t1
SQL
    read -r c0 w0 <"$tmp/t0"
    read -r c1 w1 <"$tmp/t1"
    local ticks
    ticks=$(getconf CLK_TCK)
    ce_psql -c "INSERT INTO results VALUES ('$step', $round, $w1 - $w0, ($c1 - $c0)::float8 / $ticks)" >/dev/null
    printf '%-28s round %d  wall %8.2f s  cpu %8.2f s\n' "$step" "$round" "$(echo "$w1 - $w0" | bc)" \
        "$(echo "scale=2; ($c1 - $c0) / $ticks" | bc)"
}

for round in $(seq 1 "$ROUNDS"); do
    for batch in 1000 100; do
        ce_psql -c "TRUNCATE ev_plain, ev_rollup, bench_hourly, ev_deferred, counter.rollup_dirty" \
            -c "VACUUM ev_plain, ev_rollup, bench_hourly, ev_deferred, counter.rollup_dirty" \
            -c "SELECT pg_stat_reset_single_table_counters('bench_hourly'::regclass)" >/dev/null
        timed "insert_plain_$batch" "$round" "CALL load('ev_plain', $batch)"
        timed "insert_rollup_$batch" "$round" "CALL load('ev_rollup', $batch)"
        timed "insert_deferred_$batch" "$round" "CALL load('ev_deferred', $batch)"
        ce_psql -At -c "SELECT pg_sleep(0.5)" -c "SELECT format('rollup table after $batch-row batches: %s rows, %s updates, %s%% HOT, %s pages',
                                      n_live_tup, n_tup_upd, round(100.0 * n_tup_hot_upd / nullif(n_tup_upd, 0), 1),
                                      pg_relation_size(relid) / 8192)
                        FROM pg_stat_user_tables WHERE relname = 'bench_hourly'" | grep -v '^$'
    done
    ce_psql -c "VACUUM ANALYZE ev_plain, ev_rollup, bench_hourly" >/dev/null
    ce_psql -At -c "SELECT 'rollup equals GROUP BY: ' || (count(*) = 0) FROM ((SELECT link_id, counter.rollup_hour(occurred_at), count(*) FROM ev_rollup GROUP BY 1, 2 EXCEPT SELECT * FROM bench_hourly) UNION ALL (SELECT * FROM bench_hourly EXCEPT SELECT link_id, counter.rollup_hour(occurred_at), count(*) FROM ev_rollup GROUP BY 1, 2)) d"

    if [ "$STEPS" = all ]; then
        hour="'2026-10-06 12:00+00', '2026-10-06 13:00+00'"
        day="'2026-10-06 00:00+00', '2026-10-07 00:00+00'"
        groupby() { echo "SELECT count(*) FROM (SELECT link_id, counter.rollup_hour(occurred_at) AS hour, count(*) FROM ev_rollup WHERE occurred_at >= $1 AND occurred_at < $2 GROUP BY 1, 2) s"; }
        seed() { echo "INSERT INTO seed_hourly SELECT link_id, date_trunc('hour', occurred_at, 'UTC'), count(*) FROM ev_rollup WHERE occurred_at >= $1 AND occurred_at < $2 GROUP BY 1, 2 ON CONFLICT (link_id, hour) DO UPDATE SET count = EXCLUDED.count WHERE seed_hourly.count IS DISTINCT FROM EXCLUDED.count"; }
        for what in hour day; do
            range=${!what}
            from=${range%%, *}; to=${range##*, }
            timed "groupby_$what" "$round" "$(groupby "$from" "$to")"
            ce_psql -c "TRUNCATE seed_hourly" >/dev/null
            timed "seed_upsert_${what}_empty" "$round" "$(seed "$from" "$to")"
            timed "seed_upsert_${what}_unchanged" "$round" "$(seed "$from" "$to")"
            timed "refresh_${what}_unchanged" "$round" "SELECT counter.rollup_recompute('bench_hourly', $range)"
            ce_psql -c "CREATE TABLE keep AS SELECT * FROM bench_hourly WHERE hour >= $from AND hour < $to" \
                -c "DELETE FROM bench_hourly WHERE hour >= $from AND hour < $to" -c "VACUUM bench_hourly" >/dev/null
            timed "refresh_${what}_empty" "$round" "SELECT counter.rollup_recompute('bench_hourly', $range)"
            ce_psql -At -c "SELECT 'refreshed rows equal the kept ones: ' || (count(*) = 0) FROM ((TABLE keep EXCEPT SELECT * FROM bench_hourly) UNION ALL (SELECT * FROM bench_hourly WHERE hour >= $from AND hour < $to EXCEPT TABLE keep)) d" \
                -c "DROP TABLE keep"
        done
    fi
done

echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
ce_psql -P pager=off <<'SQL'
SELECT step, round(min(seconds)::numeric, 2) AS best_wall_s, round(min(cpu)::numeric, 2) AS best_cpu_s
FROM results GROUP BY step ORDER BY step;
WITH m AS (SELECT step, min(cpu) AS s, min(seconds) AS w FROM results GROUP BY step),
     r(what, num, den) AS (VALUES
        ('insert, 1000-row batches: rollup / plain', 'insert_rollup_1000', 'insert_plain_1000'),
        ('insert, 100-row batches: rollup / plain', 'insert_rollup_100', 'insert_plain_100'),
        ('insert, 1000-row batches: deferred rollup / plain', 'insert_deferred_1000', 'insert_plain_1000'),
        ('insert, 100-row batches: deferred rollup / plain', 'insert_deferred_100', 'insert_plain_100'),
        ('refresh one hour, unchanged / GROUP BY', 'refresh_hour_unchanged', 'groupby_hour'),
        ('refresh one hour, empty / GROUP BY', 'refresh_hour_empty', 'groupby_hour'),
        ('refresh one day, unchanged / GROUP BY', 'refresh_day_unchanged', 'groupby_day'),
        ('refresh one day, empty / GROUP BY', 'refresh_day_empty', 'groupby_day'),
        ('refresh one day, unchanged / seed upsert unchanged', 'refresh_day_unchanged', 'seed_upsert_day_unchanged'),
        ('refresh one day, empty / seed upsert empty', 'refresh_day_empty', 'seed_upsert_day_empty'))
SELECT what, round((a.s / nullif(b.s, 0))::numeric, 2) AS cpu_ratio, round((a.w / b.w)::numeric, 2) AS wall_ratio
FROM r JOIN m a ON a.step = r.num JOIN m b ON b.step = r.den ORDER BY 1;
SQL
