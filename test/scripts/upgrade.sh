#!/usr/bin/env bash
# ALTER EXTENSION counter_ext UPDATE from every released version gives the
# same objects as a fresh install of the current one: functions (body,
# volatility, parallel mark, settings, ACL), tables (columns, defaults,
# constraints, indexes, options), views, types, operators, aggregates, casts,
# operator classes, triggers and rows of the configuration tables. And data
# stored under the old version (made by the current library: only the SQL
# objects are old) keeps working after the update.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
# Every released version's install script, from the commit that released it.
trap 'ce_cluster_stop_all; ce_unstage_released_scripts' EXIT
ce_stage_released_scripts
released_versions=$CE_RELEASED_VERSIONS
ce_cluster_start upgrade "counter_ext.enabled = off"
ce_cluster_use upgrade

CE_OUT=$CE_TOP/build/test-output
mkdir -p "$CE_OUT"
current=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$CE_TOP/counter_ext.control")
catalog_sql=$(cat <<'SQL'
WITH ext AS (SELECT oid FROM pg_extension WHERE extname = 'counter_ext'),
members AS (
    SELECT d.classid, d.objid FROM pg_depend d, ext
    WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'),
lines AS (
    SELECT pg_describe_object(m.classid, m.objid, 0) AS line FROM members m
    UNION ALL
    SELECT format('function %s: %s %s %s %s %s %s', p.oid::regprocedure, p.provolatile, p.proparallel,
                  p.prosecdef, p.proisstrict, p.proconfig, p.proacl)
           || ' ' || md5(CASE WHEN p.prokind IN ('f', 'p') THEN pg_get_functiondef(p.oid) ELSE p.prosrc END)
    FROM members m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
    UNION ALL
    SELECT format('aggregate %s: %s %s %s %s %s %s %s %s', a.aggfnoid::regprocedure, a.aggtransfn, a.aggfinalfn,
                  a.aggcombinefn, a.aggserialfn, a.aggdeserialfn, a.aggtranstype::regtype, a.aggfinalmodify,
                  a.agginitval)
    FROM members m JOIN pg_aggregate a ON m.classid = 'pg_proc'::regclass AND a.aggfnoid = m.objid
    UNION ALL
    SELECT format('relation %s: %s %s %s', c.oid::regclass, c.relkind, c.reloptions, c.relacl)
    FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
    UNION ALL
    SELECT format('column %s.%s: %s %s %s', c.oid::regclass, a.attname, format_type(a.atttypid, a.atttypmod),
                  a.attnotnull, pg_get_expr(ad.adbin, ad.adrelid))
    FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_attrdef ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum
    UNION ALL
    SELECT format('constraint %s on %s: %s', co.conname, co.conrelid::regclass, pg_get_constraintdef(co.oid))
    FROM members m JOIN pg_constraint co ON m.classid = 'pg_class'::regclass AND co.conrelid = m.objid
    UNION ALL
    SELECT format('index on %s: %s', i.indrelid::regclass, regexp_replace(pg_get_indexdef(i.indexrelid), 'INDEX \S+', 'INDEX'))
    FROM members m JOIN pg_index i ON m.classid = 'pg_class'::regclass AND i.indrelid = m.objid
    UNION ALL
    SELECT format('view %s: %s', c.oid::regclass, md5(pg_get_viewdef(c.oid)))
    FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid AND c.relkind = 'v'
    UNION ALL
    SELECT format('trigger %s on %s: %s', t.tgname, t.tgrelid::regclass, pg_get_triggerdef(t.oid))
    FROM members m JOIN pg_trigger t ON m.classid = 'pg_class'::regclass AND t.tgrelid = m.objid AND NOT t.tgisinternal
    UNION ALL
    SELECT format('type %s: %s %s %s %s %s %s', t.oid::regtype, t.typinput, t.typoutput, t.typreceive, t.typsend,
                  t.typmodin, t.typstorage)
    FROM members m JOIN pg_type t ON m.classid = 'pg_type'::regclass AND t.oid = m.objid
    UNION ALL
    SELECT format('operator %s: %s %s %s %s %s', o.oid::regoperator, o.oprcode, o.oprcom::regoperator,
                  o.oprnegate::regoperator, o.oprrest, o.oprjoin)
    FROM members m JOIN pg_operator o ON m.classid = 'pg_operator'::regclass AND o.oid = m.objid
    UNION ALL
    SELECT format('config table %s: %s', cfg::regclass, cond)
    FROM ext, pg_extension e, unnest(e.extconfig, e.extcondition) AS x(cfg, cond) WHERE e.oid = ext.oid)
SELECT line FROM lines ORDER BY line COLLATE "C";
SQL
)

# Every released version, installed by its own install script, updated by
# the script PostgreSQL picks (the shortest path to the current version).
for old in $released_versions; do
    ce_log "upgrade from $old to $current"
    ce_psql -q -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS upgraded" -c "DROP DATABASE IF EXISTS fresh" \
        -c "CREATE DATABASE upgraded" -c "CREATE DATABASE fresh"
    ce_psql -q -d upgraded -c "CREATE EXTENSION counter_ext VERSION '$old'"
    # Data stored under the old version: sketches and a rollup.
    ce_psql -q -d upgraded <<'SQL'
CREATE TABLE visits (link int NOT NULL, visitor bigint, at timestamptz NOT NULL, id bigint PRIMARY KEY);
SELECT FROM counter.rollup_create('visits_hourly', 'visits', 'at', '{link}', '{visitor}');
SELECT FROM counter.rollup_create('visits_odd', 'visits', 'at', '{link}', mode => 'deferred', filter => 'id % 2 = 1');
CREATE TABLE pev (id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
SELECT FROM counter.partition_manage('pev', 'at', premake => 2);
INSERT INTO visits SELECT g % 3, g % 500, '2026-11-30 10:00+00', g FROM generate_series(1, 3000) g;
CREATE TABLE sketches AS SELECT link, counter.hll_add_agg(visitor) AS s FROM visits GROUP BY link;
-- A tracked counter registered by the old version, with rows it has not
-- seen (written with its triggers off: the library is the current one).
CREATE TABLE clicks (link int NOT NULL, at timestamptz NOT NULL);
SELECT FROM counter.track('clicks_per_link', 'clicks', 'link', 'at');
-- History of the old version: a reconciliation that found drift, a
-- refresh, a maintenance run (the update moves them into the run record).
SET session_replication_role = replica;
INSERT INTO clicks SELECT g % 5, '2026-11-30 09:00+00' FROM generate_series(1, 50) g;
RESET session_replication_role;
SELECT FROM counter.reconcile('clicks_per_link', all_keys => true);
SELECT FROM counter.rollup_recompute('visits_odd', '2026-11-30 00:00+00', '2026-12-01 00:00+00');
SELECT FROM counter.partition_maintain('pev');
SET session_replication_role = replica;
INSERT INTO clicks SELECT g % 5, '2026-11-30 10:00+00' FROM generate_series(1, 500) g;
SQL
    history_sql="SELECT (SELECT string_agg(format('%s:%s:%s:%s', watermark, keys_checked, drift_negative, outcome), ',' ORDER BY run_id)
                         FROM counter.tracked_runs),
                        (SELECT string_agg(format('%s:%s', key, drift), ',' ORDER BY key) FROM counter.tracked_key_drift),
                        (SELECT format('%s:%s', s.last_outcome, s.last_rows) FROM counter.rollup_status s
                         JOIN counter.rollups r USING (rollup_id) WHERE r.name = 'visits_odd')"
    # up to 1.2 a maintenance run's outcome was kept in partitioned_tables
    # itself; from 1.3 on it is in the run record, read by partition_status
    partition_history=partition_status
    [ "$(ce_psql -At -d upgraded -c "SELECT count(*) FROM pg_attribute WHERE attrelid = 'counter.partitioned_tables'::regclass AND attname = 'last_outcome'")" = 1 ] &&
        partition_history=partitioned_tables
    history_before=$(ce_psql -At -d upgraded -c "$history_sql" \
        -c "SELECT format('%s:%s', last_outcome, last_created) FROM counter.$partition_history WHERE parent = 'pev'::regclass")
    ce_psql -q -d upgraded -c "ALTER EXTENSION counter_ext UPDATE"
    ce_psql -q -d fresh -c "CREATE EXTENSION counter_ext"
    # the old version's history, in the one run record now (same views)
    history_after=$(ce_psql -At -d upgraded -c "$history_sql" \
        -c "SELECT format('%s:%s', last_outcome, last_created) FROM counter.partition_status WHERE parent = 'pev'::regclass")
    [ "$history_after" = "$history_before" ] || ce_die "the history of $old changed in the update: $history_before, now $history_after"
    grep -q ':5:-50:ok|' <<<"$history_before" || ce_die "no drift in the old history to carry: $history_before"
    [ "$(ce_psql -At -d upgraded -c "SELECT extversion FROM pg_extension WHERE extname = 'counter_ext'")" = "$current" ]
    ce_psql -At -d upgraded -c "$catalog_sql" | grep -v '^relation public\.\|^column public\.' > "$CE_OUT/upgrade-$old-updated.txt"
    ce_psql -At -d fresh -c "$catalog_sql" > "$CE_OUT/upgrade-$old-fresh.txt"
    if ! diff -u "$CE_OUT/upgrade-$old-fresh.txt" "$CE_OUT/upgrade-$old-updated.txt"; then
        ce_die "the update from $old differs from a fresh install of $current (- fresh, + updated)"
    fi
    [ "$(wc -l < "$CE_OUT/upgrade-$old-fresh.txt")" -gt 200 ] || ce_die "the catalog listing is too short to mean anything"
    # Each counter's batch function (not a member of the extension) is as
    # this version's counter.track makes it: made again here, it is the same.
    batch_sql="SELECT count(*) || ' ' || string_agg(md5(pg_get_functiondef(format('counter_internal.%I(timestamptz, timestamptz, text, boolean, integer)',
                      format('tracked_%s_batch', counter_id))::regprocedure)), ',' ORDER BY counter_id) FROM counter.tracked"
    batch_before=$(ce_psql -At -d upgraded -c "$batch_sql")
    ce_psql -q -d upgraded -c "SELECT FROM counter.tracked t, counter_internal.tracked_build_batch(t)"
    [ "$(ce_psql -At -d upgraded -c "$batch_sql")" = "$batch_before" ] ||
        ce_die "the update from $old left a counter's batch function as $old made it"
    [ "${batch_before%% *}" -gt 0 ] || ce_die "no counter in the updated database"
    # 1.7: the counter of the old version got the trigger that counts the
    # writers of its state tables (reads keep values only with it)
    [ "$(ce_psql -At -d upgraded -c "SELECT count(*) FROM pg_trigger g JOIN counter.tracked t
            ON g.tgrelid IN (counter_internal.tracked_table(t, 'base')::regclass, counter_internal.tracked_table(t, 'delta')::regclass)
            WHERE t.name = 'clicks_per_link' AND g.tgname = 'ce_writers' AND g.tgenabled = 'A'")" = 2 ] ||
        ce_die "the update from $old left the old counter's state tables without their ce_writers triggers"
    # Old data keeps working: stored sketches merge with new ones, the rollup
    # keeps counting and its refresh equals a from-scratch GROUP BY.
    result=$(ce_psql -At -d upgraded <<'SQL'
SET search_path = public, counter;
INSERT INTO visits SELECT g % 3, g % 700, '2026-11-30 10:30+00', g FROM generate_series(3001, 4000) g;
SELECT string_agg(format('%s:%s:%s', s.link, #(s.s || n.s), (hll_info(s.s || n.s)).format_version), ' ' ORDER BY s.link)
FROM sketches s JOIN (SELECT link, counter.hll_add_agg(visitor) AS s FROM visits GROUP BY link) n USING (link);
-- the trigger (replaced by the update) counted the new rows: equal before any refresh
SELECT count(*) FROM (
    SELECT link, hour, count FROM visits_hourly
    EXCEPT
    SELECT link, date_trunc('hour', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', count(*)
    FROM visits GROUP BY 1, 2) x;
SELECT c.reloptions FROM pg_class c WHERE c.oid = 'visits_hourly'::regclass;
CALL counter.rollup_refresh('visits_hourly', '2026-11-30 00:00+00', '2026-12-01 00:00+00');
SELECT count(*) FROM (
    SELECT link, hour, count, #distinct_visitor FROM visits_hourly
    EXCEPT
    SELECT link, date_trunc('hour', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', count(*), count(DISTINCT visitor)
    FROM visits GROUP BY 1, 2) x;
-- the old counter: state moved to counter_internal, repaired by a full run,
-- and its new trigger counts
SELECT string_agg(DISTINCT c.relnamespace::regnamespace::text, ',') FROM pg_class c
WHERE c.relname IN ('tracked_1_base', 'tracked_1_delta');
SELECT outcome FROM counter.reconcile('clicks_per_link', all_keys => true);
INSERT INTO clicks SELECT g % 7, now() - interval '1 hour' FROM generate_series(1, 100) g;
SELECT count(*) FROM (SELECT link, count(*) AS n FROM clicks GROUP BY 1) x
WHERE counter.value('clicks_per_link', link) <> n;
SQL
)
    ce_log "$result"
    # (The library is always the current one, so these sketches have the
    # current format; version 1 bytes are tested in sql/hll.sql.) Every link
    # has fewer than 1,000 visitors, so the sparse sketches count exactly.
    expected=$(ce_psql -At -d upgraded -c "SELECT string_agg(format('%s:%s:2', link, n), ' ' ORDER BY link)
        FROM (SELECT link, count(DISTINCT visitor) AS n FROM visits GROUP BY link) x")
    [ "$(printf '%s\n' "$result" | sed -n 1p)" = "$expected" ] || ce_die "old sketches merged wrongly: $result, expected $expected"
    [ "$(printf '%s\n' "$result" | sed -n 2p)" = 0 ] || ce_die "the trigger miscounted after the update"
    [ "$(printf '%s\n' "$result" | sed -n 3p)" = "{fillfactor=60}" ] || ce_die "the update did not set fillfactor 60 on the rollup table"
    [ "$(printf '%s\n' "$result" | sed -n 4p)" = 0 ] || ce_die "the rollup differs from a from-scratch GROUP BY after a refresh"
    # A rollup's filter of the old version is a stored tree now, applied by the
    # refresh (as the owner) and by the trigger.
    odd=$(ce_psql -At -d upgraded <<'SQL'
SELECT r.filter_tree IS NOT NULL AND r.filter_relid = r.source::oid FROM counter.rollups r WHERE r.name = 'visits_odd';
SELECT counter.rollup_recompute('visits_odd', '2026-11-30 00:00+00', '2026-12-01 00:00+00') >= 0;
SELECT (SELECT sum(count) FROM visits_odd) = (SELECT count(*) FROM visits WHERE id % 2 = 1);
SQL
)
    [ "$odd" = "$(printf 't\nt\nt')" ] || ce_die "the old rollup's filter did not become a stored tree that the refresh applies: $odd"
    # (1.8) the update counts the indexes of a table managed before it
    filled=$(ce_psql -At -d upgraded -c "SELECT string_agg((parent_indexes IS NOT DISTINCT FROM
        counter_internal.partition_index_count(parent))::text, ',') FROM counter.partitioned_tables")
    [ "$filled" = true ] || ce_die "the update from $old did not count the managed table's indexes: $filled"
    # A table managed under the old version is maintained after the update (as
    # its owner), and its catalog row is invisible to a role that does not own it.
    pev=$(ce_psql -At -d upgraded <<'SQL'
INSERT INTO pev VALUES (1, now() - interval '2 hours');
SELECT outcome, moved FROM counter.partition_maintain('pev');
SELECT count(*) FROM ONLY pev_default;
CREATE ROLE upgrade_stranger;
SET ROLE upgrade_stranger;
SELECT count(*) FROM counter.partitioned_tables;
RESET ROLE;
DROP ROLE upgrade_stranger;
SQL
)
    [ "$pev" = "$(printf 'ok|1\n0\n0')" ] || ce_die "the table managed before the update is not maintained, or is visible to others: $pev"
    [ "$(printf '%s\n' "$result" | sed -n 5p)" = counter_internal ] || ce_die "the tracked state did not move: $result"
    [ "$(printf '%s\n' "$result" | sed -n 6p)" = ok ] || ce_die "reconcile after the update failed: $result"
    [ "$(printf '%s\n' "$result" | sed -n 7p)" = 0 ] || ce_die "the updated tracked counter is not exact: $result"
    ff=$(ce_psql -At -d upgraded -c "SELECT c.reloptions FROM pg_class c WHERE c.relname = 'tracked_1_delta'")
    [ "$ff" = "{fillfactor=60}" ] || ce_die "the update did not set fillfactor 60 on the delta table: $ff"
done
ce_scan_log "$CE_upgrade_LOG"
echo ok
