#!/usr/bin/env bash
# A tracked counter declared on a logical-replication subscriber counts the
# rows that arrive by replication exactly (issue 14): the apply worker fires
# only row triggers enabled for replicas, which counter.track(..., replicated
# => true) adds. Two clusters: a publisher under insert/update/delete load
# (pgbench, 15 s: CE_REPL_SECONDS) with no counter_ext at all, a subscriber
# with the counter (the worker off: no reconciliation runs). When the
# subscriber has caught up, every key's value equals count(*) there, before
# any reconciliation; a full reconciliation then finds no drift. Rows loaded
# by the initial table copy are counted too. A rollup made with replicated =>
# true ends equal to a GROUP BY from scratch after its refresh; one made
# without it does not (it never sees a replicated row).
# A partitioned subscriber table (issue 24, item 7): pev, plain on the
# publisher, partitioned on the subscriber (managed by
# counter.partition_manage, partitions made later by maintenance, one
# attached later), with a replicated counter and rollup with filters: the
# row triggers cloned onto the partitions count what the apply worker writes
# there, the apply worker never fails, replication goes on, and every key's
# value is count(*). A counter without replicated => true on a table a
# subscription writes (at counter.track, or when the table becomes one's
# target later) is reported loudly: a WARNING and tracked_status /
# rollup_state.replication_warning.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
seconds=${CE_REPL_SECONDS:-15}
work=$(mktemp -d)
trap 'ce_cluster_stop_all; rm -rf "$work"' EXIT
ce_cluster_start pub "wal_level = logical" "counter_ext.enabled = off" || { echo "no publisher"; exit 1; }
ce_cluster_start sub "counter_ext.enabled = off" || { echo "no subscriber"; exit 1; }
pub() { "$CE_PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$CE_pub_DIR" -p "$CE_pub_PORT" -U "$(ce_owner_name)" -d repl "$@"; }
sub() { "$CE_PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$CE_sub_DIR" -p "$CE_sub_PORT" -U "$(ce_owner_name)" -d repl "$@"; }
"$CE_PGBIN/createdb" -h "$CE_pub_DIR" -p "$CE_pub_PORT" -U "$(ce_owner_name)" repl
"$CE_PGBIN/createdb" -h "$CE_sub_DIR" -p "$CE_sub_PORT" -U "$(ce_owner_name)" repl
table="CREATE TABLE ev (id bigint PRIMARY KEY, k int NOT NULL, t timestamptz NOT NULL, hidden boolean NOT NULL DEFAULT false)"
pcols="(id bigint NOT NULL, k int NOT NULL, t timestamptz NOT NULL, hidden boolean NOT NULL DEFAULT false, PRIMARY KEY (id, t))"
pub -c "$table" -c "CREATE INDEX ON ev (t)" -c "CREATE TABLE pev $pcols" \
    -c "INSERT INTO ev SELECT g, g % 10, now() - g * interval '1 second', g % 7 = 0 FROM generate_series(1, 2000) g" \
    -c "INSERT INTO pev SELECT g, g % 10, now() - g * interval '3 seconds', g % 5 = 0 FROM generate_series(1, 600) g" \
    -c "INSERT INTO pev SELECT 600 + g, g % 10, date_trunc('hour', now()) - interval '2 hours' + g * interval '20 seconds', g % 8 = 0
        FROM generate_series(1, 150) g" \
    -c "CREATE PUBLICATION p FOR TABLE ev, pev"
# pev on the subscriber: partitioned, managed; the replicated counter and
# rollup are made before any partition but the first few exist.
sub -c "CREATE EXTENSION counter_ext" -c "CREATE TABLE pev $pcols PARTITION BY RANGE (t)" -c "CREATE INDEX ON pev (t)" \
    -c "SELECT FROM counter.partition_manage('pev', 't', premake => 2, batch_rows => 40)" \
    -c "SELECT FROM counter.track('pev_k', 'pev', 'k', 't', filter => 'NOT hidden', replicated => true)" \
    -c "SELECT FROM counter.rollup_create('pev_hourly', 'pev', 't', '{k}', filter => 'NOT hidden', replicated => true)"
