-- Partition maintenance: the functions and views that changed in 1.2 (the
-- catalog tables and the functions kept from 1.1 are in 40_partition.sql).
-- Only functions and views: the update from 1.1 includes this file as it is.

-- The owner of a managed table: the role its maintenance runs as.
CREATE OR REPLACE FUNCTION counter_internal.partition_owner(parent regclass)
RETURNS regrole
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT c.relowner::pg_catalog.regrole FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) parent $$;

-- counter_internal.partition_slot of column col, as an SQL expression: the
-- SQL run as a table's owner (who may not execute counter_internal's
-- functions) computes the slot inline.
CREATE OR REPLACE FUNCTION counter_internal.partition_slot_sql(col name, step_seconds bigint)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.format('pg_catalog.to_timestamp((pg_catalog.floor(EXTRACT(epoch FROM %1$I::pg_catalog.timestamptz) / %2$s) * %2$s)::double precision)',
                             col, step_seconds)
$$;

-- Runs a command built by this file (identifiers through %I or regclass
-- output, values as literals of timestamptz or numbers only) as the owner of
-- parent, restricted. Returns the rows it processed.
CREATE OR REPLACE FUNCTION counter_internal.partition_exec(parent regclass, sql text)
RETURNS bigint
LANGUAGE sql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT counter_internal.exec_as_owner_cmd(counter_internal.partition_owner(parent), sql, true) $$;

-- The parent's columns that an INSERT can list (not dropped, not generated).
CREATE OR REPLACE FUNCTION counter_internal.partition_column_list(parent regclass)
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
-- is replicated as its parent is, set as the parent's owner.
--   REPLICA IDENTITY: PostgreSQL does not copy it, and a partition that is
--   published without one refuses UPDATE and DELETE. USING INDEX maps to the
--   partition's index attached to the parent's identity index, so t must be
--   attached already.
--   Publications that list partitions of the parent one by one (not the
--   parent, an ancestor, their schema, nor all tables, which include new
--   partitions by themselves) get t too, when t is a new partition. That
--   needs the publication's owner (ALTER PUBLICATION); a maintenance run as
--   another role warns and goes on.
CREATE OR REPLACE FUNCTION counter_internal.partition_replicate_like_parent(parent regclass, t regclass, new_partition boolean)
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
        WHEN 'f' THEN PERFORM counter_internal.partition_exec(parent, format('ALTER TABLE %s REPLICA IDENTITY FULL', t));
        WHEN 'n' THEN PERFORM counter_internal.partition_exec(parent, format('ALTER TABLE %s REPLICA IDENTITY NOTHING', t));
        WHEN 'd' THEN PERFORM counter_internal.partition_exec(parent, format('ALTER TABLE %s REPLICA IDENTITY DEFAULT', t));
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
            PERFORM counter_internal.partition_exec(parent, format('ALTER TABLE %s REPLICA IDENTITY USING INDEX %I', t,
                (SELECT c.relname FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) idx)));
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
            PERFORM counter_internal.partition_exec(parent, format('ALTER PUBLICATION %I ADD TABLE %s', pub, t));
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
CREATE OR REPLACE FUNCTION counter_internal.partition_published(parent regclass)
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

-- Citus (doc/citus.md): the distribution column of parent when Citus
-- hash-distributes it, NULL when Citus does not distribute it. Raises for a
-- table Citus holds in another way (a reference, single-shard or local
-- table with metadata), whose default partition is not drained.
CREATE OR REPLACE FUNCTION counter_internal.partition_citus_column(parent regclass)
RETURNS name
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    col name;
    method "char";
BEGIN
    IF NOT counter_internal.citus_distributed(parent) THEN
        RETURN NULL;
    END IF;
    EXECUTE 'SELECT p.partmethod, CASE WHEN p.partmethod OPERATOR(pg_catalog.=) ''h'' '
            'THEN pg_catalog.column_to_column_name(p.logicalrelid, p.partkey) END '
            'FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid OPERATOR(pg_catalog.=) $1'
        INTO method, col USING parent;
    IF col IS NULL THEN
        RAISE EXCEPTION 'the default partition of %, a table Citus holds but does not hash-distribute (method %), is not drained',
                parent, coalesce(method::text, 'none')
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Drain it by hand, or hash-distribute the table (create_distributed_table).';
    END IF;
    RETURN col;
END
$$;

-- Creates, as the parent's owner, the standalone table that becomes the
-- partition [lo, hi): the parent's columns, defaults, constraints and indexes
-- (LIKE ... INCLUDING ALL, so ATTACH adopts the indexes instead of building
-- them), privileges and tablespace. With bounded = true it also gets NOT NULL and a
-- CHECK of the bounds, so rows put in it are checked on the way in and ATTACH
-- need not scan it. With how = 'direct' it is created straight as a partition
-- (CREATE TABLE ... PARTITION OF: faster, but it locks the parent in ACCESS
-- EXCLUSIVE mode, so only partition_manage uses it, on a table being set up).
CREATE OR REPLACE FUNCTION counter_internal.partition_make_table(parent regclass, lo timestamptz, hi timestamptz, how text)
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
    dist_col name;
BEGIN
    SELECT * INTO STRICT cfg FROM counter.partitioned_tables c WHERE c.parent OPERATOR(pg_catalog.=) partition_make_table.parent;
    SELECT * INTO STRICT rel FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) partition_make_table.parent;
    SELECT n.nspname INTO STRICT nsp FROM pg_namespace n WHERE n.oid OPERATOR(pg_catalog.=) rel.relnamespace;
    tname := counter_internal.partition_name_for(rel.relname, counter_internal.partition_suffix(lo, cfg.part_interval));
    IF how = 'direct' THEN
        PERFORM counter_internal.partition_exec(parent, format('CREATE TABLE %I.%I PARTITION OF %I.%I FOR VALUES FROM (%L) TO (%L)',
                       nsp, tname, nsp, rel.relname, lo, hi));
        PERFORM counter_internal.partition_replicate_like_parent(parent, format('%I.%I', nsp, tname)::regclass, true);
    ELSE
        PERFORM counter_internal.partition_exec(parent, format('CREATE TABLE %I.%I (LIKE %I.%I INCLUDING ALL)%s', nsp, tname, nsp, rel.relname,
                       CASE WHEN rel.reltablespace <> 0
                            THEN format(' TABLESPACE %I', (SELECT s.spcname FROM pg_tablespace s
                                                           WHERE s.oid = rel.reltablespace))
                            ELSE '' END));
    END IF;
    t := format('%I.%I', nsp, tname)::regclass;
    IF how = 'bounded' THEN
        PERFORM counter_internal.partition_exec(parent, format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL, ADD CONSTRAINT counter_ext_bounds CHECK (%I >= %L AND %I < %L)',
                       t, cfg.control, cfg.control, lo, cfg.control, hi));
        -- Citus: rows are moved into it shard by shard (colocated with the
        -- parent, so the move is pushed down), then it is attached. (A
        -- standalone table is distributed by the ATTACH itself.)
        dist_col := counter_internal.partition_citus_column(parent);
        IF dist_col IS NOT NULL THEN
            PERFORM counter_internal.partition_exec(parent, format(
                'SELECT pg_catalog.create_distributed_table(%L, %L, colocate_with => %L)', t, dist_col, parent));
        END IF;
    END IF;
    -- PostgreSQL does not copy a parent's privileges to new partitions.
    IF rel.relacl IS NOT NULL THEN
        FOR g IN SELECT a.grantee, a.privilege_type, a.is_grantable FROM aclexplode(rel.relacl) a
                 WHERE a.grantee OPERATOR(pg_catalog.<>) rel.relowner LOOP
            PERFORM counter_internal.partition_exec(parent, format('GRANT %s ON %s TO %s%s', g.privilege_type, t,
                           CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END,
                           CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END));
        END LOOP;
    END IF;
    RETURN t;
