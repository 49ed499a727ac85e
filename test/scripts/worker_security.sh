#!/usr/bin/env bash
# Jobs run as their owner, and nothing in them can leave that role. As an
# ordinary role "att" (LOGIN, nothing but PUBLIC's rights and the ownership
# of its own tables): a rollup whose filter and a tracked counter whose
# source trigger are att's own code, a function that records session_user and
# current_user and tries every way out (RESET ROLE, SET ROLE, SET SESSION
# AUTHORIZATION, set_config('session_authorization'), ALTER ROLE ... SUPERUSER).
# Run by the background worker, by a superuser's CALL counter.run_jobs() and
# CALL counter.run_job(id): every recorded row says att/att, every way out
# fails, att is no superuser afterwards. Also: a procedure planted as
# counter.job_<kind> or <schema>.job_<kind> is never called (att cannot plant
# one in counter or counter_internal at all), a kind whose procedure a
# non-superuser owns is refused, a job follows REASSIGN OWNED to the new
# owner, and a job whose owner was dropped is disabled with its reason.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
trap ce_cluster_stop_all EXIT

fail() { echo "FAIL: $*"; exit 1; }
q() { ce_psql -d sec -At -c "$1"; }
as_att() { "$CE_PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -U att -d sec "$@"; }
wait_for() { # SQL SECONDS
    local i
    for ((i = 0; i < $2 * 5; i++)); do
        [ "$(q "$1" 2>/dev/null || true)" = t ] && return 0
        sleep 0.2
    done
    return 1
}

ce_cluster_start sec "counter_ext.enabled = off" "counter_ext.naptime = 1"
ce_cluster_use sec
super=$(ce_owner_name)
ce_psql -d postgres -c "CREATE DATABASE sec" >/dev/null
ce_psql -d sec >/dev/null <<SQL
CREATE EXTENSION counter_ext;
CREATE ROLE att LOGIN;
CREATE ROLE att_member;          -- a role att is a member of, without rights
GRANT att_member TO att;
CREATE SCHEMA att AUTHORIZATION att;
SQL

echo "== att cannot plant a job procedure where the runner looks"
for schema in counter counter_internal; do
    out=$(as_att -c "CREATE PROCEDURE $schema.job_reconcile(target text, INOUT rows_affected bigint DEFAULT NULL)
                     LANGUAGE sql AS 'SELECT 1'" 2>&1 || true)
    case "$out" in *"permission denied for schema $schema"*) ;; *) fail "att created a procedure in $schema: $out" ;; esac
done
out=$(as_att -c "INSERT INTO counter_internal.job_kinds VALUES ('mine', 'pg_catalog.now()')" 2>&1 || true)
case "$out" in *"permission denied"*) ;; *) fail "att added a job kind: $out" ;; esac
out=$(as_att -c "SELECT counter.job_register('reconcile', 'x', '1 second', 'att')" 2>&1 || true)
case "$out" in *"permission denied"*) ;; *) fail "att registered a job: $out" ;; esac

