#!/usr/bin/env bash
# Issue 21 item 5: deferred rollups of a table Citus hash-distributes,
# grouped by its distribution column, with a filter calling the owner's
# function, sums and distinct sketches, and without, and grouped by another
# column (with all three), on a plain and on a partitioned distributed
# table, owned by an unprivileged role and written by another. The dirty log
# is distributed colocated with the source, and the rollup table too when
# it is grouped by the distribution column (else it is the coordinator's);
# the triggers run on the shards (marking the hours of each statement's rows
# on the shard of the rows, in the writer's transaction), and the refresh is
# pushed down (grouped by another column: its GROUP BY). The same rows go to plain
# tables on the coordinator (one node) with the same rollups. Rows written
# through the coordinator and directly through a worker node, by INSERT
# (re-delivered, rolled back, late), COPY, INSERT ... SELECT, UPDATE and
# DELETE: after a refresh every rollup row equals GROUP BY over the source
# (sketch bytes included) and the rollup rows of one node. Unsupported
# forms are refused at rollup_create and create_distributed_table, leaving
# nothing; rollup_drop, DROP OWNED and DROP EXTENSION leave nothing on any
# node.
# citus: whole on 18
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
source test/citus.sh
ce_citus_script_start cr_own cr_app

coord -q <<'SQL'
CREATE ROLE cr_own LOGIN;
CREATE ROLE cr_app LOGIN;
CREATE SCHEMA cr AUTHORIZATION cr_own;
SQL
# the same tables twice: distributed (the cluster) and plain (one node)
ce_citus_event_tables cr
{ owner -q <<'SQL'
SET client_min_messages = warning;
CREATE TABLE cr.ref (id bigint NOT NULL, k bigint NOT NULL, at timestamptz NOT NULL);
SELECT create_reference_table('cr.ref');
GRANT SELECT, INSERT, UPDATE, DELETE ON cr.ref TO cr_app;
SQL
} >/dev/null

# What is not supported is refused when made (0A000, with a hint), and
# leaves nothing: no catalog row, no table, no trigger on any node
refused() { # refused WHAT SQL
    local out
    out=$(owner -c "SET client_min_messages = warning" -c "\\set VERBOSITY verbose" -c "$2" 2>&1) &&
        fail "$1 was made: $out"
    grep -q "ERROR:  0A000" <<<"$out" || fail "$1: not refused with 0A000: $out"
    grep -q "HINT:" <<<"$out" || fail "$1: refused without a hint: $out"
}
refused "a buffered rollup" "SELECT counter.rollup_create('x', 'cr.ev', 'at', '{k}', mode => 'buffered')"
refused "a buffered rollup grouped by another column" \
    "SELECT counter.rollup_create('x', 'cr.ev', 'at', '{kind}', mode => 'buffered')"
refused "a replicated rollup" "SELECT counter.rollup_create('x', 'cr.ev', 'at', '{k}', mode => 'deferred', replicated => true)"
refused "a rollup of a partition" "SELECT counter.rollup_create('x', 'cr.pev_a', 'at', '{k}', mode => 'deferred')"
owner -q -c "CREATE FUNCTION cr.vol(k cr.kind) RETURNS boolean LANGUAGE sql VOLATILE AS 'SELECT k <> ''bot''';"
refused "a filter calling a VOLATILE function" \
    "SELECT counter.rollup_create('x', 'cr.ev', 'at', '{k}', mode => 'deferred', filter => 'cr.vol(kind)')"
refused "a rollup of a reference table" "SELECT counter.rollup_create('x', 'cr.ref', 'at', '{k}', mode => 'deferred')"
# a table with a rollup is not distributed (drop, distribute, make it again)
owner -q -c "CREATE TABLE cr.late_src (id bigint NOT NULL, k bigint NOT NULL, at timestamptz NOT NULL)" \
    -c "SELECT counter.rollup_create('late', 'cr.late_src', 'at', '{k}', mode => 'deferred')" >/dev/null