END
$$;

-- Moves up to max_rows rows of [lo, hi) (every row when lo is NULL) from
-- ONLY from_rel into to_rel (the parent: the rows are routed to its
-- partitions), all of them when max_rows is NULL, in one statement: a row is
-- deleted and inserted atomically, so it is never lost nor duplicated; the statement runs as the parent's owner (a CHECK
-- constraint or default calling the owner's function runs as the owner).
-- Triggers and foreign-key actions do not fire (a move is not a delete):
-- that needs session_replication_role = replica, which is set only for a
-- table whose owner is a superuser; tables of other owners may move rows only
-- without triggers and without referencing foreign keys.
CREATE OR REPLACE FUNCTION counter_internal.partition_move(parent regclass, from_rel regclass, to_rel regclass, lo timestamptz,
                                                hi timestamptz, max_rows bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
AS $$
DECLARE
    ctl name := (SELECT c.control FROM counter.partitioned_tables c WHERE c.parent OPERATOR(pg_catalog.=) partition_move.parent);
    cols text := counter_internal.partition_column_list(parent);
    old_role text := current_setting('session_replication_role');
    n bigint;
    deleted bigint;
BEGIN
    IF (SELECT r.rolsuper FROM pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) counter_internal.partition_owner(parent)) THEN
        PERFORM set_config('session_replication_role', 'replica', true);
    ELSIF EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid IN (from_rel, to_rel) AND NOT g.tgisinternal)
       OR EXISTS (SELECT 1 FROM pg_constraint k WHERE k.contype OPERATOR(pg_catalog.=) 'f'
                  AND k.confrelid IN (parent, from_rel)) THEN
        RAISE EXCEPTION 'moving rows out of the default partition of % needs a table owned by a superuser', parent
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'The table has triggers or is referenced by foreign keys, which must not fire for a move.';
    END IF;
    -- the row triggers of replicated counters and rollups fire in replica
    -- mode: they are told that this is a move (src/source.cpp)
    PERFORM counter_internal.rows_moving(true);
    IF counter_internal.citus_distributed(parent) THEN
        -- Citus plans no DELETE by ctid of a distributed table: the rows of
        -- the range are copied, then deleted by the same range, each
        -- statement pushed down to the shards (from_rel and to_rel are
        -- colocated). The caller holds from_rel in ACCESS EXCLUSIVE mode, so
        -- both statements see the same rows; a whole range only (no batches).
        IF max_rows IS NOT NULL THEN
            RAISE EXCEPTION 'rows of a table Citus distributes are moved a whole range at a time'
                USING ERRCODE = 'feature_not_supported';
        END IF;
        n := counter_internal.partition_exec(parent,
            format('INSERT INTO %1$s (%2$s) OVERRIDING SYSTEM VALUE SELECT %2$s FROM ONLY %3$s %4$s', to_rel, cols, from_rel,
                   CASE WHEN lo IS NULL THEN '' ELSE format('WHERE %1$I >= %2$L AND %1$I < %3$L', ctl, lo, hi) END));
        deleted := counter_internal.partition_exec(parent,
            format('DELETE FROM ONLY %1$s %2$s', from_rel,
                   CASE WHEN lo IS NULL THEN '' ELSE format('WHERE %1$I >= %2$L AND %1$I < %3$L', ctl, lo, hi) END));
        IF deleted OPERATOR(pg_catalog.<>) n THEN
            RAISE EXCEPTION 'moving rows of % out of %: % rows copied but % deleted', parent, from_rel, n, deleted
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Another session wrote to the default partition during the move; the next run retries.';
        END IF;
    ELSE
        n := counter_internal.partition_exec(parent,
            format('WITH moved AS (DELETE FROM ONLY %1$s WHERE ctid = ANY (ARRAY(SELECT ctid FROM ONLY %1$s '
                   '%2$s %3$s)) RETURNING %4$s) '
                   'INSERT INTO %5$s (%4$s) OVERRIDING SYSTEM VALUE SELECT %4$s FROM moved',
                   from_rel,
                   CASE WHEN lo IS NULL THEN '' ELSE format('WHERE %1$I >= %2$L AND %1$I < %3$L', ctl, lo, hi) END,
                   CASE WHEN max_rows IS NULL THEN '' ELSE format('LIMIT %s', max_rows) END, cols, to_rel));
    END IF;
    PERFORM counter_internal.rows_moving(false);
    PERFORM set_config('session_replication_role', old_role, true);
    RETURN n;
END
$$;

-- Attaches a table made by partition_make_table as the partition [lo, hi),
-- as the parent's owner, with the parent's replica identity. A bounded t
-- holds rows a drain moved out of the default partition. When deletes from
-- that partition are published, the move was published as DELETEs only (t
-- is not published before it is attached), so a subscriber would lose the
-- rows: then t is set aside under another name, an empty partition is
-- attached in its place, and the rows are moved into it (published as
-- INSERTs, as the partition's or the root's), in this transaction. The
-- parent's statement triggers do not fire for that (a move is no insert; a
-- row trigger cloned to the partition is handled as for every move). A
-- subscriber applies the drain's transaction as deletes from the default
-- partition and inserts of the same rows.
CREATE OR REPLACE FUNCTION counter_internal.partition_attach(parent regclass, t regclass, lo timestamptz, hi timestamptz, bounded boolean)
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
    IF bounded AND counter_internal.partition_published(parent) THEN
        SELECT x.e INTO STRICT has_rows FROM counter_internal.exec_as_owner(counter_internal.partition_owner(parent),
            format('SELECT EXISTS (SELECT 1 FROM ONLY %s) WHERE $1', t), true) AS x(e boolean);
    END IF;
    IF has_rows THEN
        held_name := counter_internal.partition_name_for(
            (SELECT c.relname FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) parent),
            counter_internal.partition_suffix(lo, (SELECT c.part_interval FROM counter.partitioned_tables c
                                          WHERE c.parent OPERATOR(pg_catalog.=) partition_attach.parent)) || '_held');
        PERFORM counter_internal.partition_exec(parent, format('ALTER TABLE %s RENAME TO %I', t, held_name));
        held := t;
        t := counter_internal.partition_make_table(parent, lo, hi, 'bounded');
    END IF;
    PERFORM counter_internal.partition_exec(parent,
        format('ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%L) TO (%L)', parent, t, lo, hi));
    IF bounded THEN
        PERFORM counter_internal.partition_exec(parent, format('ALTER TABLE %s DROP CONSTRAINT counter_ext_bounds', t));
    END IF;
    PERFORM counter_internal.partition_replicate_like_parent(parent, t, true);
    IF held IS NOT NULL THEN
        PERFORM counter_internal.partition_move(parent, held, t, NULL, NULL, NULL);
        PERFORM counter_internal.partition_exec(parent, format('DROP TABLE %s', held));
    END IF;
END
$$;

-- Moves up to max_rows rows of [lo, hi) from the default partition into t
-- (all of them when max_rows is NULL): counter_internal.partition_move.
CREATE OR REPLACE FUNCTION counter_internal.partition_move_rows(parent regclass, t regclass, lo timestamptz, hi timestamptz, max_rows bigint)
RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT counter_internal.partition_move(parent, counter.partition_default(parent), t, lo, hi, max_rows)
$$;

