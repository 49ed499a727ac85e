#!/usr/bin/env bash
# The update to 1.8 on a Citus cluster (src/sql/upgrade/1.7--1.8/60_citus_batch.sql):
# a trigger-mode counter on a distributed table made by 1.7, owned by an
# unprivileged role, gets the 1.8 batch function (a key range of every
# shard per batch, two statements per shard), still its owner's, not a
# member of the extension, on the coordinator only; after the update drift
# injected on many keys of every shard is repaired by one
# reconcile(all_keys), and every value equals count(*). A deferred rollup
# made by 1.7 gets a replica identity on its dirty log (every shard).
# citus: smoke
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
source test/citus.sh
ce_citus_script_setup
CE_CITUS_READY=1   # built and staged: the released install scripts go beside this tree's
trap 'ce_unstage_released_scripts' EXIT
ce_stage_released_scripts
CE_CITUS_COUNTER_VERSION=1.7
ce_citus_script_start cu_own cu_own
trap 'ce_cluster_stop_all; ce_unstage_released_scripts' EXIT

coord -q -c "CREATE ROLE cu_own LOGIN" -c "CREATE SCHEMA cu AUTHORIZATION cu_own"
owner -q <<'SQL'
SET client_min_messages = warning;
CREATE TABLE cu.ev (id bigint NOT NULL, k bigint NOT NULL, at timestamptz NOT NULL, kind text NOT NULL);
CREATE INDEX ON cu.ev (at);
SELECT create_distributed_table('cu.ev', 'k', shard_count := 8);
SQL
owner -q -c "SET client_min_messages = warning" \
    -c "SELECT counter.track('cu', 'cu.ev', 'k', 'at', filter => \$\$kind <> 'bot'\$\$, batch_size => 5)" >/dev/null
owner -q -c "INSERT INTO cu.ev SELECT g, g % 97, '2026-07-01 10:00+00'::timestamptz + (g % 37) * interval '47 minutes',
                 (ARRAY['view', 'bot', 'click'])[1 + g % 3] FROM generate_series(1, 3000) g"
got=$(owner -tA -c "SELECT keys_corrected || ' ' || outcome FROM counter.reconcile('cu', '2026-07-06', all_keys => true)")
[ "$got" = "0 ok" ] || fail "1.7's reconciliation: $got"
owner -q -c "SET client_min_messages = warning" \
    -c "SELECT counter.rollup_create('cu_r', 'cu.ev', 'at', '{k}', mode => 'deferred')" >/dev/null
# the rollup's dirty log on every node (table, shells, 8 shards): with replica identity $1
identity() {
    on_nodes_sum "SELECT count(*) FROM pg_class WHERE relname ~ '^rollup_[0-9]+_dirty(_[0-9]+)?$' AND relreplident = '$1'"
}
dirty_logs=$(identity d)   # the coordinator's table, the shells on the workers, 8 shards
[ "$dirty_logs" = 11 ] || fail "1.7's dirty log, its shells and its shards with the default replica identity: $dirty_logs of 11"
body() {
    coord -tA -c "SELECT (p.prosrc LIKE '%ce_rb boolean[]%') || ' ' || p.proowner::regrole || ' ' ||
                         (SELECT count(*) FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                          AND d.deptype = 'e') || ' ' || has_function_privilege('public', p.oid, 'EXECUTE')
                  FROM pg_proc p JOIN counter.tracked c ON p.proname = format('tracked_%s_batch', c.counter_id)
                  WHERE c.name = 'cu'"
}
[ "$(body)" = "false cu_own 0 false" ] || fail "1.7's batch function: $(body)"

coord -q -c "ALTER EXTENSION counter_ext UPDATE TO '1.8'"
for p in $nodes; do
    v=$(on_node "$p" -tA -c "SELECT extversion FROM pg_extension WHERE extname = 'counter_ext'")
    [ "$v" = 1.8 ] || fail "counter_ext on the node of port $p: $v"
done
[ "$(body)" = "true cu_own 0 false" ] ||
    fail "the batch function after the update (1.8 form, owner, extension members, PUBLIC may execute): $(body)"
# 1.8's event triggers on every node (Citus sends the update to the workers)
n=$(on_nodes_sum "SELECT count(*) FROM pg_event_trigger WHERE evtname IN
    ('counter_citus_trigger_creator', 'counter_citus_state', 'counter_citus_shard_truncate') AND evtenabled = 'O'")
[ "$n" = 9 ] || fail "1.8's three event triggers on the 3 nodes after the update: $n of 9"
n=$(on_nodes_sum "SELECT count(*) FROM pg_proc WHERE proname ~ '^tracked_[0-9]+_batch$'")
[ "$n" = 1 ] || fail "batch functions on the nodes: $n (1, on the coordinator, expected)"
[ "$(identity f)" = 11 ] && [ "$(identity d)" = 0 ] ||
    fail "the dirty log of the rollup and its shards with REPLICA IDENTITY FULL after the update: $(identity f) of 11"
echo "ok: the update to 1.8 on a Citus cluster makes the counter's batch function again, its owner's, not the extension's, on the coordinator only; a deferred rollup's dirty log gets REPLICA IDENTITY FULL on every shard (Citus's non-blocking shard moves need it)"

id=$(coord -tA -c "SELECT counter_id FROM counter.tracked WHERE name = 'cu'")
coord -q -c "UPDATE counter_internal.tracked_${id}_base SET base = base + 1 WHERE key % 3 = 0" \
    -c "DELETE FROM counter_internal.tracked_${id}_base WHERE key % 5 = 1"
drifted=$(coord -tA -c "SELECT count(*) FROM generate_series(0, 96) g WHERE g % 3 = 0 OR g % 5 = 1")
shards=$(coord -tA -c "SELECT count(DISTINCT get_shard_id_for_distribution_column('cu.ev', g))
                       FROM generate_series(0, 96) g WHERE g % 3 = 0 OR g % 5 = 1")
[ "$shards" = 8 ] || fail "the drifted keys are on $shards shards of 8"
got=$(owner -tA -c "SELECT keys_checked || ' ' || keys_corrected || ' ' || outcome
                    FROM counter.reconcile('cu', '2026-07-06', all_keys => true)")
[ "$got" = "97 $drifted ok" ] || fail "the reconciliation after the update: $got (97 $drifted ok expected)"
got=$(ce_citus_mismatches owner cu cu.ev "kind <> 'bot'")
[ "$got" = 0 ] || fail "after the reconciliation, $got keys differ from count(*)"
got=$(owner -tA -c "SELECT keys_corrected || ' ' || outcome FROM counter.reconcile('cu', '2026-07-06', all_keys => true)")
[ "$got" = "0 ok" ] || fail "a second reconciliation: $got"
echo "ok: after the update, drift on $drifted keys of every shard is repaired by one reconcile(all_keys); every value equals count(*)"
