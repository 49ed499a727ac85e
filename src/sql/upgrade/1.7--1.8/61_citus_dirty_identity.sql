-- ---- the dirty log of a deferred rollup on a distributed table gets
-- REPLICA IDENTITY FULL (51_rollup_code.sql, rollup_create): Citus moves,
-- splits and rebalances shards by logical replication, which needs a
-- replica identity on every table colocated with the source; 1.7's dirty
-- logs had none, so every move of the source's shards in Citus's default
-- mode failed. As the rollup's owner, who owns the log; Citus carries the
-- change to every shard. (On a worker node counter.rollups has no rows.)
DO $upd$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT c.rollup_id, c.owner FROM counter.rollups c
             WHERE c.distributed
               AND pg_catalog.to_regclass(pg_catalog.format('counter_internal.%I', 'rollup_' || c.rollup_id || '_dirty'))
                   IS NOT NULL
             ORDER BY c.rollup_id LOOP
        PERFORM counter_internal.exec_as_owner_cmd(r.owner,
            pg_catalog.format('ALTER TABLE counter_internal.%I REPLICA IDENTITY FULL', 'rollup_' || r.rollup_id || '_dirty'),
            true);
    END LOOP;
END
$upd$;
