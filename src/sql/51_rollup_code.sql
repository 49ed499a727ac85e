-- Hourly rollups: the functions and views that changed in 1.2 (the catalog
-- tables and the functions kept from 1.1 are in 50_rollup.sql). Only
-- functions and views: the update from 1.1 includes this file as it is.

-- The rollup row, or undefined_object.
CREATE OR REPLACE FUNCTION counter_internal.rollup_get(rollup_name text)
RETURNS counter.rollups
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
BEGIN
    IF rollup_name IS NULL THEN
        RAISE EXCEPTION 'rollup name must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO r FROM counter.rollups c WHERE c.name OPERATOR(pg_catalog.=) rollup_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'rollup "%" does not exist', rollup_name USING ERRCODE = 'undefined_object';
    END IF;
    RETURN r;
END
$$;

-- The rollup row by id, or undefined_object: a rollup dropped since the
-- caller read it (a refresh or flush beside rollup_drop) is 42704 wherever it
-- is looked up again, never "query returned no rows".
CREATE OR REPLACE FUNCTION counter_internal.rollup_by_id(rid integer)
RETURNS counter.rollups
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
BEGIN
    SELECT * INTO r FROM counter.rollups c WHERE c.rollup_id OPERATOR(pg_catalog.=) rid;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'rollup % does not exist', rid USING ERRCODE = 'undefined_object';
    END IF;
    RETURN r;
END
$$;

