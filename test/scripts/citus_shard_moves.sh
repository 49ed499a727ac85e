#!/usr/bin/env bash
# What an operator does to a growing Citus cluster, with counter_ext on it
# and writers running: shard moves (Citus's default mode, logical
# replication, and block_writes), shard splits (both modes), draining a
# node and rebalancing (both block_writes: the default mode's logical
# replication is the first move's, with the same writers). A plain and a
# partitioned distributed table (colocated), each with a trigger-mode counter (one with a filter), two
# deferred rollups, one grouped by the distribution column and one by
# another column (one of each with a filter, the others with a distinct
# sketch), and two trigger-mode rollups (1.8; one grouped by the
# distribution column, one by another column; one of each with a filter), owned by
# an unprivileged role, written by another through the coordinator and
# directly through a worker the whole time, re-delivered rows included; and
# a third colocated table with an application-mode counter (1.8: its state
# and inbox beside the rows), written with its adds by both writers (1.8:
# counter.add on a worker node too); and on each of the first two a
# trigger-mode counter keyed by another column (1.8: its state anchored on
# every shard).
#
# Citus makes a moved or split shard's table again as the table's owner:
# the counters' and rollups' state is kept beside the source, in its schema,
# where the owner may create (1.7 kept it in counter_internal, where the
# owner may not: every move failed, "permission denied for schema
# counter_internal"; and a deferred rollup's dirty log had no replica
# identity, so Citus refused its default mode before trying). Every
# operation succeeds in both modes, no write is lost (a batch Citus fails
# during a split is retried, as an application would), and after every step,
# with no reconciliation, every counter equals count(*), a reconciliation
# corrects nothing, every rollup row equals GROUP BY (sketch bytes too), and
# every shard, new ones included, carries the counters' triggers. A counter
# whose owner may not create in the source's schema keeps its state in
# counter_internal, with a warning saying that Citus cannot move the shards.
# citus: whole on 15
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
CREATE TABLE sm.aev (id bigint NOT NULL, k bigint NOT NULL, at timestamptz NOT NULL, PRIMARY KEY (k, id));
SELECT create_distributed_table('sm.aev', 'k', colocate_with := 'sm.ev');
GRANT USAGE ON SCHEMA sm TO sm_app;
GRANT SELECT, INSERT ON sm.ev, sm.pev, sm.aev TO sm_app;
SELECT counter.track('evc', 'sm.ev', 'k', 'at', filter => $$kind <> 'bot'$$);
SELECT counter.track('pevc', 'sm.pev', 'k', 'at');
SELECT counter.track('aevc', 'sm.aev', 'k', 'at', mode => 'application');
-- keyed by another column than the distribution column (1.8): the state
-- anchored on every shard, with its anchor and run tables
SELECT counter.track('evkc', 'sm.ev', 'kind', 'at', filter => $$kind <> 'bot'$$);
SELECT counter.track('pevkc', 'sm.pev', 'kind', 'at');
SELECT counter.rollup_create('ev_r', 'sm.ev', 'at', '{k}', mode => 'deferred', filter => $$kind <> 'bot'$$);
SELECT counter.rollup_create('pev_r', 'sm.pev', 'at', '{k,kind}', mode => 'deferred', distinct_on => '{id}');
-- grouped by another column (1.8): the rollup table is the coordinator's,
-- the dirty log moves with the shards
SELECT counter.rollup_create('evk_r', 'sm.ev', 'at', '{kind}', mode => 'deferred', filter => $$kind <> 'bot'$$);
SELECT counter.rollup_create('pevk_r', 'sm.pev', 'at', '{kind}', mode => 'deferred', distinct_on => '{id}');
-- trigger mode (1.8): added to the rollup's shard at each writer's commit
SELECT counter.rollup_create('evt_r', 'sm.ev', 'at', '{k,kind}', filter => $$kind <> 'bot'$$);
SELECT counter.rollup_create('pevt_r', 'sm.pev', 'at', '{k}', distinct_on => '{id}');
-- trigger mode grouped by another column (1.8): its table grouped by k too
-- (colocated, moved with the shards), read through the view it is summed into
SELECT counter.rollup_create('evo_r', 'sm.ev', 'at', '{kind}', filter => $$kind <> 'bot'$$);
SELECT counter.rollup_create('pevo_r', 'sm.pev', 'at', '{kind}', distinct_on => '{id}');
SQL

