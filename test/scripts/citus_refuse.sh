#!/usr/bin/env bash
# Issue 21 item 1, the part of it 1.5 does: on a table Citus distributes
# (hash-distributed, reference, or a partition of a distributed partitioned
# table), what counter_ext cannot serve there yet is refused when it is made
# (0A000 with a hint), leaving nothing behind, so that no write to the table
# fails because counter_ext is there (1.4, with citus.enable_unsafe_triggers
# on: track and rollup_create succeeded, then every INSERT failed on the
# workers). An application-mode counter, which works there, is still made
# and counts exactly (with a filter too from 1.6: test/scripts/citus_tracked.sh).
# citus: smoke
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
source test/citus.sh
ce_citus_script_setup

trap 'ce_cluster_stop_all' EXIT
ce_citus_cluster_start
coord() { ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U "$(ce_owner_name)" -d postgres "$@"; }
fail() { echo "FAIL: $*"; exit 1; }

coord <<'SQL'
CREATE TABLE clicks (id bigint, link_id bigint NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON clicks (at);
SELECT create_distributed_table('clicks', 'link_id', shard_count := 8);
CREATE TABLE links (link_id bigint PRIMARY KEY, at timestamptz NOT NULL DEFAULT now());
SELECT create_reference_table('links');
CREATE TABLE ev (id bigint, k bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
CREATE TABLE ev_2026 PARTITION OF ev FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
SELECT create_distributed_table('ev', 'k', shard_count := 8);
SQL

# refused (0A000), on every kind of Citus table, with unsafe triggers allowed
# (1.7: a trigger-mode counter keyed by the distribution column of a
# hash-distributed table, partitioned or not, is made: below, and
# test/scripts/citus_trigger.sh; so is a deferred rollup, grouped by it
# or not (1.8): test/scripts/citus_rollup.sh, and a trigger-mode rollup
# grouped by it or not (1.8): test/scripts/citus_rollup_trigger.sh; and a
# trigger-mode counter keyed by another column (1.8): below, and
# test/scripts/citus_tracked_anchored.sh; and a buffered trigger-mode
# counter keyed by the distribution column (1.8): below, and
# test/scripts/citus_buffered.sh, or by another column (1.8): below, and
# test/scripts/citus_buffered_anchored.sh)
for call in \
    "counter.track('c3', 'links', 'link_id', 'at')" \
    "counter.track('c4', 'ev_2026', 'k', 'at')" \
    "counter.track('c8', 'clicks', 'link_id', 'at', replicated => true)" \
    "counter.rollup_create('r1', 'clicks', 'at', '{id}', replicated => true)" \
    "counter.rollup_create('r2', 'clicks', 'at', '{id}', mode => 'buffered')" \
    "counter.rollup_create('r3', 'ev', 'at', '{id}', mode => 'buffered')" \
    "counter.rollup_create('r4', 'links', 'at', '{link_id}', mode => 'deferred')" \
    "counter.rollup_create('r5', 'ev_2026', 'at', '{k}', mode => 'deferred')"; do
    out=$(coord -v VERBOSITY=verbose -c "SET citus.enable_unsafe_triggers = on" -c "SELECT $call" 2>&1) &&
        fail "accepted: $call"
    case $out in
    *"ERROR:  0A000: "*"a table Citus distributes, is not supported yet"*) echo "ok: refused: $call" ;;
    *) fail "$call failed, but not with the refusal: $out" ;;
    esac
done

# nothing left behind, and every write works
for call in \
    "counter.track('c1', 'clicks', 'link_id', 'at')" \
    "counter.track('c2', 'clicks', 'link_id', 'at', filter => 'id > 0')" \
    "counter.track('c5', 'ev', 'k', 'at')" \
    "counter.track('c6', 'clicks', 'id', 'at')" \
    "counter.track('c9', 'clicks', 'link_id', 'at', buffered => true)" \
    "counter.track('c7', 'clicks', 'id', 'at', buffered => true)"; do
    coord -q -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" -c "SELECT $call" >/dev/null ||
        fail "not made: $call"
    echo "ok: made (keyed by the distribution column, or by another one: c6; buffered: c9, and by another one: c7): $call"
done
coord -q -v ON_ERROR_STOP=1 -c "SELECT counter.untrack(name) FROM counter.tracked WHERE name IN ('c1', 'c2', 'c5', 'c6', 'c9', 'c7')" \
    >/dev/null