sub -c "$table" -c "CREATE INDEX ON ev (t)" -c "CREATE INDEX ON ev (k, t)" \
    -c "SELECT FROM counter.track('ev', 'ev', 'k', 't', filter => 'NOT hidden', replicated => true)" \
    -c "SELECT FROM counter.rollup_create('ev_hourly', 'ev', 't', '{k}', filter => 'NOT hidden', replicated => true)" \
    -c "SELECT FROM counter.rollup_create('ev_hourly_plain', 'ev', 't', '{k}', filter => 'NOT hidden')" \
    -c "CREATE SUBSCRIPTION s CONNECTION 'host=$CE_pub_DIR port=$CE_pub_PORT dbname=repl user=$(ce_owner_name)' PUBLICATION p"

cat >"$work/insert.sql" <<'SQL'
\set id random(10000, 100000000)
INSERT INTO ev SELECT :id * 10 + g, (random() * 9)::int, now() - random() * interval '1 hour', random() < 0.1
FROM generate_series(0, 4) g ON CONFLICT (id) DO NOTHING;
SQL
cat >"$work/change.sql" <<'SQL'
\set k random(0, 9)
UPDATE ev SET k = (k + 1) % 10, hidden = NOT hidden WHERE id = (SELECT id FROM ev WHERE k = :k ORDER BY id DESC LIMIT 1 OFFSET 3);
DELETE FROM ev WHERE id = (SELECT id FROM ev WHERE k = :k ORDER BY id LIMIT 1 OFFSET 5);
SQL
"$CE_PGBIN/pgbench" -n -h "$CE_pub_DIR" -p "$CE_pub_PORT" -U "$(ce_owner_name)" -c 4 -j 2 -T "$seconds" \
    -f "$work/insert.sql@3" -f "$work/change.sql@1" repl >"$work/pgbench.txt" 2>&1
grep -q "ERROR" "$work/pgbench.txt" && { grep ERROR "$work/pgbench.txt" | head -3; exit 1; }
want=$(pub -At -c "SELECT count(*) || ' ' || sum(id) FROM ev")
for _ in $(seq 1 300); do
    [ "$(sub -At -c "SELECT count(*) || ' ' || sum(id) FROM ev")" = "$want" ] && break
    sleep 0.2
done
got=$(sub -At -c "SELECT count(*) || ' ' || sum(id) FROM ev")
[ "$got" = "$want" ] || { echo "the subscriber did not catch up: $got, publisher $want"; exit 1; }
echo "rows on both sides: ${want% *}"
check="SELECT count(*) FROM (SELECT k, count(*) FILTER (WHERE NOT hidden) AS n FROM generate_series(0, 9) k
       LEFT JOIN ev USING (k) GROUP BY k) x WHERE counter.value('ev', k) <> n"
before=$(sub -At -c "$check")
sub -At -c "SELECT counter.value('ev', k) AS value, (SELECT count(*) FROM ev WHERE ev.k = g.k AND NOT hidden) AS truth
            FROM generate_series(0, 2) AS g(k)" | tr '\n' ' '; echo
drift=$(sub -At -c "SELECT drift_positive - drift_negative FROM counter.reconcile('ev', all_keys => true)")
after=$(sub -At -c "$check")
echo "keys not equal to count(*): $before before any reconciliation, $after after; drift found by a full run: $drift"
[ "$before" = 0 ] && [ "$after" = 0 ] && [ "$drift" = 0 ] || exit 1
# The rollups: the replicated one's row triggers marked the hours the apply
# worker wrote; its refresh (the job's work, called here: the worker is off)
# makes it equal to a GROUP BY from scratch. The one made without
# replicated => true saw nothing of it.
rollup_diff() { # ROLLUP: rows that differ from GROUP BY, either way
    sub -At -c "SELECT count(*) FROM (
        (SELECT k, date_trunc('hour', t) AS hour, count(*) AS count FROM ev WHERE NOT hidden GROUP BY 1, 2
         EXCEPT SELECT k, hour, count FROM public.$1 WHERE count > 0)
        UNION ALL
        (SELECT k, hour, count FROM public.$1 WHERE count > 0
         EXCEPT SELECT k, date_trunc('hour', t), count(*) FROM ev WHERE NOT hidden GROUP BY 1, 2)) d"
}
sub -c "SELECT counter.rollup_refresh_dirty('ev_hourly'), counter.rollup_refresh_dirty('ev_hourly_plain')" >/dev/null
hours=$(sub -At -c "SELECT count(DISTINCT date_trunc('hour', t)) FROM ev")
with=$(rollup_diff ev_hourly)
without=$(rollup_diff ev_hourly_plain)
echo "rollup rows not equal to GROUP BY ($hours hours): $with with replicated => true, $without without"
[ "$with" = 0 ] || exit 1
[ "$without" -gt 0 ] || { echo "the rollup without replicated => true counted replicated rows: the test proves nothing"; exit 1; }

