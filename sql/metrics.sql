-- The metrics surface (counter.metrics, doc/monitoring.md): names, values,
-- and who sees which names. Two owners (m_alice, m_bob) each have a tracked
-- counter with drift, a deferred rollup with dirty hours, a managed table
-- with rows in its default partition and the jobs of all three. Read as
-- each owner, as a member of an owner, as a pg_monitor member owning
-- nothing and as a role with neither: no row names an object of an owner
-- the reader does not belong to, and pg_monitor's per-owner series ('*')
-- add up to what the superuser sees.
CREATE EXTENSION counter_ext;
SET client_min_messages = warning;
\set VERBOSITY terse

CREATE ROLE m_alice LOGIN;
CREATE ROLE m_bob LOGIN;
CREATE ROLE m_alice_friend LOGIN IN ROLE m_alice;
CREATE ROLE m_mon LOGIN IN ROLE pg_monitor;
CREATE ROLE m_nobody LOGIN;
GRANT CREATE ON SCHEMA public TO m_alice, m_bob;

-- Each owner: an application-mode counter that was added 2 too many
-- (drift 2 found by the reconciliation), a buffered counter with adds not
-- yet flushed, a deferred rollup with three dirty
-- hours (the rows before it was made, two after), a managed table with 3 rows in its default partition.
CREATE FUNCTION public.m_setup(who text, extra int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('CREATE TABLE public.%I (id serial, k text NOT NULL, at timestamptz NOT NULL)', who || '_ev');
    PERFORM counter.track(who || '_secret_counter', format('public.%I', who || '_ev')::regclass, 'k', 'at',
                          mode => 'application', bucket_width => '1 hour');
    PERFORM counter.reconcile(who || '_secret_counter', '2024-03-01');
    EXECUTE format('INSERT INTO public.%I (k, at) SELECT ''x'', ''2024-03-01 10:00+00'' FROM generate_series(1, 3)',
                   who || '_ev');
    PERFORM counter.add(who || '_secret_counter', 'x'::text, 5 + extra, '2024-03-01 10:00+00');
    PERFORM counter.reconcile(who || '_secret_counter', '2024-03-02', all_keys => true);
    PERFORM counter.track(who || '_secret_buffered', format('public.%I', who || '_ev')::regclass, 'k', 'at',
                          mode => 'application', buffered => true);
    PERFORM counter.add(who || '_secret_buffered', k::text, 1, '2024-03-01 10:00+00')
    FROM unnest(ARRAY['p', 'q', 'r']) k;
    PERFORM counter.rollup_create(who || '_secret_rollup', format('public.%I', who || '_ev')::regclass, 'at', '{k}',
                                  mode => 'deferred');
    EXECUTE format('INSERT INTO public.%I (k, at) VALUES (''y'', ''2024-03-03 10:00+00''), (''y'', ''2024-03-03 11:00+00'')',
                   who || '_ev');
    EXECUTE format('CREATE TABLE public.%I (id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at)',
                   who || '_secret_parts');
    PERFORM counter.partition_manage(format('public.%I', who || '_secret_parts')::regclass, 'at', premake => 3);
    EXECUTE format('INSERT INTO public.%I SELECT g, now() + interval ''30 days'' FROM generate_series(1, 3) g',
                   who || '_secret_parts');
END
$$;
GRANT EXECUTE ON FUNCTION public.m_setup(text, int) TO PUBLIC;
SET ROLE m_alice;
SELECT public.m_setup('m_alice', 0);
SET ROLE m_bob;
SELECT public.m_setup('m_bob', 4);   -- bob's drift: 6
RESET ROLE;
SELECT pg_stat_force_next_flush();

-- The superuser sees every series, named (the ages: only that they are >= 0;
-- the partitions ahead: 2 or 3, as an hour may end between set-up and read).
SELECT metric, owner, object, kind,
       CASE WHEN metric LIKE '%age_seconds' OR metric LIKE '%lag_seconds' OR metric LIKE '%ahead_seconds'
            THEN (value >= 0)::int::float8
            WHEN metric LIKE '%partitions_ahead' THEN (value BETWEEN 2 AND 3)::int::float8 ELSE value END AS value
FROM counter.metrics ORDER BY owner, metric, kind, object;
-- what the superuser sees, summed per metric (the aggregates are sums)
CREATE TABLE public.m_total AS
SELECT metric, sum(value) AS total FROM counter.metrics
WHERE metric NOT LIKE '%seconds' AND metric NOT LIKE '%partitions_ahead' GROUP BY metric;
GRANT SELECT ON public.m_total TO PUBLIC;
-- Which rows a reader sees: who, how many named and folded rows, whether
-- any names an object of an owner the reader does not belong to (by
-- membership, and by the names set up above). m_sums: the metrics whose sum
-- differs from the superuser's total (none for a pg_monitor member).
CREATE VIEW public.m_seen AS
SELECT current_user AS reader,
       count(*) FILTER (WHERE object <> '*') AS named,
       count(*) FILTER (WHERE object = '*') AS folded,
       count(*) FILTER (WHERE object <> '*' AND NOT pg_has_role(owner::regrole, 'USAGE')) AS named_foreign,
       count(*) FILTER (WHERE (object LIKE '%m\_alice\_secret%' AND NOT pg_has_role('m_alice', 'USAGE'))
                           OR (object LIKE '%m\_bob\_secret%' AND NOT pg_has_role('m_bob', 'USAGE'))) AS leaked,
       string_agg(DISTINCT owner, ',' ORDER BY owner) AS owners
FROM counter.metrics;
GRANT SELECT ON public.m_seen TO PUBLIC;
CREATE VIEW public.m_sums AS
SELECT t.metric, t.total, coalesce(sum(m.value), 0) AS seen
FROM public.m_total t LEFT JOIN counter.metrics m USING (metric)
GROUP BY t.metric, t.total HAVING coalesce(sum(m.value), 0) <> t.total;
GRANT SELECT ON public.m_sums TO PUBLIC;

-- An owner sees its own names only, and nothing of the other owner.
SET ROLE m_alice;
SELECT * FROM public.m_seen;
SELECT DISTINCT object FROM counter.metrics ORDER BY 1;
SELECT metric, object, value FROM counter.metrics
WHERE metric IN ('counter_ext_tracked_drift', 'counter_ext_tracked_drift_total', 'counter_ext_rollup_dirty_hours',
                 'counter_ext_partition_default_rows') ORDER BY 1, 2;
-- a member of the owner sees the owner's names too
SET ROLE m_alice_friend;
SELECT * FROM public.m_seen;
-- the pg_monitor member, owning nothing: every owner folded, no name; the
-- sums equal the superuser's (nothing lost, nothing counted twice)
SET ROLE m_mon;
SELECT * FROM public.m_seen;
SELECT metric, owner, object, kind, value FROM counter.metrics
WHERE metric IN ('counter_ext_tracked_drift', 'counter_ext_rollup_dirty_hours', 'counter_ext_partition_default_rows',
                 'counter_ext_job_runs_total', 'counter_ext_buffered_pending', 'counter_ext_buffered_overflows_total')
ORDER BY 1, 2, 4;
SELECT * FROM public.m_sums;
-- a role with neither: nothing
SET ROLE m_nobody;
SELECT * FROM public.m_seen;
-- a caller's own condition cannot see the rows the view filters (security_barrier)
CREATE FUNCTION pg_temp.peek(o text) RETURNS boolean LANGUAGE plpgsql COST 0.0000001 AS $$
BEGIN RAISE NOTICE 'saw %', o; RETURN true; END $$;
SET client_min_messages = notice;
SELECT count(*) FROM counter.metrics WHERE pg_temp.peek(object);
SET client_min_messages = warning;
DROP FUNCTION pg_temp.peek(text);
RESET ROLE;

-- A member of pg_monitor that also belongs to an owner: that owner named, the other folded.
GRANT m_alice TO m_mon;
SET ROLE m_mon;
SELECT * FROM public.m_seen;
SELECT * FROM public.m_sums;
RESET ROLE;
REVOKE m_alice FROM m_mon;

-- A refresh: the rollup's dirty hours and lag drop to 0, its refresh is counted
-- with the rows it wrote, and its age is the time since that refresh
-- (ages_right: the age equals now() - rollup_status.last_refresh_at).
SET ROLE m_alice;
SELECT counter.rollup_refresh_dirty('m_alice_secret_rollup') AS rows_written;
SELECT metric, object, value FROM counter.metrics
WHERE metric LIKE 'counter_ext_rollup_%' AND metric NOT LIKE '%age_seconds' ORDER BY 1;
SELECT m.value = extract(epoch FROM now() - s.last_refresh_at) AS ages_right
FROM counter.metrics m, counter.rollup_status s
WHERE m.metric = 'counter_ext_rollup_last_refresh_age_seconds' AND s.rollup_id = (SELECT r.rollup_id FROM counter.rollups r WHERE r.name = 'm_alice_secret_rollup');
RESET ROLE;

DROP VIEW public.m_seen, public.m_sums;
DROP TABLE public.m_total;
DROP FUNCTION public.m_setup(text, int);
DROP TABLE public.m_alice_secret_parts, public.m_bob_secret_parts;
SELECT counter.rollup_drop('m_alice_secret_rollup'), counter.rollup_drop('m_bob_secret_rollup');
SELECT counter.untrack('m_alice_secret_counter'), counter.untrack('m_bob_secret_counter'),
       counter.untrack('m_alice_secret_buffered'), counter.untrack('m_bob_secret_buffered');
DROP TABLE public.m_alice_ev, public.m_bob_ev;
REVOKE CREATE ON SCHEMA public FROM m_alice, m_bob;
DROP ROLE m_alice_friend, m_mon, m_nobody, m_alice, m_bob;
DROP EXTENSION counter_ext;
