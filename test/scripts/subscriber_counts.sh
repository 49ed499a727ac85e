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
pub -c "$table" -c "CREATE INDEX ON ev (t)" \
    -c "INSERT INTO ev SELECT g, g % 10, now() - g * interval '1 second', g % 7 = 0 FROM generate_series(1, 2000) g" \
    -c "CREATE PUBLICATION p FOR TABLE ev"
sub -c "CREATE EXTENSION counter_ext" -c "$table" -c "CREATE INDEX ON ev (t)" -c "CREATE INDEX ON ev (k, t)" \
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
sub -c "DROP SUBSCRIPTION s" >/dev/null
ce_scan_log "$CE_sub_LOG"
echo ok
