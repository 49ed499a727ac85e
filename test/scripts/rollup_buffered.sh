#!/usr/bin/env bash
# Buffered rollups (mode => 'buffered', doc/reference/rollup.md): in a
# cluster of its own, as unprivileged roles (the rollup's owner, a writer with
# INSERT only, a reader with nothing, another owner with a buffered rollup of
# its own):
#   1. rolled-back transactions, rolled-back savepoints and ON CONFLICT DO
#      NOTHING re-deliveries are not counted; before any flush the rollup
#      table is empty and counter.rollup_totals (per hour) and
#      counter.rollup_pending equal a GROUP BY of the events; after
#      counter.rollup_flush the table equals it and nothing is pending;
#   2. 8 pgbench writers of 100-row batches (and a few deletes, which mark
#      hours dirty): before the flush the pending read (totals) equals GROUP
#      BY, after the job's flush and refresh the table does;
#   3. privileges: the writer and the reader cannot read the pending sums
#      (rollup_pending, rollup_totals, rollup_buffer_rows) nor flush; the
#      other owner cannot read or claim them through rollup_buffer_rows;
#      nothing changed for the owner afterwards;
#   2b. the same with the worker flushing every second meanwhile: exact
#      without any recompute;
#   4. crash: the postmaster is killed with SIGKILL under 8 writers, the
#      cluster restarted; with the worker alone running the job (flush every
#      second), within a bounded wait every hour equals GROUP BY;
#   5. a SERIALIZABLE writer and rows that find the shared table full (128
#      entries) have their hours marked dirty; after the refresh, exact;
#   6. without the library preloaded, writers mark their hours dirty.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

work=$(mktemp -d)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    ce_cluster_stop_all
    rm -rf "$work"
}
trap cleanup EXIT

ce_cluster_start brollup "counter_ext.naptime = 1" "counter_ext.rollup_buffer_entries = 20000" ||
    { echo "cannot start the cluster"; exit 1; }
ce_cluster_use brollup
"$CE_PGBIN/createdb" brdb
export PGDATABASE=brdb

fail() { echo "FAIL: $*"; exit 1; }

ce_psql <<'SQL'
CREATE EXTENSION counter_ext;
CREATE ROLE bro LOGIN;
CREATE ROLE bwriter LOGIN;
CREATE ROLE breader LOGIN;
CREATE ROLE bother LOGIN;
GRANT CREATE ON SCHEMA public TO bro, bother;
SET ROLE bro;
CREATE TABLE ev (
    id bigint NOT NULL,
    k int NOT NULL,
    tag text COLLATE "C" NOT NULL DEFAULT 'a',
    v int,
    t timestamptz NOT NULL,
    UNIQUE (id, t)
) PARTITION BY RANGE (t);
CREATE TABLE ev_default PARTITION OF ev DEFAULT;
CREATE SEQUENCE ev_id;
GRANT INSERT, DELETE, SELECT ON ev TO bwriter;
GRANT USAGE ON SEQUENCE ev_id TO bwriter;
SELECT counter.rollup_create('ev_hourly', 'ev', 't', '{k,tag}', mode => 'buffered', sums => '{v}',
                             refresh_every => '1 hour');
RESET ROLE;
SET ROLE bother;
CREATE TABLE other_ev (k int NOT NULL, t timestamptz NOT NULL);
SELECT counter.rollup_create('other_hourly', 'other_ev', 't', '{k}', mode => 'buffered');
RESET ROLE;
-- the worker leaves the rollup alone until part 4: this script flushes it
SELECT (counter.job_alter(job_id, run_every => '1 hour', next_run => now() + interval '1 hour')).kind
FROM counter.jobs WHERE target = 'ev_hourly';
SQL

# the rollup table's key column and the pending rows a read adds to it are
# typed as the source's column: type and collation (counter_internal.column_type_sql)
[ "$(ce_psql -At -c "SELECT collation_name FROM information_schema.columns WHERE table_name = 'ev_hourly' AND column_name = 'tag'")" = C ] ||
    fail "the rollup table's tag column lost the source's collation C"