-- The pieces of the SQL of rollup r (counter_internal.rollup_sql), one
-- list per place, each with an entry for count, then each column of sums,
-- then each of distinct_on (sketches are canonical, equal sets give equal
-- bytes: compared as bytes):
--   keys      "g1, g2, " (the key columns)
--   keys_ddr  "d.g1 = r.g1 AND " (with the key type's own =)
--   vals      pg_catalog.count(*) AS count, coalesce(sum(x), 0) AS sum_x, ...
--   cols      count, sum_x, ...
--   add_set, fresh_set   the SET of an upsert adding to, or replacing, a row
--   old_vals, new_vals   a row's values before and after, to compare
--   ev_vals   the events' branch: 1 AS "n$", x AS "v$x", NULL::bigint AS "o$count", ...
--   ro_vals   the rollup rows' branch: 0, NULL::int4, r.count, r.sum_x, ...
--   agg_vals  sum("n$")::bigint AS count, coalesce(sum("v$x"), 0) AS sum_x, ...
--   agg_new, agg_old     the fresh and the stored values, aggregated over both branches
CREATE OR REPLACE FUNCTION counter_internal.rollup_sql_parts(r counter.rollups,
    OUT keys text, OUT keys_ddr text, OUT vals text, OUT cols text, OUT add_set text, OUT fresh_set text,
    OUT old_vals text, OUT new_vals text, OUT ev_vals text, OUT ro_vals text, OUT agg_vals text,
    OUT agg_new text, OUT agg_old text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st text;                -- type of a sum column
    g name;
    t oid;
BEGIN
    keys := ''; keys_ddr := '';
    FOREACH g IN ARRAY r.group_by LOOP
        SELECT a.atttypid INTO STRICT t FROM pg_attribute a WHERE a.attrelid = r.source AND a.attname = g;
        keys := keys || format('%I, ', g);
        keys_ddr := keys_ddr || format('d.%1$I %2$s r.%1$I AND ', g, (counter_internal.key_operators(t))[1]);
    END LOOP;
    vals := 'pg_catalog.count(*) AS count';
    cols := 'count';
    add_set := 'count = r.count + EXCLUDED.count';
    fresh_set := 'count = EXCLUDED.count';
    old_vals := 'r.count';
    ev_vals := '1 AS "n$", NULL::bigint AS "o$count"';
    ro_vals := '0, r.count';
    agg_vals := 'pg_catalog.sum("n$")::bigint AS count';
    agg_new := 'pg_catalog.sum("n$")::bigint';
    agg_old := 'pg_catalog.max("o$count")';
    new_vals := 'EXCLUDED.count';
    FOREACH g IN ARRAY r.sums LOOP
        vals := vals || format(', coalesce(pg_catalog.sum(%1$I), 0) AS %2$I', g, 'sum_' || g);
        cols := cols || format(', %I', 'sum_' || g);
        add_set := add_set || format(', %1$I = r.%1$I + EXCLUDED.%1$I', 'sum_' || g);
        fresh_set := fresh_set || format(', %1$I = EXCLUDED.%1$I', 'sum_' || g);
        old_vals := old_vals || format(', r.%I', 'sum_' || g);
        SELECT CASE WHEN a.atttypid IN ('int2'::regtype, 'int4'::regtype) THEN 'bigint' ELSE 'numeric' END
        INTO STRICT st FROM pg_attribute a WHERE a.attrelid = r.source AND a.attname = g;
        ev_vals := ev_vals || format(', %1$I AS %2$I, NULL::%3$s AS %4$I', g, 'v$' || g, st, 'o$sum_' || g);
        ro_vals := ro_vals || format(', NULL::%1$s, r.%2$I', (SELECT format_type(a.atttypid, NULL) FROM pg_attribute a
                                     WHERE a.attrelid = r.source AND a.attname = g), 'sum_' || g);
        agg_vals := agg_vals || format(', coalesce(pg_catalog.sum(%1$I), 0)::%2$s AS %3$I', 'v$' || g, st, 'sum_' || g);
        agg_new := agg_new || format(', coalesce(pg_catalog.sum(%1$I), 0)::%2$s', 'v$' || g, st);
        agg_old := agg_old || format(', pg_catalog.max(%I)', 'o$sum_' || g);
        new_vals := new_vals || format(', EXCLUDED.%I', 'sum_' || g);
    END LOOP;
    FOREACH g IN ARRAY r.distinct_on LOOP
        vals := vals || format(', counter.hll_add_agg(%1$I, %3$s) AS %2$I', g, 'distinct_' || g, r.hll_precision);
        cols := cols || format(', %I', 'distinct_' || g);
        add_set := add_set || format(', %1$I = counter.hll_union(r.%1$I, EXCLUDED.%1$I)', 'distinct_' || g);
        fresh_set := fresh_set || format(', %1$I = EXCLUDED.%1$I', 'distinct_' || g);
        old_vals := old_vals || format(', r.%I::bytea', 'distinct_' || g);
        new_vals := new_vals || format(', EXCLUDED.%I::bytea', 'distinct_' || g);
        ev_vals := ev_vals || format(', %1$I AS %2$I, NULL::counter.hll AS %3$I', g, 'w$' || g, 'o$distinct_' || g);
        ro_vals := ro_vals || format(', NULL::%1$s, r.%2$I', (SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
                                     WHERE a.attrelid = r.source AND a.attname = g), 'distinct_' || g);
        agg_vals := agg_vals || format(', counter.hll_add_agg(%1$I, %3$s) AS %2$I', 'w$' || g, 'distinct_' || g,
                                       r.hll_precision);
        agg_new := agg_new || format(', counter.hll_add_agg(%I, %s)::bytea', 'w$' || g, r.hll_precision);
        agg_old := agg_old || format(', counter.hll_union_agg(%I)::bytea', 'o$distinct_' || g);
    END LOOP;
END
$$;

-- The SQL a rollup runs, generated from its catalog row with the current
-- names of its tables (regclass output under a pinned search_path is
-- always schema-qualified).
CREATE OR REPLACE FUNCTION counter_internal.rollup_sql(rid integer)
RETURNS counter.rollups
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups := counter_internal.rollup_by_id(rid);
    p record;               -- counter_internal.rollup_sql_parts
    hour_expr text;
    where_filter text;
BEGIN
    hour_expr := format('pg_catalog.date_bin(''01:00:00''::pg_catalog.interval, %I, '
                        '''2000-01-01 00:00:00+00''::pg_catalog.timestamptz)', r.time_column);
    SELECT * INTO p FROM counter_internal.rollup_sql_parts(r);
    -- The stored tree, applied to each event row (src/filter.cpp); the
    -- trigger applies it in C++ before add_sql sees new_rows.
    where_filter := CASE WHEN r.filter IS NULL THEN 'true'
                         ELSE format('counter_internal.filter_match(''rollup'', %s, e)', r.rollup_id) END;

    -- Trigger mode, once per transaction at its commit: one upsert per
    -- (key, hour) in (key, hour) order. new_rows holds the rows of the
    -- transaction's statements that passed the filter; the trigger took the
    -- shared locks of their hours, in hour order, at each statement
    -- (src/rollup.cpp).
    r.add_sql := format($f$
        INSERT INTO %1$s AS r (%2$shour, %3$s)
        SELECT %2$s%4$s AS hour, %5$s FROM new_rows
        GROUP BY %2$s%4$s ORDER BY %2$s%4$s
        ON CONFLICT (%2$shour) DO UPDATE SET %6$s$f$,
        r.rollup_table, p.keys, p.cols, hour_expr, p.vals, p.add_set);
    -- Recompute [$1, $2) (or only the hours in $3): one GROUP BY over the
    -- events and the rollup rows of those hours together finds the rows that
    -- differ (no join, no per-row lock or probe of unchanged rows); write only
    -- those, and delete rows whose hour has no events any more (count 0).
    r.refresh_sql := format($f$
        WITH diff AS MATERIALIZED (
            SELECT %2$shour, %5$s
            FROM (SELECT %2$s%4$s AS hour, %6$s FROM %8$s AS e
                  WHERE %9$I >= $1 AND %9$I < $2 AND ($3 IS NULL OR %4$s = ANY ($3)) AND %7$s
                  UNION ALL
                  SELECT %2$shour, %10$s FROM %1$s r
                  WHERE r.hour >= $1 AND r.hour < $2 AND ($3 IS NULL OR r.hour = ANY ($3))) u
            GROUP BY %2$shour
            HAVING ROW(%11$s) IS DISTINCT FROM ROW(%12$s)),
        up AS (
            INSERT INTO %1$s AS r (%2$shour, %3$s)
            SELECT %2$shour, %3$s FROM diff d WHERE d.count > 0
            ON CONFLICT (%2$shour) DO UPDATE SET %13$s
            WHERE ROW(%14$s) IS DISTINCT FROM ROW(%15$s)
            RETURNING 1),
        del AS (
            DELETE FROM %1$s AS r USING diff d
            WHERE d.count = 0 AND %16$sd.hour OPERATOR(pg_catalog.=) r.hour
            RETURNING 1)
        SELECT (SELECT pg_catalog.count(*) FROM up) + (SELECT pg_catalog.count(*) FROM del)$f$,
        r.rollup_table, p.keys, p.cols, hour_expr, p.agg_vals, p.ev_vals, where_filter, r.source, r.time_column,
        p.ro_vals, p.agg_new, p.agg_old, p.fresh_set, p.old_vals, p.new_vals, p.keys_ddr);
    IF r.distributed THEN
        -- Citus: the statements the refresh runs (rollup_citus_sql); stored to be read
        r.refresh_sql := pg_catalog.array_to_string(counter_internal.rollup_citus_sql(r), E';\n');
    END IF;
    r.sql_for := format('%s|%s', r.source, r.rollup_table);
    RETURN r;
END
$$;

-- Citus: the pieces of a distributed rollup's statements (rollup_citus_sql,
-- rollup_citus_add_sql), from its catalog row: the group columns (keys; as
-- columns of the events e, ekeys; same: e.<col> = r.<col> AND ...), the
-- value columns (cols), their aggregates over the events (vals), their SET
-- clauses replacing (fresh_set) and adding to (add_set) a row, the row
-- compared before and after (old_vals, new_vals), the UTC hour of an event
-- (hour_expr) and the filter (f: SQL printed from the stored tree, every
-- name qualified; 'true' without one).
CREATE OR REPLACE FUNCTION counter_internal.rollup_citus_parts(r counter.rollups,
    OUT keys text, OUT ekeys text, OUT same text, OUT vals text, OUT cols text, OUT fresh_set text,
    OUT add_set text, OUT old_vals text, OUT new_vals text, OUT hour_expr text, OUT f text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g name;
    t oid;
BEGIN
    hour_expr := format('pg_catalog.date_bin(''01:00:00''::pg_catalog.interval, e.%I, '
                        '''2000-01-01 00:00:00+00''::pg_catalog.timestamptz)', r.time_column);
    keys := ''; ekeys := ''; same := '';
    vals := 'pg_catalog.count(*) AS count';
    cols := 'count';
    fresh_set := 'count = EXCLUDED.count';
    add_set := 'count = r.count OPERATOR(pg_catalog.+) EXCLUDED.count';
    old_vals := 'r.count';
    new_vals := 'EXCLUDED.count';
    f := coalesce(counter_internal.filter_sql(r.source, r.filter, r.filter_tree, r.filter_relid, r.owner, 'e'), 'true');
    FOREACH g IN ARRAY r.group_by LOOP
        SELECT a.atttypid INTO STRICT t FROM pg_attribute a WHERE a.attrelid = r.source AND a.attname = g;
        keys := keys || format('%I, ', g);
        ekeys := ekeys || format('e.%I, ', g);
        same := same || format('e.%1$I %2$s r.%1$I AND ', g, (counter_internal.key_operators(t))[1]);
    END LOOP;
    FOREACH g IN ARRAY r.sums LOOP
        vals := vals || format(', coalesce(pg_catalog.sum(e.%1$I), 0) AS %2$I', g, 'sum_' || g);
        cols := cols || format(', %I', 'sum_' || g);
        fresh_set := fresh_set || format(', %1$I = EXCLUDED.%1$I', 'sum_' || g);
        add_set := add_set || format(', %1$I = r.%1$I OPERATOR(pg_catalog.+) EXCLUDED.%1$I', 'sum_' || g);
        old_vals := old_vals || format(', r.%I', 'sum_' || g);
        new_vals := new_vals || format(', EXCLUDED.%I', 'sum_' || g);
    END LOOP;
    FOREACH g IN ARRAY r.distinct_on LOOP
        vals := vals || format(', counter.hll_add_agg(e.%1$I, %3$s) AS %2$I', g, 'distinct_' || g, r.hll_precision);
        cols := cols || format(', %I', 'distinct_' || g);
        fresh_set := fresh_set || format(', %1$I = EXCLUDED.%1$I', 'distinct_' || g);
        add_set := add_set || format(', %1$I = counter.hll_union(r.%1$I, EXCLUDED.%1$I)', 'distinct_' || g);
        old_vals := old_vals || format(', r.%I::bytea', 'distinct_' || g);
        new_vals := new_vals || format(', EXCLUDED.%I::bytea', 'distinct_' || g);
    END LOOP;
END
$$;

-- Citus (doc/citus.md, "Rollups on a distributed table"): the recompute of
-- [$1, $2) (or only the hours in $3) of a distributed rollup, two
-- statements: an upsert of the groups that have events, writing only the
-- rows that differ, and a delete of the rows whose group has no event any
-- more. When the rollup table is colocated with the source (grouped by its
-- distribution column), Citus pushes each down whole to each shard. When it
-- is a table of the coordinator (grouped by other columns), the upsert's
-- GROUP BY runs on the shards (partial counts, sums and sketches, combined
-- on the coordinator), and the delete's groups that still have events are
-- found by a DISTINCT on the shards, brought to the coordinator as one
-- intermediate result (a subquery not correlated with the rollup table,
-- which Citus plans apart). The filter is SQL printed from the stored tree
-- (counter_internal.filter_sql, every name qualified): the shards have no
-- catalog of counter_ext. Run as the owner.
CREATE OR REPLACE FUNCTION counter_internal.rollup_citus_sql(r counter.rollups)
RETURNS text[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p record := counter_internal.rollup_citus_parts(r);
    up text; -- the upsert
BEGIN
    up := format($f$
        INSERT INTO %1$s AS r (%2$shour, %3$s)
        SELECT %4$s%5$s, %6$s FROM %7$s AS e
        WHERE e.%8$I >= $1 AND e.%8$I < $2 AND ($3 IS NULL OR %5$s = ANY ($3)) AND (%9$s)
        GROUP BY %4$s%5$s
        ON CONFLICT (%2$shour) DO UPDATE SET %10$s
        WHERE ROW(%11$s) IS DISTINCT FROM ROW(%12$s)$f$,
        r.rollup_table, p.keys, p.cols, p.ekeys, p.hour_expr, p.vals, r.source, r.time_column, p.f, p.fresh_set,
        p.old_vals, p.new_vals);
    IF NOT counter_internal.citus_distributed(r.rollup_table) THEN
        RETURN ARRAY[up, format($f$
        DELETE FROM %1$s AS r
        WHERE r.hour >= $1 AND r.hour < $2 AND ($3 IS NULL OR r.hour = ANY ($3))
          AND NOT EXISTS (SELECT FROM (SELECT DISTINCT %2$s%3$s AS hour FROM %4$s AS e
                                       WHERE e.%5$I >= $1 AND e.%5$I < $2 AND ($3 IS NULL OR %3$s = ANY ($3))
                                         AND (%6$s)) e
                          WHERE %7$se.hour OPERATOR(pg_catalog.=) r.hour)$f$,
            r.rollup_table, p.ekeys, p.hour_expr, r.source, r.time_column, p.f, p.same)];
    END IF;
    RETURN ARRAY[up, format($f$
        DELETE FROM %1$s AS r
        WHERE r.hour >= $1 AND r.hour < $2 AND ($3 IS NULL OR r.hour = ANY ($3))
          AND NOT EXISTS (SELECT FROM %2$s AS e WHERE %3$se.%4$I >= r.hour AND e.%4$I < r.hour + '01:00:00'::pg_catalog.interval
                          AND (%5$s))$f$,
        r.rollup_table, r.source, p.same, r.time_column, p.f)];
END
$$;

-- Citus, trigger mode (doc/citus.md, "Trigger mode"): the text after the
-- target of the upsert the shard trigger of a trigger-mode rollup runs at its
-- writer's commit (src/rollup.cpp, shard_add: "INSERT INTO <the rollup's
-- colocated shard> AS r " and this), on the rows of the transaction's
-- statements on that shard as new_rows: one row per (group, hour) in (group,
-- hour) order, only the rows that pass the filter (SQL printed from the
-- stored tree, every name qualified: the shards have no catalog), added to
-- the row there. Run as the owner, restricted, search_path pinned.
CREATE OR REPLACE FUNCTION counter_internal.rollup_citus_add_sql(r counter.rollups)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p record := counter_internal.rollup_citus_parts(r);
BEGIN
    RETURN format($f$(%1$shour, %2$s)
        SELECT %3$s%4$s, %5$s FROM new_rows AS e WHERE (%6$s)
        GROUP BY %3$s%4$s ORDER BY %3$s%4$s
        ON CONFLICT (%1$shour) DO UPDATE SET %7$s$f$,
        p.keys, p.cols, p.ekeys, p.hour_expr, p.vals, p.f, p.add_set);
END
$$;

-- The dirty log of distributed rollup r: beside its source
-- (<schema>.counter_rollup_<id>_dirty) or, made by 1.7 or for an owner who
-- may not create there, counter_internal.rollup_<id>_dirty
-- (counter.rollups.state_schema).
CREATE OR REPLACE FUNCTION counter_internal.rollup_dirty_table(r counter.rollups)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE WHEN r.state_schema IS NULL
            THEN pg_catalog.format('counter_internal.%I', 'rollup_' || r.rollup_id || '_dirty')
            ELSE pg_catalog.format('%I.%I', r.state_schema, 'counter_rollup_' || r.rollup_id || '_dirty')
       END
$$;

-- Deletes the dirty marks of rollup rid in [from_h, to_h) (and in hours,
-- unless NULL) and returns their hours. Every taker of marks (a refresh
-- chunk, rollup_dirty_chunks, rollup_drop) locks them in one order, by hour
-- (and place), before it deletes them, whatever plan the caller's settings
-- give the scan: two takers of the same marks each holding one the other
-- waits for deadlocked (citus_rollup.sh: a drop whose session planned a
-- sequential scan beside a chunk). Marks committed after the statement
-- began are left for the next taker.
CREATE OR REPLACE FUNCTION counter_internal.rollup_marks_take(rid integer, from_h timestamptz, to_h timestamptz,
                                                            hours timestamptz[])
RETURNS SETOF timestamptz
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DELETE FROM counter.rollup_dirty d
WHERE d.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
    SELECT x.ctid FROM counter.rollup_dirty x
    WHERE x.rollup_id OPERATOR(pg_catalog.=) rid AND x.hour OPERATOR(pg_catalog.>=) from_h
      AND x.hour OPERATOR(pg_catalog.<) to_h AND (hours IS NULL OR x.hour OPERATOR(pg_catalog.=) ANY (hours))
    ORDER BY x.hour, x.ctid
    FOR UPDATE))
RETURNING d.hour
$$;

-- Citus: moves the marks the shards wrote in a distributed rollup's dirty
-- log (counter_internal.rollup_dirty_table, src/rollup.cpp) into
-- counter.rollup_dirty, in one distributed transaction, as the owner. A mark
-- it moves was committed with its rows on their shard, so a recompute after
-- it sees them; a mark committed later stays for the next refresh.
CREATE OR REPLACE FUNCTION counter_internal.rollup_citus_marks(r counter.rollups)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF r.mode OPERATOR(pg_catalog.=) 'trigger' THEN
        -- the recompute that follows in this transaction holds its hours
        -- on each node through one connection (rollup_refresh_chunk)
        PERFORM pg_catalog.set_config('citus.max_adaptive_executor_pool_size', '1', true);
    END IF;
    INSERT INTO counter.rollup_dirty (rollup_id, hour)
    SELECT r.rollup_id, x.h FROM counter_internal.exec_as_owner(r.owner,
        format('WITH d AS (DELETE FROM %s RETURNING hour) SELECT DISTINCT d.hour FROM d WHERE $1',
               counter_internal.rollup_dirty_table(r)), true) AS x(h timestamptz);
END
$$;

-- Stores the rollup's SQL in the catalog (at creation and rule changes).
CREATE OR REPLACE FUNCTION counter_internal.rollup_build_sql(rid integer)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups := counter_internal.rollup_sql(rid);
BEGIN
    UPDATE counter.rollups u SET sql_for = r.sql_for, add_sql = r.add_sql, refresh_sql = r.refresh_sql
    WHERE u.rollup_id = rid;
END
$$;

-- Makes what rollup rid needs beyond its table, from its catalog row: the
-- stored SQL, EXECUTE on filter_match for its owner (the refresh applies the
-- stored filter as the owner), and the triggers on the source (dropped and
-- made again). Used by counter.rollup_create and by the update from 1.1.
CREATE OR REPLACE FUNCTION counter_internal.rollup_build(rid integer)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
    trg name;
    cmd text;
BEGIN
    PERFORM counter_internal.rollup_build_sql(rid);
    SELECT * INTO STRICT r FROM counter.rollups c WHERE c.rollup_id OPERATOR(pg_catalog.=) rid;
    IF r.distributed THEN
        -- Citus: the dirty log belongs to the rollup's owner (the shard
        -- triggers write it as the source's owner); the triggers are made on
        -- the distributed table and copied by Citus to every shard, where no
        -- catalog of counter_ext is: the arguments carry what the shard's
        -- trigger needs there (src/rollup.cpp, shard_mark)
        EXECUTE format('ALTER TABLE %s OWNER TO %s', counter_internal.rollup_dirty_table(r), r.owner);
        FOR cmd IN SELECT format('DROP TRIGGER %I ON %s', g.tgname, r.source) FROM pg_catalog.pg_trigger g
                   WHERE g.tgrelid OPERATOR(pg_catalog.=) r.source
                     AND g.tgname OPERATOR(pg_catalog.~) format('^counter_rollup_%s_(insert|delete|update)$', rid)
                   UNION ALL
                   SELECT format('CREATE TRIGGER %I AFTER %s ON %s %s FOR EACH STATEMENT'
                                 ' EXECUTE FUNCTION counter_internal.rollup_shard_mark(%L, %L, %L, %L, %L%s)',
                                 'counter_rollup_' || rid || '_' || k.trg, k.event, r.source, k.referencing,
                                 rid, 'citus', r.time_column, counter_internal.partition_citus_column(r.source),
                                 counter_internal.rollup_dirty_table(r),
                                 -- trigger mode: its INSERT trigger adds the rows to the
                                 -- rollup's shard at commit (src/rollup.cpp, shard_add)
                                 CASE WHEN r.mode OPERATOR(pg_catalog.=) 'trigger' AND k.trg OPERATOR(pg_catalog.=) 'insert'
                                      THEN format(', %L, %L', r.rollup_table, counter_internal.rollup_citus_add_sql(r))
                                      ELSE '' END)
                   FROM (VALUES ('insert', 'INSERT', 'REFERENCING NEW TABLE AS new_rows'),
                                ('delete', 'DELETE', 'REFERENCING OLD TABLE AS old_rows'),
                                ('update', 'UPDATE', 'REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows'))
                        AS k(trg, event, referencing) LOOP
            PERFORM counter_internal.citus_trigger_ddl(cmd);
        END LOOP;
        RETURN;
    END IF;
    IF r.filter IS NOT NULL THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION counter_internal.filter_match(text, integer, anyelement) TO %s',
                       r.owner);
    END IF;
    IF r.mode = 'buffered' THEN
        -- the owner reads and flushes its rollup's pending sums, as itself
        -- (the function checks that its caller is a member of the owner)
        EXECUTE format('GRANT EXECUTE ON FUNCTION counter_internal.rollup_buffer_rows(integer, boolean) TO %s',
                       r.owner);
    END IF;
    FOR trg IN SELECT g.tgname FROM pg_catalog.pg_trigger g
               WHERE g.tgrelid OPERATOR(pg_catalog.=) r.source
                 AND g.tgname OPERATOR(pg_catalog.~) format('^counter_rollup_%s_r?(insert|delete|update)$', rid) LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', trg, r.source);
    END LOOP;
    EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON %s REFERENCING NEW TABLE AS new_rows '
                   'FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.rollup_trigger(%L)',
                   'counter_rollup_' || rid || '_insert', r.source, rid);
    EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON %s REFERENCING OLD TABLE AS old_rows '
                   'FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.rollup_trigger(%L)',
                   'counter_rollup_' || rid || '_delete', r.source, rid);
    EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON %s REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows '
                   'FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.rollup_trigger(%L)',
                   'counter_rollup_' || rid || '_update', r.source, rid);
    -- Replicated: the apply worker of a subscription (session_replication_role
    -- = replica) fires only row triggers enabled for replicas, and none of the
    -- above; these mark the hours of the rows it applies dirty (once per
    -- (hour, transaction)), and the refresh recomputes them from the rows.
    IF r.replicated THEN
        FOREACH trg IN ARRAY ARRAY['insert', 'delete', 'update']::name[] LOOP
            EXECUTE format('CREATE TRIGGER %I AFTER %s ON %s FOR EACH ROW EXECUTE FUNCTION counter_internal.rollup_trigger(%L)',
                           'counter_rollup_' || rid || '_r' || trg, pg_catalog.upper(trg), r.source, rid);
            EXECUTE format('ALTER TABLE %s ENABLE REPLICA TRIGGER %I', r.source, 'counter_rollup_' || rid || '_r' || trg);
        END LOOP;
    END IF;
