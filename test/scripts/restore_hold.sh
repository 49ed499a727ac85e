#!/usr/bin/env bash
# The worker does not act on a half-restored database (issue 14). A database
# with a tracked counter (on 3/4 of CE_RESTORE_ROWS rows, default 4,000,000),
# a deferred rollup over a managed hourly-partitioned table (the other 1/4,
# with stragglers in its default partition) and every job due each second is
# dumped (pg_dump -Fc) while the worker runs (naptime 1 s), then restored with
# pg_restore -j 2 (not one transaction) into a new database of the same
# running cluster, whose worker starts on it at once.
#
# The proof is a record, not timing: an event trigger made in the new database
# before the restore logs when pg_restore creates each index, constraint and
# trigger (it does so for a table only after the table's rows are in), and
# counter.job_runs records every run. The script checks that
#  - jobs fell due while the restore ran and were held (outcome 'held',
#    with the reason), so the race was really there, and no pass of the
#    worker failed (on a run id the restore loaded before its sequence);
#  - no job of the new database ran (succeeded, failed or running) before
#    the last index, constraint or trigger of the tables its object uses was
#    made, and each was armed only after that;
#  - a session named pg_restore of a superuser holds a restored job, and one
#    of an unprivileged role does not;
#  - afterwards every counter value equals count(*), the rollup equals a
#    from-scratch GROUP BY, no row of the partitioned table is lost, and every
#    job has run and succeeded since.
# CE_RESTORE_FORM=plain (restore_hold_plain.sh) dumps plain SQL and restores
# it through psql instead: every table's rows first, then every index,
# constraint and trigger, in one session that does not call itself
# pg_restore. A managed table's job then has only the index count its
# catalog row carries to wait for (seen: without it, the maintenance ran
# twice during the restore, 1.3 s before the table's key was complete).
# CE_DEBUG=1 prints the server log and the new database's runs on a failure.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
form=${CE_RESTORE_FORM:-parallel}
rows=${CE_RESTORE_ROWS:-4000000}
work=$(mktemp -d) || exit 1
trap 'ce_cluster_stop_all; rm -rf "$work"' EXIT
chmod 755 "$work"
fail() { echo "FAILED: $*"; [ -z "${CE_DEBUG:-}" ] || { grep -v "^\s" "$CE_hold_LOG" | grep -v "default partition\|Move or delete\|partition_record" | tail -40; q dst "SELECT run_id, kind, outcome, started_at, message FROM counter.job_runs ORDER BY run_id DESC LIMIT 10"; q dst "SELECT * FROM counter.jobs"; }; exit 1; }
ce_cluster_start hold "counter_ext.naptime = 1" || exit 1
ce_cluster_use hold
q() { ce_psql -d "$1" -At -c "$2"; }

"$CE_PGBIN/createdb" src || exit 1
start=$(date +%s)
ce_psql -d src -v rows="$rows" >"$work/build.out" 2>&1 <<'SQL' || { cat "$work/build.out"; fail "building the source"; }
CREATE EXTENSION counter_ext;
CREATE TABLE public.clicks (id bigint NOT NULL, link_id int NOT NULL, occurred_at timestamptz NOT NULL);
-- (loaded before counter.track: every event time is hours before its first
-- watermark, which counts them; a row loaded past it would count only once
-- the watermark passed it)
INSERT INTO public.clicks
SELECT i, i % 1000, now() - interval '50 hours' + (i % 172800) * interval '1 second'
FROM generate_series(1, :rows * 3 / 4) i;
ALTER TABLE public.clicks ADD PRIMARY KEY (id);
CREATE INDEX ON public.clicks (occurred_at);
SELECT FROM counter.track('clicks_per_link', 'public.clicks', 'link_id', 'occurred_at',
                          watermark_lag => '0 seconds', reconcile_every => '1 second');
CREATE TABLE public.events (id bigint NOT NULL, kind int NOT NULL, occurred_at timestamptz NOT NULL,
                            PRIMARY KEY (id, occurred_at)) PARTITION BY RANGE (occurred_at);
