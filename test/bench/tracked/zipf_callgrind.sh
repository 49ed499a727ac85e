#!/usr/bin/env bash
# A buffered add of one key beside an add of a random one of 40,000 keys
# that are all in the shared table (made first, one per transaction, so
# none is pinned past the owner's share), in instructions (callgrind,
# `postgres --single`, deterministic; doc/bench/tracked.md, "1.8: zipf keys
# again"). Per execution: the difference of runs of 1,000 and 3,000
# executions of a prepared statement, each run on a copy of the same data
# directory. The draw alone is measured too: what the random key's add costs
# beyond the one key's, less it, is the many-keys cost of the add's code.
# On demand, not in CI:
#   bash test/bench/tracked/zipf_callgrind.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
source test/lib.sh
ce_require_packages "${CE_TEST_PACKAGES[@]}" valgrind || exit 1
ce_build_and_stage || exit 1
work=$(mktemp -d)
chmod 755 "$work"
trap 'ce_cluster_stop_all; rm -rf "$work"' EXIT
ce_cluster_start zc "counter_ext.buffer_entries = 262144" "counter_ext.enabled = off" \
    "fsync = on" "synchronous_commit = on" "full_page_writes = on" >/dev/null || exit 1
ce_cluster_use zc
ce_psql >/dev/null <<'SQL' || exit 1
CREATE EXTENSION counter_ext;
CREATE TABLE appb (k bigint NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON appb (at);
SELECT counter.track('appb', 'appb', 'k', 'at', mode => 'application', buffered => true);
SQL
ce_as_owner "$CE_PGBIN/pg_ctl" -D "$CE_zc_DIR/data" -w -t 60 stop -m fast >/dev/null
cp -a "$CE_zc_DIR/data" "$work/pristine"

# instructions STATEMENT N: callgrind's total for the keys' making and N
# executions, on a copy of the data directory as it was before any add.
instructions() {
    rm -rf "$CE_zc_DIR/data" && cp -a "$work/pristine" "$CE_zc_DIR/data" || return 1
    ce_callgrind_single "$CE_PGBIN" "$CE_zc_DIR/data" "$work/out" "$1" "$2" \
        "DO \$\$ BEGIN FOR i IN 1..40000 LOOP PERFORM counter.add('appb', i::bigint); COMMIT; END LOOP; END \$\$"
}

declare -A per
statements=("SELECT counter.add('appb', 1::bigint)" "SELECT counter.add('appb', 1 + (random() * 39999)::bigint)"
    "SELECT 1::bigint" "SELECT 1 + (random() * 39999)::bigint")
for stmt in "${statements[@]}"; do
    a=$(instructions "$stmt" 1000) && b=$(instructions "$stmt" 3000) || exit 1
    per["$stmt"]=$(((b - a) / 2000))
    printf '%-62s %8s instructions per execution\n' "$stmt" "${per["$stmt"]}"
done
one=${per["SELECT counter.add('appb', 1::bigint)"]}
many=${per["SELECT counter.add('appb', 1 + (random() * 39999)::bigint)"]}
draw=$((${per["SELECT 1 + (random() * 39999)::bigint"]} - ${per["SELECT 1::bigint"]}))
echo "a random one of 40,000 keys beyond one key: $((many - one)); the draw alone: $draw;" \
    "the add's own many-keys cost: $((many - one - draw))"
