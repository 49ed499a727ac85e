-- ---- the internal schema and the mechanisms (doc/security.md)
CREATE SCHEMA counter_internal;
COMMENT ON SCHEMA counter_internal IS 'counter_ext: internal helpers and per-object state; not an API';
GRANT USAGE ON SCHEMA counter_internal TO PUBLIC;
