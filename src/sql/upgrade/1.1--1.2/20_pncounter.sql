-- ---- pncounter: a validated cast from bytea (issue 14) ----------------------
CREATE FUNCTION counter.pncounter_from_bytea(bytea)
RETURNS counter.pncounter
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_pncounter_from_bytea';
CREATE CAST (bytea AS counter.pncounter) WITH FUNCTION counter.pncounter_from_bytea(bytea);
CREATE CAST (counter.pncounter AS bytea) WITHOUT FUNCTION;
