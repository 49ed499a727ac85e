#!/usr/bin/env bash
# End to end with the real jobs: a tracked counter with drift, a rollup with
# dirty hours and a managed table short of partitions are made with the
# worker off; then nothing is called: the worker is switched on and within a
# bounded wait it has reconciled, refreshed and created the partitions, and
# counter.job_runs shows each job run by the worker and succeeded.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
trap ce_cluster_stop_all EXIT

fail() { echo "FAIL: $*"; exit 1; }
q() { ce_psql -d e2e -At -c "$1"; }
wait_for() { # SQL SECONDS
    local i
    for ((i = 0; i < $2 * 5; i++)); do
        [ "$(q "$1" 2>/dev/null || true)" = t ] && return 0
        sleep 0.2
    done
    return 1
}
has() { [ "$(q "SELECT EXISTS (SELECT FROM counter_internal.job_kinds WHERE kind = '$1')")" = t ]; }

ce_cluster_start e2e "counter_ext.enabled = off" "counter_ext.naptime = 1"
ce_cluster_use e2e
ce_psql -d postgres -c "CREATE DATABASE e2e" >/dev/null
q "CREATE EXTENSION counter_ext"
kinds=()

if has reconcile; then
    kinds+=(reconcile)
    echo "== a tracked counter with drift"
    ce_psql -d e2e >/dev/null <<'SQL'
-- 300 comments, 40 of them loaded with the triggers off: the counter shows
-- fewer for post 1 until a full reconciliation (the first job run is one).
CREATE TABLE public.comments (id bigint PRIMARY KEY, post_id bigint NOT NULL, created_at timestamptz NOT NULL);
SELECT counter.track('comments_per_post', 'public.comments', 'post_id', 'created_at',
                     watermark_lag => '0 seconds', reconcile_every => '1 second');
INSERT INTO public.comments SELECT i, 1 + i % 3, now() - interval '1 hour' FROM generate_series(1, 260) i;
SET session_replication_role = replica;
INSERT INTO public.comments SELECT i, 1, now() - interval '1 hour' FROM generate_series(261, 300) i;
RESET session_replication_role;
SQL
    [ "$(q "SELECT counter.value('comments_per_post', 1::bigint) < (SELECT count(*) FROM public.comments WHERE post_id = 1)")" = t ] ||
        fail "the counter has no drift to repair"
fi

if has rollup_refresh; then
    kinds+=(rollup_refresh)
    echo "== a rollup with dirty hours"
    ce_psql -d e2e >/dev/null <<'SQL'
-- Events in three past hours before the rollup exists: those hours start dirty.
CREATE TABLE public.events (event_id uuid NOT NULL, link_id bigint NOT NULL, occurred_at timestamptz NOT NULL);
INSERT INTO public.events
SELECT gen_random_uuid(), 1 + i % 5, date_trunc('hour', now()) - interval '3 hours' + (i % 180) * interval '1 minute'
FROM generate_series(1, 900) i;
SELECT counter.rollup_create('events_hourly', 'public.events', 'occurred_at', '{link_id}', refresh_every => '1 second');
SQL
    [ "$(q "SELECT dirty_hours > 0 FROM counter.rollup_state WHERE name = 'events_hourly'")" = t ] || fail "no dirty hours"
fi

if has partition_maintenance; then
    kinds+=(partition_maintenance)
    echo "== a managed table short of partitions"
    ce_psql -d e2e >/dev/null <<'SQL'
-- Managed as of ten hours ago with two hours ahead: now it is eight short.
CREATE TABLE public.hits (hit_id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
SELECT counter.partition_manage('public.hits', 'at', premake => 2, as_of => now() - interval '10 hours');
SQL
    [ "$(q "SELECT hours_ahead < 0 FROM counter.partition_status WHERE parent = 'public.hits'::regclass")" = t ] ||
        fail "the table is not short of partitions"
fi

[ ${#kinds[@]} = 3 ] || fail "the extension lacks a job kind (has: ${kinds[*]})"
[ "$(q "SELECT count(*) FROM counter.job_runs")" = 0 ] || fail "something ran the jobs already"

echo "== call nothing: switch the worker on and wait"
ce_psql -d postgres -c "ALTER SYSTEM SET counter_ext.enabled = on" -c "SELECT pg_reload_conf()" >/dev/null
for kind in "${kinds[@]}"; do
    case $kind in
        reconcile)
            wait_for "SELECT counter.value('comments_per_post', 1::bigint) = (SELECT count(*) FROM public.comments WHERE post_id = 1)" 60 ||
                fail "the worker did not reconcile the counter" ;;
        rollup_refresh)
            wait_for "SELECT dirty_hours = 0 FROM counter.rollup_state WHERE name = 'events_hourly'" 60 ||
                fail "the worker did not refresh the rollup"
            [ "$(q "SELECT sum(count) FROM public.events_hourly")" = 900 ] || fail "the rollup does not count every event" ;;
        partition_maintenance)
            wait_for "SELECT hours_ahead >= 1 FROM counter.partition_status WHERE parent = 'public.hits'::regclass" 60 ||
                fail "the worker did not create the partitions" ;;
    esac
    [ "$(q "SELECT count(*) > 0 FROM counter.job_runs WHERE kind = '$kind' AND runner = 'worker' AND outcome = 'succeeded'")" = t ] ||
        fail "no successful worker run of a $kind job in the history"
    echo "$kind: done by the worker"
done
q "SELECT kind, target, runner, outcome, rows_affected FROM counter.job_runs ORDER BY run_id LIMIT 12"
[ "$(q "SELECT count(*) FROM counter.job_runs WHERE outcome = 'failed'")" = 0 ] || fail "a job failed"
ce_scan_log "$CE_e2e_LOG"
echo "ok (${kinds[*]})"
