-- ---- the event triggers 1.2 made (its 31_tracked_code.sql and 80_drop.sql),
-- once the code has made their functions
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
