-- ---- One run record, after the code: the drift detail's policy reads the
-- view counter.tracked_runs (made by the code above), as in
-- src/sql/32_tracked_acl.sql.
CREATE POLICY tracked_key_drift_read ON counter.tracked_key_drift FOR SELECT
    USING (EXISTS (SELECT FROM counter.tracked_runs r WHERE r.run_id OPERATOR(pg_catalog.=) tracked_key_drift.run_id));