# the check: per (key, hour), a GROUP BY of the events against what a read gives
truth="SELECT k, tag, counter.rollup_hour(t) AS hour, count(*) AS n, coalesce(sum(v), 0) AS s FROM ev GROUP BY 1, 2, 3"
diff_totals="SELECT count(*) FROM ((SELECT (key->>'k')::int, key->>'tag', period_start, count, (sums->>'v')::numeric
    FROM counter.rollup_totals('ev_hourly', '2026-01-01', '2027-01-01', per => 'hour'))
  EXCEPT ALL ($truth)) d"
diff_totals2="SELECT count(*) FROM (($truth) EXCEPT ALL (SELECT (key->>'k')::int, key->>'tag', period_start, count, (sums->>'v')::numeric
    FROM counter.rollup_totals('ev_hourly', '2026-01-01', '2027-01-01', per => 'hour'))) d"
diff_table="SELECT count(*) FROM ((SELECT k, tag, hour, count, sum_v FROM ev_hourly) EXCEPT ALL ($truth)) d"
diff_table2="SELECT count(*) FROM (($truth) EXCEPT ALL (SELECT k, tag, hour, count, sum_v FROM ev_hourly)) d"
same_totals() { [ "$(ce_psql -At -c "SET ROLE bro" -c "$diff_totals")" = 0 ] && [ "$(ce_psql -At -c "SET ROLE bro" -c "$diff_totals2")" = 0 ]; }
same_table() { [ "$(ce_psql -At -c "$diff_table")" = 0 ] && [ "$(ce_psql -At -c "$diff_table2")" = 0 ]; }

# ---- 1. rollbacks, savepoints, re-delivery
ce_psql -v ON_ERROR_STOP=1 <<'SQL'
SET ROLE bwriter;
INSERT INTO ev (id, k, tag, v, t) VALUES (1, 1, 'a', 5, '2026-10-06 09:10+00'), (2, 1, 'a', 7, '2026-10-06 09:20+00'),
    (3, 2, 'héllo wörld, a longer text key', NULL, '2026-10-06 10:05+00');
-- re-delivered: nothing inserted, nothing counted
INSERT INTO ev (id, k, tag, v, t) VALUES (1, 1, 'a', 5, '2026-10-06 09:10+00'), (2, 1, 'a', 7, '2026-10-06 09:20+00')
ON CONFLICT (id, t) DO NOTHING;
BEGIN;
INSERT INTO ev (id, k, v, t) VALUES (10, 1, 100, '2026-10-06 09:30+00');
ROLLBACK;
BEGIN;
INSERT INTO ev (id, k, v, t) VALUES (11, 1, 1, '2026-10-06 09:40+00');
SAVEPOINT s1;
INSERT INTO ev (id, k, v, t) VALUES (12, 1, 1000, '2026-10-06 09:41+00'), (13, 3, 1, '2026-10-06 11:00+00');
ROLLBACK TO SAVEPOINT s1;
SAVEPOINT s2;
INSERT INTO ev (id, k, v, t) VALUES (14, 4, 2, '2026-10-06 12:00+00');
RELEASE SAVEPOINT s2;
COMMIT;
SQL
[ "$(ce_psql -At -c "SELECT count(*) FROM ev_hourly")" = 0 ] || fail "a writer wrote the rollup table"
same_totals || { ce_psql -c "SET ROLE bro" -c "SELECT * FROM counter.rollup_totals('ev_hourly', '2026-01-01', '2027-01-01', per => 'hour')" -c "$truth"; fail "totals before the flush differ from GROUP BY"; }
pend=$(ce_psql -At -c "SET ROLE bro" -c "SELECT string_agg(format('%s %s %s %s', hour, key, count, sums), '; ' ORDER BY hour, key::text) FROM counter.rollup_pending('ev_hourly')")
echo "pending before the flush: $pend"
[ "$(ce_psql -At -c "SET ROLE bro" -c "SELECT sum(count) FROM counter.rollup_pending('ev_hourly')")" = "$(ce_psql -At -c "SELECT count(*) FROM ev")" ] ||
    fail "rollup_pending does not hold every event"
ce_psql -At -c "SET ROLE bro" -c "SELECT counter.rollup_flush('ev_hourly')" >/dev/null
same_table || { ce_psql -c "TABLE ev_hourly" -c "$truth"; fail "the table after the flush differs from GROUP BY"; }
[ "$(ce_psql -At -c "SET ROLE bro" -c "SELECT count(*) FROM counter.rollup_pending('ev_hourly')")" = 0 ] || fail "pending after the flush"
[ "$(ce_psql -At -c "SELECT count(*) FROM counter_internal.rollup_buffer_log")" = 0 ] || fail "log rows left after the flush"
same_totals || fail "totals after the flush differ from GROUP BY"
echo "ok 1: rollback, savepoints, re-delivery; pending read and flush equal GROUP BY"

