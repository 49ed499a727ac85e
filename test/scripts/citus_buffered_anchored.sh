#!/usr/bin/env bash
# Issue 21 item 4, buffered mode keyed by another column (1.8): buffered
# trigger-mode tracked counters on a table Citus hash-distributes (by k),
# keyed by another column (v), with and without a filter (one calling the
# owner's function, which raises unless the owner runs it), on a plain and a
# partitioned distributed table, owned by an unprivileged role and written
# by another; the same rows go to plain tables on the coordinator with the
# same buffered counters. Each shard's trigger gives its shard an anchor,
# then adds what it counts to the shared table of its node (a statement
# Citus prepares writes its shard at once, at the anchor); the flush writes
# each shard's amounts at its least anchor. Checked: single-row writes
# through the coordinator and through worker 1 stay in the nodes' buffers
# (the delta shards hold less than count(*)), while counter.value, values_of
# (on the coordinator and on worker 1) and tracked_values equal count(*)
# with the filter, and the cluster equals one node; counter.flush writes
# every node's buffers, and then the delta shards alone hold every count,
# every delta row at an anchor of its own shard; a shard's reconciliation
# leaves a key whose amounts are still in the buffer alone (busy); a worker
# restarted with amounts in its buffer (lost) is found by the next flush,
# which schedules the reconciliation of every key, after which every value
# equals count(*) again; TRUNCATE, untrack; the writer may not read the
# owner's buffers through the functions PUBLIC may call (42501), nor a role
# without SELECT read the counter; bad input (42804, 42703, 42P01).
# citus: whole on 15
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
source test/citus.sh
# (synchronous_commit on: a worker is restarted as after a crash, and its
# committed rows must survive it)
ce_citus_script_start ca_own ca_app "synchronous_commit = on"

coord -q <<'SQL'
CREATE ROLE ca_own LOGIN;
CREATE ROLE ca_app LOGIN;
CREATE ROLE ca_none LOGIN;
CREATE SCHEMA ca AUTHORIZATION ca_own;
SQL
ce_citus_event_tables ca
F="kind <> 'bot'"
for t in ev ev_one pev pev_one; do
    owner -q -c "SET client_min_messages = warning" \
        -c "SELECT counter.track('${t}_f', 'ca.$t', 'v', 'at', filter => 'ca.probe(kind)', bucket_width => '10 minutes',
                                 batch_size => 4, buffered => true)" \
        -c "SELECT counter.track('${t}_n', 'ca.$t', 'v', 'at', buffered => true)" >/dev/null
done
got=$(coord -tA -c "SELECT string_agg(name || ':' || distributed || ':' || buffered || ':' || coalesce(anchor_column::text, '-'),
                    ' ' ORDER BY name) FROM counter.tracked")
[ "$got" = "ev_f:true:true:k ev_n:true:true:k ev_one_f:false:true:- ev_one_n:false:true:- pev_f:true:true:k pev_n:true:true:k pev_one_f:false:true:- pev_one_n:false:true:-" ] ||
    fail "counters made: $got"
got=$(coord -tA -c "SELECT string_agg(t.name || ':' || (SELECT count(*) FROM counter_internal.tracked_shard_flushes f
                       WHERE f.counter_id = t.counter_id AND f.epoch IS NOT NULL), ' ' ORDER BY t.name)
                    FROM counter.tracked t WHERE t.distributed")
[ "$got" = "ev_f:8 ev_n:8 pev_f:4 pev_n:4" ] || fail "shards recorded at track: $got"
echo "ok: buffered trigger-mode counters keyed by another column than the distribution column are made on a distributed and a distributed partitioned table (anchored, each shard's placement recorded)"

# Writes: single-row statements (one shard: buffered on its node), multi-row
# ones (several nodes: prepared, written at once), through the coordinator
# and worker 1; re-deliveries, rollbacks, UPDATEs of the key, DELETEs
singles() { ce_citus_singles ca "$@"; } # TABLE A B VIA
for t in ev ev_one pev pev_one; do
    ce_citus_deliver ca "$t" 1 2000
    ce_citus_deliver ca "$t" 1501 3000
    ce_citus_deliver ca "$t" 3001 3500 ROLLBACK
    singles "$t" 3501 3900 coord
done
for t in ev pev; do
    singles "$t" 4001 4300 w1
    ce_citus_deliver ca "$t" 4301 4600 COMMIT w1
    ce_citus_deliver ca "$t" 4601 4700 ROLLBACK w1
    singles "${t}_one" 4001 4300 coord
    ce_citus_deliver ca "${t}_one" 4301 4600
done
for t in ev ev_one pev pev_one; do
    app -q <<SQL
