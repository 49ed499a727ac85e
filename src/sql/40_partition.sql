-- Partition maintenance for append-only event tables declared
-- PARTITION BY RANGE (<timestamptz column>): partitions on a UTC grid
-- (intervals that divide a day), created ahead, a default partition for
-- stragglers drained back into proper partitions in bounded batches, whole
-- partitions expired by retention. Reference: doc/reference/partition.md.
--
-- Everything runs as the caller (SECURITY INVOKER): the functions are
-- REVOKEd from PUBLIC, so a superuser (or the background worker) runs them
-- unless a DBA grants more. Bounds and names come from UTC epoch arithmetic,
-- and every function that turns a timestamptz into text pins TimeZone and
-- DateStyle, so the session's settings never change a bound or a name.
--
-- Locks: each bounded step runs in its own transaction and first takes the
-- transaction-level advisory lock (classid 1667576885 = 'ce05', objid = the
-- parent's oid as int4); a second caller that finds it taken skips the table.
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
    last_run_at          timestamptz,
    last_outcome         text CHECK (last_outcome IN ('ok', 'partial', 'skipped', 'error')),
    last_error           text,
    last_created         bigint,
    last_dropped         bigint,
    last_moved           bigint,
    -- the target of its job (schema.table when registered), followed through
    -- renames by counter_internal.partition_follow_rename (80_drop.sql)
    job_target           text
);
COMMENT ON TABLE counter.partitioned_tables IS
    'tables whose hourly (or daily) partitions counter_ext maintains, with their last maintenance outcome';
SELECT pg_catalog.pg_extension_config_dump('counter.partitioned_tables', '');
GRANT SELECT ON counter.partitioned_tables TO PUBLIC;

-- An hour being drained in several transactions: its rows go first into a
-- standalone table (the future partition), attached once the last rows moved.
CREATE TABLE counter.partition_staging (
    parent     regclass PRIMARY KEY REFERENCES counter.partitioned_tables ON DELETE CASCADE,
    staging    regclass NOT NULL,
    lo         timestamptz NOT NULL,
    hi         timestamptz NOT NULL,
    started_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE counter.partition_staging IS
    'partitions being filled from the default partition over several transactions (attached when full)';
SELECT pg_catalog.pg_extension_config_dump('counter.partition_staging', '');
GRANT SELECT ON counter.partition_staging TO PUBLIC;

-- The name of a partition or of the default partition: parent || suffix when
-- that fits in 63 bytes; otherwise the parent's name cut on a character
-- boundary, '_', the first 8 hex digits of md5(parent name) (a pinned hash:
-- the same name forever) and the suffix. Never a silent truncation.
CREATE FUNCTION counter.partition_name_for(parent_name name, suffix text)
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
COMMENT ON FUNCTION counter.partition_name_for(name, text) IS
    'parent name plus suffix, shortened with a pinned md5 tag when longer than 63 bytes';

-- The UTC suffix of the partition starting at lo: _pYYYYMMDDHH24, plus MI
-- for intervals shorter than an hour.
CREATE FUNCTION counter.partition_suffix(lo timestamptz, part_interval interval)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT '_p' OPERATOR(pg_catalog.||) to_char(timezone('UTC', lo),
        CASE WHEN extract(epoch FROM part_interval) OPERATOR(pg_catalog.<) 3600
             THEN 'YYYYMMDDHH24MI' ELSE 'YYYYMMDDHH24' END)
$$;

-- The start of the UTC slot holding ts, for a slot length in seconds that
-- divides a day (slots then line up with UTC midnight).
CREATE FUNCTION counter.partition_slot(ts timestamptz, step_seconds bigint)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT to_timestamp((floor(extract(epoch FROM ts) OPERATOR(pg_catalog./) step_seconds)
                          OPERATOR(pg_catalog.*) step_seconds)::double precision)
$$;

-- Checks an interval for partitioning; returns its length in seconds.
CREATE FUNCTION counter.partition_interval_seconds(part_interval interval)
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

-- The parent's columns that an INSERT can list (not dropped, not generated).
CREATE FUNCTION counter.partition_column_list(parent regclass)
RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum)
    FROM pg_attribute a
    WHERE a.attrelid OPERATOR(pg_catalog.=) partition_column_list.parent
      AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped AND a.attgenerated OPERATOR(pg_catalog.=) ''
$$;

-- Logical replication (doc/operations.md): a partition made by counter_ext
-- is replicated as its parent is.
--   REPLICA IDENTITY: PostgreSQL does not copy it, and a partition that is
--   published without one refuses UPDATE and DELETE. USING INDEX maps to the
--   partition's index attached to the parent's identity index, so t must be
--   attached already.
--   Publications that list partitions of the parent one by one (not the
--   parent, an ancestor, their schema, nor all tables, which include new
--   partitions by themselves) get t too, when t is a new partition. That needs the publication's owner
--   (ALTER PUBLICATION); a maintenance run without that right warns and goes on.
CREATE FUNCTION counter.partition_replicate_like_parent(parent regclass, t regclass, new_partition boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ident "char" := (SELECT c.relreplident FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) parent);
    idx regclass;
    pub name;