refused "create_distributed_table of a rollup's source" "SET citus.enable_unsafe_triggers = on; SELECT create_distributed_table('cr.late_src', 'k')"
refused "create_distributed_table of a rollup's table" "SET citus.enable_unsafe_triggers = on; SELECT create_distributed_table('cr.late', 'k')"
owner -q -c "SELECT counter.rollup_drop('late')" -c "DROP TABLE cr.late_src" >/dev/null
n=$(on_nodes_sum "SELECT (SELECT count(*) FROM pg_trigger WHERE tgname ~ '^counter_rollup_')
    + (SELECT count(*) FROM pg_class WHERE relname ~ '^(x|late)(_[0-9]+)?$' OR relname ~ 'rollup_[0-9]+_dirty')")
got=$(coord -tA -c "SELECT count(*) FROM counter.rollups")
[ "$n" = 0 ] && [ "$got" = 0 ] || fail "refused rollups left $n objects and $got catalog rows"
app -q -c "INSERT INTO cr.ev VALUES (0, 0, '2026-07-01 00:00+00', 'view', 0)" -c "DELETE FROM cr.ev WHERE id = 0"
echo "ok: buffered mode (grouped by the distribution column or not), replicated, a partition, a reference table, and distributing a served table are refused with 0A000 and a hint, leaving nothing on any node"

for t in ev ev_one pev pev_one; do
    owner -q -c "SET client_min_messages = warning" \
        -c "SELECT counter.rollup_create('${t}_r', 'cr.$t', 'at', '{k,kind}', mode => 'deferred', sums => '{v}',
                                         distinct_on => '{id}', filter => 'cr.probe(kind)')" \
        -c "SELECT counter.rollup_create('${t}_n', 'cr.$t', 'at', '{k}', mode => 'deferred')" \
        -c "SELECT counter.rollup_create('${t}_g', 'cr.$t', 'at', '{kind}', mode => 'deferred', sums => '{v}',
                                         distinct_on => '{id}', filter => 'cr.probe(kind)')" >/dev/null
done
got=$(coord -tA -c "SELECT string_agg(name || ':' || distributed, ' ' ORDER BY name) FROM counter.rollups")
[ "$got" = "ev_g:true ev_n:true ev_one_g:false ev_one_n:false ev_one_r:false ev_r:true pev_g:true pev_n:true pev_one_g:false pev_one_n:false pev_one_r:false pev_r:true" ] ||
    fail "rollups made: $got"
# the rollup table and the dirty log are colocated with the source; the triggers are on every shard
got=$(coord -tA <<'SQL'
SELECT count(*) FROM counter.rollups r JOIN pg_dist_partition p ON p.logicalrelid = r.source
JOIN pg_dist_partition t ON t.logicalrelid = r.rollup_table
JOIN pg_dist_partition d ON d.logicalrelid = counter_internal.rollup_dirty_table(r)::regclass
WHERE r.distributed AND t.colocationid = p.colocationid AND d.colocationid = p.colocationid
SQL
)
[ "$got" = 4 ] || fail "rollup tables and dirty logs colocated with their source: $got of 4 rollups"
# grouped by another column (kind): the dirty log is colocated with the
# source, the rollup table is the coordinator's
got=$(coord -tA <<'SQL'
SELECT count(*) FROM counter.rollups r JOIN pg_dist_partition p ON p.logicalrelid = r.source
JOIN pg_dist_partition d ON d.logicalrelid = counter_internal.rollup_dirty_table(r)::regclass
WHERE r.distributed AND r.name LIKE '%\_g' AND d.colocationid = p.colocationid
  AND NOT EXISTS (SELECT FROM pg_dist_partition t WHERE t.logicalrelid = r.rollup_table)
SQL
)
[ "$got" = 2 ] || fail "rollups grouped by kind: dirty log colocated, table on the coordinator: $got of 2"
refused "create_distributed_table of the coordinator's rollup table" "SELECT create_distributed_table('cr.ev_g', 'kind')"
refused "create_reference_table of the coordinator's rollup table" "SELECT create_reference_table('cr.pev_g')"
shard_triggers=$(on_nodes_sum "SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE t.tgname ~ '^counter_rollup_[0-9]+_(insert|delete|update)_[0-9]+$' AND c.relname ~ '^p?ev_[0-9]+$'")
# ev: 8 shards, pev: 4 shards, 3 rollups each, 3 triggers each
[ "$shard_triggers" = $(((8 + 4) * 3 * 3)) ] || fail "rollup triggers on the shards: $shard_triggers"
echo "ok: deferred rollups with and without a filter, grouped by the distribution column or not, are made on a distributed and a distributed partitioned table, dirty log colocated, table colocated when grouped by the distribution column, triggers on every shard"

