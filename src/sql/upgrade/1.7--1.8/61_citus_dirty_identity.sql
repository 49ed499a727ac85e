-- ---- the dirty log of a deferred rollup on a distributed table gets
-- REPLICA IDENTITY FULL (51_rollup_code.sql, rollup_create): Citus moves,
-- splits and rebalances shards by logical replication, which needs a
-- replica identity on every table colocated with the source; 1.7's dirty
-- logs had none, so every move of the source's shards in Citus's default
-- mode failed. Citus carries the change to every shard, in this
-- transaction's connections. Made by the role updating the extension, not
-- as the rollup's owner: a session of the owner's would wait on the workers
-- for this update's locks on counter_ext's catalog (the event triggers that
-- fire on its ALTER TABLE read it), a distributed deadlock; the command runs
-- no code of the owner's (no trigger fires on it; event triggers are
-- counter_ext's and a superuser's). (On a worker node counter.rollups has no
-- rows.)
DO $upd$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT c.rollup_id FROM counter.rollups c
             WHERE c.distributed
               AND pg_catalog.to_regclass(pg_catalog.format('counter_internal.%I', 'rollup_' || c.rollup_id || '_dirty'))
                   IS NOT NULL
             ORDER BY c.rollup_id LOOP
        EXECUTE pg_catalog.format('ALTER TABLE counter_internal.%I REPLICA IDENTITY FULL', 'rollup_' || r.rollup_id || '_dirty');
    END LOOP;
END
$upd$;