# --- pev: the partitioned subscriber table (issue 24, item 7) ---
fail() { echo "FAILED: $*"; exit 1; }
pcheck="SELECT count(*) FROM (SELECT k, count(*) FILTER (WHERE NOT hidden) AS n FROM generate_series(0, 9) k
        LEFT JOIN pev USING (k) GROUP BY k) x WHERE counter.value('pev_k', k) <> n"
# The initial copy of pev went through the partitions' row triggers.
want=$(pub -At -c "SELECT count(*) || ' ' || sum(id) FROM pev")
for _ in $(seq 1 150); do
    [ "$(sub -At -c "SELECT count(*) || ' ' || sum(id) FROM pev")" = "$want" ] && break
    sleep 0.2
done
[ "$(sub -At -c "SELECT count(*) || ' ' || sum(id) FROM pev")" = "$want" ] ||
    fail "the initial copy of pev did not arrive ($(grep -m1 'ERROR' "$CE_sub_LOG"))"
[ "$(sub -At -c "$pcheck")" = 0 ] || fail "pev: after the initial copy, keys whose value is not count(*): $(sub -At -c "$pcheck")"
# A counter without replicated => true on a table the subscription writes:
# counter.track says so.
warned=$(sub -c "SELECT FROM counter.track('pev_plain', 'pev', 'k', 't')" 2>&1 >/dev/null)
grep -q 'WARNING:.*public.pev is written by logical replication (subscription s)' <<<"$warned" ||
    fail "counter.track on a subscription's table without replicated => true did not warn: $warned"
warned=$(sub -c "SELECT FROM counter.rollup_create('pev_hourly_plain', 'pev', 't', '{k}')" 2>&1 >/dev/null)
grep -q 'WARNING:.*rollup "pev_hourly_plain": public.pev is written by logical replication' <<<"$warned" ||
    fail "counter.rollup_create on a subscription's table without replicated => true did not warn: $warned"
# Partitions made later by maintenance (hours ahead), and one attached later.
parts_before=$(sub -At -c "SELECT count(*) FROM pg_partition_tree('pev') WHERE isleaf")
sub -c "SELECT FROM counter.partition_maintain('pev', as_of => now() + interval '6 hours')" \
    -c "CREATE TABLE pev_y2000 (id bigint NOT NULL, k int NOT NULL, t timestamptz NOT NULL, hidden boolean NOT NULL DEFAULT false)" \
    -c "ALTER TABLE pev ATTACH PARTITION pev_y2000 FOR VALUES FROM ('2000-01-01') TO ('2000-01-02')" >/dev/null
parts_after=$(sub -At -c "SELECT count(*) FROM pg_partition_tree('pev') WHERE isleaf")
[ "$parts_after" -gt $((parts_before + 1)) ] || fail "maintenance made no partition ($parts_before, then $parts_after)"
# It also moved the rows of two hours ago out of the default partition (in
# replica mode, in staged batches): the counters count no move.
[ "$(sub -At -c "SELECT count(*) FROM pev_default WHERE t < date_trunc('hour', now()) - interval '1 hour'")" = 0 ] &&
    [ "$(sub -At -c "SELECT count(*) FROM pev WHERE t < date_trunc('hour', now()) - interval '1 hour'
                     AND tableoid <> 'pev_default'::regclass")" = 150 ] || fail "maintenance did not drain the default partition"
[ "$(sub -At -c "$pcheck")" = 0 ] || fail "pev: after the drain, keys whose value is not count(*): $(sub -At -c "$pcheck")"
# A table that becomes a subscription's target after its counter was made.
sub -c "CREATE TABLE late (id bigint PRIMARY KEY, k int NOT NULL, t timestamptz NOT NULL)" -c "CREATE INDEX ON late (t)"
warned=$(sub -c "SELECT FROM counter.track('late_k', 'late', 'k', 't')" 2>&1 >/dev/null)
[ -z "$warned" ] || fail "counter.track on a table no subscription writes said: $warned"
pub -c "CREATE TABLE late (id bigint PRIMARY KEY, k int NOT NULL, t timestamptz NOT NULL)" \
    -c "INSERT INTO late SELECT g, g % 3, now() - interval '1 hour' FROM generate_series(1, 30) g" \
    -c "ALTER PUBLICATION p ADD TABLE late"