deliver() { ce_citus_deliver cr "$@"; }
refresh_all() {
    local t
    for t in ev ev_one pev pev_one; do
        owner -q -c "SELECT counter.rollup_refresh_dirty('${t}_r')" -c "SELECT counter.rollup_refresh_dirty('${t}_n')" \
            -c "SELECT counter.rollup_refresh_dirty('${t}_g')" >/dev/null
    done
}
# Rows of rollup t_c that differ from GROUP BY over the source (read into
# temporary tables first: doc/citus.md), and rows that differ from one node's
check_all() {
    local what=$1 t got
    for t in ev ev_one pev pev_one; do
        got=$(owner -tA <<SQL | grep -v '^$' | tail -1
CREATE TEMP TABLE got_r AS SELECT k, kind, hour, count, sum_v, distinct_id::bytea AS d FROM cr.${t}_r;
CREATE TEMP TABLE want_r AS SELECT k, kind, counter.rollup_hour(at) AS hour, count(*) AS count, sum(v) AS sum_v,
    counter.hll_add_agg(id, 14)::bytea AS d FROM cr.$t WHERE kind <> 'bot' GROUP BY 1, 2, 3;
CREATE TEMP TABLE got_n AS SELECT k, hour, count FROM cr.${t}_n;
CREATE TEMP TABLE want_n AS SELECT k, counter.rollup_hour(at) AS hour, count(*) AS count FROM cr.$t GROUP BY 1, 2;
CREATE TEMP TABLE got_g AS SELECT kind, hour, count, sum_v, distinct_id::bytea AS d FROM cr.${t}_g;
CREATE TEMP TABLE want_g AS SELECT kind, counter.rollup_hour(at) AS hour, count(*) AS count, sum(v) AS sum_v,
    counter.hll_add_agg(id, 14)::bytea AS d FROM cr.$t WHERE kind <> 'bot' GROUP BY 1, 2;
SELECT (SELECT count(*) FROM got_r FULL JOIN want_r USING (k, kind, hour)
        WHERE got_r.count IS DISTINCT FROM want_r.count OR got_r.sum_v IS DISTINCT FROM want_r.sum_v
           OR got_r.d IS DISTINCT FROM want_r.d)
     + (SELECT count(*) FROM got_n FULL JOIN want_n USING (k, hour) WHERE got_n.count IS DISTINCT FROM want_n.count)
     + (SELECT count(*) FROM got_g FULL JOIN want_g USING (kind, hour)
        WHERE got_g.count IS DISTINCT FROM want_g.count OR got_g.sum_v IS DISTINCT FROM want_g.sum_v
           OR got_g.d IS DISTINCT FROM want_g.d)
     || ' ' || (SELECT count(*) FROM got_r) || ' ' || (SELECT count(*) FROM want_n) || ' ' || (SELECT count(*) FROM got_g);
SQL
)
        [ "${got%% *}" = 0 ] || fail "$what: rollups of $t: $got (rows differing from GROUP BY, rows)"
        [ "$(cut -d' ' -f2 <<<"$got")" -gt 100 ] || fail "$what: rollups of $t: too few rows: $got"
        [ "$(cut -d' ' -f4 <<<"$got")" -gt 30 ] || fail "$what: rollup ${t}_g: too few rows: $got"
    done
    for t in ev pev; do
        got=$(owner -tA <<SQL | grep -v '^$' | tail -1
CREATE TEMP TABLE a AS SELECT k, kind, hour, count, sum_v, distinct_id::bytea AS d FROM cr.${t}_r;
CREATE TEMP TABLE b AS SELECT k, kind, hour, count, sum_v, distinct_id::bytea AS d FROM cr.${t}_one_r;
CREATE TEMP TABLE an AS SELECT * FROM cr.${t}_n;
CREATE TEMP TABLE bn AS SELECT * FROM cr.${t}_one_n;
CREATE TEMP TABLE ag AS SELECT kind, hour, count, sum_v, distinct_id::bytea AS d FROM cr.${t}_g;
CREATE TEMP TABLE bg AS SELECT kind, hour, count, sum_v, distinct_id::bytea AS d FROM cr.${t}_one_g;
SELECT (SELECT count(*) FROM (SELECT * FROM a EXCEPT ALL SELECT * FROM b) x) + (SELECT count(*) FROM (SELECT * FROM b EXCEPT ALL SELECT * FROM a) x)
     + (SELECT count(*) FROM (SELECT * FROM an EXCEPT ALL SELECT * FROM bn) x) + (SELECT count(*) FROM (SELECT * FROM bn EXCEPT ALL SELECT * FROM an) x)
     + (SELECT count(*) FROM (SELECT * FROM ag EXCEPT ALL SELECT * FROM bg) x) + (SELECT count(*) FROM (SELECT * FROM bg EXCEPT ALL SELECT * FROM ag) x);
SQL
)
        [ "$got" = 0 ] || fail "$what: $got rollup rows of $t differ between the cluster and one node"
    done
    echo "ok: $what: every rollup row equals GROUP BY over its source (sketch bytes too), on the cluster and on one node, and the two agree"
}

