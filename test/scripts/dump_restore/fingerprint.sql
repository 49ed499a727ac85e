-- Everything dump_restore.sh compares between the source and a restore.
\pset format unaligned
\pset tuples_only on
SELECT 'counter', counter_id, name, source, owner, mode, last_watermark FROM counter.tracked ORDER BY 2;
SELECT 'value', counter, key, value FROM counter.tracked_values ORDER BY 2, 3;
SELECT 'tracked_run', run_id, counter_id, watermark, all_keys, keys_checked, keys_corrected, outcome
FROM counter.tracked_runs ORDER BY 2;
SELECT 'key_drift', run_id, key, cached, truth FROM counter.tracked_key_drift ORDER BY 2, 3;
SELECT 'rollup', rollup_id, name, source, rollup_table, mode, owner FROM counter.rollups ORDER BY 2;
SELECT 'rollup_status', rollup_id, last_refresh_at, last_outcome, last_rows FROM counter.rollup_status ORDER BY 2;
SELECT 'dirty', rollup_id, hour FROM counter.rollup_dirty GROUP BY 2, 3 ORDER BY 2, 3;
SELECT 'rollup_row', link_id, hour, count, distinct_visitor::text FROM public.events_hourly ORDER BY 2, 3;
SELECT 'job', job_id, kind, target, run_every, enabled, next_run, failures FROM counter.jobs ORDER BY 2;
SELECT 'job_run', run_id, job_id, kind, target, runner, outcome, rows_affected, object_id, info FROM counter.job_runs ORDER BY 2;
SELECT 'managed', parent, control, part_interval, premake FROM counter.partitioned_tables ORDER BY 2;
SELECT 'partition_run', parent, last_run_at, last_outcome, last_created, last_moved FROM counter.partition_status ORDER BY 2;
SELECT 'partition', partition, lo, hi, is_default FROM counter.partition_bounds('public.events') ORDER BY partition::text;
SELECT 'sequence', s.seq, s.last_value, s.is_called
FROM (SELECT 'tracked' AS seq, last_value, is_called FROM counter.tracked_counter_id_seq
      UNION ALL SELECT 'rollups', last_value, is_called FROM counter.rollups_rollup_id_seq
      UNION ALL SELECT 'jobs', last_value, is_called FROM counter.jobs_job_id_seq
      UNION ALL SELECT 'job_runs', last_value, is_called FROM counter.job_runs_run_id_seq) s ORDER BY 2;
SELECT 'rows', 'clicks', count(*), md5(string_agg(format('%s %s %s', id, link_id, occurred_at), ',' ORDER BY id)) FROM public.clicks;
SELECT 'rows', 'likes', count(*), md5(string_agg(format('%s %s', post_id, at), ',' ORDER BY post_id, at)) FROM public.likes;
SELECT 'rows', 'events', count(*), md5(string_agg(format('%s %s %s %s', event_id, link_id, visitor, occurred_at), ','
                                                  ORDER BY event_id)) FROM public.events;
SELECT 'rows', 'events_default', count(*) FROM public.events_default;
SELECT 'hll', link_id, visitors::text, counter.hll_cardinality(visitors) FROM public.visitors_daily ORDER BY 2;
SELECT 'pncounter', page, views::text, views::bigint FROM public.page_views ORDER BY 2;
SELECT 'owner', c.oid::regclass, c.relowner::regrole FROM pg_class c
WHERE c.relnamespace IN ('public'::regnamespace, 'counter'::regnamespace, 'counter_internal'::regnamespace) AND c.relkind IN ('r', 'p')
  AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
ORDER BY c.oid::regclass::text;
