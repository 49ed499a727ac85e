-- ---- partition maintenance (issue 12): runs as the table's owner,
-- restricted; a bounded window per run; the entry points are for owners and
-- check their caller; the catalogs get RLS; partition_bounds checks the
-- caller before it locks.
ALTER TABLE counter.partitioned_tables ADD COLUMN last_outside bigint;
ALTER TABLE counter.partitioned_tables ENABLE ROW LEVEL SECURITY;
CREATE POLICY partitioned_tables_read ON counter.partitioned_tables FOR SELECT
    USING (pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                   WHERE c.oid OPERATOR(pg_catalog.=) parent), 'USAGE'));
ALTER TABLE counter.partition_staging ENABLE ROW LEVEL SECURITY;
CREATE POLICY partition_staging_read ON counter.partition_staging FOR SELECT
    USING (EXISTS (SELECT FROM counter.partitioned_tables t WHERE t.parent OPERATOR(pg_catalog.=) partition_staging.parent));

-- 1.1's code that changed goes (the helpers move to counter_internal; the
-- entry points lose their REVOKEs and check their caller instead).
DROP VIEW counter.partition_status;
DROP FUNCTION counter.partition_state();
DROP FUNCTION counter.partition_column_list(regclass),
    counter.partition_make_table(regclass, timestamptz, timestamptz, text),
    counter.partition_attach(regclass, regclass, timestamptz, timestamptz, boolean),
    counter.partition_move_rows(regclass, regclass, timestamptz, timestamptz, bigint),
    counter.partition_step(regclass, timestamptz),
    counter.partition_record(regclass, text, text, bigint, bigint, bigint),
    counter.partition_maintain(regclass, timestamptz, integer),
    counter.partition_manage(regclass, name, interval, integer, interval, boolean, timestamptz, integer, interval,
                             timestamptz),
    counter.partition_unmanage(regclass);
DROP PROCEDURE counter.partition_maintain_steps(regclass, bigint, bigint, bigint, text, text),
    counter.run_maintenance(regclass), counter.job_partition_maintenance(text, bigint);

--@include src/sql/41_partition_code.sql
