#!/usr/bin/env bash
# The hot paths in instructions (valgrind's callgrind: deterministic, unlike
# any timing on a shared machine), this tree beside a released version
# (default: 1.4, commit 21f4688). For each build: a preloaded cluster gets a
# buffered application-mode counter, a trigger-mode counter and a plain
# table; then `postgres --single` runs a prepared statement 1,000 and 3,000
# times, each in its own transaction, under callgrind. Per execution: the
# difference of the two totals divided by 2,000. Also an unbuffered add, an
# INSERT into a table with a trigger-mode rollup, an INSERT of 100 keys
# with and without a trigger-mode counter (its fold's statement of many
# rows), a read of a buffered key and, for scale, a primary-key SELECT of
# one row. On demand, not in CI:
#   bash test/bench/tracked/callgrind.sh [REF]
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
ref=${1:-21f4688}
ce_require_packages valgrind || exit 1
ce_bench_beside_release "$ref"

statements=(
    "SELECT 1"
    "SELECT counter.add('appb', 1::bigint)"
    "SELECT counter.add('app', 1::bigint)"
    "INSERT INTO trig (k) VALUES (1)"
    "INSERT INTO rev (k) VALUES (1)"
    "INSERT INTO plain (k) VALUES (1)"
    "INSERT INTO trig (k) SELECT g FROM generate_series(1, 100) g"
    "INSERT INTO plain (k) SELECT g FROM generate_series(1, 100) g"
    "SELECT counter.value('appb', 1::bigint)"
    "SELECT n FROM hot WHERE id = 1"
)

# instructions CLUSTER BIN STATEMENT N: callgrind's total for N executions.
instructions() {
    local cluster=$1 bin=$2 stmt=$3 n=$4 d="CE_$1_DIR" input out
    input=$(mktemp) out=$(mktemp -d)
    chmod 755 "$out"
    ce_is_root && chown postgres: "$out"
    { echo "PREPARE p AS $stmt"; for _ in $(seq 1 "$n"); do echo "EXECUTE p"; done; } >"$input"
    chmod 644 "$input"
    ce_as_owner valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" \
        "$bin/postgres" --single -D "${!d}/data" postgres <"$input" >/dev/null 2>"$out/valgrind.txt"
    sed -n 's/^==[0-9]*== Collected : //p' "$out/valgrind.txt" | tail -1
    rm -rf "$input" "$out"
}

declare -A per
for cluster in this ref; do
    ce_cluster_use "$cluster"
    ce_psql <<'SQL'
CREATE EXTENSION counter_ext;
CREATE TABLE appb (k bigint NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON appb (at);
SELECT counter.track('appb', 'appb', 'k', 'at', mode => 'application', buffered => true);
CREATE TABLE trig (k bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON trig (at);
SELECT counter.track('trig', 'trig', 'k', 'at');
CREATE TABLE plain (k bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE TABLE app (k bigint NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON app (at);
SELECT counter.track('app', 'app', 'k', 'at', mode => 'application');
CREATE TABLE rev (k bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
SELECT counter.rollup_create('rev_hourly', 'rev', 'at', '{k}');
CREATE TABLE hot (id int PRIMARY KEY, n bigint NOT NULL);
INSERT INTO hot VALUES (1, 0);
SELECT counter.add('appb', 1::bigint);
SELECT counter.flush('appb');
SQL
    d="CE_${cluster}_DIR"
    ce_as_owner "$CE_PGBIN/pg_ctl" -D "${!d}/data" -w -t 60 stop -m fast >/dev/null
    bin=$CE_PGBIN
    [ "$cluster" = ref ] && bin=$work/ref/build/stage${CE_PGBIN#$CE_STAGE}
    for stmt in "${statements[@]}"; do
        a=$(instructions "$cluster" "$bin" "$stmt" 1000)
        b=$(instructions "$cluster" "$bin" "$stmt" 3000)
        per["$cluster|$stmt"]=$(((b - a) / 2000))
    done
    ce_as_owner "$CE_PGBIN/pg_ctl" -D "${!d}/data" -l "${!d}/server.log" -w -t 60 start >/dev/null
done

printf '%-45s %12s %12s %8s\n' "per execution (instructions)" "$ref" "this tree" "ratio"
for stmt in "${statements[@]}"; do
    r=${per["ref|$stmt"]} t=${per["this|$stmt"]}
    printf '%-45s %12s %12s %8s\n' "$stmt" "$r" "$t" "$(python3 -c "print(f'{$t / $r:.3f}')")"
done
sel_r=${per["ref|SELECT 1"]} sel_t=${per["this|SELECT 1"]}
printf '%-45s %12s %12s\n' "buffered add beyond SELECT 1" \
    "$((${per["ref|SELECT counter.add('appb', 1::bigint)"]} - sel_r))" \
    "$((${per["this|SELECT counter.add('appb', 1::bigint)"]} - sel_t))"
printf '%-45s %12s %12s\n' "buffered value beyond SELECT 1" \
    "$((${per["ref|SELECT counter.value('appb', 1::bigint)"]} - sel_r))" \
    "$((${per["this|SELECT counter.value('appb', 1::bigint)"]} - sel_t))"
printf '%-45s %12s %12s\n' "primary-key SELECT beyond SELECT 1" \
    "$((${per["ref|SELECT n FROM hot WHERE id = 1"]} - sel_r))" "$((${per["this|SELECT n FROM hot WHERE id = 1"]} - sel_t))"
printf '%-45s %12s %12s\n' "trigger-mode rollup INSERT beyond a plain INSERT" \
    "$((${per["ref|INSERT INTO rev (k) VALUES (1)"]} - ${per["ref|INSERT INTO plain (k) VALUES (1)"]}))" \
    "$((${per["this|INSERT INTO rev (k) VALUES (1)"]} - ${per["this|INSERT INTO plain (k) VALUES (1)"]}))"
printf '%-45s %12s %12s\n' "trigger-mode INSERT beyond a plain INSERT" \
    "$((${per["ref|INSERT INTO trig (k) VALUES (1)"]} - ${per["ref|INSERT INTO plain (k) VALUES (1)"]}))" \
    "$((${per["this|INSERT INTO trig (k) VALUES (1)"]} - ${per["this|INSERT INTO plain (k) VALUES (1)"]}))"
many_t="INSERT INTO trig (k) SELECT g FROM generate_series(1, 100) g"
many_p="INSERT INTO plain (k) SELECT g FROM generate_series(1, 100) g"
printf '%-45s %12s %12s\n' "trigger-mode INSERT of 100 keys beyond plain" \
    "$((${per["ref|$many_t"]} - ${per["ref|$many_p"]}))" "$((${per["this|$many_t"]} - ${per["this|$many_p"]}))"
