-- ---- 1.8: a managed table's own index count, so that a restored
-- maintenance job waits for the table's indexes (40_partition.sql); filled
-- by 86_partition_indexes_trigger.sql, once the code that counts is there.
ALTER TABLE counter.partitioned_tables ADD COLUMN parent_indexes integer;
