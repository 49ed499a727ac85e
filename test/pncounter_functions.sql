-- Test-only entry points of counter.pncounter (src/pncounter.cpp), in the
-- suite's own schema. The extension never creates these; tests do.
CREATE SCHEMA IF NOT EXISTS counter_test;
CREATE OR REPLACE FUNCTION counter_test.pncounter_recv(bytea) RETURNS counter.pncounter
    LANGUAGE c STRICT AS 'counter_ext', 'counter_test_pncounter_recv';
CREATE OR REPLACE FUNCTION counter_test.pncounter_deserialize(bytea) RETURNS counter.pncounter
    LANGUAGE c STRICT AS 'counter_ext', 'counter_test_pncounter_deserialize';
