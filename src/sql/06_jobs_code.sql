-- The code of the jobs' catalog (05_jobs.sql): the status view, who owns a
-- job's target, the launcher's nudge, registering and removing jobs.
-- Functions and views only, so the update from 1.1 includes this piece as it
-- is.

-- One line per job with its latest run.
CREATE OR REPLACE VIEW counter.job_status WITH (security_barrier) AS
SELECT j.job_id, j.kind, j.target, j.enabled, j.run_every, j.next_run, j.failures,
       j.running_run IS NOT NULL AS running,
       r.started_at AS last_started, r.finished_at AS last_finished, r.outcome AS last_outcome,
       r.rows_affected AS last_rows, r.sqlstate AS last_sqlstate, r.message AS last_message,
       j.owner, j.disabled_reason
FROM counter.jobs j
LEFT JOIN LATERAL (
    SELECT x.started_at, x.finished_at, x.outcome, x.rows_affected, x.sqlstate, x.message
    FROM counter.job_runs x
    WHERE x.job_id OPERATOR(pg_catalog.=) j.job_id
    ORDER BY x.run_id DESC
    LIMIT 1) r ON true;

-- The one run record (counter.job_runs), written by every feature's
-- periodic work the same way, whether a job or a direct call started it.
-- run_trim: the bound of the run record per role. Each new run of role
-- 'who' (run_as: a job's owner, a direct call's session user) first deletes
-- up to 100 of who's oldest finished runs beyond the newest
-- counter_ext.history_runs_per_role (default 10,000) of them, so one role's
-- runs, however many, never take more than that, and never push out another
-- role's (the age bound, counter_ext.history_retention, applies besides).
-- Called by run_begin (a direct call) and by the worker's claim (a job's run).
CREATE OR REPLACE FUNCTION counter_internal.run_trim(who regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cap bigint := coalesce(NULLIF(pg_catalog.current_setting('counter_ext.history_runs_per_role', true), ''),
                           '10000')::bigint;
    oldest_kept bigint;
BEGIN
    SELECT z.run_id INTO oldest_kept FROM counter.job_runs z
    WHERE z.run_as OPERATOR(pg_catalog.=) who
    ORDER BY z.run_id DESC OFFSET cap OPERATOR(pg_catalog.-) 1 LIMIT 1;
    IF oldest_kept IS NOT NULL THEN
        DELETE FROM counter.job_runs x WHERE x.run_id IN (
            SELECT y.run_id FROM counter.job_runs y
            WHERE y.run_as OPERATOR(pg_catalog.=) who AND y.run_id OPERATOR(pg_catalog.<) oldest_kept
              AND y.outcome OPERATOR(pg_catalog.<>) 'running'
            ORDER BY y.run_id LIMIT 100);
    END IF;
END
$$;

-- run_begin: the run of (kind, target) this backend is running as a job (the
-- worker recorded its start), given the object and the feature's part; or,
-- for a direct call, a new row (runner 'call'). Without a worker nothing else
-- trims a call's history, so a start also deletes that object's runs that
-- ended before counter_ext.history_retention (a hundred at most).
CREATE OR REPLACE FUNCTION counter_internal.run_begin(kind text, target text, object_id bigint, info jsonb,
    started timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    run bigint;
    keep interval := coalesce(NULLIF(pg_catalog.current_setting('counter_ext.history_retention', true), ''),
                              '7 days')::interval;
BEGIN
    SELECT x.run_id INTO run
    FROM counter.jobs j JOIN counter.job_runs x ON x.run_id OPERATOR(pg_catalog.=) j.running_run
    WHERE j.kind OPERATOR(pg_catalog.=) run_begin.kind AND j.target OPERATOR(pg_catalog.=) run_begin.target
      AND x.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() AND x.outcome OPERATOR(pg_catalog.=) 'running';
    IF run IS NOT NULL THEN
        UPDATE counter.job_runs x SET object_id = run_begin.object_id,
            info = coalesce(x.info, '{}') OPERATOR(pg_catalog.||) run_begin.info
        WHERE x.run_id OPERATOR(pg_catalog.=) run;
        RETURN run;
    END IF;
    DELETE FROM counter.job_runs x WHERE x.run_id IN (
        SELECT y.run_id FROM counter.job_runs y
        WHERE y.kind OPERATOR(pg_catalog.=) run_begin.kind AND y.target OPERATOR(pg_catalog.=) run_begin.target
          AND y.finished_at OPERATOR(pg_catalog.<) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) keep)
        ORDER BY y.run_id LIMIT 100);
    PERFORM counter_internal.run_ids_ahead();
    INSERT INTO counter.job_runs AS x (job_id, kind, target, runner, pid, backend_start, started_at, outcome, run_as,
                                       object_id, info)
    VALUES (NULL, kind, target, 'call', pg_catalog.pg_backend_pid(),
            (SELECT a.backend_start FROM pg_catalog.pg_stat_get_activity(pg_catalog.pg_backend_pid()) a),
            coalesce(started, pg_catalog.clock_timestamp()), 'running', pg_catalog.quote_ident(session_user)::pg_catalog.regrole, object_id, info)
    RETURNING x.run_id INTO run;
    PERFORM counter_internal.run_trim(pg_catalog.quote_ident(session_user)::pg_catalog.regrole);
    RETURN run;
END
$$;

-- The one alert of counter_ext (drift of a tracked counter, its runs skipped
-- again and again, a partitioned table whose maintenance skips slots, leaves
-- rows in its default partition or has not run for longer than its
-- interval): a WARNING with its message and detail to the session that
-- found it, and a NOTIFY on channel counter_ext_drift (sent at commit; not
-- on a standby, which cannot notify) whose payload is an id only:
-- {"run_id": N} for a run, which is then marked alerted in counter.job_runs,
-- or {"partitioned_table": OID} for a table's state. Any role can LISTEN to
-- any channel and NOTIFY on it, so the payload names nothing: a listener
-- reads the run (counter.tracked_history, counter.job_runs) or the table
-- (counter.partition_status) with its own rights, where an alert it may not
-- see, or a forged one, has no alerted row (doc/security.md, "Alerts").
CREATE OR REPLACE FUNCTION counter_internal.alert(message text, detail text, run bigint,
    parent regclass DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE WARNING '%', message USING DETAIL = coalesce(detail, '');
    IF run IS NOT NULL THEN
        PERFORM counter_internal.run_note(run, '{"alerted": true}');
    END IF;
    IF NOT pg_catalog.pg_is_in_recovery() AND (run IS NOT NULL OR parent IS NOT NULL) THEN
        PERFORM pg_catalog.pg_notify('counter_ext_drift',
            CASE WHEN run IS NOT NULL THEN pg_catalog.json_build_object('run_id', run)
                 ELSE pg_catalog.json_build_object('partitioned_table', parent::oid::bigint) END::text);
    END IF;
END
$$;

-- Citus (doc/citus.md): what counter_ext cannot serve on a table Citus
-- distributes (a distributed or reference table, or a partition of one) is
-- refused when it is made, before anything is written, so that no write to
-- the table ever fails because counter_ext is there: triggers are copied to
-- the shards, where the counter's or rollup's catalog is not (1.4: every
-- INSERT failed on the workers).
-- True when Citus distributes source: it (or a table it is a partition of)
-- is a distributed or reference table (in pg_dist_partition). False without
-- Citus.
CREATE OR REPLACE FUNCTION counter_internal.citus_distributed(source regclass)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    distributed boolean;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid OPERATOR(pg_catalog.=) ANY ($1))'
        INTO distributed
        USING ARRAY(SELECT a.relid FROM pg_catalog.pg_partition_ancestors(source) a
                    UNION ALL SELECT source);
    RETURN distributed;
END
$$;

-- Runs a DDL command on this node only: with Citus loaded, its propagation
-- to the other nodes is off for the command (counter_ext's own objects of
-- the coordinator, such as a counter's batch function, which runs only
-- there). Citus refuses to propagate a function's DDL after a parallel
-- distributed operation in the transaction (untrack after an INSERT into a
-- distributed table: doc/citus.md); a function it never propagated is made
-- and dropped here whatever the transaction did before.
CREATE OR REPLACE FUNCTION counter_internal.citus_local_ddl(command text)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    was text := pg_catalog.current_setting('citus.enable_ddl_propagation', true);
BEGIN
    IF was IS NULL OR pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        EXECUTE command;
        RETURN;
    END IF;
    PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true);
    EXECUTE command;
    PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', was, true);
END
$$;

-- The layout of a table Citus distributes, for the checks below: its
-- distribution column (col), and why counter_ext's triggers cannot run on
-- its shards (why, NULL when they can): it is a partition of a distributed
-- table, or not hash-distributed, or Citus's metadata is not synced to every
-- node (the shard triggers find their colocated state there).
CREATE OR REPLACE FUNCTION counter_internal.citus_layout(source regclass, OUT col name, OUT why text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    method "char";
    unsynced bigint;
BEGIN
    EXECUTE 'SELECT p.partmethod, '
            'CASE WHEN p.partkey IS NOT NULL THEN pg_catalog.column_to_column_name(p.logicalrelid, p.partkey) END '
            'FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid OPERATOR(pg_catalog.=) $1'
        INTO method, col USING source;
    IF (SELECT c.relispartition FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) source) THEN
        why := 'It is a partition of a distributed table: use the partitioned table itself.';
    ELSIF method IS DISTINCT FROM 'h' THEN
        why := 'Only a hash-distributed table is supported (not a reference table, a single-shard or a Citus local table).';
    ELSE
        EXECUTE 'SELECT pg_catalog.count(*) FROM pg_catalog.pg_dist_node n WHERE n.isactive AND n.noderole OPERATOR(pg_catalog.=) ''primary'' '
                'AND NOT (n.hasmetadata AND n.metadatasynced)'
            INTO unsynced;
        IF unsynced OPERATOR(pg_catalog.>) 0 THEN
            why := 'Citus''s metadata is not synced to every node (pg_dist_node.hasmetadata, metadatasynced): the shard triggers find their state there.';
        END IF;
    END IF;
