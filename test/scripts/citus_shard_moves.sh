#!/usr/bin/env bash
# What an operator does to a growing Citus cluster, with counter_ext on it
# and writers running: shard moves (Citus's default mode, logical
# replication, and block_writes), shard splits (both modes), draining a
# node and rebalancing. A plain and a partitioned distributed table
# (colocated), each with a trigger-mode counter (one with a filter) and a
# deferred rollup (one with a filter, one with a distinct sketch), owned by
# an unprivileged role, written by another through the coordinator and
# directly through a worker the whole time, re-delivered rows included.
#
# Citus recreates a moved or split shard's table as the table's owner; the
# counters' and rollups' state tables are in schema counter_internal, where
# their owner may not create (doc/citus.md, "Shard moves, splits and
# rebalancing"): so a move or split of their colocation group fails, on
# Citus 13 and 14. This test holds that failing is all it does: every write
# goes on, nothing is lost or counted twice, no shard is left half-made.
# (Were a move to succeed, the same checks hold it to be exact.) Then the
# documented way round: untrack and drop the rollups, move, split, drain and
# rebalance in Citus's default mode with writers running, track and make the
# rollups again (a reconciliation counts the rows: the backfill): exact. After every step, with no reconciliation, every
# counter equals count(*), a reconciliation corrects nothing, every rollup
# row equals GROUP BY (sketch bytes too), and every shard carries the
# counters' triggers. (1.7's dirty log of a deferred rollup had no replica
# identity, so Citus refused the default mode before trying: 1.8 gives it
# REPLICA IDENTITY FULL.)
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
source test/citus.sh
# Citus moves by logical replication; its non-blocking split decodes with
# its own output plugin, which servers that have output_plugin_libraries
# (15.20, 17.12 and 18.6 here) allow only when it names the plugin
conf=("wal_level = logical" "max_replication_slots = 20" "max_wal_senders = 20")
ce_citus_script_setup
if "$CE_PGBIN/postgres" --describe-config 2>/dev/null | grep "^output_plugin_libraries" >/dev/null; then
    conf+=("output_plugin_libraries = 'pgoutput, test_decoding, citus'")
fi
ce_citus_script_start sm_own sm_app "${conf[@]}"

coord -q <<'SQL'
CREATE ROLE sm_own LOGIN;
CREATE ROLE sm_app LOGIN;
CREATE SCHEMA sm AUTHORIZATION sm_own;
SQL
owner -q >/dev/null <<'SQL'
SET client_min_messages = warning;
CREATE TABLE sm.ev (id bigint NOT NULL, k bigint NOT NULL, at timestamptz NOT NULL, kind text NOT NULL,
                    PRIMARY KEY (k, id));
CREATE INDEX ON sm.ev (at);
SELECT create_distributed_table('sm.ev', 'k', shard_count := 4);
CREATE TABLE sm.pev (id bigint NOT NULL, k bigint NOT NULL, at timestamptz NOT NULL, kind text NOT NULL,
                     PRIMARY KEY (k, id, at)) PARTITION BY RANGE (at);
CREATE TABLE sm.pev_a PARTITION OF sm.pev FOR VALUES FROM ('2026-07-01') TO ('2026-07-02');
CREATE TABLE sm.pev_b PARTITION OF sm.pev FOR VALUES FROM ('2026-07-02') TO ('2026-07-03');
CREATE TABLE sm.pev_d PARTITION OF sm.pev DEFAULT;
CREATE INDEX ON sm.pev (at);
SELECT create_distributed_table('sm.pev', 'k', colocate_with := 'sm.ev');
GRANT USAGE ON SCHEMA sm TO sm_app;
GRANT SELECT, INSERT ON sm.ev, sm.pev TO sm_app;
SELECT counter.track('evc', 'sm.ev', 'k', 'at', filter => $$kind <> 'bot'$$);
SELECT counter.track('pevc', 'sm.pev', 'k', 'at');
SELECT counter.rollup_create('ev_r', 'sm.ev', 'at', '{k}', mode => 'deferred', filter => $$kind <> 'bot'$$);
SELECT counter.rollup_create('pev_r', 'sm.pev', 'at', '{k,kind}', mode => 'deferred', distinct_on => '{id}');
SQL

