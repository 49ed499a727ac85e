#!/usr/bin/env bash
# Partition maintenance under real concurrency (the suite's main cluster):
#  1. default-partition drain while two clients keep inserting into the hours
#     being drained: no row lost, none duplicated, none left in default;
#  2. a 30-day catch-up by CALL counter.run_maintenance() commits in bounded
#     steps (the new partitions come from many transactions);
#  3. a long-running reader holds locks: maintenance gives up within its lock
#     timeout and records it, writers are not blocked, the job ends in 55P03;
#  4. two maintenance calls at once: one table is never maintained by both
#     (the second sees it busy), both finish, the result is whole.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
db=partition_conc
"$CE_PGBIN/dropdb" --if-exists $db && "$CE_PGBIN/createdb" $db
export PGDATABASE=$db
q() { ce_psql -At "$@"; }
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
q -c "CREATE EXTENSION counter_ext" >/dev/null

echo "== 1. drain while inserting (at ${SECONDS}s)"
q <<'SQL' >/dev/null
CREATE SEQUENCE ev_ids;
CREATE TABLE ev (id bigint NOT NULL, t timestamptz NOT NULL, UNIQUE (id, t)) PARTITION BY RANGE (t);
CREATE INDEX ON ev (t);
-- partitions from the current hour on; the last 30 hours have none yet
SELECT counter.partition_manage('ev', 't', premake => 2, batch_rows => 400, lock_timeout => '200ms');
INSERT INTO ev SELECT nextval('ev_ids'), now() - interval '30 hours' + random() * interval '30 hours' FROM generate_series(1, 30000);
SQL
in_default=$(q -c "SELECT count(*) FROM ONLY ev_default")
[ "$in_default" -gt 20000 ] || fail "set-up: only $in_default rows in default"
cat >"$work/insert.sql" <<'SQL'
INSERT INTO ev (id, t) VALUES (nextval('ev_ids'), now() - interval '30 hours' + random() * interval '31 hours');
SQL
"$CE_PGBIN/pgbench" -n -c 2 -j 2 -T 12 -R 400 -f "$work/insert.sql" >"$work/pgbench.txt" 2>&1 &
bench=$!
pids+=($bench)
rounds=0
while kill -0 $bench 2>/dev/null; do
    q -c "CALL counter.run_maintenance('ev')" >/dev/null
    rounds=$((rounds + 1))
    sleep 0.2
done
wait $bench || { cat "$work/pgbench.txt"; fail "an inserter failed"; }
grep -q "number of failed transactions: 0" "$work/pgbench.txt" || ! grep -q "failed" "$work/pgbench.txt" ||
    { cat "$work/pgbench.txt"; fail "inserts failed"; }
