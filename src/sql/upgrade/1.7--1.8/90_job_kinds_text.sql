-- ---- counter_internal.job_kinds.procedure: text, not regprocedure
-- (05_jobs.sql). pg_upgrade refuses a database with a reg* column that names
-- OIDs it does not keep ("Checking for reg* data types in user tables":
-- counter_internal.job_kinds.procedure), so no cluster with counter_ext 1.2
-- to 1.7 could be pg_upgraded. Each routine is kept as its schema-qualified
-- signature; the built-in kinds' as a fresh install writes them
-- (61_job_kinds.sql). After every other piece: older hops' pieces write
-- regprocedure values (1.6--1.7/60_job_kinds.sql).
ALTER TABLE counter_internal.job_kinds ALTER COLUMN procedure TYPE text
    USING (pg_catalog.pg_identify_object('pg_catalog.pg_proc'::pg_catalog.regclass, procedure::pg_catalog.oid, 0)).identity;
UPDATE counter_internal.job_kinds k SET procedure = x.step
FROM (VALUES ('reconcile', 'counter_internal.tracked_run_step(text, jsonb, jsonb)'),
             ('rollup_refresh', 'counter_internal.rollup_run_step(text, jsonb, jsonb)'),
             ('partition_maintenance', 'counter_internal.partition_run_step(text, jsonb, jsonb)'),
             ('flush', 'counter_internal.flush_run_step(text, jsonb, jsonb)')) AS x(kind, step)
WHERE k.kind OPERATOR(pg_catalog.=) x.kind AND k.builtin;
