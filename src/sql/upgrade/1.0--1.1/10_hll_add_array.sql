-- counter.hll: new sparse sketches have 26-bit entries (format version 2,
-- doc/hll-storage.md); that is in the library, and stored version 1 sketches
-- stay valid. No SQL object changes for it.

-- counter.hll_add_array: many values at once (postgresql-hll #33).
CREATE FUNCTION counter.hll_add_array(counter.hll, anyarray) RETURNS counter.hll
LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'counter_hll_add_array';
COMMENT ON FUNCTION counter.hll_add_array(counter.hll, anyarray) IS
    'the sketch with every non-NULL element of the array added (a NULL array leaves it unchanged)';