q -c "CALL counter.run_maintenance('ev')" >/dev/null
res=$(q -F' ' -c "SELECT count(*), count(DISTINCT id), coalesce(sum(id), 0), (SELECT last_value FROM ev_ids) FROM ev")
read -r n nd s last <<<"$res"
echo "rows $n, distinct ids $nd, id sum $s, ids issued $last, maintenance rounds $rounds"
[ "$n" = "$last" ] || fail "row count $n differs from ids issued $last"
[ "$nd" = "$n" ] || fail "duplicated ids: $n rows, $nd distinct"
[ "$s" = "$(python3 -c "print($last * ($last + 1) // 2)")" ] || fail "id checksum $s is not 1+..+$last"
[ "$(q -c "SELECT count(*) FROM ONLY ev_default")" = 0 ] || fail "rows left in the default partition"
[ "$(q -c "SELECT count(*) FROM counter.partition_staging")" = 0 ] || fail "a drain left half done"
[ "$(q -c "SELECT last_outcome FROM counter.partition_status WHERE parent = 'ev'::regclass")" = ok ] ||
    fail "last outcome not ok: $(q -c "SELECT last_error FROM counter.partition_status")"
gaps=$(q -c "SELECT count(*) FROM (SELECT lo, lag(hi) OVER (ORDER BY lo) AS prev FROM counter.partition_bounds('ev') WHERE NOT is_default) x WHERE prev <> lo")
[ "$gaps" = 0 ] || fail "$gaps gaps between partitions"
q -c "DROP TABLE ev" >/dev/null # the event trigger forgets it and its job
[ "$(q -c "SELECT count(*) FROM counter.partitioned_tables")" = 0 ] || fail "a dropped table is still managed"
[ "$(q -c "SELECT count(*) FROM counter.jobs WHERE target = 'public.ev'")" = 0 ] || fail "a dropped table's job is left"

echo "== 2. 30-day catch-up commits in bounded steps (at ${SECONDS}s)"
q <<'SQL' >/dev/null
CREATE TABLE cu (id bigint NOT NULL, t timestamptz NOT NULL) PARTITION BY RANGE (t);
SELECT counter.partition_manage('cu', 't', premake => 2, start_at => now() - interval '31 days', as_of => now() - interval '30 days');
SELECT counter.partition_unmanage('cu');
-- managed again as it stood 30 days ago: everything since is missing
-- (a retention of 40 days: one run drains and fills only [now - retention, now + premake])
SELECT counter.partition_manage('cu', 't', premake => 24, retention => interval '40 days', as_of => now() - interval '30 days');
INSERT INTO cu SELECT g, now() - interval '30 days' + g * interval '13 minutes' FROM generate_series(1, 30 * 24 * 60 / 13) g;
SQL
before=$(q -c "SELECT count(*) || ' ' || sum(id) FROM cu")
q -c "CALL counter.run_maintenance('cu')" >/dev/null
after=$(q -c "SELECT count(*) || ' ' || sum(id) FROM cu")
[ "$before" = "$after" ] || fail "catch-up changed the rows: $before -> $after"
[ "$(q -c "SELECT count(*) FROM ONLY cu_default")" = 0 ] || fail "catch-up left rows in default"
xacts=$(q -c "SELECT count(DISTINCT c.xmin::text) FROM counter.partition_bounds('cu') b JOIN pg_class c ON c.oid = b.partition WHERE b.lo > now() - interval '29 days'")
echo "catch-up partitions came from $xacts transactions"
[ "$xacts" -ge 25 ] || fail "catch-up ran in only $xacts transactions"

echo "== 3. a long reader holds locks (at ${SECONDS}s)"
q <<'SQL' >/dev/null
CREATE TABLE lk (id bigint NOT NULL, t timestamptz NOT NULL) PARTITION BY RANGE (t);
SELECT counter.partition_manage('lk', 't', premake => 3, lock_timeout => '300ms');
UPDATE counter.partitioned_tables SET lock_retries = 2 WHERE parent = 'lk'::regclass;
SQL
newest=$(q -c "SELECT partition FROM counter.partition_bounds('lk') WHERE NOT is_default ORDER BY lo DESC LIMIT 1")
q -c "DROP TABLE $newest" >/dev/null # maintenance now has a partition to make
"$CE_PGBIN/psql" -X -q -c "SET application_name = 'long_reader'" -c "BEGIN" -c "SELECT count(*) FROM lk" \
    -c "SELECT pg_sleep(40)" -c "COMMIT" >/dev/null 2>&1 &
reader=$!
pids+=($reader)
for _ in $(seq 1 100); do
    [ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'long_reader' AND query LIKE '%pg_sleep%'")" = 1 ] && break
    sleep 0.1
done
# writers into the current partition, each allowed 5 s, while maintenance waits
(for i in $(seq 1 30); do
    q -c "SET statement_timeout = '5s'" -c "INSERT INTO lk VALUES ($i, now())" >/dev/null || exit 1
    sleep 0.1
done) &
writer=$!
pids+=($writer)
start=$SECONDS
q -c "CALL counter.run_maintenance('lk')" >/dev/null
took=$((SECONDS - start))
read -r outcome err <<<"$(q -F' ' -c "SELECT last_outcome, last_error FROM counter.partition_status WHERE parent = 'lk'::regclass")"
echo "maintenance gave up after ${took}s: $outcome $err"
[ "$outcome" = skipped ] || fail "outcome $outcome, not skipped"
[[ "$err" == *"could not lock"* ]] || fail "error does not say what: $err"
[ $took -lt 30 ] || fail "maintenance waited for the reader ($took s)"
if "$CE_PGBIN/psql" -X -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "CALL counter.run_steps('partition_maintenance', 'public.lk')" \
    >"$work/job.txt" 2>&1; then
    fail "the job succeeded while the reader held its lock"
fi
grep -q 55P03 "$work/job.txt" || { cat "$work/job.txt"; fail "the job did not end in 55P03"; }
wait $writer || fail "a writer was blocked past its statement_timeout or failed"
[ "$(q -c "SELECT count(*) FROM lk")" = 30 ] || fail "writers' rows missing"
kill $reader 2>/dev/null || true
q -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'long_reader'" >/dev/null
wait $reader 2>/dev/null || true
q -c "CALL counter.run_maintenance('lk')" >/dev/null
[ "$(q -c "SELECT last_outcome FROM counter.partition_status WHERE parent = 'lk'::regclass")" = ok ] ||
    fail "maintenance did not recover after the reader left"
[ "$(q -c "SELECT count(*) FROM pg_class WHERE relname = '$newest'")" = 1 ] || fail "the missing partition was not made"

echo "== 4. two maintenance calls at once (at ${SECONDS}s)"
q <<'SQL' >/dev/null
CREATE TABLE cc (id bigint NOT NULL, t timestamptz NOT NULL) PARTITION BY RANGE (t);
SELECT counter.partition_manage('cc', 't', premake => 2, batch_rows => 100);
INSERT INTO cc SELECT g, now() - interval '5 days' + g * interval '1 minute' FROM generate_series(1, 5 * 24 * 60 - 1) g;
SQL
q -c "CALL counter.run_maintenance('cc')" >"$work/m1.txt" 2>&1 &
m1=$!
q -c "CALL counter.run_maintenance()" >"$work/m2.txt" 2>&1 &
m2=$!
pids+=($m1 $m2)
wait $m1 || { cat "$work/m1.txt"; fail "first maintenance call failed"; }
wait $m2 || { cat "$work/m2.txt"; fail "second maintenance call failed"; }
q -c "CALL counter.run_maintenance('cc')" >/dev/null
[ "$(q -c "SELECT count(*) || ' ' || sum(id) FROM cc")" = "$((5 * 24 * 60 - 1)) $(((5 * 24 * 60 - 1) * (5 * 24 * 60) / 2))" ] ||
    fail "rows lost or duplicated by concurrent maintenance"
[ "$(q -c "SELECT count(*) FROM ONLY cc_default")" = 0 ] || fail "rows left in default"
gaps=$(q -c "SELECT count(*) FROM (SELECT lo, lag(hi) OVER (ORDER BY lo) AS prev FROM counter.partition_bounds('cc') WHERE NOT is_default) x WHERE prev <> lo")
[ "$gaps" = 0 ] || fail "$gaps gaps after concurrent maintenance"
# exactly: while one transaction holds the table's lock (counter_ext's own
# lock space: only its code, here a superuser's call of lock_take, takes it),
# another call sees it busy, and its run is recorded skipped
"$CE_PGBIN/psql" -X -q -c "SET application_name = 'holder'" -c "BEGIN" \
    -c "SELECT counter_internal.lock_take('partition', 'cc'::regclass::oid::bigint)" -c "SELECT pg_sleep(20)" -c "COMMIT" >/dev/null 2>&1 &
holder=$!
pids+=($holder)
for _ in $(seq 1 100); do
    [ "$(q -c "SELECT count(*) FROM pg_locks WHERE locktype = 'object' AND classid = 'counter_internal.lock_space'::regclass
               AND objid = 'cc'::regclass::oid AND granted")" = 1 ] && break
    sleep 0.1
done
[ "$(q -c "SELECT outcome FROM counter.partition_maintain('cc')")" = busy ] || fail "a second caller was not told busy"
[ "$(q -c "SELECT outcome FROM counter.job_runs WHERE kind = 'partition_maintenance' ORDER BY run_id DESC LIMIT 1")" = skipped ] ||
    fail "the busy call was not recorded skipped"
q -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'holder'" >/dev/null
wait $holder 2>/dev/null || true

"$CE_PGBIN/dropdb" $db
echo "partition concurrency: all checks passed"