BEGIN
    IF ident OPERATOR(pg_catalog.<>) (SELECT c.relreplident FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) t)
       OR ident OPERATOR(pg_catalog.=) 'i' THEN
        CASE ident
        WHEN 'f' THEN EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', t);
        WHEN 'n' THEN EXECUTE format('ALTER TABLE %s REPLICA IDENTITY NOTHING', t);
        WHEN 'd' THEN EXECUTE format('ALTER TABLE %s REPLICA IDENTITY DEFAULT', t);
        ELSE
            SELECT h.inhrelid::regclass INTO idx
            FROM pg_index pi
            JOIN pg_inherits h ON h.inhparent OPERATOR(pg_catalog.=) pi.indexrelid
            JOIN pg_index ci ON ci.indexrelid OPERATOR(pg_catalog.=) h.inhrelid
            WHERE pi.indrelid OPERATOR(pg_catalog.=) parent AND pi.indisreplident
              AND ci.indrelid OPERATOR(pg_catalog.=) t;
            IF idx IS NULL THEN
                RAISE EXCEPTION 'partition % has no index attached to the replica identity index of %', t, parent
                    USING ERRCODE = 'object_not_in_prerequisite_state';
            END IF;
            EXECUTE format('ALTER TABLE %s REPLICA IDENTITY USING INDEX %I', t,
                           (SELECT c.relname FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) idx));
        END CASE;
    END IF;
    FOR pub IN
        SELECT DISTINCT p.pubname FROM pg_publication p
        JOIN pg_publication_rel pr ON pr.prpubid OPERATOR(pg_catalog.=) p.oid
        JOIN pg_inherits h ON h.inhrelid OPERATOR(pg_catalog.=) pr.prrelid
                          AND h.inhparent OPERATOR(pg_catalog.=) parent
        WHERE new_partition AND NOT p.puballtables AND h.inhrelid OPERATOR(pg_catalog.<>) t
          AND NOT EXISTS (SELECT 1 FROM pg_publication_rel x
                          WHERE x.prpubid OPERATOR(pg_catalog.=) p.oid
                            AND x.prrelid IN (SELECT a.relid FROM pg_partition_ancestors(parent) a
                                              UNION ALL SELECT t))
          AND NOT EXISTS (SELECT 1 FROM pg_publication_namespace x
                          WHERE x.pnpubid OPERATOR(pg_catalog.=) p.oid
                            AND x.pnnspid IN (SELECT c.relnamespace FROM pg_class c
                                              WHERE c.oid OPERATOR(pg_catalog.=) t))
        ORDER BY 1
    LOOP
        BEGIN
            EXECUTE format('ALTER PUBLICATION %I ADD TABLE %s', pub, t);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE WARNING 'partition % of % is not added to publication %: %', t, parent, pub, SQLERRM
                USING HINT = 'The publication''s owner can add it: ALTER PUBLICATION ... ADD TABLE.';
        END;
    END LOOP;
END
$$;

-- True when a DELETE from the parent's default partition is published by a
-- publication of this database (FOR ALL TABLES, the parent or an ancestor,
-- the default partition itself, or their schema): a drain must then be
-- published as the rows it moves. A publication of inserts only sees no
-- drain at all (neither its deletes nor its inserts into a table not yet
-- attached), which is right for it as it is.
CREATE FUNCTION counter.partition_published(parent regclass)
RETURNS boolean
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_publication_tables pt
        JOIN pg_publication p ON p.pubname OPERATOR(pg_catalog.=) pt.pubname AND p.pubdelete
        JOIN pg_class c ON c.relname OPERATOR(pg_catalog.=) pt.tablename
        JOIN pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
                           AND n.nspname OPERATOR(pg_catalog.=) pt.schemaname
        WHERE c.oid IN (SELECT a.relid FROM pg_partition_ancestors(partition_published.parent) a
                        UNION ALL SELECT counter.partition_default(partition_published.parent)))
$$;

-- Creates the standalone table that becomes the partition [lo, hi): the
-- parent's columns, defaults, constraints and indexes (LIKE ... INCLUDING ALL,
-- so ATTACH adopts the indexes instead of building them), the parent's owner,
-- privileges and tablespace. With bounded = true it also gets NOT NULL and a
-- CHECK of the bounds, so rows put in it are checked on the way in and ATTACH
-- need not scan it. With how = 'direct' it is created straight as a partition
-- (CREATE TABLE ... PARTITION OF: faster, but it locks the parent in ACCESS
-- EXCLUSIVE mode, so only partition_manage uses it, on a table being set up).
CREATE FUNCTION counter.partition_make_table(parent regclass, lo timestamptz, hi timestamptz, how text)
RETURNS regclass
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
AS $$
DECLARE
    cfg counter.partitioned_tables;
    rel pg_class;
    nsp name;
    tname name;
    t regclass;
    g record;
