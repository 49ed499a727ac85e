-- The forms Citus distributes (doc/citus.md): aggregates whose transition
-- state is a real type with text I/O and a combine function (Citus's generic
-- worker_partial_agg / coord_combine_agg path, for any grouping), and
-- IMMUTABLE PN-counter steps for distributed UPDATEs and upserts. Only
-- CREATE OR REPLACE: the 1.4 -> 1.5 update includes this file as it is.

-- ---- hll_count_distinct over the usual key types
-- A counter.hll state (an expanded object changed in place row by row) and a
-- combine function. Other key types use hll_count_distinct(anyelement)
-- (10_hll.sql, an internal state: not pushed down). Same hashes, same counts.
CREATE OR REPLACE FUNCTION counter.hll_count_trans(counter.hll, smallint) RETURNS counter.hll
LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_count_trans_int2';
CREATE OR REPLACE FUNCTION counter.hll_count_trans(counter.hll, integer) RETURNS counter.hll
LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_count_trans_int4';
CREATE OR REPLACE FUNCTION counter.hll_count_trans(counter.hll, bigint) RETURNS counter.hll
LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_count_trans_int8';
CREATE OR REPLACE FUNCTION counter.hll_count_trans(counter.hll, text) RETURNS counter.hll
LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_count_trans_text';
CREATE OR REPLACE FUNCTION counter.hll_count_trans(counter.hll, uuid) RETURNS counter.hll
LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_count_trans_uuid';
CREATE OR REPLACE FUNCTION counter.hll_count_combine(counter.hll, counter.hll) RETURNS counter.hll
LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_count_combine';
CREATE OR REPLACE FUNCTION counter.hll_count_final(counter.hll) RETURNS bigint
LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_count_final_sketch';

CREATE OR REPLACE AGGREGATE counter.hll_count_distinct(smallint) (
    SFUNC = counter.hll_count_trans, STYPE = counter.hll, SSPACE = 1024, FINALFUNC = counter.hll_count_final,
    COMBINEFUNC = counter.hll_count_combine, PARALLEL = SAFE
);
CREATE OR REPLACE AGGREGATE counter.hll_count_distinct(integer) (
    SFUNC = counter.hll_count_trans, STYPE = counter.hll, SSPACE = 1024, FINALFUNC = counter.hll_count_final,
    COMBINEFUNC = counter.hll_count_combine, PARALLEL = SAFE
);
CREATE OR REPLACE AGGREGATE counter.hll_count_distinct(bigint) (
    SFUNC = counter.hll_count_trans, STYPE = counter.hll, SSPACE = 1024, FINALFUNC = counter.hll_count_final,
    COMBINEFUNC = counter.hll_count_combine, PARALLEL = SAFE
);
CREATE OR REPLACE AGGREGATE counter.hll_count_distinct(text) (
    SFUNC = counter.hll_count_trans, STYPE = counter.hll, SSPACE = 1024, FINALFUNC = counter.hll_count_final,
    COMBINEFUNC = counter.hll_count_combine, PARALLEL = SAFE
);
CREATE OR REPLACE AGGREGATE counter.hll_count_distinct(uuid) (
    SFUNC = counter.hll_count_trans, STYPE = counter.hll, SSPACE = 1024, FINALFUNC = counter.hll_count_final,
    COMBINEFUNC = counter.hll_count_combine, PARALLEL = SAFE
);
COMMENT ON AGGREGATE counter.hll_count_distinct(smallint) IS
    'estimated count of distinct non-NULL values, rounded (0 over no rows); pushed down by Citus';
COMMENT ON AGGREGATE counter.hll_count_distinct(integer) IS
    'estimated count of distinct non-NULL values, rounded (0 over no rows); pushed down by Citus';
COMMENT ON AGGREGATE counter.hll_count_distinct(bigint) IS
    'estimated count of distinct non-NULL values, rounded (0 over no rows); pushed down by Citus';
COMMENT ON AGGREGATE counter.hll_count_distinct(text) IS
    'estimated count of distinct non-NULL values, rounded (0 over no rows); pushed down by Citus';
COMMENT ON AGGREGATE counter.hll_count_distinct(uuid) IS
    'estimated count of distinct non-NULL values, rounded (0 over no rows); pushed down by Citus';

-- ---- pncounter_increment / _decrement with the node always given
-- IMMUTABLE, so a distributed UPDATE or INSERT ... ON CONFLICT DO UPDATE may
-- call them on a column (doc/citus.md).
CREATE OR REPLACE FUNCTION counter.pncounter_increment_at(c counter.pncounter, node text, amount bigint DEFAULT 1)
RETURNS counter.pncounter
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_increment_at';
COMMENT ON FUNCTION counter.pncounter_increment_at(counter.pncounter, text, bigint) IS
    'adds amount (> 0) to the increments of node (required); IMMUTABLE';

CREATE OR REPLACE FUNCTION counter.pncounter_decrement_at(c counter.pncounter, node text, amount bigint DEFAULT 1)
RETURNS counter.pncounter
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_decrement_at';
COMMENT ON FUNCTION counter.pncounter_decrement_at(counter.pncounter, text, bigint) IS
    'adds amount (> 0) to the decrements of node (required); IMMUTABLE';

-- ---- the PN-counter merge aggregate
-- Its state is a counter.pncounter (an expanded object merged in place row
-- by row) with a combine function (1.4's was an internal state).
CREATE OR REPLACE FUNCTION counter.pncounter_merge_trans(counter.pncounter, counter.pncounter)
RETURNS counter.pncounter
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_merge_trans';

CREATE OR REPLACE FUNCTION counter.pncounter_merge_final(counter.pncounter)
RETURNS counter.pncounter
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_merge_final';

CREATE OR REPLACE AGGREGATE counter.pncounter_merge_agg(counter.pncounter) (
    SFUNC = counter.pncounter_merge_trans,
    STYPE = counter.pncounter,
    FINALFUNC = counter.pncounter_merge_final,
    COMBINEFUNC = counter.pncounter_merge_trans,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE counter.pncounter_merge_agg(counter.pncounter) IS
    'merge of all non-NULL states (NULL when there are none)';
