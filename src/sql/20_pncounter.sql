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

-- bytea holds the same bytes (the binary form): the way in is validated like
-- recv, the way out is free.
CREATE FUNCTION counter.pncounter_from_bytea(bytea)
RETURNS counter.pncounter
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_from_bytea';
CREATE CAST (bytea AS counter.pncounter) WITH FUNCTION counter.pncounter_from_bytea(bytea);
CREATE CAST (counter.pncounter AS bytea) WITHOUT FUNCTION;

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

-- The merge aggregate of 1.4 had an internal state; these functions served
-- it and stay for the 1.4 install script. 1.5's pncounter_merge_agg is in
-- 21_distributable_code.sql.
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
