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
