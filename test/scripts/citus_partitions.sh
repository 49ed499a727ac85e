#!/usr/bin/env bash
# Issue 21 items 6 and 7, through a real Citus cluster (coordinator + 2
# workers, test/citus.sh), as an unprivileged owner, compared with the same
# data and the same calls on one node:
# - counter.partition_manage / partition_maintain on a hash-distributed
#   partitioned table: premade partitions are distributed and colocated with
#   the parent; the default partition is drained by range (INSERT ... SELECT
#   and DELETE pushed down to the shards: checked in Citus's remote command
#   log), a slot larger than batch_rows too; a slot whose drain fails (it
#   overlaps a partition made by hand) is skipped while the other slots are
#   created, drained and dropped by retention; after the hand-made partition
#   goes, the next run drains it. Partitions present, rows per partition,
#   rows left in the default partition and the run's record equal one node's;
#   no row lost or doubled. With retention dropping the partitions, and with
#   retention_keep_table (detached).
# - item 7: counter.untrack, counter.rollup_drop, counter.partition_unmanage
#   (and counter.track) in a transaction after a parallel multi-shard INSERT.
# - item 4 on a partitioned table: an application-mode counter keyed by the
#   distribution column (state beside the rows), added to through the
#   coordinator and through a worker, across the drain of the default
#   partition.
# citus: smoke
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
source test/citus.sh
ce_citus_script_setup

work=$(mktemp -d)
trap 'ce_cluster_stop_all; rm -rf "$work"' EXIT
ce_citus_cluster_start
ce_cluster_start single "counter_ext.enabled = off"
ce_psql -h 127.0.0.1 -p "$CE_single_PORT" -U "$(ce_owner_name)" -d postgres -q -c "CREATE EXTENSION counter_ext"
su_coord() { ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U "$(ce_owner_name)" -d postgres "$@"; }
su_single() { ce_psql -h 127.0.0.1 -p "$CE_single_PORT" -U "$(ce_owner_name)" -d postgres "$@"; }
coord() { ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U ev_owner -d postgres "$@"; }
single() { ce_psql -h 127.0.0.1 -p "$CE_single_PORT" -U ev_owner -d postgres "$@"; }
fail() { echo "FAIL: $*"; exit 1; }

# The owner: no superuser, no membership; CREATE on public only. (Citus
# propagates the role to the workers.)
for n in su_coord su_single; do
    $n -q -c "CREATE ROLE ev_owner LOGIN" -c "GRANT CREATE ON SCHEMA public TO ev_owner"
done

# Two tables on each side: ev (retention drops) and evk (retention detaches).
setup() { # setup TABLE KEEP DISTRIBUTE
    local dist=
    [ "$3" = yes ] && dist="SELECT create_distributed_table('$1', 'k', shard_count := 4);"
    cat <<SQL
CREATE TABLE $1 (id bigint, k bigint NOT NULL, at timestamptz NOT NULL, note text) PARTITION BY RANGE (at);
$dist
SELECT counter.partition_manage('$1', 'at', '1 day', premake => 2, retention => '3 days',
                                retention_keep_table => $2, batch_rows => 10, as_of => '2026-07-10');
-- 50 rows for the 13th (more than batch_rows: staged on one node, whole on
-- Citus), 30 for the 14th (a hand-made partition overlaps its slot: its
-- drain fails), 5 for the 15th; 7 in a premade partition
INSERT INTO $1 SELECT g, g % 7, '2026-07-13 10:00+00'::timestamptz + g * interval '1 minute', 'a' FROM generate_series(1, 50) g;
INSERT INTO $1 SELECT g, g % 7, '2026-07-14 06:00+00', NULL FROM generate_series(51, 80) g;
INSERT INTO $1 SELECT g, g % 7, '2026-07-15 06:00+00', 'c' FROM generate_series(81, 85) g;
INSERT INTO $1 SELECT g, g % 7, '2026-07-11 06:00+00', 'd' FROM generate_series(86, 92) g;
CREATE TABLE ${1}_hand PARTITION OF $1 FOR VALUES FROM ('2026-07-14 12:00+00') TO ('2026-07-15 00:00+00');
SQL
}
for t in ev:false evk:true; do
    setup "${t%%:*}" "${t#*:}" yes | coord -q >/dev/null
    setup "${t%%:*}" "${t#*:}" no | single -q >/dev/null