# deliver RUN A B: rows A..B into both tables in one transaction; a row
# delivered again conflicts and is not counted
deliver() {
    $1 -q >/dev/null <<SQL
BEGIN;
INSERT INTO sm.ev SELECT g, g % 61, '2026-07-01 10:00+00'::timestamptz + (g % 37) * interval '47 minutes'
    + CASE WHEN g % 53 = 0 THEN interval '4 days' ELSE interval '0' END, (ARRAY['view', 'bot', 'click'])[1 + g % 3]
FROM generate_series($2, $3) g ON CONFLICT DO NOTHING;
INSERT INTO sm.pev SELECT id, k, at, kind FROM sm.ev WHERE id BETWEEN $2 AND $3 ON CONFLICT DO NOTHING;
COMMIT;
SQL
}
# Two writers, through the coordinator and through worker 1, in batches of
# 50 rows whose first 10 repeat the previous batch's last 10, until stopped
# (a batch that fails is retried once; failing twice fails the test)
run_dir=$(mktemp -d)
trap 'touch "$run_dir/stop"; wait; rm -rf "$run_dir"; [ -n "${CE_CITUS_KEEP:-}" ] || ce_cluster_stop_all' EXIT
writer() { # writer NAME RUN FIRST_ID
    local i=0 a
    while [ ! -e "$run_dir/stop" ]; do
        a=$(($3 + i * 40))
        # a batch whose statement Citus planned on a shard that a split or
        # move has just removed fails in Citus ("could not find valid entry
        # for shard"); the application retries it once, as any would
        if ! deliver "$2" "$a" $((a + 49)) 2>>"$run_dir/$1.err"; then
            echo "batch $i" >>"$run_dir/$1.retried"
            sleep 0.2
            deliver "$2" "$a" $((a + 49)) 2>>"$run_dir/$1.err" || echo "batch $i" >>"$run_dir/$1.failed"
        fi
        i=$((i + 1))
    done
    echo "$i" >"$run_dir/$1.batches"
}
round=0
writers_start() {
    round=$((round + 1))
    rm -f "$run_dir/stop"
    writer "coord$round" app $((1000000 * round)) &
    writer "w1_$round" app_w1 $((1000000 * round + 500000)) &
}
writers_stop() {
    touch "$run_dir/stop"
    wait
    local w
    for w in "coord$round" "w1_$round"; do
        [ ! -e "$run_dir/$w.failed" ] || fail "writer $w: $(wc -l <"$run_dir/$w.failed") batches failed: $(tail -3 "$run_dir/$w.err")"
        [ "$(cat "$run_dir/$w.batches")" -gt 2 ] || fail "writer $w wrote $(cat "$run_dir/$w.batches") batches"
        if [ -e "$run_dir/$w.retried" ]; then
            echo "writer $w: $(wc -l <"$run_dir/$w.retried") batches failed once and were retried:" \
                "$(sort -u "$run_dir/$w.err" | grep ERROR | sed 's/[0-9][0-9]*/N/g' | sort -u | tr '\n' ' ')"
        fi
    done
}