END
$$;

-- The statement-level trigger on the source (argument: rollup id), in C++
-- (src/rollup.cpp). It runs as the writer, reads the catalog row as the
-- catalog's owner, checks the table it fires on is the rollup's source,
-- records the hours of deferred inserts, deletes and updates in the dirty
-- log (computed in C++: no SQL runs on the rows), and in trigger mode runs
-- add_sql as the rollup's owner (restricted, search_path pinned) on the rows
-- that pass the stored filter, with plans kept per backend. Only
-- counter.rollup_create attaches it.
CREATE OR REPLACE FUNCTION counter_internal.rollup_trigger()
RETURNS trigger
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_rollup_fire';

-- (1.8) The trigger of a rollup of a table Citus distributes, on its shards
-- (src/rollup.cpp, shard_mark); PUBLIC may execute it, as
-- counter_internal.tracked_shard_fold. 1.7's are rollup_trigger.
CREATE OR REPLACE FUNCTION counter_internal.rollup_shard_mark()
RETURNS trigger
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_rollup_shard_mark';

-- (1.8) Citus, trigger mode: takes alone the hours [from_h, to_h) (those in
-- 'hours' when not NULL) of the trigger-mode rollup whose table is 'rollup'
-- on this node, for the recompute that calls it on every shard as the
-- rollup's owner (rollup_refresh_chunk; src/rollup.cpp). PUBLIC may execute
-- it (99_internal.sql): it holds only the hours of a table its caller owns.
CREATE OR REPLACE FUNCTION counter_internal.rollup_node_hold(rollup regclass, from_h timestamptz, to_h timestamptz,
                                                             hours timestamptz[])
RETURNS boolean
LANGUAGE c STABLE
AS 'MODULE_PATHNAME', 'counter_rollup_node_hold';

-- Registers or removes the job of a rollup so it mirrors counter.rollups.
CREATE OR REPLACE FUNCTION counter_internal.rollup_job_sync(rollup_name text)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    every interval;
BEGIN
    SELECT r.refresh_every INTO every FROM counter.rollups r WHERE r.name OPERATOR(pg_catalog.=) rollup_name;
    IF FOUND THEN
        PERFORM counter.job_register('rollup_refresh', rollup_name, every);
    ELSE
        PERFORM counter.job_unregister('rollup_refresh', rollup_name);
    END IF;
END
$$;

-- The oldest hour of a rollup that may be recomputed: hours before the lowest
-- range partition of the source (older partitions may have been dropped) and
-- before now() - retention are outside the source's retention. Reads only
-- catalogs (pg_class, pg_inherits, the relcache's partition descriptor).
CREATE OR REPLACE FUNCTION counter_internal.rollup_horizon(rid integer)
RETURNS timestamptz
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups := counter_internal.rollup_by_id(rid);
    lowest timestamptz;
    bound text;
    h timestamptz := '-infinity';
BEGIN
    IF EXISTS (SELECT FROM pg_partitioned_table p
               JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]
               WHERE p.partrelid = r.source AND p.partstrat = 'r' AND p.partnatts = 1
                 AND a.attname = r.time_column) THEN
        FOR bound IN
            SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM '^FOR VALUES FROM \(''([^'']*)''\)')
            FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = r.source
        LOOP
            IF bound IS NOT NULL AND (lowest IS NULL OR bound::timestamptz < lowest) THEN
                lowest := bound::timestamptz;
            END IF;
        END LOOP;
        IF lowest IS NOT NULL THEN
            h := lowest;
        END IF;
    END IF;
    IF r.retention IS NOT NULL THEN
        h := greatest(h, now() - r.retention);
    END IF;
    IF isfinite(h) AND counter.rollup_hour(h) <> h THEN
        h := counter.rollup_hour(h) + interval '1 hour';  -- a partial hour is outside
    END IF;
    RETURN h;
END
$$;

-- A refresh chunk's or a flush's first lock on the rollup table (ROW
-- EXCLUSIVE, as the owner): taken before the dirty marks or buffer log rows,
-- in rollup_drop's order. A rollup dropped since the chunk read its row: 42704.
CREATE OR REPLACE FUNCTION counter_internal.rollup_lock_table(r counter.rollups)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tbl text;
BEGIN
    SELECT format('%I.%I', n.nspname, c.relname) INTO tbl
    FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
    WHERE c.oid OPERATOR(pg_catalog.=) r.rollup_table::oid;
    IF tbl IS NULL THEN
        RAISE EXCEPTION 'rollup "%" does not exist', r.name USING ERRCODE = 'undefined_object',
            DETAIL = 'It was dropped while this refresh or flush started.';
    END IF;
    PERFORM counter_internal.exec_as_owner_cmd(r.owner, format('LOCK TABLE %s IN ROW EXCLUSIVE MODE', tbl), true);
END
$$;

-- Recomputes hours of one chunk (one UTC day) of a rollup from the events:
-- all hours in [from_h, to_h), or only those in hours. wait = false skips a
-- chunk another session is refreshing (returns NULL). Returns the rollup rows
-- written or deleted. Needs READ COMMITTED: each step must see what the
-- previous step waited for. An entry point of the refresh procedures: it
-- checks its caller, takes the locks and consumes the dirty marks itself, and
-- runs the recompute (the source, the filter, the rollup table) as the
-- rollup's owner, restricted: whoever calls (a superuser's run_jobs, the
-- worker), the owner's code cannot leave the owner's rights.
CREATE OR REPLACE FUNCTION counter_internal.rollup_refresh_chunk(rid integer, from_h timestamptz, to_h timestamptz,
                                             hours timestamptz[], wait boolean)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
    n bigint;
    sql text;
BEGIN
    IF rid IS NULL OR from_h IS NULL OR to_h IS NULL OR wait IS NULL THEN
        RAISE EXCEPTION 'only hours of counter_internal.rollup_refresh_chunk may be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO r FROM counter.rollups c WHERE c.rollup_id OPERATOR(pg_catalog.=) rid;
    PERFORM counter_internal.require_owner(r.owner, pg_catalog.format('rollup %s', rid), 'refresh it');
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'a rollup refresh needs READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'invalid_transaction_state';
    END IF;
    r := counter_internal.rollup_sql(rid);
    IF counter_internal.rollup_day_number(from_h) <> counter_internal.rollup_day_number(to_h - interval '1 hour') THEN
        RAISE EXCEPTION 'a refresh chunk is at most one UTC day' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF wait THEN
        PERFORM counter_internal.lock_take('rollup_day', rid, from_h);
    ELSIF NOT counter_internal.lock_take('rollup_day', rid, from_h, wait => false) THEN
        RETURN NULL;
    END IF;
    IF NOT r.distributed THEN
        -- the rollup table before the marks, as rollup_drop takes them
        PERFORM counter_internal.rollup_lock_table(r);
    END IF;
    IF r.distributed AND r.mode OPERATOR(pg_catalog.=) 'trigger' THEN
        -- Citus: the same on every node, in its lock space there: one
        -- statement sent to each shard of the rollup table, in this
        -- distributed transaction, as the owner (src/rollup.cpp, shard_add),
        -- through one connection per node, for the rest of the transaction
        -- (two of its connections to a node would wait for each other's
        -- hold; Citus reaches a shard through the connection that already
        -- touched it, as the move of the marks did: rollup_citus_marks)
        PERFORM pg_catalog.set_config('citus.max_adaptive_executor_pool_size', '1', true);
        PERFORM counter_internal.exec_as_owner_cmd(r.owner, format(
            'SELECT 1 FROM %s r WHERE NOT counter_internal.rollup_node_hold(%L::pg_catalog.regclass, $1, $2, $3) LIMIT 1',
            r.rollup_table, r.rollup_table), from_h, to_h, hours);
    ELSIF r.mode IN ('trigger', 'buffered') THEN
        -- Wait for writers still adding to these hours; later ones wait for us.
        PERFORM counter_internal.lock_take('rollup_hour', rid, h)
        FROM (SELECT h FROM generate_series(from_h, to_h - interval '1 hour', interval '1 hour') h
              WHERE hours IS NULL OR h = ANY (hours) ORDER BY h) s;
    END IF;
    -- Consume the dirty marks first: a mark committed after this point
    -- survives, so its events are recomputed by the next refresh.
    PERFORM counter_internal.rollup_marks_take(rid, from_h, to_h, hours);
    IF r.distributed THEN
        -- Citus: two statements pushed down to the shards (rollup_citus_sql)
        n := 0;
        FOREACH sql IN ARRAY counter_internal.rollup_citus_sql(r) LOOP
            n := n + counter_internal.exec_as_owner_cmd(r.owner, sql, from_h, to_h, hours);
        END LOOP;
    ELSE
        SELECT x.n INTO n FROM counter_internal.exec_as_owner(r.owner, r.refresh_sql, from_h, to_h, hours) AS x(n bigint);
    END IF;
    IF r.mode = 'buffered' THEN
        -- The GROUP BY counted every committed row of these hours (writers
        -- wait for our hour locks): what shared memory holds for them is
        -- taken out when this commits (src/rollup_buffer.cpp).
        PERFORM counter_internal.rollup_buffer_take(rid, from_h, to_h, hours);
    END IF;
    RETURN n;
