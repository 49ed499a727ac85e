-- ---- 1.8: the count of every table managed before the update, and the DDL
-- that adds or drops an index of a managed partitioned table keeps it
-- (80_drop.sql, partition_follow_indexes).
UPDATE counter.partitioned_tables c SET parent_indexes = counter_internal.partition_index_count(c.parent);
CREATE EVENT TRIGGER counter_partition_follow_indexes ON ddl_command_end
    WHEN TAG IN ('CREATE INDEX', 'DROP INDEX', 'ALTER TABLE')
    EXECUTE FUNCTION counter_internal.partition_follow_indexes();
