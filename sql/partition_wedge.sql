-- Partition maintenance never wedges on rows in the default partition
-- (issue 24, item 6): a slot that cannot be made or drained is reported and
-- skipped, the other slots are made and retention drops what expired; rows
-- the run left in the default partition (and maintenance that has not run
-- for longer than its interval) show in counter.partition_status with an
-- alert. Everything runs as the tables' owner, an ordinary role.
CREATE EXTENSION counter_ext;
SET client_min_messages = warning;
SET TimeZone = 'UTC';
CREATE ROLE pw_owner LOGIN;
CREATE ROLE pw_other LOGIN;
GRANT CREATE ON SCHEMA public TO pw_owner, pw_other;
SET ROLE pw_owner;

-- premake 6 from 00:10: partitions 00:00 .. 06:00. 100 rows at 23:30 land in
-- the default partition: the slot [23:00, 24:00) is the one that ends the
-- window of a run as of 17:10 (as_of + premake).
CREATE TABLE public.ev (id bigint NOT NULL, k int NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
SELECT counter.partition_manage('public.ev', 'at', premake => 6, as_of => '2026-07-01 00:10+00') AS created;
INSERT INTO public.ev SELECT g, g % 5, '2026-07-01 23:30+00' FROM generate_series(1, 100) g;
SELECT count(*) AS in_default FROM ONLY public.ev_default;
-- 1.4: "create: updated partition constraint for default partition ... would
-- be violated" (23514), 0 created, 0 dropped. Now: 07:00 .. 22:00 made, the
-- slot 23:00 drained into its partition.
SELECT * FROM counter.partition_maintain('public.ev', '2026-07-01 17:10+00');
SELECT count(*) AS in_default, (SELECT count(*) FROM public.ev) AS total,
       (SELECT count(*) FROM public.ev_p2026070123) AS in_23
FROM ONLY public.ev_default;
SELECT count(*) AS partitions, min(lo), max(hi) FROM counter.partition_bounds('public.ev') WHERE NOT is_default;

-- The same with retention in the same run (12 hours: 00:00 .. 04:00 expire).
CREATE TABLE public.ev2 (id bigint NOT NULL, k int NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
SELECT counter.partition_manage('public.ev2', 'at', premake => 6, retention => '12 hours',
                                as_of => '2026-07-01 00:10+00') AS created;
INSERT INTO public.ev2 SELECT g, g % 5, '2026-07-01 23:30+00' FROM generate_series(1, 100) g;
SELECT * FROM counter.partition_maintain('public.ev2', '2026-07-01 17:10+00');
SELECT count(*) AS in_default, (SELECT count(*) FROM public.ev2) AS total FROM ONLY public.ev2_default;
SELECT count(*) AS partitions, min(lo), max(hi) FROM counter.partition_bounds('public.ev2') WHERE NOT is_default;

-- A counted table with a row trigger of its own (cloned onto every
-- partition): its owner is no superuser, so rows may not be moved out of the
-- default partition (a move must not fire the trigger). That slot is
-- reported and skipped; every other slot is made, retention drops, the rows
-- stay in the default partition and the tracked counter still counts them.
CREATE TABLE public.ev3 (id bigint NOT NULL, k int NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
CREATE INDEX ON public.ev3 (at);
CREATE FUNCTION public.ev3_audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER ev3_audit BEFORE INSERT ON public.ev3 FOR EACH ROW EXECUTE FUNCTION public.ev3_audit();
SELECT counter.partition_manage('public.ev3', 'at', premake => 6, retention => '12 hours',
                                as_of => '2026-07-01 00:10+00') AS created;
SELECT counter.track('ev3_k', 'public.ev3', 'k', 'at') IS NOT NULL AS tracked;
INSERT INTO public.ev3 SELECT g, g % 5, '2026-07-01 23:30+00' FROM generate_series(1, 100) g;
SELECT * FROM counter.partition_maintain('public.ev3', '2026-07-01 17:10+00');
SELECT count(*) AS in_default, (SELECT count(*) FROM public.ev3) AS total FROM ONLY public.ev3_default;
SELECT count(*) AS partitions, min(lo), max(hi) FROM counter.partition_bounds('public.ev3') WHERE NOT is_default;
SELECT (SELECT sum(counter.value('ev3_k', k)) FROM generate_series(0, 4) k) AS counted,
       (SELECT count(*) FROM public.ev3) AS rows;
-- the run record and the status say which slot and why
RESET ROLE;
SELECT info -> 'created' AS created, info -> 'dropped' AS dropped, info ->> 'outcome' AS outcome,
       jsonb_array_length(info -> 'skipped') AS skipped, info #>> '{skipped,0,slot}' AS slot,
       info #>> '{skipped,0,action}' AS action, info #>> '{skipped,0,sqlstate}' AS sqlstate
FROM counter.job_runs WHERE kind = 'partition_maintenance' AND target = 'public.ev3' ORDER BY run_id DESC LIMIT 1;
SET ROLE pw_owner;
SELECT parent, rows_in_default, last_outcome, last_created, last_dropped, jsonb_array_length(last_skipped) AS skipped, alert
FROM counter.partition_status ORDER BY parent::text;
-- another role sees none of it
SET ROLE pw_other;
SELECT count(*) AS visible FROM counter.partition_status;
RESET ROLE;

-- Maintenance that has not run for longer than its job's interval.
SET ROLE pw_owner;
CREATE TABLE public.ev4 (id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
SELECT counter.partition_manage('public.ev4', 'at', premake => 2) > 0 AS managed;
SELECT alert FROM counter.partition_status WHERE parent = 'public.ev4'::regclass;
RESET ROLE;
UPDATE counter.partitioned_tables SET created_at = now() - interval '3 hours' WHERE parent = 'public.ev4'::regclass;
SET ROLE pw_owner;
SELECT alert
FROM counter.partition_status WHERE parent = 'public.ev4'::regclass;
RESET ROLE;

DROP TABLE public.ev, public.ev2, public.ev3, public.ev4;
DROP EXTENSION counter_ext;
DROP OWNED BY pw_owner, pw_other;
DROP ROLE pw_owner, pw_other;
