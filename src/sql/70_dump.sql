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
-- pg_dump orders the rows of tables that reference each other by their
-- foreign keys, pg_restore -j included.

SELECT pg_catalog.pg_extension_config_dump('counter.rollup_dirty', '');
SELECT pg_catalog.pg_extension_config_dump('counter.job_runs', '');
SELECT pg_catalog.pg_extension_config_dump('counter.tracked_key_drift', '');
-- (One call a statement: each call updates the extension's catalog row.)
SELECT pg_catalog.pg_extension_config_dump('counter.tracked_counter_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('counter.rollups_rollup_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('counter.jobs_job_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('counter.job_runs_run_id_seq', '');