-- Finishes or continues the staged drain stg (partition_step): moves
-- another batch of its slot from the default partition d, or, when what is
-- left is one batch at most, the rest under lock, then attaches the staging
-- table. status is 'more' either way.
CREATE OR REPLACE FUNCTION counter_internal.partition_drain_staged(parent regclass, cfg counter.partitioned_tables,
    d regclass, stg counter.partition_staging, OUT created integer, OUT moved bigint, OUT status text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
AS $$
DECLARE
    n bigint;
BEGIN
    created := 0; status := 'more';
    IF d IS NULL THEN
        RAISE EXCEPTION 'table % lost its default partition during a drain', parent
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    SELECT x.n INTO n FROM counter_internal.exec_as_owner(counter_internal.partition_owner(parent),
        format('SELECT count(*) FROM (SELECT 1 FROM ONLY %s WHERE %I >= %L AND %I < %L LIMIT %s) x WHERE $1',
               d, cfg.control, stg.lo, cfg.control, stg.hi, cfg.batch_rows OPERATOR(pg_catalog.+) 1), true)
        AS x(n bigint);
    IF n OPERATOR(pg_catalog.>) cfg.batch_rows THEN
        moved := counter_internal.partition_move_rows(parent, stg.staging, stg.lo, stg.hi, cfg.batch_rows);
        RETURN;
    END IF;
    PERFORM counter_internal.partition_exec(parent, format('LOCK TABLE %s IN SHARE MODE', parent));
    PERFORM counter_internal.partition_exec(parent, format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', d));
    moved := counter_internal.partition_move_rows(parent, stg.staging, stg.lo, stg.hi, NULL);
    PERFORM counter_internal.partition_attach(parent, stg.staging, stg.lo, stg.hi, true);
    DELETE FROM counter.partition_staging s WHERE s.parent OPERATOR(pg_catalog.=) partition_drain_staged.parent;
    created := 1;
END
$$;

-- Creates up to cfg.step_partitions missing partitions (partition_step):
-- the slots of step seconds from win_lo up to upto that overlap no
-- partition (covered) and have no rows in the default partition d (below
-- drain_hi). A slot writers may be filling right now (up to the one after
-- cur) is made with writers of the parent held, so none routes a row there
-- with a stale partition list (it would fail after the ATTACH). Each slot in
-- a subtransaction of its own: a slot that cannot be made (a row arrived for
-- it in the default partition: 23514) is reported in skipped, the others are
-- made; running out of lock time (55P03) is for the whole attempt. covered
-- comes back with the slots made.
CREATE OR REPLACE FUNCTION counter_internal.partition_create_slots(parent regclass, cfg counter.partitioned_tables,
    d regclass, win_lo timestamptz, upto timestamptz, cur timestamptz, step bigint, drain_hi timestamptz,
    INOUT covered tstzmultirange, OUT created integer, OUT skipped jsonb)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
AS $$
DECLARE
    busy_slots timestamptz[];
    todo timestamptz[];
    near boolean := false;
    lo timestamptz;
    hi timestamptz;
    t regclass;
BEGIN
    created := 0; skipped := '[]';
    IF d IS NOT NULL THEN
        SELECT x.a INTO busy_slots FROM counter_internal.exec_as_owner(counter_internal.partition_owner(parent),
            format('SELECT array_agg(DISTINCT %6$s) FROM ONLY %2$s '
                   'WHERE %1$I >= %3$L AND %1$I < %5$L AND $1',
                   cfg.control, d, win_lo, step, drain_hi,
                   counter_internal.partition_slot_sql(cfg.control, step)), true) AS x(a timestamptz[]);
    END IF;
    SELECT array_agg(g ORDER BY g) INTO todo FROM (
        SELECT g FROM generate_series(win_lo, upto, make_interval(secs => step)) g
        WHERE NOT (covered && tstzrange(g, g + make_interval(secs => step)))
          AND NOT (g = ANY (coalesce(busy_slots, '{}')))
        ORDER BY g LIMIT cfg.step_partitions) s;
    FOREACH lo IN ARRAY coalesce(todo, '{}') LOOP
        hi := lo + make_interval(secs => step);
        BEGIN
            IF NOT near AND lo <= cur + make_interval(secs => step) THEN
                PERFORM counter_internal.partition_exec(parent, format('LOCK TABLE %s IN SHARE MODE', parent));
                near := true;
            END IF;
            t := counter_internal.partition_make_table(parent, lo, hi, 'standalone');
            PERFORM counter_internal.partition_attach(parent, t, lo, hi, false);
            covered := covered + tstzmultirange(tstzrange(lo, hi));
            created := created + 1;
        EXCEPTION
            WHEN lock_not_available THEN RAISE;
            WHEN OTHERS THEN
                near := false; -- the subtransaction's lock went with it
                skipped := skipped || pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
                    'slot', lo, 'action', 'create', 'error', SQLERRM, 'sqlstate', SQLSTATE));
        END;
    END LOOP;
END
$$;

-- Drains the default partition d (partition_step), oldest slot first: up to
-- cfg.step_partitions slots of [drain_lo, drain_hi) of at most batch_rows
-- rows each, each moved and attached under a lock that holds writers for
-- that moment; a larger slot starts a staged drain (one batch per step, the
-- last under lock), as the first slot of a step only. whole_slots (Citus):
-- each slot drained whole, under lock, never staged. Each slot in a
-- subtransaction of its own: a slot whose rows cannot be moved is reported
-- in skipped (its rows stay in the default partition), the next slots are
-- drained. more: the table needs another step. covered comes back with the
-- partitions attached.
CREATE OR REPLACE FUNCTION counter_internal.partition_drain_slots(parent regclass, cfg counter.partitioned_tables,
    d regclass, drain_lo timestamptz, drain_hi timestamptz, step bigint, whole_slots boolean,
    INOUT covered tstzmultirange, OUT created integer, OUT moved bigint, OUT more boolean, OUT skipped jsonb)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
AS $$
DECLARE
    scan_lo timestamptz := drain_lo;
    locked boolean := false;
    lo timestamptz;
    hi timestamptz;
    n bigint;
    k bigint;
    t regclass;
BEGIN
    created := 0; moved := 0; more := false; skipped := '[]';
    FOR i IN 1..cfg.step_partitions LOOP
        lo := NULL;
        SELECT x.t INTO lo FROM counter_internal.exec_as_owner(counter_internal.partition_owner(parent),
            format('SELECT %1$I FROM ONLY %2$s WHERE %1$I >= %3$L AND %1$I < %4$L AND $1 ORDER BY %1$I LIMIT 1',
                   cfg.control, d, scan_lo, drain_hi), true) AS x(t timestamptz);
        EXIT WHEN lo IS NULL;
        lo := counter_internal.partition_slot(lo, step);
        hi := lo + make_interval(secs => step);
        scan_lo := hi;
        SELECT x.n INTO n FROM counter_internal.exec_as_owner(counter_internal.partition_owner(parent),
            format('SELECT count(*) FROM (SELECT 1 FROM ONLY %s WHERE %I >= %L AND %I < %L LIMIT %s) x WHERE $1',
                   d, cfg.control, lo, cfg.control, hi, cfg.batch_rows + 1), true) AS x(n bigint);
        IF whole_slots THEN
            n := least(n, cfg.batch_rows); -- drained whole, under lock
        END IF;
        IF n > cfg.batch_rows AND i > 1 THEN
            EXIT; -- the next step stages it
        END IF;
        BEGIN
            IF covered && tstzrange(lo, hi) THEN
                RAISE EXCEPTION 'rows of % in the default partition of % cannot be moved: the slot overlaps an existing partition',
                    lo, parent USING ERRCODE = 'object_not_in_prerequisite_state';
            END IF;
            t := counter_internal.partition_make_table(parent, lo, hi, 'bounded');
            IF n > cfg.batch_rows THEN
                INSERT INTO counter.partition_staging (parent, staging, lo, hi) VALUES (parent, t, lo, hi);
                moved := counter_internal.partition_move_rows(parent, t, lo, hi, cfg.batch_rows);
            ELSE
                IF NOT locked THEN
                    PERFORM counter_internal.partition_exec(parent, format('LOCK TABLE %s IN SHARE MODE', parent));
                    PERFORM counter_internal.partition_exec(parent, format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', d));
                    locked := true;
                END IF;
                k := counter_internal.partition_move_rows(parent, t, lo, hi, NULL);
                PERFORM counter_internal.partition_attach(parent, t, lo, hi, true);
                -- (variables are not rolled back with a subtransaction: counted once done)
                covered := covered + tstzmultirange(tstzrange(lo, hi));
                moved := moved + k;
                created := created + 1;
            END IF;
            more := true;
        EXCEPTION
            WHEN lock_not_available THEN RAISE;
            WHEN OTHERS THEN
                locked := false; -- the subtransaction's locks went with it
                skipped := skipped || pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
                    'slot', lo, 'action', 'drain', 'error', SQLERRM, 'sqlstate', SQLSTATE));
                CONTINUE;
        END;
        EXIT WHEN n > cfg.batch_rows; -- a staged drain: one batch per step
    END LOOP;
