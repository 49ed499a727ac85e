-- Hourly rollups: one row per group key per UTC hour, next to an event table,
-- exact under re-delivery (only rows a statement really inserted are added),
-- late commits (no high-water mark: hours are recomputed from raw events) and
-- rule changes (a recompute of any retained hour).
--
-- Catalog
--   counter.rollups        one row per rollup (configuration; dumped by pg_dump)
--   counter.rollup_dirty   append-only log of (rollup, hour) pairs to recompute
--   counter.rollup_status  view: outcome of each rollup's last refresh (from counter.job_runs)
--   counter.rollup_state   view: newest hours, pending dirty hours, last refresh
--
-- Locks (transaction level, counter_ext's own lock space that no role can
-- take: the one registry, src/include/counter_ext/locks.hpp, documented in
-- doc/reference/worker.md "Lock classes"):
--   class rollup_day (counter_internal.lock_take('rollup_day', rollup_id, at))
--       one refresh chunk (a UTC day) of one rollup; a routine refresh
--       (dirty hours, the job) tries and skips, a full recompute waits.
--   class rollup_hour (lock_take('rollup_hour', rollup_id, at); the trigger in C++)
--       one hour of a trigger-mode rollup: writers take it shared (in hour
--       order) at each statement and hold it to the commit that adds their
--       rows to the rollup, a recompute takes it exclusive (in
--       hour order) before reading the events, so it never overwrites an
--       increment it could not see.
--
-- Privileges (doc/security.md): a rollup serves its source table's owner
-- (counter.rollups.owner). Everything that touches the source or the rollup
-- table runs as that owner in a security-restricted operation with
-- search_path pg_catalog, pg_temp (counter_internal.exec_as_owner; in the
-- trigger, ce::as_owner): a refresh, the trigger's upsert, the filter. The
-- SECURITY DEFINER functions below check their caller (a member of the owner
-- role, or a superuser) and themselves touch only this file's catalogs.
-- Nobody writes the catalogs directly: SELECT is granted, and row-level
-- security shows a role the rows of the rollups it owns (or belongs to the
-- owner of). The filter is compiled once, as the owner, into a stored tree
-- (src/filter.cpp); it is never pasted into SQL.

CREATE TABLE counter.rollups (
    rollup_id      integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name           text NOT NULL UNIQUE,
    source         regclass NOT NULL,
    rollup_table   regclass NOT NULL,
    time_column    name NOT NULL,
    group_by       name[] NOT NULL,
    distinct_on    name[] NOT NULL DEFAULT '{}',
    sums           name[] NOT NULL DEFAULT '{}',
    mode           text NOT NULL CHECK (mode IN ('trigger', 'deferred')),
    filter         text,            -- canonical text of the stored filter (src/filter.cpp)
    filter_tree    text,            -- the resolved tree (nodeToString)
    filter_relid   oid,             -- the source's oid the tree was resolved against
    retention      interval CHECK (retention > interval '0'),
    refresh_every  interval NOT NULL CHECK (refresh_every > interval '0'),
    owner          regrole NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- SQL generated from the columns above by counter_internal.rollup_sql(),
    -- for the source and rollup table names in sql_for (a rename makes it
    -- stale); run only as the owner
    sql_for        text,
    add_sql        text,
    refresh_sql    text,
    -- also counts rows applied by logical replication (a subscriber): row
    -- triggers enabled for replicas mark their hours dirty
    replicated     boolean NOT NULL DEFAULT false,
    -- the precision of the distinct sketches: counter_ext.hll_default_precision
    -- when the rollup was created, fixed then, so that no writer's setting
    -- changes what is stored (doc/reference/rollup.md)
    hll_precision  integer NOT NULL DEFAULT 14 CHECK (hll_precision BETWEEN 4 AND 18)
);
COMMENT ON TABLE counter.rollups IS 'hourly rollups of counter_ext (see counter.rollup_create)';
SELECT pg_catalog.pg_extension_config_dump('counter.rollups', '');

CREATE TABLE counter.rollup_dirty (
    rollup_id  integer NOT NULL,
    hour       timestamptz NOT NULL
);
-- No primary key on purpose: a writer whose transaction is still open must
-- keep its own row, so a refresh that ran before its commit cannot consume it.
CREATE INDEX rollup_dirty_rollup_hour ON counter.rollup_dirty (rollup_id, hour);
COMMENT ON TABLE counter.rollup_dirty IS 'hours of a rollup to recompute from the events (append-only log)';

-- Each refresh is a row of the one run record, counter.job_runs (kind
-- 'rollup_refresh', object_id = rollup_id); the view counter.rollup_status
-- (51_rollup_code.sql) shows each rollup's last.

-- Every role reads the catalog rows of the rollups it owns (or belongs to
-- the owner of), and nothing else; nobody writes them but this file's
-- functions (no INSERT, UPDATE or DELETE is granted: ids, source and
-- rollup_table cannot be forged or repointed).
ALTER TABLE counter.rollups ENABLE ROW LEVEL SECURITY;
CREATE POLICY rollups_read ON counter.rollups FOR SELECT USING (pg_catalog.pg_has_role(owner, 'USAGE'));
GRANT SELECT ON counter.rollups TO PUBLIC;

ALTER TABLE counter.rollup_dirty ENABLE ROW LEVEL SECURITY;
CREATE POLICY rollup_dirty_read ON counter.rollup_dirty FOR SELECT
    USING (EXISTS (SELECT FROM counter.rollups r WHERE r.rollup_id OPERATOR(pg_catalog.=) rollup_dirty.rollup_id));
GRANT SELECT ON counter.rollup_dirty TO PUBLIC;


-- Rollup id and a day or hour number folded into 32 bits (the second int of
-- 1.4's advisory lock keys; 1.5 takes no advisory lock, and its own lock ids
-- are computed in C++, src/include/counter_ext/locks.hpp).
CREATE FUNCTION counter_internal.rollup_lock_key(rollup_id integer, n bigint)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT (((rollup_id::bigint OPERATOR(pg_catalog.*) 1048576
              OPERATOR(pg_catalog.+) (n OPERATOR(pg_catalog.%) 1048576))
             OPERATOR(pg_catalog.%) 4294967296) OPERATOR(pg_catalog.-) 2147483648)::integer
$$;

-- Hour and day numbers (since 1970-01-01 00:00 UTC) of an instant.
CREATE FUNCTION counter_internal.rollup_hour_number(ts timestamptz)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT pg_catalog.floor(pg_catalog.date_part('epoch', ts) OPERATOR(pg_catalog./) 3600)::bigint $$;

CREATE FUNCTION counter_internal.rollup_day_number(ts timestamptz)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT pg_catalog.floor(pg_catalog.date_part('epoch', ts) OPERATOR(pg_catalog./) 86400)::bigint $$;

-- The UTC hour an instant belongs to (date_bin needs no time zone).
CREATE FUNCTION counter.rollup_hour(ts timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT pg_catalog.date_bin('01:00:00'::pg_catalog.interval, ts, '2000-01-01 00:00:00+00'::pg_catalog.timestamptz) $$;

-- The id of a rollup the caller can see (counter.rollups shows a role its
-- own rollups), or undefined_object.
CREATE FUNCTION counter_internal.rollup_id(rollup_name text)
RETURNS integer
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rid integer;
BEGIN
    SELECT r.rollup_id INTO rid FROM counter.rollups r WHERE r.name = rollup_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'rollup "%" does not exist', rollup_name USING ERRCODE = 'undefined_object';
    END IF;
    RETURN rid;
END
$$;