for t in ev ev_one pev pev_one; do
    deliver "$t" 1 3000
    deliver "$t" 2001 5000                # re-delivered: 2001-3000 again
    deliver "$t" 5001 6000 ROLLBACK       # rolled back
done
# directly through a worker node (Citus's metadata is there): the cluster's
# tables; the same rows through the coordinator for one node
for t in ev pev; do
    deliver "$t" 6001 7000 COMMIT w1
    deliver "$t" 6501 7500 COMMIT w1      # re-delivered in part
    deliver "$t" 7501 8000 ROLLBACK w1
    deliver "${t}_one" 6001 7500
done
refresh_all
check_all "written through the coordinator and a worker (INSERT, re-delivery, rollback)"
# the recompute of a distributed rollup (as the refresh) is pushed down: the
# shards' statements read the source's shard and write the rollup's shard
out=$(owner -c "SET citus.log_remote_commands = on" -c "SET client_min_messages = log" \
    -c "SELECT counter.rollup_recompute('ev_r', '2026-07-01', '2026-07-03')" 2>&1) || fail "the recompute of ev_r failed: $out"
n=$(grep -c "INSERT INTO cr.ev_r_[0-9]* AS r .*FROM cr.ev_[0-9]* e" <<<"$out" || true)
[ "$n" -ge 8 ] || fail "the refresh's upsert was not pushed down to the 8 shards ($n statements): $out"
grep -q "DELETE FROM cr.ev_r_[0-9]* r .*cr.ev_[0-9]* e" <<<"$out" || fail "the refresh's delete was not pushed down: $out"
echo "ok: the refresh is pushed down to the shards (INSERT ... SELECT and DELETE, shard by shard)"
# grouped by another column: the GROUP BY of the upsert and the DISTINCT of
# the delete run on every shard (only partial sums and sketches, and the
# groups, cross to the coordinator), the rollup table is written there
out=$(owner -c "SET citus.log_remote_commands = on" -c "SET client_min_messages = log" \
    -c "SELECT counter.rollup_recompute('ev_g', '2026-07-01', '2026-07-03')" 2>&1) || fail "the recompute of ev_g failed: $out"
n=$(grep -c "FROM cr.ev_[0-9]* e .*GROUP BY" <<<"$out" || true)
[ "$n" -ge 16 ] || fail "the refresh of ev_g did not group on the 8 shards, for the upsert and the delete ($n statements): $out"
n=$(grep -c "counter.hll_add_agg" <<<"$out" || true)
[ "$n" -ge 8 ] || fail "the refresh of ev_g did not build the sketches on the 8 shards ($n statements): $out"
if grep -E "LOG: .*(INSERT INTO|DELETE FROM) cr.ev_g" <<<"$out"; then
    fail "the refresh of ev_g sent its write to another node: $out"
fi
echo "ok: grouped by another column, the refresh's GROUP BY and sketches run on the shards, and the coordinator's rollup table is written there"

