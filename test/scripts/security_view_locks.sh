#!/usr/bin/env bash
# One owner's tables never hold up another role's read of the views that
# list many owners' objects (counter.tracked_values, counter.rollup_state,
# counter.partition_status; doc/security.md, "One owner's object and another
# role's read"). "mallory" owns a tracked counter on a table it lets PUBLIC
# read, a rollup and a managed partitioned table with rows in its default
# partition, and:
#  1. holds an ACCESS EXCLUSIVE lock on the counter's state table, the rollup
#     table and the default partition in an open transaction: the reader's
#     tracked_values and a superuser's rollup_state and partition_status
#     complete (statement_timeout 60 s makes a wait fail), list the reader's
#     own objects with their numbers (each counter equal to count(*)), leave
#     mallory's out (NULL columns) with a WARNING naming the lock timeout;
#     with counter_ext.view_lock_timeout = 0 and the reader's lock_timeout
#     set the reader's shorter bound applies the same way;
#  2. gives those three tables a FORCE'd row-level security policy whose
#     function sleeps for an hour (the state table reconciled first, so the
#     policy has rows to filter): the same reads complete, the policy never
#     runs in them (a WARNING names the row-level security policy); once it
#     drops the policy, mallory reads its own counter as before;
#  3. (PostgreSQL 15, which still turns an empty table without indexes into
#     a view with CREATE RULE "_RETURN") turns its counter's state table and
#     its rollup table into views that call that sleeping function whenever
#     they are read (a one-time filter, rows or none): the same reads complete, the view's query never runs in
#     them (a WARNING says it is not a table). On later majors the test
#     checks that the CREATE RULE is refused.
# lane: side
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ce_trap_holders

