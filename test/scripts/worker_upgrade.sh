#!/usr/bin/env bash
# counter.run_job on SQL objects older than the library refuses (55000)
# with the hint to update. The 1.1 -> 1.2 update gives every job of 1.1 the owner of what it serves
# (the owner the tracked counter's and the rollup's catalogs record, the
# partitioned table's owner), disables a job of a kind of the user's own (1.1 ran any
# counter.job_<kind>; 1.2 only the kinds of counter_internal.job_kinds) with
# the reason, and the updated jobs then run in sessions of their owners.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
# 1.1's install script, from the commit that released it (test/lib.sh)
trap 'ce_cluster_stop_all; ce_unstage_released_scripts' EXIT
ce_stage_released_scripts

fail() { echo "FAIL: $*"; exit 1; }
q() { ce_psql -At -c "$1"; }

ce_cluster_start jobup "counter_ext.enabled = off"
ce_cluster_use jobup
ce_psql -q >/dev/null <<'SQL'
CREATE EXTENSION counter_ext VERSION '1.1';
CREATE ROLE up_tracked LOGIN;
CREATE ROLE up_rollup LOGIN;
CREATE ROLE up_part LOGIN;
CREATE TABLE public.comments (id bigint PRIMARY KEY, post_id bigint NOT NULL, created_at timestamptz NOT NULL);
CREATE INDEX ON public.comments (created_at);
ALTER TABLE public.comments OWNER TO up_tracked;
SELECT counter.track('comments_per_post', 'public.comments', 'post_id', 'created_at');
CREATE TABLE public.events (event_id uuid NOT NULL, link_id bigint NOT NULL, occurred_at timestamptz NOT NULL);
ALTER TABLE public.events OWNER TO up_rollup;
GRANT CREATE ON SCHEMA public TO up_rollup;
SET ROLE up_rollup;
SELECT counter.rollup_create('events_hourly', 'public.events', 'occurred_at', '{link_id}');
RESET ROLE;
CREATE TABLE public.hits (hit_id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
ALTER TABLE public.hits OWNER TO up_part;
SELECT counter.partition_manage('public.hits', 'at', premake => 2);
CREATE PROCEDURE counter.job_mine(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$ BEGIN rows_affected := 0; END $$;
SELECT counter.job_register('mine', 'x', '1 hour');
SQL
[ "$(q "SELECT count(*) FROM counter.jobs")" = 4 ] || fail "1.1 did not register four jobs"
# Before the update (this library, 1.1's SQL objects) no job runs, and
# counter.run_job says why (not that the job runs elsewhere).
job=$(q "SELECT job_id FROM counter.jobs WHERE kind = 'reconcile'")
out=$(ce_psql -At -v VERBOSITY=verbose -c "CALL counter.run_job($job)" 2>&1) && fail "run_job ran a job on 1.1's SQL objects"
echo "run_job before the update: $(head -1 <<<"$out")"
grep -q "ERROR:  55000: counter_ext's SQL objects are older than its library" <<<"$out" || fail "run_job said: $out"
grep -q "HINT:  Run ALTER EXTENSION counter_ext UPDATE" <<<"$out" || fail "run_job gave no hint: $out"
q "ALTER EXTENSION counter_ext UPDATE"
got=$(q "SELECT string_agg(kind || ':' || coalesce(owner::text, '-') || ':' || enabled, ' ' ORDER BY kind) FROM counter.jobs")
echo "jobs after the update: $got"
[ "$got" = "mine:-:false partition_maintenance:up_part:true reconcile:up_tracked:true rollup_refresh:up_rollup:true" ] ||
    fail "owners after the update: $got"
q "SELECT disabled_reason FROM counter.jobs WHERE kind = 'mine'" | grep -q "counter_internal.job_kinds" ||
    fail "the disabled job does not say why"
q "CALL counter.run_jobs()" >/dev/null
got=$(q "SELECT string_agg(kind || ':' || run_as, ' ' ORDER BY kind) FROM counter.job_runs")
echo "runs: $got"
[ "$got" = "partition_maintenance:up_part reconcile:up_tracked rollup_refresh:up_rollup" ] ||
    fail "the updated jobs did not run as their owners: $got"
# And they work for an ordinary owner.
[ "$(q "SELECT string_agg(kind || ':' || outcome, ' ' ORDER BY kind) FROM counter.job_runs")" = \
    "partition_maintenance:succeeded reconcile:succeeded rollup_refresh:succeeded" ] ||
    fail "runs: $(q "SELECT string_agg(kind || ' ' || outcome || ' ' || coalesce(message, ''), '; ') FROM counter.job_runs")"
ce_scan_log "$CE_jobup_LOG"
echo ok
