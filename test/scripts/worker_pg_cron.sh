#!/usr/bin/env bash
# pg_cron (Debian's postgresql-15-cron) can run the jobs instead of the
# worker: it schedules CALL counter.run_jobs(), and the jobs run (committing
# between their steps) in sessions of their owner, not in pg_cron's session
# (which is the superuser's), are recorded as runner 'session', and pg_cron
# records its own run as succeeded. pg_cron 1.4 schedules by the minute, so this waits
# for one minute boundary.
# lane: side
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
trap ce_cluster_stop_all EXIT

fail() { echo "FAIL: $*"; exit 1; }
q() { ce_psql -d cron -At -c "$1"; }

ce_cluster_start cron "shared_preload_libraries = 'counter_ext,pg_cron'" "cron.database_name = 'cron'" \
    "cron.host = '127.0.0.1'" "counter_ext.enabled = off"
ce_cluster_use cron
ce_psql -d postgres -c "CREATE DATABASE cron" >/dev/null
ce_psql -d cron >/dev/null <<'SQL'
CREATE EXTENSION pg_cron;
CREATE EXTENSION counter_ext;
CREATE ROLE cron_owner LOGIN;
CREATE TABLE public.steps (target text, step int, run_as name DEFAULT session_user);
GRANT INSERT ON public.steps TO cron_owner;
CREATE PROCEDURE public.job_test_steps(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.steps VALUES (target, 1);
    COMMIT;
    INSERT INTO public.steps VALUES (target, 2);
    rows_affected := 2;
END $$;
INSERT INTO counter_internal.job_kinds (kind, procedure) VALUES ('test_steps', 'public.job_test_steps(text, bigint)');
SELECT counter.job_register('test_steps', 'a', '1 second', 'cron_owner');
SELECT counter.job_register('test_steps', 'b', '1 second', 'cron_owner');
SELECT cron.schedule('counter_ext jobs', '* * * * *', 'CALL counter.run_jobs()');
SQL

# No worker runs with counter_ext.enabled = off.
[ "$(ce_psql -d postgres -At -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'counter_ext worker'")" = 0 ] ||
    fail "a worker runs although counter_ext.enabled = off"

for i in $(seq 1 150); do
    [ "$(q "SELECT count(*) FROM counter.job_runs WHERE outcome = 'succeeded'")" -ge 2 ] &&
        [ "$(q "SELECT count(*) FROM cron.job_run_details WHERE command = 'CALL counter.run_jobs()' AND status = 'succeeded'")" -ge 1 ] &&
        break
    sleep 0.5
done
q "SELECT status, return_message FROM cron.job_run_details" || true
[ "$(q "SELECT count(*) FROM cron.job_run_details WHERE command = 'CALL counter.run_jobs()' AND status = 'succeeded'")" -ge 1 ] ||
    fail "pg_cron did not run CALL counter.run_jobs() successfully"
[ "$(q "SELECT count(DISTINCT target) FROM counter.job_runs WHERE outcome = 'succeeded' AND runner = 'session' AND rows_affected = 2")" = 2 ] ||
    fail "the jobs did not run under pg_cron"
[ "$(q "SELECT count(*) FROM public.steps WHERE step = 2")" -ge 2 ] || fail "the jobs' committed steps are missing"
[ "$(q "SELECT count(*) FROM public.steps WHERE run_as <> 'cron_owner'")" = 0 ] || fail "a job ran as pg_cron's role"
ce_scan_log "$CE_cron_LOG"
echo ok
