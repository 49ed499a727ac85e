-- counter_ext 1.0 -> 1.1 (ALTER EXTENSION counter_ext UPDATE TO '1.1').
\echo Use "ALTER EXTENSION counter_ext UPDATE TO '1.1'" to load this file. \quit

-- counter.hll: new sparse sketches have 26-bit entries (format version 2,
-- doc/hll-storage.md); that is in the library, and stored version 1 sketches
-- stay valid. No SQL object changes for it.

-- counter.hll_add_array: many values at once (postgresql-hll #33).
CREATE FUNCTION counter.hll_add_array(counter.hll, anyarray) RETURNS counter.hll
LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_add_array';
COMMENT ON FUNCTION counter.hll_add_array(counter.hll, anyarray) IS
    'the sketch with every non-NULL element of the array added (a NULL array leaves it unchanged)';

-- ---- Rollups: the trigger is C++ with kept plans; rollup tables get fillfactor 60.

-- 1. The trigger function is C++ now (src/rollup.cpp: kept plans). Same name
--    and signature, so the triggers of existing rollups keep pointing at it.
CREATE OR REPLACE FUNCTION counter.rollup_trigger()
RETURNS trigger
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_rollup_trigger';

-- 2. New rollup tables get fillfactor 60 (the only change in rollup_create).
CREATE OR REPLACE FUNCTION counter.rollup_create(
    name text,
    source regclass,
    time_column name,
    group_by name[],
    distinct_on name[] DEFAULT '{}',
    mode text DEFAULT 'trigger',
    sums name[] DEFAULT '{}',
    filter text DEFAULT NULL,
    retention interval DEFAULT NULL,
    refresh_every interval DEFAULT '1 minute')
RETURNS regclass
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel record;
    col record;
    g name;
    seen name[] := '{}';
    outcols text[] := ARRAY['hour', 'count'];
    ddl text := '';
    keys text := '';
    tbl regclass;
    rid integer;
BEGIN
    IF name IS NULL OR source IS NULL OR time_column IS NULL OR group_by IS NULL OR distinct_on IS NULL
       OR mode IS NULL OR sums IS NULL OR refresh_every IS NULL THEN
        RAISE EXCEPTION 'only filter and retention of counter.rollup_create may be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF name = '' OR octet_length(name) > 63 THEN
        RAISE EXCEPTION 'a rollup name must be 1 to 63 bytes long' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF mode NOT IN ('trigger', 'deferred') THEN
        RAISE EXCEPTION 'unknown rollup mode "%"', mode USING ERRCODE = 'invalid_parameter_value',
            HINT = 'use ''trigger'' or ''deferred''';
    END IF;
    IF refresh_every <= interval '0' OR retention <= interval '0' THEN
        RAISE EXCEPTION 'refresh_every and retention must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT FROM counter.rollups r WHERE r.name = rollup_create.name) THEN
        RAISE EXCEPTION 'rollup "%" already exists', name USING ERRCODE = 'duplicate_object';
    END IF;
    SELECT c.relkind, c.relowner, c.relnamespace::regnamespace::text AS nsp INTO rel
    FROM pg_class c WHERE c.oid = source;
    IF rel.relkind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION '"%" is not a table', source USING ERRCODE = 'wrong_object_type';
    END IF;
    IF NOT pg_has_role(rel.relowner, 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of table %', source USING ERRCODE = 'insufficient_privilege';
    END IF;

    SELECT c.atttypid, c.attnotnull INTO col FROM counter.column_of(source, time_column) c;
    IF col.atttypid <> 'timestamptz'::regtype THEN
        RAISE EXCEPTION 'time column "%" is %, not timestamp with time zone', time_column, format_type(col.atttypid, NULL)
            USING ERRCODE = 'datatype_mismatch',
                  HINT = 'UTC hours need instants; a timestamp without time zone depends on the TimeZone setting';
    END IF;
    IF NOT col.attnotnull THEN
        RAISE EXCEPTION 'time column "%" must be NOT NULL', time_column USING ERRCODE = 'invalid_parameter_value';
    END IF;

    FOREACH g IN ARRAY group_by LOOP
        IF g IS NULL THEN
            RAISE EXCEPTION 'group_by must not contain NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF g = time_column THEN
            RAISE EXCEPTION 'group column "%" is the time column', g USING ERRCODE = 'invalid_parameter_value',
                HINT = 'the rollup groups by the UTC hour of the time column already';
        END IF;
        IF g = ANY (seen) THEN
            RAISE EXCEPTION 'column "%" appears twice in group_by', g USING ERRCODE = 'duplicate_column';
        END IF;
        IF g = ANY (outcols) THEN
            RAISE EXCEPTION 'group column "%" collides with the rollup column of that name', g
                USING ERRCODE = 'duplicate_column';
        END IF;
        SELECT c.atttypid, c.atttypmod, c.attnotnull, c.attcollation INTO col FROM counter.column_of(source, g) c;
        IF NOT col.attnotnull THEN
            RAISE EXCEPTION 'group column "%" must be NOT NULL', g USING ERRCODE = 'invalid_parameter_value',
                HINT = 'the group columns form the primary key of the rollup';
        END IF;
        seen := seen || g;
        ddl := ddl || format('%I %s%s NOT NULL, ', g, format_type(col.atttypid, col.atttypmod),
            (SELECT format(' COLLATE %I.%I', cn.nspname, co.collname) FROM pg_collation co
             JOIN pg_namespace cn ON cn.oid = co.collnamespace WHERE co.oid = col.attcollation));
        keys := keys || format('%I, ', g);
    END LOOP;
    outcols := outcols || seen::text[];

    ddl := ddl || 'hour timestamptz NOT NULL, count bigint NOT NULL';
    seen := '{}';
    FOREACH g IN ARRAY sums LOOP
        IF g IS NULL THEN
            RAISE EXCEPTION 'sums must not contain NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF g = ANY (seen) THEN
            RAISE EXCEPTION 'column "%" appears twice in sums', g USING ERRCODE = 'duplicate_column';
        END IF;
        SELECT c.atttypid INTO col FROM counter.column_of(source, g) c;
        IF col.atttypid NOT IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype, 'numeric'::regtype) THEN
            RAISE EXCEPTION 'cannot sum column "%" of type %', g, format_type(col.atttypid, NULL)
                USING ERRCODE = 'datatype_mismatch', HINT = 'sums are exact: smallint, integer, bigint or numeric';
        END IF;
        IF octet_length('sum_' || g) > 63 THEN
            RAISE EXCEPTION 'sum column name "sum_%" is too long', g USING ERRCODE = 'name_too_long';
        END IF;
        IF 'sum_' || g = ANY (outcols) THEN
            RAISE EXCEPTION 'sum column "sum_%" collides with a rollup column of that name', g
                USING ERRCODE = 'duplicate_column';
        END IF;
        seen := seen || g;
        outcols := outcols || ('sum_' || g);
        ddl := ddl || format(', %I %s NOT NULL', 'sum_' || g,
                             CASE WHEN col.atttypid IN ('int2'::regtype, 'int4'::regtype) THEN 'bigint' ELSE 'numeric' END);
    END LOOP;

    -- One sketch per distinct_on column: merged across hours, never summed.
    seen := '{}';
    FOREACH g IN ARRAY distinct_on LOOP
        IF g IS NULL THEN
            RAISE EXCEPTION 'distinct_on must not contain NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF g = ANY (seen) THEN
            RAISE EXCEPTION 'column "%" appears twice in distinct_on', g USING ERRCODE = 'duplicate_column';
        END IF;
        PERFORM counter.column_of(source, g);
        IF octet_length('distinct_' || g) > 63 THEN
            RAISE EXCEPTION 'distinct column name "distinct_%" is too long', g USING ERRCODE = 'name_too_long';
        END IF;
        IF 'distinct_' || g = ANY (outcols) THEN
            RAISE EXCEPTION 'distinct column "distinct_%" collides with a rollup column of that name', g
                USING ERRCODE = 'duplicate_column';
        END IF;
        seen := seen || g;
        outcols := outcols || ('distinct_' || g);
        ddl := ddl || format(', %I counter.hll NOT NULL', 'distinct_' || g);
    END LOOP;

    IF to_regclass(format('%I.%I', rel.nsp, name)) IS NOT NULL THEN
        RAISE EXCEPTION 'relation "%.%" already exists', rel.nsp, name USING ERRCODE = 'duplicate_table',
            HINT = 'the rollup table is created in the schema of the source, named after the rollup';
    END IF;
    IF filter IS NOT NULL THEN
        -- Parsed and planned once here (a parameter forbids several commands).
        EXECUTE format('SELECT FROM %s WHERE $1 AND (%s) LIMIT 0', source, filter) USING true;
    END IF;

    -- fillfactor: each row is updated many times in its hour; room on its
    -- page keeps those updates HOT (no index entries, pruned in place).
    EXECUTE format('CREATE TABLE %I.%I (%s, PRIMARY KEY (%shour)) WITH (fillfactor = 60)', rel.nsp, name, ddl, keys);
    tbl := format('%I.%I', rel.nsp, name)::regclass;
    EXECUTE format('CREATE INDEX ON %s (hour)', tbl);
    EXECUTE format('COMMENT ON TABLE %s IS %L', tbl,
                   format('counter_ext rollup %s of %s by UTC hour (%s mode)', name, source, mode));

    INSERT INTO counter.rollups (name, source, rollup_table, time_column, group_by, distinct_on, sums, mode,
                                 filter, retention, refresh_every)
    VALUES (name, source, tbl, time_column, group_by, distinct_on, sums, mode, filter, retention, refresh_every)
    RETURNING rollup_id INTO rid;
    PERFORM counter.rollup_build_sql(rid);
    INSERT INTO counter.rollup_status (rollup_id) VALUES (rid);

    EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON %s REFERENCING NEW TABLE AS new_rows '
                   'FOR EACH STATEMENT EXECUTE FUNCTION counter.rollup_trigger(%L)',
                   'counter_rollup_' || rid || '_insert', source, rid);
    EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON %s REFERENCING OLD TABLE AS old_rows '
                   'FOR EACH STATEMENT EXECUTE FUNCTION counter.rollup_trigger(%L)',
                   'counter_rollup_' || rid || '_delete', source, rid);
    EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON %s REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows '
                   'FOR EACH STATEMENT EXECUTE FUNCTION counter.rollup_trigger(%L)',
                   'counter_rollup_' || rid || '_update', source, rid);

    -- CREATE TRIGGER waited for every open writer of the source and holds
    -- them off until commit, so these are all the events the triggers miss.
    EXECUTE format('INSERT INTO counter.rollup_dirty (rollup_id, hour) SELECT DISTINCT $1, counter.rollup_hour(%I) FROM %s',
                   time_column, source) USING rid;
    PERFORM counter.rollup_job_sync(name);
    RETURN tbl;
END
$$;

-- 3. Existing rollup tables: the same fillfactor. It applies to pages filled
--    from now on (a VACUUM FULL or CLUSTER of the table repacks old pages);
--    ALTER TABLE ... SET takes a SHARE UPDATE EXCLUSIVE lock only, which
--    writers do not conflict with.
DO $$
DECLARE
    t regclass;
BEGIN
    FOR t IN SELECT r.rollup_table FROM counter.rollups r ORDER BY r.rollup_id LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s SET (fillfactor = 60)', t);
    END LOOP;
END
$$;
