#!/usr/bin/env bash
# counter_ext's partitions on a logical replication publisher (two real
# clusters, wal_level = logical on the publisher). Two managed tables under
# insert load, with stragglers that land in the default partition and are
# drained (in one step and in staged steps over several transactions) while
# rows keep coming, and deletes on the partitions counter_ext made:
#   events     REPLICA IDENTITY FULL, published via the partition root,
#              owned by a role that is not a superuser (maintenance runs as
#              it) and counted by a trigger-mode rollup
#   events_ix  REPLICA IDENTITY USING INDEX, published partition by partition
#              (the subscriber makes the new partitions' tables and refreshes
#              its subscription, as PostgreSQL requires for that mode)
#   events_ins published for inserts only (publish = 'insert'), via the root:
#              a drain is invisible to it, and is not re-published (the
#              subscriber's unique key would stop the subscription on a
#              duplicate)
# Every partition gets its parent's replica identity (else the deletes fail)
# and joins the publications that list its siblings one by one,
# and the subscriber ends with exactly the publisher's rows (count and md5),
# although each drain moved rows from the default partition into tables that
# were not yet published.
# lane: side
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
trap ce_cluster_stop_all EXIT
fail() { echo "FAILED: $*"; exit 1; }
ce_cluster_start pub "counter_ext.enabled = off" "wal_level = logical" "max_wal_senders = 10" \
    "max_replication_slots = 10" || exit 1
ce_cluster_start sub "counter_ext.enabled = off" "max_logical_replication_workers = 8" \
    "max_sync_workers_per_subscription = 4" || exit 1
pub() { ce_cluster_use pub; ce_psql "$@"; }
sub() { ce_cluster_use sub; ce_psql "$@"; }

tables_sql="
CREATE TABLE public.events (event_id bigint NOT NULL, link_id int NOT NULL, occurred_at timestamptz NOT NULL,
                            UNIQUE (event_id, occurred_at)) PARTITION BY RANGE (occurred_at);
CREATE TABLE public.events_ix (event_id bigint NOT NULL, link_id int NOT NULL, occurred_at timestamptz NOT NULL,
                               UNIQUE (event_id, occurred_at)) PARTITION BY RANGE (occurred_at);
CREATE TABLE public.events_ins (event_id bigint NOT NULL, link_id int NOT NULL, occurred_at timestamptz NOT NULL,
                                UNIQUE (event_id, occurred_at)) PARTITION BY RANGE (occurred_at);"
pub -c "CREATE EXTENSION counter_ext" -c "$tables_sql" \
    -c "CREATE ROLE app; ALTER TABLE public.events OWNER TO app; GRANT CREATE ON SCHEMA public TO app" \
    -c "ALTER TABLE public.events REPLICA IDENTITY FULL" \
    -c "ALTER TABLE public.events_ix REPLICA IDENTITY USING INDEX events_ix_event_id_occurred_at_key" \
    -c "SELECT counter.partition_manage('public.events', 'occurred_at', premake => 2, batch_rows => 60)" \
    -c "SELECT counter.partition_manage('public.events_ix', 'occurred_at', premake => 2, batch_rows => 60)" \
    -c "SELECT counter.partition_manage('public.events_ins', 'occurred_at', premake => 2, batch_rows => 60)" \
    -c "CREATE PUBLICATION pub_ins FOR TABLE public.events_ins WITH (publish = 'insert', publish_via_partition_root = true)" \
    -c "SET ROLE app" \
    -c "SELECT counter.rollup_create('events_hourly', 'public.events', 'occurred_at', '{link_id}')" -c "RESET ROLE" \
    -c "CREATE PUBLICATION pub_root FOR TABLE public.events WITH (publish_via_partition_root = true)" \
    -c "CREATE PUBLICATION pub_leaf FOR TABLE public.events_ix" >/dev/null || fail "publisher set-up"

