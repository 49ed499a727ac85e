#!/usr/bin/env bash
# Issue 21 item 4, buffered mode (1.8): buffered trigger-mode tracked
# counters on a table Citus hash-distributes, keyed by its distribution
# column, with and without a filter (one calling the owner's function, which
# raises unless the owner runs it), on a plain and a partitioned distributed
# table, owned by an unprivileged role and written by another; the same rows
# go to plain tables on the coordinator with the same buffered counters.
# Each shard's trigger adds what it counts to the shared table of its node;
# a statement Citus prepares (two nodes written) writes its shard at once.
# Checked: single-row writes through the coordinator and through worker 1
# stay in the nodes' buffers (the delta shards hold less than count(*)),
# while counter.value, values_of (on the coordinator and on worker 1) and
# tracked_values equal count(*) with the filter, and the cluster equals one
# node; counter.flush writes every node's buffers (one transaction per node)
# and then the delta shards alone hold every count; a shard's
# reconciliation leaves a key whose amounts are still in the buffer alone
# (busy) instead of installing a truth that the flush would count twice;
# a worker restarted with amounts in its buffer (lost) and a shard moved
# with amounts left on its old node are found by the next flush, which
# schedules the reconciliation of every key, after which every value equals
# count(*) again; TRUNCATE, untrack; the writer may not flush, read or judge
# the owner's buffers through the functions PUBLIC may call (42501).
# (Keyed by another column: citus_buffered_anchored.sh.)
# citus: whole on 18
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
source test/citus.sh
# (synchronous_commit on: a worker is restarted as after a crash, and its
# committed rows must survive it)
ce_citus_script_start cb_own cb_app "synchronous_commit = on"

coord -q <<'SQL'
CREATE ROLE cb_own LOGIN;
CREATE ROLE cb_app LOGIN;
CREATE ROLE cb_none LOGIN;
CREATE SCHEMA cb AUTHORIZATION cb_own;
SQL
ce_citus_event_tables cb
# the counters' filter calls the owner's probe (it raises unless the owner
# runs it); the truth is read with the same condition written out
F="kind <> 'bot'"
for t in ev ev_one pev pev_one; do
    owner -q -c "SET client_min_messages = warning" \
        -c "SELECT counter.track('${t}_f', 'cb.$t', 'k', 'at', filter => 'cb.probe(kind)', bucket_width => '10 minutes',
                                 batch_size => 4, buffered => true)" \
        -c "SELECT counter.track('${t}_n', 'cb.$t', 'k', 'at', buffered => true)" >/dev/null
done
got=$(coord -tA -c "SELECT string_agg(name || ':' || distributed || ':' || buffered, ' ' ORDER BY name) FROM counter.tracked")
[ "$got" = "ev_f:true:true ev_n:true:true ev_one_f:false:true ev_one_n:false:true pev_f:true:true pev_n:true:true pev_one_f:false:true pev_one_n:false:true" ] ||
    fail "counters made: $got"
# every shard of each distributed counter's delta table is recorded with its placement
got=$(coord -tA -c "SELECT string_agg(t.name || ':' || (SELECT count(*) FROM counter_internal.tracked_shard_flushes f
                       WHERE f.counter_id = t.counter_id AND f.epoch IS NOT NULL), ' ' ORDER BY t.name)
                    FROM counter.tracked t WHERE t.distributed")
[ "$got" = "ev_f:8 ev_n:8 pev_f:4 pev_n:4" ] || fail "shards recorded at track: $got"
echo "ok: buffered trigger-mode counters are made on a distributed and a distributed partitioned table (each shard's placement recorded; keyed by another column: citus_buffered_anchored.sh)"

# Writes: single-row statements (one shard: committed on its node alone,
# so buffered there), multi-row ones (several nodes: prepared, written at
# once), through the coordinator and worker 1; re-deliveries and rollbacks
singles() { ce_citus_singles cb "$@"; } # TABLE A B VIA
for t in ev ev_one pev pev_one; do
    ce_citus_deliver cb "$t" 1 2000
    ce_citus_deliver cb "$t" 1501 3000             # re-delivered in part
    ce_citus_deliver cb "$t" 3001 3500 ROLLBACK
    singles "$t" 3501 3900 coord
done
for t in ev pev; do
    singles "$t" 4001 4300 w1
    ce_citus_deliver cb "$t" 4301 4600 COMMIT w1
    ce_citus_deliver cb "$t" 4601 4700 ROLLBACK w1
    singles "${t}_one" 4001 4300 coord
    ce_citus_deliver cb "${t}_one" 4301 4600
done
for t in ev ev_one pev pev_one; do
    app -q <<SQL
UPDATE cb.$t SET kind = 'bot' WHERE id % 7 = 0 AND kind = 'view';
DELETE FROM cb.$t WHERE id % 13 = 0;
SQL
    singles "$t" 4701 4800 coord