sub -c "ALTER SUBSCRIPTION s REFRESH PUBLICATION"
# The publisher writes every kind of row into pev: into the partitions made
# at registration, the ones maintenance made later, the attached one and the
# default; hidden rows (the filter); updates that move rows between
# partitions; deletes.
pub -c "INSERT INTO pev SELECT 1000 + g, g % 10, now() - (g % 50) * interval '1 minute', g % 4 = 0 FROM generate_series(1, 400) g" \
    -c "INSERT INTO pev SELECT 2000 + g, g % 10, now() + interval '4 hours' + g * interval '1 second', g % 6 = 0
        FROM generate_series(1, 300) g" \
    -c "INSERT INTO pev SELECT 3000 + g, g % 10, '2000-01-01 10:00+00'::timestamptz + g * interval '1 second', g % 3 = 0
        FROM generate_series(1, 200) g" \
    -c "INSERT INTO pev SELECT 4000 + g, g % 10, now() - interval '3 days' + g * interval '1 second', false
        FROM generate_series(1, 50) g" \
    -c "UPDATE pev SET k = (k + 3) % 10, hidden = NOT hidden WHERE id % 11 = 0" \
    -c "UPDATE pev SET t = '2000-01-01 20:00+00'::timestamptz + id * interval '1 second' WHERE id % 13 = 0 AND id < 3000" \
    -c "UPDATE pev SET t = now() + interval '5 hours' WHERE id % 17 = 0 AND id > 3000" \
    -c "DELETE FROM pev WHERE id % 19 = 0"
# Replication goes on: a row written last arrives.
pub -c "INSERT INTO pev VALUES (999999, 1, now(), false)"
for _ in $(seq 1 300); do
    [ "$(sub -At -c "SELECT count(*) FROM pev WHERE id = 999999")" = 1 ] && break
    sleep 0.2
done
[ "$(sub -At -c "SELECT count(*) FROM pev WHERE id = 999999")" = 1 ] ||
    fail "replication stopped: the last row never arrived (apply worker: $(grep -m1 'ERROR' "$CE_sub_LOG"))"
want=$(pub -At -c "SELECT count(*) || ' ' || sum(id) FROM pev")
got=$(sub -At -c "SELECT count(*) || ' ' || sum(id) FROM pev")
[ "$got" = "$want" ] || fail "pev: the subscriber has $got, the publisher $want"
spread=$(sub -At -c "SELECT count(DISTINCT tableoid) FROM pev")
attached=$(sub -At -c "SELECT count(*) FROM pev_y2000")
later=$(sub -At -c "SELECT count(*) FROM pev WHERE t > now() + interval '3 hours'")
echo "pev: ${want% *} rows in $spread partitions ($attached in the attached one, $later in partitions maintenance made later)"
[ "$attached" -gt 0 ] && [ "$later" -gt 0 ] || fail "the rows did not reach the partitions made or attached later"
# The apply worker never failed.
errors=$(sub -At -c "SELECT coalesce(sum(apply_error_count + sync_error_count), 0) FROM pg_stat_subscription_stats")
grep -q "ERROR" "$CE_sub_LOG" && { grep "ERROR" "$CE_sub_LOG" | head -3; fail "errors in the subscriber's log"; }
[ "$errors" = 0 ] || fail "the apply or sync workers failed $errors times"
# Every key's value is count(*), before any reconciliation.
sub -At -c "SELECT k, counter.value('pev_k', k), (SELECT count(*) FROM pev WHERE pev.k = g.k AND NOT hidden)
            FROM generate_series(0, 2) AS g(k)" | tr '\n' ' '; echo
[ "$(sub -At -c "$pcheck")" = 0 ] || fail "pev: keys whose value is not count(*): $(sub -At -c "$pcheck")"
drift=$(sub -At -c "SELECT drift_positive - drift_negative FROM counter.reconcile('pev_k', all_keys => true)")
[ "$drift" = 0 ] || fail "pev: a full reconciliation found drift $drift"
sub -c "SELECT counter.rollup_refresh_dirty('pev_hourly')" >/dev/null
pdiff=$(sub -At -c "SELECT count(*) FROM (
        (SELECT k, date_trunc('hour', t) AS hour, count(*) AS count FROM pev WHERE NOT hidden GROUP BY 1, 2
         EXCEPT SELECT k, hour, count FROM public.pev_hourly WHERE count > 0)
        UNION ALL
        (SELECT k, hour, count FROM public.pev_hourly WHERE count > 0
         EXCEPT SELECT k, date_trunc('hour', t), count(*) FROM pev WHERE NOT hidden GROUP BY 1, 2)) d")
