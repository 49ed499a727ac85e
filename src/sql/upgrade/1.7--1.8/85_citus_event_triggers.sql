-- ---- 1.8's event triggers for the state of distributed counters and
-- rollups kept beside their source (06_jobs_code.sql): only the table's
-- owner attaches their shard triggers; that state's names do not change; a
-- counter's TRUNCATE trigger on a shard goes with its other triggers there.
CREATE EVENT TRIGGER counter_citus_trigger_creator ON ddl_command_end
    WHEN TAG IN ('CREATE TRIGGER')
    EXECUTE FUNCTION counter_internal.citus_trigger_creator();
CREATE EVENT TRIGGER counter_citus_state ON ddl_command_end
    WHEN TAG IN ('ALTER TABLE', 'ALTER SCHEMA')
    EXECUTE FUNCTION counter_internal.citus_state_check();
CREATE EVENT TRIGGER counter_citus_shard_truncate ON sql_drop
    WHEN TAG IN ('DROP TRIGGER')
    EXECUTE FUNCTION counter_internal.citus_shard_truncate_follow();