fail() { ce_fail "$@"; }
expect() { ce_expect "$@"; }
contains() { ce_contains "$@"; }
wait_for() { ce_wait_true vl "$@"; }
q() { ce_psql -d vl -At -c "$1"; }
as_role() { local r=$1; shift; "$CE_PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -U "$r" -d vl "$@"; }

ce_cluster_start vl "counter_ext.enabled = off"
ce_cluster_use vl
ce_psql -d postgres -c "CREATE DATABASE vl" >/dev/null
ce_psql -d vl >/dev/null <<'SQL'
CREATE EXTENSION counter_ext;
CREATE ROLE reader LOGIN;
CREATE ROLE mallory LOGIN;
CREATE SCHEMA r AUTHORIZATION reader;
CREATE SCHEMA m AUTHORIZATION mallory;
SQL
for who in reader:r mallory:m; do
    role=${who%%:*} s=${who#*:}
    as_role "$role" >/dev/null <<SQL
CREATE TABLE $s.ev (id bigserial, k int NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON $s.ev (at);
SELECT counter.track('${s}_t', '$s.ev', 'k', 'at');
SELECT counter.rollup_create('${s}_r', '$s.ev', 'at', '{k}');
INSERT INTO $s.ev (k) SELECT i % 7 FROM generate_series(1, 200) i;
CREATE TABLE $s.pe (k int, at timestamptz NOT NULL) PARTITION BY RANGE (at);
SELECT counter.partition_manage('$s.pe', 'at', premake => 2);
INSERT INTO $s.pe VALUES (1, '2001-01-01'), (2, '2001-01-02');   -- into the default partition
GRANT USAGE ON SCHEMA $s TO PUBLIC;
GRANT SELECT ON $s.ev TO PUBLIC;
SQL
done
m_base=$(q "SELECT counter_internal.tracked_table(t, 'base') FROM counter.tracked t WHERE name = 'm_t'")
m_delta=$(q "SELECT counter_internal.tracked_table(t, 'delta') FROM counter.tracked t WHERE name = 'm_t'")
m_def=$(q "SELECT counter.partition_default('m.pe')")
[ -n "$m_base" ] && [ -n "$m_def" ] || fail "mallory's objects are missing"
truth="SELECT string_agg(format('r_t %s %s', k, n), ',' ORDER BY k::text) FROM (SELECT k, count(*) n FROM r.ev GROUP BY k) s"
listed="SELECT string_agg(format('%s %s %s', counter, key, value), ',' ORDER BY key) FROM counter.tracked_values"

# reads: the reader's tracked_values, a superuser's rollup_state and partition_status
check_reads() { # WHAT-MALLORY-DID EXPECTED-WARNING [SETTINGS]
    local out err
    err=$(mktemp)
    out=$(as_role reader -c "SET statement_timeout = '60s'" ${3:+-c "$3"} -c "$listed" 2>"$err") ||
        fail "$1: the reader's tracked_values failed: $(cat "$err")"
    expect "$1: the reader's tracked_values lists its counter, each key's count(*), not mallory's" \
        "$(as_role reader -c "$truth")" "$out"
    contains "$1: a WARNING says why mallory's counter is left out" "$2" "$(cat "$err")"
    out=$(ce_psql -d vl -At -c "SET statement_timeout = '60s'" ${3:+-c "$3"} \
        -c "SELECT string_agg(format('%s %s', name, newest_event_hour IS NOT NULL), ',' ORDER BY name) FROM counter.rollup_state" \
        2>"$err") || fail "$1: a superuser's rollup_state failed: $(cat "$err")"
    expect "$1: rollup_state: the reader's newest hour, mallory's NULL" "m_r f,r_r t" "$out"
    contains "$1: a WARNING says why mallory's newest_event_hour is NULL" "$2" "$(cat "$err")"
    out=$(ce_psql -d vl -At -c "SET statement_timeout = '60s'" ${3:+-c "$3"} \
        -c "SELECT string_agg(format('%s %s', parent, coalesce(rows_in_default::text, 'NULL')), ',' ORDER BY parent::text)
            FROM counter.partition_status" 2>"$err") || fail "$1: a superuser's partition_status failed: $(cat "$err")"
    expect "$1: partition_status: the reader's rows in default, mallory's NULL" "m.pe NULL,r.pe 2" "$out"
    contains "$1: a WARNING says why mallory's rows_in_default is NULL" "$2" "$(cat "$err")"
    rm -f "$err"
}

echo "== 0. nothing held: every object listed"
expect "tracked_values as the reader lists both counters" \
    "$(as_role reader -c "SELECT string_agg(x, ',' ORDER BY x) FROM (
        SELECT format('r_t %s %s', k, count(*)) x FROM r.ev GROUP BY k
        UNION ALL SELECT format('m_t %s %s', k, count(*)) FROM m.ev GROUP BY k) s")" \
    "$(as_role reader -c "SELECT string_agg(format('%s %s %s', counter, key, value), ',' ORDER BY format('%s %s %s', counter, key, value)) FROM counter.tracked_values")"

echo "== 1. mallory holds its tables locked"
as_role mallory -c "BEGIN" -c "LOCK TABLE $m_base, $m_delta, m.m_r, $m_def IN ACCESS EXCLUSIVE MODE" \
    -c "SELECT pg_sleep(600)" >/dev/null 2>&1 &
ce_holders+=($!)
wait_for "SELECT count(*) = 4 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE l.locktype = 'relation' AND l.mode = 'AccessExclusiveLock' AND l.granted AND a.usename = 'mallory'
            AND l.relation IN ('$m_base'::regclass, '$m_delta'::regclass, 'm.m_r'::regclass, '$m_def'::regclass)" 30 ||
    fail "mallory did not get its locks"
echo "ok: mallory holds its 4 tables"
check_reads "locked" "canceling statement due to lock timeout (SQLSTATE 55P03)"
check_reads "locked, the reader's own lock_timeout" "(SQLSTATE 55P03)" \
    "SET counter_ext.view_lock_timeout = 0; SET lock_timeout = '300ms'"
expect "the lock is still mallory's" t \
    "$(q "SELECT EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                        WHERE l.granted AND a.usename = 'mallory' AND l.relation = '$m_base'::regclass)")"
q "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = 'mallory'" >/dev/null
wait_for "SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE usename = 'mallory')" 30 || fail "mallory still runs"

echo "== 2. mallory's tables get a policy that sleeps"
as_role mallory >/dev/null <<SQL
SELECT counter.reconcile('m_t');   -- rows in the state table, for the policy to filter
CREATE FUNCTION m.slow() RETURNS boolean LANGUAGE sql VOLATILE AS 'SELECT pg_sleep(3600) IS NOT NULL';
ALTER TABLE $m_base ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY p ON $m_base USING (m.slow());
ALTER TABLE m.m_r ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY p ON m.m_r USING (m.slow());
ALTER TABLE $m_def ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY p ON $m_def USING (m.slow());
SQL
check_reads "a policy that sleeps" "would be affected by row-level security policy"
expect "no session is running mallory's function" 0 \
    "$(q "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(3600)%' AND pid <> pg_backend_pid()")"
# mallory's own read is its own: its policy applies to it (here the policy
# is dropped so as not to sleep; the state is its counter's again)
as_role mallory -c "DROP POLICY p ON $m_base" -c "ALTER TABLE $m_base NO FORCE ROW LEVEL SECURITY, DISABLE ROW LEVEL SECURITY" >/dev/null
expect "mallory reads its own counter again" "$(as_role mallory -c "SELECT count(*) FROM m.ev WHERE k = 3")" \
    "$(as_role mallory -c "SELECT value FROM counter.tracked_values WHERE counter = 'm_t' AND key = '3'")"

echo "== 3. mallory turns its tables into views that sleep"
as_role mallory >/dev/null <<SQL
DROP POLICY p ON m.m_r;
ALTER TABLE m.m_r NO FORCE ROW LEVEL SECURITY, DISABLE ROW LEVEL SECURITY;
DO \$\$
DECLARE
    t regclass;
    c record;
BEGIN
    FOREACH t IN ARRAY ARRAY['$m_base', 'm.m_r']::regclass[] LOOP
        EXECUTE format('CREATE TABLE m.%I (LIKE %s)', 'copy_' || t::oid, t);
        FOR c IN SELECT conname FROM pg_constraint WHERE conrelid = t AND contype IN ('p', 'u') LOOP
            EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', t, c.conname);
        END LOOP;
        FOR c IN SELECT tgname FROM pg_trigger WHERE tgrelid = t AND NOT tgisinternal LOOP
            EXECUTE format('DROP TRIGGER %I ON %s', c.tgname, t);
        END LOOP;
        FOR c IN SELECT indexrelid::regclass AS i FROM pg_index WHERE indrelid = t LOOP
            EXECUTE format('DROP INDEX %s', c.i);
        END LOOP;
        EXECUTE format('TRUNCATE %s', t);
    END LOOP;
END
\$\$;
SQL
for t in "$m_base" m.m_r; do
    as_role mallory -c "VACUUM $t" >/dev/null   # clears relhastriggers after the DROP TRIGGER
    oid=$(q "SELECT '$t'::regclass::oid")
    rule="CREATE RULE \"_RETURN\" AS ON SELECT TO $t DO INSTEAD SELECT * FROM m.copy_$oid WHERE (SELECT m.slow())"
    if [ "$(q "SHOW server_version_num")" -lt 160000 ]; then
        as_role mallory -c "$rule" >/dev/null
        expect "$t is a view now" v "$(q "SELECT relkind FROM pg_class WHERE oid = $oid")"
    else
        err=$(as_role mallory -c "$rule" 2>&1 || true)
        contains "PostgreSQL 16 and later refuse to turn $t into a view" "cannot have ON SELECT rules" "$err"
    fi
done
if [ "$(q "SHOW server_version_num")" -lt 160000 ]; then
    err=$(mktemp)
    out=$(as_role reader -c "SET statement_timeout = '60s'" -c "$listed" 2>"$err") ||
        fail "a view that sleeps: the reader's tracked_values failed: $(cat "$err")"
    expect "a view that sleeps: the reader's tracked_values lists its counter, not mallory's" \
        "$(as_role reader -c "$truth")" "$out"
    contains "a view that sleeps: a WARNING says why mallory's counter is left out" "is not a table" "$(cat "$err")"
    out=$(ce_psql -d vl -At -c "SET statement_timeout = '60s'" \
        -c "SELECT string_agg(format('%s %s', name, newest_event_hour IS NOT NULL), ',' ORDER BY name) FROM counter.rollup_state" \
        2>"$err") || fail "a view that sleeps: a superuser's rollup_state failed: $(cat "$err")"
    expect "a view that sleeps: rollup_state: the reader's newest hour, mallory's NULL" "m_r f,r_r t" "$out"
    contains "a view that sleeps: a WARNING says why mallory's newest_event_hour is NULL" "is not a table" "$(cat "$err")"
    rm -f "$err"
    expect "no session is running mallory's function" 0 \
        "$(q "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(3600)%' AND pid <> pg_backend_pid()")"
fi

echo "== 4. the setting"
expect "counter_ext.view_lock_timeout defaults to 1s" 1s "$(as_role reader -c "SHOW counter_ext.view_lock_timeout")"
err=$(as_role reader -c "SET counter_ext.view_lock_timeout = -1" 2>&1 || true)
contains "a negative view_lock_timeout is refused" "-1 ms is outside the valid range" "$err"
ce_scan_log "$CE_vl_LOG" || fail "a server process crashed"
echo ok
