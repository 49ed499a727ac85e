-- ---- partitions (issue 14): replica identity on a publisher, published drains,
-- the job target that follows renames (counter_internal.partition_follow_rename)
ALTER TABLE counter.partitioned_tables ADD COLUMN job_target text;
UPDATE counter.partitioned_tables t SET job_target = pg_catalog.format('%I.%I', n.nspname, c.relname)
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
WHERE c.oid OPERATOR(pg_catalog.=) t.parent;

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

CREATE OR REPLACE FUNCTION counter.partition_make_table(parent regclass, lo timestamptz, hi timestamptz, how text)
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

CREATE OR REPLACE FUNCTION counter.partition_move_rows(parent regclass, t regclass, lo timestamptz, hi timestamptz, max_rows bigint)
RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT counter.partition_move(parent, counter.partition_default(parent), t, lo, hi, max_rows)
$$;

CREATE OR REPLACE FUNCTION counter.partition_attach(parent regclass, t regclass, lo timestamptz, hi timestamptz, bounded boolean)
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

CREATE OR REPLACE FUNCTION counter.partition_manage(parent regclass, control name, part_interval interval DEFAULT '1 hour',
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

CREATE OR REPLACE FUNCTION counter.partition_unmanage(parent regclass)
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

CREATE OR REPLACE FUNCTION counter.partition_forget_dropped()
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

REVOKE ALL ON FUNCTION counter.partition_move(regclass, regclass, regclass, timestamptz, timestamptz, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.partition_replicate_like_parent(regclass, regclass, boolean) FROM PUBLIC;
