#!/usr/bin/env bash
# Shares of the buffered counters' shared table (issue 24, item 3): in a
# cluster with a small table (counter_ext.buffer_entries = 2048: 4 entries
# reserved per (database, owner) share, one share holds at most 388) and no
# worker (nobody flushes: the entries of the owner who fills its share stay),
# an ordinary role 'alice' inserts 2,000 distinct keys into her own buffered
# counter. Then 'bob' in the same database and 'carol' in another one still
# get every add buffered (their overflow counts stay 0), alice's own adds past
# her share went the direct path (and are counted), counter.buffered shows
# each role only its own counters and its own figures, and after a flush
# every key of every counter equals count(*).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

trap 'ce_cluster_stop_all' EXIT
ce_cluster_start bshare "counter_ext.enabled = off" "counter_ext.buffer_entries = 2048" ||
    { echo "cannot start the cluster"; exit 1; }
ce_cluster_use bshare
"$CE_PGBIN/createdb" shared1
"$CE_PGBIN/createdb" shared2

for db in shared1 shared2; do
    ce_psql -d $db -c "CREATE EXTENSION counter_ext"
done
ce_psql -d shared1 <<'SQL'
CREATE ROLE alice LOGIN; CREATE ROLE bob LOGIN; CREATE ROLE carol LOGIN;
GRANT CREATE ON SCHEMA public TO alice, bob, carol;
SQL
ce_psql -d shared2 -c "GRANT CREATE ON SCHEMA public TO carol"

mk() { # mk DB ROLE TABLE
    ce_psql -d "$1" -U "$2" <<SQL
CREATE TABLE $3 (k bigint NOT NULL, t timestamptz NOT NULL DEFAULT '2024-01-01 10:00+00');
SELECT counter.track('$3', '$3', 'k', 't', buffered => true);
SQL
}
mk shared1 alice a_ev
mk shared1 bob b_ev
mk shared2 carol c_ev

# alice: 2,000 distinct keys in one transaction and 2,000 more in small ones
ce_psql -d shared1 -U alice -c "INSERT INTO a_ev (k) SELECT g FROM generate_series(1, 2000) g"
for i in 0 1 2 3; do
    ce_psql -d shared1 -U alice -c "INSERT INTO a_ev (k) SELECT g FROM generate_series(2001 + $i * 500, 2500 + $i * 500) g"
done
a_over=$(ce_psql -At -d shared1 -U alice -c "SELECT overflows FROM counter.buffered WHERE counter = 'a_ev'")
a_entries=$(ce_psql -At -d shared1 -U alice -c "SELECT entries FROM counter.buffered WHERE counter = 'a_ev'")
echo "alice: $a_entries entries buffered, $a_over adds past her share"
fail=0
[ "$a_entries" -le 388 ] || { echo "alice holds more than her share: $a_entries"; fail=1; }
[ "$a_over" -gt 0 ] || { echo "alice never reached her share"; fail=1; }

# bob (same database) and carol (another one): 300 distinct keys each, all buffered
ce_psql -d shared1 -U bob -c "INSERT INTO b_ev (k) SELECT g FROM generate_series(1, 300) g"
ce_psql -d shared2 -U carol -c "INSERT INTO c_ev (k) SELECT g FROM generate_series(1, 300) g"
b=$(ce_psql -At -d shared1 -U bob -c "SELECT entries || ' ' || overflows FROM counter.buffered WHERE counter = 'b_ev'")
c=$(ce_psql -At -d shared2 -U carol -c "SELECT entries || ' ' || overflows FROM counter.buffered WHERE counter = 'c_ev'")
echo "bob: $b (entries, overflows); carol: $c"
[ "$b" = "300 0" ] || { echo "bob's adds did not all find room: $b"; fail=1; }
[ "$c" = "300 0" ] || { echo "carol's adds did not all find room: $c"; fail=1; }

