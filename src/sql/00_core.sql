-- The schema itself is created by CREATE EXTENSION (schema = counter in the
-- control file). Objects are always schema-qualified; functions that run SQL
-- pin their search_path.

COMMENT ON SCHEMA counter IS 'counter_ext: counters that stay correct next to the rows they count';

-- Every role may reach the schema: the types (hll, pncounter) and tracked
-- counters on tables a role owns are for everyone. What may harm is revoked
-- from PUBLIC function by function, and functions check their caller.
GRANT USAGE ON SCHEMA counter TO PUBLIC;

-- Helpers and the per-object state (tracked counters' tables) live in schema
-- counter_internal (doc/security.md). Nobody but the extension creates
-- anything there. USAGE is granted because an object's owner reaches its own
-- state tables there (as itself); EXECUTE on every function of the schema is
-- revoked from PUBLIC at the end of the script (99_internal.sql), so a helper
-- is callable only by the extension's own functions, or by the owner a
-- registration grants it to.
CREATE SCHEMA counter_internal;
COMMENT ON SCHEMA counter_internal IS 'counter_ext: internal helpers and per-object state; not an API';
GRANT USAGE ON SCHEMA counter_internal TO PUBLIC;

-- The lock space of counter_ext (src/include/counter_ext/locks.hpp): every
-- lock counter_ext takes to coordinate its own work is an object lock whose
-- class id is this table's OID, a tag no SQL function and no DDL of a role
-- can take. The table holds nothing.
CREATE TABLE counter_internal.lock_space ();
COMMENT ON TABLE counter_internal.lock_space IS 'counter_ext: names the lock space of its own locks (holds nothing)';
REVOKE ALL ON TABLE counter_internal.lock_space FROM PUBLIC;

-- The catalog row of a user column of a table, or undefined_column (42703):
-- the one check every feature makes of the columns it is given.
CREATE FUNCTION counter_internal.column_of(rel regclass, col name)
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