# COPY, INSERT ... SELECT (pushed down on the cluster), UPDATE, DELETE, and
# late events (hours refreshed already), through the coordinator and a worker
for t in ev ev_one pev pev_one; do
    app -q <<SQL
COPY cr.$t FROM STDIN;
900001	3	2026-07-01 12:00:00+00	click	5
900002	4	2026-07-01 23:59:59+00	bot	6
900003	5	2026-07-02 00:00:00+00	view	7
900004	98	2026-07-05 00:00:00+00	click	8
\.
INSERT INTO cr.$t SELECT id + 1000000, k, at + interval '1 hour', kind, v FROM cr.$t WHERE id % 10 = 3;
UPDATE cr.$t SET kind = 'bot' WHERE id % 7 = 0 AND kind = 'view';
UPDATE cr.$t SET v = v + 1, at = '2026-07-02 03:00+00' WHERE id % 17 = 0;
DELETE FROM cr.$t WHERE id % 13 = 0;
-- every event of some groups of the rollups grouped by kind
DELETE FROM cr.$t WHERE kind = 'click' AND at < '2026-07-01 13:00+00';
SQL
done
for t in ev pev; do
    app_w1 -q -c "INSERT INTO cr.$t SELECT g, g % 50, '2026-07-01 10:30+00', 'click', 1 FROM generate_series(8000001, 8000100) g" \
        -c "DELETE FROM cr.$t WHERE id % 19 = 0"
    app -q -c "INSERT INTO cr.${t}_one SELECT g, g % 50, '2026-07-01 10:30+00', 'click', 1 FROM generate_series(8000001, 8000100) g" \
        -c "DELETE FROM cr.${t}_one WHERE id % 19 = 0"
done
refresh_all
check_all "COPY, INSERT ... SELECT, UPDATE, DELETE and late events"

# a writer's transaction open across a refresh: its rows are not there yet,
# its marks stay, the next refresh counts them
tmp=$(mktemp -d)
mkfifo "$tmp/w"
app_w1 -q <"$tmp/w" >/dev/null &
wr=$!
exec 3>"$tmp/w"
echo "BEGIN; INSERT INTO cr.ev VALUES (9000001, 11, '2026-07-01 10:00:20+00', 'view', 3);" >&3
open_writer() { on_node "$CE_citus_w1_PORT" -tA -c "SELECT count(*) FROM pg_stat_activity WHERE usename = 'cr_app' AND state = 'idle in transaction'"; }
for i in $(seq 1 300); do
    [ "$(open_writer)" = 1 ] && break
    sleep 0.1
done
[ "$(open_writer)" = 1 ] || fail "the writer's transaction did not open"
owner -q -c "SELECT counter.rollup_refresh_dirty('ev_r')" -c "SELECT counter.rollup_refresh_dirty('ev_n')" >/dev/null
echo "COMMIT;" >&3
exec 3>&-
wait $wr || fail "the writer failed"
rm -rf "$tmp"
app -q -c "INSERT INTO cr.ev_one VALUES (9000001, 11, '2026-07-01 10:00:20+00', 'view', 3)"
refresh_all
check_all "a writer's transaction open across a refresh"

