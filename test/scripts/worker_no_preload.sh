#!/usr/bin/env bash
# Without shared_preload_libraries there is no scheduler, but CALL
# counter.run_jobs() and CALL counter.run_job(id) still run every job in a
# background-worker session of its owner (started as a dynamic background
# worker), never in the calling superuser's session.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
trap ce_cluster_stop_all EXIT

fail() { echo "FAIL: $*"; exit 1; }
q() { ce_psql -At -c "$1"; }

ce_cluster_start plainjobs "shared_preload_libraries = ''"
ce_cluster_use plainjobs
ce_psql -q >/dev/null <<'SQL'
CREATE EXTENSION counter_ext;
CREATE ROLE np_owner LOGIN;
CREATE TABLE public.comments (id bigint PRIMARY KEY, post_id bigint NOT NULL, created_at timestamptz NOT NULL);
CREATE INDEX ON public.comments (created_at);
ALTER TABLE public.comments OWNER TO np_owner;
SELECT counter.track('cpp', 'public.comments', 'post_id', 'created_at', watermark_lag => '0 seconds');
SQL
[ "$(q "SELECT counter.preloaded()")" = f ] || fail "the library is preloaded"
[ "$(q "CALL counter.run_jobs()")" = 1 ] || fail "run_jobs did not run the due job"
q "CALL counter.run_job(1)" >/dev/null
[ "$(q "SELECT string_agg(runner || ' ' || run_as || ' ' || outcome || ' ' || (pid <> pg_backend_pid()), ', ' ORDER BY run_id) FROM counter.job_runs")" = \
    "session np_owner succeeded true, session np_owner succeeded true" ] ||
    fail "runs: $(q "SELECT string_agg(runner || ' ' || run_as || ' ' || outcome, ', ') FROM counter.job_runs")"
ce_scan_log "$CE_plainjobs_LOG"
echo ok
