-- Partition maintenance for append-only event tables declared
-- PARTITION BY RANGE (<timestamptz column>): partitions on a UTC grid
-- (intervals that divide a day), created ahead, a default partition for
-- stragglers drained back into proper partitions in bounded batches, whole
-- partitions expired by retention. Reference: doc/reference/partition.md.
--
-- Privileges (doc/security.md): a managed table is served as its owner.
-- The entry points (partition_manage, partition_unmanage, partition_maintain,
-- run_maintenance, the job) are open to every role and check their caller:
-- a member of the table's owner, or a superuser. Every statement that touches
-- the table or its partitions (CREATE TABLE, ATTACH, the moves out of the
-- default partition, DROP, LOCK, reading rows) runs as the table's owner in
-- a security-restricted operation with search_path pg_catalog, pg_temp
-- (counter_internal.exec_as_owner): a CHECK constraint or a default that
-- calls the owner's function runs as the owner, whoever started the
-- maintenance. The SECURITY DEFINER functions themselves touch only this
-- file's catalogs, which everyone reads as far as they own the tables
-- (row-level security) and nobody writes directly.
--
-- Bounded by construction: one run never creates a partition outside
-- [as_of - retention, as_of + premake] (without retention, 7 days back);
-- rows of the default partition outside that window are
-- reported (last_outside, a WARNING) and left where they are.
--
-- Bounds and names come from UTC epoch arithmetic, and every function that
-- turns a timestamptz into text pins TimeZone and DateStyle, so the
-- session's settings never change a bound or a name.
--
-- Locks: each bounded step runs in its own transaction and first takes the
-- transaction-level lock of class 'partition' on the parent's oid
-- (counter_internal.lock_take, counter_ext's own lock space that no role can
-- take; the one registry of doc/reference/worker.md "Lock classes"); a
-- second caller that finds it taken skips the table (recorded 'skipped').
-- DDL waits at most the table's lock_timeout, retried lock_retries times.

CREATE TABLE counter.partitioned_tables (
    parent               regclass PRIMARY KEY,
    control              name NOT NULL,
    part_interval        interval NOT NULL,
    premake              integer NOT NULL CHECK (premake >= 1),
    retention            interval,
    retention_keep_table boolean NOT NULL DEFAULT false,
    batch_rows           integer NOT NULL DEFAULT 10000 CHECK (batch_rows >= 1),
    step_partitions      integer NOT NULL DEFAULT 24 CHECK (step_partitions >= 1),
    lock_timeout         interval NOT NULL DEFAULT interval '500 milliseconds'
                         CHECK (lock_timeout > interval '0'),
    lock_retries         integer NOT NULL DEFAULT 3 CHECK (lock_retries >= 0),
    created_at           timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- (each maintenance run is a row of the one run record, counter.job_runs,
    -- kind 'partition_maintenance', object_id = the parent's oid; the view
    -- counter.partition_status shows the last one's last_* columns)
    -- the target of its job (schema.table when registered), followed through
    -- renames by counter_internal.partition_follow_rename (80_drop.sql)
    job_target           text,
    -- (1.8) how many indexes the table itself has (its own pg_index rows),
    -- kept by partition_manage, every maintenance run and, while its job is
    -- armed, the DDL that adds or drops one (partition_follow_indexes): a
    -- restored job waits until the table has them again (doc/operations.md,
    -- "While a restore runs"). NULL: not known (a row of 1.7 or older).
    parent_indexes       integer
);
COMMENT ON TABLE counter.partitioned_tables IS
    'tables whose hourly (or daily) partitions counter_ext maintains, with their last maintenance outcome';
SELECT pg_catalog.pg_extension_config_dump('counter.partitioned_tables', '');
ALTER TABLE counter.partitioned_tables ENABLE ROW LEVEL SECURITY;
CREATE POLICY partitioned_tables_read ON counter.partitioned_tables FOR SELECT
    USING (pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                   WHERE c.oid OPERATOR(pg_catalog.=) parent), 'USAGE'));
GRANT SELECT ON counter.partitioned_tables TO PUBLIC;