# Every shard of both tables, on whichever node it is now, carries the
# counters' triggers (as many as the first shard had), and there is one
# shard table per shard in Citus's metadata (moved-away copies cleaned up)
triggers_per_shard=
shard_triggers() {
    coord -q -c "SET client_min_messages = warning" -c "CALL citus_cleanup_orphaned_resources()" >/dev/null
    local got want
    got=$(for p in $nodes; do on_node "$p" -tA -c "
        SELECT c.relname || ' ' || (SELECT count(*) FROM pg_trigger t WHERE t.tgrelid = c.oid AND t.tgname ~ '^counter_')
        FROM pg_class c WHERE c.relname ~ '^p?ev_[0-9]+$' AND c.relkind IN ('r', 'p')"; done | sort)
    want=$(coord -tA -c "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid IN ('sm.ev'::regclass, 'sm.pev'::regclass)")
    [ "$(wc -l <<<"$got")" = "$want" ] || fail "$1: $(wc -l <<<"$got") shard tables on the nodes for $want shards: $got"
    [ -n "$triggers_per_shard" ] || triggers_per_shard=$(sed -n '1s/.* //p' <<<"$got")
    [ "$triggers_per_shard" -ge 6 ] || fail "$1: $triggers_per_shard counter_ext triggers on a shard: $got"
    got=$(awk -v n="$triggers_per_shard" '$2 != n' <<<"$got")
    [ -z "$got" ] || fail "$1: shards without the counters' triggers: $got"
}
check() {
    local what=$1 got
    got=$(ce_citus_mismatches owner evc sm.ev "kind <> 'bot'")
    [ "$got" = 0 ] || fail "$what: $got keys of evc differ from count(*) (before any reconciliation)"
    got=$(ce_citus_mismatches owner pevc sm.pev "true")
    [ "$got" = 0 ] || fail "$what: $got keys of pevc differ from count(*) (before any reconciliation)"
    for c in evc pevc; do
        got=$(owner -tA -c "SELECT keys_corrected || ' ' || outcome FROM counter.reconcile('$c', '2026-07-10', all_keys => true)")
        [ "$got" = "0 ok" ] || fail "$what: the reconciliation of $c: $got (0 ok expected: nothing to correct)"
    done
    owner -q -c "SELECT counter.rollup_refresh_dirty('ev_r')" -c "SELECT counter.rollup_refresh_dirty('pev_r')" >/dev/null
    got=$(owner -tA <<'SQL' | grep -v '^$' | tail -1
CREATE TEMP TABLE got_e AS SELECT k, hour, count FROM sm.ev_r;
CREATE TEMP TABLE want_e AS SELECT k, counter.rollup_hour(at) AS hour, count(*) AS count FROM sm.ev
    WHERE kind <> 'bot' GROUP BY 1, 2;
CREATE TEMP TABLE got_p AS SELECT k, kind, hour, count, distinct_id::bytea AS d FROM sm.pev_r;
CREATE TEMP TABLE want_p AS SELECT k, kind, counter.rollup_hour(at) AS hour, count(*) AS count,
    counter.hll_add_agg(id, 14)::bytea AS d FROM sm.pev GROUP BY 1, 2, 3;
SELECT (SELECT count(*) FROM got_e FULL JOIN want_e USING (k, hour) WHERE got_e.count IS DISTINCT FROM want_e.count)
     + (SELECT count(*) FROM got_p FULL JOIN want_p USING (k, kind, hour)
        WHERE got_p.count IS DISTINCT FROM want_p.count OR got_p.d IS DISTINCT FROM want_p.d)
     || ' ' || (SELECT count(*) FROM want_p) || ' ' || (SELECT count(*) FROM sm.ev);
SQL
)
    [ "${got%% *}" = 0 ] || fail "$what: rollups: $got (rows differing from GROUP BY, rollup rows, events)"
    shard_triggers "$what"
    echo "ok: $what: no write failed twice; every counter equals count(*) with no reconciliation (which corrects nothing), every rollup row equals GROUP BY, sketch bytes too ($(cut -d' ' -f3 <<<"$got") events); every shard carries the triggers"
}

deliver app 1 3000
deliver app_w1 2001 4000
check "before any shard operation"

# shard_on PORT: the first shard of sm.ev placed on that node
shard_on() {
    coord -tA -c "SELECT s.shardid FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid)
                  JOIN pg_dist_node n USING (groupid)
                  WHERE s.logicalrelid = 'sm.ev'::regclass AND n.nodeport = $1 ORDER BY s.shardid LIMIT 1"
}
node_id() { coord -tA -c "SELECT nodeid FROM pg_dist_node WHERE nodeport = $1"; }
# split_point SHARD: the middle of its hash range
split_point() {
    coord -tA -c "SELECT ((shardminvalue::bigint + shardmaxvalue::bigint) / 2)::text FROM pg_dist_shard WHERE shardid = $1"
}
shard_count() { coord -tA -c "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'sm.ev'::regclass"; }
# operation WHAT SQL: runs SQL as the superuser on the coordinator, writers running
operation() {
    local out
    out=$(coord -c "SET client_min_messages = warning" -c "$2" 2>&1) || fail "$1 failed: $out"
}
# attempt WHAT SQL: a shard operation on the counters' colocation group: it
# fails because their owner may not create in counter_internal (or, a split,
# because the new shard's triggers are refused), or it succeeds (the checks
# after it hold either way)
attempted=
attempt() {
    local out
    if out=$(coord -c "SET client_min_messages = warning" -c "$2" 2>&1); then
        attempted="$attempted; $1: done"
    else
        if grep -q "permission denied for schema counter_internal" <<<"$out"; then
            attempted="$attempted; $1: permission denied for schema counter_internal"
        elif grep -q "ERROR:  trigger counter_[a-z_0-9]* of counter_ext on sm\.p\?ev_[0-9]* is refused" <<<"$out"; then
            # a split's new shard is not in the worker's metadata yet when
            # its triggers are made: counter_ext's check refuses them
            attempted="$attempted; $1: the new shard's trigger refused"
        else
            fail "$1 failed otherwise: $out"
        fi
    fi
}
w1=$CE_citus_w1_PORT
w2=$CE_citus_w2_PORT

writers_start
attempt "a move (default mode)" "SELECT citus_move_shard_placement($(shard_on "$w1"), '127.0.0.1', $w1, '127.0.0.1', $w2)"
attempt "a move (block_writes)" "SELECT citus_move_shard_placement($(shard_on "$w2"), '127.0.0.1', $w2, '127.0.0.1', $w1,
                                                                  shard_transfer_mode := 'block_writes')"