echo "== att's own objects, with its code in the jobs' path"
as_att >/dev/null <<'SQL'
CREATE TABLE att.seen (via text, su name, cu name, super boolean, note text, at timestamptz DEFAULT clock_timestamp());
-- Records who runs it, then tries every way out of its role.
CREATE FUNCTION att.spy(via text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO att.seen (via, su, cu, super, note)
    VALUES (via, session_user, current_user, (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user), 'entry');
    BEGIN
        RESET ROLE;
        INSERT INTO att.seen (via, su, cu, super, note) VALUES (via, session_user, current_user,
            (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user), 'after RESET ROLE');
    EXCEPTION WHEN OTHERS THEN
        INSERT INTO att.seen (via, su, cu, note) VALUES (via, session_user, current_user, 'RESET ROLE refused ' || SQLSTATE);
    END;
    BEGIN
        EXECUTE format('SET ROLE %I', (SELECT rolname FROM pg_catalog.pg_roles WHERE oid = 10));
        INSERT INTO att.seen (via, su, cu, super, note) VALUES (via, session_user, current_user,
            (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user), 'after SET ROLE superuser');
    EXCEPTION WHEN OTHERS THEN
        INSERT INTO att.seen (via, su, cu, note) VALUES (via, session_user, current_user, 'SET ROLE superuser refused ' || SQLSTATE);
    END;
    BEGIN
        EXECUTE format('SET SESSION AUTHORIZATION %I', (SELECT rolname FROM pg_catalog.pg_roles WHERE oid = 10));
        INSERT INTO att.seen (via, su, cu, super, note) VALUES (via, session_user, current_user,
            (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user), 'after SET SESSION AUTHORIZATION');
    EXCEPTION WHEN OTHERS THEN
        INSERT INTO att.seen (via, su, cu, note) VALUES (via, session_user, current_user, 'SET SESSION AUTHORIZATION refused ' || SQLSTATE);
    END;
    BEGIN
        PERFORM pg_catalog.set_config('session_authorization', (SELECT rolname FROM pg_catalog.pg_roles WHERE oid = 10), true);
        INSERT INTO att.seen (via, su, cu, super, note) VALUES (via, session_user, current_user,
            (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user), 'after set_config');
    EXCEPTION WHEN OTHERS THEN
        INSERT INTO att.seen (via, su, cu, note) VALUES (via, session_user, current_user, 'set_config refused ' || SQLSTATE);
    END;
    BEGIN
        SET ROLE att_member;
        INSERT INTO att.seen (via, su, cu, super, note) VALUES (via, session_user, current_user, false, 'after SET ROLE member');
        RESET ROLE;
    EXCEPTION WHEN OTHERS THEN
        INSERT INTO att.seen (via, su, cu, note) VALUES (via, session_user, current_user, 'SET ROLE member refused ' || SQLSTATE);
    END;
    BEGIN
        ALTER ROLE att SUPERUSER;
        INSERT INTO att.seen (via, su, cu, note) VALUES (via, session_user, current_user, 'ALTER ROLE att SUPERUSER worked');
    EXCEPTION WHEN OTHERS THEN
        INSERT INTO att.seen (via, su, cu, note) VALUES (via, session_user, current_user, 'ALTER ROLE refused ' || SQLSTATE);
    END;
    RETURN true;
END $$;
-- A rollup whose filter is att's function (the issue's escape through RESET ROLE).
CREATE TABLE att.ev (event_id uuid NOT NULL, k int NOT NULL, at timestamptz NOT NULL);
INSERT INTO att.ev SELECT gen_random_uuid(), i % 3, date_trunc('hour', now()) - interval '2 hours' FROM generate_series(1, 30) i;
SELECT counter.rollup_create('att_r', 'att.ev', 'at', '{k}', mode => 'deferred', filter => 'att.spy(''rollup'')',
                             refresh_every => '1 second');
-- A tracked counter on att's table: its reconciliation reads the table as att.
CREATE TABLE att.c (id bigint PRIMARY KEY, k bigint NOT NULL, at timestamptz NOT NULL);
INSERT INTO att.c SELECT g, g % 4, now() - interval '1 hour' FROM generate_series(1, 20) g;
SELECT counter.track('att_c', 'att.c', 'k', 'at', filter => 'att.spy(''tracked'')', watermark_lag => '0 seconds',
                     reconcile_every => '1 second');
SQL
q "SELECT kind, owner FROM counter.jobs ORDER BY job_id"
[ "$(q "SELECT count(*) FROM counter.jobs WHERE owner = 'att'::regrole")" = 2 ] || fail "att's jobs are not att's"
q "DELETE FROM att.seen" >/dev/null   # what creating them ran