END
$$;
-- The chunks (UTC days, clamped to the source's retention) of a full
-- recompute of [from_ts, to_ts). An entry point of the refresh procedures
-- (checks its caller).
CREATE OR REPLACE FUNCTION counter_internal.rollup_range_chunks(rollup_name text, from_ts timestamptz, to_ts timestamptz)
RETURNS TABLE (rollup_id integer, from_h timestamptz, to_h timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
    horizon timestamptz;
    a timestamptz := from_ts;
BEGIN
    IF rollup_name IS NULL OR from_ts IS NULL OR to_ts IS NULL THEN
        RAISE EXCEPTION 'rollup name and range must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    r := counter_internal.rollup_get(rollup_name);
    PERFORM counter_internal.require_owner(r.owner, pg_catalog.format('rollup "%s"', r.name), 'refresh it');
    IF NOT isfinite(from_ts) OR NOT isfinite(to_ts) OR counter.rollup_hour(from_ts) <> from_ts
       OR counter.rollup_hour(to_ts) <> to_ts THEN
        RAISE EXCEPTION 'a refresh range must be whole UTC hours: % to %', from_ts, to_ts
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF to_ts < from_ts THEN
        RAISE EXCEPTION 'a refresh range must not end before it starts' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    horizon := counter_internal.rollup_horizon(r.rollup_id);
    IF a < horizon THEN
        RAISE NOTICE 'rollup "%": % hours before % are outside the source''s retention and were left as they were',
            rollup_name, (extract(epoch FROM least(horizon, to_ts) - a) / 3600)::bigint, horizon;
        a := least(horizon, to_ts);
    END IF;
    WHILE a < to_ts LOOP
        rollup_id := r.rollup_id;
        from_h := a;
        to_h := least(to_ts, date_trunc('day', a, 'UTC') + interval '1 day');
        RETURN NEXT;
        a := to_h;
    END LOOP;
END
$$;
-- The chunks of a routine refresh: the dirty hours grouped by UTC day. Dirty
-- hours outside the source's retention are dropped from the log (they can
-- never be recomputed into a smaller number). An entry point of the refresh
-- procedures (checks its caller).
CREATE OR REPLACE FUNCTION counter_internal.rollup_dirty_chunks(rollup_name text)
RETURNS TABLE (rollup_id integer, from_h timestamptz, to_h timestamptz, hours timestamptz[])
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups := counter_internal.rollup_get(rollup_name);
    rid integer := r.rollup_id;
    horizon timestamptz;
    dropped bigint;
BEGIN
    PERFORM counter_internal.require_owner(r.owner, pg_catalog.format('rollup "%s"', r.name), 'refresh it');
    IF r.distributed THEN
        PERFORM counter_internal.rollup_citus_marks(r);
    END IF;
    horizon := counter_internal.rollup_horizon(rid);
    SELECT count(DISTINCT g.h) INTO dropped FROM counter_internal.rollup_marks_take(rid, '-infinity', horizon, NULL) g(h);
    IF dropped > 0 THEN
        RAISE WARNING 'rollup "%": % dirty hours before % are outside the source''s retention and were left as they were',
            rollup_name, dropped, horizon;
    END IF;
    RETURN QUERY
        SELECT rid, min(d.hour), max(d.hour) + interval '1 hour', array_agg(DISTINCT d.hour ORDER BY d.hour)
        FROM counter.rollup_dirty d
        WHERE d.rollup_id = rid
        GROUP BY counter_internal.rollup_day_number(d.hour)
        ORDER BY 2;
END
$$;
-- Records a refresh in the one run record (counter.job_runs, kind
-- 'rollup_refresh': the job's run, or a row of its own for a direct call;
-- the rollup's part in info). Every refresh has its row, so none waits for
-- another's. error: {sqlstate, message, detail, hint, context} of a failed
-- refresh. An entry point of the refresh functions (checks its caller).
CREATE OR REPLACE FUNCTION counter_internal.rollup_record(rid integer, started timestamptz, outcome text, n bigint,
    error jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
    run bigint;
BEGIN
    SELECT * INTO r FROM counter.rollups c WHERE c.rollup_id OPERATOR(pg_catalog.=) rid;
    PERFORM counter_internal.require_owner(r.owner, pg_catalog.format('rollup %s', rid), 'record its refresh');
    IF error IS NULL AND outcome LIKE 'skipped %' THEN
        -- chunks another session was refreshing were left (their dirty marks
        -- stay): the run is recorded as skipped, with the reason
        run := counter_internal.run_skipped('rollup_refresh', r.name, rid,
            outcome || ': another session is refreshing them');
        PERFORM counter_internal.run_note(run,
            pg_catalog.jsonb_build_object('outcome', rollup_record.outcome, 'rows', n), n);
        RETURN;
    END IF;
    PERFORM counter_internal.run_end(
        counter_internal.run_begin('rollup_refresh', r.name, rid, '{}', started),
        pg_catalog.jsonb_build_object('outcome', outcome, 'rows', n, 'error', error ->> 'message'),
        rows_affected => n, error => error);
END
$$;
-- Full recompute of [from_ts, to_ts) in the caller's transaction; waits for
-- chunks being refreshed elsewhere. Returns the rollup rows written or
-- deleted. The steps of CALL counter.rollup_refresh(name, from_ts, to_ts),
-- in the one loop (src/spine.cpp) without its commits.
CREATE OR REPLACE FUNCTION counter_internal.rollup_recompute(name text, from_ts timestamptz, to_ts timestamptz)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- the steps of CALL counter.rollup_refresh (the one loop), here without commits
    RETURN (counter_internal.run_steps_here('rollup_refresh', name,
        pg_catalog.jsonb_build_object('from', from_ts, 'to', to_ts)) ->> 'rows')::bigint;
END
$$;
-- The entry point: counter_entry (src/owner.cpp) notes the role calling it, then runs
-- counter_internal.rollup_recompute above with the same arguments.
CREATE OR REPLACE FUNCTION counter.rollup_recompute(name text, from_ts timestamptz, to_ts timestamptz)
RETURNS bigint
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_entry';

-- Recomputes the dirty hours of a rollup in the caller's transaction,
-- skipping chunks another session is refreshing. Returns the rollup rows
-- written or deleted.
CREATE OR REPLACE FUNCTION counter_internal.rollup_refresh_dirty(name text)
RETURNS bigint
LANGUAGE sql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    -- the steps of the refresh job (the one loop), here without commits nor the buffer's flush
    SELECT (counter_internal.run_steps_here('rollup_refresh', name, '{"flush": false}') OPERATOR(pg_catalog.->>) 'rows')::bigint
$$;
-- The entry point: counter_entry (src/owner.cpp) notes the role calling it, then runs
-- counter_internal.rollup_refresh_dirty above with the same arguments.
CREATE OR REPLACE FUNCTION counter.rollup_refresh_dirty(name text)
RETURNS bigint
LANGUAGE c VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_entry';

-- The refresh's step function for the one commit loop (src/spine.cpp,
-- kind 'rollup_refresh'; checks its caller owns the rollup at every step). One
-- chunk (a UTC day at most) per step. args {"from", "to"}: a full recompute
-- of that range, waiting for chunks refreshed elsewhere; args {}: the dirty
-- hours, a day at a time in day order, skipping a day another session is
-- refreshing (its marks stay for the next refresh); a buffered rollup's
-- buffer is flushed first unless args has "flush": false
-- (counter.rollup_refresh_dirty). The refresh is recorded when it ends.
CREATE OR REPLACE FUNCTION counter_internal.rollup_run_step(target text, args jsonb, state jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ranged boolean := args ? 'from' OR args ? 'to';
    r counter.rollups;
    rid integer;
    from_h timestamptz;
    to_h timestamptz;
    hours timestamptz[];
    n bigint;
    outcome text;
BEGIN
    IF target IS NULL THEN
        RAISE EXCEPTION 'rollup name must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    r := counter_internal.rollup_get(target);
    rid := r.rollup_id;
    PERFORM counter_internal.require_owner(r.owner, pg_catalog.format('rollup "%s"', r.name), 'refresh it');
    IF state IS NULL THEN
        -- a buffered rollup's routine run flushes first: its sums are written,
        -- the hours a restart may have lost are marked dirty (below)
        IF r.mode = 'buffered' AND NOT ranged AND coalesce((args ->> 'flush')::boolean, true) THEN
            PERFORM counter_internal.rollup_flush_id(rid);
        END IF;
        -- checks the range (or drops dirty hours outside the retention), and counts the chunks
        IF ranged THEN
            SELECT count(*), min(x.from_h) INTO n, from_h FROM counter_internal.rollup_range_chunks(target,
                (args ->> 'from')::timestamptz, (args ->> 'to')::timestamptz) x;
        ELSE
            SELECT count(*) INTO n FROM counter_internal.rollup_dirty_chunks(target);
        END IF;
        RETURN pg_catalog.jsonb_build_object('started', pg_catalog.clock_timestamp(), 'phase', 'days', 'done', 0,
            'total', n, 'rows', 0, 'skipped', 0, 'next', from_h, 'after_day', NULL,
            'finished', false);
    END IF;
    IF state ? 'error' OR state ? 'stop' THEN
        outcome := CASE WHEN state ? 'error' THEN 'error' ELSE 'partial' END;
    ELSE
        IF ranged THEN
            from_h := (state ->> 'next')::timestamptz;
            IF from_h >= (args ->> 'to')::timestamptz THEN
                from_h := NULL;
            END IF;
            to_h := least((args ->> 'to')::timestamptz, date_trunc('day', from_h, 'UTC') + interval '1 day');
        ELSE
            SELECT min(d.hour), max(d.hour) + interval '1 hour', array_agg(DISTINCT d.hour ORDER BY d.hour)
            INTO from_h, to_h, hours
            FROM counter.rollup_dirty d
            WHERE d.rollup_id = rid AND counter_internal.rollup_day_number(d.hour) > coalesce((state ->> 'after_day')::bigint, -9223372036854775808)
            GROUP BY counter_internal.rollup_day_number(d.hour)
            ORDER BY 1
            LIMIT 1;
        END IF;
        IF from_h IS NOT NULL THEN
            n := counter_internal.rollup_refresh_chunk(rid, from_h, to_h, hours, ranged);
            IF n IS NULL THEN
                RAISE NOTICE 'rollup "%": the chunk from % is being refreshed by another session; skipped', target, from_h;
            END IF;
            RETURN state || pg_catalog.jsonb_build_object('done', (state ->> 'done')::bigint + 1,
                'rows', (state ->> 'rows')::bigint + coalesce(n, 0),
                'skipped', (state ->> 'skipped')::bigint + CASE WHEN n IS NULL THEN 1 ELSE 0 END,
                'next', to_h, 'after_day', counter_internal.rollup_day_number(from_h));
        END IF;
        outcome := CASE WHEN (state ->> 'skipped')::bigint = 0 THEN 'ok'
                        ELSE format('skipped %s locked chunks', state ->> 'skipped') END;
    END IF;
    PERFORM counter_internal.rollup_record(rid, (state ->> 'started')::timestamptz, outcome, (state ->> 'rows')::bigint,
                                  state -> 'error');
    RETURN state || pg_catalog.jsonb_build_object('finished', true, 'outcome', outcome);
END
$$;
-- Procedure forms: one transaction per chunk (a UTC day at most), in the
-- one commit loop (counter.run_steps). A full recompute of [from_ts, to_ts):
CREATE OR REPLACE PROCEDURE counter.rollup_refresh(name text, from_ts timestamptz, to_ts timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    st pg_catalog.jsonb;
BEGIN
    CALL counter.run_steps('rollup_refresh', name, pg_catalog.jsonb_build_object('from', from_ts, 'to', to_ts), st);
END
$$;

-- The checks of counter.rollup_create's arguments that need no table
-- (counter_internal.rollup_create): none NULL but filter and retention, the
-- name, the mode (a buffered rollup's columns: rollup_buffered_check), the
-- intervals, no rollup of that name yet.
CREATE OR REPLACE FUNCTION counter_internal.rollup_check_args(name text, source regclass, time_column name,
    group_by name[], distinct_on name[], mode text, sums name[], retention interval, refresh_every interval,
    replicated boolean)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF name IS NULL OR source IS NULL OR time_column IS NULL OR group_by IS NULL OR distinct_on IS NULL
       OR mode IS NULL OR sums IS NULL OR refresh_every IS NULL OR replicated IS NULL THEN
        RAISE EXCEPTION 'only filter and retention of counter.rollup_create may be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF name = '' OR octet_length(name) > 63 THEN
        RAISE EXCEPTION 'a rollup name must be 1 to 63 bytes long' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF mode NOT IN ('trigger', 'deferred', 'buffered') THEN
        RAISE EXCEPTION 'unknown rollup mode "%"', mode USING ERRCODE = 'invalid_parameter_value',
            HINT = 'use ''trigger'', ''deferred'' or ''buffered''';
    END IF;
    -- buffered: sums folded in shared memory (src/rollup_buffer.cpp)
    IF mode = 'buffered' THEN
        PERFORM counter_internal.rollup_buffered_check(source, distinct_on, sums);
    END IF;
    IF refresh_every < interval '1 second' OR retention <= interval '0' THEN
        RAISE EXCEPTION 'refresh_every must be at least 1 second and retention positive'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT FROM counter.rollups r WHERE r.name = rollup_check_args.name) THEN
        RAISE EXCEPTION 'rollup "%" already exists', name USING ERRCODE = 'duplicate_object';
    END IF;
END
$$;

-- The source of a rollup to be made (counter_internal.rollup_create): a
-- table that is not temporary, of an owner caller belongs to (or caller a superuser),
-- with a NOT NULL time column of type timestamptz. Its owner and schema.
CREATE OR REPLACE FUNCTION counter_internal.rollup_check_source(source regclass, time_column name, caller regrole,
    OUT owner regrole, OUT nsp name)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel record;
    col record;
BEGIN
    SELECT c.relkind, c.relowner::regrole AS owner, c.relpersistence, n.nspname AS nsp
    INTO rel FROM pg_class c JOIN pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
    WHERE c.oid = source;
    IF rel.relkind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION '"%" is not a table', source USING ERRCODE = 'wrong_object_type';
    END IF;
    IF rel.relpersistence = 't' THEN
        RAISE EXCEPTION '% is a temporary table', source USING ERRCODE = 'wrong_object_type';
    END IF;
    IF NOT (pg_has_role(caller, rel.owner, 'USAGE')
            OR (SELECT a.rolsuper FROM pg_roles a WHERE a.oid OPERATOR(pg_catalog.=) caller)) THEN
        RAISE EXCEPTION 'must be owner of table %', source USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT c.atttypid, c.attnotnull INTO col FROM counter_internal.column_of(source, time_column) c;
    IF col.atttypid <> 'timestamptz'::regtype THEN
        RAISE EXCEPTION 'time column "%" is %, not timestamp with time zone', time_column, format_type(col.atttypid, NULL)
            USING ERRCODE = 'datatype_mismatch',
                  HINT = 'UTC hours need instants; a timestamp without time zone depends on the TimeZone setting';
    END IF;
    IF NOT col.attnotnull THEN
        RAISE EXCEPTION 'time column "%" must be NOT NULL', time_column USING ERRCODE = 'invalid_parameter_value';
    END IF;
    owner := rel.owner;
    nsp := rel.nsp;
END
$$;

-- A column's type as SQL, "type(typmod) COLLATE schema.collation" (no
-- COLLATE for a type without one): how a rollup table copies a source's key
-- column (counter_internal.rollup_key_columns) and how the pending rows of a
-- buffered rollup are typed like its table's (rollup_buffer_coldefs).
CREATE OR REPLACE FUNCTION counter_internal.column_type_sql(rel regclass, col name)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format_type(a.atttypid, a.atttypmod)
           OPERATOR(pg_catalog.||) CASE WHEN co.oid IS NULL THEN ''
                                        ELSE format(' COLLATE %I.%I', cn.nspname, co.collname) END
    FROM pg_attribute a
    LEFT JOIN pg_collation co ON co.oid OPERATOR(pg_catalog.=) a.attcollation
    LEFT JOIN pg_namespace cn ON cn.oid OPERATOR(pg_catalog.=) co.collnamespace
    WHERE a.attrelid OPERATOR(pg_catalog.=) rel AND a.attname OPERATOR(pg_catalog.=) col AND NOT a.attisdropped
$$;

-- The key columns of a rollup of source (counter_internal.rollup_create):
-- ddl, their definitions in the rollup table (type, typmod and collation of
-- the source's column, NOT NULL), keys, the list "a, b, " that starts its
-- primary key, and dist_type, the type of the column dist_col (Citus: the
-- source's distribution column, or NULL). Each must be NOT NULL in the
-- source, comparable, not the time column, and named unlike the rollup's
-- hour and count.
CREATE OR REPLACE FUNCTION counter_internal.rollup_key_columns(source regclass, time_column name, group_by name[],
    dist_col name, OUT ddl text, OUT keys text, OUT dist_type text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g name;
    col record;
    seen name[] := '{}';
    coltype text;
BEGIN
    ddl := ''; keys := '';
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
        IF g IN ('hour', 'count') THEN
            RAISE EXCEPTION 'group column "%" collides with the rollup column of that name', g
                USING ERRCODE = 'duplicate_column';
        END IF;
        SELECT c.atttypid, c.atttypmod, c.attnotnull INTO col FROM counter_internal.column_of(source, g) c;
        -- (Citus's distribution column never holds NULL: Citus refuses such a row)
        IF NOT col.attnotnull AND g IS DISTINCT FROM dist_col THEN
            RAISE EXCEPTION 'group column "%" must be NOT NULL', g USING ERRCODE = 'invalid_parameter_value',
                HINT = 'the group columns form the primary key of the rollup';
        END IF;
        PERFORM counter_internal.key_operators(col.atttypid);  -- 42883 unless the key type can be compared
        seen := seen || g;
        coltype := counter_internal.column_type_sql(source, g);
        ddl := ddl || format('%I %s NOT NULL, ', g, coltype);
        keys := keys || format('%I, ', g);
    END LOOP;
    IF dist_col IS NOT NULL THEN
        -- the dirty log's key, whether group_by includes the column or not
        dist_type := counter_internal.column_type_sql(source, dist_col);
    END IF;
END
$$;

-- The value columns of a rollup of source grouped by group_by
-- (counter_internal.rollup_create): ", sum_<c> bigint|numeric NOT NULL" for
-- each column of sums (integers or numeric: exact), then ", distinct_<c>
-- counter.hll NOT NULL" for each of distinct_on (one sketch per column:
-- merged across hours, never summed); none named like another column.
CREATE OR REPLACE FUNCTION counter_internal.rollup_value_columns(source regclass, group_by name[], sums name[],
    distinct_on name[])
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g name;
    col record;
    seen name[] := '{}';
    outcols text[] := ARRAY['hour', 'count'] || group_by::text[];
    ddl text := '';
BEGIN
    FOREACH g IN ARRAY sums LOOP
        IF g IS NULL THEN
            RAISE EXCEPTION 'sums must not contain NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF g = ANY (seen) THEN
            RAISE EXCEPTION 'column "%" appears twice in sums', g USING ERRCODE = 'duplicate_column';
        END IF;
        SELECT c.atttypid INTO col FROM counter_internal.column_of(source, g) c;
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
    seen := '{}';
    FOREACH g IN ARRAY distinct_on LOOP
        IF g IS NULL THEN
            RAISE EXCEPTION 'distinct_on must not contain NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF g = ANY (seen) THEN
            RAISE EXCEPTION 'column "%" appears twice in distinct_on', g USING ERRCODE = 'duplicate_column';
        END IF;
        PERFORM counter_internal.column_of(source, g);
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
    RETURN ddl;
END
$$;

-- Makes the rollup table nsp.name of a rollup of source, as owner
-- (counter_internal.rollup_create): the columns (ddl), the primary key
-- (keys, hour), an index on hour and a comment. fillfactor: each row is
-- updated many times in its hour; room on its page keeps those updates HOT
-- (no index entries, pruned in place).
CREATE OR REPLACE FUNCTION counter_internal.rollup_make_table(owner regrole, nsp name, name text, ddl text,
    keys text, source regclass, mode text)
RETURNS regclass
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tbl regclass;
BEGIN
    PERFORM counter_internal.exec_as_owner_cmd(owner,
        format('CREATE TABLE %I.%I (%s, PRIMARY KEY (%shour)) WITH (fillfactor = 60)', nsp, name, ddl, keys), true);
    tbl := format('%I.%I', nsp, name)::regclass;
    PERFORM counter_internal.exec_as_owner_cmd(owner, format('CREATE INDEX ON %s (hour)', tbl), true);
    PERFORM counter_internal.exec_as_owner_cmd(owner, format('COMMENT ON TABLE %s IS %L', tbl,
        format('counter_ext rollup %s of %s by UTC hour (%s mode)', name, source, mode)), true);
    RETURN tbl;
END
$$;

-- Citus, a trigger-mode rollup grouped by other columns than the
-- distribution column (rollup_create): the view, made by the owner in the
-- source's schema and named after the rollup, that sums its table (grouped
-- by the distribution column too) over that column: the same columns, in
-- the same order and of the same types, as a rollup table grouped by
-- view_group_by; counts and sums added, sketches unioned (exact: the same
-- sketch as the rows' own). Citus pushes its GROUP BY down to the shards.
CREATE OR REPLACE FUNCTION counter_internal.rollup_make_view(owner regrole, nsp name, name text, tbl regclass,
    view_group_by name[], sums name[], distinct_on name[])
RETURNS regclass
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g name;
    keys text := '';
    cols text := '';
    vw regclass;
    propagate text;
BEGIN
    FOREACH g IN ARRAY view_group_by LOOP
        keys := keys || format('%I, ', g);
    END LOOP;
    FOREACH g IN ARRAY sums LOOP
        cols := cols || format(', pg_catalog.sum(%1$I)::%2$s AS %1$I', 'sum_' || g,
                               (SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
                                WHERE a.attrelid OPERATOR(pg_catalog.=) tbl AND a.attname OPERATOR(pg_catalog.=) ('sum_' || g)));
    END LOOP;
    FOREACH g IN ARRAY distinct_on LOOP
        cols := cols || format(', counter.hll_union_agg(%1$I) AS %1$I', 'distinct_' || g);
    END LOOP;
    -- a view of the coordinator (as a deferred rollup's table grouped by
    -- other columns): Citus would send it to the workers, where the table
    -- it reads is not known yet in this transaction (the setting is put
    -- back below: a SET LOCAL outlives the function)
    propagate := pg_catalog.current_setting('citus.enable_ddl_propagation', true);
    PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true);
    PERFORM counter_internal.exec_as_owner_cmd(owner,
        format('CREATE VIEW %I.%I AS SELECT %shour, pg_catalog.sum(count)::bigint AS count%s FROM %s GROUP BY %shour',
               nsp, name, keys, cols, tbl, keys), true);
    vw := format('%I.%I', nsp, name)::regclass;
    PERFORM counter_internal.exec_as_owner_cmd(owner, format('COMMENT ON VIEW %s IS %L', vw,
        format('counter_ext rollup %s by UTC hour (trigger mode): %s summed over the distribution column', name, tbl)),
        true);
    PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', coalesce(propagate, 'on'), true);
    RETURN vw;
END
$$;

-- Creates a rollup: its table, its triggers on the source, its catalog row
-- and its refresh job, and marks every hour that already has events dirty
-- (the job fills them in). Nothing is created when any argument is wrong.
CREATE OR REPLACE FUNCTION counter_internal.rollup_create(
    name text,
    source regclass,
    time_column name,
    group_by name[],
    distinct_on name[] DEFAULT '{}',
    mode text DEFAULT 'trigger',
    sums name[] DEFAULT '{}',
    filter text DEFAULT NULL,
    retention interval DEFAULT NULL,
    refresh_every interval DEFAULT '1 minute',
    replicated boolean DEFAULT false)
RETURNS regclass
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := counter_internal.caller();
    src record; -- counter_internal.rollup_check_source: owner, nsp
    k record; -- counter_internal.rollup_key_columns: ddl, keys, dist_type
    compiled text[];
    tbl regclass;
    rid integer;
    dist_col name; -- Citus: the source's distribution column (a distributed rollup)
    dirty text; -- Citus: its dirty log (counter_internal.rollup_dirty_table)
    tbl_name text := name;
    view_group_by name[]; -- Citus, trigger mode grouped by other columns: the view's groups
    vw regclass;
BEGIN
    PERFORM counter_internal.rollup_check_args(name, source, time_column, group_by, distinct_on, mode, sums,
                                               retention, refresh_every, replicated);
    -- Citus: a deferred or trigger-mode rollup of a hash-distributed source
    -- (doc/citus.md); anything else is refused here
    dist_col := counter_internal.citus_rollup_check(source, group_by, mode, replicated);
    IF dist_col IS NOT NULL AND mode OPERATOR(pg_catalog.=) 'trigger'
       AND NOT dist_col OPERATOR(pg_catalog.=) ANY (group_by) THEN
        -- Citus, trigger mode grouped by other columns: the table is grouped
        -- by the distribution column too (colocated: each shard adds its rows
        -- to its own), and the rollup is the view that sums it over that
        -- column (counter_internal.rollup_make_view)
        view_group_by := group_by;
        group_by := ARRAY[dist_col] OPERATOR(pg_catalog.||) group_by;
        tbl_name := name || '_by_' || dist_col;
        IF pg_catalog.octet_length(tbl_name) OPERATOR(pg_catalog.>) 63 THEN
            RAISE EXCEPTION 'rollup name "%" is too long for its table "%"', name, tbl_name
                USING ERRCODE = 'name_too_long',
                      DETAIL = 'A trigger-mode rollup of a table Citus distributes, grouped by other columns than the distribution column, keeps its rows in a table named after it and that column, read through a view named after it.',
                      HINT = 'Give the rollup a shorter name (doc/citus.md).';
        END IF;
    END IF;
    SELECT * INTO src FROM counter_internal.rollup_check_source(source, time_column, caller);
    SELECT * INTO k FROM counter_internal.rollup_key_columns(source, time_column, group_by, dist_col);
    k.ddl := k.ddl || 'hour timestamptz NOT NULL, count bigint NOT NULL'
             || counter_internal.rollup_value_columns(source, group_by, sums, distinct_on);
    IF to_regclass(format('%I.%I', src.nsp, name)) IS NOT NULL THEN
        RAISE EXCEPTION 'relation "%.%" already exists', src.nsp, name USING ERRCODE = 'duplicate_table',
            HINT = 'the rollup table is created in the schema of the source, named after the rollup';
    END IF;
    IF tbl_name IS DISTINCT FROM name AND to_regclass(format('%I.%I', src.nsp, tbl_name)) IS NOT NULL THEN
        RAISE EXCEPTION 'relation "%.%" already exists', src.nsp, tbl_name USING ERRCODE = 'duplicate_table',
            HINT = 'a trigger-mode rollup of a table Citus distributes, grouped by other columns, keeps its rows in a table named after the rollup and the distribution column';
    END IF;
    -- The filter is resolved here, once, as the owner (src/filter.cpp).
    IF filter IS NOT NULL THEN
        compiled := counter_internal.filter_compile(source, filter, src.owner);
        IF dist_col IS NOT NULL THEN
            PERFORM counter_internal.citus_filter_check(compiled[2]);
        END IF;
    END IF;
    -- The rollup table is made by the owner, in the source's schema.
    tbl := counter_internal.rollup_make_table(src.owner, src.nsp, tbl_name, k.ddl, k.keys, source, mode);
    IF dist_col OPERATOR(pg_catalog.=) ANY (group_by) THEN
        -- colocated with the source: each shard's rows are summed on it.
        -- Grouped by other columns, a deferred rollup's table stays on the
        -- coordinator (rollup_citus_sql)
        PERFORM counter_internal.citus_colocate(tbl, source, dist_col);
    END IF;
    IF view_group_by IS NOT NULL THEN
        vw := counter_internal.rollup_make_view(src.owner, src.nsp, name, tbl, view_group_by, sums, distinct_on);
    END IF;

    -- the sketches' precision is fixed here, from the creating session
    INSERT INTO counter.rollups (name, source, rollup_table, time_column, group_by, distinct_on, sums, mode,
                                 filter, filter_tree, filter_relid, retention, refresh_every, owner, replicated,
                                 hll_precision, rollup_view, view_group_by)
    VALUES (name, source, tbl, time_column, group_by, distinct_on, sums, mode, compiled[1], compiled[2],
            CASE WHEN compiled IS NOT NULL THEN source::oid END, retention, refresh_every, src.owner, replicated,
            coalesce(pg_catalog.current_setting('counter_ext.hll_default_precision', true)::integer, 14),
            vw, view_group_by)
    RETURNING rollup_id INTO rid;
    IF dist_col IS NOT NULL THEN
        -- Citus: the dirty log the shard triggers write, colocated with the
        -- source (a mark lands on the shard of its rows; src/rollup.cpp).
        -- No key (writers marking the same hour never wait for each other),
        -- so REPLICA IDENTITY FULL: Citus moves, splits and rebalances the
        -- source's shards by logical replication, which needs one on every
        -- colocated table (1.7 had none: every non-blocking move failed)
        -- It is beside the source when the owner may create there (Citus
        -- moves it with the source's shards: counter_internal.citus_state_schema).
        dirty := counter_internal.citus_state_schema('rollup', source, src.owner, ARRAY['counter_rollup_' || rid || '_dirty']);
        UPDATE counter.rollups c SET distributed = true, state_schema = dirty
        WHERE c.rollup_id = rid
        RETURNING counter_internal.rollup_dirty_table(c) INTO dirty;
        EXECUTE format('CREATE TABLE %s (key %s NOT NULL, hour timestamptz NOT NULL)', dirty, k.dist_type);
        EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', dirty);
        EXECUTE format('REVOKE ALL ON %s FROM PUBLIC', dirty);
        PERFORM counter_internal.citus_colocate(dirty::regclass, source, 'key');
    END IF;
    PERFORM counter_internal.rollup_build(rid);

    -- CREATE TRIGGER waited for every open writer of the source and holds
    -- them off until commit, so these are all the events the triggers miss
    -- (read as the owner; only the hours reach the catalog).
    IF dist_col IS NULL THEN
        INSERT INTO counter.rollup_dirty (rollup_id, hour)
        SELECT rid, x.h FROM counter_internal.exec_as_owner(src.owner,
            format('SELECT DISTINCT counter.rollup_hour(%I) FROM %s WHERE $1', time_column, source), true)
            AS x(h timestamptz);
    ELSE
        -- Citus refuses a read as the owner of placements that this
        -- transaction changed as counter_ext's role (the triggers, made
        -- above): read as that role, a bare query that runs no code of the
        -- owner's (as counter.track does)
        EXECUTE format('INSERT INTO counter.rollup_dirty (rollup_id, hour) SELECT $1, x.h FROM '
                       '(SELECT DISTINCT counter.rollup_hour(%I) AS h FROM %s) x', time_column, source)
            USING rid;
    END IF;
    PERFORM counter_internal.rollup_job_sync(name);
    IF counter.replication_warning(source, replicated) IS NOT NULL THEN
        RAISE WARNING 'rollup "%": %', name, counter.replication_warning(source, replicated)
            USING DETAIL = 'The hours those rows fall in are wrong until counter.rollup_recompute covers them.',
                  HINT = format('Make it again with replicated => true: SELECT counter.rollup_drop(%L); '
                                'SELECT counter.rollup_create(%L, %L, ..., replicated => true);', name, name, source::text);
    END IF;
    RETURN coalesce(vw, tbl);
END
$$;
-- The entry point: counter_entry (src/owner.cpp) notes the role calling it, then runs
-- counter_internal.rollup_create above with the same arguments.
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
    refresh_every interval DEFAULT '1 minute',
    replicated boolean DEFAULT false)
RETURNS regclass
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_entry';

-- Drops a rollup: its triggers, its table (as the owner: a table the owner
-- no longer owns is refused), its catalog rows and its job.
CREATE OR REPLACE FUNCTION counter_internal.rollup_drop(name text)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups := counter_internal.rollup_get(name);
    op text;
    marks_first boolean;
    rels regclass[];
    modes text[];
BEGIN
    PERFORM counter_internal.require_owner(r.owner, pg_catalog.format('rollup "%s"', r.name), 'drop it');
    -- One node: a refresh chunk and a flush (rollup_refresh_chunk,
    -- rollup_flush_id) lock the rollup table first, then consume the dirty
    -- marks (or buffer log rows, holding their row locks) and write the
    -- table. So the drop takes the source's lock (the one DROP TRIGGER
    -- takes: no writer is left adding a mark, a log row or a sum), the
    -- rollup table's and its catalog row, all or none, never waiting while
    -- holding one (counter_internal.lock_all), and only then deletes the
    -- marks and log rows: a chunk or flush under way is waited for, a later
    -- one waits for the drop. Dropping the table before deleting the marks
    -- closed a cycle with a chunk holding them; deleting them before
    -- locking the table met a chunk's DELETE of the same rows in another
    -- order (40P01, both seen: test/isolation/specs/rollup_drop_job.spec,
    -- test/scripts/drop_beside_jobs.sh).
    -- Citus, deferred: the chunk consumes the marks, then writes the table
    -- on the shards; the drop deletes the marks first. Citus, trigger mode:
    -- the chunk reads the rollup table on every node (its hold) before it
    -- consumes the marks; the drop deletes them last, after the table
    -- (both seen deadlocking the other way: citus_rollup.sh,
    -- citus_rollup_trigger.sh).
    marks_first := NOT (r.distributed AND r.mode OPERATOR(pg_catalog.=) 'trigger');
    IF NOT r.distributed THEN
        SELECT pg_catalog.array_agg(x.r ORDER BY x.o), pg_catalog.array_agg(x.m ORDER BY x.o) INTO rels, modes
        FROM (SELECT 0 AS o, c.oid::regclass AS r, 'SHARE ROW EXCLUSIVE' AS m FROM pg_catalog.pg_class c
              WHERE c.oid OPERATOR(pg_catalog.=) r.source::oid
              UNION ALL
              SELECT 1, c.oid::regclass, 'ACCESS EXCLUSIVE' FROM pg_catalog.pg_class c
              WHERE c.oid OPERATOR(pg_catalog.=) r.rollup_table::oid) x;
        PERFORM counter_internal.lock_all(rels, modes, 'counter.rollups', 'rollup_id', r.rollup_id);
    END IF;
    IF r.distributed AND pg_catalog.to_regclass(counter_internal.rollup_dirty_table(r)) IS NOT NULL THEN
        -- Citus: in a refresh's order, first its dirty log (a refresh moves
        -- the shards' marks out of it before its chunks); the rollup table
        -- below. Writers write the log's shards, never this lock's tables.
        PERFORM counter_internal.exec_as_owner_cmd(r.owner, format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE',
                                                                   counter_internal.rollup_dirty_table(r)), true);
    END IF;
    IF marks_first THEN
        PERFORM counter_internal.rollup_marks_take(r.rollup_id, '-infinity', 'infinity', NULL);
        IF r.mode = 'buffered' THEN
            DELETE FROM counter_internal.rollup_buffer_log l WHERE l.rollup_id = r.rollup_id;
        END IF;
    END IF;
    IF r.distributed AND EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) r.rollup_table::oid) THEN
        -- Citus: the rollup table before the source. Citus's DROP TRIGGER
        -- below takes the source ACCESS EXCLUSIVE; a refresh chunk holds
        -- its dirty log, then the rollup table (trigger mode: its hold,
        -- before the marks; deferred: its INSERT, after them), and then
        -- reads the source: taken in another order, each waited for the
        -- other (40P01 in test/scripts/citus_drop_beside_jobs.sh). Writers
        -- never touch this lock's table (the shards' triggers write its
        -- shards).
        PERFORM counter_internal.exec_as_owner_cmd(r.owner, format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', r.rollup_table),
                                                   true);
    END IF;
    IF r.distributed THEN
        PERFORM 1 FROM counter.rollups c WHERE c.rollup_id OPERATOR(pg_catalog.=) r.rollup_id FOR UPDATE;
    END IF;
    FOR op IN SELECT g.tgname FROM pg_catalog.pg_trigger g
              WHERE g.tgrelid OPERATOR(pg_catalog.=) r.source
                AND g.tgname OPERATOR(pg_catalog.~) format('^counter_rollup_%s_r?(insert|delete|update)$', r.rollup_id) LOOP
        IF r.distributed THEN
            -- on every shard, as the owner (as counter.untrack does)
            PERFORM counter_internal.citus_trigger_ddl_as(r.owner, format('DROP TRIGGER %I ON %s', op, r.source));
        ELSE
            EXECUTE format('DROP TRIGGER %I ON %s', op, r.source);
        END IF;
    END LOOP;
    IF r.rollup_view IS NOT NULL AND EXISTS (SELECT FROM pg_class c WHERE c.oid = r.rollup_view) THEN
        -- Citus, trigger mode grouped by other columns: the view first
        PERFORM counter_internal.exec_as_owner_cmd(r.owner, format('DROP VIEW %s', r.rollup_view), true);
    END IF;
    IF EXISTS (SELECT FROM pg_class c WHERE c.oid = r.rollup_table) THEN
        PERFORM counter_internal.exec_as_owner_cmd(r.owner, format('DROP TABLE %s', r.rollup_table), true);
    END IF;
    IF r.distributed AND pg_catalog.to_regclass(counter_internal.rollup_dirty_table(r)) IS NOT NULL THEN
        -- Citus: its dirty log, on every node, as the owner
        PERFORM counter_internal.exec_as_owner_cmd(r.owner, format('DROP TABLE %s', counter_internal.rollup_dirty_table(r)),
                                                   true);
    END IF;
    IF NOT marks_first THEN
        PERFORM counter_internal.rollup_marks_take(r.rollup_id, '-infinity', 'infinity', NULL);
    END IF;
    IF r.mode = 'buffered' THEN
        PERFORM counter_internal.rollup_buffer_take(r.rollup_id, '-infinity', 'infinity', NULL);
    END IF;
    PERFORM counter_internal.run_forget('rollup_refresh', r.rollup_id);
    DELETE FROM counter.rollups c WHERE c.rollup_id = r.rollup_id;
    PERFORM counter_internal.rollup_job_sync(name);
