-- counter_ext 1.1 -> 1.2 (ALTER EXTENSION counter_ext UPDATE TO '1.2').
\echo Use "ALTER EXTENSION counter_ext UPDATE TO '1.2'" to load this file. \quit

-- Every change to src/sql/*.sql since 1.1 is repeated here, section by
-- section (test/scripts/upgrade.sh compares an updated installation with a
-- fresh one, object by object).

-- ---- pncounter: a validated cast from bytea (issue 14) ----------------------
CREATE FUNCTION counter.pncounter_from_bytea(bytea)
RETURNS counter.pncounter
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_from_bytea';
CREATE CAST (bytea AS counter.pncounter) WITH FUNCTION counter.pncounter_from_bytea(bytea);
CREATE CAST (counter.pncounter AS bytea) WITHOUT FUNCTION;

-- ---- dump and restore: pending work, history and identity sequences are dumped (issue 14) ----
SELECT pg_catalog.pg_extension_config_dump('counter.rollup_dirty', '');
SELECT pg_catalog.pg_extension_config_dump('counter.rollup_status', '');
SELECT pg_catalog.pg_extension_config_dump('counter.job_runs', '');
SELECT pg_catalog.pg_extension_config_dump('counter.tracked_runs', '');
SELECT pg_catalog.pg_extension_config_dump('counter.tracked_key_drift', '');
-- (One call a statement: each call updates the extension's catalog row.)
SELECT pg_catalog.pg_extension_config_dump('counter.tracked_counter_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('counter.tracked_runs_run_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('counter.rollups_rollup_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('counter.jobs_job_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('counter.job_runs_run_id_seq', '');