# the writer cannot touch the dirty log, yet its writes are marked (the shard
# triggers run as the owner); a recompute repairs a damaged rollup table
id=$(coord -tA -c "SELECT rollup_id FROM counter.rollups WHERE name = 'ev_n'")
dirty=$(coord -tA -c "SELECT counter_internal.rollup_dirty_table(r) FROM counter.rollups r WHERE name = 'ev_n'")
out=$(app_w1 -c "SELECT * FROM $dirty LIMIT 1" 2>&1) && fail "the writer read the dirty log: $out"
owner -q <<'SQL'
UPDATE cr.ev_r SET count = count + 5 WHERE k IN (1, 2, 3);
DELETE FROM cr.ev_n WHERE k IN (4, 5);
INSERT INTO cr.ev_n VALUES (6, '2026-06-01 00:00+00', 9);
SQL
got=$(owner -tA -c "SELECT counter.rollup_recompute('ev_r', '2026-07-01', '2026-07-06')")
[ "$got" -gt 0 ] || fail "the recompute of ev_r wrote $got rows"
owner -q -c "SELECT counter.rollup_recompute('ev_n', '2026-06-01', '2026-07-06')" >/dev/null
got=$(owner -tA -c "SELECT counter.rollup_recompute('ev_r', '2026-07-01', '2026-07-06')")
[ "$got" = 0 ] || fail "a second recompute of ev_r wrote $got rows (only rows that differ are written)"
owner -q <<'SQL'
UPDATE cr.pev_g SET count = count + 5, distinct_id = counter.hll_empty() WHERE kind = 'view';
DELETE FROM cr.pev_g WHERE kind = 'click' AND hour < '2026-07-01 12:00+00';
INSERT INTO cr.pev_g VALUES ('bot', '2026-07-01 11:00+00', 9, 9, counter.hll_empty());
SQL
got=$(owner -tA -c "SELECT counter.rollup_recompute('pev_g', '2026-07-01', '2026-07-06')")
[ "$got" -gt 0 ] || fail "the recompute of pev_g wrote $got rows"
got=$(owner -tA -c "SELECT counter.rollup_recompute('pev_g', '2026-07-01', '2026-07-06')")
[ "$got" = 0 ] || fail "a second recompute of pev_g wrote $got rows (only rows that differ are written)"
check_all "damaged, recomputed"
# grouped by another column: a new filter (stored as a tree, printed for the
# shards), recomputed, equals GROUP BY with it and one node; totals agree;
# then the filter of the checks above again
for t in ev ev_one; do
    owner -q -c "SELECT counter.rollup_set_filter('${t}_g', \$\$kind = 'click' AND cr.probe(kind)\$\$)" \
        -c "SELECT counter.rollup_recompute('${t}_g', '2026-07-01', '2026-07-06')" >/dev/null
done
got=$(owner -tA <<'SQL' | grep -v '^$' | tail -1
CREATE TEMP TABLE g1 AS SELECT kind, hour, count, sum_v, distinct_id::bytea AS d FROM cr.ev_g;
CREATE TEMP TABLE w1 AS SELECT kind, counter.rollup_hour(at) AS hour, count(*) AS count, sum(v) AS sum_v,
    counter.hll_add_agg(id, 14)::bytea AS d FROM cr.ev WHERE kind = 'click' GROUP BY 1, 2;
CREATE TEMP TABLE t1 AS SELECT * FROM counter.rollup_totals('ev_g', '2026-07-01', '2026-07-06', 'Europe/Berlin', 'day');
CREATE TEMP TABLE t2 AS SELECT * FROM counter.rollup_totals('ev_one_g', '2026-07-01', '2026-07-06', 'Europe/Berlin', 'day');
SELECT (SELECT count(*) FROM g1 FULL JOIN w1 USING (kind, hour)
        WHERE g1.count IS DISTINCT FROM w1.count OR g1.sum_v IS DISTINCT FROM w1.sum_v OR g1.d IS DISTINCT FROM w1.d)
     + (SELECT count(*) FROM g1 WHERE kind <> 'click')
     + (SELECT count(*) FROM (SELECT * FROM t1 EXCEPT ALL SELECT * FROM t2) x)
     + (SELECT count(*) FROM (SELECT * FROM t2 EXCEPT ALL SELECT * FROM t1) x)
     || ' ' || (SELECT count(*) FROM g1) || ' ' || (SELECT count(*) FROM t1);
SQL
)
[ "${got%% *}" = 0 ] || fail "ev_g with a new filter: $got (rows differing from GROUP BY or one node's totals, rows, totals)"
[ "$(cut -d' ' -f2 <<<"$got")" -gt 10 ] && [ "$(cut -d' ' -f3 <<<"$got")" -gt 2 ] || fail "ev_g with a new filter: too few rows: $got"
for t in ev ev_one; do
    owner -q -c "SELECT counter.rollup_set_filter('${t}_g', 'cr.probe(kind)')" \
        -c "SELECT counter.rollup_recompute('${t}_g', '2026-07-01', '2026-07-06')" >/dev/null