done

# What a side holds: each table's partitions (the default last) with their
# rows, the sum of the rows, and the last run's record.
state() {
    cat <<'SQL'
SET client_min_messages = error;
CREATE FUNCTION pg_temp.rows_of(t regclass) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
    EXECUTE format('SELECT count(*) FROM ONLY %s', t) INTO n;
    RETURN n;
END $$;
SELECT string_agg(format('%s:%s', b.partition, pg_temp.rows_of(b.partition)), ' ' ORDER BY b.is_default, b.lo)
FROM counter.partition_bounds('ev') b;
SELECT string_agg(format('%s:%s', b.partition, pg_temp.rows_of(b.partition)), ' ' ORDER BY b.is_default, b.lo)
FROM counter.partition_bounds('evk') b;
SELECT (SELECT count(*) FROM ev) || ' ' || (SELECT count(DISTINCT id) FROM ev) || ' '
    || (SELECT count(*) FROM evk) || ' ' || (SELECT count(DISTINCT id) FROM evk);
SELECT string_agg(format('%s %s %s %s %s %s', s.parent, s.last_outcome, s.last_created, s.last_dropped,
                         s.last_moved, s.last_skipped), ' | ' ORDER BY s.parent::text)
FROM counter.partition_status s;
-- the detached partitions of evk, kept as tables
SELECT string_agg(format('%s:%s', c.relname, c.relispartition), ' ' ORDER BY c.relname)
FROM pg_class c WHERE c.relname LIKE 'evk_p%' AND c.relkind = 'r';
SQL
}
compare() { # compare WHAT
    state | coord -tA >"$work/coord.txt" 2>&1 || { cat "$work/coord.txt"; fail "$1: reading Citus's state"; }
    state | single -tA >"$work/single.txt" 2>&1 || { cat "$work/single.txt"; fail "$1: reading one node's state"; }
    if ! diff "$work/single.txt" "$work/coord.txt" >"$work/diff.txt"; then
        cat "$work/diff.txt"
        fail "$1: Citus differs from one node (< one node, > Citus)"
    fi
    echo "ok: $1: equal to one node: $(grep -v '^SET$\|^CREATE FUNCTION$' "$work/coord.txt" | head -3 | tr '\n' ' ')"
}