# The subscriber: one table for the root; for leaf publishing, a table per
# partition the publisher has (made again after maintenance, below).
leaf_tables() {
    pub -Atc "SELECT format('CREATE TABLE IF NOT EXISTS public.%I (event_id bigint NOT NULL, link_id int NOT NULL,'
                            ' occurred_at timestamptz NOT NULL, UNIQUE (event_id, occurred_at));'
                            ' ALTER TABLE public.%I REPLICA IDENTITY USING INDEX %I;', p.relname, p.relname,
                            p.relname || '_event_id_occurred_at_key')
              FROM pg_partition_tree('public.events_ix') t JOIN pg_class p ON p.oid = t.relid WHERE t.isleaf"
}
conn="host=127.0.0.1 port=$CE_pub_PORT user=$(ce_owner_name) dbname=postgres"
# On the subscriber, a replicated counter and rollup (with a filter) on the
# table the root publication writes: they count what the apply worker
# applies, the drains' re-published rows included (issue 24, item 7).
sub -c "CREATE TABLE public.events (event_id bigint NOT NULL, link_id int NOT NULL, occurred_at timestamptz NOT NULL,
                                    UNIQUE (event_id, occurred_at))" \
    -c "CREATE EXTENSION counter_ext" \
    -c "SELECT counter.track('events_link', 'public.events', 'link_id', 'occurred_at', filter => 'link_id <> 3',
                             replicated => true)" \
    -c "SELECT counter.rollup_create('events_sub_hourly', 'public.events', 'occurred_at', '{link_id}',
                                     filter => 'link_id <> 3', replicated => true)" \
    -c "CREATE TABLE public.events_ins (event_id bigint NOT NULL, link_id int NOT NULL, occurred_at timestamptz NOT NULL,
                                        UNIQUE (event_id, occurred_at))" \
    -c "$(leaf_tables)" \
    -c "CREATE SUBSCRIPTION sub_root CONNECTION '$conn' PUBLICATION pub_root" \
    -c "CREATE SUBSCRIPTION sub_leaf CONNECTION '$conn' PUBLICATION pub_leaf" \
    -c "CREATE SUBSCRIPTION sub_ins CONNECTION '$conn' PUBLICATION pub_ins" >/dev/null || fail "subscriber set-up"

# A publication that lists events_ix's partitions one by one: counter_ext
# adds each new partition to it.
pub -c "$(pub -Atc "SELECT format('CREATE PUBLICATION pub_list FOR TABLE %s', string_agg(relid::regclass::text, ', '))
                     FROM pg_partition_tree('public.events_ix') WHERE isleaf")" >/dev/null || fail "pub_list"

# A slot of our own reads what pub_ins publishes, message by message.
pub -c "SELECT 'made' FROM pg_create_logical_replication_slot('check_ins', 'pgoutput')" >/dev/null || fail "slot"

