-- Citus (issue 21 item 1): the event triggers that refuse Citus's copies of
-- counter_ext's triggers (create_distributed_table, create_reference_table)
-- and Citus's remaking of a table counter_ext serves (undistribute_table,
-- alter_distributed_table, alter_table_set_access_method); their functions
-- are in 06_jobs_code.sql (included by 50_code.sql).
CREATE EVENT TRIGGER counter_citus_conversion ON sql_drop
    WHEN TAG IN ('DROP TABLE')
    EXECUTE FUNCTION counter_internal.citus_conversion_check();
CREATE EVENT TRIGGER counter_citus_triggers ON ddl_command_end
    WHEN TAG IN ('CREATE TRIGGER')
    EXECUTE FUNCTION counter_internal.citus_trigger_check();
