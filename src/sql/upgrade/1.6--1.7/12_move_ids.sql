-- ---- Two more helpers move to counter_internal (issue 22): the SQL
-- maintenance runs as a table's owner computes the slot inline
-- (counter_internal.partition_slot_sql), and a rollup's id is read from
-- counter.rollups. Moved, not made again.
ALTER FUNCTION counter.partition_slot(timestamptz, bigint) SET SCHEMA counter_internal;
ALTER FUNCTION counter.rollup_id(text) SET SCHEMA counter_internal;