# Every partition of a distributed managed table is distributed and colocated
# with its parent (partitions Citus made at an ATTACH, and those drained).
colocated() {
    local got
    got=$(su_coord -tA -c "
        SELECT count(*) FROM pg_inherits i
        JOIN pg_dist_partition pp ON pp.logicalrelid = i.inhparent
        LEFT JOIN pg_dist_partition pc ON pc.logicalrelid = i.inhrelid
        WHERE i.inhparent IN ('ev'::regclass, 'evk'::regclass)
          AND (pc.logicalrelid IS NULL OR pc.colocationid <> pp.colocationid OR pc.partmethod <> 'h')")
    [ "$got" = 0 ] || fail "$1: $got partitions not distributed and colocated with their parent"
    echo "ok: $1: every partition distributed and colocated with its parent"
}
colocated "after partition_manage"
compare "after partition_manage"

# Maintenance as of the 14th: creates the 16th, drains the 13th (50 rows,
# more than batch_rows) and the 15th, skips the 14th (its drain fails), drops
# (or detaches) the 10th. The pushed-down move is in Citus's log of the
# commands it sends: INSERT into a shard of the new partition, selecting
# from the colocated shard of the default partition, on a worker.
maintain() { # maintain AS_OF
    cat <<SQL
SET citus.log_remote_commands = on;
SET client_min_messages = log;
SELECT outcome FROM counter.partition_maintain('ev', as_of => '$1');
SELECT outcome FROM counter.partition_maintain('evk', as_of => '$1');
SQL
}
maintain 2026-07-14 | coord -tA >"$work/maintain.txt" 2>&1 || { cat "$work/maintain.txt"; fail "maintenance failed on Citus"; }
maintain 2026-07-14 | grep -v citus | single -tA >/dev/null 2>&1 || fail "maintenance failed on one node"
grep -q "issuing INSERT INTO public.ev_p2026071300_[0-9]* .*SELECT .* FROM ONLY public.ev_default_[0-9]* " "$work/maintain.txt" ||
    { grep -i "insert\|delete" "$work/maintain.txt" | head -20 || true; fail "the drain's INSERT ... SELECT was not pushed down to the shards"; }
grep -q "issuing DELETE FROM ONLY public.ev_default_[0-9]* " "$work/maintain.txt" ||
    fail "the drain's DELETE was not pushed down to the shards"
echo "ok: the drain's INSERT ... SELECT and DELETE run on the shards"
grep -q "^error$" "$work/maintain.txt" || fail "the run with a slot that cannot be drained is not reported as an error"
colocated "after the first maintenance"
compare "a failed drain of one slot, the others created, drained and dropped"
got=$(coord -tA -c "SELECT count(*) FROM ONLY ev_default" -c "SELECT count(*) FROM ev_p2026071600" \
    -c "SELECT count(*) FROM pg_class WHERE relname = 'ev_p2026071000'")
[ "$(echo $got)" = "30 0 0" ] || fail "after the first maintenance: default rows, the 16th, the 10th: $got"

# The hand-made partition goes (its rows are none): the next run drains the 14th.
for n in coord single; do $n -q -c "DROP TABLE ev_hand; DROP TABLE evk_hand"; done
maintain 2026-07-14 | coord -tA >"$work/maintain.txt" 2>&1 || { cat "$work/maintain.txt"; fail "maintenance failed on Citus"; }
maintain 2026-07-14 | grep -v citus | single -tA >/dev/null 2>&1 || fail "maintenance failed on one node"
colocated "after the second maintenance"
compare "the 14th drained once its slot is free"
got=$(coord -tA -c "SELECT (SELECT count(*) FROM ONLY ev_default) + (SELECT count(*) FROM ONLY evk_default)")
[ "$got" = 0 ] || fail "$got rows left in the default partitions"
got=$(coord -tA -c "SELECT count(*) || ' ' || count(DISTINCT id) FROM ev WHERE id BETWEEN 51 AND 80")
[ "$got" = "30 30" ] || fail "the drained rows of the 14th: $got"
echo "ok: every row drained once: nothing lost, nothing doubled"

# Later: retention drops the partitions of the 11th and 12th; writes work.
maintain 2026-07-16 | coord -tA >/dev/null 2>&1 || fail "maintenance failed on Citus"
maintain 2026-07-16 | grep -v citus | single -tA >/dev/null 2>&1 || fail "maintenance failed on one node"
for n in coord single; do
    $n -q -c "INSERT INTO ev SELECT g, g % 7, '2026-07-17 01:00+00', 'e' FROM generate_series(200, 260) g" \
        -c "INSERT INTO evk SELECT g, g % 7, '2026-07-18 01:00+00', 'e' FROM generate_series(200, 260) g"
done
colocated "after retention"
compare "retention, then writes into the premade partitions"

# Item 7: in one transaction after a parallel multi-shard INSERT, untrack,
# rollup_drop, partition_unmanage (and track) work, and leave nothing.
coord -q <<'SQL'
CREATE TABLE clicks (id bigint, link_id bigint NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON clicks (at);
SELECT create_distributed_table('clicks', 'link_id', shard_count := 4);
SELECT counter.track('app', 'clicks', 'link_id', 'at', mode => 'application');
CREATE TABLE loc (id bigint, g bigint NOT NULL, at timestamptz NOT NULL);
SELECT counter.rollup_create('r_loc', 'loc', 'at', '{g}');
SQL
out=$(coord -tA -v ON_ERROR_STOP=1 2>&1 <<'SQL'
BEGIN;
INSERT INTO clicks SELECT g, g % 17, '2026-07-01 10:00+00' FROM generate_series(1, 500) g;
UPDATE clicks SET id = id + 1;
SELECT counter.untrack('app');
SELECT counter.rollup_drop('r_loc');
SELECT counter.partition_unmanage('ev');
-- keyed by another column: state on the coordinator (a counter whose state
-- is beside the rows is made in a transaction of its own: doc/citus.md)
SELECT counter.track('app2', 'clicks', 'id', 'at', mode => 'application') > 0;
COMMIT;
SELECT (SELECT string_agg(name, ',') FROM counter.tracked) || ' '
    || (SELECT count(*) FROM counter.rollups) || ' '
    || (SELECT string_agg(parent::text, ',') FROM counter.partitioned_tables);
SQL
) || fail "untrack / rollup_drop / partition_unmanage after a parallel distributed operation: $out"
[ "$(echo "$out" | tail -1)" = "app2 0 evk" ] || fail "after the transaction: $out"
for p in "$CE_citus_w1_PORT" "$CE_citus_w2_PORT"; do
    got=$(ce_psql -h 127.0.0.1 -p "$p" -U "$(ce_owner_name)" -d postgres -tA \
        -c "SELECT count(*) FROM pg_proc WHERE proname ~ '^tracked_[0-9]+_batch$'")
    [ "$got" = 0 ] || fail "a counter's batch function was made on a worker"
done
coord -q -c "INSERT INTO clicks VALUES (1000, 3, '2026-07-01 11:00+00')" -c "INSERT INTO loc VALUES (1, 1, now())" \
    -c "INSERT INTO ev VALUES (1, 1, '2026-07-17 02:00+00')"
echo "ok: untrack, rollup_drop, partition_unmanage and track in a transaction after a parallel distributed operation"

# An application-mode counter keyed by the distribution column of a
# distributed partitioned table (1.8: its state and inbox beside the rows),
# written with its adds through the coordinator and through worker 1 (a
# re-delivered batch adds only its new rows), into premade partitions and
# the default partition; the maintenance drains the default partition
# (rows move between partitions, none is added or lost), then more rows go
# to the new partitions: the counter equals count(*) and a reconciliation
# corrects nothing, on the cluster and on one node. The same table has two
# trigger-mode counters (keyed by the distribution column, and by another
# column: anchored state), a trigger-mode rollup with a distinct sketch and a
# deferred one grouped by another column: exact through the drain too (the
# trigger-mode ones with no reconciliation or refresh), every rollup row
# equal to GROUP BY and to one node's, sketch bytes included.
w1() { ce_psql -h 127.0.0.1 -p "$CE_citus_w1_PORT" -U ev_owner -d postgres "$@"; }
for n in coord single; do
    dist=
    [ $n = coord ] && dist="SELECT create_distributed_table('pa', 'k', shard_count := 4);"
    $n -q -v ON_ERROR_STOP=1 >/dev/null <<SQL
SET client_min_messages = warning;
CREATE TABLE pa (id bigint NOT NULL, k bigint NOT NULL, at timestamptz NOT NULL, v bigint NOT NULL, PRIMARY KEY (k, id, at))
    PARTITION BY RANGE (at);
CREATE INDEX ON pa (at);
$dist
SELECT counter.partition_manage('pa', 'at', '1 day', premake => 2, as_of => '2026-07-10');
SELECT counter.track('pa_c', 'pa', 'k', 'at', mode => 'application');
SELECT counter.track('pa_t', 'pa', 'k', 'at');
SELECT counter.track('pa_v', 'pa', 'v', 'at');
SELECT counter.rollup_create('pa_r', 'pa', 'at', '{k}', distinct_on => '{id}');
SELECT counter.rollup_create('pa_rv', 'pa', 'at', '{v}', mode => 'deferred');
SQL
done
[ "$(coord -tA -c "SELECT distributed FROM counter.tracked WHERE name = 'pa_c'")" = t ] ||
    fail "the counter on the distributed partitioned table keeps its state on the coordinator"
deliver_pa() { # deliver_pa RUN A B: ids A..B over the 10th to the 14th, each new row with its add
    $1 -q -v ON_ERROR_STOP=1 >/dev/null <<SQL
BEGIN;
CREATE TEMP TABLE n ON COMMIT DROP AS WITH ins AS (
    INSERT INTO pa SELECT g, g % 7, '2026-07-10 06:00+00'::timestamptz + (g % 5) * interval '1 day', g % 11
    FROM generate_series($2, $3) g ON CONFLICT DO NOTHING RETURNING k, at)
SELECT * FROM ins;
SELECT count(counter.add('pa_c', k, c, at)) FROM (SELECT k, at, count(*) AS c FROM n GROUP BY 1, 2) x;
COMMIT;
SQL
}
check_pa() { # check_pa WHAT
    local n got c want=
    for n in coord single; do
        for c in pa_c pa_t pa_v; do
            got=$(ce_citus_mismatches $n $c pa true "$([ $c = pa_v ] && echo v || echo k)")
            [ "$got" = 0 ] || fail "$1: $n: $got keys of $c differ from count(*)"
        done
        # the trigger-mode rollup with no refresh, the deferred one after its refresh
        $n -q -c "SELECT counter.rollup_refresh_dirty('pa_rv')" >/dev/null
        got=$($n -tA <<'SQL' | grep -v '^$' | tail -1
CREATE TEMP TABLE got_r AS SELECT k, hour, count, distinct_id::bytea AS d FROM pa_r;
CREATE TEMP TABLE want_r AS SELECT k, counter.rollup_hour(at) AS hour, count(*) AS count,
    counter.hll_add_agg(id, 14)::bytea AS d FROM pa GROUP BY 1, 2;
CREATE TEMP TABLE got_v AS SELECT v, hour, count FROM pa_rv;
CREATE TEMP TABLE want_v AS SELECT v, counter.rollup_hour(at) AS hour, count(*) AS count FROM pa GROUP BY 1, 2;
SELECT (SELECT count(*) FROM ((TABLE got_r EXCEPT TABLE want_r) UNION ALL (TABLE want_r EXCEPT TABLE got_r)) x) || ' '
    || (SELECT count(*) FROM ((TABLE got_v EXCEPT TABLE want_v) UNION ALL (TABLE want_v EXCEPT TABLE got_v)) y) || ' '
    || (SELECT md5(string_agg(k || ':' || hour || ':' || count || ':' || encode(d, 'hex'), ',' ORDER BY k, hour)) FROM got_r);
SQL
)
        [ "${got% *}" = "0 0" ] || fail "$1: $n: rollup rows that differ from GROUP BY (pa_r, pa_rv): ${got% *}"
        [ -z "$want" ] || [ "${got##* }" = "$want" ] || fail "$1: the trigger-mode rollup pa_r differs between the cluster and one node"
        want=${got##* }
        for c in pa_c pa_t pa_v; do
            got=$($n -tA -c "SELECT keys_corrected || ' ' || outcome FROM counter.reconcile('$c', '2026-07-20', all_keys => true)")
            [ "$got" = "0 ok" ] || fail "$1: $n: the reconciliation of $c: $got (nothing to correct expected)"
        done
    done
    got=$(coord -tA -c "SELECT count(*) FROM pa")
    [ "$got" = "$(single -tA -c "SELECT count(*) FROM pa")" ] || fail "$1: $got rows on the cluster, $(single -tA -c "SELECT count(*) FROM pa") on one node"
    echo "ok: $1: the application-mode and trigger-mode counters of the partitioned table equal count(*) ($got rows), nothing to reconcile; its rollups equal GROUP BY; as on one node"
}
deliver_pa coord 1 300
deliver_pa single 1 300
deliver_pa w1 201 500      # re-delivered in part
deliver_pa single 201 500
default=$(coord -tA -c "SELECT partition FROM counter.partition_bounds('pa') WHERE is_default")
[ "$(coord -tA -c "SELECT count(*) FROM ONLY $default")" -gt 0 ] || fail "no row in the default partition $default before the drain"
check_pa "written through the coordinator and worker 1, rows in the default partition"
for n in coord single; do
    got=$($n -tA -c "SELECT outcome FROM counter.partition_maintain('pa', as_of => '2026-07-14')")
    [ "$got" = ok ] || fail "$n: the maintenance of pa: $got"
done
[ "$(coord -tA -c "SELECT count(*) FROM ONLY $default")" = 0 ] || fail "rows left in the default partition $default after the drain"
deliver_pa w1 601 700
deliver_pa single 601 700
check_pa "the default partition drained, then rows through worker 1 into the new partitions"