BEGIN
    SELECT * INTO STRICT cfg FROM counter.partitioned_tables c WHERE c.parent OPERATOR(pg_catalog.=) partition_make_table.parent;
    SELECT * INTO STRICT rel FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) partition_make_table.parent;
    SELECT n.nspname INTO STRICT nsp FROM pg_namespace n WHERE n.oid OPERATOR(pg_catalog.=) rel.relnamespace;
    tname := counter.partition_name_for(rel.relname, counter.partition_suffix(lo, cfg.part_interval));
    IF how = 'direct' THEN
        EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.%I FOR VALUES FROM (%L) TO (%L)',
                       nsp, tname, nsp, rel.relname, lo, hi);
        PERFORM counter.partition_replicate_like_parent(parent, format('%I.%I', nsp, tname)::regclass, true);
    ELSE
        EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I INCLUDING ALL)%s', nsp, tname, nsp, rel.relname,
                       CASE WHEN rel.reltablespace <> 0
                            THEN format(' TABLESPACE %I', (SELECT s.spcname FROM pg_tablespace s
                                                           WHERE s.oid = rel.reltablespace))
                            ELSE '' END);
    END IF;
    t := format('%I.%I', nsp, tname)::regclass;
    IF how = 'bounded' THEN
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL, ADD CONSTRAINT counter_ext_bounds CHECK (%I >= %L AND %I < %L)',
                       t, cfg.control, cfg.control, lo, cfg.control, hi);
    END IF;
    IF (SELECT c.relowner FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) t) OPERATOR(pg_catalog.<>) rel.relowner THEN
        EXECUTE format('ALTER TABLE %s OWNER TO %I', t, rel.relowner::regrole);
    END IF;
    -- PostgreSQL does not copy a parent's privileges to new partitions.
    IF rel.relacl IS NOT NULL THEN
        FOR g IN SELECT a.grantee, a.privilege_type, a.is_grantable FROM aclexplode(rel.relacl) a LOOP
            EXECUTE format('GRANT %s ON %s TO %s%s', g.privilege_type, t,
                           CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' ELSE quote_ident(g.grantee::regrole::text) END,
                           CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END IF;
    RETURN t;
END
$$;

-- Attaches a table made by partition_make_table as the partition [lo, hi),
-- with the parent's replica identity. A bounded t holds rows a drain moved
-- out of the default partition. When that partition is published, the move
-- was published as DELETEs only (t is not published before it is attached),
-- so a subscriber would lose the rows: then t is set aside under another
-- name, an empty partition is attached in its place, and the rows go back
-- in through the parent (published as INSERTs, through the partition or the
-- root), in this transaction. A subscriber applies the drain's transaction
-- as deletes from the default partition and inserts of the same rows.
CREATE FUNCTION counter.partition_attach(parent regclass, t regclass, lo timestamptz, hi timestamptz, bounded boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
AS $$
DECLARE
    held regclass;
    held_name name;
    has_rows boolean := false;
BEGIN
    IF bounded AND counter.partition_published(parent) THEN
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM ONLY %s)', t) INTO STRICT has_rows;
    END IF;
    IF has_rows THEN
        held_name := counter.partition_name_for(
            (SELECT c.relname FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) parent),
            counter.partition_suffix(lo, (SELECT c.part_interval FROM counter.partitioned_tables c
                                          WHERE c.parent OPERATOR(pg_catalog.=) partition_attach.parent)) || '_held');
        EXECUTE format('ALTER TABLE %s RENAME TO %I', t, held_name);
        held := t;
        t := counter.partition_make_table(parent, lo, hi, 'bounded');
    END IF;
    EXECUTE format('ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%L) TO (%L)', parent, t, lo, hi);
    IF bounded THEN
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT counter_ext_bounds', t);
    END IF;
    PERFORM counter.partition_replicate_like_parent(parent, t, true);
    IF held IS NOT NULL THEN
        PERFORM counter.partition_move(parent, held, parent, NULL, NULL, NULL);
        EXECUTE format('DROP TABLE %s', held);
    END IF;
END
$$;

-- The move itself, from one table to another (ONLY from_rel; into to_rel,
-- which may be the parent: the rows are then routed to its partitions).
-- lo and hi NULL: every row.
CREATE FUNCTION counter.partition_move(parent regclass, from_rel regclass, to_rel regclass, lo timestamptz,
                                       hi timestamptz, max_rows bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
AS $$
DECLARE
    ctl name := (SELECT c.control FROM counter.partitioned_tables c WHERE c.parent OPERATOR(pg_catalog.=) partition_move.parent);
    cols text := counter.partition_column_list(parent);
    old_role text := current_setting('session_replication_role');
    n bigint;
BEGIN
    IF (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) current_user) THEN
        PERFORM set_config('session_replication_role', 'replica', true);
    ELSIF EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid IN (from_rel, to_rel) AND NOT g.tgisinternal)
       OR EXISTS (SELECT 1 FROM pg_constraint k WHERE k.contype OPERATOR(pg_catalog.=) 'f'
                  AND k.confrelid IN (parent, from_rel)) THEN
        RAISE EXCEPTION 'moving rows out of the default partition of % needs a superuser', parent
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'The table has triggers or is referenced by foreign keys, which must not fire for a move.';
    END IF;
    EXECUTE format('WITH moved AS (DELETE FROM ONLY %1$s WHERE ctid = ANY (ARRAY(SELECT ctid FROM ONLY %1$s '
                   '%2$s %3$s)) RETURNING %4$s) '
                   'INSERT INTO %5$s (%4$s) OVERRIDING SYSTEM VALUE SELECT %4$s FROM moved',
                   from_rel,
                   CASE WHEN lo IS NULL THEN '' ELSE format('WHERE %1$I >= %2$L AND %1$I < %3$L', ctl, lo, hi) END,
                   CASE WHEN max_rows IS NULL THEN '' ELSE format('LIMIT %s', max_rows) END, cols, to_rel);
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM set_config('session_replication_role', old_role, true);
    RETURN n;
END
$$;

-- Moves up to max_rows rows of [lo, hi) from the default partition into t
-- (all of them when max_rows is NULL), in one statement: a row is deleted
-- from the default partition and inserted into t atomically, so it is never
-- lost nor duplicated. Triggers and foreign-key actions do not fire (a move
-- is not a delete): that needs session_replication_role = replica, which
-- needs a superuser; others may move rows only of tables without triggers
-- and without referencing foreign keys.
CREATE FUNCTION counter.partition_move_rows(parent regclass, t regclass, lo timestamptz, hi timestamptz, max_rows bigint)
RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT counter.partition_move(parent, counter.partition_default(parent), t, lo, hi, max_rows)
$$;