END
$$;

-- Drops (or, with retention_keep_table, detaches) the partitions expired
-- (partition_step: at most step_partitions, wholly past retention); how many.
CREATE OR REPLACE FUNCTION counter_internal.partition_drop_expired(parent regclass, cfg counter.partitioned_tables,
    expired regclass[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t regclass;
    dropped integer := 0;
BEGIN
    FOREACH t IN ARRAY coalesce(expired, '{}') LOOP
        IF cfg.retention_keep_table THEN
            PERFORM counter_internal.partition_exec(parent, format('ALTER TABLE %s DETACH PARTITION %s', parent, t));
        ELSE
            PERFORM counter_internal.partition_exec(parent, format('DROP TABLE %s', t));
        END IF;
        dropped := dropped + 1;
    END LOOP;
    RETURN dropped;
END
$$;

-- The slots partition_step works on for cfg at as_of (in UTC): step (the
-- interval in seconds), cur (the slot of as_of), upto (the last slot to make,
-- premake intervals ahead), cutoff (as_of - retention; NULL without one), and
-- the window [drain_lo, drain_hi): from the slot of as_of - retention (7
-- days without one) to the end of upto's slot. No partition is made outside
-- it, for a gap or for a row of the default partition, however old or far
-- ahead.
CREATE OR REPLACE FUNCTION counter_internal.partition_window(cfg counter.partitioned_tables, as_of timestamptz,
    OUT step bigint, OUT cur timestamptz, OUT upto timestamptz, OUT cutoff timestamptz,
    OUT drain_lo timestamptz, OUT drain_hi timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
AS $$
BEGIN
    step := counter_internal.partition_interval_seconds(cfg.part_interval);
    cur := counter_internal.partition_slot(as_of, step);
    upto := cur OPERATOR(pg_catalog.+) make_interval(secs => step OPERATOR(pg_catalog.*) cfg.premake);
    cutoff := CASE WHEN cfg.retention IS NOT NULL THEN as_of OPERATOR(pg_catalog.-) cfg.retention END;
    drain_lo := counter_internal.partition_slot(coalesce(cutoff, as_of OPERATOR(pg_catalog.-) interval '7 days'), step);
    drain_hi := upto OPERATOR(pg_catalog.+) make_interval(secs => step);
END
$$;

-- One look at the partitions of parent but its default one (partition_step):
-- what they cover, the oldest start, and the first n (oldest first) wholly
-- at or before cutoff (as_of - retention).
CREATE OR REPLACE FUNCTION counter_internal.partition_layout(parent regclass, cutoff timestamptz, n integer,
    OUT covered tstzmultirange, OUT oldest timestamptz, OUT expired regclass[])
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(range_agg(tstzrange(b.lo, b.hi)), '{}'::tstzmultirange),
           min(b.lo) FILTER (WHERE b.lo > '-infinity'),
           (array_agg(b.partition ORDER BY b.hi) FILTER (WHERE b.hi <= cutoff))[1:n]
    FROM counter.partition_bounds(parent) b WHERE NOT b.is_default
$$;

-- The rows of the default partition d of parent outside [lo, hi), read as
-- the table's owner (partition_step: left there, reported).
CREATE OR REPLACE FUNCTION counter_internal.partition_outside(parent regclass, control name, d regclass,
    lo timestamptz, hi timestamptz)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
AS $$
DECLARE
    n bigint;
BEGIN
    SELECT x.n INTO n FROM counter_internal.exec_as_owner(counter_internal.partition_owner(parent),
        format('SELECT count(*) FROM ONLY %1$s WHERE NOT (%2$I >= %3$L AND %2$I < %4$L) AND $1',
               d, control, lo, hi), true) AS x(n bigint);
    RETURN n;
END
$$;

-- One bounded step of maintenance of one table, in the caller's transaction:
-- finish or continue a staged drain (partition_drain_staged); else create up
-- to step_partitions missing partitions up to as_of + premake intervals
-- (partition_create_slots); else drain slots of the default partition (at
-- most batch_rows rows each, or a slot staged: partition_drain_slots), only
-- slots inside [as_of - retention (or 7 days), as_of + premake]; then drop/detach up to
-- step_partitions partitions past retention (partition_drop_expired). When
-- done, outside = the rows of the default partition outside that window
-- (left there). status: 'more' (call again), 'done', 'busy' (another session
-- maintains the table), 'skipped' (locks not obtained within lock_timeout
-- after lock_retries retries), 'error' (message in error). Every statement
-- on the table runs as its owner.
CREATE OR REPLACE FUNCTION counter_internal.partition_step(parent regclass, as_of timestamptz,
    OUT created integer, OUT dropped integer, OUT moved bigint, OUT status text, OUT error text,
    OUT outside bigint, OUT skipped jsonb)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
SET lock_timeout = 0
AS $$
DECLARE
    cfg counter.partitioned_tables;
    stg counter.partition_staging;
    w record; -- counter_internal.partition_window
    d regclass;
    covered tstzmultirange;
    win_lo timestamptz;
    expired regclass[];
    action text;
    attempt int := 0;
    c record;
BEGIN
    created := 0; dropped := 0; moved := 0; status := 'done'; skipped := '[]';
    as_of := coalesce(as_of, now());
    SELECT * INTO cfg FROM counter.partitioned_tables x WHERE x.parent OPERATOR(pg_catalog.=) partition_step.parent;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table % is not managed by counter_ext', parent USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT counter_internal.lock_take('partition', parent::oid::bigint, wait => false) THEN
        status := 'busy';
        RETURN;
    END IF;
    PERFORM set_config('lock_timeout', (extract(epoch FROM cfg.lock_timeout) OPERATOR(pg_catalog.*) 1000)::bigint::text, true);
    d := counter.partition_default(parent);
    SELECT * INTO w FROM counter_internal.partition_window(cfg, as_of);
    LOOP -- attempts: a lock_not_available rolls the attempt back, waits, retries
        attempt := attempt OPERATOR(pg_catalog.+) 1;
        BEGIN
            created := 0; dropped := 0; moved := 0; status := 'done'; outside := NULL; skipped := '[]';
            SELECT * INTO stg FROM counter.partition_staging s WHERE s.parent OPERATOR(pg_catalog.=) partition_step.parent;
            IF FOUND THEN
                action := 'drain';
                SELECT x.created, x.moved, x.status INTO created, moved, status
                FROM counter_internal.partition_drain_staged(parent, cfg, d, stg) x;
                EXIT;
            END IF;
            SELECT * INTO covered, win_lo, expired FROM counter_internal.partition_layout(parent, w.cutoff, cfg.step_partitions);
            -- Missing slots from the oldest partition (or the current slot) up to
            -- as_of + premake, inside the window.
            action := 'create';
            win_lo := greatest(least(coalesce(counter_internal.partition_slot(win_lo, w.step), w.cur), w.cur), w.drain_lo);
            SELECT x.covered, x.created, x.skipped INTO covered, created, skipped
            FROM counter_internal.partition_create_slots(parent, cfg, d, win_lo, w.upto, w.cur, w.step, w.drain_hi, covered) x;
            IF created >= cfg.step_partitions THEN
                status := 'more';
                EXIT; -- bounded: the rest in the next step
            END IF;
            action := 'drain';
            IF d IS NOT NULL THEN
                SELECT * INTO c FROM counter_internal.partition_drain_slots(parent, cfg, d, w.drain_lo, w.drain_hi, w.step,
                                                                             counter_internal.citus_distributed(parent), covered) x;
                created := created + c.created; moved := moved + c.moved; skipped := skipped || c.skipped;
                status := CASE WHEN c.more THEN 'more' ELSE status END;
            END IF;
            -- Retention, last (its ACCESS EXCLUSIVE lock on the parent is held only
            -- until the commit).
            action := CASE WHEN expired IS NULL THEN action ELSE 'retention' END;
            dropped := counter_internal.partition_drop_expired(parent, cfg, expired);
            status := CASE WHEN dropped >= cfg.step_partitions THEN 'more' ELSE status END;
            -- Done: count what is left outside the window (reported, left there).
            IF status = 'done' AND d IS NOT NULL THEN
                outside := counter_internal.partition_outside(parent, cfg.control, d, w.drain_lo, w.drain_hi);
            END IF;
        EXCEPTION
            -- the attempt was rolled back whole, its skipped slots too
            WHEN lock_not_available THEN
                IF attempt OPERATOR(pg_catalog.<=) cfg.lock_retries THEN
                    PERFORM pg_sleep(least(extract(epoch FROM cfg.lock_timeout), 1));
                    CONTINUE;
                END IF;
                status := 'skipped';
                error := format('%s: could not lock %s within lock_timeout %s (%s attempts): %s',
                                action, parent, cfg.lock_timeout, attempt, SQLERRM);
            WHEN check_violation THEN
                -- a row arrived in the default partition for a slot being
                -- created: the next attempt sees it and drains that slot.
                CONTINUE WHEN action = 'create' AND attempt <= cfg.lock_retries;
                status := 'error';
                error := format('%s: %s (SQLSTATE %s)', action, SQLERRM, SQLSTATE);
            WHEN OTHERS THEN
                status := 'error';
                error := format('%s: %s (SQLSTATE %s)', action, SQLERRM, SQLSTATE);
        END;
        EXIT;
    END LOOP;
    IF status IN ('skipped', 'error') THEN
        created := 0; dropped := 0; moved := 0; outside := NULL; skipped := '[]';
    END IF;
END
$$;

-- How many indexes the partitioned table itself has (counter.partitioned_tables.parent_indexes).
CREATE OR REPLACE FUNCTION counter_internal.partition_index_count(parent regclass)
RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.count(*)::integer FROM pg_catalog.pg_index i WHERE i.indrelid OPERATOR(pg_catalog.=) parent
$$;

-- Records a maintenance run of one table in the one run record
-- (counter.job_runs, kind 'partition_maintenance': the job's run, or a row
-- of its own for a direct call; the partitions made, dropped and moved in
-- info, the slots skipped in 'skipped'); a WARNING names the rows left
-- outside the window; slots skipped raise the alert (counter_internal.alert:
-- WARNING and NOTIFY counter_ext_drift).
CREATE OR REPLACE FUNCTION counter_internal.partition_record(parent regclass, outcome text, error text,
                                                  created bigint, dropped bigint, moved bigint, outside bigint,
                                                  failure jsonb DEFAULT NULL, skipped jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    run bigint;
    indexes integer := counter_internal.partition_index_count(parent);
BEGIN
    skipped := NULLIF(coalesce(skipped, '[]'), '[]');
    -- the table's indexes as its owner has them now (a run is an armed
    -- job's, or its owner's own call)
    UPDATE counter.partitioned_tables c SET parent_indexes = indexes
    WHERE c.parent OPERATOR(pg_catalog.=) partition_record.parent AND c.parent_indexes IS DISTINCT FROM indexes;
    run := counter_internal.run_begin('partition_maintenance',
            coalesce((SELECT c.job_target FROM counter.partitioned_tables c
                      WHERE c.parent OPERATOR(pg_catalog.=) partition_record.parent), parent::text),
            NULL, '{}');
    PERFORM counter_internal.run_end(run,
        pg_catalog.jsonb_build_object('outcome', outcome, 'error', error, 'created', created, 'dropped', dropped,
                                      'moved', moved, 'outside', outside, 'skipped', skipped),
        rows_affected => created OPERATOR(pg_catalog.+) dropped OPERATOR(pg_catalog.+) moved,
        error => CASE WHEN outcome OPERATOR(pg_catalog.=) 'error'
                      THEN coalesce(failure, pg_catalog.jsonb_build_object('message', error)) END);
    IF outside OPERATOR(pg_catalog.>) 0 THEN
        RAISE WARNING '% rows in the default partition of % are outside [now - retention (or 7 days), now + premake] and were left there',
            outside, parent
            USING HINT = 'Move or delete them by hand, or widen retention; maintenance never makes partitions outside that window.';
    END IF;
    IF skipped IS NOT NULL THEN
        PERFORM counter_internal.alert(
            format('partition maintenance of %s skipped %s slot(s); their rows stay in the default partition',
                   parent, pg_catalog.jsonb_array_length(skipped)),
            counter_internal.partition_skipped_text(skipped), run);
    END IF;
END
$$;

-- The slots a run skipped, as text: "drain 2026-07-01T23:00:00+00:00: why
-- (SQLSTATE 42501); ...", or NULL.
CREATE OR REPLACE FUNCTION counter_internal.partition_skipped_text(skipped jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT string_agg(format('%s %s: %s (SQLSTATE %s)', e ->> 'action', e ->> 'slot', e ->> 'error', e ->> 'sqlstate'),
                      '; ' ORDER BY e ->> 'slot', e ->> 'action')
    FROM pg_catalog.jsonb_array_elements(coalesce(skipped, '[]')) e
$$;

-- The slots skipped so far in a run, each (action, slot) once.
CREATE OR REPLACE FUNCTION counter_internal.partition_skipped_union(a jsonb, b jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(DISTINCT e), '[]')
    FROM pg_catalog.jsonb_array_elements(coalesce(a, '[]') OPERATOR(pg_catalog.||) coalesce(b, '[]')) e
$$;

-- Partition maintenance's step function for the one commit loop
-- (src/spine.cpp; checks its caller owns the table at every step). args:
-- {"parent": oid}, or {} for the table named target (the job's form);
-- counter.partition_maintain adds "as_of" and "max_steps" (default: now,
-- 100000). One bounded step of counter_internal.partition_step per call; when the run ends
-- (done, skipped, error, the step limit, or the time is up) its outcome is
-- recorded; 'busy' (another session maintains the table) records nothing.
-- In the job's form a run that ends skipped (locks) or failed hands the loop
-- an error to raise once the outcome is committed ('raise': 55P03, 55000), so
-- the runner counts a failure and backs off.
CREATE OR REPLACE FUNCTION counter_internal.partition_run_step(target text, args jsonb, state jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parent regclass := coalesce((args ->> 'parent')::oid::regclass, pg_catalog.to_regclass(target));
    s record;
    outcome text;
    error text;
    outside bigint;
BEGIN
    IF parent IS NULL OR NOT EXISTS (SELECT 1 FROM counter.partitioned_tables t
                                     WHERE t.parent::pg_catalog.oid OPERATOR(pg_catalog.=)
                                           coalesce((args ->> 'parent')::pg_catalog.oid,
                                                    pg_catalog.to_regclass(target)::pg_catalog.oid)) THEN
        RAISE EXCEPTION 'table % is not managed by counter_ext', coalesce(parent::text, target)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM counter_internal.require_owner(counter_internal.partition_owner(parent), pg_catalog.format('managed table %s', parent), 'manage its partitions');
    IF state IS NULL THEN
        RETURN '{"phase": "steps", "done": 0, "created": 0, "dropped": 0, "moved": 0, "rows": 0, "finished": false}';
    END IF;
    IF state ? 'error' THEN
        outcome := 'error';
        error := state #>> '{error,message}';
    ELSIF state ? 'stop' THEN
        outcome := 'partial';
    ELSE
        s := counter_internal.partition_step(parent, (args ->> 'as_of')::timestamptz);
        state := state || pg_catalog.jsonb_build_object('done', (state ->> 'done')::bigint + 1,
            'created', (state ->> 'created')::bigint + s.created, 'dropped', (state ->> 'dropped')::bigint + s.dropped,
            'moved', (state ->> 'moved')::bigint + s.moved,
            'skipped', counter_internal.partition_skipped_union(state -> 'skipped', s.skipped));
        state := state || pg_catalog.jsonb_build_object('rows',
            (state ->> 'created')::bigint + (state ->> 'dropped')::bigint + (state ->> 'moved')::bigint);
        IF s.status = 'busy' THEN
            PERFORM counter_internal.run_skipped('partition_maintenance',
                coalesce((SELECT c.job_target FROM counter.partitioned_tables c
                          WHERE c.parent::pg_catalog.oid OPERATOR(pg_catalog.=)
                                coalesce((args ->> 'parent')::pg_catalog.oid,
                                         pg_catalog.to_regclass(target)::pg_catalog.oid)), target),
                NULL, 'another session is maintaining the table');
            RETURN state || '{"finished": true, "outcome": "busy"}';
        END IF;
        outcome := CASE WHEN s.status IN ('skipped', 'error') THEN s.status
                        WHEN s.status = 'done' THEN 'ok'
                        WHEN s.status = 'more' AND (state ->> 'done')::bigint
                             >= CASE WHEN args ? 'max_steps' THEN (args ->> 'max_steps')::bigint ELSE 100000 END
                             THEN 'partial' END;
        IF outcome IS NULL THEN
            RETURN state;
        END IF;
        error := s.error;
        outside := s.outside;
        -- slots skipped: the others were done, but the run is no success
        IF outcome IN ('ok', 'partial') AND pg_catalog.jsonb_array_length(state -> 'skipped') OPERATOR(pg_catalog.>) 0 THEN
            outcome := 'error';
            error := 'slots skipped: ' OPERATOR(pg_catalog.||) counter_internal.partition_skipped_text(state -> 'skipped');
        END IF;
    END IF;
    PERFORM counter_internal.partition_record(parent, outcome, error, (state ->> 'created')::bigint,
        (state ->> 'dropped')::bigint, (state ->> 'moved')::bigint, outside, state -> 'error', state -> 'skipped');
    state := state || pg_catalog.jsonb_build_object('finished', true, 'outcome', outcome, 'error', error);
    IF NOT args ? 'parent' AND outcome IN ('skipped', 'error') THEN
        state := state || pg_catalog.jsonb_build_object('raise', pg_catalog.jsonb_build_object(
            'sqlstate', CASE outcome WHEN 'skipped' THEN '55P03' ELSE '55000' END,
            'message', pg_catalog.format('partition maintenance of %s %s', target,
                                         CASE outcome WHEN 'skipped' THEN 'skipped' ELSE 'failed' END),
            'detail', error));
    END IF;
    RETURN state;
END
$$;

-- Maintenance of one table in the caller's transaction (no COMMIT): steps
-- until done, skipped, failed or max_steps. For use inside a transaction;
-- CALL counter.run_maintenance() commits after every step instead. The
-- steps of the maintenance job, in the one loop (src/spine.cpp) without its
-- commits.
CREATE OR REPLACE FUNCTION counter_internal.partition_maintain(parent regclass, as_of timestamptz DEFAULT NULL, max_steps integer DEFAULT 100000,
    OUT created bigint, OUT dropped bigint, OUT moved bigint, OUT outcome text, OUT error text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st jsonb;
BEGIN
    IF parent IS NULL THEN
        RAISE EXCEPTION 'parent must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM counter_internal.require_owner(counter_internal.partition_owner(parent), pg_catalog.format('managed table %s', parent), 'manage its partitions');
    st := counter_internal.run_steps_here('partition_maintenance', parent::text,
        pg_catalog.jsonb_build_object('parent', parent::pg_catalog.oid, 'as_of', as_of, 'max_steps', max_steps));
    created := (st ->> 'created')::bigint; dropped := (st ->> 'dropped')::bigint; moved := (st ->> 'moved')::bigint;
    outcome := st ->> 'outcome'; error := st ->> 'error';
END
$$;
-- The entry point: counter_entry (src/owner.cpp) notes the role calling it, then runs
-- counter_internal.partition_maintain above with the same arguments.
CREATE OR REPLACE FUNCTION counter.partition_maintain(parent regclass, as_of timestamptz DEFAULT NULL, max_steps integer DEFAULT 100000,
    OUT created bigint, OUT dropped bigint, OUT moved bigint, OUT outcome text, OUT error text)
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_entry';
COMMENT ON FUNCTION counter.partition_maintain(regclass, timestamptz, integer) IS
    'maintains one table in the current transaction (no commits); CALL counter.run_maintenance() commits per step';

-- CALL counter.run_maintenance() maintains every managed table;
-- CALL counter.run_maintenance('public.events') one. Commits after every
-- bounded step; a table that is locked past its lock_timeout (or fails) is
-- recorded and skipped, the others go on. Call it outside a transaction
-- block (pg_cron does); inside one, use counter.partition_maintain().
CREATE OR REPLACE PROCEDURE counter.run_maintenance(parent regclass DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    tables regclass[];
    p regclass;
    st pg_catalog.jsonb;
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
        st := NULL;
        CALL counter.run_steps('partition_maintenance', p::pg_catalog.text,
                               pg_catalog.jsonb_build_object('parent', p::pg_catalog.oid), st);
    END LOOP;
END
$$;

-- The checks of counter.partition_manage (counter_internal.partition_manage):
-- none NULL but retention, start_at and as_of; parent a table partitioned by
-- range over its timestamptz column control, not temporary, of an owner
-- caller belongs to (or caller a superuser), not managed yet; the settings
-- in their bounds. The partition interval in seconds.
CREATE OR REPLACE FUNCTION counter_internal.partition_manage_check(parent regclass, control name,
    part_interval interval, premake integer, retention interval, retention_keep_table boolean, batch_rows integer,
    lock_timeout interval, caller regrole)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel pg_class;
    pt pg_partitioned_table;
    att pg_attribute;
    step bigint;
BEGIN
    IF parent IS NULL OR control IS NULL OR part_interval IS NULL OR premake IS NULL
       OR retention_keep_table IS NULL OR batch_rows IS NULL OR lock_timeout IS NULL THEN
        RAISE EXCEPTION 'partition_manage: only retention, start_at and as_of may be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO STRICT rel FROM pg_class c WHERE c.oid = parent;
    IF rel.relkind <> 'p' THEN
        RAISE EXCEPTION '% is not a partitioned table', parent
            USING ERRCODE = 'wrong_object_type', HINT = 'Declare it PARTITION BY RANGE (a timestamptz column).';
    END IF;
    IF NOT (pg_has_role(caller, rel.relowner, 'USAGE')
            OR (SELECT a.rolsuper FROM pg_roles a WHERE a.oid OPERATOR(pg_catalog.=) caller)) THEN
        RAISE EXCEPTION 'must be owner of table %', parent USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF rel.relpersistence = 't' THEN
        RAISE EXCEPTION '% is a temporary table', parent USING ERRCODE = 'wrong_object_type';
    END IF;
    SELECT * INTO STRICT pt FROM pg_partitioned_table p WHERE p.partrelid = parent;
    IF pt.partstrat <> 'r' OR pt.partnatts <> 1 OR pt.partattrs[0] = 0 THEN
        RAISE EXCEPTION '% is not partitioned by range over one column', parent
            USING ERRCODE = 'wrong_object_type', HINT = 'Declare it PARTITION BY RANGE (a timestamptz column).';
    END IF;
    att := counter_internal.column_of(parent, control);
    IF att.attnum <> pt.partattrs[0] THEN
        RAISE EXCEPTION 'column "%" is not the partition key of %', control, parent
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF att.atttypid <> 'timestamptz'::regtype THEN
        RAISE EXCEPTION 'partition key "%" of % is %, not timestamptz', control, parent, att.atttypid::regtype
            USING ERRCODE = 'datatype_mismatch';
    END IF;
    step := counter_internal.partition_interval_seconds(part_interval);
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
    IF EXISTS (SELECT 1 FROM counter.partitioned_tables c WHERE c.parent = partition_manage_check.parent) THEN
        RAISE EXCEPTION 'table % is already managed', parent USING ERRCODE = 'duplicate_object',
            HINT = 'Use counter.partition_unmanage() first to change its settings.';
    END IF;
    RETURN step;
END
$$;

-- The default partition of a newly managed parent that has none
-- (counter_internal.partition_manage), made by its owner, with the grants of
-- the parent as every partition has them. Made after the first partitions:
-- each partition made before it skipped the check of the default
-- partition's rows.
CREATE OR REPLACE FUNCTION counter_internal.partition_make_default(parent regclass)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel pg_class;
    t regclass;
    s record;
BEGIN
    SELECT * INTO STRICT rel FROM pg_class c WHERE c.oid = parent;
    PERFORM counter_internal.partition_exec(parent, format('CREATE TABLE %I.%I PARTITION OF %s DEFAULT',
                   (SELECT n.nspname FROM pg_namespace n WHERE n.oid = rel.relnamespace),
                   counter_internal.partition_name_for(rel.relname, '_default'), parent));
    t := counter.partition_default(parent);
    IF rel.relacl IS NOT NULL THEN
        FOR s IN SELECT a.grantee, a.privilege_type, a.is_grantable FROM aclexplode(rel.relacl) a
                 WHERE a.grantee <> rel.relowner LOOP
            PERFORM counter_internal.partition_exec(parent, format('GRANT %s ON %s TO %s%s', s.privilege_type, t,
                           CASE WHEN s.grantee = 0 THEN 'PUBLIC' ELSE s.grantee::regrole::text END,
                           CASE WHEN s.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END));
        END LOOP;
    END IF;
END
$$;

-- Puts a table under maintenance: checks it, records it, creates its default
-- partition (if it has none) and its partitions from start_at (default: the
-- current slot; never before as_of - retention) through as_of + premake
-- intervals, at most 10,000 of them, registers its job. Returns the number of
-- partitions created. For the table's owner (or a superuser); the partitions
-- are made by the owner.
CREATE OR REPLACE FUNCTION counter_internal.partition_manage(parent regclass, control name, part_interval interval DEFAULT '1 hour',
    premake integer DEFAULT 48, retention interval DEFAULT NULL, retention_keep_table boolean DEFAULT false,
    start_at timestamptz DEFAULT NULL, batch_rows integer DEFAULT 10000,
    lock_timeout interval DEFAULT '500 milliseconds', as_of timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
AS $$
DECLARE
    caller regrole := counter_internal.caller();
    first_slot timestamptz;
    rel pg_class;
    nsp name;
    step bigint;
    made bigint := 0;
    d regclass;
    lo timestamptz;
    busy_slots timestamptz[];
    covered tstzmultirange;
BEGIN
    step := counter_internal.partition_manage_check(parent, control, part_interval, premake, retention,
                                                    retention_keep_table, batch_rows, lock_timeout, caller);
    SELECT * INTO STRICT rel FROM pg_class c WHERE c.oid = parent;
    SELECT n.nspname INTO STRICT nsp FROM pg_namespace n WHERE n.oid = rel.relnamespace;
    as_of := coalesce(as_of, now());
    first_slot := counter_internal.partition_slot(least(coalesce(start_at, as_of), as_of), step);
    IF retention IS NOT NULL THEN
        first_slot := greatest(first_slot, counter_internal.partition_slot(as_of - retention, step));
    END IF;
    IF extract(epoch FROM counter_internal.partition_slot(as_of, step) - first_slot) / step + premake + 1 > 10000 THEN
        RAISE EXCEPTION 'partition_manage would create more than 10000 partitions'
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'Give a later start_at, a retention, or a longer part_interval.';
    END IF;
    INSERT INTO counter.partitioned_tables (parent, control, part_interval, premake, retention, retention_keep_table,
                                            batch_rows, lock_timeout, parent_indexes)
    VALUES (parent, control, part_interval, premake, retention, retention_keep_table, batch_rows, lock_timeout,
            counter_internal.partition_index_count(parent));

    d := counter.partition_default(parent);
    IF d IS NOT NULL THEN
        SELECT x.a INTO busy_slots FROM counter_internal.exec_as_owner(rel.relowner::regrole,
            format('SELECT array_agg(DISTINCT %4$s) FROM ONLY %2$s WHERE $1',
                   control, d, step, counter_internal.partition_slot_sql(control, step)), true) AS x(a timestamptz[]);
    END IF;

    -- The initial partitions, in this transaction; later ones come in bounded steps.
    SELECT coalesce(range_agg(tstzrange(b.lo, b.hi)), '{}'::tstzmultirange) INTO covered
    FROM counter.partition_bounds(parent) b WHERE NOT b.is_default;
    FOR lo IN
        SELECT g FROM generate_series(first_slot,
                                      counter_internal.partition_slot(as_of, step) + make_interval(secs => step * premake),
                                      make_interval(secs => step)) g
        WHERE NOT (covered && tstzrange(g, g + make_interval(secs => step)))
          AND NOT (g = ANY (coalesce(busy_slots, '{}')))
        ORDER BY g
    LOOP
        PERFORM counter_internal.partition_make_table(parent, lo, lo + make_interval(secs => step), 'direct');
        made := made + 1;
    END LOOP;
    -- The default partition last (partition_make_default).
    IF d IS NULL THEN
        PERFORM counter_internal.partition_make_default(parent);
    END IF;

    -- Every partition, those made before too, gets the parent's replica identity.
    PERFORM counter_internal.partition_replicate_like_parent(parent, b.partition, false)
    FROM counter.partition_bounds(parent) b;
    PERFORM counter.job_register('partition_maintenance', format('%I.%I', nsp, rel.relname),
                                 least(part_interval, interval '1 hour'));
    UPDATE counter.partitioned_tables c SET job_target = format('%I.%I', nsp, rel.relname)
    WHERE c.parent = partition_manage.parent;
    -- the runs of a table of this name that was dropped are not this one's
    PERFORM counter_internal.run_forget('partition_maintenance', NULL, format('%I.%I', nsp, rel.relname));
    RETURN made;
END
$$;
-- The entry point: counter_entry (src/owner.cpp) notes the role calling it, then runs
-- counter_internal.partition_manage above with the same arguments.
CREATE OR REPLACE FUNCTION counter.partition_manage(parent regclass, control name, part_interval interval DEFAULT '1 hour',
    premake integer DEFAULT 48, retention interval DEFAULT NULL, retention_keep_table boolean DEFAULT false,
    start_at timestamptz DEFAULT NULL, batch_rows integer DEFAULT 10000,
    lock_timeout interval DEFAULT '500 milliseconds', as_of timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_entry';
COMMENT ON FUNCTION counter.partition_manage(regclass, name, interval, integer, interval, boolean, timestamptz, integer, interval, timestamptz) IS
    'puts a range-partitioned event table under hourly (or other) partition maintenance';

-- Takes a table out of maintenance (its partitions stay). Refuses while an
-- hour is half drained (its moved rows sit in a table not yet attached).
CREATE OR REPLACE FUNCTION counter_internal.partition_unmanage(parent regclass)
RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    target text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM counter.partitioned_tables c WHERE c.parent = partition_unmanage.parent) THEN
        RETURN false;
    END IF;
    PERFORM counter_internal.require_owner(counter_internal.partition_owner(parent), pg_catalog.format('managed table %s', parent), 'manage its partitions');
    IF NOT counter_internal.lock_take('partition', parent::oid::bigint, wait => false) THEN
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
    PERFORM counter_internal.run_forget('partition_maintenance', NULL, target);
    RETURN true;
END
$$;
-- The entry point: counter_entry (src/owner.cpp) notes the role calling it, then runs
-- counter_internal.partition_unmanage above with the same arguments.
CREATE OR REPLACE FUNCTION counter.partition_unmanage(parent regclass)
RETURNS boolean
LANGUAGE c VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_entry';

-- The state of every managed table the caller owns (or belongs to the owner
-- of; a superuser: every one). Rows are counted as the table's owner.
-- alert says what needs a look, with the alert of counter_internal.alert
-- (WARNING, NOTIFY counter_ext_drift) for each such table: maintenance that
-- has not run (or not since the table was managed) for longer than its job's
-- interval, and rows the last run left in the default partition (outside the
-- window, or in slots it had to skip).
CREATE OR REPLACE FUNCTION counter_internal.partition_state()
RETURNS TABLE (parent regclass, control name, part_interval interval, premake integer, retention interval,
               partitions bigint, oldest timestamptz, newest timestamptz, hours_ahead numeric,
               default_partition regclass, rows_in_default bigint, rows_staged bigint,
               last_run_at timestamptz, last_outcome text, last_error text,
               last_created bigint, last_dropped bigint, last_moved bigint, last_outside bigint,
               last_skipped jsonb, alert text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := counter_internal.caller();
    su boolean := (SELECT a.rolsuper FROM pg_roles a WHERE a.oid OPERATOR(pg_catalog.=) caller);
    c counter.partitioned_tables;
    stg regclass;
    every interval;
    tbl_owner regrole;
BEGIN
    FOR c IN SELECT * FROM counter.partitioned_tables p
             WHERE su OR pg_has_role(caller, counter_internal.partition_owner(p.parent), 'USAGE')
             ORDER BY p.parent::oid LOOP
        parent := c.parent; control := c.control; part_interval := c.part_interval; premake := c.premake;
        retention := c.retention;
        -- the last maintenance run, from the one run record
        SELECT (x.info ->> 'finished_at')::timestamptz, x.info ->> 'outcome', x.info ->> 'error',
               (x.info ->> 'created')::bigint, (x.info ->> 'dropped')::bigint, (x.info ->> 'moved')::bigint,
               (x.info ->> 'outside')::bigint, NULLIF(x.info -> 'skipped', 'null')
        INTO last_run_at, last_outcome, last_error, last_created, last_dropped, last_moved, last_outside,
             last_skipped
        FROM counter.job_runs x
        WHERE x.kind OPERATOR(pg_catalog.=) 'partition_maintenance'
          AND x.target OPERATOR(pg_catalog.=) coalesce(c.job_target, c.parent::text)
          AND x.info ? 'outcome'
        ORDER BY x.run_id DESC LIMIT 1;
        SELECT count(*), min(b.lo), max(b.hi) INTO partitions, oldest, newest
        FROM counter.partition_bounds(c.parent) b WHERE NOT b.is_default;
        hours_ahead := round(extract(epoch FROM newest - now()) / 3600, 2);
        default_partition := counter.partition_default(c.parent);
        rows_in_default := NULL;
        rows_staged := NULL;
        SELECT s.staging INTO stg FROM counter.partition_staging s WHERE s.parent = c.parent;
        tbl_owner := counter_internal.partition_owner(c.parent);
        BEGIN
            IF default_partition IS NOT NULL THEN
                SELECT x.n INTO rows_in_default FROM counter_internal.exec_as_owner_listed(tbl_owner,
                    format('SELECT count(*) FROM ONLY %s WHERE $1', default_partition), true) AS x(n bigint);
            END IF;
            IF stg IS NOT NULL AND EXISTS (SELECT FROM pg_class k WHERE k.oid OPERATOR(pg_catalog.=) stg) THEN
                SELECT x.n INTO rows_staged FROM counter_internal.exec_as_owner_listed(tbl_owner,
                    format('SELECT count(*) FROM %s WHERE $1', stg), true) AS x(n bigint);
            END IF;
        EXCEPTION WHEN OTHERS THEN
            IF counter_internal.owner_read_failed('partitioned table', c.parent::text, tbl_owner, 'counter.partition_status',
                                                  'Its rows_in_default and rows_staged are NULL.', SQLSTATE, SQLERRM) THEN
                RAISE;
            END IF;
            rows_in_default := NULL;
            rows_staged := NULL;
        END;
        every := coalesce((SELECT j.run_every FROM counter.jobs j
                           WHERE j.kind OPERATOR(pg_catalog.=) 'partition_maintenance'
                             AND j.target OPERATOR(pg_catalog.=) c.job_target),
                          least(c.part_interval, interval '1 hour'));
        alert := concat_ws('; ',
            CASE WHEN now() OPERATOR(pg_catalog.-) coalesce(last_run_at, c.created_at) OPERATOR(pg_catalog.>) every
                 THEN format('maintenance has not run for %s minutes (its interval: %s minutes)',
                             floor(extract(epoch FROM now() OPERATOR(pg_catalog.-) coalesce(last_run_at, c.created_at))
                                   OPERATOR(pg_catalog./) 60),
                             floor(extract(epoch FROM every) OPERATOR(pg_catalog./) 60)) END,
            CASE WHEN rows_in_default OPERATOR(pg_catalog.>) 0
                      AND (last_outside OPERATOR(pg_catalog.>) 0 OR last_skipped IS NOT NULL)
                 THEN format('%s rows left in the default partition', rows_in_default) END);
        alert := NULLIF(alert, '');
        IF alert IS NOT NULL THEN
            PERFORM counter_internal.alert(format('partitioned table %s: %s', c.parent, alert),
                'See counter.partition_status and counter.job_runs (kind partition_maintenance).', NULL, c.parent);
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
-- The entry point: counter_entry (src/owner.cpp) notes the role calling it, then runs
-- counter_internal.partition_state above with the same arguments.
CREATE OR REPLACE FUNCTION counter.partition_state()
RETURNS TABLE (parent regclass, control name, part_interval interval, premake integer, retention interval,
               partitions bigint, oldest timestamptz, newest timestamptz, hours_ahead numeric,
               default_partition regclass, rows_in_default bigint, rows_staged bigint,
               last_run_at timestamptz, last_outcome text, last_error text,
               last_created bigint, last_dropped bigint, last_moved bigint, last_outside bigint,
               last_skipped jsonb, alert text)
LANGUAGE c STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_entry';

CREATE OR REPLACE VIEW counter.partition_status AS SELECT * FROM counter.partition_state();
COMMENT ON VIEW counter.partition_status IS
    'managed partitioned tables: oldest and newest partition, hours premade ahead, rows in default, last maintenance';
GRANT SELECT ON counter.partition_status TO PUBLIC;

-- partition_manage, partition_unmanage, partition_maintain, run_maintenance
-- and the job are for every role: each checks that its caller may manage
-- the table. The helpers live in counter_internal (EXECUTE revoked from
-- PUBLIC by 99_internal.sql).