-- An hour being drained in several transactions: its rows go first into a
-- standalone table (the future partition), attached once the last rows moved.
CREATE TABLE counter.partition_staging (
    -- counter.partitioned_tables (no FOREIGN KEY between dumped tables:
    -- pg_restore -j loads their rows in any order; 71_dump_cascades.sql)
    parent     regclass PRIMARY KEY,
    staging    regclass NOT NULL,
    lo         timestamptz NOT NULL,
    hi         timestamptz NOT NULL,
    started_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE counter.partition_staging IS
    'partitions being filled from the default partition over several transactions (attached when full)';
SELECT pg_catalog.pg_extension_config_dump('counter.partition_staging', '');
ALTER TABLE counter.partition_staging ENABLE ROW LEVEL SECURITY;
CREATE POLICY partition_staging_read ON counter.partition_staging FOR SELECT
    USING (EXISTS (SELECT FROM counter.partitioned_tables t WHERE t.parent OPERATOR(pg_catalog.=) partition_staging.parent));
GRANT SELECT ON counter.partition_staging TO PUBLIC;

-- The name of a partition or of the default partition: parent || suffix when
-- that fits in 63 bytes; otherwise the parent's name cut on a character
-- boundary, '_', the first 8 hex digits of md5(parent name) (a pinned hash:
-- the same name forever) and the suffix. Never a silent truncation.
CREATE FUNCTION counter_internal.partition_name_for(parent_name name, suffix text)
RETURNS name
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    full_name text := parent_name::text OPERATOR(pg_catalog.||) suffix;
    tag text;
    budget int;
    cut text;
BEGIN
    IF octet_length(suffix) OPERATOR(pg_catalog.>) 40 THEN
        RAISE EXCEPTION 'partition name suffix "%" is too long', suffix USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF octet_length(full_name) OPERATOR(pg_catalog.<=) 63 THEN
        RETURN full_name::name;
    END IF;
    tag := '_' OPERATOR(pg_catalog.||) left(md5(parent_name::text), 8);
    budget := 63 OPERATOR(pg_catalog.-) octet_length(tag) OPERATOR(pg_catalog.-) octet_length(suffix);
    cut := parent_name::text;
    WHILE octet_length(cut) OPERATOR(pg_catalog.>) budget LOOP
        cut := left(cut, -1);
    END LOOP;
    RETURN (cut OPERATOR(pg_catalog.||) tag OPERATOR(pg_catalog.||) suffix)::name;
END
$$;
COMMENT ON FUNCTION counter_internal.partition_name_for(name, text) IS
    'parent name plus suffix, shortened with a pinned md5 tag when longer than 63 bytes';

-- The UTC suffix of the partition starting at lo: _pYYYYMMDDHH24, plus MI
-- for intervals shorter than an hour.
CREATE FUNCTION counter_internal.partition_suffix(lo timestamptz, part_interval interval)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT '_p' OPERATOR(pg_catalog.||) to_char(timezone('UTC', lo),
        CASE WHEN extract(epoch FROM part_interval) OPERATOR(pg_catalog.<) 3600
             THEN 'YYYYMMDDHH24MI' ELSE 'YYYYMMDDHH24' END)
$$;

-- The start of the UTC slot holding ts, for a slot length in seconds that
-- divides a day (slots then line up with UTC midnight). SQL run as a
-- table's owner computes it inline (counter_internal.partition_slot_sql).
CREATE FUNCTION counter_internal.partition_slot(ts timestamptz, step_seconds bigint)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT to_timestamp((floor(extract(epoch FROM ts) OPERATOR(pg_catalog./) step_seconds)
                          OPERATOR(pg_catalog.*) step_seconds)::double precision)
$$;

-- Checks an interval for partitioning; returns its length in seconds.
CREATE FUNCTION counter_internal.partition_interval_seconds(part_interval interval)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s numeric := extract(epoch FROM part_interval);
BEGIN
    IF extract(month FROM part_interval) OPERATOR(pg_catalog.<>) 0
       OR extract(year FROM part_interval) OPERATOR(pg_catalog.<>) 0
       OR s OPERATOR(pg_catalog.<) 900 OR s OPERATOR(pg_catalog.>) 86400
       OR s OPERATOR(pg_catalog.%) 60 OPERATOR(pg_catalog.<>) 0
       OR 86400 OPERATOR(pg_catalog.%) s OPERATOR(pg_catalog.<>) 0 THEN
        RAISE EXCEPTION 'partition interval % does not divide a day evenly', part_interval
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use a whole number of minutes from 15 minutes to 1 day that divides 24 hours, e.g. 1, 2, 3, 4, 6, 12 hours or 1 day.';
    END IF;
    RETURN s::bigint;
END
$$;

-- Every partition of a parent with its bounds, ordered by lower bound, then
-- the default partition (NULL bounds); MINVALUE/MAXVALUE are -infinity and
-- infinity. Read from the relcache's partition descriptor (src/partition.cpp).
CREATE FUNCTION counter.partition_bounds(parent regclass)
RETURNS TABLE (partition regclass, lo timestamptz, hi timestamptz, is_default boolean)
LANGUAGE c STABLE STRICT ROWS 1000
AS 'MODULE_PATHNAME', 'counter_partition_bounds';
COMMENT ON FUNCTION counter.partition_bounds(regclass) IS
    'partitions of a range-partitioned table with their bounds as timestamptz';

-- The default partition of a parent, or NULL.
CREATE FUNCTION counter.partition_default(parent regclass)
RETURNS regclass
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p.partdefid::regclass FROM pg_partitioned_table p
    WHERE p.partrelid OPERATOR(pg_catalog.=) partition_default.parent
      AND p.partdefid OPERATOR(pg_catalog.<>) 0
$$;

-- A managed table that is dropped is forgotten, with its job. SECURITY
-- DEFINER: it runs for every DROP TABLE in the database, by any role, and
-- must not need privileges on schema counter; it touches only rows of the
-- tables that very command dropped.
CREATE FUNCTION counter_internal.partition_forget_dropped()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    o record;
BEGIN
    FOR o IN SELECT d.objid, coalesce(c.job_target, d.object_identity) AS target
             FROM pg_event_trigger_dropped_objects() d
             JOIN counter.partitioned_tables c ON c.parent::oid = d.objid
             WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.object_type = 'table' LOOP
        DELETE FROM counter.partitioned_tables c WHERE c.parent::oid = o.objid;
        PERFORM counter.job_unregister('partition_maintenance', o.target);
    END LOOP;
END
$$;
CREATE EVENT TRIGGER counter_partition_forget_dropped ON sql_drop
    WHEN TAG IN ('DROP TABLE', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION counter_internal.partition_forget_dropped();
REVOKE ALL ON FUNCTION counter_internal.partition_forget_dropped() FROM PUBLIC;