-- One bounded step of maintenance of one table, in the caller's transaction:
-- finish or continue a staged drain; else drop/detach up to step_partitions
-- partitions past retention; else create up to step_partitions missing
-- partitions up to as_of + premake intervals; else drain one slot of the
-- default partition (at most batch_rows rows, or the whole slot under lock
-- when that is small). status: 'more' (call again), 'done', 'busy' (another
-- session maintains the table), 'skipped' (locks not obtained within
-- lock_timeout after lock_retries retries), 'error' (message in error).
CREATE FUNCTION counter.partition_step(parent regclass, as_of timestamptz,
    OUT created integer, OUT dropped integer, OUT moved bigint, OUT status text, OUT error text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
SET lock_timeout = 0
AS $$
DECLARE
    cfg counter.partitioned_tables;
    stg counter.partition_staging;
    step bigint;
    d regclass;
    cur timestamptz;
    upto timestamptz;
    cutoff timestamptz;
    win_lo timestamptz;
    r record;
    t regclass;
    lo timestamptz;
    hi timestamptz;
    n bigint;
    todo timestamptz[];
    busy_slots timestamptz[];
    covered tstzmultirange;
    expired regclass[];
    action text;
    attempt int := 0;
    near boolean;
    i int;
BEGIN
    created := 0; dropped := 0; moved := 0; status := 'done';
    as_of := coalesce(as_of, now());
    SELECT * INTO cfg FROM counter.partitioned_tables c WHERE c.parent OPERATOR(pg_catalog.=) partition_step.parent;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table % is not managed by counter_ext', parent USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT pg_try_advisory_xact_lock(1667576885, parent::oid::int4) THEN
        status := 'busy';
        RETURN;
    END IF;
    PERFORM set_config('lock_timeout', (extract(epoch FROM cfg.lock_timeout) OPERATOR(pg_catalog.*) 1000)::bigint::text, true);
    step := counter.partition_interval_seconds(cfg.part_interval);
    d := counter.partition_default(parent);
    cur := counter.partition_slot(as_of, step);
    upto := cur OPERATOR(pg_catalog.+) make_interval(secs => step OPERATOR(pg_catalog.*) cfg.premake);
    cutoff := CASE WHEN cfg.retention IS NOT NULL THEN as_of OPERATOR(pg_catalog.-) cfg.retention END;

    LOOP -- attempts: a lock_not_available rolls the attempt back, waits, retries
        attempt := attempt OPERATOR(pg_catalog.+) 1;
        BEGIN
            created := 0; dropped := 0; moved := 0; status := 'done';
            SELECT * INTO stg FROM counter.partition_staging s WHERE s.parent OPERATOR(pg_catalog.=) partition_step.parent;
            IF FOUND THEN
                -- A staged drain: move another batch, or the rest under lock and attach.
                action := 'drain';
                IF d IS NULL THEN
                    RAISE EXCEPTION 'table % lost its default partition during a drain', parent
                        USING ERRCODE = 'object_not_in_prerequisite_state';
                END IF;
                EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM ONLY %s WHERE %I >= %L AND %I < %L LIMIT %s) x',
                               d, cfg.control, stg.lo, cfg.control, stg.hi, cfg.batch_rows OPERATOR(pg_catalog.+) 1) INTO n;
                IF n OPERATOR(pg_catalog.>) cfg.batch_rows THEN
                    moved := counter.partition_move_rows(parent, stg.staging, stg.lo, stg.hi, cfg.batch_rows);
                    status := 'more';
                ELSE
                    EXECUTE format('LOCK TABLE %s IN SHARE MODE', parent);
                    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', d);
                    moved := counter.partition_move_rows(parent, stg.staging, stg.lo, stg.hi, NULL);
                    PERFORM counter.partition_attach(parent, stg.staging, stg.lo, stg.hi, true);
                    DELETE FROM counter.partition_staging s WHERE s.parent OPERATOR(pg_catalog.=) partition_step.parent;
                    created := 1;
                    status := 'more';
                END IF;
                EXIT;
            END IF;

            -- One look at the partitions: what they cover, the oldest start, and
            -- those wholly at or before as_of - retention (oldest first).
            SELECT coalesce(range_agg(tstzrange(b.lo, b.hi)), '{}'::tstzmultirange),
                   min(b.lo) FILTER (WHERE b.lo > '-infinity'),
                   (array_agg(b.partition ORDER BY b.hi) FILTER (WHERE b.hi <= cutoff))[1:cfg.step_partitions]
            INTO covered, win_lo, expired
            FROM counter.partition_bounds(parent) b WHERE NOT b.is_default;

            -- Missing slots from the oldest partition (or the current slot) up to
            -- as_of + premake, not overlapping any partition, without rows in default.
            action := 'create';
            win_lo := least(coalesce(counter.partition_slot(win_lo, step), cur), cur);
            IF cutoff IS NOT NULL THEN
                win_lo := greatest(win_lo, counter.partition_slot(cutoff, step));
            END IF;
            IF d IS NOT NULL THEN
                EXECUTE format('SELECT array_agg(DISTINCT counter.partition_slot(%1$I, %4$s)) FROM ONLY %2$s '
                               'WHERE %1$I >= %3$L AND %1$I <= %5$L',
                               cfg.control, d, win_lo, step, upto) INTO busy_slots;
            END IF;
            SELECT array_agg(g ORDER BY g) INTO todo FROM (
                SELECT g FROM generate_series(win_lo, upto, make_interval(secs => step)) g
                WHERE NOT (covered && tstzrange(g, g + make_interval(secs => step)))
                  AND NOT (g = ANY (coalesce(busy_slots, '{}')))
                ORDER BY g LIMIT cfg.step_partitions) s;
            IF todo IS NOT NULL THEN
                near := false;
                FOREACH lo IN ARRAY todo LOOP
                    hi := lo + make_interval(secs => step);
                    -- A slot writers may be filling right now: hold writers of
                    -- the parent so none routes a row there with a stale
                    -- partition list (it would fail after the ATTACH).
                    IF NOT near AND lo <= cur + make_interval(secs => step) THEN
                        EXECUTE format('LOCK TABLE %s IN SHARE MODE', parent);
                        near := true;
                    END IF;
                    t := counter.partition_make_table(parent, lo, hi, 'standalone');
                    PERFORM counter.partition_attach(parent, t, lo, hi, false);
                    covered := covered + tstzmultirange(tstzrange(lo, hi));
                    created := created + 1;
                END LOOP;
                IF created >= cfg.step_partitions THEN
                    status := 'more';
                    EXIT; -- bounded: the rest in the next step
                END IF;
            END IF;

            -- Drain, oldest slot first: up to step_partitions slots of at most
            -- batch_rows rows each, each moved and attached under a lock that
            -- holds writers for that moment; a larger slot starts a staged
            -- drain (one batch per step, the last under lock).
            action := 'drain';
            IF d IS NOT NULL THEN
                FOR i IN 1..cfg.step_partitions LOOP
                    EXECUTE format('SELECT %1$I FROM ONLY %2$s WHERE %1$I > %3$L AND %1$I < %4$L ORDER BY %1$I LIMIT 1',
                                   cfg.control, d, '-infinity'::timestamptz, 'infinity'::timestamptz) INTO lo;
                    EXIT WHEN lo IS NULL;
                    lo := counter.partition_slot(lo, step);
                    hi := lo + make_interval(secs => step);
                    IF covered && tstzrange(lo, hi) THEN
                        RAISE EXCEPTION 'rows of % in the default partition of % cannot be moved: the slot overlaps an existing partition',
                            lo, parent USING ERRCODE = 'object_not_in_prerequisite_state';
                    END IF;
                    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM ONLY %s WHERE %I >= %L AND %I < %L LIMIT %s) x',
                                   d, cfg.control, lo, cfg.control, hi, cfg.batch_rows + 1) INTO n;
                    IF n > cfg.batch_rows THEN
                        EXIT WHEN i > 1; -- the next step stages it
                        t := counter.partition_make_table(parent, lo, hi, 'bounded');
                        INSERT INTO counter.partition_staging (parent, staging, lo, hi) VALUES (parent, t, lo, hi);
                        moved := counter.partition_move_rows(parent, t, lo, hi, cfg.batch_rows);
                        status := 'more';
                        EXIT;
                    END IF;
                    t := counter.partition_make_table(parent, lo, hi, 'bounded');
                    IF i = 1 THEN
                        EXECUTE format('LOCK TABLE %s IN SHARE MODE', parent);
                        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', d);
                    END IF;
                    moved := moved + counter.partition_move_rows(parent, t, lo, hi, NULL);
                    PERFORM counter.partition_attach(parent, t, lo, hi, true);
                    covered := covered + tstzmultirange(tstzrange(lo, hi));
                    created := created + 1;
                    status := 'more';
                END LOOP;
            END IF;

            -- Retention, last (its ACCESS EXCLUSIVE lock on the parent is held only
            -- until the commit): drop (or detach) up to step_partitions expired partitions.
            IF expired IS NOT NULL THEN
                action := 'retention';
                FOREACH t IN ARRAY expired LOOP
                    IF cfg.retention_keep_table THEN
                        EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', parent, t);
                    ELSE
                        EXECUTE format('DROP TABLE %s', t);
                    END IF;
                    dropped := dropped + 1;
                END LOOP;
                IF dropped >= cfg.step_partitions THEN
                    status := 'more';
                END IF;
            END IF;

            EXIT;
        EXCEPTION
            WHEN lock_not_available THEN
                IF attempt OPERATOR(pg_catalog.>) cfg.lock_retries THEN
                    created := 0; dropped := 0; moved := 0;
                    status := 'skipped';
                    error := format('%s: could not lock %s within lock_timeout %s (%s attempts): %s',
                                    action, parent, cfg.lock_timeout, attempt, SQLERRM);
                    RETURN;
                END IF;
                PERFORM pg_sleep(least(extract(epoch FROM cfg.lock_timeout), 1));
            WHEN check_violation THEN
                -- a row arrived in the default partition for a slot being
                -- created: the next attempt sees it and drains that slot.
                IF action <> 'create' OR attempt > cfg.lock_retries THEN
                    created := 0; dropped := 0; moved := 0;
                    status := 'error';
                    error := format('%s: %s (SQLSTATE %s)', action, SQLERRM, SQLSTATE);
                    RETURN;
                END IF;
            WHEN OTHERS THEN
                created := 0; dropped := 0; moved := 0;
                status := 'error';
                error := format('%s: %s (SQLSTATE %s)', action, SQLERRM, SQLSTATE);
                RETURN;
        END;
    END LOOP;
