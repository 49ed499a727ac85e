-- ---- Helpers no user calls move to counter_internal (issue 22), where
-- EXECUTE is revoked from PUBLIC (99_internal.sql). Moved, not made again:
-- the event trigger counter_partition_forget_dropped keeps its function.
ALTER FUNCTION counter.rollup_lock_key(integer, bigint) SET SCHEMA counter_internal;
ALTER FUNCTION counter.rollup_hour_number(timestamptz) SET SCHEMA counter_internal;
ALTER FUNCTION counter.rollup_day_number(timestamptz) SET SCHEMA counter_internal;
ALTER FUNCTION counter.partition_name_for(name, text) SET SCHEMA counter_internal;
ALTER FUNCTION counter.partition_suffix(timestamptz, interval) SET SCHEMA counter_internal;
ALTER FUNCTION counter.partition_interval_seconds(interval) SET SCHEMA counter_internal;
ALTER FUNCTION counter.partition_forget_dropped() SET SCHEMA counter_internal;
ALTER FUNCTION counter.column_of(regclass, name) SET SCHEMA counter_internal;