done

# what the delta and base shards of counter c hold against count(*)
state_total() { ce_citus_state_total "$@"; }
check_reads() { ce_citus_buffered_reads cb k 99 bigint "$F" "$1"; } # WHAT
check_all() { ce_citus_buffered_all cb k "$F" "$1"; } # WHAT

# Before any flush: the delta shards lack what the nodes' buffers hold, the reads do not
for c in ev_n pev_n; do
    total=$(app -tA -c "SELECT count(*) FROM cb.${c%_n}")
    held=$(state_total "$c")
    [ "$held" -lt "$total" ] || fail "nothing of $c is in a buffer before its flush ($held in its tables, $total rows)"
done
pending_w1=$(on_node "$CE_citus_w1_PORT" -tA -c "SELECT coalesce(sum(entries), 0) FROM counter.buffer_shares()")
[ "$pending_w1" -gt 0 ] || fail "worker 1's shared table holds no entry before the flush"
check_reads "buffered, before the flush"
check_all "buffered, before the flush"
echo "ok: before any flush the delta shards lack the buffered adds (worker 1 holds $pending_w1 entries), and value, values_of (coordinator, worker 1) and tracked_values equal count(*) and one node"

# A key whose every add is still in a buffer: counter.value reads it,
# counter.tracked_values lists it after the next flush (doc/citus.md, limits)
app -q -c "INSERT INTO cb.ev VALUES (9001, 500, '2026-07-01 10:00+00', 'click', 1)" \
    -c "INSERT INTO cb.ev_one VALUES (9001, 500, '2026-07-01 10:00+00', 'click', 1)"
got=$(app -tA -c "SELECT counter.value('ev_n', 500::bigint) || ' ' || (SELECT count(*) FROM counter.tracked_values
                  WHERE counter = 'ev_n' AND key = '500')")
[ "$got" = "1 0" ] || fail "a key with only buffered adds: value and listings $got (expected 1 0)"

# The flush: every node writes its buffers, the delta shards then hold every count
for c in ev_f ev_n pev_f pev_n; do
    n=$(owner -tA -c "SELECT counter.flush('$c')")
    [ "$n" -gt 0 ] || fail "counter.flush('$c') wrote $n entries"
done
owner -q -c "SELECT counter.flush()" >/dev/null
for c in ev_n pev_n; do
    total=$(app -tA -c "SELECT count(*) FROM cb.${c%_n}")
    held=$(state_total "$c")
    [ "$held" = "$total" ] || fail "after the flush $c holds $held in its tables, $total rows"