check_seen() { # VIA...: att's code ran, as att only, and every way out failed
    local via
    for via in "$@"; do
        [ "$(q "SELECT count(*) FROM att.seen WHERE via = '$via' AND note = 'entry'")" -ge 1 ] ||
            fail "att's code did not run in the $via job (nothing to check)"
    done
    q "SELECT via, su, cu, super, note FROM att.seen WHERE note NOT LIKE '%refused%' AND note <> 'entry' AND note <> 'after SET ROLE member' LIMIT 5"
    [ "$(q "SELECT count(*) FROM att.seen WHERE su <> 'att' OR cu NOT IN ('att', 'att_member') OR super")" = 0 ] ||
        fail "att's code ran as another role: $(q "SELECT string_agg(DISTINCT su || '/' || cu || ' ' || note, '; ') FROM att.seen WHERE su <> 'att' OR cu NOT IN ('att', 'att_member') OR super")"
    [ "$(q "SELECT count(*) FROM att.seen WHERE note IN ('after SET ROLE superuser', 'after SET SESSION AUTHORIZATION', 'after set_config', 'ALTER ROLE att SUPERUSER worked')")" = 0 ] ||
        fail "a way out worked: $(q "SELECT string_agg(DISTINCT note, '; ') FROM att.seen WHERE note LIKE 'after%' OR note LIKE '%worked'")"
    [ "$(q "SELECT rolsuper FROM pg_roles WHERE rolname = 'att'")" = f ] || fail "att became superuser"
    q "SELECT via, note, count(*) FROM att.seen GROUP BY 1, 2 ORDER BY 1, 2" | sed 's/^/    /'
}

n=100
dirty() { # new rows for both jobs to look at
    n=$((n + 10))
    as_att -c "INSERT INTO att.ev SELECT gen_random_uuid(), 1, date_trunc('hour', now()) - interval '3 hours' FROM generate_series(1, 5)" \
        -c "INSERT INTO att.c SELECT g, g % 4, now() - interval '1 hour' FROM generate_series($n, $n + 9) g" >/dev/null
}

echo "== the superuser's CALL counter.run_jobs(): att's code runs as att, no way out"
dirty
q "CALL counter.run_jobs()" >/dev/null
check_seen rollup tracked
[ "$(q "SELECT count(*) FROM counter.job_runs WHERE run_as = 'att'::regrole AND runner = 'session'")" -ge 2 ] ||
    fail "the runs are not recorded as att's"
q "DELETE FROM att.seen" >/dev/null

echo "== the superuser's CALL counter.run_job(id)"
dirty
for id in $(q "SELECT job_id FROM counter.jobs WHERE owner = 'att'::regrole"); do
    q "CALL counter.run_job($id)" >/dev/null
done
check_seen rollup tracked
q "DELETE FROM att.seen" >/dev/null

echo "== the background worker"
dirty
q "ALTER SYSTEM SET counter_ext.enabled = on" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null
wait_for "SELECT count(DISTINCT kind) = 2 FROM counter.job_runs WHERE runner = 'worker' AND outcome = 'succeeded'" 30 ||
    fail "the worker did not run att's jobs: $(q "SELECT string_agg(kind || ' ' || outcome || ' ' || coalesce(message, ''), '; ') FROM counter.job_runs WHERE runner = 'worker'")"
wait_for "SELECT count(DISTINCT via) = 2 FROM att.seen" 30 || fail "att's code did not run under the worker"
check_seen rollup tracked
[ "$(q "SELECT count(*) FROM counter.job_runs WHERE runner = 'worker' AND run_as IS DISTINCT FROM 'att'::regrole")" = 0 ] ||
    fail "the worker ran a job of att's as another role"
q "ALTER SYSTEM SET counter_ext.enabled = off" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null
wait_for "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'counter_ext worker'" 20 || fail "workers still run"

