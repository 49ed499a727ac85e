#!/usr/bin/env bash
# The hot paths of this tree beside a released version's (default 1.1, commit
# 991f00a; CE_BENCH_REF=commit), each in a cluster of its own built from its
# own source, run in interleaved rounds on one machine, with the durable
# defaults (fsync, synchronous_commit, full_page_writes on):
#   trigger_1row   INSERT of one row into a table with a trigger-mode counter
#   trigger_1000   INSERT of 1,000 rows over 100 keys (2 clients)
#   add            SELECT counter.add(...) in application mode
#   rollup_1000    INSERT of 1,000 rows into a table with a trigger-mode rollup (2 clients)
# Reported: tps of each, and this tree / the release as a ratio (the
# privilege work of 1.2 must cost at most 10%).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source test/lib.sh
ref=${CE_BENCH_REF:-991f00a}
seconds=${CE_BENCH_SECONDS:-10}
rounds=${CE_BENCH_ROUNDS:-3}
clients=${CE_BENCH_CLIENTS:-8}
ce_bench_beside_release "$ref"

setup=$(cat <<'SQL'
CREATE EXTENSION counter_ext;
CREATE TABLE clicks (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON clicks (at);
SELECT FROM counter.track('clicks', 'clicks', 'link', 'at');
CREATE TABLE bulk (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON bulk (at);
SELECT FROM counter.track('bulk', 'bulk', 'link', 'at');
CREATE TABLE app (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON app (at);
SELECT FROM counter.track('app', 'app', 'link', 'at', mode => 'application');
CREATE TABLE ev (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
SELECT FROM counter.rollup_create('ev_hourly', 'ev', 'at', '{link}');
SQL
)
for c in this ref; do
    eval "port=\$CE_${c}_PORT dir=\$CE_${c}_DIR"
    "$CE_PGBIN/psql" -X -q -h "$dir" -p "$port" -U "$(ce_owner_name)" -d postgres -c "$setup" >/dev/null || exit 1
done
echo 'INSERT INTO clicks (link) VALUES (1 + (random() * 9)::int);' >"$work/trigger_1row.sql"
echo 'INSERT INTO bulk (link) SELECT 1 + g % 100 FROM generate_series(1, 1000) g;' >"$work/trigger_1000.sql"
echo "SELECT counter.add('app', (1 + (random() * 9)::int)::bigint);" >"$work/add.sql"
echo 'INSERT INTO ev (link) SELECT 1 + g % 100 FROM generate_series(1, 1000) g;' >"$work/rollup_1000.sql"

declare -A sum
for round in $(seq 1 "$rounds"); do
    for t in trigger_1row trigger_1000 add rollup_1000; do
        n=$clients; case $t in *_1000) n=2 ;; esac
        for c in this ref; do
            eval "port=\$CE_${c}_PORT dir=\$CE_${c}_DIR"
            "$CE_PGBIN/pgbench" -n -h "$dir" -p "$port" -U "$(ce_owner_name)" -d postgres -c "$n" -j 2 \
                -T "$seconds" -f "$work/$t.sql" >"$work/out.txt" 2>&1
            tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$work/out.txt")
            echo "round $round $t $c: ${tps:-failed} tps"
            sum[$t.$c]=$(python3 -c "print(${sum[$t.$c]:-0} + ${tps:-0})")
        done
    done
done
echo
echo "mean tps over $rounds interleaved rounds of $seconds s (this tree / $ref):"
for t in trigger_1row trigger_1000 add rollup_1000; do
    python3 -c "a, b = ${sum[$t.this]} / $rounds, ${sum[$t.ref]} / $rounds; print(f'  {\"$t\":14s} {a:10.1f} {b:10.1f}  {a / b:.3f}x')"
done
# Both counted right.
for c in this ref; do
    eval "port=\$CE_${c}_PORT dir=\$CE_${c}_DIR"
    "$CE_PGBIN/psql" -X -At -h "$dir" -p "$port" -U "$(ce_owner_name)" -d postgres -c \
        "SELECT '$c: clicks exact ' || bool_and(counter.value('clicks', link) = n) FROM (SELECT link, count(*) AS n FROM clicks GROUP BY 1) x"
done
echo "machine: $(nproc) cores, shared with other work while it ran; PostgreSQL $("$CE_PGBIN/postgres" --version | awk '{print $3}')"