# Every partition counter_ext made has its parent's replica identity.
bad=$(pub -Atc "SELECT t.relid::regclass FROM pg_partition_tree('public.events') t JOIN pg_class c ON c.oid = t.relid
                WHERE t.isleaf AND c.relreplident <> 'f'
                UNION ALL
                SELECT t.relid::regclass FROM pg_partition_tree('public.events_ix') t JOIN pg_class c ON c.oid = t.relid
                WHERE t.isleaf AND (c.relreplident <> 'i' OR NOT EXISTS (
                    SELECT FROM pg_index i WHERE i.indrelid = t.relid AND i.indisreplident))")
[ -z "$bad" ] || fail "partitions without the parent's replica identity: $bad"

# Load: batches of rows in the current hours and stragglers 10 to 14 hours
# back (the default partition), deletes; maintenance runs meanwhile.
load() {
    local i
    for i in $(seq 1 30); do
        pub -c "INSERT INTO public.events SELECT $i * 1000 + g, g % 7, date_trunc('hour', now()) + (g * 37 % 3600) * interval '1 second'
                FROM generate_series(1, 40) g;
                INSERT INTO public.events SELECT $i * 1000 + 500 + g, g % 7,
                       date_trunc('hour', now()) - ((10 + g % 5) * interval '1 hour') + (g * 53 % 3600) * interval '1 second'
                FROM generate_series(1, 20) g;
                INSERT INTO public.events_ix SELECT event_id, link_id, occurred_at FROM public.events
                WHERE event_id > $i * 1000 AND event_id < ($i + 1) * 1000;
                INSERT INTO public.events_ins SELECT event_id, link_id, occurred_at FROM public.events
                WHERE event_id > $i * 1000 AND event_id < ($i + 1) * 1000;
                DELETE FROM public.events WHERE event_id % 23 = 0;
                DELETE FROM public.events_ix WHERE event_id % 29 = 0;" >/dev/null || return 1
    done
}
maintain() {
    local i
    for i in $(seq 1 25); do
        pub -c "CALL counter.run_maintenance()" >/dev/null 2>&1 || return 1
        sleep 0.1
    done
}
# A big straggler hour (more than batch_rows): drained in staged steps, one
# committed transaction each, while the load goes on.
pub -c "INSERT INTO public.events SELECT 900000 + g, g % 7, date_trunc('hour', now()) - interval '20 hours' + g * interval '1 second'
        FROM generate_series(1, 200) g;
        INSERT INTO public.events_ix SELECT * FROM public.events WHERE event_id > 900000;
        INSERT INTO public.events_ins SELECT * FROM public.events WHERE event_id > 900000" >/dev/null || fail "stragglers"
load &
loader=$!
maintain &
maintainer=$!
wait $loader || fail "the insert load failed (a delete without replica identity?)"
wait $maintainer || fail "maintenance failed under load"
for i in $(seq 1 20); do pub -c "CALL counter.run_maintenance()" >/dev/null || fail "maintenance"; done
[ "$(pub -Atc "SELECT (SELECT count(*) FROM public.events_default) + (SELECT count(*) FROM public.events_ix_default)
                     + (SELECT count(*) FROM public.events_ins_default)")" = 0 ] ||
    fail "the default partitions were not drained"
[ "$(pub -Atc "SELECT count(*) FROM counter.partition_bounds('public.events')
              WHERE lo = date_trunc('hour', now()) - interval '20 hours'")" = 1 ] || fail "the big hour was not drained"
unlisted=$(pub -Atc "SELECT t.relid::regclass FROM pg_partition_tree('public.events_ix') t WHERE t.isleaf AND NOT EXISTS (
                        SELECT FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid
                        WHERE p.pubname = 'pub_list' AND r.prrelid = t.relid)")
[ -z "$unlisted" ] || fail "new partitions not added to the publication listing the others: $unlisted"
[ "$(pub -Atc "SELECT count(*) FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid
              WHERE p.pubname = 'pub_list' AND r.prrelid NOT IN (SELECT relid FROM pg_partition_tree('public.events_ix'))")" = 0 ] ||
    fail "pub_list got tables that are not partitions of events_ix"
staged=$(pub -Atc "SELECT count(*) FROM counter.partition_staging")
[ "$staged" = 0 ] || fail "a staged drain did not finish"
pub -c "DELETE FROM public.events WHERE event_id % 31 = 0; DELETE FROM public.events_ix WHERE event_id % 37 = 0" >/dev/null ||
    fail "deletes on drained partitions"

# The trigger-mode rollup on events (owned by app, not a superuser, so the
# drains ran as app) counted no moved row twice (once the hours the deletes
# marked are recomputed).
pub -c "CALL counter.run_steps('rollup_refresh', 'events_hourly')" >/dev/null || fail "rollup refresh"
[ "$(pub -Atc "SELECT count(*) FROM (SELECT link_id, date_bin('1 hour', occurred_at, '2000-01-01 00:00+00') AS hour,
                                            count(*) AS n FROM public.events GROUP BY 1, 2) e
              FULL JOIN public.events_hourly r USING (link_id, hour) WHERE r.count IS DISTINCT FROM e.n")" = 0 ] ||
    fail "the rollup on the published table is not GROUP BY of its events: $(pub -Atc "SELECT count(*), sum(count) FROM public.events_hourly") vs $(pub -Atc "SELECT count(*) FROM public.events") $(pub -Atc "SELECT name, dirty_hours, last_outcome FROM counter.rollup_state")"

# Leaf publishing: the subscriber makes the new partitions' tables and refreshes.
sub -c "$(leaf_tables)" -c "ALTER SUBSCRIPTION sub_leaf REFRESH PUBLICATION" >/dev/null || fail "refresh"

fingerprint() { # fingerprint TABLE-LIST-SQL
    "$@" -Atc "SELECT count(*) || ' ' || md5(coalesce(string_agg(format('%s %s %s', event_id, link_id, occurred_at), ','
                       ORDER BY event_id, occurred_at), '')) FROM ($from) x"
}
from="SELECT * FROM public.events"
want_root=$(fingerprint pub)
from="SELECT * FROM public.events_ix"
want_leaf=$(fingerprint pub)
from="SELECT * FROM public.events_ins"
want_ins=$(fingerprint pub)
from_leaf_sub=$(sub -Atc "SELECT string_agg(format('SELECT * FROM public.%I', c.relname), ' UNION ALL ')
                          FROM pg_class c WHERE c.relname LIKE 'events\_ix\_%' AND c.relkind = 'r'")
got_root= got_leaf= got_ins=
for i in $(seq 1 120); do
    from="SELECT * FROM public.events"
    got_root=$(fingerprint sub)
    from=$from_leaf_sub
    got_leaf=$(fingerprint sub)
    from="SELECT * FROM public.events_ins"
    got_ins=$(fingerprint sub)
    [ "$got_root" = "$want_root" ] && [ "$got_leaf" = "$want_leaf" ] && [ "$got_ins" = "$want_ins" ] && break
    sleep 0.5
done
echo "publisher root: $want_root; subscriber: $got_root"
echo "publisher leaf: $want_leaf; subscriber: $got_leaf"
echo "publisher inserts only: $want_ins; subscriber: $got_ins"
[ "$got_root" = "$want_root" ] || fail "via the partition root: the subscriber does not have the publisher's rows"
[ "$got_leaf" = "$want_leaf" ] || fail "partition by partition: the subscriber does not have the publisher's rows"
[ "$got_ins" = "$want_ins" ] || fail "inserts only: the subscriber does not have the publisher's rows"
# The subscriber's replicated counter equals count(*) per key, its rollup a
# GROUP BY, and no trigger of counter_ext failed in the apply worker.
bad=$(sub -Atc "SELECT count(*) FROM generate_series(0, 6) k
               WHERE counter.value('events_link', k) <> (SELECT count(*) FROM public.events e WHERE e.link_id = k AND k <> 3)")
[ "$bad" = 0 ] || fail "the subscriber's replicated counter: $bad keys not equal to count(*)"
sub -c "SELECT counter.rollup_refresh_dirty('events_sub_hourly')" >/dev/null || fail "rollup refresh on the subscriber"
[ "$(sub -Atc "SELECT count(*) FROM (SELECT link_id, date_bin('1 hour', occurred_at, '2000-01-01 00:00+00') AS hour,
                                            count(*) AS n FROM public.events WHERE link_id <> 3 GROUP BY 1, 2) e
              FULL JOIN public.events_sub_hourly r USING (link_id, hour) WHERE r.count IS DISTINCT FROM e.n")" = 0 ] ||
    fail "the subscriber's replicated rollup is not GROUP BY of its events"
[ "$(sub -Atc "SELECT counter.replication_warning('public.events', false) IS NOT NULL
                      AND counter.replication_warning('public.events', true) IS NULL")" = t ] ||
    fail "counter.replication_warning does not see the subscription writing public.events"
! grep -E "ERROR: .*(names tracked counter|belongs to rollup)" "$CE_sub_LOG" || fail "a counter_ext trigger failed on the subscriber"
# pub_ins published each row once: as many inserts as rows (no deletes there).
inserts=$(pub -Atc "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('check_ins', NULL, NULL,
                        'proto_version', '1', 'publication_names', 'pub_ins') WHERE substr(data, 1, 1) = 'I'::bytea")
[ "$inserts ${want_ins%% *}" = "${want_ins%% *} ${want_ins%% *}" ] ||
    fail "pub_ins published $inserts inserts for ${want_ins%% *} rows"
pub -c "SELECT pg_drop_replication_slot('check_ins')" >/dev/null
for c in pub sub; do
    d="CE_${c}_LOG"
    ce_scan_log "${!d}" || fail "crash in the $c server log"
done
echo ok