END
$$;
-- The entry point: counter_entry (src/owner.cpp) notes the role calling it, then runs
-- counter_internal.rollup_drop above with the same arguments.
CREATE OR REPLACE FUNCTION counter.rollup_drop(name text)
RETURNS void
LANGUAGE c VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_entry';

-- Changes the rule of a rollup (which events count), compiled as the owner.
-- Existing hours keep their numbers until recomputed:
-- CALL counter.rollup_refresh(name, from, to).
CREATE OR REPLACE FUNCTION counter_internal.rollup_set_filter(name text, filter text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups := counter_internal.rollup_get(name);
    compiled text[];
BEGIN
    PERFORM counter_internal.require_owner(r.owner, pg_catalog.format('rollup "%s"', r.name), 'change its filter');
    IF filter IS NOT NULL THEN
        compiled := counter_internal.filter_compile(r.source, filter, r.owner);
        IF r.distributed THEN
            PERFORM counter_internal.citus_filter_check(compiled[2]);
        END IF;
    END IF;
    UPDATE counter.rollups c SET filter = compiled[1], filter_tree = compiled[2],
        filter_relid = CASE WHEN compiled IS NOT NULL THEN r.source::oid END
    WHERE c.rollup_id = r.rollup_id;
    PERFORM counter_internal.rollup_build_sql(r.rollup_id);
    IF r.distributed AND r.mode OPERATOR(pg_catalog.=) 'trigger' THEN
        -- Citus: the shard triggers carry the filter (rollup_citus_add_sql)
        PERFORM counter_internal.rollup_build(r.rollup_id);
    END IF;
    -- buffered: the triggers keep the rollup's row per backend until the source is invalidated
    PERFORM counter_internal.rollup_buffer_invalidate(r.source);
    IF compiled IS NOT NULL THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION counter_internal.filter_match(text, integer, anyelement) TO %s',
                       r.owner);
    END IF;
