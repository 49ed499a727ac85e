-- Event triggers, made once the functions they call exist. Not included by an
-- update: an update that changes one of these functions replaces the function
-- (CREATE OR REPLACE in its piece), and the trigger keeps calling it.

CREATE EVENT TRIGGER counter_tracked_ddl ON ddl_command_end WHEN TAG IN ('ALTER TABLE')
    EXECUTE FUNCTION counter_internal.tracked_ddl();
CREATE EVENT TRIGGER counter_tracked_forget_dropped ON sql_drop
    WHEN TAG IN ('DROP TABLE', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION counter_internal.tracked_forget_dropped();
CREATE EVENT TRIGGER counter_rollup_forget_dropped ON sql_drop
    WHEN TAG IN ('DROP TABLE', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION counter_internal.rollup_forget_dropped();
CREATE EVENT TRIGGER counter_partition_follow_rename ON ddl_command_end
    WHEN TAG IN ('ALTER TABLE', 'ALTER SCHEMA')
    EXECUTE FUNCTION counter_internal.partition_follow_rename();
CREATE EVENT TRIGGER counter_partition_follow_indexes ON ddl_command_end
    WHEN TAG IN ('CREATE INDEX', 'DROP INDEX', 'ALTER TABLE')
    EXECUTE FUNCTION counter_internal.partition_follow_indexes();
CREATE EVENT TRIGGER counter_follow_owner ON ddl_command_end
    WHEN TAG IN ('ALTER TABLE')
    EXECUTE FUNCTION counter_internal.follow_owner();
CREATE EVENT TRIGGER counter_citus_conversion ON sql_drop
    WHEN TAG IN ('DROP TABLE')
    EXECUTE FUNCTION counter_internal.citus_conversion_check();
CREATE EVENT TRIGGER counter_citus_triggers ON ddl_command_end
    WHEN TAG IN ('CREATE TRIGGER')
    EXECUTE FUNCTION counter_internal.citus_trigger_check();
CREATE EVENT TRIGGER counter_citus_trigger_creator ON ddl_command_end
    WHEN TAG IN ('CREATE TRIGGER')
    EXECUTE FUNCTION counter_internal.citus_trigger_creator();
CREATE EVENT TRIGGER counter_citus_state ON ddl_command_end
    WHEN TAG IN ('ALTER TABLE', 'ALTER SCHEMA')
    EXECUTE FUNCTION counter_internal.citus_state_check();
CREATE EVENT TRIGGER counter_citus_shard_truncate ON sql_drop
    WHEN TAG IN ('DROP TRIGGER')
    EXECUTE FUNCTION counter_internal.citus_shard_truncate_follow();
