#!/usr/bin/env bash
# Issue 21 item 5: trigger-mode rollups of a table Citus hash-distributes,
# grouped by its distribution column (1.8), with a filter calling the
# owner's function, sums and a distinct sketch, and without, on a plain and
# on a partitioned distributed table, owned by an unprivileged role and
# written by another, through the coordinator and directly through a worker.
# The shard trigger keeps each statement's rows and adds them to the
# rollup's colocated shard at the writer's commit (or PREPARE, in Citus's
# two-phase commit): every rollup row equals GROUP BY over the source
# (sketch bytes too) right after each commit, without a refresh, and equals
# the same rollup on one node. Updates and deletes mark hours, which the
# refresh recomputes. A recompute holds the hours on every node: a writer
# whose rows are prepared but not committed when it starts is neither lost
# nor counted twice. Grouped by another column (kind; 1.8), the rollup's
# table is grouped by the distribution column too (colocated, ev_o_by_k) and
# the rollup is the view that sums it over that column: its rows equal
# GROUP BY kind, hour (sketch bytes too) and the same rollup's table on one
# node, after every commit; a name too long for its table is refused.
# citus: whole on 18
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
source test/citus.sh
ce_citus_script_start ct_own ct_app

coord -q <<'SQL'
CREATE ROLE ct_own LOGIN;
CREATE ROLE ct_app LOGIN;
CREATE SCHEMA ct AUTHORIZATION ct_own;
SQL
ce_citus_event_tables ct

long=$(printf 'x%.0s' $(seq 1 59))
out=$(owner -c "\\set VERBOSITY verbose" -c "SELECT counter.rollup_create('$long', 'ct.ev', 'at', '{kind}')" 2>&1) &&
    fail "a trigger-mode rollup grouped by another column with a name too long for its table was made: $out"
grep -q "ERROR:  42622" <<<"$out" && grep -q "HINT:" <<<"$out" || fail "not refused with 42622 and a hint: $out"
n=$(on_nodes_sum "SELECT (SELECT count(*) FROM pg_trigger WHERE tgname ~ '^counter_rollup_')
    + (SELECT count(*) FROM pg_class WHERE relname ~ '^x+' OR relname ~ 'rollup_[0-9]+_dirty')")
[ "$n" = 0 ] || fail "the refused rollup left $n objects"
echo "ok: a trigger-mode rollup grouped by another column whose name is too long for its table is refused (42622, a hint), leaving nothing"

for t in ev ev_one pev pev_one; do
    owner -q -c "SET client_min_messages = warning" \
        -c "SELECT counter.rollup_create('${t}_t', 'ct.$t', 'at', '{k,kind}', sums => '{v}',
                                         distinct_on => '{id}', filter => 'ct.probe(kind)')" \
        -c "SELECT counter.rollup_create('${t}_u', 'ct.$t', 'at', '{k}')" \
        -c "SELECT counter.rollup_create('${t}_o', 'ct.$t', 'at', '{kind}', sums => '{v}',
                                         distinct_on => '{id}', filter => 'ct.probe(kind)')" >/dev/null
done
got=$(coord -tA -c "SELECT string_agg(name || ':' || mode || ':' || distributed, ' ' ORDER BY name) FROM counter.rollups")
[ "$got" = "ev_o:trigger:true ev_one_o:trigger:false ev_one_t:trigger:false ev_one_u:trigger:false ev_t:trigger:true ev_u:trigger:true pev_o:trigger:true pev_one_o:trigger:false pev_one_t:trigger:false pev_one_u:trigger:false pev_t:trigger:true pev_u:trigger:true" ] ||
    fail "rollups made: $got"
