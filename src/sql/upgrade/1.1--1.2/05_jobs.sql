-- ---- jobs (doc/reference/worker.md): every job has an owner and runs in a
-- background-worker session of that owner; kinds are dispatched through
-- counter_internal.job_kinds; the status view and the registration code are
-- made again.
CREATE TABLE counter_internal.job_kinds (
    kind       text PRIMARY KEY CHECK (kind ~ '^[a-z][a-z0-9_]{0,58}$'),
    procedure  regprocedure NOT NULL,
    builtin    boolean NOT NULL DEFAULT false
);
COMMENT ON TABLE counter_internal.job_kinds IS 'job kinds of counter_ext and the procedure each runs (superuser only)';
REVOKE ALL ON TABLE counter_internal.job_kinds FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('counter_internal.job_kinds', 'WHERE NOT builtin');

ALTER TABLE counter.jobs ADD COLUMN owner regrole, ADD COLUMN disabled_reason text;
ALTER TABLE counter.job_runs ADD COLUMN run_as regrole;

DROP VIEW counter.job_status;
DROP FUNCTION counter.job_register(text, text, interval);
DROP FUNCTION counter.job_unregister(text, text);
