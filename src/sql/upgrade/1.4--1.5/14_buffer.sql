-- ---- issue 24, item 5 (errors show a role only what it may see): the
-- rollup owner check takes how the caller named the rollup (its id or its
-- name), so that an error never names a rollup the caller cannot see. The
-- 1.4 signature goes; 50_code.sql makes the new one.
DROP FUNCTION IF EXISTS counter_internal.rollup_require_owner(counter.rollups, text);