END
$$;
-- The entry point: counter_entry (src/owner.cpp) notes the role calling it, then runs
-- counter_internal.rollup_set_filter above with the same arguments.
CREATE OR REPLACE FUNCTION counter.rollup_set_filter(name text, filter text)
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_entry';

-- Totals per group and period (hour, day, week, month, year or total) in a
-- time zone, over the whole UTC hours [from_ts, to_ts). Periods must start on
-- whole UTC hours in that zone (zones with half-hour offsets cannot be
-- assembled from hours and are refused).
CREATE OR REPLACE FUNCTION counter_internal.rollup_totals(name text, from_ts timestamptz, to_ts timestamptz,
                                      time_zone text DEFAULT 'UTC', per text DEFAULT 'day')
RETURNS TABLE (period_start timestamptz, key jsonb, count bigint, sums jsonb, distinct_counts jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := counter_internal.caller();
    r counter.rollups;
    period text;
    key_expr text := 'jsonb_build_object(';
    grp text := '';
    sums_expr text := 'jsonb_build_object(';
    distinct_expr text := 'jsonb_build_object(';
    bad timestamptz;
    g name;
    sep text := '';
BEGIN
    IF name IS NULL OR from_ts IS NULL OR to_ts IS NULL OR time_zone IS NULL OR per IS NULL THEN
        RAISE EXCEPTION 'arguments of counter.rollup_totals must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    r := counter_internal.rollup_get(rollup_totals.name);
    -- Readers of the rollup table may read its totals; the table is read as
    -- its owner (never with more rights than the owner's).
    IF NOT pg_catalog.has_table_privilege(caller, r.rollup_table, 'SELECT') THEN
        RAISE EXCEPTION 'permission denied for rollup "%"', name USING ERRCODE = 'insufficient_privilege',
            DETAIL = format('Reading its totals needs SELECT on %s.', r.rollup_table);
    END IF;
    IF per NOT IN ('hour', 'day', 'week', 'month', 'year', 'total') THEN
        RAISE EXCEPTION 'unknown period "%"', per USING ERRCODE = 'invalid_parameter_value',
            HINT = 'use hour, day, week, month, year or total';
    END IF;
    PERFORM now() AT TIME ZONE time_zone;  -- 22023 for an unknown zone
    IF NOT isfinite(from_ts) OR NOT isfinite(to_ts) OR counter.rollup_hour(from_ts) <> from_ts
       OR counter.rollup_hour(to_ts) <> to_ts OR to_ts < from_ts THEN
        RAISE EXCEPTION 'a totals range must be whole UTC hours, from before to: % to %', from_ts, to_ts
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF per <> 'total' THEN
        SELECT p INTO bad FROM (
            SELECT date_trunc(per, h, time_zone) AS p
            FROM generate_series(from_ts, to_ts - interval '1 hour', interval '1 hour') h) s
        WHERE counter.rollup_hour(p) <> p LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'a % in time zone "%" starts at %, which is not a whole UTC hour', per, time_zone, bad
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'hourly rollups assemble periods of zones with whole-hour offsets only';
        END IF;
        period := format('pg_catalog.date_trunc(%L, hour, %L)', per, time_zone);
    ELSE
        period := format('%L::timestamptz', from_ts);
    END IF;
    -- (Citus, trigger mode grouped by other columns: the table's groups
    -- include the distribution column, the rollup's do not)
    FOREACH g IN ARRAY coalesce(r.view_group_by, r.group_by) LOOP
        key_expr := key_expr || sep || format('%L, %I', g, g);
        grp := grp || format(', %I', g);
        sep := ', ';
    END LOOP;
    sep := '';
    FOREACH g IN ARRAY r.sums LOOP
        sums_expr := sums_expr || sep || format('%L, pg_catalog.sum(%I)', g, 'sum_' || g);
        sep := ', ';
    END LOOP;
    sep := '';
    -- Distinct counts merge the hours' sketches (never a sum of counts).
    FOREACH g IN ARRAY r.distinct_on LOOP
        distinct_expr := distinct_expr || sep
            || format('%L, pg_catalog.round(counter.hll_cardinality(counter.hll_union_agg(%I)))::bigint', g, 'distinct_' || g);
        sep := ', ';
    END LOOP;
    RETURN QUERY SELECT * FROM counter_internal.exec_as_owner(r.owner, format(
        'SELECT %1$s AS p, %2$s), pg_catalog.sum(count)::bigint, %3$s), %6$s) FROM %4$s '
        'WHERE hour >= $1 AND hour < $2 GROUP BY 1%5$s ORDER BY 1%5$s',
        period, key_expr, sums_expr, counter_internal.rollup_read_from(r), grp, distinct_expr), from_ts, to_ts,
        r.rollup_id)
        AS x(p timestamptz, k jsonb, n bigint, s jsonb, d jsonb);
END
$$;
-- The entry point: counter_entry (src/owner.cpp) notes the role calling it, then runs
-- counter_internal.rollup_totals above with the same arguments.
CREATE OR REPLACE FUNCTION counter.rollup_totals(name text, from_ts timestamptz, to_ts timestamptz,
                                      time_zone text DEFAULT 'UTC', per text DEFAULT 'day')
RETURNS TABLE (period_start timestamptz, key jsonb, count bigint, sums jsonb, distinct_counts jsonb)
LANGUAGE c STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_entry';

-- Newest hour the rollup knows of (its table, read as its owner, and its
-- dirty log); NULL for a rollup the caller does not own.
CREATE OR REPLACE FUNCTION counter_internal.rollup_newest_hour_impl(rid integer)
RETURNS timestamptz
LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := counter_internal.caller();
    r counter.rollups;
    h timestamptz;
BEGIN
    SELECT * INTO r FROM counter.rollups c WHERE c.rollup_id OPERATOR(pg_catalog.=) rid;
    IF NOT FOUND OR NOT (pg_has_role(caller, r.owner, 'USAGE')
                         OR (SELECT a.rolsuper FROM pg_roles a WHERE a.oid OPERATOR(pg_catalog.=) caller))
       OR NOT EXISTS (SELECT FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) r.rollup_table) THEN
        RETURN NULL;
    END IF;
    BEGIN
        SELECT x.h INTO h FROM counter_internal.exec_as_owner_listed(r.owner,
            format('SELECT pg_catalog.max(hour) FROM %s WHERE $1', r.rollup_table), true) AS x(h timestamptz);
    EXCEPTION WHEN OTHERS THEN
        IF counter_internal.owner_read_failed('rollup', r.name, r.owner, 'counter.rollup_state',
                                              'Its newest_event_hour is NULL.', SQLSTATE, SQLERRM) THEN
            RAISE;
        END IF;
        RETURN NULL;
    END;
    RETURN greatest(h, (SELECT max(d.hour) FROM counter.rollup_dirty d WHERE d.rollup_id = rid));
END
$$;
-- The entry point the view counter.rollup_state calls: counter_entry
-- (src/owner.cpp) notes the role calling it, then runs
-- counter_internal.rollup_newest_hour_impl above. PostgreSQL checks EXECUTE
-- on a view's functions as the view's reader, so this one function of
-- counter_internal is executable by PUBLIC (99_internal.sql); it answers
-- only for the caller's rollups, as counter.rollup_newest_hour of 1.6 did.
CREATE OR REPLACE FUNCTION counter_internal.rollup_newest_hour(rid integer)
RETURNS timestamptz
LANGUAGE c STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_entry';

-- The last refresh of each rollup, from the one run record (the table of
-- that name up to 1.2); each role sees its rollups' rows.
CREATE OR REPLACE VIEW counter.rollup_status WITH (security_barrier) AS
SELECT r.rollup_id, x.started_at AS last_refresh_at, x.info ->> 'outcome' AS last_outcome,
       (x.info ->> 'finished_at')::timestamptz OPERATOR(pg_catalog.-) x.started_at AS last_duration,
       (x.info ->> 'rows')::bigint AS last_rows, x.info ->> 'error' AS last_error
FROM counter.rollups r
LEFT JOIN LATERAL (
    SELECT y.started_at, y.info FROM counter.job_runs y
    WHERE y.kind OPERATOR(pg_catalog.=) 'rollup_refresh' AND y.object_id OPERATOR(pg_catalog.=) r.rollup_id
      AND y.info ? 'outcome'
    ORDER BY y.run_id DESC LIMIT 1) x ON true
WHERE pg_catalog.pg_has_role(r.owner, 'USAGE');
COMMENT ON VIEW counter.rollup_status IS 'outcome of the last refresh of each rollup';
GRANT SELECT ON counter.rollup_status TO PUBLIC;

CREATE OR REPLACE VIEW counter.rollup_state WITH (security_barrier) AS
SELECT r.name,
       r.mode,
       r.source,
       r.rollup_table,
       counter_internal.rollup_newest_hour(r.rollup_id) AS newest_event_hour,
       least(pg_catalog.date_trunc('hour', pg_catalog.now(), 'UTC') OPERATOR(pg_catalog.-) interval '1 hour',
             d.oldest_dirty OPERATOR(pg_catalog.-) interval '1 hour') AS newest_complete_hour,
       coalesce(d.dirty_hours, 0) AS dirty_hours,
       s.last_refresh_at,
       s.last_outcome,
       s.last_duration,
       s.last_rows,
       s.last_error,
       -- the role the source now belongs to, when counter.follow_owners could
       -- not give the rollup to it (80_drop.sql)
       CASE WHEN c.relowner OPERATOR(pg_catalog.<>) r.owner::oid THEN c.relowner::regrole END AS owner_not_followed,
       counter.replication_warning(r.source, r.replicated) AS replication_warning
FROM counter.rollups r
LEFT JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) r.source
LEFT JOIN (SELECT dd.rollup_id, pg_catalog.count(DISTINCT dd.hour) AS dirty_hours, pg_catalog.min(dd.hour) AS oldest_dirty
           FROM counter.rollup_dirty dd GROUP BY dd.rollup_id) d ON d.rollup_id OPERATOR(pg_catalog.=) r.rollup_id
LEFT JOIN counter.rollup_status s ON s.rollup_id OPERATOR(pg_catalog.=) r.rollup_id
WHERE pg_catalog.pg_has_role(r.owner, 'USAGE');
COMMENT ON VIEW counter.rollup_state IS 'per rollup of the roles the reader belongs to: newest hours, dirty hours pending, last refresh';
GRANT SELECT ON counter.rollup_state TO PUBLIC;

-- ---- buffered rollups (mode 'buffered'; 52_rollup_buffered.sql, src/rollup_buffer.cpp)

-- The shared table of buffered rollups: its epoch (a new one at every start
-- and restart after a crash; NULL when the library was not preloaded).
CREATE OR REPLACE FUNCTION counter_internal.rollup_buffer_epoch()
RETURNS timestamptz
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_rollup_buffer_epoch';

-- The pending (group columns..., hour, count, sums as numeric...) of a
-- buffered rollup, typed by the caller's column definition list
-- (counter_internal.rollup_buffer_coldefs). Runs as the rollup's owner (the
-- caller must be a member of it: EXECUTE is granted to the owners of buffered
-- rollups, and the function checks). claim: for the flush (takes the days'
-- rollup_day locks; what it returns leaves shared memory when the transaction
-- commits).
CREATE OR REPLACE FUNCTION counter_internal.rollup_buffer_rows(rid integer, claim boolean)
RETURNS SETOF record
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_rollup_buffer_rows';

