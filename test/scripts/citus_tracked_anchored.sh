#!/usr/bin/env bash
# Issue 21 item 4, "other keys must still be exact" (1.8): trigger-mode
# tracked counters on a table Citus hash-distributes, keyed by another
# column than its distribution column, with and without a filter (the
# owner's function, which raises unless it runs as the owner), on a plain
# and on a partitioned distributed table, owned by an unprivileged role and
# written by another, by four writers at once. Their state is distributed
# colocated with the source, each row anchored to a value of the
# distribution column on the shard that counted it; a key has state on
# every shard. The same rows go to plain tables on the coordinator (one
# node) with the same counters. Every value equals count(*) with the filter
# and the value on one node: after writes through the coordinator and a
# worker node (INSERT, re-delivery, rollback, COPY, UPDATE of the key,
# DELETE), read on the coordinator and on a worker node; after drift
# injected on the shards and repaired by reconcile; after Citus splits a
# shard (the split's new shard has no anchor until its trigger counts a
# row) and writes go to both halves, and after the reconciliation that
# follows (which reports no drift: none was made). The reconciliation
# reaches every shard through one INSERT into the run table, whose trigger
# compares each shard's rows, base and deltas in one snapshot there. The
# writer may not write the run table (42501); a distribution column of a
# type that cannot anchor is refused (0A000) with nothing left behind;
# untrack leaves nothing on any node.
# citus: whole on 18
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
source test/citus.sh
ce_citus_script_start ca_own ca_app

coord -q <<'SQL'
CREATE ROLE ca_own LOGIN;
CREATE ROLE ca_app LOGIN;
CREATE SCHEMA ca AUTHORIZATION ca_own;
SQL
ce_citus_event_tables ca
for t in ev ev_one pev pev_one; do owner -q -c "CREATE INDEX ON ca.$t (at)"; done

# keyed by v (not the distribution column k): without a filter (_v), and
# with the owner's filter function (_f)
F="ca.probe(kind)"   # the filter; the truth's, as the writer: FT
FT="kind <> 'bot'"
for t in ev ev_one pev pev_one; do
    owner -q -c "SET client_min_messages = warning" \
        -c "SELECT counter.track('${t}_v', 'ca.$t', 'v', 'at', bucket_width => '10 minutes', batch_size => 4)" \
        -c "SELECT counter.track('${t}_f', 'ca.$t', 'v', 'at', filter => '$F')" >/dev/null
