-- The metrics surface (doc/monitoring.md): one view, counter.metrics, in the
-- long format exporters want, one row per series: (metric, owner, object,
-- kind, value). Names are stable and carry their unit; a *_total is a sum
-- over the run record (counter.job_runs), which trimming can make smaller.
-- Code only (a view), so the update from 1.4 includes this piece as it is.
--
-- Who sees what: a row naming a counter, rollup, table or job target is
-- shown only to a member of its owner (pg_has_role(owner, 'USAGE'), as in
-- counter.tracked_status; a superuser sees every one). The objects of the
-- other owners are shown to a member of pg_monitor only folded into one
-- series per (metric, owner[, job kind]) with object '*', its value the
-- sum, max or min of the hidden objects' values (column agg below); other
-- roles do not see them at all. So a monitoring role that owns nothing sees
-- every number without a name, and a sum over all series counts each
-- object once whoever reads it. Owner labels are role names, which
-- pg_catalog.pg_roles shows to every role anyway.
--
-- The view reads the catalogs as its owner (the extension's), which is why
-- it filters itself; security_barrier keeps a caller's own conditions from
-- running before that filter. It reads no user table (partition bounds come
-- from pg_class.relpartbound, as pg_get_expr prints them, rather than from
-- counter.partition_bounds, which wants the right to read the table; a bound
-- of MINVALUE or MAXVALUE is not counted): rows in a default
-- partition are the statistics' estimate (pg_stat_all_tables.n_live_tup;
-- counter.partition_status counts them exactly, as the owner), and the
-- buffered figures come from counter.buffer_status() (the counters the
-- caller may act for), counter.buffer_totals() (for pg_monitor, the other
-- owners' sums) and counter.buffer_shares() (the owners' shares).
CREATE OR REPLACE VIEW counter.metrics WITH (security_barrier) AS
WITH
-- (NOT MATERIALIZED, and one branch per metric with its name a constant:
-- an exporter's query for one metric, WHERE metric = '...', is planned down
-- to that metric's branch and reads only what it needs)
tracked_runs AS NOT MATERIALIZED (
    SELECT r.object_id, pg_catalog.count(*) AS runs,
           pg_catalog.sum((r.info ->> 'drift_positive')::numeric OPERATOR(pg_catalog.-)
                          (r.info ->> 'drift_negative')::numeric) AS drift_total,
           pg_catalog.sum((r.info ->> 'keys_corrected')::numeric) AS keys_corrected,
           pg_catalog.sum((r.info ->> 'keys_verified')::numeric) AS keys_verified
    FROM counter.job_runs r
    WHERE r.kind OPERATOR(pg_catalog.=) 'reconcile' AND r.info ? 'watermark'
      AND r.outcome OPERATOR(pg_catalog.<>) 'running'
    GROUP BY r.object_id),
rollup_runs AS NOT MATERIALIZED (
    SELECT r.object_id, pg_catalog.count(*) AS runs, pg_catalog.sum((r.info ->> 'rows')::numeric) AS rows_written
    FROM counter.job_runs r
    WHERE r.kind OPERATOR(pg_catalog.=) 'rollup_refresh' AND r.info ? 'outcome'
    GROUP BY r.object_id),
parts AS NOT MATERIALIZED (
    SELECT p.parent, k.relowner AS owner, pg_catalog.format('%I.%I', n.nspname, k.relname) AS object,
           p.created_at, p.job_target
    FROM counter.partitioned_tables p
    JOIN pg_catalog.pg_class k ON k.oid OPERATOR(pg_catalog.=) p.parent
    JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) k.relnamespace),
part_bounds AS NOT MATERIALIZED (
    SELECT i.inhparent AS parent, pg_catalog.count(*) AS partitions,
           pg_catalog.count(*) FILTER (WHERE v[1]::timestamptz OPERATOR(pg_catalog.>) pg_catalog.now()) AS ahead,
           pg_catalog.max(v[2]::timestamptz) AS newest
    FROM pg_catalog.pg_inherits i
    JOIN pg_catalog.pg_class kp ON kp.oid OPERATOR(pg_catalog.=) i.inhrelid
    CROSS JOIN LATERAL pg_catalog.regexp_match(pg_catalog.pg_get_expr(kp.relpartbound, kp.oid),
        '^FOR VALUES FROM \(''([^'']*)''\) TO \(''([^'']*)''\)$') v
    WHERE i.inhparent IN (SELECT t.parent FROM counter.partitioned_tables t)
    GROUP BY i.inhparent),