UPDATE ca.$t SET kind = 'bot' WHERE id % 7 = 0 AND kind = 'view';
UPDATE ca.$t SET v = (v + 3) % 11 WHERE id % 17 = 0;
DELETE FROM ca.$t WHERE id % 13 = 0;
SQL
    singles "$t" 4701 4800 coord
done

state_total() { ce_citus_state_total "$@"; }
check_reads() { ce_citus_buffered_reads ca v 12 integer "$F" "$1"; } # WHAT
check_all() { ce_citus_buffered_all ca v "$F" "$1" w1; } # WHAT

# Before any flush: the delta shards lack what the nodes' buffers hold, the reads do not
for c in ev_n pev_n; do
    total=$(app -tA -c "SELECT count(*) FROM ca.${c%_n}")
    held=$(state_total "$c")
    [ "$held" -lt "$total" ] || fail "nothing of $c is in a buffer before its flush ($held in its tables, $total rows)"
done
pending_w1=$(on_node "$CE_citus_w1_PORT" -tA -c "SELECT coalesce(sum(entries), 0) FROM counter.buffer_shares()")
[ "$pending_w1" -gt 0 ] || fail "worker 1's shared table holds no entry before the flush"
check_reads "buffered, before the flush"
check_all "buffered, before the flush"
echo "ok: before any flush the delta shards lack the buffered adds (worker 1 holds $pending_w1 entries), and value, values_of, tracked_values (coordinator, worker 1) equal count(*) and one node"

# Many writers while the flush runs: a new distributed table (no shard has
# an anchor yet) with a buffered counter keyed by v, four writers at once
# (two through the coordinator, two through worker 1, single-row INSERTs)
# while the owner flushes it every 0.1 s; no flush may fail (a flush claims
# amounts of transactions that committed after its statement began: the
# shard's anchor, which came in such a transaction, must be read with a
# snapshot of its own), and every value then equals count(*)
owner -q <<'SQL'
CREATE TABLE ca.fresh (id bigint NOT NULL, k bigint NOT NULL, at timestamptz NOT NULL, kind ca.kind NOT NULL,
    v integer NOT NULL, PRIMARY KEY (k, id));
SET client_min_messages = warning;
SELECT create_distributed_table('ca.fresh', 'k', shard_count := 8);
GRANT INSERT, SELECT ON ca.fresh TO ca_app;
SELECT counter.track('fresh_n', 'ca.fresh', 'v', 'at', buffered => true);
SQL
# deterministic first: worker 1's flush begins its statement (its snapshot),
# sleeps, and meanwhile the first row of a shard there commits (its anchor
# and its buffered amount); the flush then claims that amount and must see
# the anchor (failed with the anchor read in the statement's snapshot)
delta=$(coord -tA -c "SELECT counter_internal.tracked_table(t, 'delta') FROM counter.tracked t WHERE name = 'fresh_n'")
anchors=$(coord -tA -c "SELECT counter_internal.tracked_table(t, 'anchor') FROM counter.tracked t WHERE name = 'fresh_n'")
k1=$(coord -tA -c "SELECT k FROM generate_series(1, 200) k WHERE get_shard_id_for_distribution_column('ca.fresh', k) IN
                    (SELECT p.shardid FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid)
                     WHERE n.nodeport = $CE_citus_w1_PORT) ORDER BY k LIMIT 1")
w1_owner() { ce_psql -h 127.0.0.1 -p "$CE_citus_w1_PORT" -U ca_own -d postgres -v ON_ERROR_STOP=1 "$@"; }
errf=$(mktemp)
w1_owner -tA -c "SELECT pg_sleep(2), counter_internal.tracked_node_flush('$delta', '$anchors')::jsonb -> 'shards'" \
    >"$errf.out" 2>"$errf" &
flusher=$!
sleep 0.7
app_w1 -q -c "INSERT INTO ca.fresh VALUES (0, $k1, '2026-07-01 10:00+00', 'click', 4)"
wait "$flusher" || fail "worker 1's flush, begun before the shard's first row committed, failed: $(cat "$errf")"
grep -q "\[$(coord -tA -c "SELECT get_shard_id_for_distribution_column('$delta', $k1::bigint)"), [0-9]*, 1\]" "$errf.out" ||
    fail "worker 1's flush did not write the row that committed during it: $(cat "$errf.out")"
