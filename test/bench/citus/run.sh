#!/usr/bin/env bash
# Issue 21 item 9: the same workloads on one node and on a Citus cluster
# (coordinator + 2 workers on this machine, test/citus.sh), reported as
# ratios. On demand only (not part of make test). doc/bench/citus.md holds
# the figures and the projection to 32 workers.
#
#   (a) reconciliation of KEYS keys of an application-mode tracked counter:
#       the job's run (CALL counter.run_steps('reconcile', ...), one transaction per batch,
#       the first full run: every key written), then counter.reconcile with
#       all_keys on a right state (every key read, none written); keyed by
#       the distribution column (on Citus its state is beside the rows,
#       1.8), then by a copy of it (its state is the coordinator's);
#   (b) counter.hll_add_agg GROUP BY a column that is not the distribution
#       column over ROWS rows, with citus.coordinator_aggregation_strategy =
#       'disabled' (Citus refuses any aggregate it cannot push down);
#   (c) refresh of one day of an hourly rollup: on one node a deferred-mode
#       rollup (CALL counter.rollup_refresh); rollups on a distributed table
#       are refused today (doc/citus.md), so on both the hand-written refresh
#       a Citus user runs instead (INSERT ... SELECT ... GROUP BY ... ON
#       CONFLICT into a table colocated with the source: pushed down);
#   (d) ingest: a plain INSERT, the INSERT with counter.add of an
#       application-mode counter in the same transaction (keyed by the
#       distribution column: on Citus its state is beside the rows, 1.8; and
#       keyed by a copy of it: its state is the coordinator's), the same with
#       a buffered counter, and the INSERT with a trigger-mode counter (on
#       Citus keyed by the distribution column: it counts on the shards);
#       CE_BENCH_ROUNDS rounds, interleaved; then the plain INSERT and the
#       INSERT with counter.add (state beside the rows) through worker 1;
#   (e) reconciliation of KEYS keys of a trigger-mode counter (2 x KEYS
#       rows): counter.reconcile with all_keys, first folding every key's
#       deltas, then on a right state;
#   (f) refresh of one day of a deferred rollup grouped by a column that is
#       not the distribution column (GROUPS groups, a distinct sketch):
#       CALL counter.rollup_refresh on both (1.8);
#   (g) ingest into a table with an hourly rollup by the distribution
#       column: none, deferred, trigger mode (1.8 on Citus);
#   (h) reads of one key of a trigger-mode counter: counter.value beside
#       count(*), on the coordinator and on worker 1;
#   (i) a trigger-mode counter keyed by another column than the
#       distribution column (1.8): ingest beside the plain INSERT,
#       reconciliation of KEYS keys, reads beside count(*);
#   (j) a buffered trigger-mode counter keyed by the distribution column
#       (1.8): single-row INSERTs on one hot key and on KEYS keys, beside
#       the plain INSERT and the unbuffered trigger-mode counter, with a
#       flush every second (the flush job's), ROUNDS interleaved rounds;
#   (k) the same keyed by another column than the distribution column
#       (1.8): one hot key, then KEYS keys, rows spread over every shard.
# Every measurement checks its result (values equal count(*), sketches
# byte-identical to one node, rollup rows equal GROUP BY). The clusters run
# with PostgreSQL's durable defaults (fsync, synchronous_commit,
# full_page_writes on). The load average is printed before each timed part.
#
# Citus: installed for the server, or built once from a tarball:
#   CITUS_SRC=/work/shared/vendor/citus-13.2.2.tar.gz \
#   CITUS_PATCH=/work/shared/vendor/citus-13.2.2-pg15.20.patch bash test/bench/citus/run.sh
# Sizes (defaults = the issue's): CE_BENCH_KEYS=100000 CE_BENCH_ROWS=10000000
# CE_BENCH_ROLLUP_ROWS (default ROWS/5) CE_BENCH_INGEST=20000 transactions
# per ingest run, CE_BENCH_CLIENTS=4, CE_BENCH_SHARDS=32, CE_BENCH_GROUPS=100;
# CE_BENCH_PARTS=abcdefghijk (a subset runs only those workloads), CE_BENCH_BATCH=1000 (the
# batch_size of the counters of (a)), CE_BENCH_ROUNDS=1 (interleaved rounds of (d)).
set -euo pipefail
cd "$(dirname "$0")/../../.."
source test/lib.sh
source test/citus.sh

KEYS=${CE_BENCH_KEYS:-100000}
ROWS=${CE_BENCH_ROWS:-10000000}
ROLLUP_ROWS=${CE_BENCH_ROLLUP_ROWS:-$((ROWS / 5))}
INGEST=${CE_BENCH_INGEST:-20000}
CLIENTS=${CE_BENCH_CLIENTS:-4}
SHARDS=${CE_BENCH_SHARDS:-32}
NGROUPS=${CE_BENCH_GROUPS:-100}
PARTS=${CE_BENCH_PARTS:-abcdefghijk} # which of the workloads (a)-(k) to run
BATCH=${CE_BENCH_BATCH:-1000}      # (a): the counters' batch_size (track's default 1000)
ROUNDS=${CE_BENCH_ROUNDS:-1}       # (d): rounds of the ingest runs, interleaved
LINKS=10000
DAY="2026-07-01 00:00+00"
NEXT="2026-07-02 00:00+00"

ce_citus_script_setup
work=$(mktemp -d)
trap 'ce_cluster_stop_all; rm -rf "$work"' EXIT INT TERM
durable=("fsync = on" "synchronous_commit = on" "full_page_writes = on" "shared_buffers = '256MB'"
    "max_wal_size = '4GB'" "work_mem = '64MB'" "maintenance_work_mem = '256MB'")
# recover_2pc_interval = -1: pg_dist_transaction keeps a row per two-phase
# commit, counted in (d); counter_ext.enabled = off on both, as the parts
# run the jobs themselves (a scheduled run beside a timed one would count
# in its time, as it did in part (i) before 2026-12-06)
ce_citus_cluster_start "${durable[@]}" "citus.recover_2pc_interval = -1" "counter_ext.enabled = off"
ce_cluster_start single "counter_ext.enabled = off" "${durable[@]}"

