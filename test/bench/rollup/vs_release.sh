#!/usr/bin/env bash
# The rollup trigger of this tree beside a released version's (default 1.1,
# commit 991f00a; CE_BENCH_REF=commit), each in a cluster of its own built
# from its own source, in interleaved rounds on one machine, durable defaults:
#   trigger_100     INSERT of 100 rows (100 links) into a table with a trigger-mode rollup
#   trigger_1000    the same with 1,000 rows
#   filtered_1000   1,000 rows, trigger-mode rollup with a filter (half the rows pass)
#   deferred_1000   1,000 rows, deferred rollup (dirty hours only)
# One session, one statement per transaction, best of interleaved rounds.
# Reported: milliseconds of each, and this tree / the release as a ratio (the
# privilege work of 1.2 must cost at most 10%).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source test/lib.sh
ref=${CE_BENCH_REF:-991f00a}
rounds=${CE_BENCH_ROUNDS:-5}
ce_bench_beside_release "$ref"

setup=$(cat <<'SQL'
CREATE EXTENSION counter_ext;
CREATE TABLE ev100 (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
SELECT FROM counter.rollup_create('ev100_hourly', 'ev100', 'at', '{link}');
CREATE TABLE ev1000 (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
SELECT FROM counter.rollup_create('ev1000_hourly', 'ev1000', 'at', '{link}');
CREATE TABLE evf (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
SELECT FROM counter.rollup_create('evf_hourly', 'evf', 'at', '{link}', filter => 'id % 2 = 0');
CREATE TABLE evd (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
SELECT FROM counter.rollup_create('evd_hourly', 'evd', 'at', '{link}', mode => 'deferred');
SQL
)
for c in this ref; do
    eval "port=\$CE_${c}_PORT dir=\$CE_${c}_DIR"
    "$CE_PGBIN/psql" -X -q -h "$dir" -p "$port" -U "$(ce_owner_name)" -d postgres -c "$setup" >/dev/null || exit 1
done
echo 'INSERT INTO ev100 (link) SELECT 1 + g % 100 FROM generate_series(1, 100) g;' >"$work/trigger_100.sql"
echo 'INSERT INTO ev1000 (link) SELECT 1 + g % 100 FROM generate_series(1, 1000) g;' >"$work/trigger_1000.sql"
echo 'INSERT INTO evf (link) SELECT 1 + g % 100 FROM generate_series(1, 1000) g;' >"$work/filtered_1000.sql"
echo 'INSERT INTO evd (link) SELECT 1 + g % 100 FROM generate_series(1, 1000) g;' >"$work/deferred_1000.sql"

# Each sample: one session runs 'statements' INSERTs of the test, one
# transaction each, with synchronous_commit off (no wait for the WAL flush, so
# the trigger's own work dominates); the best of the interleaved rounds is
# kept (other load on the machine only ever adds time).
statements=${CE_BENCH_STATEMENTS:-200}
declare -A best
tests="trigger_100 trigger_1000 filtered_1000 deferred_1000"
for round in $(seq 1 "$rounds"); do
    for t in $tests; do
        order="this ref"; [ $((round % 2)) = 0 ] && order="ref this"  # alternate who goes first
        for c in $order; do
            eval "port=\$CE_${c}_PORT dir=\$CE_${c}_DIR"
            ms=$( { echo 'SET synchronous_commit = off;'; echo '\timing on'; for i in $(seq 1 "$statements"); do cat "$work/$t.sql"; done; } |
                "$CE_PGBIN/psql" -X -q -h "$dir" -p "$port" -U "$(ce_owner_name)" -d postgres 2>&1 |
                sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | python3 -c "import sys; print(round(sum(float(x) for x in sys.stdin), 1))")
            echo "round $round $t $c: $ms ms"
            if [ -z "${best[$t.$c]:-}" ] || python3 -c "import sys; sys.exit(0 if $ms < ${best[$t.$c]} else 1)"; then
                best[$t.$c]=$ms
            fi
        done
    done
done
echo
echo "best of $rounds interleaved rounds, ms for $statements statements (this tree / $ref; above 1 is slower):"
for t in $tests; do
    python3 -c "a, b = ${best[$t.this]}, ${best[$t.ref]}; print(f'  {\"$t\":14s} {a:10.1f} {b:10.1f}  {a / b:.3f}x')"
done
# Both counted right (the deferred one after a refresh).
for c in this ref; do
    eval "port=\$CE_${c}_PORT dir=\$CE_${c}_DIR"
    "$CE_PGBIN/psql" -X -At -h "$dir" -p "$port" -U "$(ce_owner_name)" -d postgres <<'SQL' | tr '\n' ' '
SELECT 'exact: ' || ((SELECT sum(count) FROM ev1000_hourly) = (SELECT count(*) FROM ev1000))
    || ' ' || ((SELECT sum(count) FROM evf_hourly) = (SELECT count(*) FROM evf WHERE id % 2 = 0));
SQL
    echo "($c)"
done
echo "machine: $(nproc) cores, shared with other work while it ran; PostgreSQL $("$CE_PGBIN/postgres" --version | awk '{print $3}')"
