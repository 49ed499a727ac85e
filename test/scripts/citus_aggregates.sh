#!/usr/bin/env bash
# Issue 21 items 2 and 3, through a real Citus cluster (coordinator + 2
# workers, test/citus.sh): every counter_ext aggregate is pushed down with
# citus.coordinator_aggregation_strategy = 'disabled' (Citus refuses any
# aggregate it would have to pull to the coordinator) for GROUP BY the
# distribution column, another column and no GROUP BY, and its output is
# byte-for-byte the output of the same query on the same data on one node.
# hll_add_agg / hll_union_agg go through Citus's special case for
# postgresql-hll's names, the others through its generic path
# (worker_partial_agg / coord_combine_agg): if either stops working, the
# queries fail here. Then PN-counter upserts and a multi-shard UPDATE with the
# IMMUTABLE pncounter_increment_at / _decrement_at give the single node's
# states.
# citus: smoke
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
source test/citus.sh
ce_citus_script_setup

trap 'ce_cluster_stop_all' EXIT
ce_citus_cluster_start
ce_cluster_start single "counter_ext.enabled = off"

work=$(mktemp -d)
trap 'ce_cluster_stop_all; rm -rf "$work"' EXIT
coord() { ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U "$(ce_owner_name)" -d postgres "$@"; }
single() { ce_psql -h 127.0.0.1 -p "$CE_single_PORT" -U "$(ce_owner_name)" -d postgres "$@"; }
fail() { echo "FAIL: $*"; exit 1; }

# The same rows on both: 6000 events, 32 shards, NULLs in every column.
schema="
CREATE TABLE ev (
    id bigint, k integer, g integer, v integer, si smallint, b bigint, s text, u uuid,
    sk counter.hll, pn counter.pncounter);"
rows="
INSERT INTO ev
SELECT i, i % 97, i % 13,
       CASE WHEN i % 41 = 0 THEN NULL ELSE (i * 7919) % 5003 END,
       (i % 300)::smallint,
       CASE WHEN i % 37 = 0 THEN NULL ELSE (i::bigint * 1000003) % 40009 END,
       CASE WHEN i % 50 = 0 THEN NULL ELSE md5((i % 3001)::text) END,
       md5((i % 2500)::text)::uuid,
       CASE WHEN i % 29 = 0 THEN NULL ELSE counter.hll_add(counter.hll_empty(12), i % 700) END,
       CASE WHEN i % 31 = 0 THEN NULL
            ELSE counter.pncounter_increment_at(NULL, 'n' || (i % 5), i % 9 + 1) END
FROM generate_series(1, 6000) i;"
single -c "CREATE EXTENSION counter_ext;" -c "$schema" -c "$rows"
coord -c "$schema" -c "SELECT create_distributed_table('ev', 'k', shard_count := 32);" -c "$rows" >/dev/null
[ "$(coord -tA -c "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'ev'::regclass")" = 32 ] ||
    fail "ev is not in 32 shards"

aggregates=(
    "counter.hll_add_agg(v)"
    "counter.hll_add_agg(v, 10)"
    "counter.hll_add_agg(s)"
    "counter.hll_add_agg(u, 12)"
    "counter.hll_add_agg(b)"
    "counter.hll_union_agg(sk)"
    "counter.hll_count_distinct(si)"
    "counter.hll_count_distinct(v)"
    "counter.hll_count_distinct(b)"
    "counter.hll_count_distinct(s)"
    "counter.hll_count_distinct(u)"
    "counter.pncounter_merge_agg(pn)"
)
queries=()
for a in "${aggregates[@]}"; do
    queries+=("SELECT k, $a FROM ev GROUP BY k ORDER BY k"
        "SELECT g, $a FROM ev GROUP BY g ORDER BY g"
        "SELECT $a FROM ev"
        "SELECT $a FROM ev WHERE id < 0"
        "SELECT g, $a FROM ev WHERE id % 3 = 0 GROUP BY g HAVING count(*) > 0 ORDER BY g")
done
{
    echo "SET citus.coordinator_aggregation_strategy = 'disabled';"
    for q in "${queries[@]}"; do echo "\\echo $q"; echo "$q;"; done
} >"$work/queries.sql"
single -f "$work/queries.sql" >"$work/single.out" 2>&1 || { tail "$work/single.out"; fail "single node"; }
coord -f "$work/queries.sql" >"$work/citus.out" 2>&1 || { tail "$work/citus.out"; fail "citus refused a query"; }
if ! cmp -s "$work/single.out" "$work/citus.out"; then
    diff "$work/single.out" "$work/citus.out" | head -40
    fail "Citus results differ from one node"
fi
n=$(grep -c '^SELECT' "$work/citus.out")
[ "$n" -eq "${#queries[@]}" ] || fail "expected ${#queries[@]} queries, saw $n"
# Not trivial: the sketches and states are there.
[ "$(single -tA -c "SELECT counter.hll_count_distinct(v) > 4000 AND counter.pncounter_merge_agg(pn) IS NOT NULL FROM ev")" = t ] ||
    fail "the data is not what the test expects"