END
$$;

-- Records the outcome of a maintenance run of one table.
CREATE FUNCTION counter.partition_record(parent regclass, outcome text, error text,
                                         created bigint, dropped bigint, moved bigint)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE counter.partitioned_tables c
    SET last_run_at = clock_timestamp(), last_outcome = partition_record.outcome, last_error = partition_record.error,
        last_created = partition_record.created, last_dropped = partition_record.dropped,
        last_moved = partition_record.moved
    WHERE c.parent OPERATOR(pg_catalog.=) partition_record.parent
$$;

-- Maintenance of one table in the caller's transaction (no COMMIT): steps
-- until done, skipped, failed or max_steps. For use inside a transaction;
-- CALL counter.run_maintenance() commits after every step instead.
CREATE FUNCTION counter.partition_maintain(parent regclass, as_of timestamptz DEFAULT NULL, max_steps integer DEFAULT 100000,
    OUT created bigint, OUT dropped bigint, OUT moved bigint, OUT outcome text, OUT error text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s record;
    i int := 0;
BEGIN
    IF parent IS NULL THEN
        RAISE EXCEPTION 'parent must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    created := 0; dropped := 0; moved := 0; outcome := 'ok';
    LOOP
        i := i + 1;
        s := counter.partition_step(parent, as_of);
        created := created + s.created; dropped := dropped + s.dropped; moved := moved + s.moved;
        IF s.status = 'busy' THEN
            outcome := 'busy';
            RETURN;
        ELSIF s.status IN ('skipped', 'error') THEN
            outcome := s.status; error := s.error;
            EXIT;
        ELSIF s.status = 'done' THEN
            EXIT;
        ELSIF i >= max_steps THEN
            outcome := 'partial';
            EXIT;
        END IF;
    END LOOP;
    PERFORM counter.partition_record(parent, outcome, error, created, dropped, moved);
END
$$;
COMMENT ON FUNCTION counter.partition_maintain(regclass, timestamptz, integer) IS
    'maintains one table in the current transaction (no commits); CALL counter.run_maintenance() commits per step';

-- The committing loop behind run_maintenance and the job: one transaction per
-- bounded step. No SET clause (a procedure with one cannot COMMIT): every
-- name and operator is schema-qualified.
CREATE PROCEDURE counter.partition_maintain_steps(parent regclass, INOUT created bigint DEFAULT 0,
    INOUT dropped bigint DEFAULT 0, INOUT moved bigint DEFAULT 0, INOUT outcome text DEFAULT NULL,
    INOUT error text DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    s record;
    i int := 0;
BEGIN
    created := 0; dropped := 0; moved := 0; outcome := 'ok'; error := NULL;
    LOOP
        i := i OPERATOR(pg_catalog.+) 1;
        SELECT * INTO s FROM counter.partition_step(parent, NULL);
        created := created OPERATOR(pg_catalog.+) s.created;
        dropped := dropped OPERATOR(pg_catalog.+) s.dropped;
        moved := moved OPERATOR(pg_catalog.+) s.moved;
        IF s.status OPERATOR(pg_catalog.=) 'busy' THEN
            outcome := 'busy';
            COMMIT;
            RETURN;
        ELSIF s.status OPERATOR(pg_catalog.=) ANY ('{skipped,error}'::text[]) THEN
            outcome := s.status; error := s.error;
            EXIT;
        ELSIF s.status OPERATOR(pg_catalog.=) 'done' THEN
            EXIT;
        ELSIF i OPERATOR(pg_catalog.>=) 100000 THEN
            outcome := 'partial';
            EXIT;
        END IF;
        COMMIT;
    END LOOP;
    PERFORM counter.partition_record(parent, outcome, error, created, dropped, moved);
    COMMIT;
END
$$;

-- CALL counter.run_maintenance() maintains every managed table;
-- CALL counter.run_maintenance('public.events') one. Commits after every
-- bounded step; a table that is locked past its lock_timeout (or fails) is
-- recorded and skipped, the others go on. Call it outside a transaction
-- block (pg_cron does); inside one, use counter.partition_maintain().
CREATE PROCEDURE counter.run_maintenance(parent regclass DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    tables regclass[];
    p regclass;
    c bigint; d bigint; m bigint; o text; e text;
BEGIN
    IF parent IS NOT NULL AND NOT EXISTS (SELECT 1 FROM counter.partitioned_tables t
                                          WHERE t.parent OPERATOR(pg_catalog.=) run_maintenance.parent) THEN
        RAISE EXCEPTION 'table % is not managed by counter_ext', parent USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT pg_catalog.array_agg(t.parent ORDER BY t.parent::pg_catalog.oid) INTO tables
    FROM counter.partitioned_tables t
    WHERE run_maintenance.parent IS NULL OR t.parent OPERATOR(pg_catalog.=) run_maintenance.parent;
    COMMIT;
    FOREACH p IN ARRAY COALESCE(tables, '{}') LOOP
        CALL counter.partition_maintain_steps(p, c, d, m, o, e);
    END LOOP;
END
$$;

-- The job the background worker (or counter.run_jobs()) runs for a target
-- registered by partition_manage: maintains that table, committing per step.
-- rows_affected = partitions created + partitions dropped or detached + rows
-- moved out of the default partition. A table skipped for locks ends in
-- SQLSTATE 55P03, any other failure in 55000, after its outcome is recorded.
CREATE PROCEDURE counter.job_partition_maintenance(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    p regclass := pg_catalog.to_regclass(target);
    c bigint; d bigint; m bigint; o text; e text;
BEGIN
    IF p IS NULL OR NOT EXISTS (SELECT 1 FROM counter.partitioned_tables t WHERE t.parent OPERATOR(pg_catalog.=) p) THEN
        RAISE EXCEPTION 'table % is not managed by counter_ext', target USING ERRCODE = 'invalid_parameter_value';
    END IF;
    CALL counter.partition_maintain_steps(p, c, d, m, o, e);
    rows_affected := c OPERATOR(pg_catalog.+) d OPERATOR(pg_catalog.+) m;
    IF o OPERATOR(pg_catalog.=) 'skipped' THEN
        RAISE EXCEPTION 'partition maintenance of % skipped', target USING ERRCODE = 'lock_not_available', DETAIL = e;
    ELSIF o OPERATOR(pg_catalog.=) 'error' THEN
        RAISE EXCEPTION 'partition maintenance of % failed', target USING ERRCODE = 'object_not_in_prerequisite_state', DETAIL = e;
    END IF;
END
$$;

-- Puts a table under maintenance: checks it, records it, creates its default
-- partition (if it has none) and its partitions from start_at (default: the
-- current slot) through as_of + premake intervals, registers its job.
-- Returns the number of partitions created.
CREATE FUNCTION counter.partition_manage(parent regclass, control name, part_interval interval DEFAULT '1 hour',
    premake integer DEFAULT 48, retention interval DEFAULT NULL, retention_keep_table boolean DEFAULT false,
    start_at timestamptz DEFAULT NULL, batch_rows integer DEFAULT 10000,
    lock_timeout interval DEFAULT '500 milliseconds', as_of timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
AS $$
DECLARE
    rel pg_class;
    pt pg_partitioned_table;
    att pg_attribute;
    nsp name;
    step bigint;
    made bigint := 0;
    d regclass;
    lo timestamptz;
    t regclass;
    busy_slots timestamptz[];
    covered tstzmultirange;
    s record;
BEGIN
    IF parent IS NULL OR control IS NULL OR part_interval IS NULL OR premake IS NULL
       OR retention_keep_table IS NULL OR batch_rows IS NULL OR lock_timeout IS NULL THEN
        RAISE EXCEPTION 'partition_manage: only retention, start_at and as_of may be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO STRICT rel FROM pg_class c WHERE c.oid = parent;
    SELECT n.nspname INTO STRICT nsp FROM pg_namespace n WHERE n.oid = rel.relnamespace;
    IF rel.relkind <> 'p' THEN
        RAISE EXCEPTION '% is not a partitioned table', parent
            USING ERRCODE = 'wrong_object_type', HINT = 'Declare it PARTITION BY RANGE (a timestamptz column).';
    END IF;
    IF NOT pg_has_role(current_user, rel.relowner, 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of table %', parent USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT * INTO STRICT pt FROM pg_partitioned_table p WHERE p.partrelid = parent;
    IF pt.partstrat <> 'r' OR pt.partnatts <> 1 OR pt.partattrs[0] = 0 THEN
        RAISE EXCEPTION '% is not partitioned by range over one column', parent
            USING ERRCODE = 'wrong_object_type', HINT = 'Declare it PARTITION BY RANGE (a timestamptz column).';
    END IF;
    att := counter.column_of(parent, control);
    IF att.attnum <> pt.partattrs[0] THEN
        RAISE EXCEPTION 'column "%" is not the partition key of %', control, parent
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF att.atttypid <> 'timestamptz'::regtype THEN
        RAISE EXCEPTION 'partition key "%" of % is %, not timestamptz', control, parent, att.atttypid::regtype
            USING ERRCODE = 'datatype_mismatch';
    END IF;
    step := counter.partition_interval_seconds(part_interval);
    IF premake < 1 THEN
        RAISE EXCEPTION 'premake must be at least 1, not %', premake USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF retention IS NOT NULL AND (extract(epoch FROM retention) < step OR retention <= interval '0') THEN
        RAISE EXCEPTION 'retention % is shorter than the partition interval %', retention, part_interval
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF batch_rows < 1 THEN
        RAISE EXCEPTION 'batch_rows must be at least 1, not %', batch_rows USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF lock_timeout <= interval '0' THEN
        RAISE EXCEPTION 'lock_timeout must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM counter.partitioned_tables c WHERE c.parent = partition_manage.parent) THEN
        RAISE EXCEPTION 'table % is already managed', parent USING ERRCODE = 'duplicate_object',
            HINT = 'Use counter.partition_unmanage() first to change its settings.';
    END IF;
    as_of := coalesce(as_of, now());
    INSERT INTO counter.partitioned_tables (parent, control, part_interval, premake, retention, retention_keep_table,
                                            batch_rows, lock_timeout)
    VALUES (parent, control, part_interval, premake, retention, retention_keep_table, batch_rows, lock_timeout);

    d := counter.partition_default(parent);
    IF d IS NOT NULL THEN
        EXECUTE format('SELECT array_agg(DISTINCT counter.partition_slot(%1$I, %3$s)) FROM ONLY %2$s',
                       control, d, step) INTO busy_slots;
    END IF;

    -- The initial partitions, in this transaction; later ones come in bounded steps.
    SELECT coalesce(range_agg(tstzrange(b.lo, b.hi)), '{}'::tstzmultirange) INTO covered
    FROM counter.partition_bounds(parent) b WHERE NOT b.is_default;
    FOR lo IN
        SELECT g FROM generate_series(counter.partition_slot(least(coalesce(start_at, as_of), as_of), step),
                                      counter.partition_slot(as_of, step) + make_interval(secs => step * premake),
                                      make_interval(secs => step)) g
        WHERE NOT (covered && tstzrange(g, g + make_interval(secs => step)))
          AND NOT (g = ANY (coalesce(busy_slots, '{}')))
        ORDER BY g
    LOOP
        PERFORM counter.partition_make_table(parent, lo, lo + make_interval(secs => step), 'direct');
        made := made + 1;
    END LOOP;

    -- The default partition last: each partition made before it skipped the
    -- check of the default partition's rows.
    IF d IS NULL THEN
        EXECUTE format('CREATE TABLE %I.%I PARTITION OF %s DEFAULT', nsp,
                       counter.partition_name_for(rel.relname, '_default'), parent);
        d := counter.partition_default(parent);
        t := d;
        -- privileges as for every partition
        IF rel.relacl IS NOT NULL THEN
            FOR s IN SELECT a.grantee, a.privilege_type, a.is_grantable FROM aclexplode(rel.relacl) a LOOP
                EXECUTE format('GRANT %s ON %s TO %s%s', s.privilege_type, t,
                               CASE WHEN s.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(s.grantee::regrole::text) END,
                               CASE WHEN s.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
            END LOOP;
        END IF;
        IF (SELECT c.relowner FROM pg_class c WHERE c.oid = t) <> rel.relowner THEN
            EXECUTE format('ALTER TABLE %s OWNER TO %I', t, rel.relowner::regrole);
        END IF;
    END IF;

    -- Every partition, those made before too, gets the parent's replica identity.
    PERFORM counter.partition_replicate_like_parent(parent, b.partition, false) FROM counter.partition_bounds(parent) b;
    PERFORM counter.job_register('partition_maintenance', format('%I.%I', nsp, rel.relname),
                                 least(part_interval, interval '1 hour'));
    UPDATE counter.partitioned_tables c SET job_target = format('%I.%I', nsp, rel.relname)
    WHERE c.parent = partition_manage.parent;
    RETURN made;
END
$$;
COMMENT ON FUNCTION counter.partition_manage(regclass, name, interval, integer, interval, boolean, timestamptz, integer, interval, timestamptz) IS
    'puts a range-partitioned event table under hourly (or other) partition maintenance';

-- Takes a table out of maintenance (its partitions stay). Refuses while an
-- hour is half drained (its moved rows sit in a table not yet attached).
CREATE FUNCTION counter.partition_unmanage(parent regclass)
RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    target text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM counter.partitioned_tables c WHERE c.parent = partition_unmanage.parent) THEN
        RETURN false;
    END IF;
    IF NOT pg_try_advisory_xact_lock(1667576885, parent::oid::int4) THEN
        RAISE EXCEPTION 'table % is being maintained right now', parent USING ERRCODE = 'lock_not_available',
            HINT = 'Try again in a moment.';
    END IF;
    IF EXISTS (SELECT 1 FROM counter.partition_staging s WHERE s.parent = partition_unmanage.parent) THEN
        RAISE EXCEPTION 'table % has rows half way out of its default partition', parent
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'CALL counter.run_maintenance() to finish the drain first.';
    END IF;
    SELECT coalesce(t.job_target, format('%I.%I', n.nspname, c.relname)) INTO target
    FROM counter.partitioned_tables t JOIN pg_class c ON c.oid = t.parent JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE t.parent = partition_unmanage.parent;
    PERFORM counter.job_unregister('partition_maintenance', target);
    DELETE FROM counter.partitioned_tables c WHERE c.parent = partition_unmanage.parent;
    RETURN true;
END
$$;

-- A managed table that is dropped is forgotten, with its job. SECURITY
-- DEFINER: it runs for every DROP TABLE in the database, by any role, and
-- must not need privileges on schema counter; it touches only rows of the
-- tables that very command dropped.
CREATE FUNCTION counter.partition_forget_dropped()
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
    EXECUTE FUNCTION counter.partition_forget_dropped();
REVOKE ALL ON FUNCTION counter.partition_forget_dropped() FROM PUBLIC;

-- The state of every managed table.
CREATE FUNCTION counter.partition_state()
RETURNS TABLE (parent regclass, control name, part_interval interval, premake integer, retention interval,
               partitions bigint, oldest timestamptz, newest timestamptz, hours_ahead numeric,
               default_partition regclass, rows_in_default bigint, rows_staged bigint,
               last_run_at timestamptz, last_outcome text, last_error text,
               last_created bigint, last_dropped bigint, last_moved bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c counter.partitioned_tables;
    stg regclass;
BEGIN
    FOR c IN SELECT * FROM counter.partitioned_tables p ORDER BY p.parent::oid LOOP
        parent := c.parent; control := c.control; part_interval := c.part_interval; premake := c.premake;
        retention := c.retention; last_run_at := c.last_run_at; last_outcome := c.last_outcome;
        last_error := c.last_error; last_created := c.last_created; last_dropped := c.last_dropped;
        last_moved := c.last_moved;
        SELECT count(*), min(b.lo), max(b.hi) INTO partitions, oldest, newest
        FROM counter.partition_bounds(c.parent) b WHERE NOT b.is_default;
        hours_ahead := round(extract(epoch FROM newest - now()) / 3600, 2);
        default_partition := counter.partition_default(c.parent);
        rows_in_default := NULL;
        IF default_partition IS NOT NULL AND has_table_privilege(default_partition, 'SELECT') THEN
            EXECUTE format('SELECT count(*) FROM ONLY %s', default_partition) INTO rows_in_default;
        END IF;
        rows_staged := NULL;
        SELECT s.staging INTO stg FROM counter.partition_staging s WHERE s.parent = c.parent;
        IF stg IS NOT NULL AND has_table_privilege(stg, 'SELECT') THEN
            EXECUTE format('SELECT count(*) FROM %s', stg) INTO rows_staged;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

CREATE VIEW counter.partition_status AS SELECT * FROM counter.partition_state();
COMMENT ON VIEW counter.partition_status IS
    'managed partitioned tables: oldest and newest partition, hours premade ahead, rows in default, last maintenance';
GRANT SELECT ON counter.partition_status TO PUBLIC;

REVOKE ALL ON FUNCTION counter.partition_make_table(regclass, timestamptz, timestamptz, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.partition_attach(regclass, regclass, timestamptz, timestamptz, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.partition_move_rows(regclass, regclass, timestamptz, timestamptz, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.partition_move(regclass, regclass, regclass, timestamptz, timestamptz, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.partition_replicate_like_parent(regclass, regclass, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.partition_step(regclass, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.partition_record(regclass, text, text, bigint, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.partition_maintain(regclass, timestamptz, integer) FROM PUBLIC;
REVOKE ALL ON PROCEDURE counter.partition_maintain_steps(regclass, bigint, bigint, bigint, text, text) FROM PUBLIC;
REVOKE ALL ON PROCEDURE counter.run_maintenance(regclass) FROM PUBLIC;
REVOKE ALL ON PROCEDURE counter.job_partition_maintenance(text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.partition_manage(regclass, name, interval, integer, interval, boolean, timestamptz, integer, interval, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.partition_unmanage(regclass) FROM PUBLIC;