# grouped by another column: its table is grouped by k too, colocated; the rollup is a view of the coordinator
got=$(coord -tA -c "SELECT string_agg(format('%s %s %s %s %s', name, rollup_table, rollup_view, group_by, view_group_by), ', ' ORDER BY name)
                    FROM counter.rollups WHERE name ~ '_o$'")
[ "$got" = "ev_o ct.ev_o_by_k ct.ev_o {k,kind} {kind}, ev_one_o ct.ev_one_o  {kind} , pev_o ct.pev_o_by_k ct.pev_o {k,kind} {kind}, pev_one_o ct.pev_one_o  {kind} " ] ||
    fail "rollups grouped by another column: $got"
got=$(coord -tA -c "SELECT string_agg(format('%s %s', t, c.colocationid = e.colocationid), ' ' ORDER BY t)
                    FROM (VALUES ('ev'), ('pev')) v(t)
                    JOIN pg_dist_partition c ON c.logicalrelid = format('ct.%s_o_by_k', t)::regclass
                    JOIN pg_dist_partition e ON e.logicalrelid = format('ct.%s', t)::regclass")
[ "$got" = "ev t pev t" ] || fail "the tables of the rollups grouped by another column are not colocated with their source: $got"
# the INSERT triggers on the shards carry the rollup table and the upsert
n=$(on_nodes_sum "SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE t.tgname ~ '^counter_rollup_[0-9]+_insert_[0-9]+$' AND c.relname ~ '^p?ev_[0-9]+$' AND t.tgnargs = 7")
[ "$n" = $(((8 + 4) * 3)) ] || fail "trigger-mode INSERT triggers on the shards: $n"
echo "ok: trigger-mode rollups grouped by the distribution column and by another column are made on a distributed and a distributed partitioned table, their INSERT triggers on every shard"

deliver() { ce_citus_deliver ct "$@"; }
# Rows of each rollup that differ from GROUP BY over its source, then rows
# that differ between the cluster and one node
check_all() {
    local what=$1 t got
    for t in ev ev_one pev pev_one; do
        got=$(owner -tA <<SQL | grep -v '^$' | tail -1
SET citus.coordinator_aggregation_strategy = 'disabled';   -- the view's GROUP BY pushed down
CREATE TEMP TABLE got_t AS SELECT k, kind, hour, count, sum_v, distinct_id::bytea AS d FROM ct.${t}_t;
CREATE TEMP TABLE want_t AS SELECT k, kind, counter.rollup_hour(at) AS hour, count(*) AS count, sum(v) AS sum_v,
    counter.hll_add_agg(id, 14)::bytea AS d FROM ct.$t WHERE kind <> 'bot' GROUP BY 1, 2, 3;
CREATE TEMP TABLE got_u AS SELECT k, hour, count FROM ct.${t}_u;
CREATE TEMP TABLE want_u AS SELECT k, counter.rollup_hour(at) AS hour, count(*) AS count FROM ct.$t GROUP BY 1, 2;
CREATE TEMP TABLE got_o AS SELECT kind, hour, count, sum_v, distinct_id::bytea AS d FROM ct.${t}_o;
CREATE TEMP TABLE want_o AS SELECT kind, counter.rollup_hour(at) AS hour, count(*) AS count, sum(v) AS sum_v,
    counter.hll_add_agg(id, 14)::bytea AS d FROM ct.$t WHERE kind <> 'bot' GROUP BY 1, 2;
SELECT (SELECT count(*) FROM got_t FULL JOIN want_t USING (k, kind, hour)
        WHERE got_t.count IS DISTINCT FROM want_t.count OR got_t.sum_v IS DISTINCT FROM want_t.sum_v
           OR got_t.d IS DISTINCT FROM want_t.d)
     + (SELECT count(*) FROM got_u FULL JOIN want_u USING (k, hour) WHERE got_u.count IS DISTINCT FROM want_u.count)
     + (SELECT count(*) FROM got_o FULL JOIN want_o USING (kind, hour)
        WHERE got_o.count IS DISTINCT FROM want_o.count OR got_o.sum_v IS DISTINCT FROM want_o.sum_v
           OR got_o.d IS DISTINCT FROM want_o.d)
     || ' ' || (SELECT count(*) FROM got_t) || ' ' || (SELECT count(*) FROM got_u) || ' ' || (SELECT count(*) FROM got_o);
SQL
)
        [ "${got%% *}" = 0 ] || fail "$what: rollups of $t: $got (rows differing from GROUP BY, rows)"
        [ "$(cut -d' ' -f2 <<<"$got")" -gt 100 ] && [ "$(cut -d' ' -f4 <<<"$got")" -gt 2 ] ||
            fail "$what: rollups of $t: too few rows: $got"
    done
    for t in ev pev; do
        got=$(owner -tA <<SQL | grep -v '^$' | tail -1
CREATE TEMP TABLE a AS SELECT k, kind, hour, count, sum_v, distinct_id::bytea AS d FROM ct.${t}_t;
CREATE TEMP TABLE b AS SELECT k, kind, hour, count, sum_v, distinct_id::bytea AS d FROM ct.${t}_one_t;
CREATE TEMP TABLE au AS SELECT * FROM ct.${t}_u;
CREATE TEMP TABLE bu AS SELECT * FROM ct.${t}_one_u;
CREATE TEMP TABLE ao AS SELECT kind, hour, count, sum_v, distinct_id::bytea AS d FROM ct.${t}_o;
CREATE TEMP TABLE bo AS SELECT kind, hour, count, sum_v, distinct_id::bytea AS d FROM ct.${t}_one_o;
SELECT (SELECT count(*) FROM (SELECT * FROM a EXCEPT ALL SELECT * FROM b) x) + (SELECT count(*) FROM (SELECT * FROM b EXCEPT ALL SELECT * FROM a) x)
     + (SELECT count(*) FROM (SELECT * FROM au EXCEPT ALL SELECT * FROM bu) x) + (SELECT count(*) FROM (SELECT * FROM bu EXCEPT ALL SELECT * FROM au) x)
     + (SELECT count(*) FROM (SELECT * FROM ao EXCEPT ALL SELECT * FROM bo) x) + (SELECT count(*) FROM (SELECT * FROM bo EXCEPT ALL SELECT * FROM ao) x)
     + (SELECT count(*) FROM ct.${t}_o_by_k WHERE count = 0);
SQL
)
        [ "$got" = 0 ] || fail "$what: $got rollup rows of $t differ between the cluster and one node"
    done
    echo "ok: $what: every rollup row equals GROUP BY over its source (sketch bytes too), on the cluster and on one node, and the two agree"
}

# inserts: counted at the commit, no refresh
for t in ev ev_one pev pev_one; do
    deliver "$t" 1 3000
    deliver "$t" 2001 5000                # re-delivered: 2001-3000 again
    deliver "$t" 5001 6000 ROLLBACK       # rolled back
done
for t in ev pev; do
    deliver "$t" 6001 7000 COMMIT w1      # directly through a worker node
    deliver "$t" 6501 7500 COMMIT w1      # re-delivered in part
    deliver "$t" 7501 8000 ROLLBACK w1
    deliver "${t}_one" 6001 7500
done
check_all "inserted through the coordinator and a worker (re-delivery, rollback), no refresh"

# COPY, INSERT ... SELECT (pushed down on the cluster), savepoints, several
# statements over many shards in one transaction (Citus's two-phase commit)
for t in ev ev_one pev pev_one; do
    app -q <<SQL
COPY ct.$t FROM STDIN;
900001	3	2026-07-01 12:00:00+00	click	5
900002	4	2026-07-01 23:59:59+00	bot	6
900003	5	2026-07-02 00:00:00+00	view	7
900004	98	2026-07-05 00:00:00+00	click	8
\.
INSERT INTO ct.$t SELECT id + 1000000, k, at + interval '1 hour', kind, v FROM ct.$t WHERE id % 10 = 3;
BEGIN;
INSERT INTO ct.$t SELECT g, g % 97, '2026-07-01 14:00+00', 'click', 1 FROM generate_series(2000001, 2000200) g;
SAVEPOINT s;
INSERT INTO ct.$t SELECT g, g % 97, '2026-07-01 15:00+00', 'view', 2 FROM generate_series(2000201, 2000400) g;
ROLLBACK TO SAVEPOINT s;
INSERT INTO ct.$t SELECT g, g % 97, '2026-07-01 16:00+00', 'view', 3 FROM generate_series(2000401, 2000600) g;
SAVEPOINT s2;
INSERT INTO ct.$t SELECT g, g % 97, '2026-07-01 17:00+00', 'click', 4 FROM generate_series(2000601, 2000700) g;
RELEASE SAVEPOINT s2;
INSERT INTO ct.$t VALUES (2000701, 1, '2026-07-01 18:00+00', 'view', 1), (2000702, 2, '2026-07-01 18:00+00', 'view', 1);
COMMIT;
SQL
done
check_all "COPY, INSERT ... SELECT, savepoints and many shards in one transaction, no refresh"

# UPDATE and DELETE mark their hours; the refresh recomputes them
for t in ev ev_one pev pev_one; do
    app -q <<SQL
UPDATE ct.$t SET kind = 'bot' WHERE id % 7 = 0 AND kind = 'view';
UPDATE ct.$t SET v = v + 1, at = '2026-07-02 03:00+00' WHERE id % 17 = 0;
DELETE FROM ct.$t WHERE id % 13 = 0;
SQL
    owner -q -c "SELECT counter.rollup_refresh_dirty('${t}_t')" -c "SELECT counter.rollup_refresh_dirty('${t}_u')" \
        -c "SELECT counter.rollup_refresh_dirty('${t}_o')" >/dev/null
done
check_all "UPDATE and DELETE, refreshed"
# rollup_totals of the rollup by kind (its view's groups, not its table's) = one node's
for t in ev pev; do
    q="SELECT string_agg(format('%s %s %s %s %s', period_start, key, count, sums, distinct_counts), ',' ORDER BY period_start, key::text)
       FROM counter.rollup_totals('ROLLUP', '2026-07-01', '2026-07-06', 'UTC', 'day')"
    a=$(owner -tA -c "${q//ROLLUP/${t}_o}")
    b=$(owner -tA -c "${q//ROLLUP/${t}_one_o}")
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "rollup_totals of ${t}_o: $a (one node: $b)"
    grep -q '"k"' <<<"$a" && fail "rollup_totals of ${t}_o groups by k: $a"
done
echo "ok: rollup_totals of a rollup grouped by another column equals one node's, grouped by kind only"

# A recompute holds the hours on every node. A writer's rows, added to the
# rollup's shard at its PREPARE (not committed yet) when the recompute
# starts: the recompute waits for it, then counts them once. (Without the
# hold the recompute's snapshot misses them, its upsert waits for the
# writer's row, then overwrites it: the writer's rows are lost.)
read -r k shard < <(coord -tA -F' ' -v w1="$CE_citus_w1_PORT" <<'SQL'
SELECT g, shard_name('ct.ev'::regclass, get_shard_id_for_distribution_column('ct.ev', g))
FROM generate_series(0, 96) g
JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column('ct.ev', g)
JOIN pg_dist_node n ON n.groupid = p.groupid
WHERE n.nodeport = :w1
ORDER BY g LIMIT 1
SQL
)
[ -n "$k" ] && [ -n "$shard" ] || fail "no key of ct.ev on worker 1"
PGOPTIONS="-c citus.override_table_visibility=off" app_w1 -q <<SQL
SET citus.enable_manual_changes_to_shards = on;
BEGIN;
INSERT INTO $shard SELECT g, $k, '2026-07-01 10:20+00', 'view', 1 FROM generate_series(3000001, 3000050) g;
PREPARE TRANSACTION 'ct_writer';
SQL
tmp=$(mktemp -d)
owner -tA -c "SELECT counter.rollup_recompute('ev_t', '2026-07-01', '2026-07-02')" >"$tmp/out" 2>&1 &
rc=$!
# blocked on worker 1 (on the writer's hour; without the hold, on its rollup row)
waiting() { on_node "$CE_citus_w1_PORT" -tA -c "SELECT count(*) FROM pg_locks WHERE NOT granted"; }
for i in $(seq 1 100); do
    [ "$(waiting)" -ge 1 ] && break
    sleep 0.1
done
[ "$(waiting)" -ge 1 ] || fail "the recompute did not wait for the prepared writer on worker 1: $(cat "$tmp/out")"
sleep 1
on_node "$CE_citus_w1_PORT" -q -c "COMMIT PREPARED 'ct_writer'"
wait $rc || fail "the recompute failed: $(cat "$tmp/out")"
rm -rf "$tmp"
app -q -c "INSERT INTO ct.ev_one SELECT g, $k, '2026-07-01 10:20+00', 'view', 1 FROM generate_series(3000001, 3000050) g"
app -q -c "INSERT INTO ct.pev SELECT g, $k, '2026-07-01 10:20+00', 'view', 1 FROM generate_series(3000001, 3000050) g" \
    -c "INSERT INTO ct.pev_one SELECT g, $k, '2026-07-01 10:20+00', 'view', 1 FROM generate_series(3000001, 3000050) g"
check_all "a writer prepared across a recompute"

# A writer never waits for a recompute: a recompute's transaction left open
# holds its hours on every node; a writer through the coordinator into those
# hours commits at once, its hours marked in the dirty log instead of its
# rows added; the refresh after the recompute's commit counts them.
tmp=$(mktemp -d)
mkfifo "$tmp/r"
owner -q <"$tmp/r" >/dev/null &
rr=$!
exec 3>"$tmp/r"
echo "BEGIN; SELECT counter.rollup_recompute('ev_t', '2026-07-01', '2026-07-02');" >&3
held() { on_node "$CE_citus_w1_PORT" -tA -c "SELECT count(*) FROM pg_locks WHERE granted AND locktype = 'object' AND mode = 'ExclusiveLock' AND objsubid = 8"; }
for i in $(seq 1 300); do
    [ "$(held)" -ge 24 ] && break
    sleep 0.1
done
[ "$(held)" -ge 24 ] || fail "the open recompute does not hold the day's hours on worker 1: $(held)"
dirty=$(coord -tA -c "SELECT counter_internal.rollup_dirty_table(r) FROM counter.rollups r WHERE name = 'ev_t'")
app -q -c "SET lock_timeout = '60s'" \
    -c "INSERT INTO ct.ev SELECT g, g % 97, '2026-07-01 11:30+00', 'click', 2 FROM generate_series(5000001, 5000300) g" ||
    fail "the writer did not commit while a recompute held its hour"
marks=$(coord -tA -c "SELECT count(*) FROM $dirty")
[ "$marks" -gt 0 ] || fail "the writer's hour held by a recompute was not marked dirty"
echo "COMMIT;" >&3
exec 3>&-
wait $rr || fail "the open recompute failed"
rm -rf "$tmp"
app -q -c "INSERT INTO ct.ev_one SELECT g, g % 97, '2026-07-01 11:30+00', 'click', 2 FROM generate_series(5000001, 5000300) g"
owner -q -c "SELECT counter.rollup_refresh_dirty('ev_t')" -c "SELECT counter.rollup_refresh_dirty('ev_u')" \
    -c "SELECT counter.rollup_refresh_dirty('ev_o')" >/dev/null
check_all "a writer into hours an open recompute holds (marked, refreshed)"

# writers through the coordinator and a worker while the owner recomputes:
# no writer fails or waits for a recompute (they would deadlock across
# nodes), nothing lost, nothing counted twice after the refresh
writer() { # writer VIA FROM
    local run=app i
    [ "$1" = w1 ] && run=app_w1
    for i in $(seq 0 9); do
        $run -q -c "INSERT INTO ct.ev SELECT g, g % 97, '2026-07-01 10:00+00'::timestamptz + (g % 5) * interval '1 hour', 'view', 1
                    FROM generate_series($2 + $i * 100, $2 + $i * 100 + 99) g" >/dev/null || return 1
    done
}
writer coord 4000000 & w_a=$!
writer w1 4100000 & w_b=$!
for i in 1 2 3; do
    owner -q -c "SELECT counter.rollup_recompute('ev_t', '2026-07-01', '2026-07-02')" \
        -c "SELECT counter.rollup_recompute('ev_u', '2026-07-01', '2026-07-02')" \
        -c "SELECT counter.rollup_recompute('ev_o', '2026-07-01', '2026-07-02')" >/dev/null || fail "a recompute failed"
done
wait $w_a || fail "writer a failed"
wait $w_b || fail "writer b failed"
app -q -c "INSERT INTO ct.ev_one SELECT g, g % 97, '2026-07-01 10:00+00'::timestamptz + (g % 5) * interval '1 hour', 'view', 1
           FROM generate_series(4000000, 4000999) g"
app -q -c "INSERT INTO ct.ev_one SELECT g, g % 97, '2026-07-01 10:00+00'::timestamptz + (g % 5) * interval '1 hour', 'view', 1
           FROM generate_series(4100000, 4100999) g"
owner -q -c "SELECT counter.rollup_refresh_dirty('ev_t')" -c "SELECT counter.rollup_refresh_dirty('ev_u')" \
    -c "SELECT counter.rollup_refresh_dirty('ev_o')" >/dev/null
check_all "writers through the coordinator and a worker during recomputes"

# A recompute in a transaction that wrote the source through several
# connections to one node (Citus opens one per shard for a multi-shard
# write with force_max_query_parallelization): those connections hold their
# hours, kept for the commit; the recompute's hold on that node waits for
# them, a wait Citus cancels as a distributed deadlock (40P01). An error,
# never a hang and never rows counted twice: the transaction rolls back.
st=0
out=$(timeout 120 "$CE_PGBIN/psql" -X -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U ct_own -d postgres -v ON_ERROR_STOP=1 2>&1 <<'SQL'
BEGIN;
SET citus.force_max_query_parallelization = on;
UPDATE ct.ev SET v = v WHERE k < 20;
INSERT INTO ct.ev SELECT g, g % 97, '2026-07-01 10:00+00', 'view', 1 FROM generate_series(4200000, 4200199) g;
SELECT counter.rollup_recompute('ev_u', '2026-07-01', '2026-07-02');
COMMIT;
SQL
) || st=$?
[ $st -ne 124 ] || fail "a recompute after a multi-connection write in its transaction hung: $out"
[ $st -ne 0 ] && grep -q "40P01\|deadlock" <<<"$out" ||
    fail "a recompute after a multi-connection write in its transaction did not fail with 40P01 (exit $st): $out"
check_all "a recompute after a multi-connection write in its transaction (rolled back)"

# the hold: only the rollup table's owner may take it (42501); the writer
# cannot read or write the rollup's shards
out=$(app_w1 -c "SELECT counter_internal.rollup_node_hold('ct.ev_t', '2026-07-01', '2026-07-01 01:00', NULL)" 2>&1) &&
    fail "the writer held the owner's hours: $out"
grep -q "only the owner" <<<"$out" || fail "the hold of another's table: $out"
out=$(app -c "UPDATE ct.ev_t SET count = 0" 2>&1) && fail "the writer wrote the rollup: $out"
out=$(app -c "UPDATE ct.ev_o_by_k SET count = 0" 2>&1) && fail "the writer wrote the table of the rollup by kind: $out"
grep -q "permission denied" <<<"$out" || fail "the writer's write of the table of the rollup by kind: $out"
out=$(app -c "SELECT count(*) FROM ct.ev_o" 2>&1) && fail "the writer read the owner's rollup by kind: $out"
grep -q "permission denied" <<<"$out" || fail "the writer's read of the rollup by kind: $out"
echo "ok: only the rollup table's owner may hold its hours; the writer has no right on the rollup"

# a new filter: the shard triggers carry it (made again); a recompute makes the rows equal
for t in ev ev_one; do
    owner -q -c "SELECT counter.rollup_set_filter('${t}_t', \$\$kind = 'click' AND ct.probe(kind)\$\$)" \
        -c "SELECT counter.rollup_recompute('${t}_t', '2026-07-01', '2026-07-06')" >/dev/null
done
deliver ev 9000001 9000300
deliver ev_one 9000001 9000300
got=$(owner -tA <<'SQL' | grep -v '^$' | tail -1
CREATE TEMP TABLE g1 AS SELECT k, kind, hour, count, sum_v, distinct_id::bytea AS d FROM ct.ev_t;
CREATE TEMP TABLE w1 AS SELECT k, kind, counter.rollup_hour(at) AS hour, count(*) AS count, sum(v) AS sum_v,
    counter.hll_add_agg(id, 14)::bytea AS d FROM ct.ev WHERE kind = 'click' GROUP BY 1, 2, 3;
CREATE TEMP TABLE g2 AS SELECT k, kind, hour, count, sum_v, distinct_id::bytea AS d FROM ct.ev_one_t;
SELECT (SELECT count(*) FROM g1 FULL JOIN w1 USING (k, kind, hour)
        WHERE g1.count IS DISTINCT FROM w1.count OR g1.sum_v IS DISTINCT FROM w1.sum_v OR g1.d IS DISTINCT FROM w1.d)
     + (SELECT count(*) FROM (SELECT * FROM g1 EXCEPT ALL SELECT * FROM g2) x)
     + (SELECT count(*) FROM (SELECT * FROM g2 EXCEPT ALL SELECT * FROM g1) x)
     || ' ' || (SELECT count(*) FROM g1);
SQL
)
[ "${got%% *}" = 0 ] || fail "ev_t with a new filter: $got (rows differing from GROUP BY or one node, rows)"
[ "$(cut -d' ' -f2 <<<"$got")" -gt 50 ] || fail "ev_t with a new filter: too few rows: $got"
for t in ev ev_one; do
    owner -q -c "SELECT counter.rollup_set_filter('${t}_t', 'ct.probe(kind)')" \
        -c "SELECT counter.rollup_recompute('${t}_t', '2026-07-01', '2026-07-06')" >/dev/null
done
check_all "a filter changed (the shard triggers made again) and changed back"

# rollup_drop (in a transaction after a distributed write), DROP OWNED: nothing left
ids=$(coord -tA -c "SELECT string_agg(rollup_id::text, '|') FROM counter.rollups WHERE distributed")
leftovers() {
    on_nodes_sum "SELECT (SELECT count(*) FROM pg_trigger WHERE tgname ~ '^counter_rollup_($1)_')
        + (SELECT count(*) FROM pg_class WHERE relname ~ '^(counter_)?rollup_($1)_dirty' OR relname ~ '^p?ev_(t|u|o|o_by_k)(_[0-9]+)?$')"
}
# ev_u is dropped while a refresh chunk of it runs: the chunk (its steps
# written out) reads the rollup table first (its hold on every node), then
# consumes the dirty marks and writes the table. rollup_drop keeps that
# order for a trigger-mode rollup on Citus (the table, then the marks): it
# waits for the chunk, which commits (the marks first, the two waited for
# each other: 40P01 on the coordinator).
rid=$(ce_citus_dirty_mark ev_u)
ce_citus_drop_beside_chunk ev_u -c "BEGIN" -c "SELECT count(*) FROM ct.ev_u" -c "SELECT pg_sleep(3)" \
    -c "DELETE FROM counter.rollup_dirty WHERE rollup_id = $rid" \
    -c "UPDATE ct.ev_u SET count = count WHERE hour = '2026-07-01 10:00+00'" -c "COMMIT"
owner -q -c "BEGIN" -c "UPDATE ct.ev SET v = v" -c "SELECT counter.rollup_drop('ev_t')" -c "COMMIT" >/dev/null
got=$(owner -tA -c "BEGIN" -c "UPDATE ct.ev SET v = v" -c "SELECT counter.rollup_drop('ev_o')" \
    -c "SHOW citus.enable_unsafe_triggers" -c "COMMIT" | grep -v '^$')
[ "$got" = off ] || fail "rollup_drop left citus.enable_unsafe_triggers in its caller's transaction: $got"
app -q -c "INSERT INTO ct.ev VALUES (9100001, 9, '2026-07-01 10:00+00', 'view', 1)"
coord -q -c "SET client_min_messages = warning" -c "DROP OWNED BY ct_own CASCADE"
n=$(leftovers "$ids")
got=$(coord -tA -c "SELECT count(*) FROM counter.rollups")
[ "$n" = 0 ] && [ "$got" = 0 ] || fail "rollup_drop and DROP OWNED left $n triggers or tables, $got catalog rows"
echo "ok: rollup_drop (after a distributed write in its transaction) and DROP OWNED leave no trigger, table or dirty log on any node"
