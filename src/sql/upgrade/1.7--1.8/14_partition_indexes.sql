-- ---- 1.8: a managed table's own index count, so that a restored
-- maintenance job waits for the table's indexes (40_partition.sql).
ALTER TABLE counter.partitioned_tables ADD COLUMN parent_indexes integer;
UPDATE counter.partitioned_tables c
SET parent_indexes = (SELECT pg_catalog.count(*) FROM pg_catalog.pg_index i
                      WHERE i.indrelid OPERATOR(pg_catalog.=) c.parent)::integer;
