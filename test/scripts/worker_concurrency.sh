#!/usr/bin/env bash
# Two schedulers never run one job at once: the background worker and two
# sessions calling CALL counter.run_jobs() in a loop (each hands the jobs to
# job workers of their owner), over jobs that fall due every 50 ms and each
# take ~30 ms in two committed steps. Every run logs its start and end; no
# two runs of one job may overlap, every run ends recorded, and CALL
# counter.run_job on a job running elsewhere is refused.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
trap 'kill $(jobs -p) 2>/dev/null || true; ce_cluster_stop_all' EXIT

fail() { echo "FAIL: $*"; exit 1; }
q() { ce_psql -d conc -At -c "$1"; }

ce_cluster_start conc "counter_ext.enabled = on" "counter_ext.naptime = 1"
ce_cluster_use conc
ce_psql -d postgres -c "CREATE DATABASE conc" >/dev/null
ce_psql -d conc >/dev/null <<'SQL'
CREATE EXTENSION counter_ext;
CREATE ROLE conc_owner LOGIN;
CREATE TABLE public.spans (target text, runner int, started timestamptz, ended timestamptz);
GRANT INSERT ON public.spans TO conc_owner;
CREATE PROCEDURE public.job_test_span(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
BEGIN
    PERFORM pg_catalog.pg_sleep(0.015);
    COMMIT;
    PERFORM pg_catalog.pg_sleep(0.015);
    INSERT INTO public.spans VALUES (target, pg_catalog.pg_backend_pid(), t0, clock_timestamp());
    rows_affected := 1;
END $$;
INSERT INTO counter_internal.job_kinds (kind, procedure) VALUES ('test_span', 'public.job_test_span(text, bigint)');
SELECT counter.job_register('test_span', 'j' || i, '50 milliseconds', 'conc_owner') FROM generate_series(1, 6) i;
SQL

seconds=${CE_SECONDS:-20}
loop() {
    local end=$((SECONDS + seconds))
    while [ $SECONDS -lt $end ]; do
        ce_psql -d conc -c "CALL counter.run_jobs()" >/dev/null || return 1
    done
}
loop & a=$!
loop & b=$!
sleep "$seconds"
wait $a || fail "a run_jobs loop failed"
wait $b || fail "a run_jobs loop failed"
sleep 1

runs=$(q "SELECT count(*) FROM public.spans")
runners=$(q "SELECT count(DISTINCT runner) FROM public.spans")
overlaps=$(q "SELECT count(*) FROM public.spans x JOIN public.spans y
              ON x.target = y.target AND x.ctid < y.ctid AND x.started < y.ended AND y.started < x.ended")
by=$(q "SELECT string_agg(runner || ':' || n, ' ' ORDER BY runner) FROM
        (SELECT runner, count(*) n FROM counter.job_runs GROUP BY runner) s")
echo "runs: $runs by $runners processes ($by); overlapping runs: $overlaps"
[ "$runs" -ge 150 ] || fail "too few runs ($runs) to mean anything"
[ "$runners" -ge 3 ] || fail "the jobs should have run in many job workers"
[ "$(q "SELECT count(DISTINCT runner) FROM counter.job_runs")" = 2 ] || fail "the worker and the sessions should both have run jobs"
[ "$(q "SELECT count(*) FROM counter.job_runs WHERE run_as IS DISTINCT FROM 'conc_owner'::regrole")" = 0 ] ||
    fail "a run was not made as the jobs' owner"
[ "$overlaps" -eq 0 ] || fail "$overlaps pairs of runs of one job overlapped"
# Every run is recorded once, and none is left running or failed.
[ "$(q "SELECT count(*) FROM counter.job_runs WHERE outcome = 'succeeded'")" -ge "$runs" ] || fail "runs missing from the history"
[ "$(q "SELECT count(*) FROM counter.job_runs WHERE outcome = 'failed'")" -eq 0 ] || fail "failed runs"

# run_job on a job running elsewhere is refused; run_jobs leaves it alone.
ce_psql -d conc >/dev/null <<'SQL'
CREATE PROCEDURE public.job_test_sleep(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_catalog.pg_sleep(target::float8); END $$;
INSERT INTO counter_internal.job_kinds (kind, procedure) VALUES ('test_sleep', 'public.job_test_sleep(text, bigint)');
UPDATE counter.jobs SET enabled = false;
SQL
# Registered disabled in one transaction, so the worker does not start it first.
long=$(ce_psql -d conc -At <<'SQL'
BEGIN;
SELECT counter.job_register('test_sleep', '4', '1 hour', 'conc_owner') AS id \gset
UPDATE counter.jobs SET enabled = false WHERE job_id = :id;
COMMIT;
SELECT :id;
SQL
)
ce_psql -d conc -c "CALL counter.run_job($long)" >/dev/null &
c=$!
for i in $(seq 1 50); do
    [ "$(q "SELECT running FROM counter.job_status WHERE job_id = $long")" = t ] && break
    sleep 0.1
done
out=$(ce_psql -d conc -v VERBOSITY=terse -c "CALL counter.run_job($long)" 2>&1 || true)
case "$out" in *"job $long is running in another session"*) ;; *) fail "run_job of a running job: $out" ;; esac
# Due and enabled while it runs: neither the worker nor run_jobs runs it.
q "UPDATE counter.jobs SET enabled = true, next_run = now() WHERE job_id = $long" >/dev/null
q "CALL counter.run_jobs()" >/dev/null
wait $c || fail "the long run_job failed"
[ "$(q "SELECT count(*) FROM counter.job_runs WHERE job_id = $long")" = 1 ] || fail "the running job ran twice"
ce_scan_log "$CE_conc_LOG"
echo ok