got=$(coord -tA <<'SQL'
SELECT (SELECT count(*) FROM counter.tracked) + (SELECT count(*) FROM counter.rollups)
     + (SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relname IN ('clicks', 'links', 'ev', 'ev_2026') AND NOT t.tgisinternal);
SQL
)
[ "$got" = 0 ] || fail "refused registrations left $got catalog rows or triggers"
coord -c "INSERT INTO clicks SELECT g, g % 17, '2026-07-01 10:00+00' FROM generate_series(1, 500) g" \
    -c "INSERT INTO links SELECT DISTINCT link_id FROM clicks" \
    -c "INSERT INTO ev SELECT g, g % 5, '2026-07-01 10:00+00' FROM generate_series(1, 100) g" >/dev/null

# what works there is still made: an application-mode counter
# (read against counts kept in a temporary table: a query over the
# distributed table that calls counter.value is sent whole to the workers,
# which have no counter; doc/citus.md)
got=$(coord -tA <<'SQL'
SELECT counter.track('app', 'clicks', 'link_id', 'at', mode => 'application') > 0;
BEGIN;
INSERT INTO clicks VALUES (1000, 3, '2026-07-01 11:00+00');
SELECT counter.add('app', 3::bigint, 1, '2026-07-01 11:00+00');
COMMIT;
SELECT outcome FROM counter.reconcile('app', '2026-07-02', all_keys => true);
CREATE TEMP TABLE truth AS SELECT link_id AS l, count(*) AS n FROM clicks GROUP BY link_id;
SELECT count(*) FILTER (WHERE counter.value('app', l) <> n) FROM truth;
SQL
)
got=$(printf '%s\n' "$got" | grep -v '^$')
[ "$got" = "$(printf 't\nok\n0')" ] || fail "the application-mode counter on a distributed table: $got"
echo "ok: an application-mode counter without a filter is made and equals count(*) for every key"

# Issue 21 item 1, the rest: create_distributed_table, create_reference_table
# and undistribute_table are functions (no event trigger sees them). Of a
# table counter_ext serves in a way that does not work on Citus, they are
# refused (0A000) and leave nothing behind, with unsafe triggers allowed, as
# the table's unprivileged owner and as a superuser; where it works
# (application mode with or without a filter, a managed partitioned table),
# create_distributed_table goes on and the numbers stay exact;
# undistribute_table (which makes the table again under another OID) of a
# served table is refused. After every call, writes work and every counter
# equals count(*), every rollup equals GROUP BY.
coord -q -c "CREATE ROLE t_owner LOGIN" -c "GRANT CREATE ON SCHEMA public TO t_owner"
owner() { ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U t_owner -d postgres "$@"; }
owner -q <<'SQL' >/dev/null
CREATE TABLE t_trig (id bigint, k bigint NOT NULL, at timestamptz NOT NULL);
CREATE TABLE t_filt (id bigint, k bigint NOT NULL, at timestamptz NOT NULL);
CREATE TABLE t_rsrc (id bigint, k bigint NOT NULL, at timestamptz NOT NULL);
CREATE TABLE t_app (id bigint, k bigint NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON t_trig (at); CREATE INDEX ON t_filt (at); CREATE INDEX ON t_app (at);
CREATE TABLE t_man (id bigint, k bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
SELECT counter.track('t_trig', 't_trig', 'k', 'at');
SELECT counter.track('t_filt', 't_filt', 'k', 'at', mode => 'application', filter => 'id > 3');
SELECT counter.rollup_create('t_roll', 't_rsrc', 'at', '{k}');
SELECT counter.track('t_app', 't_app', 'k', 'at', mode => 'application');
SELECT counter.partition_manage('t_man', 'at', '1 day', premake => 2, as_of => '2026-07-01');
SQL
rtable=$(owner -tA -c "SELECT rollup_table FROM counter.rollups WHERE name = 't_roll'")

# writes N: rows into every table (the application-mode ones with counter.add
# in the same transaction), then checks every number
writes() {
    owner -q -v ON_ERROR_STOP=1 <<SQL >/dev/null || fail "a write failed after $1"
BEGIN;
INSERT INTO t_trig SELECT g, g % 5, '2026-07-01 10:00+00' FROM generate_series(1, 20) g;
INSERT INTO t_rsrc SELECT g, g % 5, '2026-07-01 10:00+00' FROM generate_series(1, 20) g;
INSERT INTO t_filt SELECT g, g % 5, '2026-07-01 10:00+00' FROM generate_series(1, 20) g;
SELECT counter.add('t_filt', g % 5, 1, '2026-07-01 10:00+00') FROM generate_series(4, 20) g;
INSERT INTO t_app SELECT g, g % 5, '2026-07-01 10:00+00' FROM generate_series(1, 20) g;
SELECT counter.add('t_app', g % 5, 1, '2026-07-01 10:00+00') FROM generate_series(1, 20) g;
INSERT INTO t_man SELECT g, g % 5, '2026-07-02 10:00+00' FROM generate_series(1, 20) g;
COMMIT;
SQL
    local got
    got=$(owner -tA <<SQL
CREATE TEMP TABLE truth AS
    SELECT 't_trig' AS c, k, count(*) AS n FROM t_trig GROUP BY k
    UNION ALL SELECT 't_app', k, count(*) FROM t_app GROUP BY k
    UNION ALL SELECT 't_filt', k, count(*) FILTER (WHERE id > 3) FROM t_filt GROUP BY k;
SELECT count(*) FILTER (WHERE counter.value(c, k) <> n) FROM truth;
SELECT count(*) FROM (SELECT k, count(*) AS n FROM t_rsrc GROUP BY k) s
    FULL JOIN (SELECT k, sum(count) AS n FROM $rtable GROUP BY k) r USING (k)
    WHERE s.n IS DISTINCT FROM r.n;
SELECT count(*) FROM t_man;
SQL
)
    got=$(echo $got)
    [ "$got" = "0 0 $(( $2 * 20 ))" ] || fail "after $1: counters off, rollup off, or rows lost: $got"
}
writes "setting up" 1

refused() { # refused WHO CALL
    local out
    out=$($1 -v VERBOSITY=verbose -c "SET citus.enable_unsafe_triggers = on" -c "SELECT $2" 2>&1) &&
        fail "accepted: $2"
    case $out in
    *"ERROR:  0A000: "*) ;;
    *) fail "$2 failed, but not with 0A000: $out" ;;
    esac
}
n=1
for who in owner coord; do
    for call in "create_distributed_table('t_trig', 'k')" "create_reference_table('t_trig')" \
        "create_distributed_table('t_rsrc', 'k')" "create_reference_table('t_rsrc')" \
        "create_distributed_table('$rtable', 'k')" "create_reference_table('$rtable')"; do
        refused $who "$call"
        n=$((n + 1))
        writes "$call (refused)" $n
        echo "ok: refused ($who), nothing left, writes exact: $call"
    done
