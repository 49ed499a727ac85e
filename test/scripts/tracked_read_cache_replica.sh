#!/usr/bin/env bash
# A session of a subscriber keeps a key's table part (src/read_cache.cpp)
# while logical replication's apply writes the counter's state tables (a
# publication of counter_internal.tracked_1_delta: apply fires no statement
# trigger). The subscriber's session reads the key (kept), the publisher adds,
# and the session's next reads must reach the publisher's value: apply counts
# as a writer of every counter (a background worker's transaction that wrote).
# lane: side
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
work=$(mktemp -d)
trap 'ce_cluster_stop_all; rm -rf "$work"' EXIT
ce_cluster_start pub "wal_level = logical" "counter_ext.enabled = off" || { echo "no publisher"; exit 1; }
ce_cluster_start sub "counter_ext.enabled = off" || { echo "no subscriber"; exit 1; }
pub() { "$CE_PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$CE_pub_DIR" -p "$CE_pub_PORT" -U "$(ce_owner_name)" -d repl "$@"; }
sub() { "$CE_PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$CE_sub_DIR" -p "$CE_sub_PORT" -U "$(ce_owner_name)" -d repl "$@"; }
"$CE_PGBIN/createdb" -h "$CE_pub_DIR" -p "$CE_pub_PORT" -U "$(ce_owner_name)" repl
"$CE_PGBIN/createdb" -h "$CE_sub_DIR" -p "$CE_sub_PORT" -U "$(ce_owner_name)" repl
setup="CREATE TABLE app (k bigint NOT NULL, t timestamptz NOT NULL)"
for side in pub sub; do
    $side -c "CREATE EXTENSION counter_ext" -c "$setup" -c "CREATE INDEX ON app (t)" \
        -c "SELECT FROM counter.track('app', 'app', 'k', 't', mode => 'application', shards => 1)"
done
[ "$(sub -At -c "SELECT counter_id FROM counter.tracked WHERE name = 'app'")" = 1 ] || { echo "not counter 1"; exit 1; }
pub -c "SELECT counter.add('app', 1::bigint, 5)" \
    -c "CREATE PUBLICATION p FOR TABLE counter_internal.tracked_1_base, counter_internal.tracked_1_delta"
sub -c "CREATE SUBSCRIPTION s CONNECTION 'host=$CE_pub_DIR port=$CE_pub_PORT dbname=repl user=$(ce_owner_name)' PUBLICATION p"
for _ in $(seq 1 150); do
    [ "$(sub -At -c "SELECT counter.value('app', 1::bigint)")" = 5 ] && break
    sleep 0.2
done
[ "$(sub -At -c "SELECT counter.value('app', 1::bigint)")" = 5 ] || { echo "FAILED: the first rows never arrived"; exit 1; }

# One session of the subscriber: reads until it has read the key from what it
# kept, says so, then reads every 0.1 s (a new snapshot each time) until it
# sees 5 + 7 or 30 s have passed; the publisher adds 7 meanwhile.
sub -At >"$work/reader.out" 2>&1 <<'SQL' &
CREATE TEMP TABLE said (kept boolean);
DO $$
DECLARE
    v bigint;
    h bigint := (SELECT c.hits FROM counter_internal.tracked_read_cache() c);
BEGIN
    FOR i IN 1 .. 300 LOOP
        v := counter.value('app', 1::bigint);
        EXIT WHEN (SELECT c.hits FROM counter_internal.tracked_read_cache() c) > h;
        PERFORM pg_catalog.pg_sleep(0.1);
    END LOOP;
    RAISE NOTICE 'kept before the add: %', (SELECT c.hits FROM counter_internal.tracked_read_cache() c) > h;
    PERFORM pg_catalog.pg_sleep(1);
    FOR i IN 1 .. 300 LOOP
        v := counter.value('app', 1::bigint);
        EXIT WHEN v = 12;
        PERFORM pg_catalog.pg_sleep(0.1);
    END LOOP;
    RAISE NOTICE 'read after the add: %', v;
END
$$;
SQL
reader=$!
sleep 0.5
pub -c "SELECT counter.add('app', 1::bigint, 7)"
wait "$reader" || { cat "$work/reader.out"; exit 1; }
cat "$work/reader.out"
grep -q "kept before the add: t" "$work/reader.out" || { echo "FAILED: the subscriber's session kept nothing"; exit 1; }
grep -q "read after the add: 12" "$work/reader.out" ||
    { echo "FAILED: the subscriber's session kept the value of before apply wrote"; exit 1; }
echo "a kept value gave way to what apply wrote: ok"