-- What shared memory holds for the hours [from_h, to_h) (and in hours, unless
-- NULL) of rollup rid leaves it when the transaction commits: for a recompute
-- of those hours (under their locks) and for rollup_drop.
CREATE OR REPLACE FUNCTION counter_internal.rollup_buffer_take(rid integer, from_h timestamptz, to_h timestamptz,
                                                               hours timestamptz[])
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_rollup_buffer_take';

-- Makes every backend read the rollups of source from the catalog again
-- (after commit): the buffered trigger keeps them per backend.
CREATE OR REPLACE FUNCTION counter_internal.rollup_buffer_invalidate(source regclass)
RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'counter_rollup_buffer_invalidate';

-- What buffered mode accepts (rollup_create): the library preloaded (shared
-- memory), no distinct_on, at most 8 sums of smallint, integer or bigint.
CREATE OR REPLACE FUNCTION counter_internal.rollup_buffered_check(source regclass, distinct_on name[], sums name[])
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g name;
BEGIN
    IF NOT counter.preloaded() OR counter_internal.rollup_buffer_epoch() IS NULL THEN
        RAISE EXCEPTION 'a buffered rollup needs counter_ext in shared_preload_libraries'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'add counter_ext to shared_preload_libraries and restart, or use mode => ''deferred''';
    END IF;
    IF cardinality(distinct_on) > 0 THEN
        RAISE EXCEPTION 'a buffered rollup does not keep distinct sketches' USING ERRCODE = 'feature_not_supported',
            HINT = 'use mode => ''deferred'' (or ''trigger'') for a rollup with distinct_on';
    END IF;
    IF cardinality(sums) > 8 THEN
        RAISE EXCEPTION 'a buffered rollup keeps at most 8 sums' USING ERRCODE = 'feature_not_supported',
            HINT = 'use mode => ''deferred'' for more sums';
    END IF;
    FOREACH g IN ARRAY sums LOOP
        IF (SELECT c.atttypid FROM counter_internal.column_of(source, g) c) = 'numeric'::regtype THEN
            RAISE EXCEPTION 'a buffered rollup sums smallint, integer and bigint columns, not numeric column "%"', g
                USING ERRCODE = 'feature_not_supported', HINT = 'use mode => ''deferred'' for numeric sums';
        END IF;
    END LOOP;