# each role sees only its own counters in counter.buffered
seen=$(ce_psql -At -d shared1 -U bob -c "SELECT string_agg(counter, ',') FROM counter.buffered")
[ "$seen" = "b_ev" ] || { echo "bob sees: $seen"; exit 1; }
seen=$(ce_psql -At -d shared1 -U alice -c "SELECT string_agg(counter, ',') FROM counter.buffered")
[ "$seen" = "a_ev" ] || { echo "alice sees: $seen"; exit 1; }

# after a flush (each owner its own), every key equals count(*)
check() { # check DB ROLE TABLE
    ce_psql -At -d "$1" -U "$2" -c "SELECT counter.flush('$3')" >/dev/null
    local bad
    bad=$(ce_psql -At -d "$1" -U "$2" <<SQL
WITH truth AS (SELECT k, count(*) AS n FROM $3 GROUP BY k)
SELECT count(*) FROM counter.values_of('$3', (SELECT array_agg(k) FROM truth)) v
JOIN truth t ON t.k = v.key WHERE v.value <> t.n;
SQL
)
    [ "$bad" = 0 ] || { echo "$3: $bad keys differ from count(*)"; exit 1; }
    local left
    left=$(ce_psql -At -d "$1" -U "$2" -c "SELECT entries FROM counter.buffered WHERE counter = '$3'")
    echo "$3 exact after a flush ($left entries left)"
}
check shared1 alice a_ev
check shared1 bob b_ev
check shared2 carol c_ev
[ "$fail" = 0 ] || exit 1

# room_for_300 ROLE TABLE FIRST WHY: 300 new keys from FIRST on are all
# buffered (the owner's overflow count does not move)
room_for_300() {
    local q="SELECT overflows FROM counter.buffered WHERE counter = '$2'" before after
    before=$(ce_psql -At -d shared1 -U "$1" -c "$q")
    ce_psql -d shared1 -U "$1" -c "INSERT INTO $2 (k) SELECT g FROM generate_series($3, $3 + 299) g"
    after=$(ce_psql -At -d shared1 -U "$1" -c "$q")
    [ "$before" = "$after" ] || { echo "$4: $before -> $after"; exit 1; }
    check shared1 "$1" "$2"
}

# once flushed (a second flush lets go of what the first one wrote), alice's
# share is free again: her adds of new keys are buffered
ce_psql -At -d shared1 -U alice -c "SELECT counter.flush('a_ev')" >/dev/null
room_for_300 alice a_ev 10001 "alice's adds still overflow after her flush"

# Entries no flush of theirs will visit (doc/reference/tracked.md, "Lists of
# changed entries"): bob fills his share (388 entries, then direct writes)
# and untracks that counter, whose last claim leaves written marks on all
# 388 (on a list nobody takes now); a sweep (one flush of the cluster every
# 8 intervals of counter_ext.flush_interval, 200 ms here) lets go of them, so
# his next counter's new keys are all buffered.
ce_psql -At -c "ALTER SYSTEM SET counter_ext.flush_interval = '200ms'" -c "SELECT pg_reload_conf()" >/dev/null
ce_psql -At -d shared1 -U bob -c "SELECT counter.flush('b_ev')" >/dev/null # his 300 keys' marks go
ce_psql -d shared1 -U bob -c "INSERT INTO b_ev (k) SELECT g FROM generate_series(5001, 7000) g"
held=$(ce_psql -At -d shared1 -U bob -c "SELECT entries FROM counter.buffered WHERE counter = 'b_ev'")
[ "$held" = 388 ] || { echo "bob's share is not full: $held entries"; exit 1; }
ce_psql -d shared1 -U bob -c "SELECT counter.untrack('b_ev')" >/dev/null
mk shared1 bob b2_ev
sleep 2 # past 8 intervals
ce_psql -At -d shared1 -U bob -c "SELECT counter.flush('b2_ev')" >/dev/null
room_for_300 bob b2_ev 1 "bob's dropped counter's entries still hold his share"
echo "a dropped counter's entries let go by a sweep"
ce_scan_log "$CE_bshare_LOG"
echo ok