# deliver RUN A B: rows A..B into both tables in one transaction; a row
# delivered again conflicts and is not counted; into sm.aev too, each new
# row with its add
deliver() {
    local adds="CREATE TEMP TABLE new_a ON COMMIT DROP AS WITH ins AS (
    INSERT INTO sm.aev SELECT id, k, at FROM sm.ev WHERE id BETWEEN $2 AND $3 ON CONFLICT DO NOTHING RETURNING k, at)
SELECT * FROM ins;
SELECT count(counter.add('aevc', k, n, at)) FROM (SELECT k, at, count(*) AS n FROM new_a GROUP BY 1, 2) x;"
    $1 -q >/dev/null <<SQL
BEGIN;
INSERT INTO sm.ev SELECT g, g % 61, '2026-07-01 10:00+00'::timestamptz + (g % 37) * interval '47 minutes'
    + CASE WHEN g % 53 = 0 THEN interval '4 days' ELSE interval '0' END, (ARRAY['view', 'bot', 'click'])[1 + g % 3]
FROM generate_series($2, $3) g ON CONFLICT DO NOTHING;
INSERT INTO sm.pev SELECT id, k, at, kind FROM sm.ev WHERE id BETWEEN $2 AND $3 ON CONFLICT DO NOTHING;
$adds
COMMIT;
SQL
}
# Two writers, through the coordinator and through worker 1, in batches of
# 50 rows whose first 10 repeat the previous batch's last 10, 0.2 s apart,
# until stopped (a batch that fails is retried; failing 20 more times fails
# the test; CE_WRITER_PAUSE sets the pause). Writing flat out, they took
# the cores from the operations: the test ran 150-170 s, not 130, for 22-26
# batches each during the moves and splits instead of 15-17.
run_dir=$(mktemp -d)
trap 'touch "$run_dir/stop"; wait; rm -rf "$run_dir"; [ -n "${CE_CITUS_KEEP:-}" ] || ce_cluster_stop_all' EXIT
writer() { # writer NAME RUN FIRST_ID
    local i=0 a
    while [ ! -e "$run_dir/stop" ]; do
        a=$(($3 + i * 40))
        # a batch whose statement Citus planned on a shard that a split or
        # move is removing fails in Citus ("could not find valid entry for
        # shard") until the operation ends; the application retries it, as
        # any would, up to 20 times in 10 s
        if ! deliver "$2" "$a" $((a + 49)) 2>>"$run_dir/$1.err"; then
            echo "batch $i" >>"$run_dir/$1.retried"
            local try=1
            until deliver "$2" "$a" $((a + 49)) 2>>"$run_dir/$1.err"; do
                try=$((try + 1))
                [ "$try" -le 20 ] || { echo "batch $i" >>"$run_dir/$1.failed"; break; }
                sleep 0.5
            done
        fi
        i=$((i + 1))
        sleep "${CE_WRITER_PAUSE:-0.2}"
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
        echo "writer $w: $(cat "$run_dir/$w.batches") batches"
        if [ -e "$run_dir/$w.retried" ]; then
            echo "writer $w: $(wc -l <"$run_dir/$w.retried") batches failed and were retried:" \
                "$(sort -u "$run_dir/$w.err" | grep ERROR | sed 's/[0-9][0-9]*/N/g' | sort -u | tr '\n' ' ')"
        fi
    done
}