# a rule change reaches a backend that has already written (it keeps the
# rollup's row until the source is invalidated); a full recompute of the day
# takes the pending sums of its hours out and leaves every hour exact
got=$(ce_psql -At -v ON_ERROR_STOP=1 <<'SQL'
SET ROLE bwriter;
INSERT INTO ev (id, k, v, t) VALUES (30, 7, 1, '2026-10-06 15:10+00');
RESET ROLE;
SET ROLE bro;
SELECT counter.rollup_set_filter('ev_hourly', 'k <> 7');
RESET ROLE;
SET ROLE bwriter;
INSERT INTO ev (id, k, v, t) VALUES (31, 7, 1, '2026-10-06 15:20+00'), (32, 8, 1, '2026-10-06 15:30+00');
RESET ROLE;
SET ROLE bro;
SELECT string_agg(format('%s=%s', key->>'k', count), ',' ORDER BY key->>'k') FROM counter.rollup_pending('ev_hourly')
WHERE hour = '2026-10-06 15:00+00';
SQL
)
[ "$(echo "$got" | tail -1)" = "7=1,8=1" ] || fail "the filter did not reach the writer's backend: $(echo "$got" | tail -1)"
ce_psql -At -v ON_ERROR_STOP=1 -c "SET ROLE bro" -c "SELECT counter.rollup_set_filter('ev_hourly', NULL)" \
    -c "CALL counter.rollup_refresh('ev_hourly', '2026-10-06 00:00+00', '2026-10-07 00:00+00')" >/dev/null
same_table || fail "the table after a full recompute differs from GROUP BY"
same_totals || fail "totals after a full recompute differ from GROUP BY (pending counted twice?)"
[ "$(ce_psql -At -c "SET ROLE bro" -c "SELECT count(*) FROM counter.rollup_pending('ev_hourly')")" = 0 ] || fail "pending after the recompute"
echo "ok 1b: a rule change reaches a writing backend; a recompute takes the pending sums of its hours"

# ---- 3. privileges (before the load, on a known state)
ce_psql -At -c "SET ROLE bwriter" -c "INSERT INTO ev (id, k, v, t) VALUES (20, 1, 3, '2026-10-06 09:50+00')" >/dev/null
before=$(ce_psql -At -c "SET ROLE bro" -c "SELECT string_agg(format('%s %s %s', hour, key, count), ';') FROM counter.rollup_pending('ev_hourly')")
for who in bwriter breader; do
    out=$(ce_psql -At -c "SET ROLE $who" -c "SELECT * FROM counter.rollup_pending('ev_hourly')" 2>&1 || true)
    case "$out" in *"does not exist"*|*"permission denied"*) ;; *) fail "$who read rollup_pending: $out" ;; esac
    out=$(ce_psql -At -c "SET ROLE $who" -c "SELECT * FROM counter.rollup_totals('ev_hourly', '2026-01-01', '2027-01-01')" 2>&1 || true)
    case "$out" in *"does not exist"*|*"permission denied"*) ;; *) fail "$who read rollup_totals: $out" ;; esac
    out=$(ce_psql -At -c "SET ROLE $who" -c "SELECT counter.rollup_flush('ev_hourly')" 2>&1 || true)
    case "$out" in *"does not exist"*|*"permission denied"*) ;; *) fail "$who flushed: $out" ;; esac
    rid=$(ce_psql -At -c "SELECT rollup_id FROM counter.rollups WHERE name = 'ev_hourly'")
    out=$(ce_psql -At -c "SET ROLE $who" -c "SELECT * FROM counter_internal.rollup_buffer_rows($rid, false) AS p(k int, tag text, hour timestamptz, count bigint, sum_v numeric)" 2>&1 || true)
    case "$out" in *"permission denied"*) ;; *) fail "$who called rollup_buffer_rows: $out" ;; esac
done
for claim in false true; do
    out=$(ce_psql -At -c "SET ROLE bother" -c "SELECT * FROM counter_internal.rollup_buffer_rows($rid, $claim) AS p(k int, tag text, hour timestamptz, count bigint, sum_v numeric)" 2>&1 || true)
    case "$out" in *"does not exist or you do not own it"*) ;; *) fail "another owner read rollup_buffer_rows (claim $claim): $out" ;; esac
