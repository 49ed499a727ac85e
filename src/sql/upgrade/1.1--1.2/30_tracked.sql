-- ---- tracked counters: state moves to counter_internal, filters become
-- stored trees, triggers take the counter id only, the catalogs get RLS.
ALTER TABLE counter.tracked ADD COLUMN filter_tree text, ADD COLUMN filter_relid oid,
    ADD COLUMN verify_every interval NOT NULL DEFAULT interval '1 day' CHECK (verify_every >= interval '1 minute'),
    ADD COLUMN verify_after text, ADD COLUMN verify_started timestamptz, ADD COLUMN last_verified timestamptz,
    ADD COLUMN source_relid oid, ADD COLUMN triggers_off boolean NOT NULL DEFAULT false,
    ADD COLUMN replicated boolean NOT NULL DEFAULT false;
UPDATE counter.tracked SET source_relid = source::oid;
ALTER TABLE counter.tracked_runs ADD COLUMN keys_busy bigint NOT NULL DEFAULT 0,
    ADD COLUMN keys_verified bigint NOT NULL DEFAULT 0;
-- who reads the catalogs (1.2's src/sql/32_tracked_acl.sql)
ALTER TABLE counter.tracked ENABLE ROW LEVEL SECURITY;
ALTER TABLE counter.tracked_runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE counter.tracked_key_drift ENABLE ROW LEVEL SECURITY;
CREATE POLICY tracked_read ON counter.tracked FOR SELECT USING (pg_catalog.pg_has_role(owner, 'USAGE'));
CREATE POLICY tracked_runs_read ON counter.tracked_runs FOR SELECT
    USING (EXISTS (SELECT FROM counter.tracked t WHERE t.counter_id OPERATOR(pg_catalog.=) tracked_runs.counter_id));
CREATE POLICY tracked_key_drift_read ON counter.tracked_key_drift FOR SELECT
    USING (EXISTS (SELECT FROM counter.tracked_runs r WHERE r.run_id OPERATOR(pg_catalog.=) tracked_key_drift.run_id));
GRANT SELECT ON counter.tracked, counter.tracked_runs, counter.tracked_key_drift TO PUBLIC;

-- 1.1's code goes; the triggers of 1.1 (on users' tables) go with
-- counter.tracked_fold and are made again below, with the counter id only.
DROP VIEW counter.tracked_values, counter.tracked_history, counter.tracked_drift, counter.tracked_key_drift_history;
DROP FUNCTION counter.tracked_fold() CASCADE;
DROP FUNCTION counter.tracked_caller(), counter.tracked_check_filter(text),
    counter.tracked_compile_filter(regclass, text, regrole), counter.tracked_get(text),
    counter.tracked_require_owner(counter.tracked, text), counter.tracked_key_check(counter.tracked, regtype, boolean),
    counter.tracked_require_select(counter.tracked), counter.tracked_table(counter.tracked, text),
    counter.track(text, regclass, name, name, text, text, interval, interval, integer, integer, bigint, bigint, interval),
    counter.untrack(text), counter.add(text, anyelement, bigint, timestamptz), counter.value(text, anyelement),
    counter.values_of(text, anyarray), counter.tracked_all_values(),
    counter.tracked_watermark(counter.tracked, timestamptz),
    counter.tracked_run_batch(counter.tracked, bigint, timestamptz, boolean, text),
    counter.tracked_finish_run(counter.tracked, bigint, text),
    counter.tracked_start_run(counter.tracked, timestamptz, boolean),
    counter.tracked_add_batch(bigint, bigint, bigint, bigint, bigint, bigint),
    counter.reconcile(text, timestamptz, boolean), counter.tracked_job_begin(text),
    counter.tracked_job_step(text, bigint, timestamptz, boolean, text), counter.tracked_job_end(text, bigint, text);
DROP PROCEDURE counter.job_reconcile(text, bigint);


-- Every counter of 1.1: its state tables move, its filter is resolved (as
-- its owner, with search_path pg_catalog, pg_temp: a filter that named a
-- function outside pg_catalog without its schema is kept as text and fails
-- loudly until the counter is registered again), its generated functions
-- are replaced by the batch function and its triggers made again.