END
$$;

-- The column definition list of rollup_buffer_rows for rollup r: its group
-- columns as in its table (type and collation), hour, count, and one numeric
-- per sum.
CREATE OR REPLACE FUNCTION counter_internal.rollup_buffer_coldefs(r counter.rollups)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT string_agg(format('%I %s', g.n, counter_internal.column_type_sql(r.rollup_table, g.n)),
                                       ', ' ORDER BY g.o) OPERATOR(pg_catalog.||) ', '
                     FROM unnest(r.group_by) WITH ORDINALITY g(n, o)), '')
           OPERATOR(pg_catalog.||) 'hour timestamptz, count bigint'
           OPERATOR(pg_catalog.||) coalesce((SELECT string_agg(format(', %I numeric', 'sum_' OPERATOR(pg_catalog.||) g.n),
                                                               '' ORDER BY g.o)
                                             FROM unnest(r.sums) WITH ORDINALITY g(n, o)), '')
$$;

-- What a read of rollup r's rows selects FROM (run as its owner): its table,
-- and for a buffered rollup its table and its pending sums together ($3: the
-- rollup id), with the table's column names.
CREATE OR REPLACE FUNCTION counter_internal.rollup_read_from(r counter.rollups)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cols text := '';
    g name;
BEGIN
    IF r.mode <> 'buffered' THEN
        RETURN r.rollup_table::text;
    END IF;
    FOREACH g IN ARRAY r.group_by LOOP
        cols := cols || format('%I, ', g);
    END LOOP;
    cols := cols || 'hour, count';
    FOREACH g IN ARRAY r.sums LOOP
        cols := cols || format(', %I', 'sum_' || g);
    END LOOP;
    RETURN format('(SELECT %1$s FROM %2$s UNION ALL SELECT %1$s FROM counter_internal.rollup_buffer_rows($3, false) '
                  'AS p(%3$s)) AS t', cols, r.rollup_table, counter_internal.rollup_buffer_coldefs(r));
END
$$;

-- Flushes buffered rollup rid (the first step of its job, or
-- counter.rollup_flush): the log rows of another epoch (a restart may have
-- lost their sums) become dirty hours, recomputed by the job; the log rows of
-- this epoch it can see are deleted and the pending sums written to the
-- rollup table as its owner (restricted, search_path pinned), all in one
-- transaction. A log row visible here was committed after its sums reached
-- shared memory (src/rollup_buffer.cpp), so what is written covers it.
-- Returns the rollup rows written.
CREATE OR REPLACE FUNCTION counter_internal.rollup_flush_id(rid integer)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
    cur timestamptz := counter_internal.rollup_buffer_epoch();
    keys text := '';
    sets text := 'count = t.count + EXCLUDED.count';
    vals text := 'pg_catalog.sum(p.count)';
    cols text := 'count';
    g name;
    n bigint;
BEGIN
    SELECT * INTO r FROM counter.rollups c WHERE c.rollup_id OPERATOR(pg_catalog.=) rid;
    PERFORM counter_internal.require_owner(r.owner, pg_catalog.format('rollup %s', rid), 'flush it');
    IF r.mode <> 'buffered' THEN
        RETURN 0;
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'a rollup flush needs READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'invalid_transaction_state';
    END IF;
    -- the rollup table before the log rows and marks, as rollup_drop takes them
    PERFORM counter_internal.rollup_lock_table(r);
    WITH gone AS (DELETE FROM counter_internal.rollup_buffer_log l
                  WHERE l.rollup_id OPERATOR(pg_catalog.=) rid AND l.epoch IS DISTINCT FROM cur
                  RETURNING l.hour)
    INSERT INTO counter.rollup_dirty (rollup_id, hour) SELECT DISTINCT rid, gone.hour FROM gone;
    -- this statement's snapshot: the sums of every row it deletes are in
    -- shared memory now, and the next statement claims them
    IF cur IS NULL THEN
        -- not preloaded: no shared memory, nothing pending; the trigger marks
        -- the hours dirty instead (deferred mode's path)
        RETURN 0;
    END IF;
    DELETE FROM counter_internal.rollup_buffer_log l
    WHERE l.rollup_id OPERATOR(pg_catalog.=) rid AND l.epoch OPERATOR(pg_catalog.=) cur;
    FOREACH g IN ARRAY r.group_by LOOP
        keys := keys || format('%I, ', g);
    END LOOP;
    FOREACH g IN ARRAY r.sums LOOP
        cols := cols || format(', %I', 'sum_' || g);
        vals := vals || format(', pg_catalog.sum(p.%I)', 'sum_' || g);
        sets := sets || format(', %1$I = t.%1$I + EXCLUDED.%1$I', 'sum_' || g);
    END LOOP;
    SELECT x.n INTO n FROM counter_internal.exec_as_owner(r.owner, format($f$
        WITH p AS MATERIALIZED (SELECT * FROM counter_internal.rollup_buffer_rows($1, true) AS p(%1$s)),
        up AS (
            INSERT INTO %2$s AS t (%3$shour, %4$s)
            SELECT %3$shour, %5$s FROM p GROUP BY %3$shour ORDER BY %3$shour
            ON CONFLICT (%3$shour) DO UPDATE SET %6$s
            RETURNING 1)
        SELECT pg_catalog.count(*) FROM up$f$,
        counter_internal.rollup_buffer_coldefs(r), r.rollup_table, keys, cols, vals, sets), rid) AS x(n bigint);
    RETURN n;
END
$$;

-- counter.rollup_flush(name): flushes a buffered rollup now (its job does it
-- every refresh_every); returns the rollup rows written. 0 for other modes.
CREATE OR REPLACE FUNCTION counter_internal.rollup_flush(name text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups := counter_internal.rollup_get(name);
BEGIN
    PERFORM counter_internal.require_owner(r.owner, pg_catalog.format('rollup "%s"', r.name), 'flush it');
    RETURN counter_internal.rollup_flush_id(r.rollup_id);
END
$$;
-- The entry point: counter_entry (src/owner.cpp) notes the role calling it, then runs
-- counter_internal.rollup_flush above with the same arguments.
CREATE OR REPLACE FUNCTION counter.rollup_flush(name text)
RETURNS bigint
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_entry';

-- counter.rollup_pending(name): what a buffered rollup holds in shared memory
-- and has not yet written to its table, per (hour, key). Needs SELECT on the
-- rollup table (as counter.rollup_totals); read as the rollup's owner.
CREATE OR REPLACE FUNCTION counter_internal.rollup_pending(name text)
RETURNS TABLE (hour timestamptz, key jsonb, count bigint, sums jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := counter_internal.caller();
    r counter.rollups := counter_internal.rollup_get(name);
    key_expr text := '';
    grp text := '';
    sums_expr text := '';
    g name;
BEGIN
    IF NOT pg_catalog.has_table_privilege(caller, r.rollup_table, 'SELECT') THEN
        RAISE EXCEPTION 'permission denied for rollup "%"', name USING ERRCODE = 'insufficient_privilege',
            DETAIL = format('Reading its pending sums needs SELECT on %s.', r.rollup_table);
    END IF;
    IF r.mode <> 'buffered' THEN
        RETURN;
    END IF;
    FOREACH g IN ARRAY r.group_by LOOP
        key_expr := key_expr || CASE WHEN key_expr = '' THEN '' ELSE ', ' END || format('%L, %I', g, g);
        grp := grp || format(', %I', g);
    END LOOP;
    FOREACH g IN ARRAY r.sums LOOP
        sums_expr := sums_expr || CASE WHEN sums_expr = '' THEN '' ELSE ', ' END
                     || format('%L, pg_catalog.sum(%I)', g, 'sum_' || g);
    END LOOP;
    RETURN QUERY SELECT * FROM counter_internal.exec_as_owner(r.owner, format(
        'SELECT hour, pg_catalog.jsonb_build_object(%1$s), pg_catalog.sum(count)::bigint, '
        'pg_catalog.jsonb_build_object(%2$s) FROM counter_internal.rollup_buffer_rows($1, false) AS p(%3$s) '
        'GROUP BY hour%4$s ORDER BY hour%4$s',
        key_expr, sums_expr, counter_internal.rollup_buffer_coldefs(r), grp), r.rollup_id)
        AS x(h timestamptz, k jsonb, n bigint, s jsonb);
END
$$;
-- The entry point: counter_entry (src/owner.cpp) notes the role calling it, then runs
-- counter_internal.rollup_pending above with the same arguments.
CREATE OR REPLACE FUNCTION counter.rollup_pending(name text)
RETURNS TABLE (hour timestamptz, key jsonb, count bigint, sums jsonb)
LANGUAGE c STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_entry';