echo "ok: ${#queries[@]} aggregate queries byte-identical to one node, coordinator aggregation disabled"

# Where the work runs: the generic path ships partial states from the
# workers (as text, or in binary: the types' send / receive); postgresql-hll's names give hll_add_agg on the workers and
# hll_union_agg on the coordinator.
explain() { coord -tA -c "SET citus.coordinator_aggregation_strategy = 'disabled'" -c "EXPLAIN (VERBOSE, COSTS OFF) $1"; }
for a in "counter.hll_count_distinct(v)" "counter.hll_count_distinct(s)" "counter.pncounter_merge_agg(pn)"; do
    explain "SELECT g, $a FROM ev GROUP BY g" >"$work/plan.txt"
    # Citus 14 ships the states in binary (worker_binary_partial_agg).
    grep -Eq "worker_(binary_)?partial_agg" "$work/plan.txt" && grep -Eq "coord_(binary_)?combine_agg" "$work/plan.txt" ||
        { cat "$work/plan.txt"; fail "$a is not pushed down through worker_partial_agg / coord_combine_agg"; }
done
explain "SELECT g, counter.hll_add_agg(v) FROM ev GROUP BY g" >"$work/plan.txt"
grep -q "hll_union_agg" "$work/plan.txt" && grep -q "hll_add_agg" "$work/plan.txt" ||
    { cat "$work/plan.txt"; fail "hll_add_agg is not pushed down by name"; }
echo "ok: partial aggregates on the shards, combined on the coordinator"

# ---- item 3: upserts and a multi-shard UPDATE with the IMMUTABLE steps
pc_schema="CREATE TABLE pc (k integer PRIMARY KEY, c counter.pncounter);"
single -c "$pc_schema"
coord -c "$pc_schema" -c "SELECT create_distributed_table('pc', 'k', shard_count := 32);" >/dev/null
{
    for i in $(seq 1 900); do
        k=$(((i * 7) % 150)) node="site_$((i % 3))" amount=$((i % 5 + 1))
        if [ $((i % 4)) -eq 0 ]; then
            echo "INSERT INTO pc VALUES ($k, counter.pncounter_decrement_at(NULL, '$node', $amount))" \
                "ON CONFLICT (k) DO UPDATE SET c = counter.pncounter_decrement_at(pc.c, '$node', $amount);"
        else
            echo "INSERT INTO pc VALUES ($k, counter.pncounter_increment_at(NULL, '$node', $amount))" \
                "ON CONFLICT (k) DO UPDATE SET c = counter.pncounter_increment_at(pc.c, '$node', $amount);"
        fi
    done
    echo "UPDATE pc SET c = counter.pncounter_increment_at(c, 'site_9', k % 4 + 1) WHERE k % 3 = 0;"
    echo "UPDATE pc SET c = counter.pncounter_decrement_at(c, 'site_' || (k % 2)::text, 2) WHERE k % 5 = 1;"
    echo "INSERT INTO pc SELECT k, counter.pncounter_increment_at(NULL, 'bulk', 1) FROM generate_series(0, 199) k" \
        "ON CONFLICT (k) DO UPDATE SET c = counter.pncounter_increment_at(pc.c, 'bulk', 10);"
} >"$work/upserts.sql"
single -f "$work/upserts.sql" >/dev/null
coord -f "$work/upserts.sql" >/dev/null || fail "an upsert or UPDATE with the IMMUTABLE steps failed on Citus"
state="SELECT k, c, counter.pncounter_value(c) FROM pc ORDER BY k"
single -tA -c "$state" >"$work/pc.single"
coord -tA -c "$state" >"$work/pc.citus"
cmp -s "$work/pc.single" "$work/pc.citus" || { diff "$work/pc.single" "$work/pc.citus" | head; fail "PN-counter states differ"; }
[ "$(wc -l <"$work/pc.citus")" -eq 200 ] || fail "expected 200 keys"
# The value is the arithmetic of the steps (nothing lost, nothing twice):
# 900 upserts, then the UPDATEs, then +1 for new keys or +10 for old ones.
expected=$(single -tA -c "
    SELECT sum(CASE WHEN i % 4 = 0 THEN -(i % 5 + 1) ELSE i % 5 + 1 END)
         + (SELECT sum(k % 4 + 1) FROM (SELECT DISTINCT (i * 7) % 150 AS k FROM generate_series(1, 900) i) d WHERE k % 3 = 0)
         - (SELECT 2 * count(*) FROM (SELECT DISTINCT (i * 7) % 150 AS k FROM generate_series(1, 900) i) d WHERE k % 5 = 1)
         + 10 * 150 + 50
    FROM generate_series(1, 900) i")
total=$(coord -tA -c "SELECT sum(counter.pncounter_value(c)) FROM pc")
[ "$total" = "$expected" ] || fail "total value $total, expected $expected"
echo "ok: 900 upserts, 2 multi-shard UPDATEs and a bulk upsert through Citus equal one node (total $total)"

ce_scan_log "$CE_citus_coord_LOG" && ce_scan_log "$CE_citus_w1_LOG" && ce_scan_log "$CE_citus_w2_LOG" &&
    ce_scan_log "$CE_single_LOG"
