-- Demo: What an operator and a security reviewer see (1.5): one metrics view for Prometheus, alerts that name nothing, refusals that say why.
CREATE TABLE demo.ops_clicks AS SELECT * FROM demo.click_stream(2000, now() - interval '2 hours', 1);
CREATE INDEX ON demo.ops_clicks (occurred_at);
SELECT counter.track('ops_clicks', 'demo.ops_clicks', 'link_id', 'occurred_at', alert_threshold => 10) AS counter_id;

-- Rows that existed before track are a backfill, not drift: no alert.
SELECT keys_corrected, drift_positive, drift_negative FROM counter.reconcile('ops_clicks', all_keys => true);
SELECT counter, backfill_left, backfilled FROM counter.tracked_status WHERE counter = 'ops_clicks';

-- Real drift (rows loaded with the triggers off) raises the alert; its NOTIFY carries the run's id only,
-- which a listener reads with its own rights in counter.alerts.
SET session_replication_role = replica;
INSERT INTO demo.ops_clicks SELECT * FROM demo.click_stream(50, now() - interval '1 hour', 1);
RESET session_replication_role;
LISTEN counter_ext_drift;
SELECT drift_negative FROM counter.reconcile('ops_clicks', all_keys => true);
SELECT kind, target, outcome FROM counter.alerts ORDER BY run_id DESC LIMIT 1;

-- One view for monitoring (contrib/monitoring/ has the exporter files and a Grafana dashboard).
SELECT metric, object, value FROM counter.metrics
WHERE metric IN ('counter_ext_tracked_drift', 'counter_ext_tracked_keys_corrected_total') AND object = 'ops_clicks'
ORDER BY metric;

-- A writer cannot make a counter unreadable: an event time far in the future is refused before anything is written.
SELECT counter.track('ops_app', 'demo.ops_clicks', 'link_id', 'occurred_at', mode => 'application') AS counter_id;
\set ON_ERROR_STOP 0
SELECT counter.add('ops_app', 1::bigint, 1, 'infinity');
\set ON_ERROR_STOP 1
SELECT counter.untrack('ops_app');
SELECT counter.untrack('ops_clicks');