s=$(shard_on "$w1")
attempt "a split (default mode)" \
    "SELECT citus_split_shard_by_split_points($s, ARRAY['$(split_point "$s")'], ARRAY[$(node_id "$w1"), $(node_id "$w2")])"
s=$(shard_on "$w2")
attempt "a split (block_writes)" \
    "SELECT citus_split_shard_by_split_points($s, ARRAY['$(split_point "$s")'], ARRAY[$(node_id "$w2"), $(node_id "$w1")],
                                             shard_transfer_mode := 'block_writes')"
writers_stop
echo "ok: with the counters and rollups in place${attempted}"
check "moves and splits tried in both modes, writers through the coordinator and a worker"

# The way round (doc/citus.md): drop the counters and rollups, move, track
# and make them again (their values are counted from the rows)
owner -q -c "SELECT counter.untrack('evc')" -c "SELECT counter.untrack('pevc')" \
    -c "SELECT counter.rollup_drop('ev_r')" -c "SELECT counter.rollup_drop('pev_r')" >/dev/null
writers_start
before=$(shard_count)
s=$(shard_on "$w1")
operation "a move (default mode)" "SELECT citus_move_shard_placement($s, '127.0.0.1', $w1, '127.0.0.1', $w2)"
s=$(shard_on "$w2")
operation "a split (default mode)" \
    "SELECT citus_split_shard_by_split_points($s, ARRAY['$(split_point "$s")'], ARRAY[$(node_id "$w2"), $(node_id "$w1")])"
operation "draining worker 2" "SELECT citus_drain_node('127.0.0.1', $w2)"
on_w2=$(coord -tA -c "SELECT count(*) FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid) WHERE n.nodeport = $w2")
[ "$on_w2" = 0 ] || fail "worker 2 still holds $on_w2 placements after the drain"
operation "worker 2 taking shards again" "SELECT citus_set_node_property('127.0.0.1', $w2, 'shouldhaveshards', true)"
operation "a rebalance" "SELECT rebalance_table_shards()"
writers_stop
[ "$(shard_count)" = $((before + 1)) ] || fail "sm.ev has $(shard_count) shards after a split of $before"
on_w2=$(coord -tA -c "SELECT count(*) FROM pg_dist_placement p JOIN pg_dist_shard s USING (shardid)
                      JOIN pg_dist_node n USING (groupid) WHERE n.nodeport = $w2 AND s.logicalrelid = 'sm.ev'::regclass")
[ "$on_w2" -ge 2 ] || fail "the rebalance left $on_w2 shards of sm.ev on worker 2"
owner -q >/dev/null <<'SQL'
SET client_min_messages = warning;
SELECT counter.track('evc', 'sm.ev', 'k', 'at', filter => $$kind <> 'bot'$$);
SELECT counter.track('pevc', 'sm.pev', 'k', 'at');
SELECT counter.rollup_create('ev_r', 'sm.ev', 'at', '{k}', mode => 'deferred', filter => $$kind <> 'bot'$$);
SELECT counter.rollup_create('pev_r', 'sm.pev', 'at', '{k,kind}', mode => 'deferred', distinct_on => '{id}');
SQL
# a counter made on a table with rows counts them at its first reconciliation (the backfill)
for c in evc pevc; do
    got=$(owner -tA -c "SELECT outcome FROM counter.reconcile('$c', '2026-07-10', all_keys => true)")
    [ "$got" = ok ] || fail "the backfill of $c: $got"
done
deliver app_w2 4001 5000
triggers_per_shard=
check "untracked, moved, split, drained and rebalanced with writers running, tracked again; then writes through worker 2"