END
$$;

-- Why the state of a tracked counter of source (a table Citus distributes)
-- keyed by key_column cannot be kept colocated with it, or NULL when it
-- can: it must be hash-distributed by key_column, not a partition of a
-- distributed table, with Citus's metadata on every node (citus_layout).
CREATE OR REPLACE FUNCTION counter_internal.citus_colocation_why(source regclass, key_column name)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p record := counter_internal.citus_layout(source);
BEGIN
    RETURN coalesce(p.why, CASE WHEN p.col IS DISTINCT FROM key_column THEN pg_catalog.format(
        'Its key must be the distribution column (%s): the state of a counter with another key would not be colocated with the rows.',
        p.col) END);
END
$$;

-- A trigger-mode tracked counter on a table Citus distributes (doc/citus.md,
-- "Trigger-mode counters on a distributed table"): true when source is a
-- hash-distributed table (not a partition of one) and every node has
-- Citus's metadata (the shard triggers find their counter's colocated state
-- there): then the counter's state is distributed colocated with it and its
-- triggers run on the shards. Keyed by the distribution column, its state
-- is keyed by it; keyed by another column (1.8), each state row is anchored
-- to a value of the distribution column on its shard, which the
-- distribution column's type must be able to give
-- (counter_internal.citus_anchor_sql). False when Citus does not distribute
-- source. Any other layout is refused (0A000), before anything is made.
CREATE OR REPLACE FUNCTION counter_internal.citus_tracked_check(source regclass, key_column name, buffered boolean,
    replicated boolean)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p record;
    why text;
BEGIN
    IF NOT counter_internal.citus_distributed(source) THEN
        RETURN false;
    END IF;
    p := counter_internal.citus_layout(source);
    why := p.why;
    IF why IS NOT NULL THEN
        NULL;
    ELSIF replicated THEN
        why := 'replicated => true is not supported there.';
    ELSIF p.col IS DISTINCT FROM key_column
          AND counter_internal.citus_anchor_sql((counter_internal.column_of(source, p.col)).atttypid::regtype) IS NULL THEN
        why := pg_catalog.format('Keyed by another column than the distribution column (%s), the counter anchors its state to values of that column, whose type (%s) is not one of smallint, integer, bigint, numeric, text, varchar and uuid.',
                                 p.col, (counter_internal.column_of(source, p.col)).atttypid::regtype);
    END IF;
    IF why IS NOT NULL THEN
        RAISE EXCEPTION 'a trigger-mode tracked counter on %, a table Citus distributes, is not supported yet in this form', source
            USING ERRCODE = 'feature_not_supported', DETAIL = why,
                  HINT = 'On a hash-distributed table, use a trigger-mode counter without replicated => true (buffered or not, keyed by the distribution column or by another column), or an application-mode counter (counter.add, with or without a filter), or aggregate with counter.hll_add_agg and counter.pncounter_merge_agg, which Citus pushes down (doc/citus.md).';
    END IF;
    RETURN true;
END
$$;

-- The distribution column of source, a table Citus distributes, when a
-- trigger-mode counter keyed by key_column anchors its state to it (the key
-- is another column: doc/citus.md, "Keyed by another column"); NULL when
-- the key is the distribution column.
CREATE OR REPLACE FUNCTION counter_internal.citus_anchor_column(source regclass, key_column name)
RETURNS name
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    col name := (counter_internal.citus_layout(source)).col;
BEGIN
    RETURN CASE WHEN col IS DISTINCT FROM key_column THEN col END;
END
$$;

-- An expression of type typ over ce_i (a bigint from 0 up) that gives a
-- different value for each ce_i: the values the batch function
-- (counter_internal.tracked_anchored_batch) tries, in order, to find one that Citus places on each shard (0, 1, -1,
-- 2, -2, ... for numbers; '0', '1', ... for text; the uuid whose low bits
-- are ce_i). NULL when typ is none of those.
CREATE OR REPLACE FUNCTION counter_internal.citus_anchor_sql(typ regtype)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE
    WHEN typ IN ('pg_catalog.int2'::regtype, 'pg_catalog.int4'::regtype, 'pg_catalog.int8'::regtype,
                 'pg_catalog.numeric'::regtype)
        THEN pg_catalog.format('(CASE WHEN ce_i OPERATOR(pg_catalog.%%) 2 OPERATOR(pg_catalog.=) 1'
                               ' THEN (ce_i OPERATOR(pg_catalog.+) 1) OPERATOR(pg_catalog./) 2'
                               ' ELSE OPERATOR(pg_catalog.-) (ce_i OPERATOR(pg_catalog./) 2) END)::%s', typ)
    WHEN typ IN ('pg_catalog.text'::regtype, 'pg_catalog.varchar'::regtype)
        THEN pg_catalog.format('ce_i::pg_catalog.text::%s', typ)
    WHEN typ OPERATOR(pg_catalog.=) 'pg_catalog.uuid'::regtype
        THEN 'pg_catalog.lpad(pg_catalog.to_hex(ce_i), 32, ''0'')::pg_catalog.uuid'
END
$$;

-- An application-mode counter (not buffered) on a table Citus distributes
-- (doc/citus.md, "Tracked counters in application mode"): true when source
-- is hash-distributed (not a partition of one) by key_column and every node
-- has Citus's metadata: its state is then distributed colocated with the
-- source, and counter.add writes the row's shard (through the counter's
-- inbox: counter_internal.tracked_make_inbox). False otherwise (without
-- Citus too): its state is a table of this node, as before 1.8.
CREATE OR REPLACE FUNCTION counter_internal.citus_app_colocated(source regclass, key_column name)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT counter_internal.citus_distributed(source) THEN
        RETURN false;
    END IF;
    RETURN counter_internal.citus_colocation_why(source, key_column) IS NULL;
END
$$;

