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

-- The one mechanism that runs work as the owner of the object it serves
-- (src/owner.cpp): the SQL runs as 'owner' in a security-restricted
-- operation with search_path pg_catalog, pg_temp; parameters are the
-- variadic arguments ($1, $2, ...). Called only by the extension's functions,
-- after they have checked the caller's privilege.
CREATE FUNCTION counter_internal.exec_as_owner(owner regrole, sql text, VARIADIC args "any")
RETURNS SETOF record
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_exec_as_owner';

CREATE FUNCTION counter_internal.exec_as_owner_cmd(owner regrole, sql text, VARIADIC args "any")
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_exec_as_owner_cmd';

-- The one filter compiler (src/filter.cpp): resolves a filter as the owner,
-- once, and returns {canonical text, tree}; filter_match applies the stored
-- tree of a tracked counter ('tracked') or rollup ('rollup') to a source row.
CREATE FUNCTION counter_internal.filter_compile(source regclass, filter text, owner regrole)
RETURNS text[]
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'counter_filter_compile';

CREATE FUNCTION counter_internal.filter_match(kind text, id integer, source_row anyelement)
RETURNS boolean
LANGUAGE c STABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_filter_match';

-- {=, <, >} of a key type's default btree operator class, written as
-- OPERATOR(schema.op): resolved from the catalog, never from a search_path.
CREATE FUNCTION counter_internal.key_operators(key_type regtype)
RETURNS text[]
LANGUAGE c STABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_key_operators';

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