rm -f "$errf.out"
got=$(app -tA -c "SELECT counter.value('fresh_n', 4)")
[ "$got" = 1 ] || fail "value of fresh_n after the flush that claimed the row: $got"
writers=()
singles fresh 1 1500 coord & writers+=($!)
singles fresh 1501 3000 w1 & writers+=($!)
singles fresh 3001 4500 coord & writers+=($!)
singles fresh 4501 6000 w1 & writers+=($!)
flushes=0
while kill -0 "${writers[@]}" 2>/dev/null; do
    owner -q -c "SELECT counter.flush('fresh_n')" >/dev/null 2>>"$errf" || true
    flushes=$((flushes + 1))
    sleep 0.1
done
for p in "${writers[@]}"; do wait "$p" || fail "a writer of ca.fresh failed"; done
[ ! -s "$errf" ] || fail "a flush during the writes failed: $(head -3 "$errf")"
owner -q -c "SELECT counter.flush('fresh_n')" >/dev/null
got=$(ce_citus_mismatches app fresh_n ca.fresh true v)
[ "$got" = 0 ] || fail "after four writers and $flushes flushes: $got keys of fresh_n differ from count(*)"
got=$(coord -tA -c "SELECT count(*) FROM ca.fresh")
[ "$got" = 6001 ] || fail "ca.fresh holds $got rows (6,001 written)"
owner -q -c "SELECT counter.untrack('fresh_n')" >/dev/null
rm -f "$errf"
echo "ok: a flush on worker 1 claims the amount of a shard's first row, committed after its statement began, and writes it at the anchor that came with it; four writers (coordinator and worker 1) while the owner flushed $flushes times: no flush failed, every value equals count(*)"

# The flush: every node writes its buffers, every delta row at an anchor of its own shard
for c in ev_f ev_n pev_f pev_n; do
    n=$(owner -tA -c "SELECT counter.flush('$c')")
    [ "$n" -gt 0 ] || fail "counter.flush('$c') wrote $n entries"
done
owner -q -c "SELECT counter.flush()" >/dev/null
for c in ev_n pev_n; do
    total=$(app -tA -c "SELECT count(*) FROM ca.${c%_n}")
    held=$(state_total "$c")
    [ "$held" = "$total" ] || fail "after the flush $c holds $held in its tables, $total rows"
    delta=$(coord -tA -c "SELECT counter_internal.tracked_table(t, 'delta') FROM counter.tracked t WHERE name = '$c'")
    anchors=$(coord -tA -c "SELECT counter_internal.tracked_table(t, 'anchor') FROM counter.tracked t WHERE name = '$c'")
    got=$(coord -tA -c "SELECT count(*) FROM $delta d WHERE NOT EXISTS (SELECT FROM $anchors a WHERE a.anchor = d.anchor)")
    [ "$got" = 0 ] || fail "after the flush $c has $got delta rows at a value that is no anchor"