done
# (an ordinary flush schedules no repair)
got=$(coord -tA -c "SELECT sum(f.repairs) FROM counter.tracked t JOIN counter_internal.tracked_flushes f USING (counter_id)
                    WHERE t.distributed")
[ "$got" = 0 ] || fail "the flushes without a restart or a move scheduled $got repairs"
check_all "after the flush"
got=$(app -tA -c "SELECT value FROM counter.tracked_values WHERE counter = 'ev_n' AND key = '500'")
[ "$got" = 1 ] || fail "the key with only buffered adds is listed with $got after the flush"
check_reads "after the flush"
echo "ok: counter.flush writes every node's buffers to the delta shards, which then hold every count (a key whose adds were all buffered is listed from then on)"

# Reconciliation finds nothing to repair
for c in ev_f ev_n pev_f pev_n; do
    got=$(owner -tA -c "SELECT keys_corrected FROM counter.reconcile('$c', all_keys => true)")
    [ "$got" = 0 ] || fail "the reconciliation of $c corrected $got keys after the flush"
done
echo "ok: the reconciliation of every key finds no drift"

# A key whose adds are still in the buffer is busy for its shard's
# reconciliation: the owner's run row for key 5's shard (as the batch sends
# it) must not install the truth (which counts the buffered rows) as base
singles ev 5001 5097 coord # every key once, buffered
singles ev_one 5001 5097 coord
run=$(coord -tA -c "SELECT counter_internal.tracked_table(t, 'run') FROM counter.tracked t WHERE name = 'ev_n'")
got=$(owner -tA -c "BEGIN; INSERT INTO $run AS r (anchor, w, keys, horizon) VALUES (5, now(), '{5}', 'infinity')
                     RETURNING r.found_keys, r.busy; ROLLBACK;" | grep -v '^BEGIN\|^ROLLBACK\|^INSERT\|^$' | head -1)
[ "$got" = "{5}|{t}" ] || fail "a key with buffered adds was not busy for its shard's reconciliation: $got"
for c in ev_n; do
    got=$(owner -tA -c "SELECT keys_corrected FROM counter.reconcile('$c', all_keys => true)")
    [ "$got" = 0 ] || fail "the reconciliation of $c after buffered adds corrected $got keys"
done
check_all "a key busy in the buffer, then reconciled"
echo "ok: a shard's reconciliation leaves a key with buffered adds alone (busy), and the next reconciliation (which flushes first) finds no drift"

# A worker restarted (immediate: a crash) loses what its buffer held; the
# next flush sees its new shared table and schedules the repair
ce_citus_buffered_restart cb

# A shard moved with amounts still on its old node: they are never flushed
# there (the placement is gone); the next flush finds the new placement and
# schedules the repair
w1=$CE_citus_w1_PORT w2=$CE_citus_w2_PORT
s=$(coord -tA -c "SELECT s.shardid FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid)
                  JOIN pg_dist_node n USING (groupid)
                  WHERE s.logicalrelid = 'cb.ev'::regclass AND n.nodeport = $w1 ORDER BY 1 LIMIT 1")
keys=$(coord -tA -c "SELECT string_agg(g::text, ',') FROM generate_series(0, 96) g
                     WHERE get_shard_id_for_distribution_column('cb.ev', g::bigint) = $s")
[ -n "$keys" ] || fail "no key falls in shard $s"
k1=${keys%%,*}
for t in ev ev_one; do
    app -q -c "INSERT INTO cb.$t VALUES (6001, $k1, '2026-07-01 10:00+00', 'click', 1)"
    app -q -c "INSERT INTO cb.$t VALUES (6002, $k1, '2026-07-01 10:00+00', 'view', 1)"
done
coord -q -c "UPDATE counter.tracked SET full_pending = false WHERE distributed"
coord -q -c "SELECT citus_move_shard_placement($s, '127.0.0.1', $w1, '127.0.0.1', $w2, shard_transfer_mode := 'block_writes')"
v=$(app -tA -c "SELECT counter.value('ev_n', $k1::bigint)")
n=$(app -tA -c "SELECT count(*) FROM cb.ev WHERE k = $k1")
[ "$v" -lt "$n" ] || fail "the move of shard $s left nothing behind on worker 1 ($v against $n rows)"
# What worker 1 holds for the old placement (of ev_n and ev_f: their delta
# shards moved with the source's) is let go by the owner's next flush there,
# not kept until it restarts; then there is nothing more to let go.
delta_n=$(coord -tA -c "SELECT counter_internal.tracked_table(t, 'delta') FROM counter.tracked t WHERE name = 'ev_n'")
w1_owner() { ce_psql -h 127.0.0.1 -p "$w1" -U "$CE_CITUS_OWNER" -d postgres -v ON_ERROR_STOP=1 "$@"; }
dropped=$(w1_owner -tA -c "SELECT counter_internal.tracked_node_flush('$delta_n')::jsonb -> 'dropped'")
[ "${dropped:-0}" -ge 2 ] || fail "worker 1's flush let go of $dropped entries of the moved placement (2 or more expected)"
dropped=$(w1_owner -tA -c "SELECT counter_internal.tracked_node_flush('$delta_n')::jsonb -> 'dropped'")
[ "$dropped" = 0 ] || fail "worker 1's second flush let go of $dropped entries"
owner -q -c "SELECT counter.flush('ev_n')" >/dev/null
got=$(coord -tA -c "SELECT full_pending FROM counter.tracked WHERE name = 'ev_n'")
[ "$got" = t ] || fail "the flush after the move of shard $s scheduled no repair"
owner -q -c "SELECT counter.reconcile('ev_n')" >/dev/null
for c in ev_f ev_n; do owner -q -c "SELECT counter.flush('$c')" -c "SELECT counter.reconcile('$c')" >/dev/null; done
check_all "a shard moved with buffered adds on its old node, then flushed and reconciled"
check_reads "a shard moved with buffered adds on its old node, then flushed and reconciled"
app -q -c "INSERT INTO cb.ev VALUES (6003, $k1, '2026-07-01 10:00+00', 'click', 1)"
app_w1 -q -c "INSERT INTO cb.ev VALUES (6004, $k1, '2026-07-01 10:00+00', 'click', 1)"
app -q -c "INSERT INTO cb.ev_one VALUES (6003, $k1, '2026-07-01 10:00+00', 'click', 1), (6004, $k1, '2026-07-01 10:00+00', 'click', 1)"
check_reads "written after the move"
echo "ok: a shard moved with adds left on its old node: the owner's next flush there lets go of them, the next flush schedules the repair, the reconciliation makes every value equal count(*), and the new placement buffers"

# The writer may not flush, read or judge the owner's buffers through the
# functions PUBLIC may call, on any node; nor may a role without SELECT read
delta=$(coord -tA -c "SELECT counter_internal.tracked_table(t, 'delta') FROM counter.tracked t WHERE name = 'ev_n'")
for q in "SELECT counter_internal.tracked_node_flush('$delta')" \
    "SELECT counter_internal.tracked_shard_pending('$delta'::regclass, 5::bigint)" \
    "SELECT counter_internal.tracked_shard_busy('$delta'::regclass, now(), '{5}'::bigint[])"; do
    for run in app app_w1; do
        out=$($run -v VERBOSITY=verbose -c "$q" 2>&1) && fail "the writer ran $q ($run): $out"
        grep -q "ERROR:  42501" <<<"$out" || fail "the writer's $q ($run): $out"
    done
done
# bad input from the owner: a key of another type (42804), a table that is
# no delta table (42703)
out=$(owner -v VERBOSITY=verbose -c "SELECT counter_internal.tracked_shard_pending('$delta'::regclass, 'x'::text)" 2>&1) &&
    fail "tracked_shard_pending took a text key: $out"
grep -q "ERROR:  42804" <<<"$out" || fail "tracked_shard_pending with a text key: $out"
out=$(owner -v VERBOSITY=verbose -c "SELECT counter_internal.tracked_node_flush('cb.ev')" 2>&1) &&
    fail "tracked_node_flush took a table that is no delta table: $out"
grep -q "ERROR:  42703" <<<"$out" || fail "tracked_node_flush of cb.ev: $out"
out=$(app -v VERBOSITY=verbose -c "SELECT counter.flush('ev_n')" 2>&1) && fail "the writer flushed ev_n: $out"
grep -q "ERROR:  42501" <<<"$out" || fail "the writer's counter.flush: $out"
none() { ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U cb_none -d postgres -v ON_ERROR_STOP=1 "$@"; }
out=$(none -v VERBOSITY=verbose -c "SELECT counter.value('ev_n', 5::bigint)" 2>&1) && fail "cb_none read ev_n: $out"
grep -q "ERROR:  42501" <<<"$out" || fail "cb_none's read of ev_n: $out"
echo "ok: the writer may not flush, read or judge the owner's buffers (42501, on the coordinator and worker 1), nor flush the counter; a role without SELECT reads nothing"

# TRUNCATE: what the nodes hold is written first and emptied with the rest
singles ev 7001 7050 coord
app -q -c "TRUNCATE cb.ev" 2>/dev/null || owner -q -c "TRUNCATE cb.ev"
owner -q -c "SELECT counter.flush('ev_n')" -c "SELECT counter.flush('ev_f')" >/dev/null
got=$(app -tA -c "SELECT count(*) FROM counter.tracked_values WHERE counter IN ('ev_n', 'ev_f') AND value <> 0")
[ "$got" = 0 ] || fail "after TRUNCATE $got keys of ev's counters are not 0"
singles ev 7101 7150 w1
v=$(app -tA -c "SELECT counter.value('ev_n', 3::bigint)")
n=$(app -tA -c "SELECT count(*) FROM cb.ev WHERE k = 3")
[ "$v" = "$n" ] || fail "after TRUNCATE and new rows: value $v, count(*) $n"
echo "ok: TRUNCATE empties the counters, buffered adds included"

# untrack leaves nothing on any node
for c in ev_f ev_n pev_f pev_n; do owner -q -c "SELECT counter.untrack('$c')" >/dev/null; done
# the shard move above left its old placements to Citus's deferred cleanup
# (pg_dist_cleanup), which drops them within citus.defer_shard_delete_interval:
# what an operator does before counting what is left, clean up now
# (seen once: "untrack left 10 state tables or shards", the moved shard
# group's old placements, on a fresh machine)
for i in $(seq 1 120); do
    coord -q -c "SET client_min_messages = warning" -c "CALL citus_cleanup_orphaned_resources()" >/dev/null 2>&1 || true
    [ "$(coord -tA -c "SELECT count(*) FROM pg_dist_cleanup")" = 0 ] && break
    sleep 0.5
done
got=$(coord -tA -c "SELECT count(*) FROM counter_internal.tracked_shard_flushes")
[ "$got" = 0 ] || fail "untrack left $got rows in tracked_shard_flushes"
left=$(on_nodes_sum "SELECT count(*) FROM pg_class WHERE relname ~ '^counter_tracked_[0-9]+_'")
[ "$left" = 0 ] || fail "untrack left $left state tables or shards: $(on_nodes_list "SELECT relname FROM pg_class WHERE relname ~ '^counter_tracked_[0-9]+_'")"
left=$(on_nodes_sum "SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
                      WHERE t.tgname ~ '^counter_[0-9]+_(ins|del|upd|trunc)' AND c.relname ~ '^p?ev(_[abd])?(_[0-9]+)?$'")
[ "$left" = 0 ] || fail "untrack left $left triggers"
app -q -c "INSERT INTO cb.ev VALUES (8001, 3, '2026-07-01 10:00+00', 'click', 1)"
echo "ok: untrack leaves nothing on any node, and the table takes writes"