echo "== planted procedures are never called"
ce_psql -d sec >/dev/null <<'SQL'
CREATE TABLE public.planted_calls (name text);
GRANT INSERT ON public.planted_calls TO PUBLIC;
-- A superuser's stray procedures with job-like names, in counter and elsewhere.
CREATE PROCEDURE counter.job_planted(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$ BEGIN INSERT INTO public.planted_calls VALUES ('counter.job_planted'); END $$;
CREATE PROCEDURE public.job_reconcile(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$ BEGIN INSERT INTO public.planted_calls VALUES ('public.job_reconcile'); END $$;
GRANT EXECUTE ON PROCEDURE counter.job_planted(text, bigint), public.job_reconcile(text, bigint) TO PUBLIC;
SQL
out=$(q "SELECT counter.job_register('planted', 'x', '1 second', 'att')" 2>&1 || true)
case "$out" in *"unknown job kind"*) ;; *) fail "a kind without a job_kinds row was registered: $out" ;; esac
# A job row of that kind written behind the functions' back fails, calls nothing.
planted=$(q "INSERT INTO counter.jobs (kind, target, run_every, owner) VALUES ('planted', 'x', '1 hour', 'att') RETURNING job_id")
out=$(q "CALL counter.run_job($planted)" 2>&1 || true)
case "$out" in *"has no procedure in counter_internal.job_kinds"*) ;; *) fail "the planted kind: $out" ;; esac
# The reconcile job with a search_path that finds public.job_reconcile first.
tracked=$(q "SELECT job_id FROM counter.jobs WHERE kind = 'reconcile'")
ce_psql -d sec -At -c "SET search_path = public, counter" -c "CALL counter.run_job($tracked)" >/dev/null
q "ALTER ROLE att SET search_path = public, counter" >/dev/null
q "CALL counter.run_job($tracked)" >/dev/null
q "ALTER ROLE att RESET search_path" >/dev/null
[ "$(q "SELECT count(*) FROM public.planted_calls")" = 0 ] || fail "a planted procedure was called: $(q "SELECT string_agg(name, ', ') FROM public.planted_calls")"
q "DELETE FROM counter.jobs WHERE job_id = $planted" >/dev/null
# A kind whose procedure a non-superuser owns is refused at run time.
as_att -c "CREATE PROCEDURE att.job_mine(target text, INOUT rows_affected bigint DEFAULT NULL)
           LANGUAGE plpgsql AS \$\$ BEGIN INSERT INTO public.planted_calls VALUES ('att.job_mine'); END \$\$" >/dev/null
q "INSERT INTO counter_internal.job_kinds (kind, procedure) VALUES ('mine', 'att.job_mine(text, bigint)')" >/dev/null
mine=$(q "SELECT counter.job_register('mine', 'x', '1 hour', '$super')")
out=$(q "CALL counter.run_job($mine)" 2>&1 || true)
case "$out" in *"is not a procedure owned by a superuser"*) ;; *) fail "a non-superuser's kind procedure: $out" ;; esac
[ "$(q "SELECT count(*) FROM public.planted_calls")" = 0 ] || fail "att's procedure ran as the superuser"
q "SELECT counter.job_unregister('mine', 'x')" >/dev/null

echo "== a job runs as the owner of what it serves: it follows REASSIGN OWNED; a dropped owner's job is disabled, runs as no one"
ce_psql -d sec >/dev/null <<'SQL'
CREATE ROLE leaver LOGIN;
CREATE TABLE public.lv (id bigint PRIMARY KEY, k bigint NOT NULL, at timestamptz NOT NULL);
ALTER TABLE public.lv OWNER TO leaver;
SELECT counter.track('lv_c', 'public.lv', 'k', 'at', reconcile_every => '1 hour');
SQL
[ "$(q "SELECT owner FROM counter.jobs WHERE target = 'lv_c'")" = leaver ] || fail "lv_c's job is not leaver's"
lv_job=$(q "SELECT job_id FROM counter.jobs WHERE target = 'lv_c'")
q "CALL counter.run_job($lv_job)" >/dev/null
[ "$(q "SELECT run_as FROM counter.job_runs WHERE job_id = $lv_job")" = leaver ] || fail "lv_c's job did not run as leaver"
# The table goes to another role (REASSIGN OWNED, which fires no event
# trigger) and leaver is dropped: the counter and its job follow the table
# to heir before any job is handed out (1.3 left them naming leaver, and the
# job was disabled); it runs as heir, never as leaver or a new leaver.
q "CREATE ROLE heir LOGIN" >/dev/null
q "REASSIGN OWNED BY leaver TO heir" >/dev/null
q "DROP OWNED BY leaver" >/dev/null
q "DROP ROLE leaver" >/dev/null
q "CALL counter.run_job($lv_job)" >/dev/null
[ "$(q "SELECT owner FROM counter.tracked WHERE name = 'lv_c'"):$(q "SELECT owner FROM counter.jobs WHERE job_id = $lv_job")" = heir:heir ] ||
    fail "lv_c and its job did not follow the table to heir"
