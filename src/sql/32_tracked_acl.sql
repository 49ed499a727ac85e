-- Tracked counters: who reads the catalogs (the update from 1.1 includes
-- this piece as it is).

-- Every role reads the catalog rows of the counters it owns (or belongs to
-- the owner of), and nothing else; nobody writes them but this file's
-- functions.
ALTER TABLE counter.tracked ENABLE ROW LEVEL SECURITY;
ALTER TABLE counter.tracked_key_drift ENABLE ROW LEVEL SECURITY;
CREATE POLICY tracked_read ON counter.tracked FOR SELECT USING (pg_catalog.pg_has_role(owner, 'USAGE'));
CREATE POLICY tracked_key_drift_read ON counter.tracked_key_drift FOR SELECT
    USING (EXISTS (SELECT FROM counter.tracked_runs r WHERE r.run_id OPERATOR(pg_catalog.=) tracked_key_drift.run_id));
-- (counter.tracked_runs is a view over the run record that shows each role
-- only its counters' runs: 31_tracked_code.sql.)
GRANT SELECT ON counter.tracked, counter.tracked_key_drift TO PUBLIC;