done
check_all "grouped by another column: a filter changed and changed back, recomputed"
# the scheduled job's form of the refresh (CALL, one transaction per day)
app -q -c "INSERT INTO cr.pev VALUES (9000002, 12, '2026-07-02 05:00+00', 'click', 2)" \
    -c "INSERT INTO cr.pev_one VALUES (9000002, 12, '2026-07-02 05:00+00', 'click', 2)"
owner -q -c "CALL counter.rollup_refresh('pev_r', '2026-07-01', '2026-07-03')" \
    -c "CALL counter.rollup_refresh('pev_n', '2026-07-01', '2026-07-03')"
refresh_all
check_all "refreshed by CALL counter.rollup_refresh"

# rollup_drop: nothing left on any node (in a transaction after a parallel
# distributed write too); the tables take writes after it
leftovers() {
    on_nodes_sum "SELECT (SELECT count(*) FROM pg_trigger WHERE tgname ~ '^counter_rollup_($1)_')
        + (SELECT count(*) FROM pg_class WHERE relname ~ '^(counter_)?rollup_($1)_dirty' OR relname ~ '^p?ev_(r|n|g)(_[0-9]+)?$')"
}
ids=$(coord -tA -c "SELECT string_agg(rollup_id::text, '|') FROM counter.rollups WHERE distributed")
n=$(leftovers "$ids")
[ "$n" -gt 100 ] || fail "the distributed rollups' objects on every node: $n"
# ev_r is dropped while a refresh chunk of it runs: the chunk (its steps
# written out) consumes the rollup's dirty marks, holding their row locks,
# then writes the rollup table. rollup_drop deletes the marks before it
# drops the table, so it waits for the chunk, which commits (dropping the
# table first, the two waited for each other: 40P01 on the coordinator).
rid=$(ce_citus_dirty_mark ev_r)
ce_citus_drop_beside_chunk ev_r -c "BEGIN" -c "DELETE FROM counter.rollup_dirty WHERE rollup_id = $rid" \
    -c "SELECT pg_sleep(4)" -c "UPDATE cr.ev_r SET count = count WHERE hour = '2026-07-01 10:00+00'" -c "COMMIT"
owner -q -c "BEGIN" -c "UPDATE cr.ev SET v = v" -c "SELECT counter.rollup_drop('ev_n')" -c "COMMIT" >/dev/null
# ev_g has marks in two hours, the later one first on disk. A refresh chunk
# locks the marks it consumes in hour order (here slowly, one at a time); the
# drop's session plans a sequential scan (a caller's settings reach the
# drop's statements): the drop must lock them in hour order too, or each
# holds a mark the other waits for (40P01).
rid=$(ce_citus_dirty_mark ev_g '2026-07-01 11:00+00')
ce_citus_dirty_mark ev_g '2026-07-01 10:00+00' >/dev/null
CE_DROP_OPTIONS="-c enable_indexscan=off -c enable_bitmapscan=off" ce_citus_drop_beside_chunk ev_g -c "BEGIN" \
    -c "SELECT 1 FROM counter.rollup_dirty WHERE rollup_id = $rid AND hour = '2026-07-01 10:00+00' FOR UPDATE" \
    -c "SELECT pg_sleep(3)" \
    -c "SELECT 1 FROM counter.rollup_dirty WHERE rollup_id = $rid AND hour = '2026-07-01 11:00+00' FOR UPDATE" \
    -c "DELETE FROM counter.rollup_dirty WHERE rollup_id = $rid" -c "COMMIT"
owner -q -c "SELECT counter.rollup_drop('pev_r')" -c "SELECT counter.rollup_drop('pev_n')" >/dev/null
owner -q -c "BEGIN" -c "UPDATE cr.pev SET v = v" -c "SELECT counter.rollup_drop('pev_g')" -c "COMMIT" \
    >/dev/null
app -q -c "INSERT INTO cr.ev VALUES (9000003, 9, '2026-07-01 10:00+00', 'view', 1)" \
    -c "INSERT INTO cr.pev VALUES (9000003, 9, '2026-07-01 10:00+00', 'view', 1)"
n=$(leftovers "$ids")
[ "$n" = 0 ] || fail "rollup_drop left $n triggers or tables"
echo "ok: rollup_drop leaves no trigger, table or dirty log on any node; the tables take writes after it"