# q NODE psql-args...: NODE is single or citus_coord
q() {
    local p="CE_$1_PORT"
    shift
    ce_psql -h 127.0.0.1 -p "${!p}" -U "$(ce_owner_name)" -d postgres "$@"
}
fail() { echo "FAIL: $*"; exit 1; }
q single -q -c "CREATE EXTENSION counter_ext"
load() { cut -d' ' -f1-3 /proc/loadavg; }
# timed NODE SQL...: runs the statements in one session, the last one timed
# (psql \timing: server time plus the transfer to psql); its rows go to
# $work/out, its milliseconds to stdout.
timed() {
    local node=$1 last=${*: -1} args=() s
    for s in "${@:2:$#-2}"; do args+=(-c "$s"); done
    q "$node" -tA "${args[@]}" -c '\timing on' -c "$last" >"$work/raw" || { cat "$work/raw"; fail "$node: $last"; }
    grep -v '^Time: ' "$work/raw" | grep -v '^Timing is on' >"$work/out" || true
    grep '^Time: ' "$work/raw" | tail -1 | awk '{printf "%.0f", $2}'
}
# keys whose value differs from count(*) (read into a temporary table first:
# doc/citus.md)
mismatches() {
    q "$1" -tA -c "CREATE TEMP TABLE truth AS SELECT $3 AS k, count(*) AS n FROM $2 GROUP BY 1" \
        -c "SELECT count(*) FROM truth t FULL JOIN (SELECT key AS k, value FROM counter.tracked_values
                WHERE counter = '$4') v USING (k) WHERE coalesce(t.n, 0) <> coalesce(v.value, 0)"
}
declare -A ms
results=()
# row WORKLOAD SINGLE_MS CITUS_MS LOAD NOTE
row() {
    local ratio=n/a
    [ "$2" != - ] && [ "$3" != - ] && ratio=$(awk -v a="$2" -v b="$3" 'BEGIN { printf "%.2f", b / (a > 0 ? a : 1) }')
    results+=("| $1 | $2 | $3 | $ratio | $4 | $5 |")
    echo "  $1: one node $2 ms, Citus $3 ms, ratio $ratio (load $4)"
}
# dist TABLE COLUMN [COLOCATE_WITH]: distributes TABLE on the cluster by COLUMN
dist() {
    local how="shard_count := $SHARDS"
    [ -n "${3:-}" ] && how="colocate_with := '$3'"
    q citus_coord -q -c "SELECT create_distributed_table('$1', '$2', $how)" >/dev/null
}
# table NAME COLUMNS DIST_COLUMN [COLOCATE_WITH]: the same empty table on one
# node and on the cluster, distributed there
table() {
    q single -c "CREATE TABLE $1 ($2)"
    q citus_coord -c "CREATE TABLE $1 ($2)"
    dist "$1" "$3" "${4:-}"
}
# run_part X: runs part_X when CE_BENCH_PARTS names it
run_part() {
    [[ $PARTS == *$1* ]] || return 0
    echo "[${SECONDS}s]"
    "part_$1"
}
# per_shard TABLE SQL: sum over the shards of a number SQL computes on one
# shard (%s is the shard's name): what the workers send back
per_shard() {
    q citus_coord -tA -c "SELECT sum(result::numeric) FROM run_command_on_shards('$1', \$q\$$2\$q\$)"
}

echo "machine: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), $(free -g | awk '/Mem:/ {print $2}') GB RAM"
echo "Citus $(q citus_coord -tA -c "SELECT extversion FROM pg_extension WHERE extname = 'citus'"), $(q single -tA -c 'SHOW server_version'), $SHARDS shards, coordinator + 2 workers on this machine"
echo "sizes: keys $KEYS, rows $ROWS, rollup rows $ROLLUP_ROWS, ingest $INGEST transactions x $CLIENTS clients"

# ingest NODE SCRIPT: pgbench runs $work/SCRIPT.sql, INGEST transactions over
# CLIENTS clients, on NODE (none may fail); the milliseconds it took
per=$((INGEST / CLIENTS))
ingest() {
    local n=$1 t=$2 p="CE_$1_PORT" tps
    "$CE_PGBIN/pgbench" -n -h 127.0.0.1 -p "${!p}" -U "$(ce_owner_name)" -c "$CLIENTS" -j "$CLIENTS" -t "$per" \
        -f "$work/$t.sql" postgres >"$work/pgbench.out" 2>&1 || { cat "$work/pgbench.out"; fail "$n: pgbench $t"; }
    if grep -q "number of failed transactions: [1-9]" "$work/pgbench.out"; then
        cat "$work/pgbench.out"
        fail "$n: $t: failed transactions"
    fi
    tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$work/pgbench.out" | tail -1)
    awk -v t="$tps" -v n="$((per * CLIENTS))" 'BEGIN { printf "%.0f", n * 1000 / t }'
}

# reconciled PART COUNTER KEY LABEL: counter.reconcile of COUNTER (keyed by
# column KEY of the table of its name) with all_keys, twice (first folding
# every key's deltas, then on a right state), on one node and on the
# cluster: KEYS keys checked, none corrected, every value = count(*) after
# each
reconciled() {
    local part=$1 c=$2 k=$3 label=$4 what n l
    for what in "first run: every key's deltas folded ($KEYS keys written)" "state right ($KEYS keys read, 0 written)"; do
        for n in single citus_coord; do
            l=$(load)
            ms[$n]=$(timed "$n" "SET client_min_messages = warning" \
                "SELECT keys_checked || ' ' || keys_corrected FROM counter.reconcile('$c', '$NEXT', all_keys => true)")
            [ "$(cat "$work/out")" = "$KEYS 0" ] || fail "$n: ($part) $what: $(cat "$work/out"), expected $KEYS 0"
            [ "$(mismatches "$n" "$c" "$k::text" "$c")" = 0 ] || fail "$n: $c differs from count(*)"
            ms[$n.load]=$l
        done
        row "($part) counter.reconcile all_keys, $label, $what" "${ms[single]}" "${ms[citus_coord]}" \
            "${ms[single.load]} / ${ms[citus_coord.load]}" "$KEYS checked, 0 corrected; every value = count(*)"
    done
}

# ---------------------------------------------------------------- (a) reconcile
part_a() {
    echo "== (a) reconciliation of $KEYS keys"
    # k2 = k, not the distribution column: on Citus the state of a counter
    # keyed by k is beside the rows (1.8), of one keyed by k2 the coordinator's
    table rk "k bigint NOT NULL, k2 bigint NOT NULL, at timestamptz NOT NULL" k
    for n in single citus_coord; do
        q "$n" -c "INSERT INTO rk SELECT 1 + g % $KEYS, 1 + g % $KEYS, '$DAY'::timestamptz + (g % 1440) * interval '1 minute'
                   FROM generate_series(1, $((KEYS * 10))) g" \
            -c "CREATE INDEX ON rk (k, at)" -c "CREATE INDEX ON rk (k2, at)" -c "ANALYZE rk" \
            -c "SET client_min_messages = warning" \
            -c "SELECT counter.track(c || '_' || f, 'rk', c, 'at', mode => 'application', batch_size => $BATCH)
                FROM unnest('{k,k2}'::text[]) c, unnest('{job,all}'::text[]) f" >/dev/null
    done
    # time_both WORKLOAD NOTE EXPECTED COUNTER SQL...: SQL timed on one node
    # and on the cluster, its output checked, and every value of COUNTER
    # checked against count(*)
    time_both() {
        local what=$1 note=$2 want=$3 counter=$4 n l
        shift 4
        for n in single citus_coord; do
            l=$(load)
            ms[$n]=$(timed "$n" "$@")
            # (the job's run prints its result: {"rows": N, ...})
            [ "$(cat "$work/out")" = "$want" ] || grep -q "\"rows\": $want," "$work/out" ||
                fail "$n: $what: $(cat "$work/out"), expected $want"
            [ "$(mismatches "$n" rk "${counter%_*}::text" "$counter")" = 0 ] || fail "$n: $counter differs from count(*)"
            ms[$n.load]=$l
        done
        row "$what" "${ms[single]}" "${ms[citus_coord]}" "${ms[single.load]} / ${ms[citus_coord.load]}" "$note"
    }
    local c where
    for c in k k2; do
        where="state beside the rows"
        [ "$c" = k2 ] && where="state on the coordinator"
        time_both "(a) job run, first full run ($KEYS keys written, 1 transaction per batch), keyed by $c: $where" \
            "every value = count(*)" "$KEYS" "${c}_job" "SET client_min_messages = warning" \
            "CALL counter.run_steps('reconcile', '${c}_job')"
        for n in single citus_coord; do   # ${c}_all's first run: every key written
            q "$n" -q -c "SET client_min_messages = warning" \
                -c "SELECT counter.reconcile('${c}_all', '$NEXT', all_keys => true)" >/dev/null
        done
        time_both "(a) counter.reconcile all_keys, state right ($KEYS keys read, 0 written), keyed by $c: $where" \
            "$KEYS checked, 0 corrected" "$KEYS 0" "${c}_all" \
            "SELECT keys_checked || ' ' || keys_corrected FROM counter.reconcile('${c}_all', '$NEXT', all_keys => true)"
    done
    # What the workers send per batch of a counter whose state is on the
    # coordinator (batch_size keys per shard, at most
    # 100,000 in all: counter_internal.tracked_batch_keys): the keys query
    # takes up to that many keys after the last one from every shard (LIMIT
    # pushed down); the count query returns (key, count) for the batch's keys
    # of each shard.
    local eff=$((BATCH * SHARDS > 100000 ? (BATCH > 100000 ? BATCH : 100000) : BATCH * SHARDS))
    b_keys=$(per_shard rk "SELECT coalesce(sum(pg_column_size(k)), 0) FROM (SELECT DISTINCT k FROM %s WHERE at < '$NEXT' ORDER BY 1 LIMIT $eff) x")
    b_truth=$(per_shard rk "SELECT coalesce(sum(pg_column_size(k) + pg_column_size(n)), 0) FROM (SELECT k, count(*) AS n FROM %s WHERE k <= $eff AND at < '$NEXT' GROUP BY 1) x")
    echo "  state on the coordinator, per batch of $eff keys, from the workers (all_keys run): keys query $b_keys bytes of keys (up to $eff per shard), count query $b_truth bytes (key + count)"
    # ... and to them: the count query's text with the batch's keys, to
    # every shard a key hashes to (Citus prunes shards, it does not split the array)
    arr=$(q citus_coord -tA -c "SELECT array_agg(g)::text FROM generate_series(1, $eff) g")
    # (on stdin: the array is past the limit of one command-line argument)
    q citus_coord -tA >"$work/plan" <<SQL
EXPLAIN (VERBOSE, COSTS OFF) SELECT k, count(*) FROM rk WHERE k = ANY ('$arr'::bigint[]) AND at < '$NEXT' GROUP BY 1
SQL
    tasks=$(sed -n 's/.*Task Count: \([0-9]*\).*/\1/p' "$work/plan" | head -1)
    qlen=$(grep -m1 'Query: ' "$work/plan" | sed 's/^ *Query: //' | wc -c)
    echo "  to the workers per batch: the count query to $tasks shards, $qlen bytes each ($((tasks * qlen)) bytes)"
}
run_part a

