-- ---- jobs of 1.1, after the code: the built-in kinds (rows of
-- counter_internal.job_kinds; 1.2 named its job procedures, gone since 1.7:
-- each names its step function as src/sql/61_job_kinds.sql does) and the
-- owner of every job.
INSERT INTO counter_internal.job_kinds (kind, procedure, builtin) VALUES
    ('reconcile', 'counter_internal.tracked_run_step(text, jsonb, jsonb)', true),
    ('rollup_refresh', 'counter_internal.rollup_run_step(text, jsonb, jsonb)', true),
    ('partition_maintenance', 'counter_internal.partition_run_step(text, jsonb, jsonb)', true),
    ('flush', 'counter_internal.flush_run_step(text, jsonb, jsonb)', true);

-- The jobs of 1.1 get the owner of what they serve. A job whose owner cannot
-- be found (a kind of the user's own, whose procedure was
-- counter.job_<kind>: 1.2 runs only kinds of counter_internal.job_kinds; or a
-- target that is gone) is disabled, with the reason, and runs as no one.
UPDATE counter.jobs j SET owner = counter_internal.job_target_owner(j.kind, j.target);
UPDATE counter.jobs j
SET enabled = false,
    disabled_reason = CASE
        WHEN NOT EXISTS (SELECT 1 FROM counter_internal.job_kinds k WHERE k.kind OPERATOR(pg_catalog.=) j.kind)
            THEN pg_catalog.format('1.2 runs only the kinds of counter_internal.job_kinds; add %s there (a procedure '
                                   'owned by a superuser) and set the job''s owner', j.kind)
        ELSE 'the owner of the job''s target is unknown (is the target gone?)' END
WHERE j.owner IS NULL;