# DROP OWNED: the owner's rollups go with its tables, on every node
owner -q -c "SET client_min_messages = warning" \
    -c "SELECT counter.rollup_create('ev_n', 'cr.ev', 'at', '{k}', mode => 'deferred')" >/dev/null
ids=$(coord -tA -c "SELECT string_agg(rollup_id::text, '|') FROM counter.rollups")
coord -q -c "SET client_min_messages = warning" -c "DROP OWNED BY cr_own CASCADE"
got=$(coord -tA -c "SELECT count(*) FROM counter.rollups")
[ "$got" = 0 ] || fail "DROP OWNED left $got rollups"
n=$(leftovers "$ids")
[ "$n" = 0 ] || fail "DROP OWNED left $n triggers or tables"
echo "ok: DROP OWNED drops the owner's distributed rollups with their tables, on every node"

# DROP EXTENSION: a distributed table keeps taking writes, nothing left
coord -q <<'SQL'
SET client_min_messages = warning;
CREATE TABLE public.dx (id bigint, k bigint NOT NULL, at timestamptz NOT NULL);
SELECT create_distributed_table('public.dx', 'k', shard_count := 4);
SELECT counter.rollup_create('dx_r', 'public.dx', 'at', '{k}', mode => 'deferred');
SELECT counter.rollup_create('dx_t', 'public.dx', 'at', '{k}');
INSERT INTO public.dx SELECT g, g % 5, now() FROM generate_series(1, 50) g;
SQL
got=$(coord -tA -c "SELECT sum(count) FROM public.dx_t")
[ "$got" = 50 ] || fail "the trigger-mode rollup before DROP EXTENSION: $got"
# on the coordinator only, as an operator does: Citus drops it on the workers
# too (the extension is one of its distributed objects)
coord -q -c "SET client_min_messages = warning" -c "DROP EXTENSION counter_ext CASCADE"
n=$(on_nodes_sum "SELECT count(*) FROM pg_extension WHERE extname = 'counter_ext'")
[ "$n" = 0 ] || fail "DROP EXTENSION on the coordinator left counter_ext on $n nodes"
coord -q -c "INSERT INTO public.dx SELECT g, g % 5, now() FROM generate_series(51, 90) g"
ce_psql -h 127.0.0.1 -p "$CE_citus_w1_PORT" -U "$(ce_owner_name)" -d postgres \
    -c "INSERT INTO public.dx SELECT g, g % 5, now() FROM generate_series(91, 100) g" >/dev/null
n=$(on_nodes_sum "SELECT (SELECT count(*) FROM pg_trigger WHERE tgname ~ '^counter_rollup_')
    + (SELECT count(*) FROM pg_class WHERE relname ~ '^rollup_[0-9]+_dirty')")
[ "$n" = 0 ] || fail "DROP EXTENSION left $n triggers or dirty logs"
got=$(coord -tA -c "SELECT count(*) FROM public.dx")
[ "$got" = 100 ] || fail "writes after DROP EXTENSION: $got rows"
# the dirty logs beside the table are the owner's tables, not the extension's:
# they stay, as the rollups' own tables do (doc/citus.md), and are dropped by hand
got=$(coord -tA -c "SELECT string_agg(relname, ' ' ORDER BY relname) FROM pg_class WHERE relname ~ '^counter_rollup_[0-9]+_dirty$'")
[[ "$got" =~ ^counter_rollup_[0-9]+_dirty\ counter_rollup_[0-9]+_dirty$ ]] || fail "the dirty logs beside public.dx after DROP EXTENSION: $got"
for t in $got; do coord -q -c "DROP TABLE public.$t"; done
n=$(on_nodes_sum "SELECT count(*) FROM pg_class WHERE relname ~ 'rollup_[0-9]+_dirty'")
[ "$n" = 0 ] || fail "dropping the dirty log left $n tables on the nodes"
echo "ok: DROP EXTENSION ... CASCADE on the coordinator drops counter_ext and the shard triggers (deferred and trigger mode) on every node (the dirty logs beside the table stay, the owner's); the table takes writes through the coordinator and a worker"
