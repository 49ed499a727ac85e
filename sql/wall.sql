-- The C++/PostgreSQL wall: C++ exceptions arrive as SQL errors with a real
-- SQLSTATE, PostgreSQL errors inside guarded C++ scopes run the destructors
-- of that scope, and the session keeps working after each.
CREATE EXTENSION counter_ext;
\set ON_ERROR_STOP 0
\set SHOW_CONTEXT never
\i test/wall_functions.sql

-- A ce::Error carries its SQLSTATE, detail and hint.
SELECT counter_test.throw_cpp('error');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.throw_cpp('bad_alloc');
\echo :LAST_ERROR_SQLSTATE
-- Unknown exceptions are internal errors, never a crash.
SELECT counter_test.throw_cpp('std');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.throw_cpp('unknown');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.throw_cpp('none');

-- The same session keeps working, also inside a transaction with a savepoint.
BEGIN;
SAVEPOINT s;
SELECT counter_test.throw_cpp('error');
ROLLBACK TO SAVEPOINT s;
SELECT counter_test.throw_cpp('none') AS still_working;
COMMIT;

-- ereport(ERROR) inside pg_guard: the original SQLSTATE and message arrive,
-- and all 4 + 1 objects of the C++ scope were destroyed.
SELECT counter_test.probes_destroyed(true) >= 0 AS reset;
SELECT counter_test.raise_in_guard('22012', 4);
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.probes_destroyed(true) AS destructors_run;
SELECT counter_test.raise_in_guard('40001', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.probes_destroyed(true) AS destructors_run;
-- Many times in a row: nothing leaks into the error stack. Each call is made
-- (a plain call per row, and 200 C++ exceptions caught one by one), and the
-- session works afterwards.
SELECT count(*) FROM generate_series(1, 200) g
  WHERE counter_test.throw_cpp(CASE WHEN g > 0 THEN 'none' END) = 0;
DO $$
DECLARE
    caught int := 0;
BEGIN
    FOR i IN 1..200 LOOP
        BEGIN
            PERFORM counter_test.throw_cpp('error');
        EXCEPTION WHEN OTHERS THEN
            caught := caught + 1;
        END;
    END LOOP;
    RAISE NOTICE 'caught % C++ exceptions of 200', caught;
END $$;
DO $$
BEGIN
    FOR i IN 1..200 LOOP
        BEGIN
            PERFORM counter_test.raise_in_guard('22012', 2);
        EXCEPTION WHEN division_by_zero THEN
            NULL;
        END;
    END LOOP;
END $$;
SELECT counter_test.probes_destroyed(true) AS destructors_run_in_200_calls;

-- statement_timeout interrupts a long C++ loop.
SET statement_timeout = '200ms';
SELECT counter_test.spin(30);
\echo :LAST_ERROR_SQLSTATE
RESET statement_timeout;
SELECT counter_test.spin(0.01) > 0 AS spin_works;

-- Bad arguments.
SELECT counter_test.throw_cpp('nonsense');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.raise_in_guard('123', 1);
\echo :LAST_ERROR_SQLSTATE

SELECT counter.version() = extversion AS library_matches_script
  FROM pg_extension WHERE extname = 'counter_ext';
SELECT counter.preloaded();
DROP SCHEMA counter_test CASCADE;
DROP EXTENSION counter_ext;