# ---------------------------------------------------------------- (b) hll_add_agg
part_b() {
    echo "== (b) counter.hll_add_agg GROUP BY g over $ROWS rows"
    table hv "k bigint NOT NULL, g integer NOT NULL, v bigint NOT NULL" k
    for n in single citus_coord; do
        q "$n" -c "INSERT INTO hv SELECT g, g % $NGROUPS, (g::bigint * 7919) % ($ROWS / 4 + 1) FROM generate_series(1, $ROWS) g" \
            -c "VACUUM ANALYZE hv" >/dev/null
    done
    agg="SELECT g, counter.hll_add_agg(v) FROM hv GROUP BY g ORDER BY g"
    for n in single citus_coord; do
        q "$n" -tA -c "$agg" >/dev/null   # once to warm the cache
        l=$(load)
        ms[$n]=$(timed "$n" "SET citus.coordinator_aggregation_strategy = 'disabled'" "$agg")
        cp "$work/out" "$work/hll.$n"
        ms[$n.load]=$l
    done
    [ "$(wc -l <"$work/hll.single")" -eq "$NGROUPS" ] || fail "expected $NGROUPS groups"
    cmp -s "$work/hll.single" "$work/hll.citus_coord" || fail "the sketches on Citus differ from one node"
    row "(b) hll_add_agg GROUP BY g ($NGROUPS groups), $ROWS rows" "${ms[single]}" "${ms[citus_coord]}" \
        "${ms[single.load]} / ${ms[citus_coord.load]}" "sketches byte-identical"
    h_bytes=$(per_shard hv "SELECT coalesce(sum(pg_column_size(s)), 0) FROM (SELECT g, counter.hll_add_agg(v) AS s FROM %s GROUP BY g) x")
    h_rows=$(per_shard hv "SELECT count(DISTINCT g) FROM %s")
    h_final=$(q single -tA -c "SELECT sum(pg_column_size(s)) FROM ($agg) x(g, s)")
    h_dense=$(q single -tA -c "SELECT pg_column_size(counter.hll_add_agg(g)) FROM generate_series(1, 1000000) g")
    echo "  a full (dense) sketch at the default precision: $h_dense bytes"
    echo "  from the workers: $h_rows partial sketches, $h_bytes bytes (binary size, as Citus fetches them); result to the client: $h_final bytes"
}
run_part b

# ---------------------------------------------------------------- (c) rollup refresh
part_c() {
    echo "== (c) refresh of one day of an hourly rollup, $ROLLUP_ROWS rows"
    hand="INSERT INTO rv_hand AS h (link_id, hour, count)
        SELECT link_id, date_bin('1 hour', at, '2000-01-01 00:00+00'), count(*) FROM rv
        WHERE at >= '$DAY' AND at < '$NEXT' GROUP BY 1, 2
        ON CONFLICT (link_id, hour) DO UPDATE SET count = excluded.count WHERE h.count IS DISTINCT FROM excluded.count"
    table rv "link_id bigint NOT NULL, at timestamptz NOT NULL" link_id
    table rv_hand "link_id bigint NOT NULL, hour timestamptz NOT NULL, count bigint NOT NULL, PRIMARY KEY (link_id, hour)" \
        link_id rv
    for n in single citus_coord; do
        q "$n" -c "INSERT INTO rv SELECT 1 + (g::bigint * 7919) % $LINKS, '$DAY'::timestamptz + (g % 86400) * interval '1 second'
                   FROM generate_series(1, $ROLLUP_ROWS) g" -c "CREATE INDEX ON rv (at)" -c "VACUUM ANALYZE rv" >/dev/null
    done
    # rows of a rollup-shaped table that differ from GROUP BY
    rv_diff() {
        q "$1" -tA -c "SELECT count(*) FROM (SELECT link_id, date_bin('1 hour', at, '2000-01-01 00:00+00') AS hour,
            count(*) AS n FROM rv GROUP BY 1, 2) t FULL JOIN $2 r USING (link_id, hour) WHERE t.n IS DISTINCT FROM r.count"
    }
    q single -q -c "SET client_min_messages = warning" \
        -c "SELECT counter.rollup_create('rv_hourly', 'rv', 'at', '{link_id}', mode => 'deferred')" >/dev/null
    for what in empty unchanged; do
        [ $what = empty ] && q single -c "TRUNCATE rv_hourly"
        l=$(load)
        one=$(timed single "SET client_min_messages = warning" "CALL counter.rollup_refresh('rv_hourly', '$DAY', '$NEXT')")
        [ "$(rv_diff single rv_hourly)" = 0 ] || fail "rollup rv_hourly differs from GROUP BY ($what)"
        for n in single citus_coord; do
            [ $what = empty ] && q "$n" -c "TRUNCATE rv_hand"
            ms[$n.load]=$(load)
            ms[$n]=$(timed "$n" "$hand")
            [ "$(rv_diff "$n" rv_hand)" = 0 ] || fail "$n: rv_hand differs from GROUP BY ($what)"
        done
        [ "$(q single -tA -c "SELECT md5(string_agg(format('%s %s %s', link_id, hour, count), ',' ORDER BY link_id, hour)) FROM rv_hourly")" = \
            "$(q citus_coord -tA -c "SELECT md5(string_agg(format('%s %s %s', link_id, hour, count), ',' ORDER BY link_id, hour)) FROM rv_hand")" ] ||
            fail "the hand-written rollup on Citus differs from the rollup on one node"
        q citus_coord -tA -c "EXPLAIN (COSTS OFF) $hand" >"$work/plan"
        if ! grep -q "Task Count: $SHARDS" "$work/plan" || grep -q "INSERT/SELECT method" "$work/plan"; then
            cat "$work/plan"
            fail "the hand-written refresh is not pushed down to the shards"
        fi
        row "(c) counter.rollup_refresh of a day (one node) vs hand-written refresh (Citus), rollup $what" "$one" "${ms[citus_coord]}" \
            "$l / ${ms[citus_coord.load]}" "rows = GROUP BY, equal on both"
        row "(c) hand-written refresh of a day on both, rollup $what" "${ms[single]}" "${ms[citus_coord]}" \
            "${ms[single.load]} / ${ms[citus_coord.load]}" "rows = GROUP BY, equal on both"
    done
    r_rows=$(q single -tA -c "SELECT count(*) FROM rv_hand")
    r_bytes=$(per_shard rv "SELECT coalesce(sum(pg_column_size(link_id) + pg_column_size(h) + pg_column_size(n)), 0)
        FROM (SELECT link_id, date_bin('1 hour', at, '2000-01-01 00:00+00') AS h, count(*) AS n FROM %s GROUP BY 1, 2) x")
    echo "  rollup rows of the day: $r_rows ($r_bytes bytes), computed and written on the shards: only the command and the row count cross the network"
}
run_part c