done
out=$(ce_psql -At -c "SET ROLE bother" -c "SELECT counter_internal.rollup_buffer_take($rid, '-infinity', 'infinity', NULL)" 2>&1 || true)
case "$out" in *"permission denied"*) ;; *) fail "another owner called rollup_buffer_take: $out" ;; esac
after=$(ce_psql -At -c "SET ROLE bro" -c "SELECT string_agg(format('%s %s %s', hour, key, count), ';') FROM counter.rollup_pending('ev_hourly')")
[ "$before" = "$after" ] && [ -n "$after" ] || fail "the pending sums changed: '$before' / '$after'"
# SELECT on the rollup table is what lets a reader see the totals, pending included
ce_psql -At -c "SET ROLE bro" -c "GRANT SELECT ON ev_hourly TO breader" >/dev/null
n=$(ce_psql -At -c "SET ROLE breader" -c "SELECT sum(count) FROM counter.rollup_totals('ev_hourly', '2026-01-01', '2027-01-01')")
[ "$n" = "$(ce_psql -At -c "SELECT count(*) FROM ev")" ] || fail "a reader with SELECT reads $n"
echo "ok 3: the writer, the reader and another owner cannot read, claim or flush the pending sums"

# ---- 2. 8 writers, 100-row batches, a few deletes
cat >"$work/insert.sql" <<'SQL'
INSERT INTO ev (id, k, tag, v, t)
SELECT nextval('ev_id') + 1000, (random() * 50)::int, 'tag' || (random() * 3)::int, (random() * 10)::int,
       '2026-10-06 06:00+00'::timestamptz + random() * interval '5 hours'
FROM generate_series(1, 100);
SQL
cat >"$work/delete.sql" <<'SQL'
DELETE FROM ev WHERE id = (SELECT max(id) FROM ev);
SQL
"$CE_PGBIN/pgbench" -n -U bwriter -c 8 -j 2 -t 60 -f "$work/insert.sql" >"$work/pgbench.txt" 2>&1 ||
    { cat "$work/pgbench.txt"; fail "pgbench"; }
[ "$(ce_psql -At -c "SELECT count(*) FROM counter.rollup_dirty")" = 0 ] || fail "inserts marked hours dirty"
same_totals || fail "totals (table + pending) after 8 writers differ from GROUP BY"
ce_psql -At -c "SET ROLE bro" -c "SELECT counter.rollup_flush('ev_hourly')" >/dev/null
same_table || fail "the table after the flush differs from GROUP BY"
# deletes mark their hours dirty (deferred mode's path); a refresh recomputes them
"$CE_PGBIN/pgbench" -n -U bwriter -c 8 -j 2 -t 20 -f "$work/insert.sql@5" -f "$work/delete.sql@1" >"$work/pgbench.txt" 2>&1 ||
    { cat "$work/pgbench.txt"; fail "pgbench"; }
ce_psql -At -c "SET ROLE bro" -c "SELECT counter.rollup_refresh_dirty('ev_hourly')" >/dev/null
same_totals || fail "totals after deletes and a refresh differ from GROUP BY"
ce_psql -At -c "SET ROLE bro" -c "SELECT counter.rollup_flush('ev_hourly')" >/dev/null
same_table || fail "the table after deletes, a refresh and a flush differs from GROUP BY"
echo "ok 2: 8 writers: pending read and flushed table equal GROUP BY ($(ce_psql -At -c "SELECT count(*) FROM ev") events)"

# ---- 2b. flushes while 8 writers commit: no hour is recomputed, every one exact
ce_psql -At -c "SELECT (counter.job_alter(job_id, run_every => '1 second', next_run => now())).kind FROM counter.jobs WHERE target = 'ev_hourly'" >/dev/null
runs_before=$(ce_psql -At -c "SELECT count(*) FROM counter.job_runs WHERE kind = 'rollup_refresh'")
# The writers run in rounds of 4 s until the worker has flushed at least 3
# times while they ran (on 2 busy cores it may get few turns in a round),
# and at most 15 rounds.
runs=0
for round in $(seq 1 15); do
    "$CE_PGBIN/pgbench" -n -U bwriter -c 8 -j 2 -T 4 -f "$work/insert.sql" >"$work/pgbench.txt" 2>&1 ||
        { cat "$work/pgbench.txt"; fail "pgbench"; }
    runs=$(( $(ce_psql -At -c "SELECT count(*) FROM counter.job_runs WHERE kind = 'rollup_refresh'") - runs_before ))
    [ "$runs" -ge 3 ] && break