SELECT FROM counter.partition_manage('public.events', 'occurred_at', premake => 4,
                                     start_at => date_trunc('hour', now()) - interval '11 hours');
SELECT FROM counter.rollup_create('events_hourly', 'public.events', 'occurred_at', '{kind}', mode => 'deferred',
                                  refresh_every => '1 second');
INSERT INTO public.events
SELECT i, i % 17, date_trunc('hour', now()) - interval '11 hours' + (i % 43200) * interval '1 second'
FROM generate_series(1, :rows / 4) i;
-- stragglers past the partitions made ahead: the default partition
INSERT INTO public.events SELECT i, i % 17, now() + interval '330 minutes' FROM generate_series(:rows, :rows + 999) i;
SELECT FROM counter.reconcile('clicks_per_link', all_keys => true);
SELECT FROM counter.rollup_refresh_dirty('events_hourly');
-- pending work: dirty hours and new clicks
INSERT INTO public.events SELECT i, 3, now() - interval '1 hour' FROM generate_series(:rows + 1000, :rows + 1999) i;
INSERT INTO public.clicks SELECT i, 7, now() FROM generate_series(:rows * 3 / 4 + 1, :rows * 3 / 4 + 500) i;
SELECT FROM counter.jobs j, counter.job_alter(j.job_id, run_every => '1 second', next_run => now()) a;
-- A buffered counter with adds published to shared memory and not flushed
-- when the dump is taken (its jobs are off until the restore is done).
CREATE TABLE public.views (id bigint PRIMARY KEY, page int NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON public.views (at);
SELECT FROM counter.track('views_per_page', 'public.views', 'page', 'at', watermark_lag => '0 seconds',
                          reconcile_every => '1 second', buffered => true);
SELECT FROM counter.jobs j, counter.job_alter(j.job_id, enabled => false) a WHERE j.target = 'views_per_page';
INSERT INTO public.views SELECT i, i % 50, now() - interval '1 minute' FROM generate_series(1, 20000) i;
SQL
pending=$(q src "SELECT pending FROM counter.buffered WHERE counter = 'views_per_page'")
[ "${pending:-0}" -gt 0 ] || fail "the buffered counter has nothing unflushed: $(q src "SELECT * FROM counter.buffered")"

echo "source built: $rows rows in $(($(date +%s) - start)) s; jobs: $(q src "SELECT string_agg(kind, ', ' ORDER BY kind) FROM counter.jobs");" \
     "$pending adds of the buffered counter unflushed at the dump"

if [ "$form" = plain ]; then
    "$CE_PGBIN/pg_dump" -d src -f "$work/src.sql" || fail "pg_dump"
else
    "$CE_PGBIN/pg_dump" -d src -Fc -f "$work/src.dump" || fail "pg_dump -Fc"
fi

# The new database, with a log of the DDL the restore runs (made before it).
"$CE_PGBIN/createdb" dst || exit 1
ce_psql -d dst >/dev/null <<'SQL' || fail "the DDL log"
CREATE TABLE public.restore_log (at timestamptz NOT NULL, tag text, classid oid, objid oid, identity text,
                                 backend text);
-- (DDL of pg_restore's sessions only: the jobs' own, a new partition, is not
-- part of the restore)
CREATE FUNCTION public.restore_log_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.restore_log
    SELECT clock_timestamp(), d.command_tag, d.classid, d.objid, d.object_identity,
           (SELECT a.backend_type FROM pg_stat_activity a WHERE a.pid = pg_backend_pid())
    FROM pg_event_trigger_ddl_commands() d;
END $$;
CREATE EVENT TRIGGER restore_log ON ddl_command_end EXECUTE FUNCTION public.restore_log_ddl();
SQL
t0=$(q dst "SELECT clock_timestamp()")
start=$(date +%s)
if [ "$form" = plain ]; then
    PGAPPNAME=psql ce_psql -d dst -v ON_ERROR_STOP=1 -f "$work/src.sql" >"$work/restore.out" 2>&1 ||
        { tail -20 "$work/restore.out"; fail "psql -f (the plain dump)"; }
else
    "$CE_PGBIN/pg_restore" -d dst -j 2 --exit-on-error "$work/src.dump" >"$work/restore.out" 2>&1 ||
        { tail -20 "$work/restore.out"; fail "pg_restore -j 2"; }
fi
t1=$(q dst "SELECT clock_timestamp()")
echo "restore ($form): $(($(date +%s) - start)) s"
ce_psql -d dst -c "DROP EVENT TRIGGER restore_log" || fail "dropping the DDL log trigger"

# When each job's object was complete: the last index, constraint or trigger
# of its own that pg_restore made on a table the object uses (its source and
# every partition of it, its state or rollup table; another object's trigger
# on the same table is that object's).
ce_psql -d dst >/dev/null <<'SQL' || fail "the completion times"
CREATE TABLE public.job_tables AS
SELECT j.job_id, x.rel, CASE
    WHEN j.kind IN ('reconcile', 'flush') THEN (SELECT 'counter\_' || t.counter_id || '\_%' FROM counter.tracked t WHERE t.name = j.target)
    WHEN j.kind = 'rollup_refresh' THEN (SELECT 'counter\_rollup\_' || r.rollup_id || '\_%' FROM counter.rollups r WHERE r.name = j.target)
    END AS own_triggers
FROM counter.jobs j
CROSS JOIN LATERAL (
    SELECT t.source::oid AS rel FROM counter.tracked t WHERE j.kind IN ('reconcile', 'flush') AND t.name = j.target
    UNION ALL
    SELECT to_regclass(counter_internal.tracked_table(t, p))::oid FROM counter.tracked t, unnest('{base,delta}'::text[]) p
    WHERE j.kind IN ('reconcile', 'flush') AND t.name = j.target
    UNION ALL
    SELECT r.source::oid FROM counter.rollups r WHERE j.kind = 'rollup_refresh' AND r.name = j.target
    UNION ALL
    SELECT r.rollup_table::oid FROM counter.rollups r WHERE j.kind = 'rollup_refresh' AND r.name = j.target
    UNION ALL
    SELECT to_regclass(j.target)::oid WHERE j.kind = 'partition_maintenance') x;
-- partitions of partitioned tables among them
INSERT INTO public.job_tables
SELECT t.job_id, p.relid, t.own_triggers FROM public.job_tables t, pg_partition_tree(t.rel) p WHERE p.relid <> t.rel;
CREATE TABLE public.job_complete AS
SELECT t.job_id, max(l.at) AS complete_at
FROM public.job_tables t
JOIN public.restore_log l ON t.rel = CASE
    WHEN l.classid = 'pg_class'::regclass THEN coalesce((SELECT i.indrelid FROM pg_index i WHERE i.indexrelid = l.objid), l.objid)
    WHEN l.classid = 'pg_trigger'::regclass THEN (SELECT g.tgrelid FROM pg_trigger g WHERE g.oid = l.objid)
    WHEN l.classid = 'pg_constraint'::regclass THEN (SELECT c.conrelid FROM pg_constraint c WHERE c.oid = l.objid) END
WHERE l.tag IN ('CREATE INDEX', 'ALTER TABLE', 'CREATE TRIGGER', 'ALTER INDEX') AND l.backend = 'client backend'
  AND (l.classid <> 'pg_trigger'::regclass
       OR (SELECT g.tgname FROM pg_trigger g WHERE g.oid = l.objid) LIKE t.own_triggers)
GROUP BY t.job_id;
SQL
[ "$(q dst "SELECT count(*) FROM counter.jobs j LEFT JOIN public.job_complete c USING (job_id) WHERE c.complete_at IS NULL")" = 0 ] ||
    fail "no completion time for some job: $(q dst "SELECT * FROM public.job_tables")"

# The dump has the buffered counter's state without its unflushed adds; its
# jobs are switched on, and its first scheduled run (a full one: restored)
# makes it equal to count(*) again.
buffered_before=$(q dst "SELECT count(*) FROM (SELECT page, count(*) AS n FROM public.views GROUP BY 1) s
                         WHERE counter.value('views_per_page', s.page) <> s.n")
[ "$buffered_before" -gt 0 ] || fail "the restored buffered counter already equals count(*): the dump held the unflushed adds?"
q dst "SELECT FROM counter.jobs j, counter.job_alter(j.job_id, enabled => true, next_run => now()) a
       WHERE j.target = 'views_per_page'" >/dev/null || fail "switching the buffered counter's jobs on"

# Afterwards: every job runs and succeeds (a bounded wait for the worker).
for _ in $(seq 1 ${CE_WAIT:-600}); do
    [ "$(q dst "SELECT count(*) FROM counter.jobs j WHERE NOT EXISTS (SELECT FROM counter.job_runs r
          WHERE r.job_id = j.job_id AND r.outcome = 'succeeded' AND r.started_at > '$t1')")" = 0 ] && break
    sleep 0.2
done

echo "runs in the new database since the restore began, per job:"
q dst "SELECT format('  %s %s: %s held while the restore ran, first run %s after its object was complete; %s',
           j.kind, j.target,
           (SELECT count(*) FROM counter.job_runs r WHERE r.job_id = j.job_id AND r.outcome = 'held'
              AND r.started_at BETWEEN '$t0' AND '$t1'),
           (SELECT min(r.started_at) - c.complete_at FROM counter.job_runs r
             WHERE r.job_id = j.job_id AND r.outcome <> 'held' AND r.started_at >= '$t0'),
           (SELECT 'last held: ' || r.message FROM counter.job_runs r
             WHERE r.job_id = j.job_id AND r.outcome = 'held' AND r.started_at >= '$t0' ORDER BY r.run_id DESC LIMIT 1))
       FROM counter.jobs j JOIN public.job_complete c USING (job_id) ORDER BY j.job_id"

early=$(q dst "SELECT count(*) FROM counter.job_runs r JOIN public.job_complete c USING (job_id)
               WHERE r.outcome <> 'held' AND r.started_at >= '$t0' AND r.started_at <= c.complete_at")
[ "$early" = 0 ] || fail "$early job runs acted on an object before it was complete:
$(q dst "SELECT r.run_id, r.kind, r.target, r.outcome, r.started_at, c.complete_at, r.message FROM counter.job_runs r
         JOIN public.job_complete c USING (job_id) WHERE r.outcome <> 'held' AND r.started_at >= '$t0'
         AND r.started_at <= c.complete_at ORDER BY r.run_id LIMIT 10")
the restore's DDL after the first early run:
$(q dst "SELECT l.at, l.tag, l.classid::regclass, l.identity FROM public.restore_log l
         WHERE l.backend = 'client backend' AND l.at > (SELECT min(r.started_at) FROM counter.job_runs r
               JOIN public.job_complete c USING (job_id) WHERE r.outcome <> 'held' AND r.started_at >= '$t0'
               AND r.started_at <= c.complete_at)
         ORDER BY l.at LIMIT 30")"
# Every number is what the rows say.
bad_counter=$(q dst "SELECT count(*) FROM (SELECT link_id, count(*) AS n FROM public.clicks GROUP BY 1) s
                     WHERE counter.value('clicks_per_link', s.link_id) <> s.n")
rollup_diff=$(q dst "SELECT count(*) FROM (
    (SELECT kind, date_trunc('hour', occurred_at) AS hour, count(*) AS count FROM public.events GROUP BY 1, 2
     EXCEPT SELECT kind, hour, count FROM public.events_hourly)
    UNION ALL
    (SELECT kind, hour, count FROM public.events_hourly
     EXCEPT SELECT kind, date_trunc('hour', occurred_at), count(*) FROM public.events GROUP BY 1, 2)) d")
rows_src=$(q src "SELECT count(*) || ' ' || sum(id) FROM public.events")
rows_dst=$(q dst "SELECT count(*) || ' ' || sum(id) FROM public.events")
clicks_src=$(q src "SELECT count(*) FROM public.clicks")
clicks_dst=$(q dst "SELECT count(*) FROM public.clicks")
bad_buffered=$(q dst "SELECT count(*) FROM (SELECT page, count(*) AS n FROM public.views GROUP BY 1) s
                      WHERE counter.value('views_per_page', s.page) <> s.n")
echo "buffered counter: $buffered_before keys short of count(*) after the restore (the unflushed adds)," \
     "$bad_buffered after its first run"
[ "$bad_buffered" = 0 ] || fail "the buffered counter differs from count(*) after its first run"
echo "keys whose value is not count(*): $bad_counter; rollup rows not equal to GROUP BY: $rollup_diff;" \
     "events $rows_dst (source $rows_src); clicks $clicks_dst (source $clicks_src)"
[ "$bad_counter" = 0 ] && [ "$rollup_diff" = 0 ] || fail "a number differs from the rows:
$(q dst "SELECT s.link_id, counter.value('clicks_per_link', s.link_id), s.n FROM (SELECT link_id, count(*) AS n
         FROM public.clicks GROUP BY 1) s WHERE counter.value('clicks_per_link', s.link_id) <> s.n ORDER BY 1 LIMIT 5")
$(q dst "SELECT run_id, started_at, watermark, all_keys, keys_checked, keys_corrected, outcome FROM counter.tracked_history
         WHERE counter = 'clicks_per_link' ORDER BY run_id DESC LIMIT 6")"
[ "$rows_src" = "$rows_dst" ] && [ "$clicks_src" = "$clicks_dst" ] || fail "rows were lost"
unarmed=$(q dst "SELECT count(*) FROM counter.jobs j JOIN public.job_complete c USING (job_id)
                 LEFT JOIN counter_internal.job_armed a USING (job_id) WHERE a.armed_at IS NULL OR a.armed_at <= c.complete_at")
[ "$unarmed" = 0 ] || fail "$unarmed jobs not armed, or armed before their object was complete"
failed=$(q dst "SELECT count(*) FROM counter.job_runs WHERE outcome = 'failed' AND started_at >= '$t0'")
[ "$failed" = 0 ] || fail "$failed failed runs in the new database: $(q dst "SELECT message FROM counter.job_runs WHERE outcome = 'failed' AND started_at >= '$t0' LIMIT 3")"
notrun=$(q dst "SELECT string_agg(j.kind, ', ') FROM counter.jobs j WHERE NOT EXISTS (SELECT FROM counter.job_runs r
                WHERE r.job_id = j.job_id AND r.outcome = 'succeeded' AND r.started_at > '$t1')")
[ -z "$notrun" ] || fail "jobs that did not run after the restore: $notrun"

held=$(q dst "SELECT count(*) FROM counter.job_runs WHERE outcome = 'held' AND started_at BETWEEN '$t0' AND '$t1'")
[ "$held" -gt 0 ] || fail "no job fell due while the restore ran: the test proved nothing"
# (a pass of the new database's worker failed on a run id the restore had
# loaded before setting the sequence: CI of session 60 held nothing, and
# first ran the reconciliation 42 s late, after failures' back-off)
if grep "counter_ext worker for database dst: a pass failed" "$CE_hold_LOG"; then fail "a worker pass failed"; fi

# A restore still connected to the database holds a restored (not armed) job
# even when every piece of its object it can see is there (pg_restore -j of
# 18 made the partitioned table's own index only after other tables' indexes
# and triggers: until then it had no index to be invalid, and the maintenance
# ran early, one run in three); a role that merely calls itself pg_restore
# holds nothing.
pm=$(q dst "SELECT job_id FROM counter.jobs WHERE kind = 'partition_maintenance'")
hold_now() {   # job_hold of the maintenance job as if it were not armed yet
    q dst "BEGIN; DELETE FROM counter_internal.job_armed WHERE job_id = $pm;
           SELECT coalesce(counter_internal.job_hold($pm), 'not held'); ROLLBACK" | tail -1
}
restorer() {   # a session named pg_restore, as role $1, for 60 s
    PGAPPNAME=pg_restore ce_psql -d dst -U "$1" -c "SELECT pg_sleep(60)" >/dev/null 2>&1 &
    ce_wait_true dst "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'pg_restore' AND usename = '$1'" 10 ||
        fail "the session named pg_restore of $1 did not appear"
}
q dst "CREATE ROLE restore_pretender LOGIN" >/dev/null || fail "creating restore_pretender"
[ "$(hold_now)" = "not held" ] || fail "the complete maintenance job is held with no restore running: $(hold_now)"
restorer restore_pretender
why=$(hold_now)
echo "an unprivileged session named pg_restore: $why"
[ "$why" = "not held" ] || fail "a role that is neither superuser nor the extension's owner held a restored job: $why"
q dst "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'pg_restore'" >/dev/null
restorer "$(q dst "SELECT current_user")"
why=$(hold_now)
echo "a superuser's session named pg_restore: $why"
case $why in "pg_restore is connected to this database"*) ;; *) fail "a restore still connected did not hold a restored job: $why" ;; esac
q dst "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'pg_restore'" >/dev/null

# The managed table's index count: a restored (not armed) job waits for the
# indexes its catalog row says the table had, and DDL in that window does not
# change the count; once armed, an index made or dropped by its owner does.
pi() { q dst "SELECT parent_indexes FROM counter.partitioned_tables WHERE parent = 'public.events'::regclass"; }
[ "$(pi)" = 1 ] || fail "the restored catalog row does not say the table has its 1 index: $(pi)"
why=$(q dst "BEGIN; DELETE FROM counter_internal.job_armed WHERE job_id = $pm;
             ALTER TABLE public.events DROP CONSTRAINT events_pkey;
             SELECT coalesce(counter_internal.job_hold($pm), 'not held') || ' / ' ||
                    (SELECT parent_indexes FROM counter.partitioned_tables WHERE parent = 'public.events'::regclass);
             ROLLBACK" | tail -1)
echo "a restored job whose table lacks its index: $why"
case $why in "the partitioned table public.events has 0 of its 1 indexes"*" / 1") ;;
    *) fail "a restored maintenance job whose table lacks an index it had was not held (or the count followed the DDL): $why" ;; esac
# (nor before the job's row is loaded: pg_restore -j loads counter.jobs and
# makes other tables' indexes in any order)
left=$(q dst "BEGIN; DELETE FROM counter_internal.job_armed WHERE job_id = $pm; DELETE FROM counter.jobs WHERE job_id = $pm;
              ALTER TABLE public.events DROP CONSTRAINT events_pkey;
              SELECT parent_indexes FROM counter.partitioned_tables WHERE parent = 'public.events'::regclass; ROLLBACK" | tail -1)
[ "$left" = 1 ] || fail "DDL changed the index count of a managed table whose job's row is not loaded yet: $left"
q dst "CREATE INDEX events_kind_idx ON public.events (kind)" >/dev/null || fail "CREATE INDEX"
[ "$(pi)" = 2 ] || fail "an index made on a table whose job is armed did not change its count: $(pi)"
q dst "DROP INDEX public.events_kind_idx" >/dev/null || fail "DROP INDEX"
[ "$(pi)" = 1 ] || fail "an index dropped from a table whose job is armed did not change its count: $(pi)"
[ "$(hold_now)" = "not held" ] || fail "the maintenance job is held after its index came and went: $(hold_now)"
# A count left higher than the table's (an index dropped with event triggers
# off) holds the restored job until its owner runs the maintenance directly,
# which records the table's count.
stale=$(q dst "BEGIN; DELETE FROM counter_internal.job_armed WHERE job_id = $pm;
               UPDATE counter.partitioned_tables SET parent_indexes = 5 WHERE parent = 'public.events'::regclass;
               SELECT coalesce(counter_internal.job_hold($pm), 'not held');
               SELECT count(*) FROM counter.partition_maintain('public.events');
               SELECT coalesce(counter_internal.job_hold($pm), 'not held'); ROLLBACK" | tr '\n' '|')
echo "a restored job with a count left too high: $stale"
case $stale in "the partitioned table public.events has 1 of its 5 indexes"*"|1|not held|") ;;
    *) fail "a stale count did not hold the restored job, or a direct maintenance did not clear it: $stale" ;; esac
ce_scan_log "$CE_hold_LOG" || fail "crash lines in the server log"
echo ok
