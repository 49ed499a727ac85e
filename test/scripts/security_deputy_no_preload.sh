#!/usr/bin/env bash
# The confused deputy with and without shared_preload_libraries (issue 24,
# item 0). A role's SECURITY DEFINER function that calls counter_ext is run
# by a superuser in a session that has not loaded counter_ext yet: the
# library then loads inside that function's frame. The caller of an entry
# point is read where PostgreSQL still has it (counter_entry, src/owner.cpp),
# so the call acts for the function's owner whether or not the library was
# preloaded: the attacker's function is refused, the attacker gains nothing,
# and the superuser's own direct calls in a fresh session work.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
trap ce_cluster_stop_all EXIT

# check CLUSTER: the whole attack on one cluster.
check() {
    local name=$1 out
    ce_cluster_use "$name"
    ce_psql -q <<'SQL'
CREATE EXTENSION counter_ext;
CREATE ROLE mallory LOGIN;
CREATE SCHEMA m AUTHORIZATION mallory;
CREATE TABLE public.sutab (id int, k int NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON public.sutab (at);
CREATE TABLE public.suev (id int, at timestamptz NOT NULL) PARTITION BY RANGE (at);
-- a counter, rollup and managed table of the superuser, for untrack & co.
SELECT counter.track('su_k', 'public.sutab', 'k', 'at') > 0;
SELECT counter.rollup_create('su_hourly', 'public.sutab', 'at', '{k}') IS NOT NULL;
SET ROLE mallory;
CREATE FUNCTION m.evil(int) RETURNS boolean LANGUAGE plpgsql AS
    $$ BEGIN EXECUTE 'ALTER ROLE mallory SUPERUSER'; RETURN true; END $$;
CREATE FUNCTION m.api() RETURNS text SECURITY DEFINER LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM counter.track('pwn', 'public.sutab'::regclass, 'k', 'at', 'm.evil(id)'); RETURN 'tracked'; END $$;
CREATE FUNCTION m.untrack() RETURNS text SECURITY DEFINER LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM counter.untrack('su_k'); RETURN 'untracked'; END $$;
CREATE FUNCTION m.rollup() RETURNS text SECURITY DEFINER LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM counter.rollup_create('pwn_r', 'public.sutab', 'at', '{k}', filter => 'm.evil(id)');
       RETURN 'rolled up'; END $$;
CREATE FUNCTION m.manage() RETURNS text SECURITY DEFINER LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM counter.partition_manage('public.suev', 'at', premake => 1); RETURN 'managed'; END $$;
CREATE FUNCTION m.drop_rollup() RETURNS text SECURITY DEFINER LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM counter.rollup_drop('su_hourly'); RETURN 'dropped'; END $$;
CREATE FUNCTION m.job() RETURNS text SECURITY DEFINER LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM counter.job_register('reconcile', 'su_k', '1 second', 'postgres'::regrole); RETURN 'job'; END $$;
RESET ROLE;
SQL
    local f
    for f in api untrack rollup manage drop_rollup job; do
        # a fresh session of the superuser, counter_ext not loaded in it yet
        if out=$(ce_psql -At -v ON_ERROR_STOP=1 -c "SELECT m.$f()" 2>&1); then
            echo "[$name] m.$f() ran for the superuser: $out"
            return 1
        fi
        case $out in
        *"must be"*|*"permission denied"*|*"not own"*|*"is not"*) ;;
        *) echo "[$name] m.$f() failed, but not for want of a right: $out"; return 1 ;;
        esac
    done
    # nothing was made for the attacker, nothing of the superuser's was undone
    out=$(ce_psql -At <<'SQL'
INSERT INTO public.sutab (id, k, at) VALUES (1, 1, now() - interval '1 hour');
SELECT (SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'),
       (SELECT string_agg(name, ',' ORDER BY name) FROM counter.tracked),
       (SELECT string_agg(name, ',' ORDER BY name) FROM counter.rollups),
       (SELECT count(*) FROM counter.partitioned_tables),
       (SELECT count(*) FROM counter.jobs WHERE kind = 'reconcile' AND run_every = '1 second');
SQL
)
    [ "$out" = "f|su_k|su_hourly|0|0" ] || { echo "[$name] after the attack: $out (want f|su_k|su_hourly|0|0)"; return 1; }
    # the superuser's own calls, each the first of a fresh session, still work
    ce_psql -At -v ON_ERROR_STOP=1 -c "SELECT counter.partition_manage('public.suev', 'at', premake => 1) > 0" >/dev/null
    ce_psql -At -v ON_ERROR_STOP=1 -c "SELECT counter.untrack('su_k')" >/dev/null
    ce_psql -At -v ON_ERROR_STOP=1 -c "SELECT counter.track('su_k', 'public.sutab', 'k', 'at') > 0" >/dev/null
    out=$(ce_psql -At -c "SELECT outcome FROM counter.reconcile('su_k', all_keys => true)" \
        -c "SELECT counter.value('su_k', 1) = (SELECT count(*) FROM public.sutab WHERE k = 1)")
    [ "$(printf '%s\n' "$out" | tail -1)" = t ] || { echo "[$name] the superuser's counter is wrong: $out"; return 1; }
    # mallory is still refused as itself, and its own definer works on its own table
    ce_psql -q -c "CREATE TABLE m.mine (k int NOT NULL, at timestamptz NOT NULL); CREATE INDEX ON m.mine (at); ALTER TABLE m.mine OWNER TO mallory"
    out=$(ce_psql -At -v ON_ERROR_STOP=1 -c "SET ROLE mallory" -c "SELECT counter.track('mine', 'm.mine', 'k', 'at') > 0" 2>&1)
    [ "$out" = t ] || { echo "[$name] mallory could not track its own table: $out"; return 1; }
    echo "[$name] the attacker's functions were refused through track, untrack, rollup_create, rollup_drop, partition_manage and job_register"
}

ce_cluster_start preloaded "counter_ext.enabled = off"
check preloaded
ce_cluster_start plain "shared_preload_libraries = ''"
check plain