done
[ "$runs" -ge 3 ] || fail "the worker flushed $runs times in $round rounds of 4 s of writers"
[ "$(ce_psql -At -c "SELECT count(*) FROM counter.rollup_dirty")" = 0 ] || fail "flushes under load marked hours dirty"
# no flush while the totals are read: a read that overlaps a flush's commit may
# miss or double its amounts for that one read (doc/reference/rollup.md)
# (run_every too: a run under way when this commits schedules its next by it)
ce_psql -At -c "SELECT (counter.job_alter(job_id, run_every => '1 hour', next_run => now() + interval '1 hour')).kind FROM counter.jobs WHERE target = 'ev_hourly'" >/dev/null
for _ in $(seq 1 100); do
    [ "$(ce_psql -At -c "SELECT count(*) FROM counter.jobs WHERE target = 'ev_hourly' AND running_run IS NOT NULL")" = 0 ] && break
    sleep 0.1
done
sleep 1
same_totals || fail "totals after flushes under load differ from GROUP BY"
ce_psql -At -c "SET ROLE bro" -c "SELECT counter.rollup_flush('ev_hourly')" >/dev/null
same_table || fail "the table after flushes under load differs from GROUP BY"
[ "$(ce_psql -At -c "SELECT count(*) FROM counter.rollup_dirty")" = 0 ] || fail "hours dirty after flushes under load"
ce_psql -At -c "SELECT (counter.job_alter(job_id, run_every => '1 second', next_run => now())).kind FROM counter.jobs WHERE target = 'ev_hourly'" >/dev/null
echo "ok 2b: $runs flushes by the worker while 8 writers committed: every hour exact, none recomputed"

# ---- 4. crash under load; the worker alone repairs
"$CE_PGBIN/pgbench" -n -U bwriter -c 8 -j 2 -T 60 -f "$work/insert.sql" >"$work/pgbench2.txt" 2>&1 &
pids+=($!)
sleep 6
logged=$(ce_psql -At -c "SELECT count(*) FROM counter_internal.rollup_buffer_log")
echo "killing the postmaster under load ($logged log rows not yet flushed)"
ce_cluster_kill brollup "${pids[@]}"
pids=()
ce_cluster_restart brollup || { tail -30 "$CE_brollup_LOG"; fail "restart"; }
stale=$(ce_psql -At -c "SELECT count(*) FROM counter_internal.rollup_buffer_log WHERE epoch <> counter_internal.rollup_buffer_epoch()" 2>/dev/null || echo "?")
lost=$(ce_psql -At -c "SELECT (SELECT count(*) FROM ev) - (SELECT coalesce(sum(count), 0) FROM ev_hourly)" 2>/dev/null || echo "?")
echo "after the restart: $stale log rows of the old epoch, $lost events not in the rollup table"
[ "$stale" != 0 ] || [ "$lost" != 0 ] || fail "the crash lost nothing to repair (nothing to test)"
ok=
for _ in $(seq 1 90); do
    if same_table 2>/dev/null; then ok=1; break; fi
    sleep 1
done
[ -n "$ok" ] || { ce_psql -c "SELECT * FROM counter.rollup_state" -c "SELECT * FROM counter.job_status" || true; fail "not exact 90 s after the restart"; }
same_totals || fail "totals after the restart differ from GROUP BY"
echo "ok 4: after kill -9 under load and a restart, the job made every hour equal GROUP BY ($(ce_psql -At -c "SELECT count(*) FROM ev") events)"

