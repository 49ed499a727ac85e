-- counter_ext 1.1 -> 1.2 (ALTER EXTENSION counter_ext UPDATE TO '1.2').
\echo Use "ALTER EXTENSION counter_ext UPDATE TO '1.2'" to load this file. \quit

-- Every change to src/sql/*.sql since 1.1 is repeated here, section by
-- section (test/scripts/upgrade.sh compares an updated installation with a
-- fresh one, object by object).

-- ---- pncounter: a validated cast from bytea (issue 14) ----------------------
CREATE FUNCTION counter.pncounter_from_bytea(bytea)
RETURNS counter.pncounter
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_from_bytea';
CREATE CAST (bytea AS counter.pncounter) WITH FUNCTION counter.pncounter_from_bytea(bytea);
CREATE CAST (counter.pncounter AS bytea) WITHOUT FUNCTION;
