#!/usr/bin/env bash
# counter.hll beside postgresql-hll in instructions (valgrind's callgrind:
# deterministic, unlike any timing on a shared machine). One preloaded
# cluster holds both extensions and the tables; then `postgres --single` runs
# each query once under callgrind, and the report gives the instructions
# beyond `SELECT 1` (start-up and shutdown), per input row, and the ratio to
# postgresql-hll's query. Serial plans only (a single-user backend has no
# workers). On demand, not in CI:
#   bash test/bench/hll/callgrind.sh
#   CE_CG_SHAPES="10000000:100000" bash test/bench/hll/callgrind.sh   # the run.sh shape (slow)
# CE_CG_SHAPES lists GROUP BY shapes ROWS:GROUPS (default 1M rows into
# 10,000 groups, 100 values a group as in run.sh, and into 100,000 groups,
# 10 a group); CE_CG_ROWS sizes the single-group add and the tables of the
# union and cardinality queries; CE_CG_GROUP_ONLY=1 runs the GROUP BY rows
# only; CE_CG_KEEP=DIR keeps each callgrind output there (callgrind_annotate).
set -euo pipefail
cd "$(dirname "$0")/../../.."
source test/lib.sh

SHAPES=${CE_CG_SHAPES:-"1000000:10000 1000000:100000"}
ROWS=${CE_CG_ROWS:-1000000}
ce_require_packages "${CE_TEST_PACKAGES[@]}" valgrind postgresql-$CE_PG_MAJOR-hll || exit 1
ce_build_and_stage || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/counter_ext.cg_hll.XXXXXX")
chmod 755 "$work"
trap 'ce_cluster_stop_all; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
ce_cluster_start cg "work_mem = '256MB'" "jit = off" "max_parallel_workers_per_gather = 0" || exit 1
ce_cluster_use cg