# ---------------------------------------------------------------- (d) ingest
part_d() {
    echo "== (d) ingest: $INGEST single-row transactions, $CLIENTS clients, $ROUNDS round(s)"
    for t in ing_plain ing_app ing_buf ing_trig; do
        table $t "k bigint NOT NULL, at timestamptz NOT NULL DEFAULT now()" k
    done
    # k2 = k, not the distribution column: the add's state on the coordinator
    # (ing_app's, keyed by k, is beside the rows on Citus: 1.8)
    table ing_appc "k bigint NOT NULL, k2 bigint NOT NULL, at timestamptz NOT NULL DEFAULT now()" k
    # written through worker 1 (1.8), on the cluster only
    for t in ing_wplain ing_wapp; do
        table $t "k bigint NOT NULL, at timestamptz NOT NULL DEFAULT now()" k
    done
    q citus_coord -q -c "CREATE INDEX ON ing_wplain (at)" -c "CREATE INDEX ON ing_wapp (at)" -c "SET client_min_messages = warning" \
        -c "SELECT counter.track('ing_wapp', 'ing_wapp', 'k', 'at', mode => 'application')" >/dev/null
    for n in single citus_coord; do
        q "$n" -c "CREATE INDEX ON ing_plain (at)" -c "CREATE INDEX ON ing_app (at)" -c "CREATE INDEX ON ing_buf (at)" \
            -c "CREATE INDEX ON ing_trig (at)" -c "CREATE INDEX ON ing_appc (at)" >/dev/null
        q "$n" -q -c "SET client_min_messages = warning" \
            -c "SELECT counter.track('ing_app', 'ing_app', 'k', 'at', mode => 'application')" \
            -c "SELECT counter.track('ing_appc', 'ing_appc', 'k2', 'at', mode => 'application')" \
            -c "SELECT counter.track('ing_buf', 'ing_buf', 'k', 'at', mode => 'application', buffered => true)" >/dev/null
    done
    for n in single citus_coord; do   # (1.7: on Citus keyed by the distribution column, it counts on the shards)
        q "$n" -q -c "SET client_min_messages = warning" -c "SELECT counter.track('ing_trig', 'ing_trig', 'k', 'at')" >/dev/null
    done
    printf '%s\n' "\\set k random(1, $KEYS)" "INSERT INTO ing_plain (k) VALUES (:k);" >"$work/ing_plain.sql"
    printf '%s\n' "\\set k random(1, $KEYS)" "INSERT INTO ing_trig (k) VALUES (:k);" >"$work/ing_trig.sql"
    for c in app buf; do
        printf '%s\n' "\\set k random(1, $KEYS)" "BEGIN;" "INSERT INTO ing_$c (k) VALUES (:k);" \
            "SELECT counter.add('ing_$c', :k::bigint);" "COMMIT;" >"$work/ing_$c.sql"
    done
    printf '%s\n' "\\set k random(1, $KEYS)" "BEGIN;" "INSERT INTO ing_appc (k, k2) VALUES (:k, :k);" \
        "SELECT counter.add('ing_appc', :k::bigint);" "COMMIT;" >"$work/ing_appc.sql"
    printf '%s\n' "\\set k random(1, $KEYS)" "INSERT INTO ing_wplain (k) VALUES (:k);" >"$work/ing_wplain.sql"
    printf '%s\n' "\\set k random(1, $KEYS)" "BEGIN;" "INSERT INTO ing_wapp (k) VALUES (:k);" \
        "SELECT counter.add('ing_wapp', :k::bigint);" "COMMIT;" >"$work/ing_wapp.sql"
    local r key
    for r in $(seq 1 "$ROUNDS"); do
        for t in ing_plain ing_app ing_appc ing_buf ing_trig; do
            for n in single citus_coord; do
                ms[$n.load]=$(load)
                [ $n = citus_coord ] && p0=$(q $n -tA -c "SELECT count(*) FROM pg_dist_transaction")
                ms[$n]=$(ingest "$n" "$t")
                [ $n = citus_coord ] && twopc=$(($(q $n -tA -c "SELECT count(*) FROM pg_dist_transaction") - p0))
                [ "$(q "$n" -tA -c "SELECT count(*) FROM $t")" = $((r * per * CLIENTS)) ] || fail "$n: $t lost rows"
                if [ $t != ing_plain ]; then
                    [ $t = ing_buf ] && q "$n" -q -c "SELECT counter.flush('ing_buf')" >/dev/null
                    key=k
                    [ $t = ing_appc ] && key=k2
                    [ "$(mismatches "$n" $t $key::text $t)" = 0 ] || fail "$n: counter $t differs from count(*)"
                fi
            done
            case $t in
            ing_plain) what="plain INSERT (no counter)" check="count(*) = transactions" ;;
            ing_app) what="INSERT + counter.add, application mode, same transaction (Citus: state beside the rows)" check="every value = count(*)" ;;
            ing_appc) what="INSERT + counter.add, application mode, same transaction, keyed by a copy of the key (Citus: state on the coordinator)" check="every value = count(*)" ;;
            ing_buf) what="INSERT + counter.add, buffered application mode" check="every value = count(*) (after flush)" ;;
            ing_trig) what="INSERT, trigger-mode counter" check="every value = count(*)" ;;
            esac
            check="$check; two-phase commits on Citus: $twopc"
            row "(d) $what, $((per * CLIENTS)) transactions, round $r" "${ms[single]}" "${ms[citus_coord]}" \
                "${ms[single.load]} / ${ms[citus_coord.load]}" "$check"
        done
    done

    # Through worker 1 (1.8): the plain INSERT and the INSERT with counter.add
    # of a counter whose state is beside the rows, the clients connected to a
    # worker node (Citus routes each row from there; the worker knows the
    # counter from its inbox), interleaved, on the cluster only
    local l
    for r in $(seq 1 "$ROUNDS"); do
        for t in ing_wplain ing_wapp; do
            l=$(load)
            ms[w1]=$(ingest citus_w1 $t)
            [ "$(q citus_coord -tA -c "SELECT count(*) FROM $t")" = $((r * per * CLIENTS)) ] || fail "worker 1: $t lost rows"
            if [ $t = ing_wapp ]; then
                [ "$(mismatches citus_coord $t k::text $t)" = 0 ] || fail "worker 1: counter $t differs from count(*)"
                what="INSERT + counter.add, application mode, same transaction (state beside the rows)" check="every value = count(*)"
            else
                what="plain INSERT (no counter)" check="count(*) = transactions"
            fi
            echo "  (d) through worker 1: $what, $((per * CLIENTS)) transactions, round $r: ${ms[w1]} ms (load $l; $check)"
        done
    done

    # After the runs and their checks: what one transaction of each kind sends
    # to the workers (Citus logs each remote command)
    for t in ing_plain ing_app ing_appc ing_buf; do
        q citus_coord -c "SET citus.log_remote_commands = on" -c "SET client_min_messages = log" \
            -c "BEGIN" -f <(sed -e '/^\\set/d' -e '/^BEGIN;/d' -e '/^COMMIT;/d' -e 's/:k/1/g' "$work/$t.sql") -c "COMMIT" \
            >"$work/remote" 2>&1 || { cat "$work/remote"; fail "one transaction of $t"; }
        echo "  one $t transaction sends to the workers: $(sed -n 's/.*issuing \([A-Z]*\( TRANSACTION\| PREPARED\)\?\).*/\1/p' "$work/remote" | paste -sd, -)"
        if grep -q "issuing PREPARE TRANSACTION" "$work/remote"; then
            fail "$t: two-phase commit seen; doc/bench/citus.md says one phase"
        fi
    done
    # The control: a transaction writing on both workers is committed in two
    # phases, and pg_dist_transaction counts it (so the 0s above mean one phase)
    p0=$(q citus_coord -tA -c "SELECT count(*) FROM pg_dist_transaction")
    q citus_coord -c "SET citus.log_remote_commands = on" -c "SET client_min_messages = log" \
        -c "BEGIN" -c "INSERT INTO ing_plain (k) SELECT g FROM generate_series(1, 20) g" -c "COMMIT" >"$work/remote" 2>&1
    twopc=$(($(q citus_coord -tA -c "SELECT count(*) FROM pg_dist_transaction") - p0))
    if ! grep -q "issuing PREPARE TRANSACTION" "$work/remote" || [ "$twopc" -eq 0 ]; then
        cat "$work/remote"
        fail "the control (a write on both workers) shows no two-phase commit ($twopc)"
    fi
    echo "  control: an INSERT of 20 keys (both workers) in one transaction: two-phase commit, $twopc rows in pg_dist_transaction"
}
run_part d

