#!/usr/bin/env bash
# Instructions of a rollup's writers (valgrind's callgrind: deterministic,
# unlike any timing on a shared machine), this tree only. A preloaded cluster
# gets one event table per mode (a plain one, trigger, deferred and buffered
# rollups grouped by link_id) with the same columns and unique index; then
# `postgres --single` runs a prepared 1,000-row INSERT (links uniform over
# 10,000, times over one hour: ~950 distinct (link, hour) per batch, as in
# run.sh) N and 3N times, each in its own transaction, under callgrind. Per
# execution: the difference of the two totals divided by 2N. Also a
# single-row INSERT. On demand, not in CI:
#   bash test/bench/rollup/callgrind.sh [N]
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
n=${1:-5}
ce_require_packages valgrind || exit 1
ce_build_and_stage >/dev/null
trap ce_cluster_stop_all EXIT
ce_cluster_start cg || exit 1
ce_cluster_use cg
ce_psql -q <<'SQL'
CREATE EXTENSION counter_ext;
CREATE SEQUENCE ids;
DO $$
DECLARE
    m text;
BEGIN
    FOREACH m IN ARRAY ARRAY['plain', 'trigger', 'deferred', 'buffered'] LOOP
        EXECUTE format('CREATE TABLE ev_%s (id bigint NOT NULL, link_id bigint NOT NULL, v int NOT NULL,
                        occurred_at timestamptz NOT NULL, UNIQUE (id, occurred_at))', m);
        IF m <> 'plain' THEN
            PERFORM counter.rollup_create('ev_' || m || '_hourly', ('ev_' || m)::regclass, 'occurred_at', '{link_id}',
                                          mode => m, sums => '{v}', refresh_every => '1 hour');
        END IF;
    END LOOP;
END
$$;
SQL

# instructions STATEMENT COUNT: callgrind's total for COUNT executions.
instructions() {
    local stmt=$1 count=$2 input out
    input=$(mktemp) out=$(mktemp -d)
    chmod 755 "$out"
    ce_is_root && chown postgres: "$out"
    { echo "PREPARE p AS $stmt"; for _ in $(seq 1 "$count"); do echo "EXECUTE p"; done; } >"$input"
    chmod 644 "$input"
    ce_as_owner valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" \
        "$CE_PGBIN/postgres" --single -D "$CE_cg_DIR/data" postgres <"$input" >"$out/single.txt" 2>"$out/valgrind.txt"
    grep -h -m3 ERROR "$out/single.txt" "$out/valgrind.txt" >&2 || true
    sed -n 's/^==[0-9]*== Collected : //p' "$out/valgrind.txt" | tail -1
    rm -rf "$input" "$out"
}

ce_as_owner "$CE_PGBIN/pg_ctl" -D "$CE_cg_DIR/data" -w -t 60 stop -m fast >/dev/null
declare -A per
for rows in 1000 1; do
    for m in plain trigger deferred buffered; do
        # one line: postgres --single ends a statement at a newline
        stmt="INSERT INTO ev_$m SELECT nextval('ids'), (random() * 9999)::bigint + 1, 1, '2026-10-06 09:00+00'::timestamptz + random() * interval '59 minutes' FROM generate_series(1, $rows) ON CONFLICT (id, occurred_at) DO NOTHING"
        a=$(instructions "$stmt" "$n")
        b=$(instructions "$stmt" $((3 * n)))
        per["$rows|$m"]=$(((b - a) / (2 * n)))
    done
done
ce_as_owner "$CE_PGBIN/pg_ctl" -D "$CE_cg_DIR/data" -l "$CE_cg_DIR/server.log" -w -t 60 start >/dev/null

printf '%-34s %14s %10s\n' "per INSERT (instructions)" "instructions" "plain/this"
for rows in 1000 1; do
    for m in plain trigger deferred buffered; do
        printf '%-34s %14s %10s\n' "$rows-row INSERT, $m" "${per["$rows|$m"]}" \
            "$(python3 -c "print(f'{${per["$rows|plain"]} / ${per["$rows|$m"]}:.2f}x')")"
    done
done