job_stats AS NOT MATERIALIZED (
    SELECT r.job_id, pg_catalog.count(*) AS runs,
           pg_catalog.count(*) FILTER (WHERE r.outcome OPERATOR(pg_catalog.=) 'failed') AS failed,
           pg_catalog.count(*) FILTER (WHERE r.outcome OPERATOR(pg_catalog.=) 'skipped') AS skipped,
           coalesce(pg_catalog.sum(r.rows_affected), 0) AS rows_affected
    FROM counter.job_runs r
    WHERE r.job_id IS NOT NULL AND r.outcome OPERATOR(pg_catalog.<>) 'running'
    GROUP BY r.job_id),
series (metric, owner, object, kind, value, agg) AS NOT MATERIALIZED (
    SELECT 'counter_ext_tracked_drift'::text, c.owner::oid, c.name, ''::text, (coalesce(l.drift, 0))::float8, 'sum'::text
    FROM counter.tracked c
    LEFT JOIN LATERAL (
        SELECT (r.info ->> 'drift_positive')::numeric OPERATOR(pg_catalog.-) (r.info ->> 'drift_negative')::numeric AS drift
        FROM counter.job_runs r
        WHERE r.kind OPERATOR(pg_catalog.=) 'reconcile' AND r.object_id OPERATOR(pg_catalog.=) c.counter_id
          AND r.info ? 'watermark' AND r.outcome OPERATOR(pg_catalog.<>) 'running'
          AND r.info ->> 'outcome' OPERATOR(pg_catalog.<>) 'running'
        ORDER BY r.run_id DESC LIMIT 1) l ON true
    UNION ALL
    SELECT 'counter_ext_tracked_drift_total'::text, c.owner::oid, c.name, ''::text, (coalesce(t.drift_total, 0))::float8, 'sum'::text
    FROM counter.tracked c LEFT JOIN tracked_runs t ON t.object_id OPERATOR(pg_catalog.=) c.counter_id
    UNION ALL
    SELECT 'counter_ext_tracked_keys_corrected_total'::text, c.owner::oid, c.name, ''::text, (coalesce(t.keys_corrected, 0))::float8, 'sum'::text
    FROM counter.tracked c LEFT JOIN tracked_runs t ON t.object_id OPERATOR(pg_catalog.=) c.counter_id
    UNION ALL
    SELECT 'counter_ext_tracked_keys_verified_total'::text, c.owner::oid, c.name, ''::text, (coalesce(t.keys_verified, 0))::float8, 'sum'::text
    FROM counter.tracked c LEFT JOIN tracked_runs t ON t.object_id OPERATOR(pg_catalog.=) c.counter_id
    UNION ALL
    SELECT 'counter_ext_tracked_reconcile_runs_total'::text, c.owner::oid, c.name, ''::text, (coalesce(t.runs, 0))::float8, 'sum'::text
    FROM counter.tracked c LEFT JOIN tracked_runs t ON t.object_id OPERATOR(pg_catalog.=) c.counter_id
    UNION ALL
    SELECT 'counter_ext_tracked_last_reconcile_age_seconds'::text, c.owner::oid, c.name, ''::text, (extract(epoch FROM pg_catalog.now() OPERATOR(pg_catalog.-) coalesce(l.finished_at, c.created_at)))::float8, 'max'::text
    FROM counter.tracked c
    LEFT JOIN LATERAL (
        SELECT r.finished_at FROM counter.job_runs r
        WHERE r.kind OPERATOR(pg_catalog.=) 'reconcile' AND r.object_id OPERATOR(pg_catalog.=) c.counter_id
          AND r.info ? 'watermark' AND r.outcome OPERATOR(pg_catalog.<>) 'running'
        ORDER BY r.run_id DESC LIMIT 1) l ON true
    UNION ALL
    SELECT 'counter_ext_buffered_pending'::text, c.owner::oid, c.name, ''::text, (b.pending)::float8, 'sum'::text
    FROM counter.buffer_status() b JOIN counter.tracked c ON c.name OPERATOR(pg_catalog.=) b.counter
    UNION ALL
    SELECT 'counter_ext_buffered_entries'::text, c.owner::oid, c.name, ''::text, (b.entries)::float8, 'sum'::text
    FROM counter.buffer_status() b JOIN counter.tracked c ON c.name OPERATOR(pg_catalog.=) b.counter
    UNION ALL
    -- per owner (its share of the shared table): object ''
    SELECT DISTINCT 'counter_ext_buffered_overflows_total'::text, c.owner::oid, ''::text, ''::text, b.overflows::float8,
           'sum'::text
    FROM counter.buffer_status() b JOIN counter.tracked c ON c.name OPERATOR(pg_catalog.=) b.counter
    UNION ALL
    -- per owner, its share of the shared table (1.8): object ''; another
    -- owner's only to a pg_monitor member (buffer_shares), folded below
    SELECT 'counter_ext_buffer_share_entries'::text, b.owner::oid, ''::text, ''::text, b.entries::float8, 'sum'::text
    FROM counter.buffer_shares() b
    UNION ALL
    SELECT 'counter_ext_buffer_share_cap'::text, b.owner::oid, ''::text, ''::text, b.cap::float8, 'max'::text
    FROM counter.buffer_shares() b
    UNION ALL
    SELECT 'counter_ext_buffer_share_early_flushes_total'::text, b.owner::oid, ''::text, ''::text,
           b.early_flushes::float8, 'sum'::text
    FROM counter.buffer_shares() b
    UNION ALL
    SELECT 'counter_ext_rollup_dirty_hours'::text, r.owner::oid, r.name, ''::text, (coalesce(d.n, 0))::float8, 'sum'::text
    FROM counter.rollups r
    LEFT JOIN (SELECT dd.rollup_id, pg_catalog.count(DISTINCT dd.hour) AS n FROM counter.rollup_dirty dd
               GROUP BY dd.rollup_id) d ON d.rollup_id OPERATOR(pg_catalog.=) r.rollup_id
    UNION ALL
    SELECT 'counter_ext_rollup_refresh_lag_seconds'::text, r.owner::oid, r.name, ''::text, (CASE WHEN coalesce(d.n, 0) OPERATOR(pg_catalog.=) 0 THEN 0
     ELSE extract(epoch FROM pg_catalog.now() OPERATOR(pg_catalog.-) coalesce(ok.started_at, r.created_at)) END)::float8, 'max'::text
    FROM counter.rollups r
    LEFT JOIN (SELECT dd.rollup_id, pg_catalog.count(DISTINCT dd.hour) AS n FROM counter.rollup_dirty dd
               GROUP BY dd.rollup_id) d ON d.rollup_id OPERATOR(pg_catalog.=) r.rollup_id
    LEFT JOIN LATERAL (
        SELECT y.started_at FROM counter.job_runs y
        WHERE y.kind OPERATOR(pg_catalog.=) 'rollup_refresh' AND y.object_id OPERATOR(pg_catalog.=) r.rollup_id
          AND y.info ->> 'outcome' OPERATOR(pg_catalog.=) 'ok'
        ORDER BY y.run_id DESC LIMIT 1) ok ON true
    UNION ALL
    SELECT 'counter_ext_rollup_last_refresh_age_seconds'::text, r.owner::oid, r.name, ''::text, (extract(epoch FROM pg_catalog.now() OPERATOR(pg_catalog.-) coalesce(ok.started_at, r.created_at)))::float8, 'max'::text
    FROM counter.rollups r
    LEFT JOIN LATERAL (
        SELECT y.started_at FROM counter.job_runs y
        WHERE y.kind OPERATOR(pg_catalog.=) 'rollup_refresh' AND y.object_id OPERATOR(pg_catalog.=) r.rollup_id
          AND y.info ->> 'outcome' OPERATOR(pg_catalog.=) 'ok'
        ORDER BY y.run_id DESC LIMIT 1) ok ON true
    UNION ALL
    SELECT 'counter_ext_rollup_refreshes_total'::text, r.owner::oid, r.name, ''::text, (coalesce(x.runs, 0))::float8, 'sum'::text
    FROM counter.rollups r LEFT JOIN rollup_runs x ON x.object_id OPERATOR(pg_catalog.=) r.rollup_id
    UNION ALL
    SELECT 'counter_ext_rollup_rows_total'::text, r.owner::oid, r.name, ''::text, (coalesce(x.rows_written, 0))::float8, 'sum'::text
    FROM counter.rollups r LEFT JOIN rollup_runs x ON x.object_id OPERATOR(pg_catalog.=) r.rollup_id
    UNION ALL
    SELECT 'counter_ext_partition_partitions'::text, p.owner, p.object, ''::text, (coalesce(b.partitions, 0))::float8, 'sum'::text
    FROM parts p LEFT JOIN part_bounds b ON b.parent OPERATOR(pg_catalog.=) p.parent
    UNION ALL
    SELECT 'counter_ext_partition_partitions_ahead'::text, p.owner, p.object, ''::text, (coalesce(b.ahead, 0))::float8, 'min'::text
    FROM parts p LEFT JOIN part_bounds b ON b.parent OPERATOR(pg_catalog.=) p.parent
    UNION ALL
    SELECT 'counter_ext_partition_ahead_seconds'::text, p.owner, p.object, ''::text, (coalesce(extract(epoch FROM b.newest OPERATOR(pg_catalog.-) pg_catalog.now()), 0))::float8, 'min'::text
    FROM parts p LEFT JOIN part_bounds b ON b.parent OPERATOR(pg_catalog.=) p.parent
    UNION ALL
    SELECT 'counter_ext_partition_default_rows'::text, p.owner, p.object, ''::text, (coalesce(st.n_live_tup, 0))::float8, 'sum'::text
    FROM parts p
    LEFT JOIN pg_catalog.pg_partitioned_table pt ON pt.partrelid OPERATOR(pg_catalog.=) p.parent
    LEFT JOIN pg_catalog.pg_stat_all_tables st ON st.relid OPERATOR(pg_catalog.=) pt.partdefid
    UNION ALL
    SELECT 'counter_ext_partition_last_maintenance_age_seconds'::text, p.owner, p.object, ''::text, (extract(epoch FROM pg_catalog.now() OPERATOR(pg_catalog.-) coalesce(lr.finished_at, p.created_at)))::float8, 'max'::text
    FROM parts p
    LEFT JOIN LATERAL (
        SELECT (x.info ->> 'finished_at')::timestamptz AS finished_at FROM counter.job_runs x
        WHERE x.kind OPERATOR(pg_catalog.=) 'partition_maintenance'
          AND x.target OPERATOR(pg_catalog.=) coalesce(p.job_target, p.parent::text) AND x.info ? 'outcome'
        ORDER BY x.run_id DESC LIMIT 1) lr ON true
    UNION ALL
    SELECT 'counter_ext_job_failures'::text, j.owner::oid, j.target, j.kind, (j.failures)::float8, 'sum'::text
    FROM counter.jobs j WHERE j.owner IS NOT NULL
    UNION ALL
    SELECT 'counter_ext_job_enabled'::text, j.owner::oid, j.target, j.kind, (CASE WHEN j.enabled THEN 1 ELSE 0 END)::float8, 'sum'::text
    FROM counter.jobs j WHERE j.owner IS NOT NULL
    UNION ALL
    SELECT 'counter_ext_job_runs_total'::text, j.owner::oid, j.target, j.kind, (coalesce(x.runs, 0))::float8, 'sum'::text
    FROM counter.jobs j LEFT JOIN job_stats x ON x.job_id OPERATOR(pg_catalog.=) j.job_id WHERE j.owner IS NOT NULL
    UNION ALL
    SELECT 'counter_ext_job_failed_runs_total'::text, j.owner::oid, j.target, j.kind, (coalesce(x.failed, 0))::float8, 'sum'::text
    FROM counter.jobs j LEFT JOIN job_stats x ON x.job_id OPERATOR(pg_catalog.=) j.job_id WHERE j.owner IS NOT NULL
    UNION ALL
    SELECT 'counter_ext_job_skipped_runs_total'::text, j.owner::oid, j.target, j.kind, (coalesce(x.skipped, 0))::float8, 'sum'::text
    FROM counter.jobs j LEFT JOIN job_stats x ON x.job_id OPERATOR(pg_catalog.=) j.job_id WHERE j.owner IS NOT NULL
    UNION ALL
    SELECT 'counter_ext_job_rows_total'::text, j.owner::oid, j.target, j.kind, (coalesce(x.rows_affected, 0))::float8, 'sum'::text
    FROM counter.jobs j LEFT JOIN job_stats x ON x.job_id OPERATOR(pg_catalog.=) j.job_id WHERE j.owner IS NOT NULL
)
SELECT s.metric, s.owner::regrole::text AS owner, s.object, s.kind, s.value
FROM series s
WHERE pg_catalog.pg_has_role(s.owner, 'USAGE')
UNION ALL
SELECT s.metric, s.owner::regrole::text, '*', s.kind,
       CASE s.agg WHEN 'max' THEN pg_catalog.max(s.value) WHEN 'min' THEN pg_catalog.min(s.value)
                  ELSE pg_catalog.sum(s.value) END
FROM series s
WHERE NOT pg_catalog.pg_has_role(s.owner, 'USAGE') AND pg_catalog.pg_has_role('pg_monitor', 'USAGE')
GROUP BY s.metric, s.owner, s.kind, s.agg
UNION ALL
-- the buffered counters of the other owners, summed by buffer_totals (which
-- returns rows to pg_monitor members only)
SELECT m.metric, b.owner::text, '*', '', m.value
FROM counter.buffer_totals() b
CROSS JOIN LATERAL (VALUES
    ('counter_ext_buffered_pending', b.pending::float8),
    ('counter_ext_buffered_entries', b.entries::float8),
    ('counter_ext_buffered_overflows_total', b.overflows::float8)) m(metric, value);
COMMENT ON VIEW counter.metrics IS
    'one row per metric series (Prometheus long format): names only of the objects of roles the reader belongs to; '
    'pg_monitor members see the others folded per owner (object ''*'')';
GRANT SELECT ON counter.metrics TO PUBLIC;