done
got=$(coord -tA -c "SELECT string_agg(name || ':' || distributed || ':' || coalesce(anchor_column, '-'), ' ' ORDER BY name)
                    FROM counter.tracked")
[ "$got" = "ev_f:true:k ev_one_f:false:- ev_one_v:false:- ev_v:true:k pev_f:true:k pev_one_f:false:- pev_one_v:false:- pev_v:true:k" ] ||
    fail "counters made: $got"
# base, delta, anchor and run colocated with the source
got=$(coord -tA <<'SQL'
SELECT count(*) FROM counter.tracked c JOIN pg_dist_partition p ON p.logicalrelid = c.source
CROSS JOIN unnest(counter_internal.tracked_state_parts(c)) AS x(part)
JOIN pg_dist_partition s ON s.logicalrelid = counter_internal.tracked_table(c, x.part)::regclass
WHERE c.anchor_column IS NOT NULL AND s.colocationid = p.colocationid
SQL
)
[ "$got" = 16 ] || fail "state tables colocated with their source: $got of 4 counters x 4 tables"
echo "ok: trigger-mode counters keyed by another column than the distribution column are made, state colocated"

# A distribution column of a type no anchor is made of: refused, nothing left
owner -q -c "SET client_min_messages = warning" \
    -c "CREATE TABLE ca.byday (d date NOT NULL, v int NOT NULL, at timestamptz NOT NULL)" -c "GRANT INSERT ON ca.byday TO ca_app" \
    -c "SELECT create_distributed_table('ca.byday', 'd', shard_count := 4)" >/dev/null
out=$(owner -v VERBOSITY=verbose -c "SELECT counter.track('byday_v', 'ca.byday', 'v', 'at')" 2>&1) &&
    fail "a counter anchored by a date column was made: $out"
grep -q "ERROR:  0A000: a trigger-mode tracked counter on ca.byday" <<<"$out" || fail "tracked on ca.byday: $out"
grep -q "whose type (date) is not one of" <<<"$out" || fail "tracked on ca.byday, the detail: $out"
got=$(coord -tA -c "SELECT (SELECT count(*) FROM counter.tracked WHERE name = 'byday_v')
                           + (SELECT count(*) FROM pg_trigger WHERE tgrelid = 'ca.byday'::regclass AND tgname LIKE 'counter%')")
[ "$got" = 0 ] || fail "a refused counter left $got objects"
app -q -c "INSERT INTO ca.byday VALUES ('2026-07-01', 1, now())" || fail "ca.byday takes no write"
echo "ok: a distribution column of a type that cannot anchor is refused (0A000), nothing left, the table takes writes"

# Four writers at once on each table, through the coordinator and worker 1:
# deliveries, re-deliveries (ON CONFLICT DO NOTHING), rolled-back ones
write_load() { # T WRITER
    local t=$1 w=$2 i a via
    for i in 0 1 2 3 4 5; do
        a=$((w * 100000 + i * 400 + 1))
        via=coord
        if [ $((i % 2)) = 1 ] && [ "${t%_one}" = "$t" ]; then via=w1; fi
        ce_citus_deliver ca "$t" "$a" $((a + 499)) COMMIT "$via"   # 100 rows overlap the next delivery
        if [ "$i" = 3 ]; then ce_citus_deliver ca "$t" "$a" $((a + 99)) ROLLBACK "$via"; fi
    done
}
pids=()
for t in ev ev_one pev pev_one; do
    for w in 1 2 3 4; do
        write_load "$t" "$w" &
        pids+=($!)
    done
done
for p in "${pids[@]}"; do wait "$p" || fail "a writer failed"; done
# COPY, UPDATE of the key (a row moves between keys), DELETE
for t in ev ev_one pev pev_one; do
    app -q <<SQL
COPY ca.$t FROM STDIN;
900001	3	2026-07-01 12:00:00+00	click	4
900002	4	2026-07-01 23:59:59+00	bot	5
900003	5	2026-07-02 00:00:00+00	view	4
\.
UPDATE ca.$t SET v = v + 1 WHERE id % 7 = 0;
UPDATE ca.$t SET kind = 'bot' WHERE id % 5 = 0 AND kind = 'view';
DELETE FROM ca.$t WHERE id % 13 = 0;
SQL
done

mismatches() { ce_citus_mismatches app "$1" "ca.$2" "$3" v; }
check_all() {
    local what=$1 t c got
    for t in ev ev_one pev pev_one; do
        for c in "f|$FT" "v|true"; do
            got=$(mismatches "${t}_${c%%|*}" "$t" "${c#*|}")
            [ "$got" = 0 ] || fail "$what: counter ${t}_${c%%|*}: $got keys differ from count(*)"
        done
    done
    got=$(app -tA -c "SELECT count(*) FROM counter.tracked_values a FULL JOIN counter.tracked_values b
        ON b.counter = replace(a.counter, '_one_', '_') AND a.key = b.key
        WHERE (a.counter LIKE '%\_one\_%' OR a.counter IS NULL) AND (b.counter NOT LIKE '%\_one\_%' OR b.counter IS NULL)
          AND a.value IS DISTINCT FROM b.value")
    [ "$got" = 0 ] || fail "$what: $got values differ between the cluster and one node"
    got=$(app -tA -c "SELECT count(*) FILTER (WHERE value > 100) FROM counter.tracked_values WHERE counter = 'pev_f'")
    [ "$got" -ge 8 ] || fail "$what: too few counted keys ($got)"
    echo "ok: $what: every value equals count(*) with its filter, on the cluster and on one node"
}
check_all "four writers each, through the coordinator and a worker (INSERT, re-delivery, rollback, COPY, UPDATE, DELETE)"

# every key has state on several shards: the anchors of the shards that counted it
got=$(owner -tA -c "SELECT count(DISTINCT get_shard_id_for_distribution_column('ca.ev', anchor)) FROM ca.counter_tracked_$(
    coord -tA -c "SELECT counter_id FROM counter.tracked WHERE name = 'ev_v'")_delta WHERE key = 3")
[ "$got" -ge 4 ] || fail "key 3 of ev_v has deltas on $got shards only"

# counter.value and values_of on the coordinator and on worker 1
reads() { # WHAT
    local c q want got
    for c in ev_v ev_f pev_v pev_f; do
        t=${c%_*}
        f=$([ "${c#*_}" = f ] && echo "$FT" || echo true)
        want=$(app -tA -c "CREATE TEMP TABLE n AS SELECT count(*) AS n FROM ca.$t WHERE v = 4 AND $f" -c "SELECT n FROM n")
        for run in app app_w1; do
            got=$($run -tA -c "SELECT counter.value('$c', 4)")
            [ "$got" = "$want" ] || fail "$1: counter.value('$c', 4) through $run = $got, count(*) = $want"
        done
        q="SELECT string_agg(key || ':' || value, ',' ORDER BY key) FROM counter.values_of('$c', ARRAY[0, 1, 4, 9, 10, 11, 12])"
        want=$(app -tA -c "$q")
        got=$(app_w1 -tA -c "$q")
        [ "$got" = "$want" ] && [ -n "$want" ] || fail "$1: values_of('$c') on worker 1: $got, on the coordinator: $want"
        q="SELECT string_agg(key || ':' || value, ',' ORDER BY key::int) FROM counter.tracked_values WHERE counter = '$c'"
        want=$(app -tA -c "$q")
        got=$(app_w1 -tA -c "$q")
        [ "$got" = "$want" ] && [ -n "$want" ] || fail "$1: tracked_values of $c on worker 1: $got, on the coordinator: $want"
    done
    echo "ok: $1: counter.value, values_of and tracked_values agree with count(*) on the coordinator and on worker 1"
}
reads "written"

# Reconciliation: nothing to correct; the key choice and the comparison
# reach every shard through the run table
for t in ev pev ev_one pev_one; do
    for c in v f; do
        got=$(owner -tA -c "SELECT keys_corrected || ' ' || outcome FROM counter.reconcile('${t}_$c', '2026-07-06', all_keys => true)")
        [ "$got" = "0 ok" ] || fail "reconcile ${t}_$c found drift where there was none: $got"
    done
done
id=$(coord -tA -c "SELECT counter_id FROM counter.tracked WHERE name = 'ev_f'")
out=$(owner -c "SET citus.log_remote_commands = on" -c "SET client_min_messages = log" \
    -c "SELECT outcome FROM counter.reconcile('ev_f', '2026-07-06', all_keys => true)" 2>&1)
# (the keys chosen on each shard, twice: the batch, then none left; then
# the batch compared and repaired on each shard; no other statement reads
# the state or the rows on the shards)
n=$(printf '%s\n' "$out" | grep "INSERT INTO ca.counter_tracked_${id}_run_[0-9]* " | grep -c ' pick, past' || true)
[ "$n" = 16 ] || fail "the reconciliation chose keys on $n shards through the run table (16 expected: 8 twice): $out"
n=$(printf '%s\n' "$out" | grep "INSERT INTO ca.counter_tracked_${id}_run_[0-9]* " | grep -vc ' pick, past' || true)
[ "$n" = 8 ] || fail "the reconciliation reached $n shards through the run table (8 expected): $out"
n=$(printf '%s\n' "$out" | grep -E "issuing .*FROM ca\.(counter_tracked_${id}_(base|delta)|ev)_[0-9]+" || true)
[ -z "$n" ] || fail "the reconciliation read the state or the rows with a distributed query: $n"
check_all "reconciled"

# The writer may not write the run table, nor read the state
# nor, granted INSERT on it by the owner, make the owner's reconciliation
# run as the owner (its trigger asks for the owner's rights)
got=$(ce_citus_run_table_refused app owner "ca.counter_tracked_${id}_run" ca_app "$id")
[ -z "$got" ] || fail "$got"
# nor pick keys through it granted INSERT; and the owner's row that asks for
# none, or for keys without its range of event times, is refused
owner -q -c "GRANT INSERT ON ca.counter_tracked_${id}_run TO ca_app"
out=$(app -v VERBOSITY=verbose -c "INSERT INTO ca.counter_tracked_${id}_run (anchor, w, keys, pick, w_from, every)
                                   VALUES (1, now(), '{}', 10, '-infinity', true)" 2>&1) &&
    fail "the writer picked keys of ev_f through the run table: $out"
grep -q "ERROR:  42501: only the owner of tracked counter $id reconciles it" <<<"$out" ||
    fail "a pick through the run table by the writer granted INSERT: $out"
owner -q -c "REVOKE INSERT ON ca.counter_tracked_${id}_run FROM ca_app"
out=$(owner -v VERBOSITY=verbose -c "INSERT INTO ca.counter_tracked_${id}_run (anchor, w, keys, pick, w_from, every)
                                     VALUES (1, now(), '{}', 0, '-infinity', true)" 2>&1) &&
    fail "the owner picked 0 keys through the run table: $out"
grep -q "ERROR:  22023: a row of the run table .* picks 0 keys" <<<"$out" || fail "a pick of 0 keys: $out"
out=$(owner -v VERBOSITY=verbose -c "INSERT INTO ca.counter_tracked_${id}_run (anchor, w, keys, pick, every)
                                     VALUES (1, now(), '{}', 10, true)" 2>&1) &&
    fail "the owner picked keys with no w_from through the run table: $out"
grep -q "ERROR:  23502: a row of the run table .* needs w_from and every" <<<"$out" || fail "a pick with no w_from: $out"
got=$(owner -tA -c "SELECT count(*) FROM ca.counter_tracked_${id}_run")
[ "$got" = 0 ] || fail "the refused picks left $got rows in the run table"
echo "ok: the run table's picks: refused to the writer (42501), for 0 keys (22023) and with no range (23502)"

# Drift injected on the shards (state changed without a write): seen, and
# repaired by reconcile
ce_citus_drift "$FT" ev_v ev_f pev_v pev_f
check_all "drift injected on the shards, reconciled"

# Citus splits a shard of ev (and its colocated state): the half that keeps
# the anchor keeps every count of the shard's rows, the other half has no
# anchor until its trigger counts a row. Writes to both halves; every
# value stays right, and a reconciliation finds no drift (it moves each
# half's counts where its rows are).
sid=$(coord -tA -c "SELECT shardid FROM pg_dist_shard WHERE logicalrelid = 'ca.ev'::regclass ORDER BY shardminvalue::bigint LIMIT 1 OFFSET 3")
mid=$(coord -tA -c "SELECT (shardminvalue::bigint + shardmaxvalue::bigint) / 2 FROM pg_dist_shard WHERE shardid = $sid")
node=$(coord -tA -c "SELECT nodeid FROM pg_dist_node n JOIN pg_dist_placement p ON p.groupid = n.groupid WHERE p.shardid = $sid")
coord -q -c "SELECT citus_split_shard_by_split_points($sid, ARRAY['$mid'], ARRAY[$node, $node], 'block_writes')" >/dev/null
for w in 5 6; do write_load ev "$w" & pids+=($!); done
for w in 5 6; do write_load ev_one "$w" & pids+=($!); done
wait
check_all "a shard split, written again"
reads "a shard split, written again"
got=$(owner -tA -c "SELECT count(*) FROM ca.counter_tracked_$(coord -tA -c "SELECT counter_id FROM counter.tracked WHERE name = 'ev_v'")_anchor")
[ "$got" -ge 9 ] || fail "the shards of ev after the split have $got anchors (9 shards)"
for c in ev_v ev_f; do
    got=$(owner -tA -c "SELECT keys_corrected || ' ' || outcome FROM counter.reconcile('$c', '2026-07-06', all_keys => true)")
    [ "$got" = "0 ok" ] || fail "reconcile $c after the split found drift: $got"
done
check_all "a shard split, reconciled"
# after it each half's state counts its own rows: the per-shard truth
v=$(coord -tA -c "SELECT counter_id FROM counter.tracked WHERE name = 'ev_v'")
got=$(owner -tA <<SQL | grep -v '^$' | tail -1
CREATE TEMP TABLE r AS SELECT get_shard_id_for_distribution_column('ca.ev', k) AS s, v AS key, count(*) AS n FROM ca.ev GROUP BY 1, 2;
CREATE TEMP TABLE st AS SELECT get_shard_id_for_distribution_column('ca.ev', anchor) AS s, key, sum(base) AS n
    FROM ca.counter_tracked_${v}_base GROUP BY 1, 2;
CREATE TEMP TABLE dl AS SELECT count(*) AS n FROM ca.counter_tracked_${v}_delta WHERE bucket < '2026-07-06';
SELECT count(*) + (SELECT n FROM dl) FROM r FULL JOIN st USING (s, key) WHERE coalesce(r.n, 0) <> coalesce(st.n, 0);
SQL
)
[ "$got" = 0 ] || fail "after a split and a reconciliation, $got (shard, key) bases or deltas differ from the shard's rows"
echo "ok: after a split and a reconciliation every shard's base counts that shard's rows, no delta left"

# A new least anchor on a shard (as when a writer's anchor commits after a
# reconciliation put the shard's base at another one): the next
# reconciliation puts the shard's base at it and deletes the base at the
# old one (nothing counted twice), with no drift
m=$(owner -tA -c "SELECT min(anchor) FROM ca.counter_tracked_${v}_anchor")
owner -q <<SQL
CREATE TEMP TABLE lower AS SELECT g AS a FROM generate_series($m - 200000, $m - 1) g
WHERE get_shard_id_for_distribution_column('ca.ev', g) = get_shard_id_for_distribution_column('ca.ev', $m::bigint)
ORDER BY g DESC LIMIT 1;
INSERT INTO ca.counter_tracked_${v}_anchor SELECT a FROM lower;
SQL
got=$(owner -tA -c "SELECT keys_corrected || ' ' || outcome FROM counter.reconcile('ev_v', '2026-07-06', all_keys => true)")
[ "$got" = "0 ok" ] || fail "reconcile ev_v after a new least anchor found drift: $got"
check_all "a new least anchor on a shard, reconciled"
got=$(owner -tA -c "SELECT count(*) FROM ca.counter_tracked_${v}_base WHERE anchor = $m")
[ "$got" = 0 ] || fail "$got bases left at the shard's former least anchor"

# untrack leaves nothing on any node
ids=$(coord -tA -c "SELECT string_agg(counter_id::text, '|') FROM counter.tracked WHERE anchor_column IS NOT NULL")
copies=$(on_nodes_sum "SELECT count(*) FROM pg_trigger WHERE tgname ~ '^counter_($ids)_trunc_[0-9]+$'")
[ "$copies" -ge 2 ] || fail "the split's new shards carry $copies copies of a TRUNCATE trigger (Citus copies them there)"
for c in ev_v ev_f pev_v pev_f; do owner -q -c "SELECT counter.untrack('$c')" >/dev/null; done
# (the split's old shards, which Citus drops later)
coord -q -c "SET client_min_messages = warning" -c "CALL citus_cleanup_orphaned_resources()" >/dev/null
left=$(on_nodes_sum "SELECT count(*) FROM pg_class WHERE relname ~ '^counter_tracked_($ids)_' AND relkind IN ('r', 'p')")
[ "$left" = 0 ] || fail "untrack left $left state tables (and shards) on the nodes"
# (the copies of the TRUNCATE trigger Citus made on the split's new shards,
# whose DROP TRIGGER Citus does not send, go with the counter's other
# triggers there: event trigger counter_citus_shard_truncate)
left=$(on_nodes_sum "SELECT count(*) FROM pg_trigger WHERE tgname ~ '^counter_($ids)_'")
[ "$left" = 0 ] || fail "untrack left $left triggers on the nodes: $(for p in $nodes; do
    on_node "$p" -tA -c "SELECT string_agg(tgrelid::regclass || '.' || tgname, ' ') FROM pg_trigger WHERE tgname ~ '^counter_($ids)_'"; done)"
app -q -c "INSERT INTO ca.ev VALUES (5000001, 3, '2026-07-01 10:00+00', 'click', 1)" || fail "ca.ev takes no write after untrack"
owner -q -c "TRUNCATE ca.ev" || fail "ca.ev cannot be truncated after untrack"
echo "ok: untrack leaves nothing on any node (no trigger on a split shard either); the table takes writes and TRUNCATE"
