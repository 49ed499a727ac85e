#!/usr/bin/env bash
# Concurrent writers into a rollup's source, beside a plain INSERT, in one
# run on one machine: pgbench with 1 and with 8 clients, each transaction one
# INSERT of a 1,000-row batch (500 links, event times over the last 3 hours,
# ON CONFLICT DO NOTHING) into a table with no rollup / a trigger-mode rollup /
# a deferred-mode rollup / a buffered rollup. Durable (fsync, synchronous_commit and
# full_page_writes on). The steps are interleaved (per round: 1 client, then
# 8, each over the three tables), the tables emptied before each step; the
# load average (uptime) is printed before and after each step. Prints tps per
# step, the ratios to the plain INSERT with as many clients, and 8 clients
# over 1 per table; then checks that the trigger-mode rollup equals a GROUP BY
# over its events. doc/bench/rollup.md ("Concurrent writers") has the numbers.
#
#   bash test/bench/rollup/concurrent.sh                 # 20 s a step, 2 rounds
#   SECONDS_PER_STEP=5 ROUNDS=1 bash test/bench/rollup/concurrent.sh
#   ROWS=1 TARGETS="plain buffered" bash test/bench/rollup/concurrent.sh   # single-row INSERTs
set -euo pipefail
cd "$(dirname "$0")/../../.."
source test/lib.sh
trap 'ce_cluster_stop_all; rm -rf "${tmp:-}"' EXIT INT TERM
STEP_SECONDS=${SECONDS_PER_STEP:-20}
ROUNDS=${ROUNDS:-2}
CLIENTS=${CLIENTS:-"1 8"}
ROWS=${ROWS:-1000}          # rows per INSERT (ROWS=1: single-row INSERTs)
TARGETS=${TARGETS:-"plain trigger deferred buffered"}

ce_require_packages "${CE_TEST_PACKAGES[@]}" || exit 1
ce_build_and_stage || exit 1
ce_cluster_start bench "fsync = on" "synchronous_commit = on" "full_page_writes = on" "shared_buffers = '512MB'" \
    "max_wal_size = '8GB'" "autovacuum = off" || exit 1
ce_cluster_use bench
"$CE_PGBIN/createdb" bench
export PGDATABASE=bench
tmp=$(mktemp -d)

echo "machine: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
echo "before: $(uptime)"
ce_psql <<'SQL'
CREATE EXTENSION counter_ext;
CREATE TABLE ev_plain (event_id uuid NOT NULL, link_id bigint NOT NULL, occurred_at timestamptz NOT NULL,
                       UNIQUE (event_id, occurred_at));
CREATE TABLE ev_trigger (LIKE ev_plain INCLUDING ALL);
CREATE TABLE ev_deferred (LIKE ev_plain INCLUDING ALL);
CREATE TABLE ev_buffered (LIKE ev_plain INCLUDING ALL);
SELECT counter.rollup_create('hourly_trigger', 'ev_trigger', 'occurred_at', '{link_id}');
SELECT counter.rollup_create('hourly_deferred', 'ev_deferred', 'occurred_at', '{link_id}', mode => 'deferred');
SELECT counter.rollup_create('hourly_buffered', 'ev_buffered', 'occurred_at', '{link_id}', mode => 'buffered');
CREATE TABLE results (step text, clients int, round int, tps float8);
SQL
cat >"$tmp/batch.sql" <<'SQL'
INSERT INTO :target
SELECT gen_random_uuid(), 1 + floor(random() * 500)::bigint, now() - random() * interval '3 hours'
FROM generate_series(1, :rows) ORDER BY 1
ON CONFLICT (event_id, occurred_at) DO NOTHING;
SQL

for round in $(seq 1 "$ROUNDS"); do
    for clients in $CLIENTS; do
        for target in $TARGETS; do
            case $target in
            plain) tables=ev_plain ;;
            buffered) ce_psql -c "SELECT counter.rollup_flush('hourly_buffered')" >/dev/null
                tables="ev_buffered, hourly_buffered, counter.rollup_dirty, counter_internal.rollup_buffer_log" ;;
            *) tables="ev_$target, hourly_$target, counter.rollup_dirty" ;;
            esac
            ce_psql -c "TRUNCATE $tables" -c "VACUUM $tables" -c "CHECKPOINT" >/dev/null
            out=$("$CE_PGBIN/pgbench" -n -c "$clients" -j "$clients" -T "$STEP_SECONDS" -D target="ev_$target" -D rows="$ROWS" \
                -f "$tmp/batch.sql" 2>&1) || { echo "$out"; exit 1; }
            tps=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1)
            failed=$(echo "$out" | sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p')
            ce_psql -c "INSERT INTO results VALUES ('$target', $clients, $round, $tps)" >/dev/null
            printf '%-9s clients %d round %d  tps %9.1f  failed %s  load %s\n' "$target" "$clients" "$round" "$tps" \
                "${failed:-?}" "$(cut -d' ' -f1-3 /proc/loadavg)"
            [ "${failed:-0}" = 0 ] || { echo "$out"; exit 1; }
        done
    done
done
echo "after: $(uptime)"
ce_psql -P pager=off <<'SQL'
SELECT step, clients, round(min(tps)::numeric, 1) AS min_tps, round(max(tps)::numeric, 1) AS max_tps
FROM results GROUP BY 1, 2 ORDER BY 2, 1;
-- Per round, each mode over the plain INSERT with as many clients.
SELECT r.step || ' / plain' AS ratio, r.clients,
       round(min(r.tps / p.tps)::numeric, 2) AS min, round(max(r.tps / p.tps)::numeric, 2) AS max
FROM results r JOIN results p ON p.step = 'plain' AND p.clients = r.clients AND p.round = r.round
WHERE r.step <> 'plain' GROUP BY 1, 2 ORDER BY 2, 1;
-- Per round, 8 clients over 1 (total throughput).
SELECT e.step, round(min(e.tps / o.tps)::numeric, 2) AS min_8_over_1, round(max(e.tps / o.tps)::numeric, 2) AS max_8_over_1
FROM results e JOIN results o ON o.step = e.step AND o.round = e.round AND o.clients = 1
WHERE e.clients = 8 GROUP BY 1 ORDER BY 1;
SQL
ce_psql -At -c "SELECT 'trigger-mode rollup equals GROUP BY (its last step, ' || (SELECT count(*) FROM ev_trigger) || ' events): ' || (count(*) = 0) FROM ((SELECT link_id, counter.rollup_hour(occurred_at), count(*) FROM ev_trigger GROUP BY 1, 2 EXCEPT SELECT link_id, hour, count FROM hourly_trigger) UNION ALL (SELECT link_id, hour, count FROM hourly_trigger EXCEPT SELECT link_id, counter.rollup_hour(occurred_at), count(*) FROM ev_trigger GROUP BY 1, 2)) d"
ce_psql -At -c "SELECT counter.rollup_flush('hourly_buffered')" >/dev/null
ce_psql -At -c "SELECT 'buffered rollup equals GROUP BY after its flush (its last step, ' || (SELECT count(*) FROM ev_buffered) || ' events): ' || (count(*) = 0) FROM ((SELECT link_id, counter.rollup_hour(occurred_at), count(*) FROM ev_buffered GROUP BY 1, 2 EXCEPT SELECT link_id, hour, count FROM hourly_buffered) UNION ALL (SELECT link_id, hour, count FROM hourly_buffered EXCEPT SELECT link_id, counter.rollup_hour(occurred_at), count(*) FROM ev_buffered GROUP BY 1, 2)) d"
