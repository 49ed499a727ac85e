#!/usr/bin/env bash
# 4 writers insert overlapping batches (the same links and hours in different
# orders, re-delivered event ids, ids sorted per batch as the ingest rule
# says) for 20 s into an hourly-partitioned event table with a trigger-mode
# rollup (counts and distinct visitors) and a deferred-mode one, while a
# fifth session deletes single events of the first hour and a sixth
# recomputes that hour and runs the refresh jobs in a loop. Then: no deadlock
# and no failed transaction; the hours no refresh touched are exact in trigger
# mode (counts, and distinct visitors, which are exact at these sizes); after
# the jobs both rollups equal a from-scratch GROUP BY.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
db=rollup_concurrency
seconds=${ROLLUP_CONCURRENCY_SECONDS:-20}
"$CE_PGBIN/dropdb" --if-exists $db && "$CE_PGBIN/createdb" $db
export PGDATABASE=$db
work=$(mktemp -d)
refresher=
cleanup() {
    [ -n "$refresher" ] && kill "$refresher" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
deadlocks_before=$(grep -c "deadlock detected" "$CE_main_LOG" 2>/dev/null || true)

ce_psql <<'SQL'
CREATE EXTENSION counter_ext;
CREATE TABLE events (
    event_id    bigint NOT NULL,
    link_id     bigint NOT NULL,
    visitor_id  bigint NOT NULL,
    occurred_at timestamptz NOT NULL,
    UNIQUE (event_id, occurred_at)
) PARTITION BY RANGE (occurred_at);
CREATE TABLE events_h09 PARTITION OF events FOR VALUES FROM ('2026-10-06 09:00+00') TO ('2026-10-06 10:00+00');
CREATE TABLE events_h10 PARTITION OF events FOR VALUES FROM ('2026-10-06 10:00+00') TO ('2026-10-06 11:00+00');
CREATE TABLE events_default PARTITION OF events DEFAULT;
SELECT counter.rollup_create('conc_trigger', 'events', 'occurred_at', '{link_id}', distinct_on => '{visitor_id}');
SELECT counter.rollup_create('conc_deferred', 'events', 'occurred_at', '{link_id}', mode => 'deferred');
SQL

# A re-delivered event is the same event: link and time follow from its id.
cat >"$work/writer.sql" <<'SQL'
INSERT INTO events (event_id, link_id, visitor_id, occurred_at)
SELECT e, 1 + (e * 7919) % 50, e % 997, '2026-10-06 09:00+00'::timestamptz + make_interval(secs => (e * 104729) % 10800)
FROM (SELECT 1 + floor(random() * 5000000)::bigint AS e FROM generate_series(1, 200)) s
ORDER BY e
ON CONFLICT (event_id, occurred_at) DO NOTHING;
SQL
cat >"$work/deleter.sql" <<'SQL'
\set e random(1, 5000000)
DELETE FROM events WHERE event_id = :e AND occurred_at < '2026-10-06 10:00+00';
SQL

(
    end=$((SECONDS + seconds))
    while [ $SECONDS -lt $end ]; do
        ce_psql -c "CALL counter.rollup_refresh('conc_trigger', '2026-10-06 09:00+00', '2026-10-06 10:00+00')" \
            -c "CALL counter.run_steps('rollup_refresh', 'conc_deferred')" -c "CALL counter.run_steps('rollup_refresh', 'conc_trigger')" \
            >/dev/null 2>>"$work/refresher.err" || echo "refresh failed" >>"$work/refresher.err"
        sleep 0.5
    done
) &
refresher=$!

"$CE_PGBIN/pgbench" -n -c 4 -j 2 -T "$seconds" -f "$work/writer.sql" >"$work/writers.out" 2>&1 &
writers=$!
"$CE_PGBIN/pgbench" -n -c 1 -j 1 -T "$seconds" -R 20 -f "$work/deleter.sql" >"$work/deleter.out" 2>&1 || {
    cat "$work/deleter.out"; exit 1; }
wait $writers || { cat "$work/writers.out"; exit 1; }
wait $refresher
refresher=
cat "$work/writers.out" | grep -E "transactions|failed" || true
grep -E "number of failed transactions: 0 " "$work/writers.out" >/dev/null || { cat "$work/writers.out"; exit 1; }
grep -E "number of failed transactions: 0 " "$work/deleter.out" >/dev/null || { cat "$work/deleter.out"; exit 1; }
if grep -v "NOTICE" "$work/refresher.err" | grep . >/dev/null; then
    echo "refresher errors:"; cat "$work/refresher.err"; exit 1
fi
deadlocks_after=$(grep -c "deadlock detected" "$CE_main_LOG" 2>/dev/null || true)
[ "$deadlocks_after" = "$deadlocks_before" ] || { echo "deadlock detected in the server log"; exit 1; }

# Trigger mode needs no refresh: hours 10 and 11 were never recomputed.
ce_psql -At <<'SQL' >"$work/check1"
WITH truth AS (SELECT link_id, counter.rollup_hour(occurred_at) AS hour, count(*) AS count,
                      count(DISTINCT visitor_id) AS visitors
               FROM events WHERE occurred_at >= '2026-10-06 10:00+00' GROUP BY 1, 2),
r AS (SELECT link_id, hour, count, round(counter.hll_cardinality(distinct_visitor_id))::bigint AS visitors
      FROM conc_trigger WHERE hour >= '2026-10-06 10:00+00')
SELECT (SELECT count(*) FROM r),
       (SELECT count(*) FROM ((TABLE truth EXCEPT TABLE r) UNION ALL (TABLE r EXCEPT TABLE truth)) d),
       (SELECT count(*) FROM counter.rollup_dirty d
        WHERE d.rollup_id = counter_internal.rollup_id('conc_trigger') AND d.hour >= '2026-10-06 10:00+00');
SQL
IFS='|' read -r rows differing dirty_late <"$work/check1"
echo "trigger-mode rows of hours 10-11 (never refreshed): $rows, differing from GROUP BY: $differing, dirty: $dirty_late"
[ "$rows" -ge 100 ] && [ "$differing" = 0 ] && [ "$dirty_late" = 0 ] || exit 1

ce_psql -c "CALL counter.run_steps('rollup_refresh', 'conc_trigger')" -c "CALL counter.run_steps('rollup_refresh', 'conc_deferred')" >/dev/null
ce_psql -At <<'SQL' >"$work/check2"
WITH truth AS (SELECT link_id, counter.rollup_hour(occurred_at) AS hour, count(*) AS count FROM events GROUP BY 1, 2),
t AS (SELECT link_id, hour, count FROM conc_trigger)
SELECT (SELECT count(*) FROM events) AS events,
       (SELECT count(*) FROM ((SELECT * FROM truth EXCEPT SELECT * FROM t)
                              UNION ALL (SELECT * FROM t EXCEPT SELECT * FROM truth)) d) AS trigger_diff,
       (SELECT count(*) FROM ((SELECT * FROM truth EXCEPT SELECT * FROM conc_deferred)
                              UNION ALL (SELECT * FROM conc_deferred EXCEPT SELECT * FROM truth)) d) AS deferred_diff,
       (SELECT count(*) FROM counter.rollup_dirty) AS dirty;
SQL
IFS='|' read -r events tdiff ddiff dirty <"$work/check2"
echo "events=$events trigger_diff=$tdiff deferred_diff=$ddiff dirty=$dirty"
[ "$events" -gt 1000 ] || { echo "too few events: the writers did not run"; exit 1; }
[ "$tdiff" = 0 ] && [ "$ddiff" = 0 ] && [ "$dirty" = 0 ] || exit 1
# The sketches the trigger merged under concurrency equal recomputed ones.
unchanged=$(ce_psql -At -c "SELECT counter.rollup_recompute('conc_trigger', '2026-10-06 09:00+00', '2026-10-06 12:00+00')")
echo "rows a full recompute of the trigger-mode rollup changed: $unchanged"
[ "$unchanged" = 0 ] || exit 1
"$CE_PGBIN/dropdb" $db
