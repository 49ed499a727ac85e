#!/usr/bin/env bash
# What a flush of zipf keys costs, in instructions (valgrind's callgrind:
# deterministic, unlike any timing on a shared machine), this tree beside REF
# (default: 3485944, main before the delta tables' fillfactor). For each
# build: a preloaded cluster (durable defaults, counter_ext.buffer_entries =
# 262144) gets a buffered application-mode counter whose delta table has a
# row for each of the keys 1..100,000 (as after minutes of zipf adds: a
# flush then updates rows, as in the steady state; all adds at one event
# time, one bucket); then `postgres --single` runs R cycles of:
# $CE_BENCH_DRAWS adds (default 20,000) of keys drawn from 1..100,000 with a
# zipf-like law of exponent 1.1 (the same seeded draws for both builds),
# then counter.flush. R = 3 and 6, each from the same starting
# copy of the cluster; per flushed key: the difference of the two runs'
# inclusive cost of counter.flush plus the commit callbacks (the claims let
# go), over the difference of the rows flushed. The adds' own cost per add
# is that of callgrind.sh (this measures the flush). On demand, not in CI:
#   bash test/bench/tracked/flush_callgrind.sh [REF]
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
ref=${1:-3485944}
draws=${CE_BENCH_DRAWS:-20000}
at=$(date -u -d 'yesterday' '+%Y-%m-%d 00:00+00')
ce_require_packages valgrind || exit 1
ce_bench_beside_release "$ref"

# flush_cost CLUSTER BIN R: "rows instructions" for R cycles
flush_cost() {
    local cluster=$1 bin=$2 r=$3 d="CE_$1_DIR" out rows fl cb
    out=$(mktemp -d)
    chmod 755 "$out"
    ce_is_root && chown postgres: "$out"
    rm -rf "${!d}/data" && cp -a "${!d}/data.start" "${!d}/data"
    {
        echo "SELECT setseed(0.5);"
        for _ in $(seq 1 "$r"); do
            # one line a statement (postgres --single)
            echo "SELECT count(counter.add('appz', floor(power(1 - random() * (1 - power(100000, -0.1)), -10))::bigint," \
                "1, '$at')) FROM generate_series(1, $draws);"
            echo "SELECT counter.flush('appz');"
        done
    } >"$out/in.sql"
    chmod 644 "$out/in.sql"
    ce_as_owner valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" \
        "$bin/postgres" --single -D "${!d}/data" postgres <"$out/in.sql" >"$out/out.txt" 2>"$out/valgrind.txt" || true
    rows=$(sed -n 's/.*flush = "\([0-9]*\)".*/\1/p' "$out/out.txt" | awk '{ s += $1 } END { print s + 0 }')
    if [ "$rows" = 0 ] || grep -q ' ERROR: ' "$out/valgrind.txt"; then
        tail -n 20 "$out/out.txt" "$out/valgrind.txt" >&2
        ce_die "the $cluster build flushed nothing or failed (R = $r)"
    fi
    callgrind_annotate --inclusive=yes "$out/cg.out" >"$out/annotated.txt" 2>/dev/null
    # inclusive counts: counter.flush, and the commit callback (the claims let go)
    fl=$(awk '/tracked.cpp:counter_flush \[/ { gsub(",", "", $1); print $1; exit }' "$out/annotated.txt")
    cb=$(awk '/entry_of<&\(anonymous namespace\)::xact_callback>::call/ { gsub(",", "", $1); print $1; exit }' \
        "$out/annotated.txt")
    echo "$rows $((fl + ${cb:-0}))"
    rm -rf "$out"
}

declare -A rows cost
for cluster in this ref; do
    ce_cluster_use "$cluster"
    ce_psql -v at="$at" >/dev/null <<'SQL'
CREATE EXTENSION counter_ext;
CREATE TABLE app (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON app (at);
SELECT counter.track('appz', 'app', 'link', 'at', mode => 'application', buffered => true);
SELECT count(counter.add('appz', k::bigint, 1, :'at')) FROM generate_series(1, 100000) k;
SELECT counter.flush('appz');
SQL
    d="CE_${cluster}_DIR"
    ce_as_owner "$CE_PGBIN/pg_ctl" -D "${!d}/data" -w -t 60 stop -m fast >/dev/null
    echo "counter_ext.buffer_entries = 262144" >>"${!d}/data/postgresql.conf"
    cp -a "${!d}/data" "${!d}/data.start"
    bin=$CE_PGBIN
    [ "$cluster" = ref ] && bin=$work/ref/build/stage${CE_PGBIN#$CE_STAGE}
    for r in 3 6; do
        read -r rows["$cluster|$r"] cost["$cluster|$r"] < <(flush_cost "$cluster" "$bin" "$r")
    done
    ce_as_owner "$CE_PGBIN/pg_ctl" -D "${!d}/data" -l "${!d}/server.log" -w -t 60 start >/dev/null
done

printf '%-45s %12s %12s %8s\n' "per flushed key (instructions)" "$ref" "this tree" "ratio"
r_rows=$((${rows["ref|6"]} - ${rows["ref|3"]})) t_rows=$((${rows["this|6"]} - ${rows["this|3"]}))
r=$(((${cost["ref|6"]} - ${cost["ref|3"]}) / r_rows)) t=$(((${cost["this|6"]} - ${cost["this|3"]}) / t_rows))
printf '%-45s %12s %12s %8s\n' "flush + commit, cycles 4-6" "$r" "$t" "$(python3 -c "print(f'{$t / $r:.3f}')")"
printf '%-45s %12s %12s\n' "rows flushed in cycles 4-6" "$r_rows" "$t_rows"