# ---- 5. SERIALIZABLE writers and a full shared table take the dirty-hour path
ce_psql -At -c "ALTER SYSTEM SET counter_ext.rollup_buffer_entries = 128" >/dev/null
ce_cluster_restart brollup || fail "restart with 128 entries"
ce_psql -At -c "SET ROLE bro" -c "SELECT counter.rollup_flush('ev_hourly')" -c "SELECT counter.rollup_refresh_dirty('ev_hourly')" >/dev/null
ce_psql -At -c "SELECT (counter.job_alter(job_id, run_every => '1 hour', next_run => now() + interval '1 hour')).kind FROM counter.jobs WHERE target = 'ev_hourly'" >/dev/null
same_table || fail "not exact before part 5"
ce_psql -At -v ON_ERROR_STOP=1 <<'SQL' >/dev/null
SET ROLE bwriter;
BEGIN ISOLATION LEVEL SERIALIZABLE;
INSERT INTO ev (id, k, v, t) VALUES (40, 1, 1, '2026-10-06 16:10+00');
COMMIT;
SQL
[ "$(ce_psql -At -c "SELECT count(*) FROM counter.rollup_dirty WHERE hour = '2026-10-06 16:00+00'")" -ge 1 ] ||
    fail "a SERIALIZABLE writer's hour was not marked dirty"
[ "$(ce_psql -At -c "SET ROLE bro" -c "SELECT count(*) FROM counter.rollup_pending('ev_hourly') WHERE hour = '2026-10-06 16:00+00'")" = 0 ] ||
    fail "a SERIALIZABLE writer folded its sums"
# 1,000 rows of 500 keys in two hours: far more (key, hour) than 128 entries
ce_psql -At -v ON_ERROR_STOP=1 <<'SQL' >/dev/null
SET ROLE bwriter;
INSERT INTO ev (id, k, v, t)
SELECT 100000 + g, g % 500, 1, '2026-10-06 17:00+00'::timestamptz + (g % 2) * interval '1 hour' FROM generate_series(1, 1000) g;
SQL
dirty=$(ce_psql -At -c "SELECT count(DISTINCT hour) FROM counter.rollup_dirty")
pend=$(ce_psql -At -c "SET ROLE bro" -c "SELECT count(*) FROM counter.rollup_pending('ev_hourly')")
echo "with 128 entries: $pend pending entries, $dirty dirty hours"
[ "$pend" -le 128 ] && [ "$dirty" -ge 2 ] || fail "a full shared table: $pend pending, $dirty dirty hours"
ce_psql -At -c "SET ROLE bro" -c "SELECT counter.rollup_refresh_dirty('ev_hourly')" >/dev/null
same_totals || fail "totals after the dirty-hour path differ from GROUP BY"
ce_psql -At -c "SET ROLE bro" -c "SELECT counter.rollup_flush('ev_hourly')" >/dev/null
same_table || fail "the table after the dirty-hour path differs from GROUP BY"
echo "ok 5: SERIALIZABLE writers and rows that find the shared table full are recomputed, none lost"

# ---- 6. without shared memory (the library not preloaded): a writer's hours are
# marked dirty instead, a flush writes nothing and fails nothing, a new buffered
# rollup is refused
ce_as_owner sh -c "echo \"shared_preload_libraries = ''\" >>'$CE_brollup_DIR/data/postgresql.conf'"
ce_cluster_restart brollup || { tail -5 "$CE_brollup_LOG"; fail "restart without preload"; }
ce_psql -At -v ON_ERROR_STOP=1 -c "SET ROLE bwriter" \
    -c "INSERT INTO ev (id, k, v, t) VALUES (50, 1, 1, '2026-10-06 20:10+00'), (51, 2, 1, '2026-10-06 21:10+00')" >/dev/null ||
    fail "a writer failed without shared memory"
[ "$(ce_psql -At -c "SELECT count(DISTINCT hour) FROM counter.rollup_dirty WHERE hour >= '2026-10-06 20:00+00'")" = 2 ] ||
    fail "without shared memory the writer's hours were not marked dirty"
[ "$(ce_psql -At -c "SET ROLE bro" -c "SELECT counter.rollup_flush('ev_hourly')")" = 0 ] || fail "a flush without shared memory"
ce_psql -At -c "SET ROLE bro" -c "SELECT counter.rollup_refresh_dirty('ev_hourly')" >/dev/null
same_table || fail "the table without shared memory differs from GROUP BY"
out=$(ce_psql -At -c "SET ROLE bother" -c "SELECT counter.rollup_create('other2', 'other_ev', 't', '{k}', mode => 'buffered')" 2>&1 || true)
case "$out" in *"needs counter_ext in shared_preload_libraries"*) ;; *) fail "a buffered rollup made without preload: $out" ;; esac
echo "ok 6: without shared memory writers mark hours dirty, and the refresh keeps every hour exact"
