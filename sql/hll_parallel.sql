-- counter.hll aggregates under parallel query: combine, serialize and
-- deserialize give the same bytes as a serial plan, and the session's
-- default precision reaches the workers.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS counter_ext;
RESET client_min_messages;
SET search_path = counter, public;

CREATE TABLE hll_par AS
    SELECT g::bigint AS id, md5(g::text) AS label, g % 1000 AS grp
    FROM generate_series(1, 200000) g;
ANALYZE hll_par;
CREATE TABLE hll_par_sketches AS SELECT grp, hll_add_agg(id) AS s FROM hll_par GROUP BY grp;
ANALYZE hll_par_sketches;

-- Serial answers first.
SET max_parallel_workers_per_gather = 0;
CREATE TEMP TABLE serial AS
SELECT hll_add_agg(id) AS by_id, hll_add_agg(label) AS by_label, hll_add_agg(id, 11) AS at_11,
       hll_add_agg(id) FILTER (WHERE id <= 1000) AS sparse_part, hll_count_distinct(id) AS counted,
       (SELECT hll_union_agg(s) FROM hll_par_sketches) AS unioned
FROM hll_par;
CREATE TEMP TABLE serial_groups AS SELECT grp % 10 AS k, hll_add_agg(id) AS s FROM hll_par GROUP BY 1;

-- Then the same with 2 workers.
SET max_parallel_workers_per_gather = 2;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET parallel_leader_participation = off;
EXPLAIN (COSTS OFF) SELECT hll_add_agg(id) FROM hll_par;
EXPLAIN (COSTS OFF) SELECT hll_union_agg(s) FROM hll_par_sketches;

CREATE FUNCTION pg_temp.workers_launched(query text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    line text;
    n int := 0;
BEGIN
    FOR line IN EXECUTE 'EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) ' || query LOOP
        IF line ~ 'Workers Launched: ' THEN
            n := n + substring(line FROM 'Workers Launched: (\d+)')::int;
        END IF;
    END LOOP;
    RETURN n;
END $$;
SELECT pg_temp.workers_launched('SELECT hll_add_agg(id) FROM hll_par') > 0 AS ran_in_parallel;

SELECT p.by_id = s.by_id AS same_by_id, p.by_label = s.by_label AS same_by_label, p.at_11 = s.at_11 AS same_at_11,
       p.sparse_part = s.sparse_part AS same_sparse, p.counted = s.counted AS same_count,
       p.unioned = s.unioned AS same_union, s.counted AS estimate
FROM serial s, (
    SELECT hll_add_agg(id) AS by_id, hll_add_agg(label) AS by_label, hll_add_agg(id, 11) AS at_11,
           hll_add_agg(id) FILTER (WHERE id <= 1000) AS sparse_part, hll_count_distinct(id) AS counted,
           (SELECT hll_union_agg(s) FROM hll_par_sketches) AS unioned
    FROM hll_par) p;
SELECT count(*) AS groups_differing FROM (
    SELECT grp % 10 AS k, hll_add_agg(id) AS s FROM hll_par GROUP BY 1
    EXCEPT SELECT k, s FROM serial_groups) x;

-- The session default reaches the workers (a GUC, not a C static).
SET counter_ext.hll_default_precision = 11;
SELECT pg_temp.workers_launched('SELECT hll_add_agg(id) FROM hll_par') > 0 AS ran_in_parallel;
SELECT (hll_info(hll_add_agg(id))).precision AS worker_precision, hll_add_agg(id) = (SELECT at_11 FROM serial) AS same
FROM hll_par;
RESET counter_ext.hll_default_precision;

DROP TABLE hll_par, hll_par_sketches;

-- Leave the database as it was found: other test files create the extension.
SET client_min_messages = warning;
DROP EXTENSION counter_ext CASCADE;
RESET client_min_messages;