done
got=$(coord -tA -c "SELECT count(*) FROM pg_dist_partition WHERE logicalrelid::text LIKE 't\_%' OR logicalrelid = '$rtable'::regclass")
[ "$got" = 0 ] || fail "a refused call left $got tables in Citus's metadata"

# where it works: distributed, exact
owner -q -c "SELECT create_distributed_table('t_app', 'k', shard_count := 4)" \
    -c "SELECT create_distributed_table('t_filt', 'k', shard_count := 4)" \
    -c "SELECT create_distributed_table('t_man', 'k', shard_count := 4)" >/dev/null
n=$((n + 1))
writes "create_distributed_table of an application-mode counter's source and of a managed partitioned table" $n
got=$(owner -tA -c "SELECT outcome FROM counter.reconcile('t_app', '2026-07-02', all_keys => true)" \
    -c "SELECT outcome FROM counter.reconcile('t_filt', '2026-07-02', all_keys => true)" \
    -c "SELECT outcome FROM counter.partition_maintain('t_man', as_of => '2026-07-02')")
[ "$(echo $got)" = "ok ok ok" ] || fail "reconcile / maintenance after create_distributed_table: $got"
echo "ok: create_distributed_table of application-mode counters' sources (one with a filter) and of a managed table: exact"

# undistribute_table of a served table: refused, nothing changed
for call in "undistribute_table('t_app')" "undistribute_table('t_man')"; do
    refused owner "$call"
    n=$((n + 1))
    writes "$call (refused)" $n
    echo "ok: refused, writes exact: $call"
done
got=$(coord -tA -c "SELECT count(*) FROM pg_dist_partition WHERE logicalrelid IN ('t_app'::regclass, 't_man'::regclass)" \
    -c "SELECT count(*) FROM counter.tracked WHERE name = 't_app'" -c "SELECT count(*) FROM counter.partitioned_tables")
[ "$(echo $got)" = "2 1 1" ] || fail "undistribute_table changed something: $got"
