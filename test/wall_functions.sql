-- Test-only entry points of the C++/PostgreSQL wall (src/testing.cpp), in a
-- schema of their own. The extension never creates these; tests do.
CREATE SCHEMA IF NOT EXISTS counter_test;
CREATE OR REPLACE FUNCTION counter_test.throw_cpp(kind text) RETURNS int
    LANGUAGE c STRICT AS 'counter_ext', 'counter_test_throw_cpp';
CREATE OR REPLACE FUNCTION counter_test.raise_in_guard(sqlstate text, probes int) RETURNS int
    LANGUAGE c STRICT AS 'counter_ext', 'counter_test_raise_in_guard';
CREATE OR REPLACE FUNCTION counter_test.probes_destroyed(reset boolean DEFAULT true) RETURNS int
    LANGUAGE c STRICT AS 'counter_ext', 'counter_test_probes_destroyed';
CREATE OR REPLACE FUNCTION counter_test.spin(seconds float8) RETURNS bigint
    LANGUAGE c STRICT AS 'counter_ext', 'counter_test_spin';