# Every shard of both tables, on whichever node it is now, carries the
# counters' triggers (as many as the first shard had; a moved or split shard
# gets the TRUNCATE trigger too, which Citus's own copy leaves out), and there is one
# shard table per shard in Citus's metadata (moved-away copies cleaned up)
triggers_per_shard=
shard_triggers() {
    coord -q -c "SET client_min_messages = warning" -c "CALL citus_cleanup_orphaned_resources()" >/dev/null
    local got want
    got=$(for p in $nodes; do on_node "$p" -tA -c "
        SELECT c.relname || ' ' || (SELECT count(*) FROM pg_trigger t WHERE t.tgrelid = c.oid AND t.tgname ~ '^counter_'
                                    AND t.tgname !~ '_trunc_')
        FROM pg_class c WHERE c.relname ~ '^p?ev_[0-9]+$' AND c.relkind IN ('r', 'p')"; done | sort)
    want=$(coord -tA -c "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid IN ('sm.ev'::regclass, 'sm.pev'::regclass)")
    [ "$(wc -l <<<"$got")" = "$want" ] || fail "$1: $(wc -l <<<"$got") shard tables on the nodes for $want shards: $got"
    [ -n "$triggers_per_shard" ] || triggers_per_shard=$(sed -n '1s/.* //p' <<<"$got")
    [ "$triggers_per_shard" -ge 6 ] || fail "$1: $triggers_per_shard counter_ext triggers on a shard: $got"
    got=$(awk -v n="$triggers_per_shard" '$2 != n' <<<"$got")
    [ -z "$got" ] || fail "$1: shards without the counters' triggers: $got"
    # every shard of the application-mode counter's inbox carries its trigger
    got=$(for p in $nodes; do on_node "$p" -tA -c "
        SELECT c.relname || ' ' || (SELECT count(*) FROM pg_trigger t WHERE t.tgrelid = c.oid AND t.tgname ~ '^counter_[0-9]+_add(_[0-9]+)?$')
        FROM pg_class c WHERE c.relname ~ '^counter_tracked_[0-9]+_inbox_[0-9]+$' AND c.relkind = 'r'"; done | sort)
    want=$(coord -tA -c "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid::text ~ '^sm.counter_tracked_[0-9]+_inbox$'")
    [ "$want" -ge 4 ] && [ "$(wc -l <<<"$got")" = "$want" ] || fail "$1: $(wc -l <<<"$got") inbox shards on the nodes for $want shards: $got"
    got=$(awk '$2 != 1' <<<"$got")
    [ -z "$got" ] || fail "$1: inbox shards without their trigger: $got"
}
# kind_mismatches COUNTER TABLE FILTER: keys (kind) of a counter keyed by
# kind whose value differs from count(*)
kind_mismatches() {
    owner -tA -c "SELECT count(*) FROM (SELECT kind, count(*) AS n FROM $2 WHERE $3 GROUP BY kind) t
                  FULL JOIN (SELECT key AS kind, value FROM counter.tracked_values WHERE counter = '$1') v USING (kind)
                  WHERE coalesce(t.n, 0) <> coalesce(v.value, 0)"
}
check() {
    local what=$1 got t=$SECONDS
    got=$(ce_citus_mismatches owner evc sm.ev "kind <> 'bot'")
    [ "$got" = 0 ] || fail "$what: $got keys of evc differ from count(*) (before any reconciliation)"
    got=$(ce_citus_mismatches owner pevc sm.pev "true")
    [ "$got" = 0 ] || fail "$what: $got keys of pevc differ from count(*) (before any reconciliation)"
    got=$(ce_citus_mismatches owner aevc sm.aev "true")
    [ "$got" = 0 ] || fail "$what: $got keys of aevc differ from count(*) (before any reconciliation)"
    got=$(kind_mismatches evkc sm.ev "kind <> 'bot'")
    [ "$got" = 0 ] || fail "$what: $got keys of evkc (keyed by kind) differ from count(*) (before any reconciliation)"
    got=$(kind_mismatches pevkc sm.pev "true")
    [ "$got" = 0 ] || fail "$what: $got keys of pevkc (keyed by kind) differ from count(*) (before any reconciliation)"
    [ "$(owner -tA -c "SELECT count(*) FROM sm.aev")" -gt 0 ] || fail "$what: sm.aev is empty"
    for c in evc pevc aevc evkc pevkc; do
        got=$(owner -tA -c "SELECT keys_corrected || ' ' || outcome FROM counter.reconcile('$c', '2026-07-10', all_keys => true)")
        [ "$got" = "0 ok" ] || fail "$what: the reconciliation of $c: $got (0 ok expected: nothing to correct)"
    done
    owner -q -c "SELECT counter.rollup_refresh_dirty('ev_r')" -c "SELECT counter.rollup_refresh_dirty('pev_r')" \
        -c "SELECT counter.rollup_refresh_dirty('evk_r')" -c "SELECT counter.rollup_refresh_dirty('pevk_r')" \
        -c "SELECT counter.rollup_refresh_dirty('evt_r')" -c "SELECT counter.rollup_refresh_dirty('pevt_r')" \
        -c "SELECT counter.rollup_refresh_dirty('evo_r')" -c "SELECT counter.rollup_refresh_dirty('pevo_r')" >/dev/null
    got=$(owner -tA <<'SQL' | grep -v '^$' | tail -1
CREATE TEMP TABLE got_eo AS SELECT kind, hour, count FROM sm.evo_r;
CREATE TEMP TABLE got_po AS SELECT kind, hour, count, distinct_id::bytea AS d FROM sm.pevo_r;
CREATE TEMP TABLE got_e AS SELECT k, hour, count FROM sm.ev_r;
CREATE TEMP TABLE want_e AS SELECT k, counter.rollup_hour(at) AS hour, count(*) AS count FROM sm.ev
    WHERE kind <> 'bot' GROUP BY 1, 2;
CREATE TEMP TABLE got_p AS SELECT k, kind, hour, count, distinct_id::bytea AS d FROM sm.pev_r;
CREATE TEMP TABLE want_p AS SELECT k, kind, counter.rollup_hour(at) AS hour, count(*) AS count,
    counter.hll_add_agg(id, 14)::bytea AS d FROM sm.pev GROUP BY 1, 2, 3;
CREATE TEMP TABLE got_ek AS SELECT kind, hour, count FROM sm.evk_r;
CREATE TEMP TABLE want_ek AS SELECT kind, counter.rollup_hour(at) AS hour, count(*) AS count FROM sm.ev
    WHERE kind <> 'bot' GROUP BY 1, 2;
CREATE TEMP TABLE got_pk AS SELECT kind, hour, count, distinct_id::bytea AS d FROM sm.pevk_r;
CREATE TEMP TABLE want_pk AS SELECT kind, counter.rollup_hour(at) AS hour, count(*) AS count,
    counter.hll_add_agg(id, 14)::bytea AS d FROM sm.pev GROUP BY 1, 2;
CREATE TEMP TABLE got_et AS SELECT k, kind, hour, count FROM sm.evt_r;
CREATE TEMP TABLE want_et AS SELECT k, kind, counter.rollup_hour(at) AS hour, count(*) AS count FROM sm.ev
    WHERE kind <> 'bot' GROUP BY 1, 2, 3;
CREATE TEMP TABLE got_pt AS SELECT k, hour, count, distinct_id::bytea AS d FROM sm.pevt_r;
CREATE TEMP TABLE want_pt AS SELECT k, counter.rollup_hour(at) AS hour, count(*) AS count,
    counter.hll_add_agg(id, 14)::bytea AS d FROM sm.pev GROUP BY 1, 2;
SELECT (SELECT count(*) FROM got_e FULL JOIN want_e USING (k, hour) WHERE got_e.count IS DISTINCT FROM want_e.count)
     + (SELECT count(*) FROM got_et FULL JOIN want_et USING (k, kind, hour) WHERE got_et.count IS DISTINCT FROM want_et.count)
     + (SELECT count(*) FROM got_pt FULL JOIN want_pt USING (k, hour)
        WHERE got_pt.count IS DISTINCT FROM want_pt.count OR got_pt.d IS DISTINCT FROM want_pt.d)
     + (SELECT count(*) FROM got_p FULL JOIN want_p USING (k, kind, hour)
        WHERE got_p.count IS DISTINCT FROM want_p.count OR got_p.d IS DISTINCT FROM want_p.d)
     + (SELECT count(*) FROM got_ek FULL JOIN want_ek USING (kind, hour) WHERE got_ek.count IS DISTINCT FROM want_ek.count)
     + (SELECT count(*) FROM got_pk FULL JOIN want_pk USING (kind, hour)
        WHERE got_pk.count IS DISTINCT FROM want_pk.count OR got_pk.d IS DISTINCT FROM want_pk.d)
     + (SELECT count(*) FROM got_eo FULL JOIN want_ek USING (kind, hour) WHERE got_eo.count IS DISTINCT FROM want_ek.count)
     + (SELECT count(*) FROM got_po FULL JOIN want_pk USING (kind, hour)
        WHERE got_po.count IS DISTINCT FROM want_pk.count OR got_po.d IS DISTINCT FROM want_pk.d)
     || ' ' || (SELECT count(*) FROM want_p) || ' ' || (SELECT count(*) FROM sm.ev);
SQL
)
    [ "${got%% *}" = 0 ] || fail "$what: rollups: $got (rows differing from GROUP BY, rollup rows, events)"
    shard_triggers "$what"
    echo "ok: $what: no write lost; every counter equals count(*) with no reconciliation (which corrects nothing), every rollup row equals GROUP BY, sketch bytes too ($(cut -d' ' -f3 <<<"$got") events); every shard carries the triggers ($((SECONDS - t)) s)"
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
    local out t=$SECONDS
    out=$(coord -c "SET client_min_messages = warning" -c "SET statement_timeout = '300s'" -c "$2" 2>&1) ||
        fail "$1 failed: $out"
    # A move leaves the source shard behind until no transaction holds a
    # lock on it; Citus drops it later, and refuses a move onto a node where
    # such a leftover still stands ("the orphaned shard ... could not be
    # cleaned up": seen once, a block_writes move of the shard the default
    # move had just taken away). What an operator does: clean up before the
    # next operation, retrying while the writers' transactions hold locks.
    local i
    for i in $(seq 1 120); do
        coord -q -c "SET client_min_messages = warning" -c "CALL citus_cleanup_orphaned_resources()" >/dev/null 2>&1 || true
        if [ "$(coord -tA -c "SELECT count(*) FROM pg_dist_cleanup")" = 0 ]; then
            echo "$1: $((SECONDS - t)) s$([ "$i" = 1 ] || echo ", its leftovers cleaned up after $i tries")"
            return 0
        fi
        sleep 0.5
    done
    fail "$1: leftovers not cleaned up in 60 s: $(coord -tA -c "SELECT string_agg(object_name, ' ') FROM pg_dist_cleanup")"
}
w1=$CE_citus_w1_PORT
w2=$CE_citus_w2_PORT

# the state is beside the source, owned by the owner, no right for anyone else
got=$(coord -tA -c "SELECT string_agg(c.relname || ':' || c.relowner::regrole || ':' || coalesce(c.relacl::text, '-'), ' ' ORDER BY c.relname)
                    FROM pg_class c WHERE c.relnamespace = 'sm'::regnamespace AND c.relname ~ '^counter_(tracked|rollup)_' AND c.relkind = 'r'")
want=$(coord -tA -c "SELECT string_agg(n || ':sm_own:{sm_own=arwdDxt' || CASE WHEN current_setting('server_version_num')::int >= 170000 THEN 'm' ELSE '' END || '/sm_own}', ' ' ORDER BY n)
                     FROM (SELECT format('counter_tracked_%s_%s', c.counter_id, p) AS n FROM counter.tracked c,
                           unnest(CASE WHEN c.anchor_column IS NULL THEN '{base,delta,run}' ELSE '{base,delta,anchor,run}' END::text[]) p
                           UNION ALL SELECT format('counter_rollup_%s_dirty', r.rollup_id) FROM counter.rollups r) x")
# the application-mode counter's inbox: the owner's, PUBLIC may insert
# (its trigger asks for INSERT on sm.aev)
aevc_id=$(coord -tA -c "SELECT counter_id FROM counter.tracked WHERE name = 'aevc'")
want="$want counter_tracked_${aevc_id}_inbox:sm_own:{sm_own=arwdDxt$(coord -tA -c "SELECT CASE WHEN current_setting('server_version_num')::int >= 170000 THEN 'm' ELSE '' END")/sm_own,=a/sm_own}"
want=$(tr ' ' '\n' <<<"$want" | sort | tr '\n' ' ' | sed 's/ $//')
got=$(tr ' ' '\n' <<<"$got" | sort | tr '\n' ' ' | sed 's/ $//')
[ "$got" = "$want" ] || fail "the state tables beside the source: $got (expected $want)"
out=$(app -c "UPDATE sm.counter_tracked_1_base SET base = base + 1" 2>&1) && fail "the writer changed a counter's state: $out"

writers_start
s=$(shard_on "$w1")
operation "a move (default mode: logical replication)" \
    "SELECT citus_move_shard_placement($s, '127.0.0.1', $w1, '127.0.0.1', $w2)"
s=$(shard_on "$w2")
operation "a move (block_writes)" \
    "SELECT citus_move_shard_placement($s, '127.0.0.1', $w2, '127.0.0.1', $w1, shard_transfer_mode := 'block_writes')"
s=$(shard_on "$w2")
operation "a split (block_writes)" \
    "SELECT citus_split_shard_by_split_points($s, ARRAY['$(split_point "$s")'], ARRAY[$(node_id "$w2"), $(node_id "$w1")],
                                             shard_transfer_mode := 'block_writes')"
writers_stop
# Citus's non-blocking split hangs when rows of the shard are updated during
# its catch-up (citus issue 6790: "publisher did not send replica identity
# column expected", retried for ever), and every counted write updates a
# delta row: without writers (doc/citus.md)
s=$(shard_on "$w1")
operation "a split (default mode)" \
    "SELECT citus_split_shard_by_split_points($s, ARRAY['$(split_point "$s")'], ARRAY[$(node_id "$w1"), $(node_id "$w2")])"
[ "$(shard_count)" = 6 ] || fail "sm.ev has $(shard_count) shards after two splits of 4"
check "a move in each mode and a block_writes split with writers through the coordinator and a worker, a split in the default mode"

writers_start
operation "draining worker 2 (block_writes)" "SELECT citus_drain_node('127.0.0.1', $w2, shard_transfer_mode := 'block_writes')"
on_w2=$(coord -tA -c "SELECT count(*) FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid) WHERE n.nodeport = $w2")
[ "$on_w2" = 0 ] || fail "worker 2 still holds $on_w2 placements after the drain"
operation "worker 2 taking shards again" "SELECT citus_set_node_property('127.0.0.1', $w2, 'shouldhaveshards', true)"
operation "a rebalance (block_writes)" "SELECT rebalance_table_shards(shard_transfer_mode := 'block_writes')"
writers_stop
on_w2=$(coord -tA -c "SELECT count(*) FROM pg_dist_placement p JOIN pg_dist_shard s USING (shardid)
                      JOIN pg_dist_node n USING (groupid) WHERE n.nodeport = $w2 AND s.logicalrelid = 'sm.ev'::regclass")
[ "$on_w2" -ge 2 ] || fail "the rebalance left $on_w2 shards of sm.ev on worker 2"
deliver app_w2 4001 5000
check "a drained node and a rebalance, writers running; then writes through worker 2"

# TRUNCATE after the moves (the moved shards carry the TRUNCATE trigger too)
owner -q -c "TRUNCATE sm.ev"
got=$(owner -tA -c "SELECT count(*) FROM counter.tracked_values WHERE counter IN ('evc', 'evkc') AND value <> 0")
[ "$got" = 0 ] || fail "after TRUNCATE, $got keys of evc and evkc are not 0"
deliver app 6001 6500
deliver app_w2 6401 7000
# a rollup keeps its rows through TRUNCATE (doc/reference/rollup.md: retention): recomputed
owner -q -c "SELECT counter.rollup_recompute('ev_r', '2026-07-01', '2026-07-10')" \
    -c "SELECT counter.rollup_recompute('evk_r', '2026-07-01', '2026-07-10')" \
    -c "SELECT counter.rollup_recompute('evt_r', '2026-07-01', '2026-07-10')" \
    -c "SELECT counter.rollup_recompute('evo_r', '2026-07-01', '2026-07-10')" >/dev/null
check "TRUNCATE, then writes through the coordinator and worker 2, the rollup recomputed"

# The shard triggers write as the table's owner, and PUBLIC may execute
# their functions (Citus makes them again as the owner): a role with the
# TRIGGER privilege may not attach them, on the table or directly on a shard
coord -q -c "GRANT TRIGGER ON sm.ev TO sm_app"
shard=$(on_node "$w1" -tA -c "SELECT relname FROM pg_class WHERE relname ~ '^ev_[0-9]+$' LIMIT 1")
args="'1', 'citus', 'k', 'at', '300', '64', '', 'sm.counter_tracked_1_delta', 'sm.counter_tracked_1_base'"
for target in "coord sm.ev" "w1 sm.$shard"; do
    run=app
    [ "${target%% *}" = w1 ] && run=app_w1
    out=$(PGOPTIONS="-c citus.override_table_visibility=off" $run -c "\set VERBOSITY verbose" -c "SET citus.enable_unsafe_triggers = on" \
        -c "CREATE TRIGGER sneak AFTER INSERT ON ${target#* } REFERENCING NEW TABLE AS ce_new FOR EACH STATEMENT
            EXECUTE FUNCTION counter_internal.tracked_shard_fold($args)" 2>&1) && fail "a role with TRIGGER attached a shard trigger to ${target#* }"
    grep -q "ERROR:  42501: only the owner of .* may attach the trigger sneak of counter_ext" <<<"$out" ||
        fail "attaching a shard trigger to ${target#* } with TRIGGER only: $out"
done
coord -q -c "REVOKE TRIGGER ON sm.ev FROM sm_app"
echo "ok: a role with TRIGGER on the table may not attach the shard triggers (on the distributed table or a shard)"

# The state beside the source is named by the shard triggers: renaming the
# schema, moving the table, renaming a state table are refused; writes go on
refused_ddl() { # refused_ddl RUN SQL [WHAT]
    local out
    out=$($1 -c "\set VERBOSITY verbose" -c "$2" 2>&1) && fail "made: $2"
    grep -q "ERROR:  0A000: the state of ${3:-counter \"evc\"} is kept in schema sm beside" <<<"$out" ||
        fail "$2: not refused with 0A000: $out"
}
coord -q -c "CREATE SCHEMA sm_other"
refused_ddl coord "ALTER SCHEMA sm RENAME TO sm_renamed" 'counter "aevc"'
refused_ddl coord "ALTER TABLE sm.ev SET SCHEMA sm_other"
refused_ddl owner "ALTER TABLE sm.counter_tracked_1_base RENAME TO x"
# an application-mode counter's inbox trigger names its table, a
# trigger-mode rollup's INSERT trigger its rollup table
refused_ddl owner "ALTER TABLE sm.aev RENAME TO aev2" 'counter "aevc"'
refused_ddl owner "ALTER TABLE sm.evt_r RENAME TO evt_r2" 'rollup "evt_r"'

# a rename made past the event trigger (a superuser with
# session_replication_role = replica): an add then fails with 55000, naming
# the table its inbox's trigger looks for
coord -q -c "SET session_replication_role = replica" -c "ALTER TABLE sm.aev RENAME TO aev2"
out=$(app -c "\set VERBOSITY verbose" -c "SELECT counter.add('aevc', 7::bigint, 1, '2026-07-01 10:00+00')" 2>&1) &&
    fail "an add after its table was renamed past the event trigger: $out"
grep -q "ERROR:  55000: the trigger counter_${aevc_id}_add_[0-9]* on counter_tracked_${aevc_id}_inbox_[0-9]* names the table sm.aev of tracked counter ${aevc_id}, which does not exist" <<<"$out" ||
    fail "an add after its table was renamed past the event trigger: $out"
coord -q -c "SET session_replication_role = replica" -c "ALTER TABLE sm.aev2 RENAME TO aev"
deliver app 7001 7100
check "a rename of the schema, a move of the table and a rename of a state table, of an application-mode counter's table and of a trigger-mode rollup's table refused"

# A table of the state's name already beside the source: refused (42P07), nothing made
seq=$(coord -tA -c "SELECT pg_get_serial_sequence('counter.rollups', 'rollup_id')")
next=$(coord -tA -c "SELECT last_value + CASE WHEN is_called THEN 1 ELSE 0 END FROM $seq")
owner -q -c "CREATE TABLE sm.counter_rollup_${next}_dirty (x int)"
out=$(owner -c "\set VERBOSITY verbose" -c "SELECT counter.rollup_create('clash', 'sm.ev', 'at', '{k}', mode => 'deferred')" 2>&1) &&
    fail "a rollup was made over an existing sm.counter_rollup_${next}_dirty: $out"
grep -q "ERROR:  42P07: relation sm.counter_rollup_${next}_dirty already exists" <<<"$out" || fail "the name clash: $out"
got=$(coord -tA -c "SELECT count(*) FROM counter.rollups WHERE name = 'clash'")
[ "$got" = 0 ] || fail "the refused rollup left $got catalog rows"
owner -q -c "DROP TABLE sm.counter_rollup_${next}_dirty"
echo "ok: a table of the state's name beside the source is refused with 42P07, nothing made"

# An owner who may not create in the source's schema: the state is kept in
# counter_internal, and track says that Citus cannot move the shards
# (distributed by a superuser: the owner may not create its shards there either)
coord -q -c "SET client_min_messages = warning" -c "CREATE SCHEMA sm_fixed" -c "GRANT USAGE ON SCHEMA sm_fixed TO sm_own" \
    -c "CREATE TABLE sm_fixed.ev (id bigint NOT NULL, k bigint NOT NULL, at timestamptz NOT NULL)" \
    -c "CREATE INDEX ON sm_fixed.ev (at)" -c "SELECT create_distributed_table('sm_fixed.ev', 'k', shard_count := 2)" \
    -c "ALTER TABLE sm_fixed.ev OWNER TO sm_own" >/dev/null
out=$(owner -c "SELECT counter.track('fixed', 'sm_fixed.ev', 'k', 'at')" 2>&1) || fail "track in a schema the owner may not create in: $out"
grep -q "WARNING:  the state of this counter is kept in schema counter_internal: Citus cannot move or split the shards of sm_fixed.ev" <<<"$out" ||
    fail "no warning that the shards cannot move: $out"
got=$(coord -tA -c "SELECT coalesce(state_schema::text, 'null') || ' ' || (to_regclass(format('counter_internal.tracked_%s_base', counter_id)) IS NOT NULL)
                    FROM counter.tracked WHERE name = 'fixed'")
[ "$got" = "null true" ] || fail "the state of a counter whose owner may not create beside it: $got"
app -q -c "SELECT 1" >/dev/null
coord -q -c "GRANT INSERT ON sm_fixed.ev TO sm_app" -c "GRANT USAGE ON SCHEMA sm_fixed TO sm_app"
app -q -c "INSERT INTO sm_fixed.ev SELECT g, g % 7, '2026-07-01 10:00+00' FROM generate_series(1, 100) g"
app_w1 -q -c "INSERT INTO sm_fixed.ev SELECT g, g % 7, '2026-07-01 10:00+00' FROM generate_series(101, 200) g"
got=$(ce_citus_mismatches owner fixed sm_fixed.ev "true")
[ "$got" = 0 ] || fail "the counter kept in counter_internal: $got keys differ from count(*)"
echo "ok: an owner who may not create in the source's schema: the state in counter_internal, a warning that the shards cannot move, every value equals count(*)"

# untrack: the copies of the TRUNCATE trigger Citus made on the moved and
# split shards (whose DROP TRIGGER Citus does not send) go with the
# counter's other triggers there (event trigger counter_citus_shard_truncate)
ids=$(coord -tA -c "SELECT string_agg(counter_id::text, '|') FROM counter.tracked WHERE name IN ('evc', 'pevc', 'evkc', 'pevkc')")
copies=$(for p in $nodes; do on_node "$p" -tA -c "SELECT count(*) FROM pg_trigger WHERE tgname ~ '^counter_($ids)_trunc_[0-9]+$'"; done |
    awk '{ s += $1 } END { print s + 0 }')
[ "$copies" -ge 2 ] || fail "the moved shards carry $copies copies of a TRUNCATE trigger (Citus copies them there)"
owner -q -c "SELECT counter.untrack('evc')" -c "SELECT counter.untrack('pevc')" \
    -c "SELECT counter.untrack('evkc')" -c "SELECT counter.untrack('pevkc')" >/dev/null
left=$(for p in $nodes; do on_node "$p" -tA -c "SELECT string_agg(tgrelid::regclass || '.' || tgname, ' ') FROM pg_trigger WHERE tgname ~ '^counter_($ids)_'"; done | grep -v '^$' || true)
[ -z "$left" ] || fail "untrack left triggers on the nodes: $left"
deliver app 7101 7200
owner -q -c "TRUNCATE sm.ev" -c "TRUNCATE sm.pev" || fail "sm.ev, sm.pev cannot be truncated after untrack"
echo "ok: untrack after moves and splits leaves no trigger on any shard ($copies TRUNCATE trigger copies were there)"
