-- What pg_dump carries (doc/operations.md). The tables that hold user state
-- are extension members, so pg_dump dumps their rows only when they are
-- marked here; the identity sequences that number them are marked too, so a
-- restored database hands out the next id, not one already in use. The
-- configuration tables mark themselves where they are created
-- (counter.tracked, counter.rollups, counter.partitioned_tables,
-- counter.partition_staging, counter.jobs); this file adds what was left out:
--   pending work   counter.rollup_dirty (hours a deferred rollup must
--                  recompute; without it a restored rollup stays wrong)
--   history        counter.job_runs (the one run record: jobs, tracked
--                  reconciliations, rollup refreshes, partition maintenance)
--                  and counter.tracked_key_drift: carried over (bounded by
--                  counter_ext.history_retention), so drift, last outcomes
--                  and job history survive a move to a new server
--   identities     the sequences of every identity column above.
-- No foreign key joins two of them (below).

SELECT pg_catalog.pg_extension_config_dump('counter.rollup_dirty', '');
SELECT pg_catalog.pg_extension_config_dump('counter.job_runs', '');
SELECT pg_catalog.pg_extension_config_dump('counter.tracked_key_drift', '');
-- (One call a statement: each call updates the extension's catalog row.)
SELECT pg_catalog.pg_extension_config_dump('counter.tracked_counter_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('counter.rollups_rollup_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('counter.jobs_job_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('counter.job_runs_run_id_seq', '');

-- No FOREIGN KEY joins two of the dumped tables: pg_restore -j loads the rows
-- of extension tables in any order (by size), so a referencing table's rows
-- may come before the rows they reference, and the restore stops at the
-- foreign key (tracked_key_drift before its runs did). What ON DELETE
-- CASCADE did is done by statement triggers (71_dump_cascades.sql), as the
-- extension's owner like a foreign key's own action: deleting a run deletes
-- its logged drift, a managed table its staged drain.
CREATE OR REPLACE FUNCTION counter_internal.dumped_cascade()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_TABLE_NAME OPERATOR(pg_catalog.=) 'job_runs' THEN
        DELETE FROM counter.tracked_key_drift x WHERE x.run_id IN (SELECT o.run_id FROM gone o);
    ELSIF TG_TABLE_NAME OPERATOR(pg_catalog.=) 'partitioned_tables' THEN
        DELETE FROM counter.partition_staging x WHERE x.parent IN (SELECT o.parent FROM gone o);
    END IF;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION counter_internal.dumped_cascade() FROM PUBLIC;