[ "$pdiff" = 0 ] || fail "pev: $pdiff rollup rows are not GROUP BY of the rows"
# The counters that miss replicated rows say so: in tracked_status and
# rollup_state, and at each reconciliation ('late' became a target later).
warned=$(sub -c "SELECT FROM counter.reconcile('late_k')" 2>&1 >/dev/null)
grep -q 'WARNING:.*tracked counter "late_k": public.late is written by logical replication (subscription s)' <<<"$warned" ||
    fail "a reconciliation of a counter whose table became a subscription's target did not warn: $warned"
flagged=$(sub -At -c "SELECT string_agg(counter, ',' ORDER BY counter) FROM counter.tracked_status WHERE replication_warning IS NOT NULL")
[ "$flagged" = "late_k,pev_plain" ] || fail "tracked_status.replication_warning flags '$flagged', not late_k,pev_plain"
flagged=$(sub -At -c "SELECT string_agg(name, ',' ORDER BY name) FROM counter.rollup_state WHERE replication_warning IS NOT NULL")
[ "$flagged" = "ev_hourly_plain,pev_hourly_plain" ] ||
    fail "rollup_state.replication_warning flags '$flagged', not ev_hourly_plain,pev_hourly_plain"
# A partition of another table is not a partition of the source: the
# counter's and the rollup's row triggers copied onto one are refused, and
# count nothing.
ids=$(sub -At -c "SELECT (SELECT counter_id FROM counter.tracked WHERE name = 'pev_k') || ' ' ||
                         (SELECT rollup_id FROM counter.rollups WHERE name = 'pev_hourly')")
before=$(sub -At -c "SELECT counter.value('pev_k', 1) || ' ' || (SELECT count(*) FROM counter.rollup_dirty)")
sub -c "CREATE TABLE other (LIKE pev) PARTITION BY RANGE (t)" \
    -c "CREATE TABLE other_p PARTITION OF other FOR VALUES FROM (MINVALUE) TO (MAXVALUE)" \
    -c "CREATE TRIGGER copied_fold AFTER INSERT ON other_p FOR EACH ROW EXECUTE FUNCTION counter_internal.tracked_fold('${ids% *}')" \
    -c "CREATE TRIGGER copied_rollup AFTER INSERT ON other FOR EACH ROW EXECUTE FUNCTION counter_internal.rollup_trigger('${ids#* }')" \
    -c "ALTER TABLE other_p ENABLE ALWAYS TRIGGER copied_fold" -c "ALTER TABLE other ENABLE ALWAYS TRIGGER copied_rollup"
refused=$(sub -c "INSERT INTO other VALUES (1, 1, now(), false)" 2>&1 >/dev/null || true)
grep -q 'ERROR:  the trigger on other_p names tracked counter "pev_k", whose source is public.pev' <<<"$refused" ||
    fail "a tracked counter's trigger on a partition of another table: $refused"
sub -c "DROP TRIGGER copied_fold ON other_p"
refused=$(sub -c "INSERT INTO other VALUES (1, 1, now(), false)" 2>&1 >/dev/null || true)
grep -q 'ERROR:  trigger copied_rollup on public.other_p belongs to rollup' <<<"$refused" ||
    fail "a rollup's trigger on a partition of another table: $refused"
[ "$(sub -At -c "SELECT counter.value('pev_k', 1) || ' ' || (SELECT count(*) FROM counter.rollup_dirty)")" = "$before" ] ||
    fail "the refused triggers changed the counter or the rollup"
sub -c "DROP TABLE other"
# What any role may read: the views and the function work for a role with
# no rights (and show it no other role's counter).
seen=$(sub -At -c "CREATE ROLE nobody_here" -c "SET ROLE nobody_here" \
           -c "SELECT (SELECT count(*) FROM counter.tracked_status) + (SELECT count(*) FROM counter.rollup_state)" \
           -c "SELECT counter.replication_warning('public.pev', false) IS NOT NULL" | tr '\n' ' ')
[ "$seen" = "0 t " ] || fail "as a role with no rights: $seen (want 0 rows and a warning)"
echo "warned: track, rollup_create, reconcile of a table that became a target later; flagged in tracked_status and rollup_state"

sub -c "DROP SUBSCRIPTION s" >/dev/null
ce_scan_log "$CE_sub_LOG"
echo ok
