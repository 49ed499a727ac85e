-- ---- rollups (issue 12): refresh, trigger upsert and filter run as the
-- owner, restricted; filters become stored trees; nobody writes the catalogs
-- directly (RLS shows a role its own rows); helpers move to counter_internal;
-- the triggers take counter_internal.rollup_trigger.
ALTER TABLE counter.rollups ADD COLUMN filter_tree text, ADD COLUMN filter_relid oid,
    ALTER COLUMN owner DROP DEFAULT, DROP COLUMN mark_new_sql, DROP COLUMN mark_old_sql;
DROP POLICY rollups_read ON counter.rollups;
DROP POLICY rollups_insert ON counter.rollups;
DROP POLICY rollups_update ON counter.rollups;
DROP POLICY rollups_delete ON counter.rollups;
DROP POLICY rollup_dirty_insert ON counter.rollup_dirty;
DROP POLICY rollup_dirty_owner ON counter.rollup_dirty;
DROP POLICY rollup_status_read ON counter.rollup_status;
DROP POLICY rollup_status_owner ON counter.rollup_status;
REVOKE INSERT, UPDATE, DELETE ON counter.rollups, counter.rollup_dirty, counter.rollup_status FROM PUBLIC;
CREATE POLICY rollups_read ON counter.rollups FOR SELECT USING (pg_catalog.pg_has_role(owner, 'USAGE'));
CREATE POLICY rollup_dirty_read ON counter.rollup_dirty FOR SELECT
    USING (EXISTS (SELECT FROM counter.rollups r WHERE r.rollup_id OPERATOR(pg_catalog.=) rollup_dirty.rollup_id));
CREATE POLICY rollup_status_read ON counter.rollup_status FOR SELECT
    USING (EXISTS (SELECT FROM counter.rollups r WHERE r.rollup_id OPERATOR(pg_catalog.=) rollup_status.rollup_id));

-- 1.1's code that changed goes; the triggers of 1.1 (on users' tables) go
-- with counter.rollup_trigger and are made again below.
DROP VIEW counter.rollup_state;
DROP FUNCTION counter.rollup_trigger() CASCADE;
DROP FUNCTION counter.rollup_owned(integer), counter.rollup_eq_schema(oid), counter.rollup_sql(integer),
    counter.rollup_build_sql(integer), counter.rollup_job_sync(text), counter.rollup_horizon(integer),
    counter.rollup_refresh_chunk(integer, timestamptz, timestamptz, timestamptz[], boolean),
    counter.rollup_range_chunks(text, timestamptz, timestamptz), counter.rollup_dirty_chunks(text),
    counter.rollup_record(integer, timestamptz, text, bigint, text),
    counter.rollup_recompute(text, timestamptz, timestamptz), counter.rollup_refresh_dirty(text),
    counter.rollup_create(text, regclass, name, name[], name[], text, name[], text, interval, interval),
    counter.rollup_drop(text), counter.rollup_set_filter(text, text),
    counter.rollup_totals(text, timestamptz, timestamptz, text, text), counter.rollup_newest_hour(integer);
DROP PROCEDURE counter.rollup_refresh(text, timestamptz, timestamptz), counter.job_rollup_refresh(text, bigint);
