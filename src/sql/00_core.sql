-- The schema itself is created by CREATE EXTENSION (schema = counter in the
-- control file). Objects are always schema-qualified; functions that run SQL
-- pin their search_path.

COMMENT ON SCHEMA counter IS 'counter_ext: counters that stay correct next to the rows they count';

-- Every role may reach the schema: the types (hll, pncounter) and tracked
-- counters on tables a role owns are for everyone. What may harm is revoked
-- from PUBLIC function by function, and functions check their caller.
GRANT USAGE ON SCHEMA counter TO PUBLIC;

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