# ---------------------------------------------------------------- (e) trigger-mode reconcile
# A trigger-mode counter on a table distributed by the counter's key (state
# colocated, doc/citus.md): 2 x KEYS rows in 20 INSERT ... SELECT, then
# counter.reconcile with all_keys twice: the first folds every key's deltas
# into its base (every key written), the second finds the state right
# (every key read, none written).
part_e() {
    echo "== (e) reconciliation of $KEYS keys of a trigger-mode counter"
    table rt "k bigint NOT NULL, at timestamptz NOT NULL" k
    local n i chunk=$((KEYS / 10)) l
    for n in single citus_coord; do
        q "$n" -q -c "CREATE INDEX ON rt (k, at)" -c "SET client_min_messages = warning" \
            -c "SELECT counter.track('rt', 'rt', 'k', 'at')" >/dev/null
        for i in $(seq 0 19); do
            q "$n" -q -c "INSERT INTO rt SELECT 1 + g % $KEYS, '$DAY'::timestamptz + (g % 1440) * interval '1 minute'
                          FROM generate_series($((i * chunk)), $((i * chunk + chunk - 1))) g" >/dev/null
        done
        q "$n" -q -c "ANALYZE rt" >/dev/null
    done
    reconciled e rt k "trigger mode"
}
run_part e

# ---------------------------------------------------------------- (f) rollup grouped by another column
# A deferred rollup grouped by a column that is not the distribution column
# (1.8; doc/citus.md, "Grouped by other columns"), with a distinct sketch:
# CALL counter.rollup_refresh of a day on both. On Citus the rollup table is
# the coordinator's and the refresh's GROUP BY runs on the shards.
part_f() {
    echo "== (f) refresh of one day of a rollup grouped by another column ($NGROUPS groups, distinct links), $ROLLUP_ROWS rows"
    table rg "link_id bigint NOT NULL, grp integer NOT NULL, at timestamptz NOT NULL" link_id
    local n what l
    for n in single citus_coord; do
        q "$n" -c "INSERT INTO rg SELECT 1 + (g::bigint * 7919) % $LINKS, g % $NGROUPS,
                   '$DAY'::timestamptz + (g % 86400) * interval '1 second' FROM generate_series(1, $ROLLUP_ROWS) g" \
            -c "CREATE INDEX ON rg (at)" -c "VACUUM ANALYZE rg" -c "SET client_min_messages = warning" \
            -c "SELECT counter.rollup_create('rg_hourly', 'rg', 'at', '{grp}', mode => 'deferred', distinct_on => '{link_id}')" \
            >/dev/null
    done
    sig() {
        q "$1" -tA -c "SELECT md5(string_agg(format('%s %s %s %s', grp, hour, count, distinct_link_id::bytea), ','
            ORDER BY grp, hour)) FROM rg_hourly"
    }
    for what in empty unchanged; do
        for n in single citus_coord; do
            [ $what = empty ] && q "$n" -q -c "TRUNCATE rg_hourly"
            ms[$n.load]=$(load)
            ms[$n]=$(timed "$n" "SET client_min_messages = warning" "CALL counter.rollup_refresh('rg_hourly', '$DAY', '$NEXT')")
            [ "$(q "$n" -tA -c "CREATE TEMP TABLE t AS SELECT grp, date_bin('1 hour', at, '2000-01-01 00:00+00') AS hour,
                    count(*) AS n, counter.hll_add_agg(link_id, 14)::bytea AS d FROM rg GROUP BY 1, 2" \
                -c "SELECT count(*) FROM t FULL JOIN rg_hourly r USING (grp, hour)
                    WHERE t.n IS DISTINCT FROM r.count OR t.d IS DISTINCT FROM r.distinct_link_id::bytea" | tail -1)" = 0 ] ||
                fail "$n: rg_hourly differs from GROUP BY ($what)"
        done
        [ "$(sig single)" = "$(sig citus_coord)" ] || fail "rg_hourly differs between one node and Citus ($what)"
        row "(f) counter.rollup_refresh of a day, grouped by another column, rollup $what" "${ms[single]}" \
            "${ms[citus_coord]}" "${ms[single.load]} / ${ms[citus_coord.load]}" "rows and sketch bytes = GROUP BY, equal on both"
    done
    n=$(per_shard rg "SELECT count(*) FROM (SELECT grp, date_bin('1 hour', at, '2000-01-01 00:00+00') FROM %s GROUP BY 1, 2) x")
    l=$(per_shard rg "SELECT coalesce(sum(pg_column_size(s)), 0) FROM (SELECT counter.hll_add_agg(link_id, 14) AS s
        FROM %s GROUP BY grp, date_bin('1 hour', at, '2000-01-01 00:00+00')) x")
    echo "  partial groups sent by the shards to the coordinator per refresh of the day: $n (one row per group, hour and shard: count and sketch; the sketches $l bytes), and as many (group, hour) rows for the delete, for $(q single -tA -c "SELECT count(*) FROM rg_hourly") rollup rows"
}
run_part f

