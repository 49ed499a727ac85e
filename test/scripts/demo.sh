#!/usr/bin/env bash
# Every section of the demo (test/demo/NN_*.sql) runs to its end without an
# error, on a cluster set up as test/demo/run.sh sets up its own: the
# one-node sections in name order, then the Citus sections on a three-node
# Citus cluster (test/citus.sh) when Citus is there (otherwise a "not run:"
# line says why). After the Citus section, the cluster's numbers are checked
# against the rows: every counter value equals count(*) with its filter (and
# the section's reconciliation corrected no key), and every row of the
# trigger-mode rollup equals GROUP BY (sketch bytes too).
# (checkout_anywhere.sh runs `make demo` itself, its first two sections.)
set -uo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
fail() {
    echo "FAILED: $*"
    exit 1
}
trap ce_cluster_stop_all EXIT

ce_cluster_start demo "counter_ext.enabled = off" || exit 1
ce_cluster_use demo
"$CE_PGBIN/createdb" clicks || exit 1
ce_demo_sections sections citus
for section in "${sections[@]}"; do
    "$CE_PGBIN/psql" -X -v ON_ERROR_STOP=1 -d clicks -f "$section" >/dev/null 2>"$CE_TOP/build/demo-section.err" ||
        fail "demo section $section: $(grep -m 3 -E "ERROR|FATAL|PANIC" "$CE_TOP/build/demo-section.err"; tail -5 "$CE_TOP/build/demo-section.err")"
    echo "ok: $section"
done
ce_scan_log "$CE_demo_LOG" || fail "crash in the demo's server log"

[ ${#citus[@]} -gt 0 ] || exit 0
source test/citus.sh
st=0
ce_citus_ready || st=$?
if [ $st -eq 77 ]; then
    echo "not run: the Citus sections (${citus[*]}): $CE_CITUS_SKIP"
    exit 0
fi
[ $st -eq 0 ] || fail "Citus could not be built"
CE_CITUS_DB=clicks ce_citus_cluster_start >/dev/null || fail "the Citus cluster does not start"
for section in "${citus[@]}"; do
    "$CE_PGBIN/psql" -X -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$CE_citus_coord_PORT" -d clicks \
        -v coordinator="$CE_citus_coord_PORT" -v worker_1="$CE_citus_w1_PORT" -f "$section" \
        >/dev/null 2>"$CE_TOP/build/demo-section.err" ||
        fail "demo section $section: $(grep -m 3 -E "ERROR|FATAL|PANIC" "$CE_TOP/build/demo-section.err"; tail -5 "$CE_TOP/build/demo-section.err")"
    echo "ok: $section"
done
# the numbers of 80_citus.sql, checked here rather than only shown there
c() { ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -d clicks -tA "$@"; }
rows=$(c -c "SELECT count(*) FROM demo.clicks")
[ "$rows" = 22006 ] || fail "the Citus section's table holds $rows rows, not 22006 (20,000 + 2,000 through a worker + 2 with their add + 1 with its add through a worker + 1 counted by the buffered counter + 2 by the buffered one keyed by visitor; the re-delivery none)"
bad=$(ce_citus_mismatches c citus_clicks_per_link demo.clicks "kind <> 'bot'" link_id)
[ "$bad" = 0 ] || fail "$bad links whose counter differs from count(*)"
bad=$(ce_citus_mismatches c citus_app_clicks demo.clicks true link_id)
[ "$bad" = 0 ] || fail "$bad links whose application-mode counter differs from count(*)"
bad=$(ce_citus_mismatches c citus_buffered_clicks demo.clicks true link_id)
[ "$bad" = 0 ] || fail "$bad links whose buffered trigger-mode counter differs from count(*)"
bad=$(ce_citus_mismatches c citus_clicks_per_visitor demo.clicks true visitor_id)
[ "$bad" = 0 ] || fail "$bad visitors whose counter (keyed by another column than the distribution column) differs from count(*)"
bad=$(ce_citus_mismatches c citus_buffered_visits demo.clicks true visitor_id)
[ "$bad" = 0 ] || fail "$bad visitors whose buffered counter (keyed by another column) differs from count(*)"
# read through worker 1 (the section's last read): the same numbers
# (the five counters: their state is beside the rows)
q="SELECT string_agg(counter || ':' || n || ':' || s, ' ' ORDER BY counter)
   FROM (SELECT counter, count(*) AS n, sum(value) AS s FROM counter.tracked_values GROUP BY counter) x"
got=$(ce_psql -h 127.0.0.1 -p "$CE_citus_w1_PORT" -d clicks -tA -c "$q")
want=$(c -c "$q")
[ "$(wc -w <<<"$want")" = 5 ] && [ "$got" = "$want" ] || fail "counter.tracked_values on worker 1: $got (the coordinator's: $want)"
# and it was before the section's reconciliation, which corrected nothing
got=$(c -c "SELECT runs > 0 AND keys_corrected = 0 FROM counter.tracked_drift WHERE counter = 'citus_clicks_per_link'")
[ "$got" = t ] || fail "the Citus section's reconciliation corrected the counter (or did not run): $got"
# rows of the trigger-mode rollup ROLLUP (grouped by COLUMN) that differ from GROUP BY
rollup_mismatches() { # ROLLUP COLUMN
    c <<SQL | tail -1
CREATE TEMP TABLE want AS SELECT $2, counter.rollup_hour(occurred_at) AS hour, count(*) AS n,
    counter.hll_add_agg(visitor_id)::bytea AS d FROM demo.clicks GROUP BY 1, 2;
CREATE TEMP TABLE got AS SELECT $2, hour, count AS n, distinct_visitor_id::bytea AS d FROM demo.$1;
SELECT count(*) FROM want FULL JOIN got USING ($2, hour) WHERE want.n IS DISTINCT FROM got.n OR want.d IS DISTINCT FROM got.d;
SQL
}
bad=$(rollup_mismatches clicks_live link_id)
[ "$bad" = 0 ] || fail "$bad rows of the trigger-mode rollup differ from GROUP BY"
bad=$(rollup_mismatches clicks_by_kind_live kind)
[ "$bad" = 0 ] || fail "$bad rows of the trigger-mode rollup by kind (a view) differ from GROUP BY"
echo "ok: the Citus section's counter equals count(*) and its trigger-mode rollups (by link, and by kind through its view) GROUP BY (sketch bytes too)"
for n in citus_coord citus_w1 citus_w2; do
    log="CE_${n}_LOG"
    ce_scan_log "${!log}" || fail "crash in the server log of $n"
done
