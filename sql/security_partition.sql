-- Partition maintenance under attack (issue 12), and maintenance for a table
-- owner who is not a superuser, end to end. Every attack runs as an
-- unprivileged role and asserts that it fails with a clear SQLSTATE and that
-- nothing changed. Code the attacker controls records the roles it ran as.
CREATE EXTENSION counter_ext;
SET client_min_messages = warning;
\set VERBOSITY terse

CREATE ROLE psec_victim;
CREATE ROLE psec_attacker;
GRANT CREATE ON SCHEMA public TO psec_victim, psec_attacker;
CREATE TABLE public.seen (tag text, sess text, cur text, note text);
GRANT SELECT, INSERT ON public.seen TO PUBLIC;

-- The victim, a non-superuser owner, manages its own table end to end.
SET ROLE psec_victim;
CREATE TABLE public.v_ev (id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
GRANT INSERT ON public.v_ev TO psec_attacker;
SELECT counter.partition_manage('public.v_ev', 'at', premake => 2, retention => interval '2 days',
                                as_of => '2026-07-01 10:10+00') AS created;
INSERT INTO public.v_ev VALUES (1, '2026-07-01 10:20+00'), (2, '2026-06-30 20:00+00');
SELECT created, moved, outcome FROM counter.partition_maintain('public.v_ev', as_of => '2026-07-01 10:10+00');
SELECT count(*) AS in_default FROM ONLY public.v_ev_default;
SELECT pg_get_userbyid(c.relowner) AS partition_owner, count(*) AS partitions
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'public.v_ev'::regclass GROUP BY 1;
SELECT parent, last_outcome FROM counter.partition_status;
RESET ROLE;
SELECT kind, target FROM counter.jobs WHERE kind = 'partition_maintenance';

-- Path 5: a CHECK constraint calling the owner's function, evaluated while
-- the default partition is drained by a superuser's maintenance: it runs as
-- the owner, restricted.
SET ROLE psec_attacker;
CREATE FUNCTION public.att_chk(timestamptz) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    st text;
BEGIN
    -- (armed only for maintenance: in this test the attacker's own session is
    -- a superuser's SET ROLE, which RESET ROLE would undo)
    IF NOT EXISTS (SELECT FROM public.seen WHERE tag = 'armed') THEN
        RETURN true;
    END IF;
    INSERT INTO public.seen VALUES ('check', session_user, current_user, NULL);
    BEGIN RESET ROLE; st := 'ok'; EXCEPTION WHEN OTHERS THEN st := SQLSTATE; END;
    INSERT INTO public.seen VALUES ('RESET ROLE', session_user, current_user, st);
    BEGIN EXECUTE 'ALTER ROLE psec_attacker SUPERUSER'; st := 'ok'; EXCEPTION WHEN OTHERS THEN st := SQLSTATE; END;
    INSERT INTO public.seen VALUES ('ALTER ROLE', session_user, current_user, st);
    BEGIN PERFORM counter.partition_unmanage('public.v_ev'); st := 'ok'; EXCEPTION WHEN OTHERS THEN st := SQLSTATE; END;
    INSERT INTO public.seen VALUES ('partition_unmanage(v_ev)', session_user, current_user, st);
    RETURN true;
END
$$;
CREATE TABLE public.att_ev (id bigint NOT NULL, at timestamptz NOT NULL CHECK (public.att_chk(at))) PARTITION BY RANGE (at);
SELECT counter.partition_manage('public.att_ev', 'at', premake => 1, as_of => '2026-07-01 10:10+00') AS created;
INSERT INTO public.att_ev VALUES (1, '2026-06-30 08:15+00');
RESET ROLE;
INSERT INTO public.seen VALUES ('armed');
SELECT created, moved, outcome FROM counter.partition_maintain('public.att_ev', as_of => '2026-07-01 10:10+00');
SELECT rolsuper FROM pg_roles WHERE rolname = 'psec_attacker';
SELECT DISTINCT tag, cur, note, sess = 'psec_attacker' OR (SELECT rolsuper FROM pg_roles WHERE rolname = sess) AS sess_known
FROM public.seen WHERE tag <> 'armed' ORDER BY tag;
SELECT count(*) AS victim_still_managed FROM counter.partitioned_tables WHERE parent = 'public.v_ev'::regclass;

-- Bounded: rows written by a role with only INSERT, 120 days back, in the
-- year 1000 and the year 3000, make no partition; they stay in the default
-- partition and are reported.
SET ROLE psec_attacker;
INSERT INTO public.v_ev VALUES (10, '2026-03-03 10:00+00'), (11, '1000-01-01 00:00+00'), (12, '3000-01-01 00:00+00');
RESET ROLE;
SELECT created, moved, outcome FROM counter.partition_maintain('public.v_ev', as_of => '2026-07-01 10:10+00');
SELECT count(*) AS partitions FROM counter.partition_bounds('public.v_ev') WHERE NOT is_default;
SELECT count(*) AS in_default, (SELECT last_outside FROM counter.partition_status WHERE parent = 'public.v_ev'::regclass)
FROM ONLY public.v_ev_default;

-- The attacker and another owner's table: no lock taken, nothing to see,
-- nothing to change.
SET ROLE psec_attacker;
SELECT * FROM counter.partition_bounds('public.v_ev');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.partition_manage('public.v_ev', 'at');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.partition_unmanage('public.v_ev');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM counter.partition_maintain('public.v_ev');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.partition_run_step('public.v_ev', jsonb_build_object('parent', 'public.v_ev'::regclass::oid), NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.partition_run_step('public.v_ev', jsonb_build_object('parent', 'public.v_ev'::regclass::oid),
                                           '{"done": 0, "created": 0, "dropped": 0, "moved": 0, "error": {"message": "forged"}}');
\echo :LAST_ERROR_SQLSTATE
CALL counter.run_steps('partition_maintenance', 'public.v_ev', jsonb_build_object('parent', 'public.v_ev'::regclass::oid));
\echo :LAST_ERROR_SQLSTATE
UPDATE counter.partitioned_tables SET retention = interval '1 hour';
\echo :LAST_ERROR_SQLSTATE
INSERT INTO counter.partition_staging VALUES ('public.v_ev', 'public.att_ev', now(), now());
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.partition_step('public.v_ev', NULL);
\echo :LAST_ERROR_SQLSTATE
-- the slot helpers (in counter_internal since 1.7): no EXECUTE either
SELECT counter_internal.partition_slot(now(), 3600);
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.partition_slot_sql('at', 3600);
\echo :LAST_ERROR_SQLSTATE
SELECT parent FROM counter.partitioned_tables ORDER BY parent::text;
SELECT parent, last_error FROM counter.partition_status ORDER BY parent::text;
RESET ROLE;

-- Nothing changed for the victim.
SELECT rolsuper FROM pg_roles WHERE rolname = 'psec_attacker';
SELECT parent, retention, last_outcome FROM counter.partition_status ORDER BY parent::text;
SELECT count(*) AS victim_rows FROM public.v_ev;

-- The committing procedure and the job, as the (non-superuser) owner.
SET ROLE psec_victim;
CALL counter.run_maintenance('public.v_ev');
CALL counter.run_steps('partition_maintenance', 'public.v_ev') \gset
SELECT (:'result'::jsonb ->> 'rows')::bigint AS rows_affected \gset
SELECT :rows_affected >= 0 AS job_ran, last_outcome FROM counter.partition_status;
RESET ROLE;

-- 1.8: the managed table's index count (a restored job waits for that many
-- indexes) follows its owner's DDL, through an event trigger that runs for
-- any role; no other role changes it, nor reads the count of a table it
-- does not own.
SET ROLE psec_victim;
SELECT parent_indexes AS v_indexes FROM counter.partitioned_tables WHERE parent = 'public.v_ev'::regclass;
CREATE INDEX v_ev_at ON public.v_ev (at);
SELECT parent_indexes AS v_indexes_after_create FROM counter.partitioned_tables WHERE parent = 'public.v_ev'::regclass;
RESET ROLE;
SET ROLE psec_attacker;
UPDATE counter.partitioned_tables SET parent_indexes = 99;
\echo :LAST_ERROR_SQLSTATE
CREATE INDEX ON public.v_ev (id);
\echo :LAST_ERROR_SQLSTATE
DROP INDEX public.v_ev_at;
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.partition_index_count('public.v_ev');
\echo :LAST_ERROR_SQLSTATE
-- the attacker's own DDL runs the trigger too, and changes nothing of the victim's
CREATE TABLE public.att_idx (i int);
CREATE INDEX ON public.att_idx (i);
DROP TABLE public.att_idx;
SELECT count(*) AS v_rows_seen FROM counter.partitioned_tables WHERE parent = 'public.v_ev'::regclass;
RESET ROLE;
SELECT parent_indexes AS v_indexes_after_attacker FROM counter.partitioned_tables WHERE parent = 'public.v_ev'::regclass;
SET ROLE psec_victim;
DROP INDEX public.v_ev_at;
SELECT parent_indexes AS v_indexes_after_drop FROM counter.partitioned_tables WHERE parent = 'public.v_ev'::regclass;
RESET ROLE;

-- Clean up.
SELECT counter.partition_unmanage('public.v_ev'), counter.partition_unmanage('public.att_ev');
DROP TABLE public.v_ev, public.att_ev, public.seen;
DROP FUNCTION public.att_chk(timestamptz);
REVOKE CREATE ON SCHEMA public FROM psec_victim, psec_attacker;
DROP OWNED BY psec_victim, psec_attacker;
DROP ROLE psec_victim, psec_attacker;
DROP EXTENSION counter_ext;