# ---------------------------------------------------------------- (g) rollup ingest
# Ingest into a table with an hourly rollup by its distribution column: none,
# a deferred rollup (the shard trigger marks the hours; refreshed after),
# and a trigger-mode rollup (1.8 on Citus: the shard trigger adds the rows to
# the rollup's shard at the commit); and a trigger-mode rollup grouped by
# another column, kind (5 values; 1.8 on Citus: its table grouped by k too,
# read through a view; on one node 5 rows per hour that every writer
# updates). Single-row transactions, CLIENTS clients.
part_g() {
    echo "== (g) ingest with an hourly rollup: $INGEST single-row transactions, $CLIENTS clients, $KEYS keys"
    local t n what g
    for t in rg_none rg_def rg_trig rg_kind; do
        table $t "k bigint NOT NULL, kind int NOT NULL DEFAULT 0, at timestamptz NOT NULL DEFAULT now()" k
        printf '%s\n' "\\set k random(1, $KEYS)" "INSERT INTO $t (k, kind) VALUES (:k, :k % 5);" >"$work/$t.sql"
    done
    for n in single citus_coord; do
        q "$n" -q -c "SET client_min_messages = warning" \
            -c "SELECT counter.rollup_create('rg_def_h', 'rg_def', 'at', '{k}', mode => 'deferred')" \
            -c "SELECT counter.rollup_create('rg_trig_h', 'rg_trig', 'at', '{k}')" \
            -c "SELECT counter.rollup_create('rg_kind_h', 'rg_kind', 'at', '{kind}')" >/dev/null
    done
    for t in rg_none rg_def rg_trig rg_kind; do
        for n in single citus_coord; do
            ms[$n.load]=$(load)
            ms[$n]=$(ingest "$n" "$t")
            [ "$(q "$n" -tA -c "SELECT count(*) FROM $t")" = $((per * CLIENTS)) ] || fail "$n: $t lost rows"
            if [ $t != rg_none ]; then
                [ $t = rg_def ] && q "$n" -q -c "SELECT counter.rollup_refresh_dirty('rg_def_h')" >/dev/null
                g=k
                [ $t = rg_kind ] && g=kind
                [ "$(q "$n" -tA -c "CREATE TEMP TABLE w AS SELECT $g, date_bin('1 hour', at, '2000-01-01 00:00+00') AS hour,
                        count(*) AS n FROM $t GROUP BY 1, 2" \
                    -c "SELECT count(*) FROM w FULL JOIN ${t}_h r USING ($g, hour) WHERE w.n IS DISTINCT FROM r.count" |
                    tail -1)" = 0 ] || fail "$n: ${t}_h differs from GROUP BY"
            fi
        done
        case $t in
        rg_none) what="plain INSERT (no rollup)" ;;
        rg_def) what="INSERT, deferred rollup (hours marked; refreshed after, not timed)" ;;
        rg_trig) what="INSERT, trigger-mode rollup (added at the commit)" ;;
        rg_kind) what="INSERT, trigger-mode rollup grouped by kind (5 values; Citus: by k too, read through a view)" ;;
        esac
        row "(g) $what, $((per * CLIENTS)) transactions" "${ms[single]}" "${ms[citus_coord]}" \
            "${ms[single.load]} / ${ms[citus_coord.load]}" "count(*) = transactions; rollup rows = GROUP BY"
    done
    # Transactions of 10 rows of random keys: on Citus most write both
    # workers and commit in two phases, where a writer never waits for a
    # shard's commit lock (doc/citus.md, "Trigger mode"): the rows it cannot
    # add at its PREPARE reach the rollup at the next refresh. Counted: the
    # rollup rows short of GROUP BY before that refresh, then none after.
    # (INGEST / 40 transactions: on Citus each brings its rows to the
    # coordinator, random() being VOLATILE, and copies them to each shard
    # through a connection of its own)
    local short per10=$((INGEST / 40 / CLIENTS)) t
    for t in rg_plain10 rg_trig10; do
        table $t "k bigint NOT NULL, at timestamptz NOT NULL DEFAULT now()" k
        printf '%s\n' "INSERT INTO $t (k) SELECT 1 + (random() * ($KEYS - 1))::bigint FROM generate_series(1, 10);" \
            >"$work/$t.sql"
    done
    for t in rg_plain10 rg_trig10; do
        for n in single citus_coord; do
            [ $t = rg_trig10 ] && q "$n" -q -c "SET client_min_messages = warning" \
                -c "SELECT counter.rollup_create('rg_trig10_h', 'rg_trig10', 'at', '{k}')" >/dev/null
            ms[$n.load]=$(load)
            ms[$n]=$(per=$per10 ingest "$n" $t)
            [ "$(q "$n" -tA -c "SELECT count(*) FROM $t")" = $((per10 * CLIENTS * 10)) ] || fail "$n: $t lost rows"
            [ $t = rg_plain10 ] && continue
            short=$(($(q "$n" -tA -c "SELECT count(*) FROM rg_trig10") -
                $(q "$n" -tA -c "SELECT coalesce(sum(count), 0) FROM rg_trig10_h")))
            ms[$n.short]=$short
            q "$n" -q -c "SELECT counter.rollup_refresh_dirty('rg_trig10_h')" >/dev/null
            [ "$(q "$n" -tA -c "CREATE TEMP TABLE w AS SELECT k, date_bin('1 hour', at, '2000-01-01 00:00+00') AS hour,
                    count(*) AS n FROM rg_trig10 GROUP BY 1, 2" \
                -c "SELECT count(*) FROM w FULL JOIN rg_trig10_h r USING (k, hour) WHERE w.n IS DISTINCT FROM r.count" |
                tail -1)" = 0 ] || fail "$n: rg_trig10_h differs from GROUP BY after the refresh"
        done
        if [ $t = rg_plain10 ]; then
            row "(g) INSERT of 10 rows (no rollup), $((per10 * CLIENTS)) transactions" "${ms[single]}" "${ms[citus_coord]}" \
                "${ms[single.load]} / ${ms[citus_coord.load]}" "count(*) = rows"
        else
            row "(g) INSERT of 10 rows, trigger-mode rollup, $((per10 * CLIENTS)) transactions" "${ms[single]}" \
                "${ms[citus_coord]}" "${ms[single.load]} / ${ms[citus_coord.load]}" \
                "rows not in the rollup before the refresh: one node ${ms[single.short]}, Citus ${ms[citus_coord.short]} of $((per10 * CLIENTS * 10)); after it, rollup rows = GROUP BY"
        fi
    done
}
run_part g

