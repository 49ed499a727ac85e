-- ---- The built-in kinds name their step functions (the one loop, src/spine.cpp)
UPDATE counter_internal.job_kinds k SET procedure = x.step::pg_catalog.regprocedure
FROM (VALUES ('reconcile', 'counter_internal.tracked_run_step(text, jsonb, jsonb)'),
             ('rollup_refresh', 'counter_internal.rollup_run_step(text, jsonb, jsonb)'),
             ('partition_maintenance', 'counter_internal.partition_run_step(text, jsonb, jsonb)'),
             ('flush', 'counter_internal.flush_run_step(text, jsonb, jsonb)')) x(kind, step)
WHERE k.kind OPERATOR(pg_catalog.=) x.kind AND k.builtin;