-- A rollup on a table Citus distributes (doc/citus.md, "Rollups on a
-- distributed table"): the distribution column of source when it is a
-- hash-distributed table (not a partition of one), the rollup is deferred,
-- or in trigger mode and grouped by the distribution column (1.8: its shard
-- triggers add to the rollup's colocated shard), and every node has Citus's
-- metadata (the shard triggers find the rollup's
-- colocated dirty log there): then the rollup's dirty log is distributed
-- colocated with it and its triggers run on the shards; its table is
-- colocated with it when group_by includes the distribution column (the
-- refresh is pushed down whole); otherwise, in trigger mode, grouped by the
-- distribution column too, colocated, and read through a view that sums it
-- over that column (rollup_create, rollup_make_view), and in deferred mode
-- a table of the coordinator (the refresh's GROUP BY is pushed down, its
-- partial sums and sketches combined there: rollup_citus_sql). NULL when Citus does not distribute
-- source. Any other layout is refused (0A000), before anything is made.
CREATE OR REPLACE FUNCTION counter_internal.citus_rollup_check(source regclass, group_by name[], mode text,
    replicated boolean)
RETURNS name
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p record;
    why text;
BEGIN
    IF NOT counter_internal.citus_distributed(source) THEN
        RETURN NULL;
    END IF;
    p := counter_internal.citus_layout(source);
    why := p.why;
    IF why IS NOT NULL THEN
        NULL;
    ELSIF mode IS DISTINCT FROM 'deferred' AND mode IS DISTINCT FROM 'trigger' THEN
        why := pg_catalog.format('A deferred or trigger-mode rollup is supported there, not mode %L (buffered mode''s shared memory is per node).', mode);
    ELSIF replicated THEN
        why := 'replicated => true is not supported there.';
    END IF;
    IF why IS NOT NULL THEN
        RAISE EXCEPTION 'a rollup of %, a table Citus distributes, is not supported yet in this form', source
            USING ERRCODE = 'feature_not_supported', DETAIL = why,
                  HINT = 'On a hash-distributed table, make a deferred or a trigger-mode rollup; otherwise aggregate with counter.hll_add_agg and counter.pncounter_merge_agg, which Citus pushes down (doc/citus.md).';
    END IF;
    RETURN p.col;
END
$$;

-- A distributed rollup's filter (its stored tree): Citus refuses a VOLATILE
-- function in the refresh's DELETE, which it pushes down to the shards; such
-- a filter is refused when it is set (0A000), before anything is made.
CREATE OR REPLACE FUNCTION counter_internal.citus_filter_check(tree text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    f regprocedure;
BEGIN
    SELECT p.oid INTO f FROM pg_catalog.regexp_matches(tree, ':(?:funcid|opfuncid) ([0-9]+)', 'g') m
    JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) m[1]::oid
    WHERE p.provolatile OPERATOR(pg_catalog.=) 'v' LIMIT 1;
    IF f IS NOT NULL THEN
        RAISE EXCEPTION 'the filter of a rollup of a table Citus distributes calls the VOLATILE function %', f
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'Its refresh runs the filter in statements Citus pushes down to the shards, and Citus refuses VOLATILE functions there.',
                  HINT = 'Declare the function STABLE or IMMUTABLE if it is (ALTER FUNCTION ... STABLE), on every node, or filter without it (doc/citus.md).';
    END IF;
END
$$;

-- Where the state of a new distributed counter or rollup (what: 'counter'
-- or 'rollup'; tables colocated with its source: names) is made: the source's schema when the owner may
-- create there, so that Citus, which makes a moved or split shard's table
-- again as the table's owner, can move it with the source's shards (as it
-- can move the source's own only then); else NULL, counter_internal, with a
-- warning: shard moves of the source fail while it exists. A name taken
-- there is refused (42P07), before anything is made.
CREATE OR REPLACE FUNCTION counter_internal.citus_state_schema(what text, source regclass, owner regrole, names text[])
RETURNS name
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
    n text;
BEGIN
    SELECT s.nspname INTO STRICT nsp FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace s ON s.oid OPERATOR(pg_catalog.=) c.relnamespace
    WHERE c.oid OPERATOR(pg_catalog.=) source;
    IF NOT pg_catalog.has_schema_privilege(owner::oid, nsp::text, 'CREATE') THEN
        RAISE WARNING 'the state of this % is kept in schema counter_internal: Citus cannot move or split the shards of % while it exists',
            what, source
            USING DETAIL = pg_catalog.format('Citus makes a moved shard''s table again as its owner, and %s may not create in schema %I, where it would be kept beside %s.',
                                             owner, nsp, source),
                  HINT = pg_catalog.format('GRANT CREATE ON SCHEMA %I TO %s, then make it again (doc/citus.md).', nsp, owner);
        RETURN NULL;
    END IF;
    FOREACH n IN ARRAY names LOOP
        IF pg_catalog.to_regclass(pg_catalog.format('%I.%I', nsp, n)) IS NOT NULL THEN
            RAISE EXCEPTION 'relation %.% already exists', pg_catalog.quote_ident(nsp), pg_catalog.quote_ident(n)
                USING ERRCODE = 'duplicate_table',
                      DETAIL = pg_catalog.format('counter_ext keeps the state of a counter or rollup of a distributed table beside it, in its schema, as %s.', n),
                      HINT = 'Rename or drop that table, then call again.';
        END IF;
    END LOOP;
    RETURN nsp;
END
$$;

-- Distributes rel (a distributed counter's state table, a distributed
-- rollup's table or dirty log) by its column col, colocated with source
-- (same shard count, same shard ranges, same nodes).
CREATE OR REPLACE FUNCTION counter_internal.citus_colocate(rel regclass, source regclass, col name)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE 'SELECT pg_catalog.create_distributed_table($1, $2, colocate_with => $3)' USING rel, col::text, source::text;
END
$$;
-- A distributed counter's state tables are distributed by their column key.
CREATE OR REPLACE FUNCTION counter_internal.citus_colocate(rel regclass, source regclass)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM counter_internal.citus_colocate(rel, source, 'key');
END
$$;

-- Runs a trigger's DDL (CREATE / DROP TRIGGER) on a table Citus distributes:
-- with citus.enable_unsafe_triggers on for the command only, Citus makes or
-- drops it on every shard, on every node.
CREATE OR REPLACE FUNCTION counter_internal.citus_trigger_ddl(command text)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM counter_internal.citus_trigger_ddl_as(NULL, command);
END
$$;

-- The same, run as owner when it is given (untrack, rollup_drop: Citus
-- refuses to change as another role placements the owner's writes changed
-- in this transaction). The setting is put back after the command: a SET
-- LOCAL outlives the function that makes it, and must not reach the caller.
CREATE OR REPLACE FUNCTION counter_internal.citus_trigger_ddl_as(owner regrole, command text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    was text := pg_catalog.current_setting('citus.enable_unsafe_triggers', true);
BEGIN
    PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
    IF owner IS NULL THEN
        EXECUTE command;
    ELSE
        PERFORM counter_internal.exec_as_owner_cmd(owner, command, true);
    END IF;
    PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', coalesce(was, 'off'), true);
END
$$;

-- Called by the library (src/citus.cpp) while Citus's
-- create_distributed_table or create_reference_table makes rel a table
-- Citus distributes (rel is in pg_dist_partition then): refuses it when
-- counter_ext serves it in a way that does not work there (what
-- counter_internal.citus_tracked_check and citus_rollup_check refuse at
-- track / rollup_create, and a
-- rollup's own table, which its source's trigger writes with a statement
-- Citus cannot run), before the shards are made; the error rolls the whole
-- call back. A table Citus only adds to its metadata (a Citus local table)
-- is not refused. Reads the catalog only.
-- (VOLATILE: it reads the pg_dist_partition row Citus has just written.)
CREATE OR REPLACE FUNCTION counter_internal.citus_distribution_check(rel regclass)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    citus_local boolean;
    what text;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN;
    END IF;
    EXECUTE 'SELECT p.partmethod OPERATOR(pg_catalog.=) ''n'' AND p.repmodel OPERATOR(pg_catalog.=) ''s'' '
            'AND p.colocationid OPERATOR(pg_catalog.=) 0 '
            'FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid OPERATOR(pg_catalog.=) $1'
        INTO citus_local USING rel;
    IF citus_local IS NOT FALSE THEN
        RETURN;
    END IF;
    SELECT x.what INTO what FROM (
        SELECT 1 AS o, format('the trigger-mode tracked counter %L', c.name) AS what FROM counter.tracked c
        WHERE c.source::oid OPERATOR(pg_catalog.=) rel::oid AND c.mode OPERATOR(pg_catalog.=) 'trigger'
        UNION ALL
        SELECT 3, format('the rollup %L (its source)', r.name) FROM counter.rollups r
        WHERE r.source::oid OPERATOR(pg_catalog.=) rel::oid
        UNION ALL
        SELECT 4, format('the rollup %L (its table)', r.name) FROM counter.rollups r
        WHERE r.rollup_table::oid OPERATOR(pg_catalog.=) rel::oid
        ORDER BY 1 LIMIT 1) x;
    IF what IS NOT NULL THEN
        RAISE EXCEPTION 'Citus cannot distribute %: it serves %, which does not work on a table Citus distributes yet', rel, what
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'Its triggers would run on the shards, where counter_ext''s catalog is not, or write the distributed table with a statement Citus cannot run: every write would fail.',
                  HINT = 'Untrack the counter (counter.untrack) or drop the rollup (counter.rollup_drop) first; on a hash-distributed table make the trigger-mode counter again after the call, keyed by the distribution column, or use an application-mode counter (with or without a filter), and counter_ext''s aggregates, which Citus pushes down (doc/citus.md).';
    END IF;
END
$$;

-- The arguments of a trigger (pg_trigger.tgargs: each ends with a zero
-- byte, in the server's encoding), as text.
CREATE OR REPLACE FUNCTION counter_internal.trigger_args(a bytea)
RETURNS text[]
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r text[] := '{}';
    p integer;
BEGIN
    LOOP
        p := pg_catalog.position(a, '\x00'::bytea);
        EXIT WHEN p OPERATOR(pg_catalog.=) 0;
        r := r OPERATOR(pg_catalog.||) pg_catalog.convert_from(pg_catalog.substring(a, 1, p OPERATOR(pg_catalog.-) 1),
                                                               pg_catalog.current_setting('server_encoding'));
        a := pg_catalog.substring(a, p OPERATOR(pg_catalog.+) 1);
    END LOOP;
    RETURN r;
END
$$;

-- The event trigger counter_citus_triggers (on CREATE TRIGGER; on every
-- node, with Citus loaded): a trigger of counter_ext (a tracked counter's or
-- a rollup's) made on a table that is not the source of its counter or
-- rollup in this database's catalog is refused. Citus copies a table's
-- triggers to every shard (create_distributed_table, create_reference_table
-- with citus.enable_unsafe_triggers on) and to the table it makes again
-- (undistribute_table, alter_distributed_table), where counter_ext's catalog
-- does not name them: every write would then fail there (the trigger
-- refuses to count into nothing). Refused when made instead, on the worker
-- or here, the whole call is rolled back (doc/citus.md). Reads the catalog
-- only.
CREATE OR REPLACE FUNCTION counter_internal.citus_trigger_check()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g record;
    registered boolean;
    part text;
    on_coordinator boolean;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN;
    END IF;
    on_coordinator := EXISTS (SELECT FROM pg_catalog.pg_dist_local_group l WHERE l.groupid OPERATOR(pg_catalog.=) 0);
    FOR g IN SELECT t.tgrelid::regclass AS rel, t.tgrelid, t.tgname, p.proname, c.relname, c.relnamespace,
                    t.tgnargs OPERATOR(pg_catalog.>=) 2
                    AND (pg_catalog.string_to_array(pg_catalog.encode(t.tgargs, 'escape'), '\000'))[2]
                        OPERATOR(pg_catalog.=) 'citus' AS citus,
                    pg_catalog.convert_from(pg_catalog.substring(t.tgargs, 1,
                        pg_catalog.position(t.tgargs, '\x00'::bytea) OPERATOR(pg_catalog.-) 1), 'UTF8') AS arg,
                    counter_internal.trigger_args(t.tgargs) AS args
             FROM pg_catalog.pg_event_trigger_ddl_commands() d
             JOIN pg_catalog.pg_trigger t ON t.oid OPERATOR(pg_catalog.=) d.objid
             JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid
             JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.tgrelid
             WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_trigger'::pg_catalog.regclass
               AND p.pronamespace OPERATOR(pg_catalog.=) 'counter_internal'::pg_catalog.regnamespace
               AND p.proname IN ('tracked_fold', 'rollup_trigger', 'tracked_shard_fold', 'rollup_shard_mark',
                                 'tracked_shard_add', 'tracked_shard_reconcile')
               AND t.tgnargs OPERATOR(pg_catalog.>=) 1 LOOP
        IF g.citus THEN
            -- a distributed counter's or rollup's trigger (src/tracked.cpp,
            -- shard_fold; src/rollup.cpp, shard_mark):
            -- made by counter.track (rollup_create) on the distributed table, copied by
            -- Citus to its shards and to the other nodes' metadata copy of
            -- the table; it finds its state in Citus's metadata, where it
            -- runs. Accepted on a table Citus hash-distributes and on its
            -- shards (named <table>_<shard id>), a shard a split is making
            -- too (not in the node's metadata yet: <table>_<digits> beside
            -- a hash-distributed <table>; at a write it must be a shard, or
            -- the trigger refuses it).
            EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition p '
                    '  WHERE p.logicalrelid OPERATOR(pg_catalog.=) $1 AND p.partmethod OPERATOR(pg_catalog.=) ''h'') '
                    'OR EXISTS (SELECT FROM pg_catalog.pg_dist_shard s '
                    '  WHERE s.shardid::text OPERATOR(pg_catalog.=) pg_catalog.substring($2, ''_([0-9]+)$'') '
                    '    AND pg_catalog.to_regclass(pg_catalog.shard_name(s.logicalrelid, s.shardid, false)) '
                    '        OPERATOR(pg_catalog.=) $1) '
                    'OR EXISTS (SELECT FROM pg_catalog.pg_dist_partition p '
                    '  JOIN pg_catalog.pg_class d ON d.oid OPERATOR(pg_catalog.=) p.logicalrelid '
                    '  WHERE p.partmethod OPERATOR(pg_catalog.=) ''h'' '
                    '    AND d.relnamespace OPERATOR(pg_catalog.=) $3 '
                    '    AND d.relname::text OPERATOR(pg_catalog.=) pg_catalog.substring($2, ''^(.*)_[0-9]+$''))'
                INTO registered USING g.tgrelid::regclass, g.relname::text, g.relnamespace;
            IF g.proname IN ('tracked_shard_add', 'tracked_shard_reconcile') THEN
                -- a state table's trigger: an application-mode counter's
                -- inbox (tracked_make_inbox; tracked_shard_add) or the run
                -- table of a counter whose state Citus distributes (1.8,
                -- tracked_make_run; tracked_shard_reconcile)
                part := CASE g.proname WHEN 'tracked_shard_add' THEN 'inbox' ELSE 'run' END;
                IF on_coordinator THEN
                    -- on the coordinator, only on that table of the counter
                    -- its arguments name (or a shard of it): on a worker node
                    -- counter.add finds a counter by its inbox trigger's
                    -- arguments (src/tracked.cpp, worker_counters), so a
                    -- trigger naming another role's counter on a table of
                    -- one's own, or giving its name on the inbox of a
                    -- counter of one's own, would take that role's adds
                    registered := EXISTS (
                        SELECT FROM counter.tracked c
                        -- (counter_internal: an owner who may not create
                        -- in the source's schema; 31_tracked_code.sql,
                        -- tracked_table)
                        JOIN pg_catalog.pg_namespace s
                          ON s.nspname OPERATOR(pg_catalog.=) coalesce(c.state_schema, 'counter_internal')
                        WHERE c.counter_id::text OPERATOR(pg_catalog.=) g.arg
                          AND CASE part WHEN 'inbox' THEN c.mode OPERATOR(pg_catalog.=) 'application'
                                                          AND c.name OPERATOR(pg_catalog.=) g.args[5]
                                        ELSE c.distributed END
                          AND s.oid OPERATOR(pg_catalog.=) g.relnamespace
                          AND g.relname OPERATOR(pg_catalog.~)
                              pg_catalog.format('^%s_%s_%s(_[0-9]+)?$',
                                                CASE WHEN c.state_schema IS NULL THEN 'tracked' ELSE 'counter_tracked' END,
                                                c.counter_id, part));
                ELSE
                    -- on a worker node by its name: the table is distributed
                    -- in the transaction that makes its trigger, so the
                    -- workers make the trigger on its shards before their
                    -- metadata names them (the trigger on the coordinator was
                    -- checked there)
                    registered := registered OR g.relname OPERATOR(pg_catalog.~)
                        pg_catalog.format('^(counter_)?tracked_%s_%s(_[0-9]+)?$', g.arg, part);
                END IF;
            ELSIF g.proname OPERATOR(pg_catalog.=) 'tracked_shard_fold'
                  AND pg_catalog.cardinality(g.args) OPERATOR(pg_catalog.>=) 10 AND on_coordinator THEN
                -- (1.8) a trigger-mode counter's trigger that names it: on
                -- a worker node counter.value finds the counter by it
                -- (src/tracked.cpp, worker_counters); on the coordinator only
                -- on the source of the counter it names (or a shard of it)
                registered := registered AND EXISTS (
                    SELECT FROM counter.tracked c
                    JOIN pg_catalog.pg_class s ON s.oid OPERATOR(pg_catalog.=) c.source
                    WHERE c.counter_id::text OPERATOR(pg_catalog.=) g.arg
                      AND c.mode OPERATOR(pg_catalog.=) 'trigger'
                      AND c.name OPERATOR(pg_catalog.=) g.args[10]
                      AND s.relnamespace OPERATOR(pg_catalog.=) g.relnamespace
                      AND (c.source::oid OPERATOR(pg_catalog.=) g.tgrelid
                           OR (pg_catalog.left(g.relname::text, pg_catalog.length(s.relname::text) OPERATOR(pg_catalog.+) 1)
                                   OPERATOR(pg_catalog.=) (s.relname::text OPERATOR(pg_catalog.||) '_')
                               AND pg_catalog.substring(g.relname::text, pg_catalog.length(s.relname::text) OPERATOR(pg_catalog.+) 2)
                                   OPERATOR(pg_catalog.~) '^[0-9]+$')));
            END IF;
        ELSIF g.proname IN ('tracked_shard_fold', 'rollup_shard_mark', 'tracked_shard_add', 'tracked_shard_reconcile') THEN
            registered := false; -- only with a distributed counter's or rollup's arguments
        ELSIF g.proname OPERATOR(pg_catalog.=) 'tracked_fold' THEN
            registered := EXISTS (SELECT FROM counter.tracked c
                                  WHERE c.counter_id::text OPERATOR(pg_catalog.=) g.arg
                                    AND c.source::oid OPERATOR(pg_catalog.=) g.tgrelid);
        ELSE
            registered := EXISTS (SELECT FROM counter.rollups r
                                  WHERE r.rollup_id::text OPERATOR(pg_catalog.=) g.arg
                                    AND r.source::oid OPERATOR(pg_catalog.=) g.tgrelid);
        END IF;
        IF NOT registered THEN
            RAISE EXCEPTION 'trigger % of counter_ext on % is refused: % is not the source of its %',
                    g.tgname, g.rel, g.rel,
                    CASE WHEN g.proname IN ('tracked_fold', 'tracked_shard_fold', 'tracked_shard_add', 'tracked_shard_reconcile')
                         THEN 'tracked counter' ELSE 'rollup' END
                USING ERRCODE = 'feature_not_supported',
                      DETAIL = 'Citus copies a table''s triggers to its shards (create_distributed_table, create_reference_table) and to the table it makes again (undistribute_table, alter_distributed_table); counter_ext''s catalog does not name the copy, so every write to it would fail.',
                      HINT = 'Untrack the trigger-mode counter (counter.untrack) or drop the rollup (counter.rollup_drop) before the call, and make it again after if it is supported there (doc/citus.md).';
        END IF;
    END LOOP;
END
$$;

-- The event trigger counter_citus_trigger_creator (on CREATE TRIGGER, 1.8):
-- only the owner of a table (a role with its rights, or a superuser) may
-- attach counter_internal.tracked_shard_fold, tracked_shard_add or
-- rollup_shard_mark, which PUBLIC may execute (99_internal.sql) and which
-- write as the table's owner;
-- a role with the TRIGGER privilege on the table is refused (42501). Not
-- SECURITY DEFINER: it checks the role making the trigger (counter_ext's,
-- in counter.track and rollup_create; the table's owner, when Citus makes
-- the trigger again on a moved or split shard).
CREATE OR REPLACE FUNCTION counter_internal.citus_trigger_creator()
RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g record;
    shell boolean;
BEGIN
    FOR g IN SELECT t.tgname, t.tgrelid::regclass AS rel, c.relowner, p.proname
             FROM pg_catalog.pg_event_trigger_ddl_commands() d
             JOIN pg_catalog.pg_trigger t ON t.oid OPERATOR(pg_catalog.=) d.objid
             JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid
             JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.tgrelid
             WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_trigger'::pg_catalog.regclass
               AND p.pronamespace OPERATOR(pg_catalog.=) 'counter_internal'::pg_catalog.regnamespace
               AND p.proname IN ('tracked_shard_fold', 'rollup_shard_mark', 'tracked_shard_add', 'tracked_shard_reconcile') LOOP
        IF NOT pg_catalog.pg_has_role(g.relowner, 'USAGE') THEN
            RAISE EXCEPTION 'only the owner of % may attach the trigger % of counter_ext', g.rel, g.tgname
                USING ERRCODE = 'insufficient_privilege',
                      DETAIL = 'It writes as the table''s owner.',
                      HINT = 'counter.track and counter.rollup_create make it.';
        END IF;
        -- on a worker node, an application-mode counter's inbox trigger and
        -- a trigger-mode counter's trigger on the node's metadata copy of a
        -- table are how counter.add and value find the counter there
        -- (src/tracked.cpp, worker_counters): only counter.track
        -- makes it (its commands reach the workers as the extension's
        -- owner, a superuser; Citus's metadata sync to a new node too),
        -- never a role that turned Citus's DDL propagation off to make it on
        -- one node alone, on a table of its own, naming another role's counter
        IF g.proname IN ('tracked_shard_add', 'tracked_shard_fold')
           AND pg_catalog.to_regclass('pg_catalog.pg_dist_local_group') IS NOT NULL THEN
            EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_local_group l WHERE l.groupid OPERATOR(pg_catalog.<>) 0)'
                    ' AND EXISTS (SELECT FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid OPERATOR(pg_catalog.=) $1)'
                INTO shell USING g.rel::oid;
            IF shell AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER) THEN
                RAISE EXCEPTION 'the trigger % of counter_ext on % is made on a Citus worker node by counter.track only', g.tgname, g.rel
                    USING ERRCODE = 'insufficient_privilege',
                          DETAIL = 'On a worker node counter.add and value find a counter by that trigger''s arguments.',
                          HINT = 'counter.track makes it on the coordinator, and Citus on every node.';
            END IF;
        END IF;
    END LOOP;
END
$$;

-- The event trigger counter_citus_shard_truncate (on DROP TRIGGER, 1.8; on
-- every node, with Citus loaded): when a trigger-mode counter's INSERT,
-- DELETE or UPDATE trigger is dropped from a shard (Citus sends the DROP
-- TRIGGER of the distributed table's trigger to every shard: untrack, a
-- changed filter), the counter's TRUNCATE trigger on that shard goes too.
-- Citus copies a table's TRUNCATE triggers to a shard it moves or splits
-- (not to the shards create_distributed_table makes), but never sends their
-- DROP TRIGGER (it holds that shards have none), so without this such a copy
-- outlived its counter. Runs as the role dropping the trigger, which owns
-- the shard; drops only a trigger of counter_ext's shard function of the
-- same counter on the same shard.
CREATE OR REPLACE FUNCTION counter_internal.citus_shard_truncate_follow()
RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g record;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN;
    END IF;
    FOR g IN SELECT t.tgname, t.tgrelid::regclass AS rel
             FROM pg_catalog.pg_event_trigger_dropped_objects() d
             CROSS JOIN LATERAL pg_catalog.regexp_match(d.address_names[3],
                 '^counter_([0-9]+)_(ins|del|upd)_([0-9]+)$') AS m(m)
             JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) d.address_names[1]
             JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid
                                       AND c.relname OPERATOR(pg_catalog.=) d.address_names[2]
             JOIN pg_catalog.pg_trigger t ON t.tgrelid OPERATOR(pg_catalog.=) c.oid
                  AND t.tgname OPERATOR(pg_catalog.=) pg_catalog.format('counter_%s_trunc_%s', m.m[1], m.m[3])
             JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid
             WHERE d.object_type OPERATOR(pg_catalog.=) 'trigger'
               AND pg_catalog.cardinality(d.address_names) OPERATOR(pg_catalog.=) 3
               AND p.pronamespace OPERATOR(pg_catalog.=) 'counter_internal'::pg_catalog.regnamespace
               AND p.proname OPERATOR(pg_catalog.=) 'tracked_shard_fold' LOOP
        EXECUTE pg_catalog.format('DROP TRIGGER %I ON %s', g.tgname, g.rel);
    END LOOP;
END
$$;

-- The event trigger counter_citus_state (on ALTER TABLE and ALTER SCHEMA,
-- 1.8): the state of a distributed counter or rollup kept beside its source
-- (counter.tracked.state_schema, counter.rollups.state_schema) is named in
-- its shard triggers' arguments and its batch function, and so are an
-- application-mode counter's source (by its inbox's trigger) and a
-- trigger-mode rollup's table (by the source's INSERT trigger): renaming
-- that schema, moving the source or a state table to another schema, or
-- renaming a state table, that source or that rollup table would make
-- every write to the source fail: refused (0A000) where counter_ext's
-- catalog is (the coordinator).
CREATE OR REPLACE FUNCTION counter_internal.citus_state_check()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    x record;
BEGIN
    FOR x IN SELECT 'counter' AS what, c.name, c.source, c.state_schema,
                    ARRAY(SELECT counter_internal.tracked_table(c, p.p)
                          FROM pg_catalog.unnest(counter_internal.tracked_state_parts(c)) AS p(p)) AS tabs,
                    -- a table whose trigger (once made) names a table: the table, the trigger, the name
                    CASE WHEN c.mode OPERATOR(pg_catalog.=) 'application' THEN counter_internal.tracked_table(c, 'inbox') END AS on_table,
                    pg_catalog.format('counter_%s_add', c.counter_id) AS trg, c.source::text AS named
             FROM counter.tracked c WHERE c.state_schema IS NOT NULL
             UNION ALL
             SELECT 'rollup', r.name, r.source, r.state_schema, ARRAY[counter_internal.rollup_dirty_table(r)],
                    CASE WHEN r.mode OPERATOR(pg_catalog.=) 'trigger' THEN r.source::text END,
                    pg_catalog.format('counter_rollup_%s_insert', r.rollup_id), r.rollup_table::text
             FROM counter.rollups r WHERE r.state_schema IS NOT NULL
             ORDER BY 1, 2 LOOP
        IF (SELECT s.nspname FROM pg_catalog.pg_class c
            JOIN pg_catalog.pg_namespace s ON s.oid OPERATOR(pg_catalog.=) c.relnamespace
            WHERE c.oid OPERATOR(pg_catalog.=) x.source) IS DISTINCT FROM x.state_schema
           OR EXISTS (SELECT FROM pg_catalog.unnest(x.tabs) AS t(t) WHERE pg_catalog.to_regclass(t.t) IS NULL)
           OR EXISTS (SELECT FROM pg_catalog.pg_trigger g
                      WHERE x.on_table IS NOT NULL
                        AND g.tgrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(x.on_table)
                        AND g.tgname OPERATOR(pg_catalog.=) x.trg
                        -- the argument as the trigger's definition prints it
                        AND pg_catalog.strpos(pg_catalog.pg_get_triggerdef(g.oid),
                                              ', ''' OPERATOR(pg_catalog.||) pg_catalog.replace(x.named, '''', '''''')
                                              OPERATOR(pg_catalog.||) ''',') OPERATOR(pg_catalog.=) 0) THEN
            RAISE EXCEPTION 'the state of % "%" is kept in schema % beside %, and the shards'' triggers name it',
                    x.what, x.name, pg_catalog.quote_ident(x.state_schema), x.source
                USING ERRCODE = 'feature_not_supported',
                      DETAIL = 'Renaming that schema, moving the table or its counter''s state to another schema, or renaming a state table, the table of an application-mode counter or the table of a trigger-mode rollup would make every write to the table fail.',
                      HINT = 'Untrack the counter (drop the rollup) first, and make it again after (doc/citus.md).';
        END IF;
    END LOOP;
END
$$;

-- The event trigger counter_citus_conversion (on DROP TABLE; it fires
-- before counter_ext's forget_dropped triggers): Citus's undistribute_table,
-- alter_distributed_table and alter_table_set_access_method make a table
-- again under a new name, drop the old one and rename the new one; counter_ext
-- would forget the counters, rollups and partition maintenance of the
-- dropped table (the new one has another OID) and an application's
-- counter.add would then fail. Such a call on a table counter_ext serves is
-- refused instead, and rolled back whole. Citus's conversion is recognized
-- by the setting it turns off for its length
-- (citus.enable_local_reference_table_foreign_keys); a DROP TABLE made with
-- that setting off by hand is refused too (the hint says so).
CREATE OR REPLACE FUNCTION counter_internal.citus_conversion_check()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g record;
BEGIN
    IF pg_catalog.current_setting('citus.enable_local_reference_table_foreign_keys', true) IS DISTINCT FROM 'off' THEN
        RETURN;
    END IF;
    FOR g IN SELECT d.object_identity, x.what
             FROM pg_catalog.pg_event_trigger_dropped_objects() d
             CROSS JOIN LATERAL (
                 SELECT 'tracked counter ' OPERATOR(pg_catalog.||) pg_catalog.quote_literal(c.name) AS what
                 FROM counter.tracked c WHERE c.source::oid OPERATOR(pg_catalog.=) d.objid
                 UNION ALL
                 SELECT 'rollup ' OPERATOR(pg_catalog.||) pg_catalog.quote_literal(r.name) FROM counter.rollups r
                 WHERE d.objid IN (r.source::oid, r.rollup_table::oid)
                 UNION ALL
                 SELECT 'partition maintenance' FROM counter.partitioned_tables p
                 WHERE p.parent::oid OPERATOR(pg_catalog.=) d.objid) x
             WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
               AND d.objsubid OPERATOR(pg_catalog.=) 0 AND d.object_type IN ('table', 'partitioned table')
             LIMIT 1 LOOP
        RAISE EXCEPTION 'table % serves counter_ext (%): Citus cannot make it again under another name', g.object_identity, g.what
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'undistribute_table, alter_distributed_table and alter_table_set_access_method copy the table, drop it and rename the copy; counter_ext would forget what it keeps for the dropped table.',
                  HINT = 'Remove it first (counter.untrack, counter.rollup_drop, counter.partition_unmanage), make the call, and set it up again (doc/citus.md). A DROP TABLE made with citus.enable_local_reference_table_foreign_keys off is refused too: RESET it.';
    END LOOP;
END
$$;

-- run_end: the feature's last part of run 'run' (and when it ended); a
-- direct call's row is finished here too (a job's by the worker, after the
-- job's procedure returns: rows_affected, outcome, the error whole). error,
-- when the run failed: {sqlstate, message, detail, hint, context}, kept whole
-- in a direct call's row.
CREATE OR REPLACE FUNCTION counter_internal.run_end(run bigint, info jsonb, rows_affected bigint DEFAULT NULL,
    error jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    now_ timestamptz := pg_catalog.clock_timestamp();
BEGIN
    UPDATE counter.job_runs x
    SET info = coalesce(x.info, '{}') OPERATOR(pg_catalog.||) run_end.info
               OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('finished_at', now_),
        outcome = CASE WHEN x.runner OPERATOR(pg_catalog.<>) 'call' THEN x.outcome
                       WHEN error IS NOT NULL THEN 'failed' ELSE 'succeeded' END,
        finished_at = CASE WHEN x.runner OPERATOR(pg_catalog.<>) 'call' THEN x.finished_at ELSE now_ END,
        rows_affected = CASE WHEN x.runner OPERATOR(pg_catalog.<>) 'call' THEN x.rows_affected
                             ELSE run_end.rows_affected END,
        sqlstate = CASE WHEN x.runner OPERATOR(pg_catalog.=) 'call' AND error IS NOT NULL
                        THEN error ->> 'sqlstate' ELSE x.sqlstate END,
        message = CASE WHEN x.runner OPERATOR(pg_catalog.=) 'call' AND error IS NOT NULL
                       THEN error ->> 'message' ELSE x.message END,
        detail = CASE WHEN x.runner OPERATOR(pg_catalog.=) 'call' AND error IS NOT NULL
                      THEN error ->> 'detail' ELSE x.detail END,
        hint = CASE WHEN x.runner OPERATOR(pg_catalog.=) 'call' AND error IS NOT NULL
                    THEN error ->> 'hint' ELSE x.hint END,
        context = CASE WHEN x.runner OPERATOR(pg_catalog.=) 'call' AND error IS NOT NULL
                       THEN error ->> 'context' ELSE x.context END
    WHERE x.run_id OPERATOR(pg_catalog.=) run;
END
$$;

-- run_skipped: the work of (kind, target) could not be done because another
-- session is doing it (its lock in counter_ext's lock space is taken):
-- recorded as what it was, outcome 'skipped' with the reason (message), never
-- as succeeded. In a job's run the reason goes to the run's info and the
-- worker records the outcome (src/worker_jobs.cpp, record); a direct call's
-- row is finished here. Returns the run.
CREATE OR REPLACE FUNCTION counter_internal.run_skipped(kind text, target text, object_id bigint, reason text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    run bigint := counter_internal.run_begin(kind, target, object_id,
                      pg_catalog.jsonb_build_object('outcome', 'skipped', 'skip_reason', reason));
BEGIN
    UPDATE counter.job_runs x
    SET outcome = 'skipped', finished_at = pg_catalog.clock_timestamp(), message = reason, rows_affected = 0,
        info = x.info OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('finished_at', pg_catalog.clock_timestamp())
    WHERE x.run_id OPERATOR(pg_catalog.=) run AND x.runner OPERATOR(pg_catalog.=) 'call';
    RETURN run;
END
$$;

-- run_interrupted: the runs of an object whose feature part still says
-- 'running' died (the caller holds the object's lock, so none runs): their
-- feature part says 'interrupted'; a direct call's row is failed (a job's
-- row is the worker's to fail: its process is gone).
CREATE OR REPLACE FUNCTION counter_internal.run_interrupted(kind text, object_id bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE counter.job_runs x
    SET info = x.info OPERATOR(pg_catalog.||) '{"outcome": "interrupted"}',
        outcome = CASE WHEN x.runner OPERATOR(pg_catalog.=) 'call' THEN 'failed' ELSE x.outcome END,
        finished_at = CASE WHEN x.runner OPERATOR(pg_catalog.=) 'call'
                           THEN coalesce(x.finished_at, pg_catalog.clock_timestamp()) ELSE x.finished_at END,
        message = CASE WHEN x.runner OPERATOR(pg_catalog.=) 'call' AND x.outcome OPERATOR(pg_catalog.=) 'running'
                       THEN 'interrupted: its session ended before it finished' ELSE x.message END
    WHERE x.kind OPERATOR(pg_catalog.=) run_interrupted.kind
      AND x.object_id OPERATOR(pg_catalog.=) run_interrupted.object_id
      AND x.info ->> 'outcome' OPERATOR(pg_catalog.=) 'running';
END
$$;

-- run_forget: an object's history goes with the object (found by its id,
-- or by its target when it has none).
CREATE OR REPLACE FUNCTION counter_internal.run_forget(kind text, object_id bigint, target text DEFAULT NULL)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    DELETE FROM counter.job_runs x
    WHERE x.kind OPERATOR(pg_catalog.=) run_forget.kind
      AND (x.object_id OPERATOR(pg_catalog.=) run_forget.object_id
           OR (run_forget.object_id IS NULL AND x.target OPERATOR(pg_catalog.=) run_forget.target))
$$;

-- run_note: a feature's part merged into run 'run' (info), and for a direct
-- call's row its rows_affected when given.
CREATE OR REPLACE FUNCTION counter_internal.run_note(run bigint, info jsonb, rows_affected bigint DEFAULT NULL)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE counter.job_runs x
    SET info = coalesce(x.info, '{}') OPERATOR(pg_catalog.||) run_note.info,
        rows_affected = CASE WHEN x.runner OPERATOR(pg_catalog.=) 'call' AND run_note.rows_affected IS NOT NULL
                             THEN run_note.rows_affected ELSE x.rows_affected END
    WHERE x.run_id OPERATOR(pg_catalog.=) run_note.run
$$;

-- run_retarget: the runs of (kind, target) follow their object's new name
-- (a renamed partitioned table: its runs are found by target).
CREATE OR REPLACE FUNCTION counter_internal.run_retarget(kind text, target text, new_target text)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE counter.job_runs x SET target = run_retarget.new_target
    WHERE x.kind OPERATOR(pg_catalog.=) run_retarget.kind AND x.target OPERATOR(pg_catalog.=) run_retarget.target
$$;

-- The job runner's side of the run record (src/worker_jobs.cpp calls these,
-- as the extension's owner, between the job's transactions).
-- run_ids_ahead: called before a new row of counter.job_runs, it moves the
-- run-id sequence past the highest run id when it is behind it. A restore
-- loads counter.job_runs' rows and sets that sequence as two separate steps
-- (a plain restore sets every sequence after all the tables' rows, hours
-- later for a big database; pg_restore -j in any order) while the worker
-- already records held runs of the restored jobs: without this, the next id
-- would be one the restore loaded (the insert fails, the worker's pass fails
-- and backs off, and no held run is recorded), or, once the restore has set
-- the sequence back to the source's value, one recorded here meanwhile.
CREATE OR REPLACE FUNCTION counter_internal.run_ids_ahead()
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    top bigint := (SELECT pg_catalog.max(x.run_id) FROM counter.job_runs x);
    next_id bigint;
BEGIN
    SELECT CASE WHEN q.is_called THEN q.last_value OPERATOR(pg_catalog.+) 1 ELSE q.last_value END
    INTO next_id FROM counter.job_runs_run_id_seq q;
    IF top OPERATOR(pg_catalog.>=) next_id THEN
        PERFORM pg_catalog.setval('counter.job_runs_run_id_seq', top);
    END IF;
END
$$;
REVOKE ALL ON FUNCTION counter_internal.run_ids_ahead() FROM PUBLIC;

-- run_claim: the 'running' row of job 'job' run by this backend (runner
-- 'worker' or 'session'); the owner's oldest runs beyond the bound go.
CREATE OR REPLACE FUNCTION counter_internal.run_claim(job bigint, runner text, backend_start timestamptz)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    run bigint;
BEGIN
    PERFORM counter_internal.run_ids_ahead();
    INSERT INTO counter.job_runs AS x (job_id, kind, target, runner, pid, backend_start, started_at, outcome, run_as)
    SELECT j.job_id, j.kind, j.target, run_claim.runner, pg_catalog.pg_backend_pid(), run_claim.backend_start,
           pg_catalog.clock_timestamp(), 'running', pg_catalog.quote_ident(session_user)::pg_catalog.regrole
    FROM counter.jobs j WHERE j.job_id OPERATOR(pg_catalog.=) job
    RETURNING x.run_id INTO run;
    PERFORM counter_internal.run_trim(pg_catalog.quote_ident(session_user)::pg_catalog.regrole);
    RETURN run;
END
$$;

-- run_closed: a run of job 'job' that ended as it began, not run: 'held'
-- (its object is not complete here; sqlstate 55000) or 'failed' (its owner
-- cannot run it: 42704 dropped, 28000 no LOGIN). run_as: the session user
-- (held), or NULL (refused before any session of the owner).
CREATE OR REPLACE FUNCTION counter_internal.run_closed(job bigint, kind text, target text, runner text,
    backend_start timestamptz, outcome text, sqlstate text, message text, run_as regrole)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT counter_internal.run_ids_ahead();
    INSERT INTO counter.job_runs (job_id, kind, target, runner, pid, backend_start, started_at, finished_at, outcome,
                                  sqlstate, message, run_as)
    VALUES (job, kind, target, runner, pg_catalog.pg_backend_pid(), backend_start, pg_catalog.clock_timestamp(),
            pg_catalog.clock_timestamp(), outcome, sqlstate, message, run_as)
$$;

-- run_finish: a job's run ended: succeeded (or skipped, when its feature
-- said why: info.skip_reason) with rows_affected, or failed with the error
-- whole (sqlstate not NULL).
CREATE OR REPLACE FUNCTION counter_internal.run_finish(run bigint, rows_affected bigint, sqlstate text DEFAULT NULL,
    message text DEFAULT NULL, detail text DEFAULT NULL, hint text DEFAULT NULL, context text DEFAULT NULL)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE counter.job_runs x
    SET outcome = CASE WHEN run_finish.sqlstate IS NOT NULL THEN 'failed'
                       WHEN x.info ? 'skip_reason' THEN 'skipped' ELSE 'succeeded' END,
        finished_at = pg_catalog.clock_timestamp(),
        rows_affected = CASE WHEN run_finish.sqlstate IS NULL THEN run_finish.rows_affected ELSE x.rows_affected END,
        sqlstate = run_finish.sqlstate,
        message = CASE WHEN run_finish.sqlstate IS NULL THEN coalesce(x.message, x.info ->> 'skip_reason')
                       ELSE run_finish.message END,
        detail = CASE WHEN run_finish.sqlstate IS NULL THEN x.detail ELSE run_finish.detail END,
        hint = CASE WHEN run_finish.sqlstate IS NULL THEN x.hint ELSE run_finish.hint END,
        context = CASE WHEN run_finish.sqlstate IS NULL THEN x.context ELSE run_finish.context END
    WHERE x.run_id OPERATOR(pg_catalog.=) run_finish.run
$$;

-- run_abandon: a run still 'running' whose process is gone is failed.
CREATE OR REPLACE FUNCTION counter_internal.run_abandon(run bigint, message text)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE counter.job_runs x
    SET outcome = 'failed', finished_at = pg_catalog.clock_timestamp(), message = run_abandon.message
    WHERE x.run_id OPERATOR(pg_catalog.=) run_abandon.run AND x.outcome OPERATOR(pg_catalog.=) 'running'
$$;

-- run_expire: runs that ended more than keep_s seconds ago go (10,000 at a
-- time: the worker calls it after every pass).
CREATE OR REPLACE FUNCTION counter_internal.run_expire(keep_s integer)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    DELETE FROM counter.job_runs x WHERE x.run_id IN (
        SELECT y.run_id FROM counter.job_runs y
        WHERE y.finished_at OPERATOR(pg_catalog.<) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-)
                                                    pg_catalog.make_interval(secs => keep_s))
        ORDER BY y.finished_at LIMIT 10000)
$$;

-- The owner of the object a job serves, found from its target: the owner
-- the feature records (counter.tracked.owner, counter.rollups.owner: the
-- role its own checks and its state belong to), or the partitioned table's
-- owner (which follows ALTER TABLE ... OWNER TO and REASSIGN OWNED). NULL when
-- the target is gone or the kind is not a built-in one. (PL/pgSQL: the
-- features' catalogs are made by later pieces.)
CREATE OR REPLACE FUNCTION counter_internal.job_target_owner(kind text, target text)
RETURNS regrole
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN CASE kind
        WHEN 'reconcile' THEN
            (SELECT t.owner FROM counter.tracked t WHERE t.name OPERATOR(pg_catalog.=) target)
        WHEN 'flush' THEN
            (SELECT t.owner FROM counter.tracked t WHERE t.name OPERATOR(pg_catalog.=) target)
        WHEN 'rollup_refresh' THEN
            (SELECT r.owner FROM counter.rollups r WHERE r.name OPERATOR(pg_catalog.=) target)
        WHEN 'partition_maintenance' THEN
            (SELECT c.relowner::regrole FROM pg_catalog.pg_class c
             WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(target))
        END;
END
$$;
REVOKE ALL ON FUNCTION counter_internal.job_target_owner(text, text) FROM PUBLIC;

-- Tells the launcher (when the library is preloaded) that the database has a
-- job of 'owner' due at 'due', once the transaction commits.
CREATE OR REPLACE FUNCTION counter_internal.job_nudge(owner oid, due timestamptz)
RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'counter_job_nudge';
REVOKE ALL ON FUNCTION counter_internal.job_nudge(oid, timestamptz) FROM PUBLIC;

-- Registers (or re-enables with a new interval) the job of a target; returns
-- its id. 'owner' is the owner of the object the job serves, given by the
-- registering feature (NULL: found from the target, see
-- counter_internal.job_target_owner).
CREATE OR REPLACE FUNCTION counter.job_register(kind text, target text, run_every interval, owner regrole DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    id bigint;
    who regrole := job_register.owner;
BEGIN
    IF kind IS NULL OR target IS NULL OR run_every IS NULL THEN
        RAISE EXCEPTION 'kind, target and run_every must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF kind !~ '^[a-z][a-z0-9_]{0,58}$' THEN
        RAISE EXCEPTION 'invalid job kind "%"', kind
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A kind is lower-case letters, digits and "_", starting with a letter.';
    END IF;
    IF run_every <= interval '0' THEN
        RAISE EXCEPTION 'run_every must be a positive interval, not %', run_every
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM counter_internal.job_kinds k WHERE k.kind OPERATOR(pg_catalog.=) job_register.kind) THEN
        RAISE EXCEPTION 'unknown job kind "%"', kind
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'The kinds are the rows of counter_internal.job_kinds.';
    END IF;
    who := coalesce(who, counter_internal.job_target_owner(kind, target));
    IF who IS NULL THEN
        RAISE EXCEPTION 'the owner of job target "%" (kind %) is unknown', target, kind
            USING ERRCODE = 'undefined_object', HINT = 'Pass owner => the role that owns the target.';
    END IF;
    INSERT INTO counter.jobs AS j (kind, target, run_every, owner)
    VALUES (job_register.kind, job_register.target, job_register.run_every, who)
    ON CONFLICT ON CONSTRAINT jobs_kind_target_key DO UPDATE
        SET run_every = EXCLUDED.run_every, enabled = true, failures = 0, next_run = pg_catalog.now(),
            owner = EXCLUDED.owner, disabled_reason = NULL
    RETURNING j.job_id INTO id;
    -- the feature registering the job has just made its object: armed here
    INSERT INTO counter_internal.job_armed AS a (job_id) VALUES (id)
    ON CONFLICT (job_id) DO NOTHING;
    PERFORM counter_internal.job_nudge(who::oid, pg_catalog.now());
    RETURN id;
END
$$;

-- Removes the job of a target; true when there was one. Its history stays
-- until the retention trims it.
CREATE OR REPLACE FUNCTION counter.job_unregister(kind text, target text)
RETURNS boolean
LANGUAGE sql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    WITH gone AS (
        DELETE FROM counter.jobs j
        WHERE j.kind OPERATOR(pg_catalog.=) job_unregister.kind
          AND j.target OPERATOR(pg_catalog.=) job_unregister.target
        RETURNING 1)
    SELECT count(*) > 0 FROM gone
$$;
REVOKE ALL ON FUNCTION counter.job_register(text, text, interval, regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.job_unregister(text, text) FROM PUBLIC;

-- job_incomplete for a tracked counter's job (reconcile, flush): why the
-- counter named target is not complete (its catalog row, the primary keys
-- of its state tables), else its source, the triggers it must have there
-- (trigger mode) and whether its owner turned them off (triggers_off).
CREATE OR REPLACE FUNCTION counter_internal.job_incomplete_tracked(target text, OUT why text, OUT src regclass,
    OUT want name[], OUT triggers_off boolean)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t counter.tracked;
    tbl regclass;
BEGIN
    SELECT * INTO t FROM counter.tracked c WHERE c.name OPERATOR(pg_catalog.=) target;
    IF NOT FOUND THEN
        why := format('tracked counter "%s" is not in counter.tracked (a restore loads that table''s rows later)',
                      target);
        RETURN;
    END IF;
    src := t.source;
    triggers_off := coalesce(t.triggers_off, false);
    IF t.mode OPERATOR(pg_catalog.=) 'trigger' THEN
        want := ARRAY[format('counter_%s_ins', t.counter_id), format('counter_%s_del', t.counter_id),
                      format('counter_%s_upd', t.counter_id), format('counter_%s_trunc', t.counter_id)]::name[];
        IF t.replicated THEN
            want := want OPERATOR(pg_catalog.||) ARRAY[format('counter_%s_rins', t.counter_id),
                format('counter_%s_rdel', t.counter_id), format('counter_%s_rupd', t.counter_id),
                format('counter_%s_rtrunc', t.counter_id)]::name[];
        END IF;
    END IF;
    FOREACH tbl IN ARRAY ARRAY[pg_catalog.to_regclass(counter_internal.tracked_table(t, 'base')),
                               pg_catalog.to_regclass(counter_internal.tracked_table(t, 'delta'))] LOOP
        IF tbl IS NULL OR NOT EXISTS (SELECT FROM pg_catalog.pg_index i
                                      WHERE i.indrelid OPERATOR(pg_catalog.=) tbl AND i.indisprimary
                                        AND i.indisvalid) THEN
            why := format('the state table %s of tracked counter "%s" has no primary key yet '
                          '(a restore makes it after the table''s rows)',
                          coalesce(tbl::text, counter_internal.tracked_table(t, 'base')), t.name);
            RETURN;
        END IF;
    END LOOP;
END
$$;

-- job_incomplete for a rollup's job (rollup_refresh): why the rollup named
-- target is not complete (its catalog row, the primary key of its rollup
-- table), else its source and the triggers it must have there.
CREATE OR REPLACE FUNCTION counter_internal.job_incomplete_rollup(target text, OUT why text, OUT src regclass,
    OUT want name[])
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
BEGIN
    SELECT * INTO r FROM counter.rollups c WHERE c.name OPERATOR(pg_catalog.=) target;
    IF NOT FOUND THEN
        why := format('rollup "%s" is not in counter.rollups (a restore loads that table''s rows later)', target);
        RETURN;
    END IF;
    src := r.source;
    want := ARRAY[format('counter_rollup_%s_insert', r.rollup_id), format('counter_rollup_%s_delete', r.rollup_id),
                  format('counter_rollup_%s_update', r.rollup_id)]::name[];
    IF r.replicated THEN
        want := want OPERATOR(pg_catalog.||) ARRAY[format('counter_rollup_%s_rinsert', r.rollup_id),
            format('counter_rollup_%s_rdelete', r.rollup_id), format('counter_rollup_%s_rupdate', r.rollup_id)]::name[];
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_index i
                   WHERE i.indrelid OPERATOR(pg_catalog.=) r.rollup_table AND i.indisprimary AND i.indisvalid) THEN
        why := format('the rollup table %s of rollup "%s" has no primary key yet '
                      '(a restore makes it after the table''s rows)', r.rollup_table, r.name);
    END IF;
END
$$;

-- job_incomplete for the source src of a job's object: why it is not
-- complete (a trigger of want missing, or disabled when triggers_off does
-- not say its owner did that; an index of a partitioned src not valid yet).
CREATE OR REPLACE FUNCTION counter_internal.job_incomplete_source(src regclass, want name[], triggers_off boolean)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    missing text;
    off text;
BEGIN
    IF want IS NOT NULL THEN
        SELECT pg_catalog.string_agg(w, ', ' ORDER BY w) INTO missing
        FROM pg_catalog.unnest(want) w
        WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_trigger g
                          WHERE g.tgrelid OPERATOR(pg_catalog.=) src AND g.tgname OPERATOR(pg_catalog.=) w);
        IF missing IS NOT NULL THEN
            RETURN format('trigger(s) %s on %s not there yet (a restore creates a table''s triggers after its rows)',
                          missing, src);
        END IF;
        -- (a counter whose triggers its owner disabled, triggers_off, was
        -- dumped with them disabled: that is its complete state)
        SELECT pg_catalog.string_agg(g.tgname::text, ', ' ORDER BY g.tgname) INTO off
        FROM pg_catalog.pg_trigger g
        WHERE g.tgrelid OPERATOR(pg_catalog.=) src AND g.tgname OPERATOR(pg_catalog.=) ANY (want)
          AND g.tgenabled OPERATOR(pg_catalog.=) 'D' AND NOT triggers_off;
        IF off IS NOT NULL THEN
            RETURN format('trigger(s) %s on %s are disabled (pg_restore --disable-triggers loads rows with them off; '
                          'ALTER TABLE %s ENABLE TRIGGER ... once the rows are in)', off, src, src);
        END IF;
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) src
                                                   AND c.relkind OPERATOR(pg_catalog.=) 'p') THEN
        -- a managed table's catalog row says how many indexes it had when
        -- it was dumped: a restore makes them after the rows (a plain dump
        -- through psql: after every table's rows; until then the table has
        -- no index to be invalid)
        SELECT format('the partitioned table %s has %s of its %s indexes (a restore makes a table''s indexes '
                      'after its rows)', src, counter_internal.partition_index_count(src), p.parent_indexes)
        INTO missing
        FROM counter.partitioned_tables p
        WHERE p.parent OPERATOR(pg_catalog.=) src
          AND counter_internal.partition_index_count(src) OPERATOR(pg_catalog.<) p.parent_indexes;
        IF missing IS NOT NULL THEN
            RETURN missing;
        END IF;
        SELECT pg_catalog.string_agg(i.indexrelid::regclass::text, ', ' ORDER BY i.indexrelid::regclass::text)
        INTO missing
        FROM pg_catalog.pg_index i
        WHERE i.indrelid OPERATOR(pg_catalog.=) src AND NOT i.indisvalid;
        IF missing IS NOT NULL THEN
            RETURN format('index(es) %s of the partitioned table %s are not valid yet (a restore attaches each '
                          'partition''s index after the partition''s rows)', missing, src);
        END IF;
    END IF;
    RETURN NULL;
END
$$;

-- ---- While a restore runs (doc/operations.md, "While a restore runs")
--
-- pg_restore (without --single-transaction, with -j N or not) makes a
-- database in steps that other sessions see one by one: CREATE EXTENSION,
-- the tables, then the rows (counter_ext's catalog rows among them: they are
-- extension configuration, dumped as data), then indexes, constraints and
-- triggers. pg_restore creates a table's indexes, constraints and triggers
-- only after that table's rows are loaded (it makes every post-data item of
-- a table wait for the table's data, -j included). So the pieces below,
-- which every object of counter_ext has once it is complete, are proof that
-- the rows they depend on are all in:
--   tracked counter (reconcile, flush): its catalog row; its triggers on the
--     source (trigger mode), enabled; the primary keys of its state tables
--     tracked_N_base and tracked_N_delta;
--   rollup (rollup_refresh): its catalog row; its three triggers on the
--     source, enabled; the primary key of its rollup table;
--   managed partitioned table (partition_maintenance): its catalog row;
--   and for a partitioned source or managed table: every index of the
--     parent valid (a partitioned index is valid once the index of every
--     partition is attached, which pg_restore does after that partition's
--     rows), and for a managed one as many indexes as its catalog row says
--     it had when dumped (parent_indexes: a plain dump through psql makes
--     every index after every table's rows, and a table without its
--     indexes yet has none to be invalid);
--   and for every job: no restore connected (job_hold: a superuser's or the
--     extension owner's session named pg_restore), since which piece comes
--     last is each major's choice.
-- What this cannot see is documented: a partitioned table without any
-- index, the source of an application-mode counter, other kinds' targets.
--
-- Returns why the job's object is not complete in this database (NULL when
-- it is). Reads catalogs only.
CREATE OR REPLACE FUNCTION counter_internal.job_incomplete(kind text, target text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    x record;
    managed regclass;
BEGIN
    IF kind OPERATOR(pg_catalog.=) ANY (ARRAY['reconcile', 'flush']) THEN
        SELECT * INTO x FROM counter_internal.job_incomplete_tracked(target);
    ELSIF kind OPERATOR(pg_catalog.=) 'rollup_refresh' THEN
        SELECT *, false AS triggers_off INTO x FROM counter_internal.job_incomplete_rollup(target);
    ELSIF kind OPERATOR(pg_catalog.=) 'partition_maintenance' THEN
        managed := pg_catalog.to_regclass(target);
        IF managed IS NULL OR NOT EXISTS (SELECT FROM counter.partitioned_tables p
                                          WHERE p.parent OPERATOR(pg_catalog.=) managed) THEN
            RETURN format('table %s is not in counter.partitioned_tables (a restore loads that table''s rows later)',
                          target);
        END IF;
        RETURN counter_internal.job_incomplete_source(managed, NULL, false);
    ELSE
        RETURN NULL;   -- a kind of a superuser's own: its target is not known here
    END IF;
    RETURN coalesce(x.why, counter_internal.job_incomplete_source(x.src, x.want, x.triggers_off));
END
$$;
REVOKE ALL ON FUNCTION counter_internal.job_incomplete(text, text) FROM PUBLIC;

-- Called by the job runner (as the extension's owner) before it runs a job:
-- NULL when the job may act on this database, else why it is held. A job not
-- yet armed here (a restored one) is armed once its object is complete; a
-- restored tracked counter's first armed run then verifies every key (its
-- rows were loaded without its triggers).
CREATE OR REPLACE FUNCTION counter_internal.job_hold(job_id bigint)
RETURNS text
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    j counter.jobs;
    why text;
BEGIN
    IF EXISTS (SELECT FROM counter_internal.job_armed a WHERE a.job_id OPERATOR(pg_catalog.=) job_hold.job_id) THEN
        RETURN NULL;
    END IF;
    SELECT * INTO j FROM counter.jobs x WHERE x.job_id OPERATOR(pg_catalog.=) job_hold.job_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    why := counter_internal.job_incomplete(j.kind, j.target);
    IF why IS NOT NULL THEN
        RETURN why;
    END IF;
    -- A restore still connected to this database: its pieces are made in an
    -- order each major decides (pg_restore -j of 18 made a partitioned
    -- table's own index only after other tables' indexes and triggers, its
    -- partitions' rows in: until then it had no index to be invalid), and
    -- it may still be loading rows the pieces above cannot see. pg_restore
    -- connects as application_name 'pg_restore' unless told otherwise
    -- (PGAPPNAME); pg_stat_activity shows every session's database, role
    -- and application_name to any role. Only a session that could be
    -- restoring counter_ext's catalogs counts (a superuser's or the
    -- extension owner's): any role may call itself pg_restore, and must not
    -- keep restored jobs of others from running by doing so.
    IF EXISTS (SELECT FROM pg_catalog.pg_stat_activity a
               JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.usesysid
               WHERE a.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
                 AND a.application_name OPERATOR(pg_catalog.=) 'pg_restore'
                 AND a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
                 AND (r.rolsuper OR r.oid OPERATOR(pg_catalog.=) (SELECT e.extowner FROM pg_catalog.pg_extension e
                                                                  WHERE e.extname OPERATOR(pg_catalog.=) 'counter_ext'))) THEN
        RETURN 'pg_restore is connected to this database (a restored job waits for the restore to end)';
    END IF;
    INSERT INTO counter_internal.job_armed AS a (job_id) VALUES (j.job_id) ON CONFLICT (job_id) DO NOTHING;
    IF j.kind OPERATOR(pg_catalog.=) 'reconcile' THEN
        UPDATE counter.tracked c SET full_pending = true, verify_after = NULL
        WHERE c.name OPERATOR(pg_catalog.=) j.target;
    END IF;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION counter_internal.job_hold(bigint) FROM PUBLIC;

-- Rows added to counter.jobs by anything but counter.job_register (a restore
-- loading them with COPY) are told to the launcher at commit, so a restored
-- job is tried, and held or run, when it falls due, not at the next survey.
CREATE OR REPLACE FUNCTION counter_internal.jobs_inserted()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM counter_internal.job_nudge(n.owner::oid, pg_catalog.min(n.next_run))
    FROM new_jobs n
    WHERE n.enabled AND n.owner IS NOT NULL
    GROUP BY n.owner;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION counter_internal.jobs_inserted() FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- The one commit loop of periodic work (doc/reference/worker.md, "How
-- periodic work runs"; the loop is src/spine.cpp). A kind is a row of
-- counter_internal.job_kinds naming its step function,
--   counter_internal.<feature>_run_step(target text, args jsonb, state jsonb) -> jsonb,
-- which checks its caller (the owner of what it serves; the loop notes the
-- caller as an entry point does) and does one bounded piece of work in the
-- caller's transaction:
--   state NULL          begin: check, lock, start the run (run_begin);
--   state               the next step;
--   state with 'stop'   end the run now as partial (the time is up);
--   state with 'error'  the last step failed (its work rolled back): record
--                       the error, whole, and end the run.
-- It returns the state for the next step, with 'finished' (the run ended:
-- run_end was called), 'rows' (rows_affected so far), and its progress:
-- 'phase', 'done', 'total'. The loop commits after every step, reports the
-- progress (counter.running_jobs, pg_stat_activity), stops before the
-- statement's timeout would cancel a step, and on an error has it recorded
-- and committed, then raises it again whole.

-- The loop: one transaction per step (src/spine.cpp, the one loop the job
-- runner uses too). The kind's step function comes from
-- counter_internal.job_kinds and is called through fmgr, for the caller;
-- result = the last state. A step that would likely not end before the
-- deadline is not started: the run ends as partial instead (twice the
-- longest step so far must fit). (No SET clause: a procedure with one may
-- not commit.)
CREATE OR REPLACE PROCEDURE counter.run_steps(kind text, target text, args jsonb DEFAULT '{}',
    INOUT result jsonb DEFAULT NULL)
LANGUAGE c
AS 'MODULE_PATHNAME', 'counter_run_steps';
-- The same loop in the caller's transaction, without commits (the function
-- forms of the work: counter.rollup_recompute); returns the last state. For
-- the implementations of entry points (EXECUTE revoked from PUBLIC).
CREATE OR REPLACE FUNCTION counter_internal.run_steps_here(kind text, target text, args jsonb)
RETURNS jsonb
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_run_steps_here';

COMMENT ON PROCEDURE counter.run_steps(text, text, jsonb, jsonb) IS
    'runs counter_ext''s periodic work of a kind on a target, one transaction per step (CALL it outside a transaction block)';
