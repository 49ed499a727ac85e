-- ---- Helpers no user calls move to counter_internal (issue 22), where
-- EXECUTE is revoked from PUBLIC (99_internal.sql). Moved, not made again:
-- the event trigger counter_partition_forget_dropped keeps its function.
-- (An update from an older version than 1.6 may not have them: its code makes
-- them in counter_internal.)
DO $move$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['counter.rollup_lock_key(integer, bigint)',
                             'counter.rollup_hour_number(timestamptz)',
                             'counter.rollup_day_number(timestamptz)',
                             'counter.partition_name_for(name, text)',
                             'counter.partition_suffix(timestamptz, interval)',
                             'counter.partition_interval_seconds(interval)',
                             'counter.partition_forget_dropped()',
                             'counter.column_of(regclass, name)',
                             -- two more (issue 22): the SQL maintenance runs as a table's owner
                             -- computes the slot inline (counter_internal.partition_slot_sql), and a
                             -- rollup's id is read from counter.rollups
                             'counter.partition_slot(timestamptz, bigint)',
                             'counter.rollup_id(text)'] LOOP
        IF pg_catalog.to_regprocedure(f) IS NOT NULL THEN
            EXECUTE pg_catalog.format('ALTER FUNCTION %s SET SCHEMA counter_internal', f);
        END IF;
    END LOOP;
END
$move$;
