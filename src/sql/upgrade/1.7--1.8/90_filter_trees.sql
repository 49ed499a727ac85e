-- ---- stored filter trees name the cluster they were resolved in
-- (src/filter.cpp: "CE1 <system identifier> <nodeToString>"). A tree from
-- another cluster (after pg_upgrade, which keeps the oids of tables but not
-- of the functions and operators a tree names) is resolved again from the
-- canonical text. The trees stored until now were made in this cluster
-- (pg_upgrade refused every database with counter_ext until 1.8:
-- 90_job_kinds_text.sql).
UPDATE counter.tracked c
SET filter_tree = 'CE1 ' OPERATOR(pg_catalog.||) (pg_catalog.pg_control_system()).system_identifier::text
                  OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) c.filter_tree
WHERE c.filter_tree IS NOT NULL AND c.filter_tree NOT LIKE 'CE1 %';
UPDATE counter.rollups c
SET filter_tree = 'CE1 ' OPERATOR(pg_catalog.||) (pg_catalog.pg_control_system()).system_identifier::text
                  OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) c.filter_tree
WHERE c.filter_tree IS NOT NULL AND c.filter_tree NOT LIKE 'CE1 %';