done
got=$(coord -tA -c "SELECT sum(f.repairs) FROM counter.tracked t JOIN counter_internal.tracked_flushes f USING (counter_id)
                    WHERE t.distributed")
[ "$got" = 0 ] || fail "the flushes without a restart scheduled $got repairs"
check_all "after the flush"
check_reads "after the flush"
echo "ok: counter.flush writes every node's buffers to the delta shards (at anchors), which then hold every count"

for c in ev_f ev_n pev_f pev_n; do
    got=$(owner -tA -c "SELECT keys_corrected FROM counter.reconcile('$c', all_keys => true)")
    [ "$got" = 0 ] || fail "the reconciliation of $c corrected $got keys after the flush"
done
echo "ok: the reconciliation of every key finds no drift"

# A key whose adds are still in a buffer is busy for its shard's
# reconciliation: the owner's run rows (one per anchor, as the batch sends
# them) must not install a truth that counts the buffered rows as base
singles ev 5001 5097 coord
singles ev_one 5001 5097 coord
run=$(coord -tA -c "SELECT counter_internal.tracked_table(t, 'run') FROM counter.tracked t WHERE name = 'ev_n'")
anchors=$(coord -tA -c "SELECT counter_internal.tracked_table(t, 'anchor') FROM counter.tracked t WHERE name = 'ev_n'")
got=$(owner -tA -q -c "BEGIN" -c "INSERT INTO $run AS r (anchor, w, keys) SELECT a.anchor, now(), '{0,1,2,3,4,5,6,7,8,9,10}' FROM $anchors a
                     RETURNING r.busy" -c "ROLLBACK" | grep -c 't' || true)
[ "$got" -gt 0 ] || fail "no key with buffered adds was busy for its shard's reconciliation"
got=$(owner -tA -c "SELECT keys_corrected FROM counter.reconcile('ev_n', all_keys => true)")
[ "$got" = 0 ] || fail "the reconciliation of ev_n after buffered adds corrected $got keys"
check_all "keys busy in the buffer, then reconciled"
echo "ok: a shard's reconciliation leaves a key with buffered adds alone (busy), and the next reconciliation (which flushes first) finds no drift"

# A worker restarted (immediate: a crash) loses what its buffer held; the
# next flush sees its new shared table and schedules the repair
ce_citus_buffered_restart ca

# The writer may not read the owner's buffers through the functions PUBLIC
# may call, on any node; nor may a role without SELECT read the counter
delta=$(coord -tA -c "SELECT counter_internal.tracked_table(t, 'delta') FROM counter.tracked t WHERE name = 'ev_n'")
anchors=$(coord -tA -c "SELECT counter_internal.tracked_table(t, 'anchor') FROM counter.tracked t WHERE name = 'ev_n'")
for q in "SELECT counter_internal.tracked_node_flush('$delta', '$anchors')" \
    "SELECT counter_internal.tracked_anchor_pending('$delta'::regclass, '$anchors'::regclass, 5::bigint, 5)" \
    "SELECT * FROM counter_internal.tracked_anchor_pending_rows('$delta'::regclass, '$anchors'::regclass, 5::bigint, NULL::integer)"; do
    for run in app app_w1; do
        out=$($run -v VERBOSITY=verbose -c "$q" 2>&1) && fail "the writer ran $q ($run): $out"
        grep -q "ERROR:  42501" <<<"$out" || fail "the writer's $q ($run): $out"
    done
done
none() { ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U ca_none -d postgres -v ON_ERROR_STOP=1 "$@"; }
out=$(none -v VERBOSITY=verbose -c "SELECT counter.value('ev_n', 5)" 2>&1) && fail "ca_none read ev_n: $out"
grep -q "ERROR:  42501" <<<"$out" || fail "ca_none's read of ev_n: $out"
# bad input from the owner: a key or an anchor of another type (42804), an
# anchors table that is none (42703) or does not exist (42P01)
for q in "SELECT counter_internal.tracked_anchor_pending('$delta'::regclass, '$anchors'::regclass, 5::bigint, 'x'::text)" \
    "SELECT counter_internal.tracked_anchor_pending('$delta'::regclass, '$anchors'::regclass, 5::integer, 5)|42804" \
    "SELECT counter_internal.tracked_node_flush('$delta', 'ca.ev')|42703" \
    "SELECT counter_internal.tracked_node_flush('$delta', 'ca.no_such_table')|42P01"; do
    code=42804
    [ "${q##*|}" != "$q" ] && code=${q##*|} q=${q%|*}
    out=$(owner -v VERBOSITY=verbose -c "$q" 2>&1) && fail "the owner's bad call was taken: $q: $out"
    grep -q "ERROR:  $code" <<<"$out" || fail "$q: $out (expected $code)"
done
echo "ok: the writer may not flush or read the owner's buffers (42501, on the coordinator and worker 1), a role without SELECT reads nothing, bad input is refused (42804, 42703, 42P01)"

# TRUNCATE: what the nodes hold is written first and emptied with the rest
singles ev 7001 7050 coord
owner -q -c "TRUNCATE ca.ev"
owner -q -c "SELECT counter.flush('ev_n')" -c "SELECT counter.flush('ev_f')" >/dev/null
got=$(app -tA -c "SELECT count(*) FROM counter.tracked_values WHERE counter IN ('ev_n', 'ev_f') AND value <> 0")
[ "$got" = 0 ] || fail "after TRUNCATE $got keys of ev's counters are not 0"
singles ev 7101 7150 w1
v=$(app -tA -c "SELECT counter.value('ev_n', 3)")
n=$(app -tA -c "SELECT count(*) FROM ca.ev WHERE v = 3")
[ "$v" = "$n" ] || fail "after TRUNCATE and new rows: value $v, count(*) $n"
echo "ok: TRUNCATE empties the counters, buffered adds included"

# untrack leaves nothing on any node, and the table takes writes
for c in ev_f ev_n pev_f pev_n; do owner -q -c "SELECT counter.untrack('$c')" >/dev/null; done
got=$(coord -tA -c "SELECT count(*) FROM counter_internal.tracked_shard_flushes")
[ "$got" = 0 ] || fail "untrack left $got rows in tracked_shard_flushes"
left=$(on_nodes_sum "SELECT count(*) FROM pg_class WHERE relname ~ '^counter_tracked_[0-9]+_'")
[ "$left" = 0 ] || fail "untrack left $left state tables or shards: $(on_nodes_list "SELECT relname FROM pg_class WHERE relname ~ '^counter_tracked_[0-9]+_'")"
singles ev 8001 8050 w1
singles pev 8001 8050 coord
echo "ok: untrack leaves nothing on any node, and the table takes writes"