# ---------------------------------------------------------------- (h) reads through a worker node
# counter.value of a trigger-mode counter keyed by the distribution column
# (1.8: read on a worker node too, doc/citus.md), one random key of KEYS per
# transaction, INGEST transactions over CLIENTS clients: on one node, on the
# coordinator and on worker 1; beside it the read it replaces, count(*) of
# the key's rows, on the same nodes.
part_h() {
    echo "== (h) reads of one key: counter.value against count(*), on the coordinator and on worker 1"
    table rh "k bigint NOT NULL, at timestamptz NOT NULL" k
    local n r l
    for n in single citus_coord; do
        q "$n" -q -c "CREATE INDEX ON rh (k)" -c "SET client_min_messages = warning" \
            -c "SELECT counter.track('rh', 'rh', 'k', 'at')" \
            -c "INSERT INTO rh SELECT 1 + g % $KEYS, '$DAY'::timestamptz + (g % 1440) * interval '1 minute'
                FROM generate_series(0, $((2 * KEYS - 1))) g" -c "ANALYZE rh" >/dev/null
    done
    [ "$(mismatches citus_coord rh k::text rh)" = 0 ] || fail "citus: rh differs from count(*)"
    printf '%s\n%s\n' "\\set k random(1, $KEYS)" "SELECT counter.value('rh', :k::bigint);" >"$work/h_value.sql"
    printf '%s\n%s\n' "\\set k random(1, $KEYS)" "SELECT count(*) FROM rh WHERE k = :k;" >"$work/h_count.sql"
    # h_union: the statement counter.value runs, written out (state tables
    # named on each node), to tell Citus's planning of it from the call
    local base delta
    for n in single citus_coord; do
        # beside the source (counter_tracked_N_*), else counter_internal.tracked_N_*
        read -r base delta < <(q "$n" -tA -F ' ' -c "
            SELECT format('%I.%I', n.nspname, c.relname), format('%I.%I', n.nspname, replace(c.relname, '_base', '_delta'))
            FROM counter.tracked t JOIN pg_class c
              ON c.relname IN (format('counter_tracked_%s_base', t.counter_id), format('tracked_%s_base', t.counter_id))
            JOIN pg_namespace n ON n.oid = c.relnamespace WHERE t.name = 'rh'") || true
        [ -n "$delta" ] || fail "$n: the state tables of rh"
        printf '%s\n%s\n' "\\set k random(1, $KEYS)" \
            "SELECT coalesce(sum(z.v), 0) FROM (SELECT b.key, b.base::numeric AS v FROM $base b WHERE b.key = :k UNION ALL SELECT d.key, d.delta::numeric FROM $delta d WHERE d.key = :k) z;" \
            >"$work/h_union_$n.sql"
    done
    for r in h_value h_count h_union; do
        for n in single citus_coord citus_w1; do
            l=$(load)
            # (worker 1 names the state tables as the coordinator does)
            ms[$n]=$(ingest "$n" "$([ "$r" != h_union ] && echo "$r" || echo "h_union_${n/citus_w1/citus_coord}")")
            ms[$n.load]=$l
        done
        row "(h) $r on the coordinator, $((per * CLIENTS)) reads" "${ms[single]}" "${ms[citus_coord]}" \
            "${ms[single.load]} / ${ms[citus_coord.load]}" "one node: one index probe (value, h_union: of base and delta)"
        row "(h) $r on worker 1, $((per * CLIENTS)) reads" "${ms[single]}" "${ms[citus_w1]}" \
            "${ms[single.load]} / ${ms[citus_w1.load]}" "every value = count(*) before the runs"
    done
}
run_part h

# ---------------------------------------------------------------- (i) keyed by another column
# A trigger-mode counter keyed by the visitor, on a table distributed by the
# link (1.8; doc/citus.md, "Keyed by another column": its state anchored on
# every shard, counted on the shards): ingest beside the plain INSERT into
# the same table with no counter (single-row INSERTs, INGEST transactions
# over CLIENTS clients, ROUNDS interleaved rounds; both tables with the same
# indexes), on one node and on the cluster; then 2 x KEYS rows, reconciled
# with all_keys (first folding every key's deltas, then on a right state:
# one INSERT into the run table per batch, a row per shard); then reads of
# one visitor, counter.value beside count(*) of its rows (an index on the
# visitor on both), on the coordinator and on worker 1.
part_i() {
    echo "== (i) a counter keyed by another column than the distribution column: $KEYS visitors, $LINKS links"
    local t n r l
    for t in va_plain va_trig; do
        table $t "link_id bigint NOT NULL, visitor_id bigint NOT NULL, at timestamptz NOT NULL DEFAULT now()" link_id
        for n in single citus_coord; do
            q "$n" -q -c "CREATE INDEX ON $t (visitor_id)" -c "CREATE INDEX ON $t (at)" >/dev/null
        done
    done
    for n in single citus_coord; do
        q "$n" -q -c "SET client_min_messages = warning" \
            -c "SELECT counter.track('va_trig', 'va_trig', 'visitor_id', 'at')" >/dev/null
    done
    [ "$(q citus_coord -tA -c "SELECT anchor_column FROM counter.tracked WHERE name = 'va_trig'")" = link_id ] ||
        fail "citus: va_trig is not anchored by link_id"
    for t in va_plain va_trig; do
        printf '%s\n' "\\set l random(1, $LINKS)" "\\set v random(1, $KEYS)" "\\set m random(0, 1439)" \
            "INSERT INTO $t (link_id, visitor_id, at) VALUES (:l, :v, '$DAY'::timestamptz + :m * interval '1 minute');" \
            >"$work/$t.sql"
    done
    for r in $(seq 1 "$ROUNDS"); do
        for t in va_plain va_trig; do
            for n in single citus_coord; do
                ms[$n.load]=$(load)
                ms[$n]=$(ingest "$n" "$t")
                [ "$(q "$n" -tA -c "SELECT count(*) FROM $t")" = $((r * per * CLIENTS)) ] || fail "$n: $t lost rows"
                if [ $t = va_trig ]; then
                    [ "$(mismatches "$n" $t visitor_id::text $t)" = 0 ] || fail "$n: counter $t differs from count(*)"
                fi
            done
            row "(i) INSERT, $([ $t = va_plain ] && echo "no counter" || echo "trigger-mode counter keyed by the visitor"), $((per * CLIENTS)) transactions, round $r" \
                "${ms[single]}" "${ms[citus_coord]}" "${ms[single.load]} / ${ms[citus_coord.load]}" \
                "$([ $t = va_plain ] && echo "count(*) = transactions" || echo "every value = count(*)")"
        done
    done
    local chunk=$((KEYS / 10)) i
    for n in single citus_coord; do
        for i in $(seq 0 19); do
            q "$n" -q -c "INSERT INTO va_trig (link_id, visitor_id, at)
                          SELECT 1 + g % $LINKS, 1 + g % $KEYS, '$DAY'::timestamptz + (g % 1440) * interval '1 minute'
                          FROM generate_series($((i * chunk)), $((i * chunk + chunk - 1))) g" >/dev/null
        done
        q "$n" -q -c "ANALYZE va_trig" >/dev/null
    done
    reconciled i va_trig visitor_id "keyed by the visitor"
    printf '%s\n%s\n' "\\set v random(1, $KEYS)" "SELECT counter.value('va_trig', :v::bigint);" >"$work/i_value.sql"
    printf '%s\n%s\n' "\\set v random(1, $KEYS)" "SELECT count(*) FROM va_trig WHERE visitor_id = :v;" >"$work/i_count.sql"
    for r in i_value i_count; do
        for n in single citus_coord citus_w1; do
            l=$(load)
            ms[$n]=$(ingest "$n" "$r")
            ms[$n.load]=$l
        done
        row "(i) ${r#i_} of one visitor on the coordinator, $((per * CLIENTS)) reads" "${ms[single]}" "${ms[citus_coord]}" \
            "${ms[single.load]} / ${ms[citus_coord.load]}" "every value = count(*) before the reads"
        row "(i) ${r#i_} of one visitor on worker 1, $((per * CLIENTS)) reads" "${ms[single]}" "${ms[citus_w1]}" \
            "${ms[single.load]} / ${ms[citus_w1.load]}" "every value = count(*) before the reads"
    done
}
run_part i

# ---------------------------------------------------------------- (j) buffered trigger mode
# A buffered trigger-mode counter keyed by the distribution column (1.8;
# doc/citus.md, "Buffered": each shard's trigger adds to its node's shared
# memory, a single-row INSERT commits on one node, so it is buffered there)
# beside the same table with no counter and with an unbuffered trigger-mode
# counter: single-row INSERTs through the coordinator on one hot key, then
# on KEYS keys drawn at random, INGEST transactions over CLIENTS clients,
# ROUNDS interleaved rounds, on one node and on the cluster; counter.flush
# of the buffered counter every second meanwhile (what its flush job does;
# the worker is off here). Every value = count(*) after each run (flushed
# first).
part_j() {
    echo "== (j) a buffered trigger-mode counter: single-row INSERTs, one hot key and $KEYS keys"
    local t n
    for t in jb_plain jb_trig jb_buf; do
        table $t "k bigint NOT NULL, at timestamptz NOT NULL DEFAULT now()" k
        for n in single citus_coord; do
            q "$n" -q -c "CREATE INDEX ON $t (at)" >/dev/null
        done
    done
    for n in single citus_coord; do
        q "$n" -q -c "SET client_min_messages = warning" -c "SELECT counter.track('jb_trig', 'jb_trig', 'k', 'at')" \
            -c "SELECT counter.track('jb_buf', 'jb_buf', 'k', 'at', buffered => true)" >/dev/null
    done
    buffered_runs j jb k ""
}
# script_j KEYSET TABLE: the ingest script of (j): one hot key, or KEYS keys
script_j() {
    if [ "$1" = hot ]; then
        printf '%s\n' "INSERT INTO $2 (k) VALUES (1);"
    else
        printf '%s\n' "\\set k random(1, $KEYS)" "INSERT INTO $2 (k) VALUES (:k);"
    fi
}
# buffered_runs PART PREFIX KEY WHAT: the runs of (j) and (k) on the tables
# PREFIX_plain (no counter), PREFIX_trig (a trigger-mode counter keyed by
# KEY) and PREFIX_buf (the same buffered) that part_PART made: for one hot
# key, then KEYS keys (script_PART writes each table's script), ROUNDS
# interleaved rounds, on one node and on the cluster, with counter.flush of
# the buffered counter every second meanwhile; every value = count(*) after
# each run (flushed first). WHAT: said of the workload in each row.
buffered_runs() {
    local part=$1 p=$2 key=$3 what=$4 t n r keyset flusher
    for keyset in hot many; do
        for t in ${p}_plain ${p}_trig ${p}_buf; do
            "script_$part" $keyset $t >"$work/$t.sql"
        done
        for r in $(seq 1 "$ROUNDS"); do
            for t in ${p}_plain ${p}_trig ${p}_buf; do
                for n in single citus_coord; do
                    flusher=
                    if [ $t = ${p}_buf ]; then
                        (while :; do q "$n" -q -c "SELECT counter.flush('$t')" >/dev/null 2>>"$work/flush.err" || true; sleep 1; done) &
                        flusher=$!
                    fi
                    ms[$n.load]=$(load)
                    ms[$n]=$(ingest "$n" "$t")
                    [ -z "$flusher" ] || { kill "$flusher" 2>/dev/null || true; wait "$flusher" 2>/dev/null || true; }
                    if [ -s "$work/flush.err" ]; then
                        echo "  the flush of $t on $n failed:" && cat "$work/flush.err" && rm -f "$work/flush.err"
                        fail "a flush failed during the run"
                    fi
                    if [ $t != ${p}_plain ]; then
                        q "$n" -q -c "SELECT counter.flush('$t')" >/dev/null 2>&1 || true
                        [ "$(mismatches "$n" $t $key::text $t)" = 0 ] || fail "$n: counter $t differs from count(*)"
                    fi
                done
                row "($part) single-row INSERT$what, $([ $keyset = hot ] && echo "one hot key" || echo "$KEYS keys"), $(case $t in ${p}_plain) echo "no counter" ;; ${p}_trig) echo "trigger-mode counter" ;; *) echo "buffered trigger-mode counter" ;; esac), $((per * CLIENTS)) transactions, round $r" \
                    "${ms[single]}" "${ms[citus_coord]}" "${ms[single.load]} / ${ms[citus_coord.load]}" \
                    "$([ $t = ${p}_plain ] && echo "rows written" || echo "every value = count(*)")"
            done
        done
    done
}
run_part j

# ------------------------------------- (k) buffered, keyed by another column
# The same as (j) for a counter keyed by another column (v) than the
# distribution column (k) (1.8; doc/citus.md, "Buffered": each shard's
# trigger anchors its shard, then adds to its node's shared memory; the
# flush writes a shard's amounts at its least anchor): single-row INSERTs
# through the coordinator, k drawn at random over KEYS values (every shard),
# v one hot key, then v drawn over KEYS keys; no counter, the unbuffered
# trigger-mode counter keyed by v, the buffered one; a flush every second
# meanwhile. Every value = count(*) after each run (flushed first).
part_k() {
    echo "== (k) a buffered trigger-mode counter keyed by another column: single-row INSERTs, one hot key and $KEYS keys"
    local t n
    for t in jk_plain jk_trig jk_buf; do
        table $t "k bigint NOT NULL, v bigint NOT NULL, at timestamptz NOT NULL DEFAULT now()" k
        for n in single citus_coord; do
            q "$n" -q -c "CREATE INDEX ON $t (at)" >/dev/null
        done
    done
    for n in single citus_coord; do
        q "$n" -q -c "SET client_min_messages = warning" -c "SELECT counter.track('jk_trig', 'jk_trig', 'v', 'at')" \
            -c "SELECT counter.track('jk_buf', 'jk_buf', 'v', 'at', buffered => true)" >/dev/null
    done
    buffered_runs k jk v " keyed by another column"
    # reads of one key: count(*) of its rows, counter.value of the
    # unbuffered and of the buffered counter, 2,000 reads on each side (on
    # Citus a query to every shard; the buffered one also looks up, at each
    # anchor, the buffer of the shard's node: tracked_anchor_pending)
    local per=$((2000 / CLIENTS)) r
    printf '%s\n' "\\set v random(1, $KEYS)" "SELECT count(*) FROM jk_buf WHERE v = :v;" >"$work/k_count.sql"
    for t in jk_trig jk_buf; do
        printf '%s\n' "\\set v random(1, $KEYS)" "SELECT counter.value('$t', :v::bigint);" >"$work/k_$t.sql"
    done
    for r in k_count k_jk_trig k_jk_buf; do
        for n in single citus_coord; do
            ms[$n.load]=$(load)
            ms[$n]=$(ingest "$n" "$r")
        done
        row "(k) reads of one key, $(case $r in k_count) echo "count(*) of its rows" ;; k_jk_trig) echo "counter.value, trigger-mode counter" ;; *) echo "counter.value, buffered trigger-mode counter" ;; esac), $((per * CLIENTS)) reads" \
            "${ms[single]}" "${ms[citus_coord]}" "${ms[single.load]} / ${ms[citus_coord.load]}" "every value = count(*) before the reads"
    done
}
# script_k KEYSET TABLE: the ingest script of (k): k over KEYS values (every
# shard), v one hot key or KEYS keys
script_k() {
    if [ "$1" = hot ]; then
        printf '%s\n' "\\set k random(1, $KEYS)" "INSERT INTO $2 (k, v) VALUES (:k, 1);"
    else
        printf '%s\n' "\\set k random(1, $KEYS)" "\\set v random(1, $KEYS)" "INSERT INTO $2 (k, v) VALUES (:k, :v);"
    fi
}
run_part k

echo "[${SECONDS}s] done"
echo
echo "| workload | one node ms | Citus ms | Citus / one node | load average before (one node / Citus) | checked |"
echo "| --- | ---: | ---: | ---: | --- | --- |"
printf '%s\n' "${results[@]}"
ce_scan_log "$CE_citus_coord_LOG" && ce_scan_log "$CE_citus_w1_LOG" && ce_scan_log "$CE_citus_w2_LOG" &&
    ce_scan_log "$CE_single_LOG"
