-- ---- 1.8: DDL that adds or drops an index of a managed partitioned table
-- keeps its count (80_drop.sql, partition_follow_indexes).
CREATE EVENT TRIGGER counter_partition_follow_indexes ON ddl_command_end
    WHEN TAG IN ('CREATE INDEX', 'DROP INDEX', 'ALTER TABLE')
    EXECUTE FUNCTION counter_internal.partition_follow_indexes();