# (leaver's run names an oid now: the role is gone)
[ "$(q "SELECT string_agg(CASE WHEN run_as::text = 'heir' THEN 'heir' ELSE 'gone' END, ',' ORDER BY run_id)
        FROM counter.job_runs WHERE job_id = $lv_job")" = gone,heir ] ||
    fail "lv_c's job did not run as heir: $(q "SELECT string_agg(run_as::text || ':' || outcome, ',' ORDER BY run_id) FROM counter.job_runs WHERE job_id = $lv_job")"
q "CREATE ROLE leaver LOGIN" >/dev/null   # the name again, another role: never the owner of anything
# A job of a kind whose target says no owner, registered for a role then dropped.
q "CREATE PROCEDURE public.job_probe(target text, INOUT rows_affected bigint DEFAULT NULL) LANGUAGE plpgsql AS \$\$ BEGIN INSERT INTO public.planted_calls VALUES ('probe as ' || session_user); END \$\$" >/dev/null
q "GRANT EXECUTE ON PROCEDURE public.job_probe(text, bigint) TO PUBLIC" >/dev/null
q "INSERT INTO counter_internal.job_kinds (kind, procedure) VALUES ('probe', 'public.job_probe(text, bigint)')" >/dev/null
probe=$(q "SELECT counter.job_register('probe', 'p', '1 second', 'leaver')")
q "CALL counter.run_job($probe)" >/dev/null
[ "$(q "SELECT string_agg(name, ',') FROM public.planted_calls")" = "probe as leaver" ] || fail "the probe job did not run as leaver"
q "DROP ROLE leaver" >/dev/null
[ "$(q "SELECT count(*) FROM counter.job_runs WHERE job_id = $lv_job AND run_as::text = 'leaver'")" = 0 ] || fail "the old job ran as the new leaver"
q "CALL counter.run_jobs()" >/dev/null
[ "$(q "SELECT enabled FROM counter.jobs WHERE job_id = $probe")" = f ] || fail "the dropped owner's job stays enabled"
q "SELECT disabled_reason FROM counter.jobs WHERE job_id = $probe" | grep -q "was dropped" || fail "no reason recorded"
[ "$(q "SELECT count(*) FROM counter.job_runs WHERE job_id = $probe AND outcome = 'failed' AND sqlstate = '42704'")" = 1 ] ||
    fail "the disabling is not in the history"
out=$(q "CALL counter.run_job($probe)" 2>&1 || true)
case "$out" in *"has no owner to run as"*) ;; *) fail "run_job of a dropped owner's job: $out" ;; esac
[ "$(q "SELECT count(*) FROM public.planted_calls")" = 1 ] || fail "the dropped owner's job ran as someone"

echo "== a role without LOGIN: its job is recorded failed (28000), never run as another role"
q "CREATE ROLE nologin_owner NOLOGIN" >/dev/null
nl=$(q "SELECT counter.job_register('probe', 'n', '1 second', 'nologin_owner')" 2>/dev/null)
out=$(q "CALL counter.run_job($nl)" 2>&1 || true)
case "$out" in *"cannot log in"*) ;; *) fail "run_job of a NOLOGIN owner's job: $out" ;; esac
q "CALL counter.run_jobs()" >/dev/null
[ "$(q "SELECT count(*) FROM counter.job_runs WHERE job_id = $nl AND outcome = 'failed' AND sqlstate = '28000'")" -ge 1 ] ||
    fail "the NOLOGIN owner's due job was not recorded failed"
[ "$(q "SELECT count(*) FROM public.planted_calls")" = 1 ] || fail "the NOLOGIN owner's job ran"
ce_scan_log "$CE_sec_LOG"
echo ok
