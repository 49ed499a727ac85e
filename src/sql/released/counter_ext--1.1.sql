-- counter_ext 1.1: generated from src/sql/*.sql by make; edit those.
\echo Use "CREATE EXTENSION counter_ext" to load this file. \quit

-- ---- src/sql/00_core.sql
-- The schema itself is created by CREATE EXTENSION (schema = counter in the
-- control file). Objects are always schema-qualified; functions that run SQL
-- pin their search_path.

COMMENT ON SCHEMA counter IS 'counter_ext: counters that stay correct next to the rows they count';

-- Every role may reach the schema: the types (hll, pncounter) and tracked
-- counters on tables a role owns are for everyone. What may harm is revoked
-- from PUBLIC function by function, and functions check their caller.
GRANT USAGE ON SCHEMA counter TO PUBLIC;

-- The catalog row of a user column of a table, or undefined_column (42703):
-- the one check every feature makes of the columns it is given.
CREATE FUNCTION counter.column_of(rel regclass, col name)
RETURNS pg_catalog.pg_attribute
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    att pg_catalog.pg_attribute;
BEGIN
    SELECT * INTO att FROM pg_catalog.pg_attribute a
    WHERE a.attrelid OPERATOR(pg_catalog.=) rel AND a.attname OPERATOR(pg_catalog.=) col
      AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column "%" of % does not exist', col, rel USING ERRCODE = 'undefined_column';
    END IF;
    RETURN att;
END
$$;

CREATE FUNCTION counter.version()
RETURNS text
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_version';

COMMENT ON FUNCTION counter.version() IS 'version of the loaded counter_ext library';

CREATE FUNCTION counter.preloaded()
RETURNS boolean
LANGUAGE c STABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_preloaded';

COMMENT ON FUNCTION counter.preloaded() IS
    'true when shared_preload_libraries loaded counter_ext (needed by the background worker)';

-- ---- src/sql/05_jobs.sql
-- Periodic jobs: one row per piece of periodic work (reconcile a counter,
-- refresh a rollup's dirty hours, maintain a partitioned table). Features
-- register their job when a target is created and remove it when it is
-- dropped; the background worker and counter.run_jobs() run the due ones.
--
-- Each kind has one procedure that does the work for one target and may
-- COMMIT between bounded steps:
--   reconcile              CALL counter.job_reconcile(target, rows)
--   rollup_refresh         CALL counter.job_rollup_refresh(target, rows)
--   partition_maintenance  CALL counter.job_partition_maintenance(target, rows)
-- (target text, INOUT rows_affected bigint DEFAULT NULL)
--
-- The runner calls CALL counter.job_<kind>($1, NULL) for any kind, so a kind
-- is a name (lower-case letters, digits, '_') whose procedure exists when the
-- job is registered. A job procedure cannot carry SET clauses (PostgreSQL
-- forbids COMMIT in such procedures), so it schema-qualifies what it uses; it
-- runs under the job's statement and lock timeouts, and an ERROR it raises is
-- recorded in counter.job_runs and backs the job off (the other jobs go on).

CREATE TABLE counter.jobs (
    job_id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind          text NOT NULL CHECK (kind ~ '^[a-z][a-z0-9_]{0,58}$'),
    target        text NOT NULL,
    run_every     interval NOT NULL CHECK (run_every > interval '0'),
    enabled       boolean NOT NULL DEFAULT true,
    next_run      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    timeout       interval NOT NULL DEFAULT interval '5 minutes'
                  CHECK (timeout > interval '0' AND timeout <= interval '24 days'),
    lock_timeout  interval NOT NULL DEFAULT interval '2 seconds'
                  CHECK (lock_timeout > interval '0' AND lock_timeout <= interval '24 days'),
    failures      integer NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- the run in progress (counter.job_runs.run_id), NULL when idle
    running_run   bigint,
    UNIQUE (kind, target)
);
COMMENT ON TABLE counter.jobs IS 'periodic work of counter_ext, run by its background worker or counter.run_jobs()';
SELECT pg_catalog.pg_extension_config_dump('counter.jobs', '');

-- Every run of a job: who ran it, when, how it ended. Rows that ended are
-- deleted after counter_ext.history_retention; a row still 'running' whose
-- process is gone (crash, termination) is marked failed by the next runner.
CREATE TABLE counter.job_runs (
    run_id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id         bigint NOT NULL,
    kind           text NOT NULL,
    target         text NOT NULL,
    runner         text NOT NULL CHECK (runner IN ('worker', 'session')),
    pid            integer NOT NULL,
    backend_start  timestamptz NOT NULL,
    started_at     timestamptz NOT NULL,
    finished_at    timestamptz,
    outcome        text NOT NULL CHECK (outcome IN ('running', 'succeeded', 'failed')),
    rows_affected  bigint,
    sqlstate       text,
    message        text,
    CHECK ((outcome = 'running') = (finished_at IS NULL))
);
COMMENT ON TABLE counter.job_runs IS 'run history of counter_ext jobs, trimmed after counter_ext.history_retention';
CREATE INDEX job_runs_job_idx ON counter.job_runs (job_id, run_id);
CREATE INDEX job_runs_finished_idx ON counter.job_runs (finished_at);
CREATE INDEX job_runs_running_idx ON counter.job_runs (run_id) WHERE outcome = 'running';

-- One line per job with its latest run.
CREATE VIEW counter.job_status AS
SELECT j.job_id, j.kind, j.target, j.enabled, j.run_every, j.next_run, j.failures,
       j.running_run IS NOT NULL AS running,
       r.started_at AS last_started, r.finished_at AS last_finished, r.outcome AS last_outcome,
       r.rows_affected AS last_rows, r.sqlstate AS last_sqlstate, r.message AS last_message
FROM counter.jobs j
LEFT JOIN LATERAL (
    SELECT x.started_at, x.finished_at, x.outcome, x.rows_affected, x.sqlstate, x.message
    FROM counter.job_runs x
    WHERE x.job_id OPERATOR(pg_catalog.=) j.job_id
    ORDER BY x.run_id DESC
    LIMIT 1) r ON true;

-- Registers (or re-enables with a new interval) the job of a target.
CREATE FUNCTION counter.job_register(kind text, target text, run_every interval)
RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    id bigint;
BEGIN
    IF kind !~ '^[a-z][a-z0-9_]{0,58}$' THEN
        RAISE EXCEPTION 'invalid job kind "%"', kind
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A kind is lower-case letters, digits and "_", starting with a letter.';
    END IF;
    IF run_every <= interval '0' THEN
        RAISE EXCEPTION 'run_every must be a positive interval, not %', run_every
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.to_regprocedure(pg_catalog.format('counter.%I(text, bigint)', 'job_' || kind)) IS NULL THEN
        RAISE EXCEPTION 'job kind "%" has no procedure counter.job_%(text, bigint)', kind, kind
            USING ERRCODE = 'undefined_function';
    END IF;
    INSERT INTO counter.jobs AS j (kind, target, run_every)
    VALUES (job_register.kind, job_register.target, job_register.run_every)
    ON CONFLICT ON CONSTRAINT jobs_kind_target_key DO UPDATE
        SET run_every = EXCLUDED.run_every, enabled = true, failures = 0, next_run = pg_catalog.now()
    RETURNING j.job_id INTO id;
    RETURN id;
END
$$;

-- Removes the job of a target; true when there was one. Its history stays
-- until the retention trims it.
CREATE FUNCTION counter.job_unregister(kind text, target text)
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
REVOKE ALL ON FUNCTION counter.job_register(text, text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.job_unregister(text, text) FROM PUBLIC;

-- ---- src/sql/10_hll.sql
-- counter.hll: a HyperLogLog-family distinct-count sketch (doc/reference/hll.md,
-- storage format in doc/hll-storage.md). Sketches merge with a union that is
-- commutative, associative and idempotent; the same set of values gives the
-- same bytes however it was added, split and merged.

CREATE TYPE counter.hll;

CREATE FUNCTION counter.hll_in(cstring, oid, integer) RETURNS counter.hll
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_in';
CREATE FUNCTION counter.hll_out(counter.hll) RETURNS cstring
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_out';
CREATE FUNCTION counter.hll_recv(internal, oid, integer) RETURNS counter.hll
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_recv';
CREATE FUNCTION counter.hll_send(counter.hll) RETURNS bytea
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_send';
CREATE FUNCTION counter.hll_typmod_in(cstring[]) RETURNS integer
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_typmod_in';
CREATE FUNCTION counter.hll_typmod_out(integer) RETURNS cstring
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_typmod_out';

CREATE TYPE counter.hll (
    INPUT = counter.hll_in,
    OUTPUT = counter.hll_out,
    RECEIVE = counter.hll_recv,
    SEND = counter.hll_send,
    TYPMOD_IN = counter.hll_typmod_in,
    TYPMOD_OUT = counter.hll_typmod_out,
    INTERNALLENGTH = VARIABLE,
    STORAGE = extended
);
COMMENT ON TYPE counter.hll IS
    'HyperLogLog distinct-count sketch; typmod = precision (4..18), e.g. counter.hll(14)';

-- The typmod cast: a sketch of higher precision folds down to the column's.
CREATE FUNCTION counter.hll(counter.hll, integer, boolean) RETURNS counter.hll
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_enforce_typmod';
CREATE CAST (counter.hll AS counter.hll) WITH FUNCTION counter.hll(counter.hll, integer, boolean) AS IMPLICIT;

-- bytea holds the same bytes; the way in is validated, the way out is free.
CREATE FUNCTION counter.hll_from_bytea(bytea) RETURNS counter.hll
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_from_bytea';
CREATE CAST (bytea AS counter.hll) WITH FUNCTION counter.hll_from_bytea(bytea);
CREATE CAST (counter.hll AS bytea) WITHOUT FUNCTION;

-- ---- scalar functions

CREATE FUNCTION counter.hll_empty("precision" integer DEFAULT NULL) RETURNS counter.hll
LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_empty';
COMMENT ON FUNCTION counter.hll_empty(integer) IS
    'an empty sketch of the given precision (NULL: counter_ext.hll_default_precision)';

CREATE FUNCTION counter.hll_add(counter.hll, anyelement) RETURNS counter.hll
LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_add';
COMMENT ON FUNCTION counter.hll_add(counter.hll, anyelement) IS
    'the sketch with one value added (a NULL value leaves it unchanged)';

CREATE FUNCTION counter.hll_add_array(counter.hll, anyarray) RETURNS counter.hll
LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_add_array';
COMMENT ON FUNCTION counter.hll_add_array(counter.hll, anyarray) IS
    'the sketch with every non-NULL element of the array added (a NULL array leaves it unchanged)';

CREATE FUNCTION counter.hll_union(counter.hll, counter.hll) RETURNS counter.hll
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_union';
COMMENT ON FUNCTION counter.hll_union(counter.hll, counter.hll) IS
    'union of two sketches, at the lower precision of the non-empty ones';

CREATE OPERATOR counter.|| (
    LEFTARG = counter.hll, RIGHTARG = counter.hll, FUNCTION = counter.hll_union, COMMUTATOR = OPERATOR(counter.||)
);

CREATE FUNCTION counter.hll_cardinality(counter.hll) RETURNS double precision
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_cardinality';
COMMENT ON FUNCTION counter.hll_cardinality(counter.hll) IS 'estimated number of distinct values';

CREATE OPERATOR counter.# (RIGHTARG = counter.hll, FUNCTION = counter.hll_cardinality);

CREATE FUNCTION counter.hll_info(sketch counter.hll, OUT "precision" integer, OUT representation text,
                                 OUT bytes integer, OUT format_version integer, OUT entries bigint)
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_info';
COMMENT ON FUNCTION counter.hll_info(counter.hll) IS
    'precision, representation (empty, sparse, dense), serialized bytes, format version, entries or set registers';

CREATE FUNCTION counter.hll_hash(anyelement) RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_hash_value';
COMMENT ON FUNCTION counter.hll_hash(anyelement) IS
    'the pinned 64-bit hash (XXH3-64, seed 0) a sketch uses for a value, as a signed bigint';

-- ---- comparison: bytewise over the canonical form, so equal sets are equal

CREATE FUNCTION counter.hll_eq(counter.hll, counter.hll) RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'MODULE_PATHNAME', 'counter_hll_eq';
CREATE FUNCTION counter.hll_ne(counter.hll, counter.hll) RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'MODULE_PATHNAME', 'counter_hll_ne';
CREATE FUNCTION counter.hll_lt(counter.hll, counter.hll) RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'MODULE_PATHNAME', 'counter_hll_lt';
CREATE FUNCTION counter.hll_le(counter.hll, counter.hll) RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'MODULE_PATHNAME', 'counter_hll_le';
CREATE FUNCTION counter.hll_gt(counter.hll, counter.hll) RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'MODULE_PATHNAME', 'counter_hll_gt';
CREATE FUNCTION counter.hll_ge(counter.hll, counter.hll) RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'MODULE_PATHNAME', 'counter_hll_ge';
CREATE FUNCTION counter.hll_cmp(counter.hll, counter.hll) RETURNS integer
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'MODULE_PATHNAME', 'counter_hll_cmp';
CREATE FUNCTION counter.hll_hash_sketch(counter.hll) RETURNS integer
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'MODULE_PATHNAME', 'counter_hll_hash';
CREATE FUNCTION counter.hll_hash_sketch_extended(counter.hll, bigint) RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'MODULE_PATHNAME', 'counter_hll_hash_extended';

CREATE OPERATOR counter.= (
    LEFTARG = counter.hll, RIGHTARG = counter.hll, FUNCTION = counter.hll_eq,
    COMMUTATOR = OPERATOR(counter.=), NEGATOR = OPERATOR(counter.<>),
    RESTRICT = eqsel, JOIN = eqjoinsel, HASHES, MERGES
);
CREATE OPERATOR counter.<> (
    LEFTARG = counter.hll, RIGHTARG = counter.hll, FUNCTION = counter.hll_ne,
    COMMUTATOR = OPERATOR(counter.<>), NEGATOR = OPERATOR(counter.=),
    RESTRICT = neqsel, JOIN = neqjoinsel
);
CREATE OPERATOR counter.< (
    LEFTARG = counter.hll, RIGHTARG = counter.hll, FUNCTION = counter.hll_lt,
    COMMUTATOR = OPERATOR(counter.>), NEGATOR = OPERATOR(counter.>=),
    RESTRICT = scalarltsel, JOIN = scalarltjoinsel
);
CREATE OPERATOR counter.<= (
    LEFTARG = counter.hll, RIGHTARG = counter.hll, FUNCTION = counter.hll_le,
    COMMUTATOR = OPERATOR(counter.>=), NEGATOR = OPERATOR(counter.>),
    RESTRICT = scalarlesel, JOIN = scalarlejoinsel
);
CREATE OPERATOR counter.> (
    LEFTARG = counter.hll, RIGHTARG = counter.hll, FUNCTION = counter.hll_gt,
    COMMUTATOR = OPERATOR(counter.<), NEGATOR = OPERATOR(counter.<=),
    RESTRICT = scalargtsel, JOIN = scalargtjoinsel
);
CREATE OPERATOR counter.>= (
    LEFTARG = counter.hll, RIGHTARG = counter.hll, FUNCTION = counter.hll_ge,
    COMMUTATOR = OPERATOR(counter.<=), NEGATOR = OPERATOR(counter.<),
    RESTRICT = scalargesel, JOIN = scalargejoinsel
);

CREATE OPERATOR CLASS counter.hll_ops DEFAULT FOR TYPE counter.hll USING btree AS
    OPERATOR 1 counter.<, OPERATOR 2 counter.<=, OPERATOR 3 counter.=,
    OPERATOR 4 counter.>=, OPERATOR 5 counter.>,
    FUNCTION 1 counter.hll_cmp(counter.hll, counter.hll);
CREATE OPERATOR CLASS counter.hll_hash_ops DEFAULT FOR TYPE counter.hll USING hash AS
    OPERATOR 1 counter.=,
    FUNCTION 1 counter.hll_hash_sketch(counter.hll),
    FUNCTION 2 counter.hll_hash_sketch_extended(counter.hll, bigint);

-- ---- aggregates: internal state that starts sparse and small, palloc'd in
-- the aggregate context; combine/serialize/deserialize for parallel query.

CREATE FUNCTION counter.hll_add_trans(internal, anyelement) RETURNS internal
LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_add_trans';
CREATE FUNCTION counter.hll_add_trans(internal, anyelement, integer) RETURNS internal
LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_add_trans';
CREATE FUNCTION counter.hll_union_trans(internal, counter.hll) RETURNS internal
LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_union_trans';
CREATE FUNCTION counter.hll_combine(internal, internal) RETURNS internal
LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_combine';
CREATE FUNCTION counter.hll_serialize(internal) RETURNS bytea
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_serialize';
CREATE FUNCTION counter.hll_deserialize(bytea, internal) RETURNS internal
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_deserialize';
CREATE FUNCTION counter.hll_final(internal) RETURNS counter.hll
LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_final';
CREATE FUNCTION counter.hll_count_final(internal) RETURNS bigint
LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_count_final';

CREATE AGGREGATE counter.hll_add_agg(anyelement) (
    SFUNC = counter.hll_add_trans, STYPE = internal, SSPACE = 1024,
    FINALFUNC = counter.hll_final,
    COMBINEFUNC = counter.hll_combine, SERIALFUNC = counter.hll_serialize, DESERIALFUNC = counter.hll_deserialize,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE counter.hll_add_agg(anyelement) IS
    'sketch of the distinct non-NULL values (empty sketch over no rows), at the default precision';

CREATE AGGREGATE counter.hll_add_agg(anyelement, integer) (
    SFUNC = counter.hll_add_trans, STYPE = internal, SSPACE = 1024,
    FINALFUNC = counter.hll_final,
    COMBINEFUNC = counter.hll_combine, SERIALFUNC = counter.hll_serialize, DESERIALFUNC = counter.hll_deserialize,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE counter.hll_add_agg(anyelement, integer) IS
    'sketch of the distinct non-NULL values at the given precision (4..18)';

CREATE AGGREGATE counter.hll_union_agg(counter.hll) (
    SFUNC = counter.hll_union_trans, STYPE = internal, SSPACE = 1024,
    FINALFUNC = counter.hll_final,
    COMBINEFUNC = counter.hll_combine, SERIALFUNC = counter.hll_serialize, DESERIALFUNC = counter.hll_deserialize,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE counter.hll_union_agg(counter.hll) IS
    'union of the non-NULL sketches (empty sketch over no rows), at the lowest precision among the non-empty ones';

CREATE AGGREGATE counter.hll_count_distinct(anyelement) (
    SFUNC = counter.hll_add_trans, STYPE = internal, SSPACE = 1024,
    FINALFUNC = counter.hll_count_final,
    COMBINEFUNC = counter.hll_combine, SERIALFUNC = counter.hll_serialize, DESERIALFUNC = counter.hll_deserialize,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE counter.hll_count_distinct(anyelement) IS
    'estimated count of distinct non-NULL values, rounded (0 over no rows); one pass, no sketch kept';

-- ---- src/sql/20_pncounter.sql
-- counter.pncounter: the PN-counter CRDT (the Riak counter). Per node id, a
-- total of increments (P) and of decrements (N); merge takes the per-node
-- maximum, the value is sum(P) - sum(N). Primaries that exchange states in any
-- order, any number of times, converge. See doc/reference/pncounter.md.

CREATE TYPE counter.pncounter;

CREATE FUNCTION counter.pncounter_in(cstring)
RETURNS counter.pncounter
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_in';

CREATE FUNCTION counter.pncounter_out(counter.pncounter)
RETURNS cstring
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_out';

CREATE FUNCTION counter.pncounter_recv(internal)
RETURNS counter.pncounter
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_recv';

CREATE FUNCTION counter.pncounter_send(counter.pncounter)
RETURNS bytea
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_send';

CREATE TYPE counter.pncounter (
    INPUT = counter.pncounter_in,
    OUTPUT = counter.pncounter_out,
    RECEIVE = counter.pncounter_recv,
    SEND = counter.pncounter_send,
    INTERNALLENGTH = VARIABLE,
    STORAGE = extended
);
COMMENT ON TYPE counter.pncounter IS
    'PN-counter CRDT: per-node increment and decrement totals that merge across primaries; text form {"node":[P,N],...}';

-- Increments and decrements count for one node: the node argument, or this
-- server's counter_ext.node_id. The amount is positive; a NULL state is the
-- empty counter. STABLE: the default node is a setting.
CREATE FUNCTION counter.pncounter_increment(c counter.pncounter, amount bigint DEFAULT 1, node text DEFAULT NULL)
RETURNS counter.pncounter
LANGUAGE c STABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_increment';
COMMENT ON FUNCTION counter.pncounter_increment(counter.pncounter, bigint, text) IS
    'adds amount (> 0) to the increments of node (default counter_ext.node_id)';

CREATE FUNCTION counter.pncounter_decrement(c counter.pncounter, amount bigint DEFAULT 1, node text DEFAULT NULL)
RETURNS counter.pncounter
LANGUAGE c STABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_decrement';
COMMENT ON FUNCTION counter.pncounter_decrement(counter.pncounter, bigint, text) IS
    'adds amount (> 0) to the decrements of node (default counter_ext.node_id)';

CREATE FUNCTION counter.pncounter_value(c counter.pncounter)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_value';
COMMENT ON FUNCTION counter.pncounter_value(counter.pncounter) IS
    'sum of increments minus sum of decrements over all nodes';

CREATE CAST (counter.pncounter AS bigint) WITH FUNCTION counter.pncounter_value(counter.pncounter);

CREATE FUNCTION counter.pncounter_merge(a counter.pncounter, b counter.pncounter)
RETURNS counter.pncounter
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_merge';
COMMENT ON FUNCTION counter.pncounter_merge(counter.pncounter, counter.pncounter) IS
    'per-node maximum of two states: commutative, associative, idempotent';

CREATE OPERATOR counter.|| (
    LEFTARG = counter.pncounter,
    RIGHTARG = counter.pncounter,
    FUNCTION = counter.pncounter_merge,
    COMMUTATOR = OPERATOR(counter.||)
);

CREATE FUNCTION counter.pncounter_nodes(c counter.pncounter,
    OUT node text, OUT increments bigint, OUT decrements bigint)
RETURNS SETOF record
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE ROWS 4
AS 'MODULE_PATHNAME', 'counter_pncounter_nodes';
COMMENT ON FUNCTION counter.pncounter_nodes(counter.pncounter) IS
    'one row per node: its increment and decrement totals, in node id order';

-- Equality: states are canonical, so equal states have equal bytes.
CREATE FUNCTION counter.pncounter_eq(counter.pncounter, counter.pncounter)
RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF
AS 'MODULE_PATHNAME', 'counter_pncounter_eq';

CREATE FUNCTION counter.pncounter_ne(counter.pncounter, counter.pncounter)
RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF
AS 'MODULE_PATHNAME', 'counter_pncounter_ne';

CREATE FUNCTION counter.pncounter_hash(counter.pncounter)
RETURNS integer
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_hash';

CREATE FUNCTION counter.pncounter_hash_extended(counter.pncounter, bigint)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_hash_extended';

CREATE OPERATOR counter.= (
    LEFTARG = counter.pncounter,
    RIGHTARG = counter.pncounter,
    FUNCTION = counter.pncounter_eq,
    COMMUTATOR = OPERATOR(counter.=),
    NEGATOR = OPERATOR(counter.<>),
    RESTRICT = pg_catalog.eqsel,
    JOIN = pg_catalog.eqjoinsel,
    HASHES
);

CREATE OPERATOR counter.<> (
    LEFTARG = counter.pncounter,
    RIGHTARG = counter.pncounter,
    FUNCTION = counter.pncounter_ne,
    COMMUTATOR = OPERATOR(counter.<>),
    NEGATOR = OPERATOR(counter.=),
    RESTRICT = pg_catalog.neqsel,
    JOIN = pg_catalog.neqjoinsel
);

-- GROUP BY, DISTINCT, UNION and hash joins on states.
CREATE OPERATOR CLASS counter.pncounter_hash_ops
DEFAULT FOR TYPE counter.pncounter USING hash AS
    OPERATOR 1 counter.= (counter.pncounter, counter.pncounter),
    FUNCTION 1 counter.pncounter_hash(counter.pncounter),
    FUNCTION 2 counter.pncounter_hash_extended(counter.pncounter, bigint);

-- The merge aggregate. The state lives in the aggregate context; partial
-- states travel between parallel workers as the canonical bytes.
CREATE FUNCTION counter.pncounter_agg_trans(internal, counter.pncounter)
RETURNS internal
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_agg_trans';

CREATE FUNCTION counter.pncounter_agg_combine(internal, internal)
RETURNS internal
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_agg_combine';

CREATE FUNCTION counter.pncounter_agg_serialize(internal)
RETURNS bytea
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_agg_serialize';

CREATE FUNCTION counter.pncounter_agg_deserialize(bytea, internal)
RETURNS internal
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_agg_deserialize';

CREATE FUNCTION counter.pncounter_agg_final(internal)
RETURNS counter.pncounter
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_agg_final';

CREATE AGGREGATE counter.pncounter_merge_agg(counter.pncounter) (
    SFUNC = counter.pncounter_agg_trans,
    STYPE = internal,
    FINALFUNC = counter.pncounter_agg_final,
    COMBINEFUNC = counter.pncounter_agg_combine,
    SERIALFUNC = counter.pncounter_agg_serialize,
    DESERIALFUNC = counter.pncounter_agg_deserialize,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE counter.pncounter_merge_agg(counter.pncounter) IS
    'merge of all non-NULL states (NULL when there are none)';

-- ---- src/sql/30_tracked.sql
-- Tracked counters: a cache of count(*) over a source table's rows per key,
-- written as small deltas on the hot path and repaired from the rows by
-- reconciliation (doc/reference/tracked.md).
--
-- State of counter N (its id), created by counter.track, owned by the source
-- table's owner, with the key column's real type:
--   counter.tracked_N_base   (key PRIMARY KEY, base)          reconciliation's
--   counter.tracked_N_delta  (key, bucket, shard, delta)      the hot path's
-- value(key) = base + sum(delta). A delta is attributed to the event-time
-- bucket of the row it stands for. Reconciliation up to watermark W (a bucket
-- boundary) sets base to count(rows with time < W) and subtracts from each
-- delta row with bucket < W exactly the amount its snapshot saw, in the same
-- statement (one snapshot), so a concurrent write is never overwritten.
-- Functions generated per counter (same owner, SECURITY DEFINER, no PUBLIC
-- execute): tracked_N_trigger (TRUNCATE in trigger mode), tracked_N_batch (one
-- reconciliation batch), tracked_N_check (validates the filter).
-- The hot paths are C++ (src/tracked.cpp): counter.tracked_fold, the
-- statement trigger of trigger mode, and counter.add.
--
-- Advisory locks (transaction level): pg_try_advisory_xact_lock(1667563524,
-- counter_id); 1667563524 = x'63650004' ('c' 'e' 0 4) is the tracked-counter
-- class.

CREATE TABLE counter.tracked (
    counter_id          integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9_.-]{1,63}$'),
    source              regclass NOT NULL,
    key_column          name NOT NULL,
    key_type            regtype NOT NULL,
    time_column         name NOT NULL,
    filter              text,
    mode                text NOT NULL CHECK (mode IN ('trigger', 'application')),
    watermark_lag       interval NOT NULL CHECK (watermark_lag >= interval '0'),
    bucket_width        interval NOT NULL,
    shards              integer NOT NULL CHECK (shards BETWEEN 1 AND 1024),
    batch_size          integer NOT NULL CHECK (batch_size BETWEEN 1 AND 1000000),
    drift_log_threshold bigint NOT NULL CHECK (drift_log_threshold >= 0),
    alert_threshold     bigint NOT NULL CHECK (alert_threshold >= 0),
    reconcile_every     interval NOT NULL,
    full_pending        boolean NOT NULL DEFAULT true,
    last_watermark      timestamptz,
    owner               regrole NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE counter.tracked IS 'tracked counters: count(*) per key of a source table, cached and reconciled';
SELECT pg_catalog.pg_extension_config_dump('counter.tracked', '');

CREATE TABLE counter.tracked_runs (
    run_id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    counter_id      integer NOT NULL REFERENCES counter.tracked ON DELETE CASCADE,
    started_at      timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    finished_at     timestamptz,
    watermark       timestamptz NOT NULL,
    all_keys        boolean NOT NULL,
    keys_checked    bigint NOT NULL DEFAULT 0,
    keys_corrected  bigint NOT NULL DEFAULT 0,
    drift_positive  bigint NOT NULL DEFAULT 0,
    drift_negative  bigint NOT NULL DEFAULT 0,
    max_abs_drift   bigint NOT NULL DEFAULT 0,
    outcome         text NOT NULL DEFAULT 'running'
                    CHECK (outcome IN ('running', 'ok', 'skipped', 'partial', 'interrupted'))
);
CREATE INDEX ON counter.tracked_runs (counter_id, run_id);
COMMENT ON TABLE counter.tracked_runs IS 'one row per reconciliation run of a tracked counter, with its drift';

CREATE TABLE counter.tracked_key_drift (
    run_id  bigint NOT NULL REFERENCES counter.tracked_runs ON DELETE CASCADE,
    key     text NOT NULL,
    cached  bigint NOT NULL,
    truth   bigint NOT NULL,
    drift   bigint NOT NULL
);
CREATE INDEX ON counter.tracked_key_drift (run_id);
COMMENT ON TABLE counter.tracked_key_drift IS
    'keys whose drift exceeded the counter''s drift_log_threshold in a run (drift = cached - truth)';

CREATE FUNCTION counter.tracked_caller()
RETURNS regrole
LANGUAGE c STABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_tracked_caller';

CREATE FUNCTION counter.tracked_check_filter(filter text)
RETURNS void
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_tracked_check_filter';

CREATE FUNCTION counter.tracked_compile_filter(source regclass, filter text, as_role regrole)
RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'counter_tracked_compile_filter';
REVOKE ALL ON FUNCTION counter.tracked_compile_filter(regclass, text, regrole) FROM PUBLIC;

-- The hot path of trigger mode (src/tracked.cpp): folds a statement's
-- transition tables into one delta per (key, bucket) and writes them in
-- order. Only counter.track attaches it.
CREATE FUNCTION counter.tracked_fold()
RETURNS trigger
LANGUAGE c
AS 'MODULE_PATHNAME', 'counter_tracked_fold';
REVOKE ALL ON FUNCTION counter.tracked_fold() FROM PUBLIC;

-- The counter row, or an errcode'd error.
CREATE FUNCTION counter.tracked_get(counter_name text)
RETURNS counter.tracked
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t counter.tracked;
BEGIN
    IF counter_name IS NULL THEN
        RAISE EXCEPTION 'counter name must not be NULL' USING ERRCODE = '22004';
    END IF;
    SELECT * INTO t FROM counter.tracked c WHERE c.name OPERATOR(pg_catalog.=) counter_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'tracked counter "%" does not exist', counter_name
            USING ERRCODE = '42704', HINT = 'See counter.tracked for the registered counters.';
    END IF;
    RETURN t;
END
$$;

-- Raises unless the calling role may manage counter t (owner of the source
-- table, a member of that role, or a superuser).
CREATE FUNCTION counter.tracked_require_owner(t counter.tracked, action text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := counter.tracked_caller();
BEGIN
    IF NOT (pg_catalog.pg_has_role(caller, t.owner, 'USAGE')
            OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) caller)) THEN
        RAISE EXCEPTION 'permission denied to % tracked counter "%"', action, t.name
            USING ERRCODE = '42501', DETAIL = format('Only the owner of %s (or a superuser) may.', t.source);
    END IF;
END
$$;

-- A key argument converted to the counter's key type: the same type, or one
-- with an implicit cast to it. NULL keys are refused.
CREATE FUNCTION counter.tracked_key_check(t counter.tracked, given regtype, is_null boolean)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF is_null THEN
        RAISE EXCEPTION 'key of tracked counter "%" must not be NULL', t.name USING ERRCODE = '22004';
    END IF;
    IF given OPERATOR(pg_catalog.<>) t.key_type AND NOT EXISTS (
        SELECT FROM pg_catalog.pg_cast c
        WHERE c.castsource OPERATOR(pg_catalog.=) given AND c.casttarget OPERATOR(pg_catalog.=) t.key_type
          AND c.castcontext OPERATOR(pg_catalog.=) 'i') THEN
        RAISE EXCEPTION 'tracked counter "%" has keys of type %, not %', t.name, t.key_type, given
            USING ERRCODE = '42804', HINT = format('Cast the key: ...::%s', t.key_type);
    END IF;
END
$$;

-- Raises unless the calling role may read the source table of counter t.
CREATE FUNCTION counter.tracked_require_select(t counter.tracked)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT pg_catalog.has_table_privilege(counter.tracked_caller(), t.source, 'SELECT') THEN
        RAISE EXCEPTION 'permission denied to read tracked counter "%"', t.name
            USING ERRCODE = '42501', DETAIL = format('Reading needs SELECT on %s.', t.source);
    END IF;
END
$$;

CREATE FUNCTION counter.tracked_table(t counter.tracked, part text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT pg_catalog.format('counter.%I', pg_catalog.format('tracked_%s_%s', t.counter_id, part)) $$;

-- Registers a tracked counter. See doc/reference/tracked.md.
CREATE FUNCTION counter.track(
    name text,
    source regclass,
    key_column name,
    time_column name,
    filter text DEFAULT NULL,
    mode text DEFAULT 'trigger',
    watermark_lag interval DEFAULT interval '5 seconds',
    bucket_width interval DEFAULT interval '1 minute',
    shards integer DEFAULT 16,
    batch_size integer DEFAULT 1000,
    drift_log_threshold bigint DEFAULT 0,
    alert_threshold bigint DEFAULT 1000,
    reconcile_every interval DEFAULT interval '1 minute')
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
    caller regrole := counter.tracked_caller();
    rel record;
    kcol record;
    tcol record;
    t counter.tracked;
    id integer;
    base_t text;
    delta_t text;
    f text;
    fn_trigger text;
    fn_batch text;
    fn_check text;
    src text;
    kc text;
    tc text;
    kt text;
    body text;
    fold_args text;
BEGIN
    IF name IS NULL OR source IS NULL OR key_column IS NULL OR time_column IS NULL OR mode IS NULL
       OR watermark_lag IS NULL OR bucket_width IS NULL OR shards IS NULL OR batch_size IS NULL
       OR drift_log_threshold IS NULL OR alert_threshold IS NULL OR reconcile_every IS NULL THEN
        RAISE EXCEPTION 'counter.track: only filter may be NULL' USING ERRCODE = '22004';
    END IF;
    IF name !~ '^[A-Za-z0-9_.-]{1,63}$' THEN
        RAISE EXCEPTION 'invalid tracked counter name "%"', name
            USING ERRCODE = '22023', DETAIL = 'A name is 1 to 63 letters, digits, ''_'', ''-'' or ''.''.';
    END IF;
    IF mode NOT IN ('trigger', 'application') THEN
        RAISE EXCEPTION 'invalid mode "%"', mode
            USING ERRCODE = '22023', HINT = 'mode is ''trigger'' or ''application''.';
    END IF;
    IF shards < 1 OR shards > 1024 THEN
        RAISE EXCEPTION 'shards must be between 1 and 1024' USING ERRCODE = '22023';
    END IF;
    IF batch_size < 1 OR batch_size > 1000000 THEN
        RAISE EXCEPTION 'batch_size must be between 1 and 1000000' USING ERRCODE = '22023';
    END IF;
    IF watermark_lag < interval '0' THEN
        RAISE EXCEPTION 'watermark_lag must not be negative' USING ERRCODE = '22023';
    END IF;
    IF bucket_width <= interval '0' OR pg_catalog.date_part('month', bucket_width) <> 0
       OR pg_catalog.date_part('year', bucket_width) <> 0 OR bucket_width > interval '1 day' THEN
        RAISE EXCEPTION 'bucket_width must be positive, at most 1 day, without months'
            USING ERRCODE = '22023';
    END IF;
    IF reconcile_every <= interval '0' THEN
        RAISE EXCEPTION 'reconcile_every must be positive' USING ERRCODE = '22023';
    END IF;
    IF drift_log_threshold < 0 OR alert_threshold < 0 THEN
        RAISE EXCEPTION 'thresholds must not be negative' USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT FROM counter.tracked c WHERE c.name OPERATOR(pg_catalog.=) name) THEN
        RAISE EXCEPTION 'tracked counter "%" already exists', name USING ERRCODE = '42710';
    END IF;

    SELECT c.oid, c.relkind, c.relowner::regrole AS owner INTO rel
    FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) source;
    IF rel.relkind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION '% is not a table', source USING ERRCODE = '42809';
    END IF;
    IF NOT (pg_catalog.pg_has_role(caller, rel.owner, 'USAGE')
            OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) caller)) THEN
        RAISE EXCEPTION 'permission denied to track %', source
            USING ERRCODE = '42501', DETAIL = 'Only the owner of the source table (or a superuser) may.';
    END IF;

    SELECT c.attname, c.atttypid::regtype AS typ INTO kcol FROM counter.column_of(source, key_column) c;
    SELECT c.attname, c.atttypid::regtype AS typ INTO tcol FROM counter.column_of(source, time_column) c;
    IF tcol.typ OPERATOR(pg_catalog.<>) 'timestamptz'::regtype THEN
        RAISE EXCEPTION 'time column "%" of % has type %, not timestamp with time zone', time_column, source, tcol.typ
            USING ERRCODE = '42804', HINT = 'Event times are compared with the watermark as timestamptz.';
    END IF;
    IF filter IS NOT NULL THEN
        PERFORM counter.tracked_check_filter(filter);
    END IF;

    INSERT INTO counter.tracked AS c (name, source, key_column, key_type, time_column, filter, mode, watermark_lag,
        bucket_width, shards, batch_size, drift_log_threshold, alert_threshold, reconcile_every, owner)
    VALUES (name, source, key_column, kcol.typ, time_column, filter, mode, watermark_lag, bucket_width, shards,
        batch_size, drift_log_threshold, alert_threshold, reconcile_every, rel.owner)
    RETURNING * INTO t;
    id := t.counter_id;

    base_t := counter.tracked_table(t, 'base');
    delta_t := counter.tracked_table(t, 'delta');
    fn_trigger := format('counter.%I', format('tracked_%s_trigger', id));
    fn_batch := format('counter.%I', format('tracked_%s_batch', id));
    fn_check := format('counter.%I', format('tracked_%s_check', id));
    src := source::text;                       -- regclass output is quoted as needed
    kc := format('%I', key_column);
    tc := format('%I', time_column);
    kt := kcol.typ::text;                      -- regtype output is quoted as needed
    f := coalesce('(' || filter || E'\n)', 'true');

    EXECUTE format('CREATE TABLE %s (key %s PRIMARY KEY, base bigint NOT NULL)', base_t, kt);
    EXECUTE format('CREATE TABLE %s (key %s NOT NULL, bucket timestamptz NOT NULL, shard smallint NOT NULL,'
                   ' delta bigint NOT NULL, PRIMARY KEY (key, bucket, shard))', delta_t, kt);
    EXECUTE format('ALTER TABLE %s OWNER TO %I', base_t, rel.owner);
    EXECUTE format('ALTER TABLE %s OWNER TO %I', delta_t, rel.owner);
    EXECUTE format('REVOKE ALL ON %s, %s FROM PUBLIC', base_t, delta_t);

    -- Filter check: the query shape the trigger and reconciliation use, run
    -- as the source table's owner.
    body := format($b$
BEGIN
    PERFORM 1 FROM (SELECT * FROM %1$s LIMIT 0) AS ce_new
    WHERE ce_new.%2$s IS NOT NULL AND ce_new.%3$s IS NOT NULL AND %4$s;
END
$b$, src, kc, tc, f);
    EXECUTE format('CREATE FUNCTION %s() RETURNS void LANGUAGE plpgsql SECURITY DEFINER'
                   ' SET search_path = pg_catalog, pg_temp AS %L', fn_check, body);

    -- One reconciliation batch: the next batch_size keys after ce_after
    -- (dirty: with deltas before the watermark; all: also every key with a
    -- base or with source rows), compared and repaired in one statement.
    body := format($b$
#variable_conflict use_column
DECLARE
    ce_keys %5$s[];
    ce_after_key %5$s := ce_after::%5$s;
BEGIN
    IF NOT ce_all AND ce_after IS NULL THEN
        SELECT pg_catalog.array_agg(k) INTO ce_keys FROM (
            SELECT DISTINCT d.key AS k FROM %7$s d WHERE d.bucket < ce_w ORDER BY 1 LIMIT ce_limit) s;
    ELSIF NOT ce_all THEN
        SELECT pg_catalog.array_agg(k) INTO ce_keys FROM (
            SELECT DISTINCT d.key AS k FROM %7$s d WHERE d.key > ce_after_key AND d.bucket < ce_w
            ORDER BY 1 LIMIT ce_limit) s;
    ELSIF ce_after IS NULL THEN
        SELECT pg_catalog.array_agg(k) INTO ce_keys FROM (
            SELECT DISTINCT u.k FROM (
                (SELECT b.key AS k FROM %6$s b ORDER BY 1 LIMIT ce_limit)
                UNION ALL
                (SELECT DISTINCT d.key FROM %7$s d WHERE d.bucket < ce_w ORDER BY 1 LIMIT ce_limit)
                UNION ALL
                (SELECT DISTINCT ce_new.%2$s FROM %1$s AS ce_new
                 WHERE ce_new.%2$s IS NOT NULL AND ce_new.%3$s < ce_w AND %4$s ORDER BY 1 LIMIT ce_limit)
            ) u ORDER BY 1 LIMIT ce_limit) s;
    ELSE
        SELECT pg_catalog.array_agg(k) INTO ce_keys FROM (
            SELECT DISTINCT u.k FROM (
                (SELECT b.key AS k FROM %6$s b WHERE b.key > ce_after_key ORDER BY 1 LIMIT ce_limit)
                UNION ALL
                (SELECT DISTINCT d.key FROM %7$s d WHERE d.key > ce_after_key AND d.bucket < ce_w
                 ORDER BY 1 LIMIT ce_limit)
                UNION ALL
                (SELECT DISTINCT ce_new.%2$s FROM %1$s AS ce_new
                 WHERE ce_new.%2$s > ce_after_key AND ce_new.%3$s < ce_w AND %4$s ORDER BY 1 LIMIT ce_limit)
            ) u ORDER BY 1 LIMIT ce_limit) s;
    END IF;
    IF ce_keys IS NULL THEN
        RETURN;
    END IF;
    -- Lock the delta rows to fold in (key, bucket, shard) order, the order
    -- writers lock them in, so a reconciler and a writer never deadlock.
    PERFORM 1 FROM %7$s d WHERE d.key = ANY (ce_keys) AND d.bucket < ce_w
    ORDER BY d.key, d.bucket, d.shard FOR UPDATE;

    RETURN QUERY
    WITH seen AS MATERIALIZED (
        SELECT d.key, d.bucket, d.shard, d.delta FROM %7$s d
        WHERE d.key = ANY (ce_keys) AND d.bucket < ce_w
    ), truth AS MATERIALIZED (
        SELECT ce_new.%2$s AS key, pg_catalog.count(*) AS n FROM %1$s AS ce_new
        WHERE ce_new.%2$s = ANY (ce_keys) AND ce_new.%3$s < ce_w AND %4$s
        GROUP BY 1
    ), cmp AS MATERIALIZED (
        SELECT k.key, coalesce(b.base, 0) + coalesce(sd.s, 0) AS cached, coalesce(t.n, 0) AS truth
        FROM pg_catalog.unnest(ce_keys) AS k(key)
        LEFT JOIN %6$s b ON b.key = k.key
        LEFT JOIN (SELECT seen.key, pg_catalog.sum(seen.delta)::bigint AS s FROM seen GROUP BY 1) sd
               ON sd.key = k.key
        LEFT JOIN truth t ON t.key = k.key
    ), absorbed AS (
        UPDATE %7$s d SET delta = d.delta - seen.delta FROM seen
        WHERE d.key = seen.key AND d.bucket = seen.bucket AND d.shard = seen.shard
        RETURNING 1
    ), installed AS (
        INSERT INTO %6$s AS b (key, base) SELECT cmp.key, cmp.truth FROM cmp WHERE cmp.truth <> 0
        ON CONFLICT (key) DO UPDATE SET base = excluded.base
        RETURNING 1
    ), emptied AS (
        DELETE FROM %6$s b USING cmp WHERE b.key = cmp.key AND cmp.truth = 0
        RETURNING 1
    )
    SELECT cmp.key::text, cmp.cached, cmp.truth, pg_catalog.row_number() OVER (ORDER BY cmp.key)
    FROM cmp;

    DELETE FROM %7$s d WHERE d.key = ANY (ce_keys) AND d.bucket < ce_w AND d.delta = 0;
END
$b$, src, kc, tc, f, kt, base_t, delta_t);
    EXECUTE format('CREATE FUNCTION %s(ce_w timestamptz, ce_after text, ce_all boolean, ce_limit integer)'
                   ' RETURNS TABLE (key text, cached bigint, truth bigint, n bigint)'
                   ' LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS %L',
                   fn_batch, body);

    IF mode = 'trigger' THEN
        -- TRUNCATE: every row is gone, so is every count. The source table's
        -- lock keeps reconciliation of this counter out until we commit.
        body := format($b$
BEGIN
    DELETE FROM %1$s;
    DELETE FROM %2$s;
    RETURN NULL;
END
$b$, delta_t, base_t);
        EXECUTE format('CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER'
                       ' SET search_path = pg_catalog, pg_temp AS %L', fn_trigger, body);
    END IF;

    EXECUTE format('ALTER FUNCTION %s() OWNER TO %I', fn_check, rel.owner);
    EXECUTE format('REVOKE ALL ON FUNCTION %s() FROM PUBLIC', fn_check);
    EXECUTE format('ALTER FUNCTION %s(timestamptz, text, boolean, integer) OWNER TO %I', fn_batch, rel.owner);
    EXECUTE format('REVOKE ALL ON FUNCTION %s(timestamptz, text, boolean, integer) FROM PUBLIC', fn_batch);
    IF mode = 'trigger' THEN
        EXECUTE format('ALTER FUNCTION %s() OWNER TO %I', fn_trigger, rel.owner);
        EXECUTE format('REVOKE ALL ON FUNCTION %s() FROM PUBLIC', fn_trigger);
    END IF;

    -- Errors in the filter (missing column, not boolean, a subquery...)
    -- surface here, with their own SQLSTATE, and roll back everything above.
    EXECUTE format('SELECT %s()', fn_check);
    IF filter IS NOT NULL THEN
        PERFORM counter.tracked_compile_filter(source, filter, rel.owner);
    END IF;

    IF mode = 'trigger' THEN
        -- counter.tracked_fold's arguments: see src/tracked.cpp.
        fold_args := format('%L, %L, %L, %L, %L, %L, %L', id, delta_t, rel.owner::oid, key_column, time_column,
                            (pg_catalog.date_part('epoch', bucket_width) * 1000000)::bigint, shards)
                     || coalesce(', ' || pg_catalog.quote_literal(filter), '');
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON %s REFERENCING NEW TABLE AS ce_new'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION counter.tracked_fold(%s)',
                       format('counter_%s_ins', id), src, fold_args);
        EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON %s REFERENCING OLD TABLE AS ce_old'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION counter.tracked_fold(%s)',
                       format('counter_%s_del', id), src, fold_args);
        EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON %s REFERENCING OLD TABLE AS ce_old NEW TABLE AS ce_new'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION counter.tracked_fold(%s)',
                       format('counter_%s_upd', id), src, fold_args);
        EXECUTE format('CREATE TRIGGER %I AFTER TRUNCATE ON %s'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION %s()', format('counter_%s_trunc', id), src, fn_trigger);
    END IF;

    PERFORM counter.job_register('reconcile', name, reconcile_every);
    RETURN id;
END
$fn$;
COMMENT ON FUNCTION counter.track(text, regclass, name, name, text, text, interval, interval, integer, integer,
    bigint, bigint, interval) IS 'registers a tracked counter of count(*) per key of a source table';

-- Removes a tracked counter and every object track created for it.
CREATE FUNCTION counter.untrack(name text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
    t counter.tracked := counter.tracked_get(name);
    src regclass;
    trg text;
BEGIN
    PERFORM counter.tracked_require_owner(t, 'untrack');
    PERFORM 1 FROM counter.tracked c WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id FOR UPDATE;
    src := pg_catalog.to_regclass(t.source::oid::regclass::text);
    IF t.mode = 'trigger' AND src IS NOT NULL THEN
        FOREACH trg IN ARRAY ARRAY['ins', 'del', 'upd', 'trunc'] LOOP
            EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', format('counter_%s_%s', t.counter_id, trg), src);
        END LOOP;
    END IF;
    EXECUTE format('DROP FUNCTION IF EXISTS counter.%I()', format('tracked_%s_trigger', t.counter_id));
    EXECUTE format('DROP FUNCTION IF EXISTS counter.%I()', format('tracked_%s_check', t.counter_id));
    EXECUTE format('DROP FUNCTION IF EXISTS counter.%I(timestamptz, text, boolean, integer)',
                   format('tracked_%s_batch', t.counter_id));
    EXECUTE format('DROP TABLE IF EXISTS %s, %s', counter.tracked_table(t, 'base'), counter.tracked_table(t, 'delta'));
    DELETE FROM counter.tracked c WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id;
    PERFORM counter.job_unregister('reconcile', name);
END
$fn$;
COMMENT ON FUNCTION counter.untrack(text) IS 'removes a tracked counter, its state, triggers, history and job';

-- Application mode: adds delta to key, attributed to event time 'at'
-- (src/tracked.cpp: the counter is looked up and its delta written with
-- plans kept per backend; INSERT on the source is checked for the caller).
CREATE FUNCTION counter.add(name text, key anyelement, delta bigint DEFAULT 1,
                            at timestamptz DEFAULT pg_catalog.now())
RETURNS void
LANGUAGE c VOLATILE SECURITY DEFINER
AS 'MODULE_PATHNAME', 'counter_tracked_add';
COMMENT ON FUNCTION counter.add(text, anyelement, bigint, timestamptz) IS
    'application mode: adds delta (default 1) to a key of a tracked counter at event time "at"';

-- Value of one key: base + every delta; 0 for a key never seen.
CREATE FUNCTION counter.value(name text, key anyelement)
RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
    t counter.tracked := counter.tracked_get(name);
    v bigint;
BEGIN
    PERFORM counter.tracked_key_check(t, pg_catalog.pg_typeof(key), key IS NULL);
    PERFORM counter.tracked_require_select(t);
    EXECUTE format('SELECT coalesce((SELECT b.base FROM %s b WHERE b.key = $1::%s), 0)'
                   ' + coalesce((SELECT pg_catalog.sum(d.delta) FROM %s d WHERE d.key = $1::%s), 0)',
                   counter.tracked_table(t, 'base'), t.key_type, counter.tracked_table(t, 'delta'), t.key_type)
    INTO v USING key;
    RETURN v;
END
$fn$;
COMMENT ON FUNCTION counter.value(text, anyelement) IS 'value of one key of a tracked counter (0 when never seen)';

-- Values of many keys, one row per distinct key given.
CREATE FUNCTION counter.values_of(name text, keys anyarray)
RETURNS TABLE (key anyelement, value bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
    t counter.tracked := counter.tracked_get(name);
    elem regtype;
BEGIN
    IF keys IS NULL THEN
        RAISE EXCEPTION 'keys must not be NULL' USING ERRCODE = '22004';
    END IF;
    elem := (SELECT ty.typelem::regtype FROM pg_catalog.pg_type ty
             WHERE ty.oid OPERATOR(pg_catalog.=) pg_catalog.pg_typeof(keys));
    PERFORM counter.tracked_key_check(t, elem, pg_catalog.array_position(keys, NULL) IS NOT NULL);
    PERFORM counter.tracked_require_select(t);
    RETURN QUERY EXECUTE format(
        'SELECT k.k, coalesce(b.base, 0) + coalesce((SELECT pg_catalog.sum(d.delta) FROM %s d'
        '  WHERE d.key = k.k::%s), 0)::bigint'
        ' FROM (SELECT DISTINCT u.k FROM pg_catalog.unnest($1) AS u(k)) k'
        ' LEFT JOIN %s b ON b.key = k.k::%s ORDER BY 1',
        counter.tracked_table(t, 'delta'), t.key_type, counter.tracked_table(t, 'base'), t.key_type)
    USING keys;
END
$fn$;
COMMENT ON FUNCTION counter.values_of(text, anyarray) IS 'values of many keys of a tracked counter';

-- Every key with state of every tracked counter the caller may read.
CREATE FUNCTION counter.tracked_all_values()
RETURNS TABLE (counter text, key text, value bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    t counter.tracked;
    caller regrole := counter.tracked_caller();
BEGIN
    FOR t IN SELECT * FROM counter.tracked c ORDER BY c.name LOOP
        CONTINUE WHEN NOT pg_catalog.has_table_privilege(caller, t.source, 'SELECT');
        RETURN QUERY EXECUTE format(
            'SELECT %L::text, k.key::text, (coalesce(b.base, 0) + coalesce(d.s, 0))::bigint'
            ' FROM (SELECT key FROM %s UNION SELECT key FROM %s) k'
            ' LEFT JOIN %s b ON b.key = k.key'
            ' LEFT JOIN (SELECT key, pg_catalog.sum(delta) AS s FROM %s GROUP BY key) d ON d.key = k.key'
            ' ORDER BY k.key',
            t.name, counter.tracked_table(t, 'base'), counter.tracked_table(t, 'delta'),
            counter.tracked_table(t, 'base'), counter.tracked_table(t, 'delta'));
    END LOOP;
END
$fn$;

CREATE VIEW counter.tracked_values AS SELECT * FROM counter.tracked_all_values();
COMMENT ON VIEW counter.tracked_values IS 'every key with state of every tracked counter the caller may read';

-- The watermark a run uses: the given one (or now - lag), down to a bucket
-- boundary.
CREATE FUNCTION counter.tracked_watermark(t counter.tracked, w timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.date_bin(t.bucket_width, coalesce(w, pg_catalog.now() OPERATOR(pg_catalog.-) t.watermark_lag),
                               '2000-01-01 00:00:00+00'::timestamptz)
$$;

-- One batch of a run, inside the caller's transaction: takes the counter's
-- advisory lock (false when another reconciler holds it), runs the counter's
-- batch function, records drifted keys; 'after' moves to the batch's last key.
CREATE FUNCTION counter.tracked_run_batch(t counter.tracked, run bigint, w timestamptz, all_keys boolean,
    INOUT after text, OUT locked boolean, OUT checked bigint, OUT corrected bigint, OUT pos bigint,
    OUT neg bigint, OUT max_abs bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    locked := pg_catalog.pg_try_advisory_xact_lock(1667563524, t.counter_id);
    IF NOT locked THEN
        RETURN;
    END IF;
    <<retry>>
    FOR attempt IN 1..3 LOOP
    BEGIN
    EXECUTE format(
        'WITH r AS MATERIALIZED (SELECT * FROM counter.%I($1, $2, $3, $4)),'
        ' logged AS (INSERT INTO counter.tracked_key_drift (run_id, key, cached, truth, drift)'
        '   SELECT $5, r.key, r.cached, r.truth, r.cached - r.truth FROM r'
        '   WHERE r.cached <> r.truth AND abs(r.cached - r.truth) > $6)'
        ' SELECT count(*), count(*) FILTER (WHERE r.cached <> r.truth),'
        '   coalesce(sum(r.cached - r.truth) FILTER (WHERE r.cached > r.truth), 0),'
        '   coalesce(sum(r.cached - r.truth) FILTER (WHERE r.cached < r.truth), 0),'
        '   coalesce(max(abs(r.cached - r.truth)), 0),'
        '   (SELECT r2.key FROM r r2 ORDER BY r2.n DESC LIMIT 1)'
        ' FROM r', format('tracked_%s_batch', t.counter_id))
    INTO checked, corrected, pos, neg, max_abs, after
    USING w, after, all_keys, t.batch_size, run, t.drift_log_threshold;
    EXIT retry;
    EXCEPTION WHEN deadlock_detected THEN
        -- a writer's transaction locked delta rows out of order; try again
        IF attempt = 3 THEN
            RAISE;
        END IF;
    END;
    END LOOP;
END
$fn$;

-- Closes a run: totals, outcome, and the alert (WARNING + NOTIFY on channel
-- counter_ext_drift) when total |drift| exceeds the counter's threshold.
CREATE FUNCTION counter.tracked_finish_run(t counter.tracked, run bigint, run_outcome text)
RETURNS counter.tracked_runs
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    r counter.tracked_runs;
BEGIN
    UPDATE counter.tracked_runs x SET finished_at = pg_catalog.clock_timestamp(), outcome = run_outcome
    WHERE x.run_id OPERATOR(pg_catalog.=) run RETURNING * INTO r;
    IF r.drift_positive - r.drift_negative > t.alert_threshold THEN
        RAISE WARNING 'tracked counter "%" drifted by % (+%, %) over % keys', t.name,
            r.drift_positive - r.drift_negative, r.drift_positive, r.drift_negative, r.keys_corrected
            USING DETAIL = format('Run %s up to %s; see counter.tracked_history.', r.run_id, r.watermark);
        PERFORM pg_catalog.pg_notify('counter_ext_drift', pg_catalog.json_build_object(
            'counter', t.name, 'run_id', r.run_id, 'watermark', r.watermark,
            'keys_checked', r.keys_checked, 'keys_corrected', r.keys_corrected,
            'drift_positive', r.drift_positive, 'drift_negative', r.drift_negative,
            'max_abs_drift', r.max_abs_drift, 'alert_threshold', t.alert_threshold)::text);
    END IF;
    RETURN r;
END
$fn$;

-- Starts a run. Watermarks never go back: a base holds the truth before the
-- watermark its key was last reconciled at, and the deltas before it are
-- gone, so a run uses the greatest watermark ever used for the counter.
CREATE FUNCTION counter.tracked_start_run(t counter.tracked, w timestamptz, all_keys boolean,
    OUT run bigint, OUT run_watermark timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    UPDATE counter.tracked c SET last_watermark = GREATEST(c.last_watermark, w)
    WHERE c.counter_id = t.counter_id
    RETURNING c.last_watermark INTO run_watermark;
    UPDATE counter.tracked_runs x SET outcome = 'interrupted'
    WHERE x.counter_id = t.counter_id AND x.outcome = 'running';
    INSERT INTO counter.tracked_runs AS x (counter_id, watermark, all_keys)
    VALUES (t.counter_id, run_watermark, all_keys)
    RETURNING x.run_id INTO run;
END
$fn$;

CREATE FUNCTION counter.tracked_add_batch(run bigint, checked bigint, corrected bigint, pos bigint, neg bigint,
    max_abs bigint)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE counter.tracked_runs x SET keys_checked = x.keys_checked OPERATOR(pg_catalog.+) checked,
        keys_corrected = x.keys_corrected OPERATOR(pg_catalog.+) corrected,
        drift_positive = x.drift_positive OPERATOR(pg_catalog.+) pos,
        drift_negative = x.drift_negative OPERATOR(pg_catalog.+) neg,
        max_abs_drift = GREATEST(x.max_abs_drift, max_abs)
    WHERE x.run_id OPERATOR(pg_catalog.=) run
$$;

-- Reconciles a tracked counter up to watermark W (default now() - lag, down
-- to a bucket boundary), in the caller's transaction: dirty keys, or every
-- key when all_keys (or after registration, until one full run finished).
CREATE TYPE counter.reconcile_result AS (
    counter text, run_id bigint, watermark timestamptz, all_keys boolean, keys_checked bigint,
    keys_corrected bigint, drift_positive bigint, drift_negative bigint, max_abs_drift bigint,
    duration interval, outcome text);

CREATE FUNCTION counter.reconcile(name text, watermark timestamptz DEFAULT NULL, all_keys boolean DEFAULT false)
RETURNS counter.reconcile_result
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
    t counter.tracked := counter.tracked_get(name);
    w timestamptz;
    every_key boolean;
    run bigint;
    after text;
    b record;
    r counter.tracked_runs;
BEGIN
    PERFORM counter.tracked_require_owner(t, 'reconcile');
    IF all_keys IS NULL THEN
        RAISE EXCEPTION 'all_keys must not be NULL' USING ERRCODE = '22004';
    END IF;
    w := counter.tracked_watermark(t, watermark);
    every_key := all_keys OR t.full_pending;
    IF NOT pg_catalog.pg_try_advisory_xact_lock(1667563524, t.counter_id) THEN
        RAISE NOTICE 'tracked counter "%" is being reconciled by another session; skipped', t.name;
        RETURN ROW(t.name, NULL::bigint, w, every_key, 0::bigint, 0::bigint, 0::bigint, 0::bigint,
            0::bigint, interval '0', 'skipped'::text)::counter.reconcile_result;
    END IF;
    SELECT s.run, s.run_watermark INTO run, w FROM counter.tracked_start_run(t, w, every_key) s;
    LOOP
        b := counter.tracked_run_batch(t, run, w, every_key, after);
        EXIT WHEN b.checked IS NULL OR b.checked = 0;
        PERFORM counter.tracked_add_batch(run, b.checked, b.corrected, b.pos, b.neg, b.max_abs);
        after := b.after;
    END LOOP;
    IF every_key AND t.full_pending THEN
        UPDATE counter.tracked c SET full_pending = false WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id;
    END IF;
    r := counter.tracked_finish_run(t, run, 'ok');
    RETURN ROW(t.name, r.run_id, r.watermark, r.all_keys, r.keys_checked, r.keys_corrected,
        r.drift_positive, r.drift_negative, r.max_abs_drift, r.finished_at - r.started_at,
        r.outcome)::counter.reconcile_result;
END
$fn$;
COMMENT ON FUNCTION counter.reconcile(text, timestamptz, boolean) IS
    'reconciles a tracked counter from its source rows up to a watermark; one summary row';

-- The job the background worker (or pg_cron) runs: reconcile the named
-- counter with the default watermark, dirty keys (every key while a full run
-- is pending), one transaction per batch. rows_affected = keys corrected.
-- A procedure that COMMITs may have neither SECURITY DEFINER nor SET, so it
-- only loops (operators schema-qualified); the steps are functions.
CREATE FUNCTION counter.tracked_job_begin(target text, OUT run bigint, OUT w timestamptz, OUT every_key boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    t counter.tracked := counter.tracked_get(target);
BEGIN
    PERFORM counter.tracked_require_owner(t, 'reconcile');
    w := pg_catalog.date_bin(t.bucket_width, pg_catalog.clock_timestamp() - t.watermark_lag,
                             '2000-01-01 00:00:00+00'::timestamptz);
    every_key := t.full_pending;
    IF NOT pg_catalog.pg_try_advisory_xact_lock(1667563524, t.counter_id) THEN
        RAISE NOTICE 'tracked counter "%" is being reconciled by another session; skipped', t.name;
        RETURN;
    END IF;
    SELECT s.run, s.run_watermark INTO run, w FROM counter.tracked_start_run(t, w, every_key) s;
END
$fn$;

CREATE FUNCTION counter.tracked_job_step(target text, run bigint, w timestamptz, every_key boolean,
    INOUT after text, OUT locked boolean, OUT checked bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    t counter.tracked := counter.tracked_get(target);
    b record;
BEGIN
    PERFORM counter.tracked_require_owner(t, 'reconcile');
    b := counter.tracked_run_batch(t, run, w, every_key, after);
    locked := b.locked;
    checked := coalesce(b.checked, 0);
    IF checked > 0 THEN
        PERFORM counter.tracked_add_batch(run, b.checked, b.corrected, b.pos, b.neg, b.max_abs);
        after := b.after;
    END IF;
END
$fn$;

CREATE FUNCTION counter.tracked_job_end(target text, run bigint, run_outcome text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    t counter.tracked := counter.tracked_get(target);
    r counter.tracked_runs;
BEGIN
    PERFORM counter.tracked_require_owner(t, 'reconcile');
    IF run_outcome = 'ok' AND (SELECT x.all_keys FROM counter.tracked_runs x WHERE x.run_id = run) THEN
        UPDATE counter.tracked c SET full_pending = false WHERE c.counter_id = t.counter_id;
    END IF;
    r := counter.tracked_finish_run(t, run, run_outcome);
    RETURN r.keys_corrected;
END
$fn$;

CREATE PROCEDURE counter.job_reconcile(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql
AS $fn$
DECLARE
    s record;
    b record;
    after text;
    run_outcome text := 'ok';
BEGIN
    s := counter.tracked_job_begin(target);
    IF s.run IS NULL THEN
        rows_affected := 0;
        RETURN;
    END IF;
    COMMIT;
    LOOP
        b := counter.tracked_job_step(target, s.run, s.w, s.every_key, after);
        IF NOT b.locked THEN
            run_outcome := 'partial';
            EXIT;
        END IF;
        EXIT WHEN b.checked OPERATOR(pg_catalog.=) 0;
        after := b.after;
        COMMIT;
    END LOOP;
    rows_affected := counter.tracked_job_end(target, s.run, run_outcome);
    COMMIT;
END
$fn$;
COMMENT ON PROCEDURE counter.job_reconcile(text, bigint) IS
    'reconciliation job of a tracked counter (one transaction per batch); rows_affected = keys corrected';

CREATE VIEW counter.tracked_history AS
SELECT c.name AS counter, r.run_id, r.started_at, r.finished_at - r.started_at AS duration, r.watermark,
       r.all_keys, r.keys_checked, r.keys_corrected, r.drift_positive, r.drift_negative, r.max_abs_drift,
       r.outcome
FROM counter.tracked_runs r JOIN counter.tracked c USING (counter_id)
WHERE pg_catalog.pg_has_role(c.owner, 'USAGE');
COMMENT ON VIEW counter.tracked_history IS 'reconciliation runs of every tracked counter, with their drift';

CREATE VIEW counter.tracked_drift AS
SELECT c.name AS counter, count(r.run_id) AS runs, max(r.started_at) AS last_run,
       coalesce(sum(r.keys_corrected), 0) AS keys_corrected, coalesce(sum(r.drift_positive), 0) AS drift_positive,
       coalesce(sum(r.drift_negative), 0) AS drift_negative, coalesce(max(r.max_abs_drift), 0) AS max_abs_drift,
       (SELECT x.drift_positive - x.drift_negative FROM counter.tracked_runs x
        WHERE x.counter_id = c.counter_id AND x.outcome <> 'running' ORDER BY x.run_id DESC LIMIT 1) AS last_abs_drift
FROM counter.tracked c LEFT JOIN counter.tracked_runs r ON r.counter_id = c.counter_id AND r.outcome <> 'running'
WHERE pg_catalog.pg_has_role(c.owner, 'USAGE')
GROUP BY c.counter_id, c.name;
COMMENT ON VIEW counter.tracked_drift IS 'per tracked counter: runs and total drift found';

CREATE VIEW counter.tracked_key_drift_history AS
SELECT c.name AS counter, r.run_id, r.started_at, k.key, k.cached, k.truth, k.drift
FROM counter.tracked_key_drift k JOIN counter.tracked_runs r USING (run_id) JOIN counter.tracked c USING (counter_id)
WHERE pg_catalog.pg_has_role(c.owner, 'USAGE');
COMMENT ON VIEW counter.tracked_key_drift_history IS 'keys that drifted past their counter''s drift_log_threshold';

-- The views show the counters of the roles the reader belongs to.
GRANT SELECT ON counter.tracked_values, counter.tracked_history, counter.tracked_drift,
    counter.tracked_key_drift_history TO PUBLIC;
REVOKE ALL ON FUNCTION counter.tracked_run_batch(counter.tracked, bigint, timestamptz, boolean, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.tracked_finish_run(counter.tracked, bigint, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.tracked_start_run(counter.tracked, timestamptz, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.tracked_add_batch(bigint, bigint, bigint, bigint, bigint, bigint) FROM PUBLIC;

-- ---- src/sql/40_partition.sql
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
    last_moved           bigint
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

-- Attaches a table made by partition_make_table as the partition [lo, hi).
CREATE FUNCTION counter.partition_attach(parent regclass, t regclass, lo timestamptz, hi timestamptz, bounded boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
AS $$
BEGIN
    EXECUTE format('ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%L) TO (%L)', parent, t, lo, hi);
    IF bounded THEN
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT counter_ext_bounds', t);
    END IF;
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
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
AS $$
DECLARE
    d regclass := counter.partition_default(parent);
    ctl name := (SELECT c.control FROM counter.partitioned_tables c WHERE c.parent OPERATOR(pg_catalog.=) partition_move_rows.parent);
    cols text := counter.partition_column_list(parent);
    old_role text := current_setting('session_replication_role');
    n bigint;
BEGIN
    IF (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) current_user) THEN
        PERFORM set_config('session_replication_role', 'replica', true);
    ELSIF EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid OPERATOR(pg_catalog.=) d AND NOT g.tgisinternal)
       OR EXISTS (SELECT 1 FROM pg_constraint k WHERE k.contype OPERATOR(pg_catalog.=) 'f'
                  AND k.confrelid IN (parent, d)) THEN
        RAISE EXCEPTION 'moving rows out of the default partition of % needs a superuser', parent
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'The table has triggers or is referenced by foreign keys, which must not fire for a move.';
    END IF;
    EXECUTE format('WITH moved AS (DELETE FROM ONLY %1$s WHERE ctid = ANY (ARRAY(SELECT ctid FROM ONLY %1$s '
                   'WHERE %2$I >= %3$L AND %2$I < %4$L %5$s)) RETURNING %6$s) '
                   'INSERT INTO %7$s (%6$s) OVERRIDING SYSTEM VALUE SELECT %6$s FROM moved',
                   d, ctl, lo, hi, CASE WHEN max_rows IS NULL THEN '' ELSE format('LIMIT %s', max_rows) END, cols, t);
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM set_config('session_replication_role', old_role, true);
    RETURN n;
END
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

    PERFORM counter.job_register('partition_maintenance', format('%I.%I', nsp, rel.relname),
                                 least(part_interval, interval '1 hour'));
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
    SELECT format('%I.%I', n.nspname, c.relname) INTO target
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = parent;
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
    FOR o IN SELECT d.objid, d.object_identity FROM pg_event_trigger_dropped_objects() d
             WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.object_type = 'table' LOOP
        IF EXISTS (SELECT 1 FROM counter.partitioned_tables c WHERE c.parent::oid = o.objid) THEN
            DELETE FROM counter.partitioned_tables c WHERE c.parent::oid = o.objid;
            PERFORM counter.job_unregister('partition_maintenance', o.object_identity);
        END IF;
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
REVOKE ALL ON FUNCTION counter.partition_step(regclass, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.partition_record(regclass, text, text, bigint, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.partition_maintain(regclass, timestamptz, integer) FROM PUBLIC;
REVOKE ALL ON PROCEDURE counter.partition_maintain_steps(regclass, bigint, bigint, bigint, text, text) FROM PUBLIC;
REVOKE ALL ON PROCEDURE counter.run_maintenance(regclass) FROM PUBLIC;
REVOKE ALL ON PROCEDURE counter.job_partition_maintenance(text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.partition_manage(regclass, name, interval, integer, interval, boolean, timestamptz, integer, interval, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.partition_unmanage(regclass) FROM PUBLIC;

-- ---- src/sql/50_rollup.sql
-- Hourly rollups: one row per group key per UTC hour, next to an event table,
-- exact under re-delivery (only rows a statement really inserted are added),
-- late commits (no high-water mark: hours are recomputed from raw events) and
-- rule changes (a recompute of any retained hour).
--
-- Catalog
--   counter.rollups        one row per rollup (configuration; dumped by pg_dump)
--   counter.rollup_dirty   append-only log of (rollup, hour) pairs to recompute
--   counter.rollup_status  outcome of each rollup's last refresh
--   counter.rollup_state   view: newest hours, pending dirty hours, last refresh
--
-- Advisory locks (transaction level, two-int key space):
--   (1380928579 = 'ROLC', counter.rollup_lock_key(rollup_id, UTC day number))
--       one refresh chunk (a UTC day) of one rollup; a routine refresh
--       (dirty hours, the job) tries and skips, a full recompute waits.
--   (1380928584 = 'ROLH', counter.rollup_lock_key(rollup_id, UTC hour number))
--       one hour of a trigger-mode rollup: writers take it shared (in hour
--       order) before adding to the rollup, a recompute takes it exclusive (in
--       hour order) before reading the events, so it never overwrites an
--       increment it could not see.

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
    filter         text,
    retention      interval CHECK (retention > interval '0'),
    refresh_every  interval NOT NULL CHECK (refresh_every > interval '0'),
    owner          regrole NOT NULL DEFAULT (current_user::regrole),
    created_at     timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- SQL generated from the columns above by counter.rollup_sql(), for the
    -- source and rollup table names in sql_for (a rename makes it stale)
    sql_for        text,
    add_sql        text,
    mark_new_sql   text,
    mark_old_sql   text,
    refresh_sql    text
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

CREATE TABLE counter.rollup_status (
    rollup_id       integer PRIMARY KEY,
    last_refresh_at timestamptz,
    last_outcome    text,
    last_duration   interval,
    last_rows       bigint,
    last_error      text
);
COMMENT ON TABLE counter.rollup_status IS 'outcome of the last refresh of each rollup';

-- Who may change a rollup: members of its owner role. Readers see everything
-- (writers' triggers read the catalog); the dirty log accepts any writer.
CREATE FUNCTION counter.rollup_owned(rollup_id integer)
RETURNS boolean
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT pg_catalog.pg_has_role(r.owner, 'USAGE')
                     FROM counter.rollups r WHERE r.rollup_id OPERATOR(pg_catalog.=) rollup_owned.rollup_id), false)
$$;

ALTER TABLE counter.rollups ENABLE ROW LEVEL SECURITY;
CREATE POLICY rollups_read ON counter.rollups FOR SELECT USING (true);
CREATE POLICY rollups_insert ON counter.rollups FOR INSERT
    WITH CHECK (pg_catalog.pg_has_role(owner, 'USAGE')
                AND pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                            WHERE c.oid OPERATOR(pg_catalog.=) source), 'USAGE'));
CREATE POLICY rollups_update ON counter.rollups FOR UPDATE
    USING (pg_catalog.pg_has_role(owner, 'USAGE')) WITH CHECK (pg_catalog.pg_has_role(owner, 'USAGE'));
CREATE POLICY rollups_delete ON counter.rollups FOR DELETE USING (pg_catalog.pg_has_role(owner, 'USAGE'));
GRANT SELECT, INSERT, UPDATE, DELETE ON counter.rollups TO PUBLIC;

ALTER TABLE counter.rollup_dirty ENABLE ROW LEVEL SECURITY;
CREATE POLICY rollup_dirty_insert ON counter.rollup_dirty FOR INSERT WITH CHECK (true);
CREATE POLICY rollup_dirty_owner ON counter.rollup_dirty FOR ALL USING (counter.rollup_owned(rollup_id));
GRANT SELECT, INSERT, DELETE ON counter.rollup_dirty TO PUBLIC;

ALTER TABLE counter.rollup_status ENABLE ROW LEVEL SECURITY;
CREATE POLICY rollup_status_read ON counter.rollup_status FOR SELECT USING (true);
CREATE POLICY rollup_status_owner ON counter.rollup_status FOR ALL
    USING (counter.rollup_owned(rollup_id)) WITH CHECK (counter.rollup_owned(rollup_id));
GRANT SELECT, INSERT, UPDATE, DELETE ON counter.rollup_status TO PUBLIC;

-- The second int of an advisory lock key: rollup id and a day or hour number
-- folded into 32 bits (collisions only make two chunks wait for each other).
CREATE FUNCTION counter.rollup_lock_key(rollup_id integer, n bigint)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT (((rollup_id::bigint OPERATOR(pg_catalog.*) 1048576
              OPERATOR(pg_catalog.+) (n OPERATOR(pg_catalog.%) 1048576))
             OPERATOR(pg_catalog.%) 4294967296) OPERATOR(pg_catalog.-) 2147483648)::integer
$$;

-- Hour and day numbers (since 1970-01-01 00:00 UTC) of an instant.
CREATE FUNCTION counter.rollup_hour_number(ts timestamptz)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT pg_catalog.floor(pg_catalog.date_part('epoch', ts) OPERATOR(pg_catalog./) 3600)::bigint $$;

CREATE FUNCTION counter.rollup_day_number(ts timestamptz)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT pg_catalog.floor(pg_catalog.date_part('epoch', ts) OPERATOR(pg_catalog./) 86400)::bigint $$;

-- The UTC hour an instant belongs to (date_bin needs no time zone).
CREATE FUNCTION counter.rollup_hour(ts timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT pg_catalog.date_bin('01:00:00'::pg_catalog.interval, ts, '2000-01-01 00:00:00+00'::pg_catalog.timestamptz) $$;

-- The schema of the = operator of a type (pg_catalog when none of its own).
CREATE FUNCTION counter.rollup_eq_schema(typ oid)
RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT n.nspname::text FROM pg_catalog.pg_operator o
                     JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) o.oprnamespace
                     WHERE o.oprname OPERATOR(pg_catalog.=) '=' AND o.oprleft OPERATOR(pg_catalog.=) typ
                       AND o.oprright OPERATOR(pg_catalog.=) typ
                     ORDER BY n.nspname OPERATOR(pg_catalog.<>) 'pg_catalog', n.nspname LIMIT 1), 'pg_catalog')
$$;

-- The SQL a rollup runs, generated from its catalog row with the current
-- names of its tables (regclass output under a pinned search_path is
-- always schema-qualified).
CREATE FUNCTION counter.rollup_sql(rid integer)
RETURNS counter.rollups
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
    hour_expr text;
    keys text := '';        -- "g1, g2, "
    ev_vals text;           -- 1, x, NULL::bigint, NULL::bigint (events branch)
    ro_vals text;           -- 0, NULL::int4, r.count, r.sum_x (rollup branch)
    agg_vals text;          -- sum(n)::bigint AS count, coalesce(sum(x), 0) AS sum_x, max(oc), ...
    agg_new text;           -- ROW of the fresh values
    agg_old text;           -- ROW of the old values
    keys_ddr text := '';    -- "d.g1 OPERATOR(..) r.g1 AND "
    st text;                -- type of a sum column
    vals text;              -- count(*) AS count, coalesce(sum(x), 0) AS sum_x
    cols text;              -- count, sum_x
    add_set text;
    fresh_set text;
    old_vals text;
    new_vals text;
    g name;
    t oid;
    where_filter text;
BEGIN
    SELECT * INTO STRICT r FROM counter.rollups WHERE rollup_id = rid;
    hour_expr := format('pg_catalog.date_bin(''01:00:00''::pg_catalog.interval, %I, '
                        '''2000-01-01 00:00:00+00''::pg_catalog.timestamptz)', r.time_column);
    FOREACH g IN ARRAY r.group_by LOOP
        SELECT a.atttypid INTO STRICT t FROM pg_attribute a WHERE a.attrelid = r.source AND a.attname = g;
        keys := keys || format('%I, ', g);
        keys_ddr := keys_ddr || format('d.%1$I OPERATOR(%2$I.=) r.%1$I AND ', g, counter.rollup_eq_schema(t));
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
        -- Sketches are canonical (equal sets give equal bytes): compare bytes.
        vals := vals || format(', counter.hll_add_agg(%1$I) AS %2$I', g, 'distinct_' || g);
        cols := cols || format(', %I', 'distinct_' || g);
        add_set := add_set || format(', %1$I = counter.hll_union(r.%1$I, EXCLUDED.%1$I)', 'distinct_' || g);
        fresh_set := fresh_set || format(', %1$I = EXCLUDED.%1$I', 'distinct_' || g);
        old_vals := old_vals || format(', r.%I::bytea', 'distinct_' || g);
        new_vals := new_vals || format(', EXCLUDED.%I::bytea', 'distinct_' || g);
        ev_vals := ev_vals || format(', %1$I AS %2$I, NULL::counter.hll AS %3$I', g, 'w$' || g, 'o$distinct_' || g);
        ro_vals := ro_vals || format(', NULL::%1$s, r.%2$I', (SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
                                     WHERE a.attrelid = r.source AND a.attname = g), 'distinct_' || g);
        agg_vals := agg_vals || format(', counter.hll_add_agg(%1$I) AS %2$I', 'w$' || g, 'distinct_' || g);
        agg_new := agg_new || format(', counter.hll_add_agg(%I)::bytea', 'w$' || g);
        agg_old := agg_old || format(', counter.hll_union_agg(%I)::bytea', 'o$distinct_' || g);
    END LOOP;
    where_filter := CASE WHEN r.filter IS NULL THEN 'true' ELSE format('(%s)', r.filter) END;

    -- Trigger mode, per statement: shared hour locks in hour order, then one
    -- upsert per (key, hour) in (key, hour) order.
    -- (One statement: the hour locks are an InitPlan, taken before the
    -- first row reaches the upsert.)
    r.add_sql := format($f$
        WITH l AS MATERIALIZED (
            SELECT pg_catalog.count(*) AS n
            FROM (SELECT pg_catalog.pg_advisory_xact_lock_shared(
                             1380928584, counter.rollup_lock_key($1, counter.rollup_hour_number(h)))
                  FROM (SELECT DISTINCT %4$s AS h FROM new_rows ORDER BY 1) s) x)
        INSERT INTO %1$s AS r (%2$shour, %3$s)
        SELECT %2$s%4$s AS hour, %5$s FROM new_rows WHERE (SELECT l.n FROM l) >= 0 AND %6$s
        GROUP BY %2$s%4$s ORDER BY %2$s%4$s
        ON CONFLICT (%2$shour) DO UPDATE SET %7$s$f$,
        r.rollup_table, keys, cols, hour_expr, vals, where_filter, add_set);
    r.mark_new_sql := format($f$
        INSERT INTO counter.rollup_dirty (rollup_id, hour)
        SELECT DISTINCT $1, %s FROM new_rows$f$, hour_expr);
    r.mark_old_sql := format($f$
        INSERT INTO counter.rollup_dirty (rollup_id, hour)
        SELECT DISTINCT $1, %s FROM old_rows$f$, hour_expr);
    -- Recompute [$1, $2) (or only the hours in $3): one GROUP BY over the
    -- events and the rollup rows of those hours together finds the rows that
    -- differ (no join, no per-row lock or probe of unchanged rows); write only
    -- those, and delete rows whose hour has no events any more (count 0).
    r.refresh_sql := format($f$
        WITH diff AS MATERIALIZED (
            SELECT %2$shour, %5$s
            FROM (SELECT %2$s%4$s AS hour, %6$s FROM %8$s
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
        r.rollup_table, keys, cols, hour_expr, agg_vals, ev_vals, where_filter, r.source, r.time_column,
        ro_vals, agg_new, agg_old, fresh_set, old_vals, new_vals, keys_ddr);
    r.sql_for := format('%s|%s', r.source, r.rollup_table);
    RETURN r;
END
$$;

-- Stores the trigger's SQL in the catalog (at creation and rule changes).
CREATE FUNCTION counter.rollup_build_sql(rid integer)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups := counter.rollup_sql(rid);
BEGIN
    UPDATE counter.rollups u SET sql_for = r.sql_for, add_sql = r.add_sql,
        mark_new_sql = r.mark_new_sql, mark_old_sql = r.mark_old_sql, refresh_sql = r.refresh_sql
    WHERE u.rollup_id = rid;
END
$$;

-- The statement-level trigger on the source (argument: rollup id), in C++
-- (src/rollup.cpp): runs the catalog row's add_sql (trigger mode) or its
-- dirty marks with plans kept per backend, made again when the stored SQL
-- changes; regenerates the SQL when a table was renamed since it was stored.
CREATE FUNCTION counter.rollup_trigger()
RETURNS trigger
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_rollup_trigger';

-- Registers or removes the job of a rollup so it mirrors counter.rollups
-- (counter.job_register is not for PUBLIC; this only follows the catalog).
CREATE FUNCTION counter.rollup_job_sync(rollup_name text)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    every interval;
BEGIN
    SELECT r.refresh_every INTO every FROM counter.rollups r WHERE r.name = rollup_name;
    IF FOUND THEN
        PERFORM counter.job_register('rollup_refresh', rollup_name, every);
    ELSE
        PERFORM counter.job_unregister('rollup_refresh', rollup_name);
    END IF;
END
$$;

-- The oldest hour of a rollup that may be recomputed: hours before the lowest
-- range partition of the source (older partitions may have been dropped) and
-- before now() - retention are outside the source's retention.
CREATE FUNCTION counter.rollup_horizon(rid integer)
RETURNS timestamptz
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
    lowest timestamptz;
    bound text;
    h timestamptz := '-infinity';
BEGIN
    SELECT * INTO STRICT r FROM counter.rollups WHERE rollup_id = rid;
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

-- Recomputes hours of one chunk (one UTC day) of a rollup from the events:
-- all hours in [from_h, to_h), or only those in hours. wait = false skips a
-- chunk another session is refreshing (returns NULL). Returns the rollup rows
-- written or deleted. Needs READ COMMITTED: each step must see what the
-- previous step waited for.
CREATE FUNCTION counter.rollup_refresh_chunk(rid integer, from_h timestamptz, to_h timestamptz,
                                             hours timestamptz[], wait boolean)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
    n bigint;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'a rollup refresh needs READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'invalid_transaction_state';
    END IF;
    r := counter.rollup_sql(rid);
    -- The rollup's SQL (its filter, the source's types) is code of the
    -- rollup's owner: run it as the owner, also when the background worker
    -- (a superuser) refreshes. The SET clause of this function confines the
    -- role change to this call.
    IF current_user::regrole <> r.owner THEN
        EXECUTE format('SET LOCAL ROLE %I', r.owner::text);
    END IF;
    IF counter.rollup_day_number(from_h) <> counter.rollup_day_number(to_h - interval '1 hour') THEN
        RAISE EXCEPTION 'a refresh chunk is at most one UTC day' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF wait THEN
        PERFORM pg_advisory_xact_lock(1380928579, counter.rollup_lock_key(rid, counter.rollup_day_number(from_h)));
    ELSIF NOT pg_try_advisory_xact_lock(1380928579, counter.rollup_lock_key(rid, counter.rollup_day_number(from_h))) THEN
        RETURN NULL;
    END IF;
    IF r.mode = 'trigger' THEN
        -- Wait for writers still adding to these hours; later ones wait for us.
        PERFORM pg_advisory_xact_lock(1380928584, counter.rollup_lock_key(rid, counter.rollup_hour_number(h)))
        FROM (SELECT h FROM generate_series(from_h, to_h - interval '1 hour', interval '1 hour') h
              WHERE hours IS NULL OR h = ANY (hours) ORDER BY h) s;
    END IF;
    -- Consume the dirty marks first: a mark committed after this point
    -- survives, so its events are recomputed by the next refresh.
    DELETE FROM counter.rollup_dirty d
    WHERE d.rollup_id = rid AND d.hour >= from_h AND d.hour < to_h AND (hours IS NULL OR d.hour = ANY (hours));
    EXECUTE r.refresh_sql INTO n USING from_h, to_h, hours;
    RETURN n;
END
$$;

CREATE FUNCTION counter.rollup_id(rollup_name text)
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

-- The chunks (UTC days, clamped to the source's retention) of a full
-- recompute of [from_ts, to_ts).
CREATE FUNCTION counter.rollup_range_chunks(rollup_name text, from_ts timestamptz, to_ts timestamptz)
RETURNS TABLE (rollup_id integer, from_h timestamptz, to_h timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rid integer;
    horizon timestamptz;
    a timestamptz := from_ts;
BEGIN
    IF rollup_name IS NULL OR from_ts IS NULL OR to_ts IS NULL THEN
        RAISE EXCEPTION 'rollup name and range must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    rid := counter.rollup_id(rollup_name);
    IF NOT isfinite(from_ts) OR NOT isfinite(to_ts) OR counter.rollup_hour(from_ts) <> from_ts
       OR counter.rollup_hour(to_ts) <> to_ts THEN
        RAISE EXCEPTION 'a refresh range must be whole UTC hours: % to %', from_ts, to_ts
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF to_ts < from_ts THEN
        RAISE EXCEPTION 'a refresh range must not end before it starts' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    horizon := counter.rollup_horizon(rid);
    IF a < horizon THEN
        RAISE NOTICE 'rollup "%": % hours before % are outside the source''s retention and were left as they were',
            rollup_name, (extract(epoch FROM least(horizon, to_ts) - a) / 3600)::bigint, horizon;
        a := least(horizon, to_ts);
    END IF;
    WHILE a < to_ts LOOP
        rollup_id := rid;
        from_h := a;
        to_h := least(to_ts, date_trunc('day', a, 'UTC') + interval '1 day');
        RETURN NEXT;
        a := to_h;
    END LOOP;
END
$$;

-- The chunks of a routine refresh: the dirty hours grouped by UTC day. Dirty
-- hours outside the source's retention are dropped from the log (they can
-- never be recomputed into a smaller number).
CREATE FUNCTION counter.rollup_dirty_chunks(rollup_name text)
RETURNS TABLE (rollup_id integer, from_h timestamptz, to_h timestamptz, hours timestamptz[])
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rid integer := counter.rollup_id(rollup_name);
    horizon timestamptz := counter.rollup_horizon(rid);
    dropped bigint;
BEGIN
    WITH gone AS (DELETE FROM counter.rollup_dirty d WHERE d.rollup_id = rid AND d.hour < horizon RETURNING d.hour)
    SELECT count(DISTINCT hour) INTO dropped FROM gone;
    IF dropped > 0 THEN
        RAISE WARNING 'rollup "%": % dirty hours before % are outside the source''s retention and were left as they were',
            rollup_name, dropped, horizon;
    END IF;
    RETURN QUERY
        SELECT rid, min(d.hour), max(d.hour) + interval '1 hour', array_agg(DISTINCT d.hour ORDER BY d.hour)
        FROM counter.rollup_dirty d
        WHERE d.rollup_id = rid
        GROUP BY counter.rollup_day_number(d.hour)
        ORDER BY 2;
END
$$;

-- Records the outcome of a refresh. A status row another refresh is still
-- writing is left to that refresh (never wait for it: the job must not
-- block behind a long recompute it skipped).
CREATE FUNCTION counter.rollup_record(rid integer, started timestamptz, outcome text, n bigint, err text)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE counter.rollup_status s
    SET last_refresh_at = started, last_outcome = outcome,
        last_duration = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) started, last_rows = n, last_error = err
    WHERE s.rollup_id OPERATOR(pg_catalog.=) rid
      AND s.rollup_id IN (SELECT l.rollup_id FROM counter.rollup_status l
                          WHERE l.rollup_id OPERATOR(pg_catalog.=) rid FOR UPDATE SKIP LOCKED)
$$;

-- Full recompute of [from_ts, to_ts) in the caller's transaction; waits for
-- chunks being refreshed elsewhere. Returns the rollup rows written or deleted.
CREATE FUNCTION counter.rollup_recompute(name text, from_ts timestamptz, to_ts timestamptz)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    total bigint := 0;
    started timestamptz := clock_timestamp();
BEGIN
    FOR c IN SELECT * FROM counter.rollup_range_chunks(name, from_ts, to_ts) LOOP
        total := total + counter.rollup_refresh_chunk(c.rollup_id, c.from_h, c.to_h, NULL, true);
    END LOOP;
    PERFORM counter.rollup_record(counter.rollup_id(name), started, 'ok', total, NULL);
    RETURN total;
END
$$;

-- Recomputes the dirty hours of a rollup in the caller's transaction,
-- skipping chunks another session is refreshing. Returns the rollup rows
-- written or deleted.
CREATE FUNCTION counter.rollup_refresh_dirty(name text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    n bigint;
    total bigint := 0;
    skipped integer := 0;
    started timestamptz := clock_timestamp();
BEGIN
    FOR c IN SELECT * FROM counter.rollup_dirty_chunks(name) LOOP
        n := counter.rollup_refresh_chunk(c.rollup_id, c.from_h, c.to_h, c.hours, false);
        IF n IS NULL THEN
            skipped := skipped + 1;
            RAISE NOTICE 'rollup "%": the chunk from % is being refreshed by another session; skipped', name, c.from_h;
        ELSE
            total := total + n;
        END IF;
    END LOOP;
    PERFORM counter.rollup_record(counter.rollup_id(name), started,
                                  CASE WHEN skipped = 0 THEN 'ok' ELSE format('skipped %s locked chunks', skipped) END,
                                  total, NULL);
    RETURN total;
END
$$;

-- Procedure forms: one transaction per chunk (a UTC day at most). No SET
-- clause is allowed on a procedure that commits, so these only call the
-- functions above, schema-qualified.
CREATE PROCEDURE counter.rollup_refresh(name text, from_ts timestamptz, to_ts timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    c record;
    n pg_catalog.int8;
    total pg_catalog.int8 := 0;
    started pg_catalog.timestamptz := pg_catalog.clock_timestamp();
    st pg_catalog.text;
    msg pg_catalog.text;
BEGIN
    FOR c IN SELECT * FROM counter.rollup_range_chunks(name, from_ts, to_ts) LOOP
        BEGIN
            n := counter.rollup_refresh_chunk(c.rollup_id, c.from_h, c.to_h, NULL, true);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
        END;
        IF st IS NOT NULL THEN
            PERFORM counter.rollup_record(c.rollup_id, started, 'error', total, msg);
            COMMIT;
            RAISE EXCEPTION USING ERRCODE = st, MESSAGE = msg;
        END IF;
        total := pg_catalog.int8pl(total, n);
        COMMIT;
    END LOOP;
    PERFORM counter.rollup_record(counter.rollup_id(name), started, 'ok', total, NULL);
    COMMIT;
END
$$;

-- The job the background worker (or counter.run_jobs(), or pg_cron) runs:
-- recompute the dirty hours of one rollup, one UTC day per transaction,
-- skipping chunks another session is refreshing.
CREATE PROCEDURE counter.job_rollup_refresh(target text, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    c record;
    n pg_catalog.int8;
    skipped pg_catalog.int4 := 0;
    started pg_catalog.timestamptz := pg_catalog.clock_timestamp();
    st pg_catalog.text;
    msg pg_catalog.text;
BEGIN
    rows_affected := 0;
    FOR c IN SELECT * FROM counter.rollup_dirty_chunks(target) LOOP
        BEGIN
            n := counter.rollup_refresh_chunk(c.rollup_id, c.from_h, c.to_h, c.hours, false);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
        END;
        IF st IS NOT NULL THEN
            PERFORM counter.rollup_record(c.rollup_id, started, 'error', rows_affected, msg);
            COMMIT;
            RAISE EXCEPTION USING ERRCODE = st, MESSAGE = msg;
        END IF;
        IF n IS NULL THEN
            skipped := pg_catalog.int4pl(skipped, 1);
            RAISE NOTICE 'rollup "%": the chunk from % is being refreshed by another session; skipped', target, c.from_h;
        ELSE
            rows_affected := pg_catalog.int8pl(rows_affected, n);
        END IF;
        COMMIT;
    END LOOP;
    PERFORM counter.rollup_record(counter.rollup_id(target), started,
        CASE WHEN skipped OPERATOR(pg_catalog.=) 0 THEN 'ok' ELSE pg_catalog.format('skipped %s locked chunks', skipped) END,
        rows_affected, NULL);
    COMMIT;
END
$$;

-- Creates a rollup: its table, its triggers on the source, its catalog row
-- and its refresh job, and marks every hour that already has events dirty
-- (the job fills them in). Nothing is created when any argument is wrong.
CREATE FUNCTION counter.rollup_create(
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

-- Drops a rollup: its triggers, its table, its catalog rows and its job.
CREATE FUNCTION counter.rollup_drop(name text)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r counter.rollups;
    op text;
BEGIN
    SELECT * INTO r FROM counter.rollups c WHERE c.name = rollup_drop.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'rollup "%" does not exist', name USING ERRCODE = 'undefined_object';
    END IF;
    IF NOT pg_has_role(r.owner, 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of rollup "%"', name USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF EXISTS (SELECT FROM pg_class c WHERE c.oid = r.source) THEN
        FOREACH op IN ARRAY ARRAY['insert', 'delete', 'update'] LOOP
            EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', 'counter_rollup_' || r.rollup_id || '_' || op, r.source);
        END LOOP;
    END IF;
    IF EXISTS (SELECT FROM pg_class c WHERE c.oid = r.rollup_table) THEN
        EXECUTE format('DROP TABLE %s', r.rollup_table);
    END IF;
    DELETE FROM counter.rollup_dirty d WHERE d.rollup_id = r.rollup_id;
    DELETE FROM counter.rollup_status s WHERE s.rollup_id = r.rollup_id;
    DELETE FROM counter.rollups c WHERE c.rollup_id = r.rollup_id;
    PERFORM counter.rollup_job_sync(name);
END
$$;

-- Changes the rule of a rollup (which events count). Existing hours keep
-- their numbers until recomputed: CALL counter.rollup_refresh(name, from, to).
CREATE FUNCTION counter.rollup_set_filter(name text, filter text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rid integer := counter.rollup_id(name);
    src regclass;
BEGIN
    IF NOT counter.rollup_owned(rid) THEN
        RAISE EXCEPTION 'must be owner of rollup "%"', name USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT r.source INTO src FROM counter.rollups r WHERE r.rollup_id = rid;
    IF filter IS NOT NULL THEN
        EXECUTE format('SELECT FROM %s WHERE $1 AND (%s) LIMIT 0', src, filter) USING true;
    END IF;
    UPDATE counter.rollups r SET filter = rollup_set_filter.filter WHERE r.rollup_id = rid;
    PERFORM counter.rollup_build_sql(rid);
END
$$;

-- Totals per group and period (hour, day, week, month, year or total) in a
-- time zone, over the whole UTC hours [from_ts, to_ts). Periods must start on
-- whole UTC hours in that zone (zones with half-hour offsets cannot be
-- assembled from hours and are refused).
CREATE FUNCTION counter.rollup_totals(name text, from_ts timestamptz, to_ts timestamptz,
                                      time_zone text DEFAULT 'UTC', per text DEFAULT 'day')
RETURNS TABLE (period_start timestamptz, key jsonb, count bigint, sums jsonb, distinct_counts jsonb)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
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
    SELECT * INTO r FROM counter.rollups c WHERE c.rollup_id = counter.rollup_id(rollup_totals.name);
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
    FOREACH g IN ARRAY r.group_by LOOP
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
    RETURN QUERY EXECUTE format(
        'SELECT %1$s AS p, %2$s), pg_catalog.sum(count)::bigint, %3$s), %6$s) FROM %4$s '
        'WHERE hour >= $1 AND hour < $2 GROUP BY 1%5$s ORDER BY 1%5$s',
        period, key_expr, sums_expr, r.rollup_table, grp, distinct_expr) USING from_ts, to_ts;
END
$$;

-- Newest hour the rollup knows of (its table and its dirty log).
CREATE FUNCTION counter.rollup_newest_hour(rid integer)
RETURNS timestamptz
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t regclass;
    h timestamptz;
BEGIN
    SELECT r.rollup_table INTO t FROM counter.rollups r WHERE r.rollup_id = rid;
    IF t IS NULL OR NOT has_table_privilege(t, 'SELECT') THEN
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT max(hour) FROM %s', t) INTO h;
    RETURN greatest(h, (SELECT max(d.hour) FROM counter.rollup_dirty d WHERE d.rollup_id = rid));
END
$$;

CREATE VIEW counter.rollup_state AS
SELECT r.name,
       r.mode,
       r.source,
       r.rollup_table,
       counter.rollup_newest_hour(r.rollup_id) AS newest_event_hour,
       least(pg_catalog.date_trunc('hour', pg_catalog.now(), 'UTC') OPERATOR(pg_catalog.-) interval '1 hour',
             d.oldest_dirty OPERATOR(pg_catalog.-) interval '1 hour') AS newest_complete_hour,
       coalesce(d.dirty_hours, 0) AS dirty_hours,
       s.last_refresh_at,
       s.last_outcome,
       s.last_duration,
       s.last_rows,
       s.last_error
FROM counter.rollups r
LEFT JOIN (SELECT dd.rollup_id, pg_catalog.count(DISTINCT dd.hour) AS dirty_hours, pg_catalog.min(dd.hour) AS oldest_dirty
           FROM counter.rollup_dirty dd GROUP BY dd.rollup_id) d ON d.rollup_id OPERATOR(pg_catalog.=) r.rollup_id
LEFT JOIN counter.rollup_status s ON s.rollup_id OPERATOR(pg_catalog.=) r.rollup_id;
COMMENT ON VIEW counter.rollup_state IS 'per rollup: newest hours, dirty hours pending, last refresh';
GRANT SELECT ON counter.rollup_state TO PUBLIC;


-- ---- src/sql/60_worker.sql
-- Running jobs: counter.run_jobs() runs every due job once, the same code the
-- background worker runs, so pg_cron can schedule it instead; run_job runs
-- one job now; job_alter changes a job. See doc/reference/worker.md.
--
-- run_jobs and run_job are procedures without SET clauses because a job may
-- COMMIT between its steps; their C code schema-qualifies everything it runs.

CREATE PROCEDURE counter.run_jobs(INOUT jobs_run integer DEFAULT NULL)
LANGUAGE c
AS 'MODULE_PATHNAME', 'counter_run_jobs';
COMMENT ON PROCEDURE counter.run_jobs(integer) IS 'runs every due counter_ext job once (CALL it outside a transaction block)';

CREATE PROCEDURE counter.run_job(job_id bigint, INOUT rows_affected bigint DEFAULT NULL)
LANGUAGE c
AS 'MODULE_PATHNAME', 'counter_run_job';
COMMENT ON PROCEDURE counter.run_job(bigint, bigint) IS 'runs one counter_ext job now, due or not; raises its error if it fails';

-- Changes a job; a NULL argument leaves that setting as it is. A shorter
-- run_every brings next_run forward to at most now() + run_every.
CREATE FUNCTION counter.job_alter(job_id bigint, run_every interval DEFAULT NULL, enabled boolean DEFAULT NULL,
                                  timeout interval DEFAULT NULL, lock_timeout interval DEFAULT NULL,
                                  next_run timestamptz DEFAULT NULL)
RETURNS counter.jobs
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    j counter.jobs;
BEGIN
    IF job_alter.job_id IS NULL THEN
        RAISE EXCEPTION 'job_id must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF job_alter.run_every IS NOT NULL AND job_alter.run_every <= interval '0' THEN
        RAISE EXCEPTION 'run_every must be a positive interval, not %', job_alter.run_every
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF job_alter.timeout IS NOT NULL
       AND (job_alter.timeout <= interval '0' OR job_alter.timeout > interval '24 days') THEN
        RAISE EXCEPTION 'timeout must be more than 0 and at most 24 days, not %', job_alter.timeout
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF job_alter.lock_timeout IS NOT NULL
       AND (job_alter.lock_timeout <= interval '0' OR job_alter.lock_timeout > interval '24 days') THEN
        RAISE EXCEPTION 'lock_timeout must be more than 0 and at most 24 days, not %', job_alter.lock_timeout
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE counter.jobs AS x
    SET run_every = coalesce(job_alter.run_every, x.run_every),
        enabled = coalesce(job_alter.enabled, x.enabled),
        timeout = coalesce(job_alter.timeout, x.timeout),
        lock_timeout = coalesce(job_alter.lock_timeout, x.lock_timeout),
        next_run = CASE
            WHEN job_alter.next_run IS NOT NULL THEN job_alter.next_run
            WHEN job_alter.run_every IS NOT NULL
                THEN least(x.next_run, pg_catalog.now() OPERATOR(pg_catalog.+) job_alter.run_every)
            ELSE x.next_run END
    WHERE x.job_id OPERATOR(pg_catalog.=) job_alter.job_id
    RETURNING x.* INTO j;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job % does not exist', job_alter.job_id USING ERRCODE = 'undefined_object';
    END IF;
    RETURN j;
END
$$;

REVOKE ALL ON PROCEDURE counter.run_jobs(integer) FROM PUBLIC;
REVOKE ALL ON PROCEDURE counter.run_job(bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.job_alter(bigint, interval, boolean, interval, interval, timestamptz) FROM PUBLIC;