ce_psql -q <<SQL
CREATE EXTENSION counter_ext; CREATE EXTENSION hll; ALTER EXTENSION hll UPDATE TO '2.17';
CREATE TABLE big AS SELECT g::bigint AS id FROM generate_series(1, $ROWS) g;
SQL
for shape in $SHAPES; do
    r=${shape%%:*} g=${shape##*:}
    ce_psql -q -c "CREATE TABLE grp_${r}_${g} AS SELECT (i % $g)::int AS link, i::bigint AS visitor FROM generate_series(1, $r) i"
done
ce_psql -q <<'SQL'
SET max_parallel_workers_per_gather = 0;
CREATE TABLE sk_ours AS SELECT id % 10000 AS k, counter.hll_add_agg(id) AS s FROM big GROUP BY 1;
CREATE TABLE sk_pghll AS SELECT id % 10000 AS k, hll_add_agg(hll_hash_bigint(id), 14) AS s FROM big GROUP BY 1;
CREATE TABLE dk_ours AS SELECT id % 100 AS k, counter.hll_add_agg(id) AS s FROM big GROUP BY 1;
CREATE TABLE dk_pghll AS SELECT id % 100 AS k, hll_add_agg(hll_hash_bigint(id), 14) AS s FROM big GROUP BY 1;
VACUUM ANALYZE;
SQL
ce_as_owner "$CE_PGBIN/pg_ctl" -D "$CE_cg_DIR/data" -w -t 60 stop -m fast >/dev/null

# instructions SQL: callgrind's total for one run of SQL in a single-user backend.
instructions() {
    local input=$work/input.sql out=$work/cg
    rm -rf "$out"
    mkdir "$out"
    ce_is_root && chown postgres: "$out"
    printf '%s\n' "SET max_parallel_workers_per_gather = 0" "$1" >"$input"
    chmod 644 "$input"
    ce_as_owner valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" \
        "$CE_PGBIN/postgres" --single -D "$CE_cg_DIR/data" postgres <"$input" >"$out/stdout.txt" 2>"$out/valgrind.txt"
    if grep -q 'ERROR' "$out/stdout.txt"; then
        cat "$out/stdout.txt" >&2
        ce_die "query failed: $1"
    fi
    if [ -n "${CE_CG_KEEP:-}" ]; then
        kept=$(($(wc -l <"$CE_CG_KEEP/index.txt" 2>/dev/null || echo 0) + 1))
        cp "$out/cg.out" "$CE_CG_KEEP/$kept.out"
        printf '%s\t%s\n' "$kept" "$1" >>"$CE_CG_KEEP/index.txt"
    fi
    sed -n 's/^==[0-9]*== Collected : //p' "$out/valgrind.txt" | tail -1
}

base=$(instructions "SELECT 1")
# row LABEL ROWS OURS_SQL PGHLL_SQL [COUNT_SQL]
row() {
    local label=$1 rows=$2 ours pghll count=""
    ours=$(($(instructions "$3") - base))
    pghll=$(($(instructions "$4") - base))
    [ -n "${5:-}" ] && count=$(($(instructions "$5") - base))
    python3 - "$label" "$rows" "$ours" "$pghll" "$count" <<'PY'
import sys
label, rows, ours, pghll, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
over = ""
if count:
    c = int(count)
    over = f"{(ours - c) / rows:.0f} / {(pghll - c) / rows:.0f} ({(ours - c) / (pghll - c):.3f}x)"
print(f"| {label} | {ours / rows:.0f} | {pghll / rows:.0f} | **{ours / pghll:.3f}x** | {over} |")
PY
}

echo "Instructions beyond \`SELECT 1\` per input row (callgrind, one single-user backend, serial plans; git $(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
echo
echo "| query | counter.hll | postgresql-hll (log2m 14) | ratio | beyond count(x): ours / pg-hll (ratio) |"
echo "|---|---:|---:|---:|---|"
for shape in $SHAPES; do
    r=${shape%%:*} g=${shape##*:} t=grp_${shape%%:*}_${shape##*:}
    row "GROUP BY: $r rows into $g sketches" "$r" \
        "SELECT sum(pg_column_size(s)) FROM (SELECT link, counter.hll_add_agg(visitor) AS s FROM $t GROUP BY link) x" \
        "SELECT sum(pg_column_size(s)) FROM (SELECT link, hll_add_agg(hll_hash_bigint(visitor), 14) AS s FROM $t GROUP BY link) x" \
        "SELECT sum(c) FROM (SELECT link, count(visitor) AS c FROM $t GROUP BY link) x"
done
[ -n "${CE_CG_GROUP_ONLY:-}" ] && exit 0
row "add-aggregate: $ROWS rows into one sketch" "$ROWS" \
    "SELECT counter.hll_cardinality(counter.hll_add_agg(id)) FROM big" \
    "SELECT hll_cardinality(hll_add_agg(hll_hash_bigint(id), 14)) FROM big" \
    "SELECT count(id) FROM big"
row "union-aggregate: 10,000 sparse sketches (per sketch)" 10000 \
    "SELECT counter.hll_cardinality(counter.hll_union_agg(s)) FROM sk_ours" \
    "SELECT hll_cardinality(hll_union_agg(s)) FROM sk_pghll"
row "union-aggregate: 100 dense sketches (per sketch)" 100 \
    "SELECT counter.hll_cardinality(counter.hll_union_agg(s)) FROM dk_ours" \
    "SELECT hll_cardinality(hll_union_agg(s)) FROM dk_pghll"
row "cardinality of 10,000 sparse sketches (per sketch)" 10000 \
    "SELECT sum(counter.hll_cardinality(s)) FROM sk_ours" \
    "SELECT sum(hll_cardinality(s)) FROM sk_pghll"
row "cardinality of 100 dense sketches (per sketch)" 100 \
    "SELECT sum(counter.hll_cardinality(s)) FROM dk_ours" \
    "SELECT sum(hll_cardinality(s)) FROM dk_pghll"
