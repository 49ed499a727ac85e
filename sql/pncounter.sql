-- counter.pncounter: the SQL surface, text and binary forms, bad input.
CREATE EXTENSION counter_ext;
\set ON_ERROR_STOP 0
\set SHOW_CONTEXT never
\set VERBOSITY default

-- Text form: {"node":[increments,decrements],...}, sorted by node id, no
-- all-zero nodes; whitespace and any order on input.
SELECT '{}'::counter.pncounter AS empty;
SELECT '{"b":[3,0],"a":[5,1]}'::counter.pncounter AS sorted;
SELECT ' { "site-a.1" : [ 5 , 1 ] ,
  "B_2":[0,7], "z":[0,0] } '::counter.pncounter AS spaces_and_zero_node;
SELECT '{"a":[9223372036854775807,9223372036854775807]}'::counter.pncounter AS largest_totals;
SELECT ('{"b":[3,0],"a":[5,1]}'::counter.pncounter)::text::jsonb AS the_text_is_json;

-- Malformed text: 22P02, totals out of range: 22003.
SELECT ''::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{"a":[1,2]'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{"a":[1,2]} x'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{"a":[1,2],}'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{"a":[1]}'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{"a":[1,2,3]}'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{"a":[-1,2]}'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{"a":[1,-2]}'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{"a":[1.5,2]}'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{"a":[1e3,2]}'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{"a":[01,2]}'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{"a":[+1,2]}'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{a:[1,2]}'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{"":[1,2]}'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{"a b":[1,2]}'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{"a\"b":[1,2]}'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{"é":[1,2]}'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT ('{"' || repeat('x', 64) || '":[1,2]}')::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT ('{"' || repeat('x', 63) || '":[1,2]}')::counter.pncounter IS NOT NULL AS id_of_63_bytes_ok;
SELECT '{"a":[1,2],"b":[1,1],"a":[3,4]}'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{"a":[0,0],"a":[3,4]}'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{"a":[9223372036854775808,0]}'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '{"a":[0,99999999999999999999999]}'::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
-- At most 1024 nodes: 54000 beyond.
SELECT counter.pncounter_value(('{' || string_agg(format('"n%s":[1,0]', i), ',') || '}')::counter.pncounter)
    AS nodes_1024
FROM generate_series(1, 1024) i;
SELECT ('{' || string_agg(format('"n%s":[1,0]', i), ',') || '}')::counter.pncounter
FROM generate_series(1, 1025) i;
\echo :LAST_ERROR_SQLSTATE

-- Increment and decrement: the node is explicit or counter_ext.node_id.
SET counter_ext.node_id = '';
SELECT counter.pncounter_increment('{}', 5);
\echo :LAST_ERROR_SQLSTATE
SET counter_ext.node_id = 'site_a';
SELECT counter.pncounter_increment('{}', 5);
SELECT counter.pncounter_increment('{}');
SELECT counter.pncounter_decrement(counter.pncounter_increment('{}', 5), 2);
SELECT counter.pncounter_increment('{"site_a":[5,2]}', 10, node => 'site_b');
SELECT counter.pncounter_decrement('{"site_a":[5,2]}', 10, 'site_b');
-- A NULL state is the empty counter; a NULL amount is an error.
SELECT counter.pncounter_increment(NULL, 3);
SELECT counter.pncounter_increment('{}', NULL);
\echo :LAST_ERROR_SQLSTATE
-- The amount is positive: 22023.
SELECT counter.pncounter_increment('{}', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.pncounter_increment('{}', -4);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.pncounter_decrement('{}', -4);
\echo :LAST_ERROR_SQLSTATE
-- Bad explicit node ids: 22023.
SELECT counter.pncounter_increment('{}', 1, '');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.pncounter_increment('{}', 1, 'no spaces');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.pncounter_increment('{}', 1, repeat('x', 64));
\echo :LAST_ERROR_SQLSTATE
-- A bad setting is refused by the setting itself.
SET counter_ext.node_id = 'bad id';
\echo :LAST_ERROR_SQLSTATE
-- A total never wraps around: 22003.
SELECT counter.pncounter_increment('{"site_a":[9223372036854775807,0]}', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.pncounter_decrement('{"site_a":[0,9223372036854775800]}', 8);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.pncounter_decrement('{"site_a":[0,9223372036854775800]}', 7);
-- The 1025th node: 54000.
SELECT counter.pncounter_increment(('{' || string_agg(format('"n%s":[1,0]', i), ',') || '}')::counter.pncounter, 1)
FROM generate_series(1, 1024) i;
\echo :LAST_ERROR_SQLSTATE

-- Value: sum(P) - sum(N), as bigint; never a wraparound.
SELECT counter.pncounter_value('{}') AS empty,
       counter.pncounter_value('{"a":[5,1],"b":[3,0]}') AS seven,
       counter.pncounter_value('{"a":[0,5],"b":[1,0]}') AS minus_four,
       '{"a":[5,1],"b":[3,0]}'::counter.pncounter::bigint AS cast_to_bigint;
SELECT counter.pncounter_value('{"a":[9223372036854775807,0],"b":[9223372036854775807,9223372036854775807]}')
    AS cancels_out;
SELECT counter.pncounter_value('{"a":[0,9223372036854775807],"b":[0,1]}') AS bigint_min;
SELECT counter.pncounter_value('{"a":[9223372036854775807,0],"b":[1,0]}');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.pncounter_value('{"a":[0,9223372036854775807],"b":[0,2]}');
\echo :LAST_ERROR_SQLSTATE

-- Merge: the per-node maximum, as a function, an operator and an aggregate.
SELECT counter.pncounter_merge('{"a":[5,1],"b":[3,0]}', '{"a":[4,2],"c":[1,1]}') AS merged;
SELECT '{"a":[5,1],"b":[3,0]}'::counter.pncounter OPERATOR(counter.||) '{"a":[4,2],"c":[1,1]}' AS merged;
SELECT '{"a":[5,1]}'::counter.pncounter OPERATOR(counter.||) NULL AS null_in_null_out;
SELECT counter.pncounter_merge_agg(c) AS merged, counter.pncounter_value(counter.pncounter_merge_agg(c)) AS value
FROM (VALUES ('{"a":[5,1]}'::counter.pncounter), ('{"b":[2,0]}'), (NULL), ('{"a":[3,4]}'), ('{}')) v(c);
SELECT counter.pncounter_merge_agg(c) IS NULL AS no_rows_is_null
FROM (VALUES ('{"a":[5,1]}'::counter.pncounter)) v(c) WHERE false;
SELECT g, counter.pncounter_merge_agg(c) AS merged
FROM (VALUES (1, '{"a":[5,1]}'::counter.pncounter), (2, '{"b":[2,0]}'), (1, '{"a":[3,4]}'), (2, NULL), (3, NULL)) v(g, c)
GROUP BY g ORDER BY g;
-- With schema counter on the search path, || between a state and a literal
-- is the merge; without it, || is text concatenation and the result is no
-- state (an error, never a wrong number).
SET search_path = counter, public;
SELECT '{"a":[5,1]}'::pncounter || '{"a":[3,4]}' AS merged_with_search_path;
RESET search_path;
SELECT ('{"a":[5,1]}'::counter.pncounter || '{"a":[3,4]}')::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
-- Merging beyond 1024 nodes: 54000.
SELECT ('{' || string_agg(format('"n%s":[1,0]', i), ',') || '}')::counter.pncounter
       OPERATOR(counter.||) '{"zz":[1,0]}'
FROM generate_series(1, 1024) i;
\echo :LAST_ERROR_SQLSTATE

-- Per-node totals as rows.
SELECT * FROM counter.pncounter_nodes('{"b":[3,0],"a":[5,1],"c":[0,9]}');
SELECT count(*) AS no_rows FROM counter.pncounter_nodes('{}');

-- Equality and hashing: GROUP BY, DISTINCT, hash joins.
SELECT '{"a":[5,1],"b":[3,0]}'::counter.pncounter OPERATOR(counter.=) '{"b":[3,0],"a":[5,1],"c":[0,0]}' AS equal,
       '{"a":[5,1]}'::counter.pncounter OPERATOR(counter.=) '{"a":[5,2]}' AS differ,
       '{"a":[5,1]}'::counter.pncounter OPERATOR(counter.<>) '{"a":[5,2]}' AS not_equal;
SET search_path = counter, public;
SELECT c, count(*) FROM (VALUES ('{"a":[1,0]}'::pncounter), ('{"a":[1,0],"b":[0,0]}'), ('{"b":[1,0]}')) v(c)
GROUP BY c ORDER BY 2 DESC, 1::text;
SELECT count(*) AS distinct_states
FROM (SELECT DISTINCT c FROM (VALUES ('{"a":[1,0]}'::pncounter), ('{"a":[1,0]}'), ('{"b":[1,0]}')) v(c)) d;
SELECT count(*) AS hash_join_rows
FROM (VALUES ('{"a":[1,0]}'::pncounter), ('{"b":[1,0]}')) l(c)
JOIN (VALUES ('{"a":[1,0]}'::pncounter), ('{"a":[1,0]}')) r(c) ON l.c = r.c;
-- No ordering: order by the value instead.
SELECT c FROM (VALUES ('{"a":[1,0]}'::pncounter)) v(c) ORDER BY c;
\echo :LAST_ERROR_SQLSTATE
RESET search_path;
SELECT counter.pncounter_hash('{"a":[1,0]}') = counter.pncounter_hash('{"a":[1,0],"b":[0,0]}') AS same_hash,
       counter.pncounter_hash_extended('{"a":[1,0]}', 0) = counter.pncounter_hash_extended('{"a":[1,0]}', 0)
           AS same_extended_hash;

-- Binary form: version 1, node count, then per node: id length, id, P, N
-- (unsigned LEB128). send gives the stored bytes.
SELECT counter.pncounter_send('{}') AS empty,
       counter.pncounter_send('{"a":[5,1],"b":[300,0]}') AS two_nodes,
       octet_length(counter.pncounter_send('{"site_a":[1000000,1000]}')) AS bytes_for_one_node;
\i test/pncounter_functions.sql
SELECT counter_test.pncounter_recv('\x0100') AS empty,
       counter_test.pncounter_recv('\x0102016105010162ac0200') AS two_nodes;
-- recv accepts exactly the canonical bytes of a state: 22P03 otherwise.
SELECT counter_test.pncounter_recv('\x');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.pncounter_recv('\x02');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.pncounter_recv('\x0200');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.pncounter_recv('\x01');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.pncounter_recv('\x0101016105');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.pncounter_recv('\x010001');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.pncounter_recv('\x01020161050101610300');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.pncounter_recv('\x01020162050101610300');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.pncounter_recv('\x010101610000');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.pncounter_recv('\x01010161850000');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.pncounter_recv('\x0101000500');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.pncounter_recv('\x010101200500');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.pncounter_recv(('\x010140' || repeat('61', 64) || '0500')::bytea);
\echo :LAST_ERROR_SQLSTATE
-- P = 2^63 (ten bytes of LEB128), one past the largest total.
SELECT counter_test.pncounter_recv('\x010101618080808080808080800100');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.pncounter_recv('\x01010161ffffffffffffffff7f00') AS largest_total;
SELECT counter_test.pncounter_recv('\x01818001');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.pncounter_recv('\x018108');
\echo :LAST_ERROR_SQLSTATE
-- The aggregate's deserialize function validates the same way.
SELECT counter_test.pncounter_deserialize('\x0102016105010162ac0200') AS two_nodes;
SELECT counter_test.pncounter_deserialize('\x01020162050101610300');
\echo :LAST_ERROR_SQLSTATE
SELECT counter_test.pncounter_deserialize('\x02');
\echo :LAST_ERROR_SQLSTATE

-- The cast from bytea takes the binary form back, validated the same way
-- (22P03 for anything but the canonical bytes); the cast to bytea is free.
SELECT '\x0102016105010162ac0200'::bytea::counter.pncounter AS two_nodes,
       '\x0100'::bytea::counter.pncounter AS empty,
       counter.pncounter_send('{"a":[5,1],"b":[300,0]}')::counter.pncounter AS round_trip,
       ('{"a":[5,1],"b":[300,0]}'::counter.pncounter)::bytea = counter.pncounter_send('{"a":[5,1],"b":[300,0]}')
           AS to_bytea_is_send;
SELECT '\x'::bytea::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '\x02'::bytea::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '\x01'::bytea::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '\x0101016105'::bytea::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '\x01020162050101610300'::bytea::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '\x010101610000'::bytea::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '\x0101016105000000'::bytea::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT '\x01818001'::bytea::counter.pncounter;
\echo :LAST_ERROR_SQLSTATE
SELECT counter.pncounter_value('\x0101016105000000'::bytea::counter.pncounter);
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE pn_bytes (v counter.pncounter);
INSERT INTO pn_bytes VALUES ('\x0101016105ff'::bytea::counter.pncounter);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO pn_bytes VALUES ('\x01010161050a'::bytea::counter.pncounter);
SELECT v, v::bigint AS value FROM pn_bytes;
DROP TABLE pn_bytes;

-- In a table: each site updates its own node; a state from elsewhere is merged in.
CREATE TABLE page_views (page text PRIMARY KEY, views counter.pncounter NOT NULL DEFAULT '{}');
INSERT INTO page_views (page) VALUES ('/home'), ('/about');
UPDATE page_views SET views = counter.pncounter_increment(views, 3) WHERE page = '/home';
UPDATE page_views SET views = counter.pncounter_decrement(views, 1) WHERE page = '/home';
UPDATE page_views SET views = views OPERATOR(counter.||) '{"site_b":[10,2]}' WHERE page = '/home';
UPDATE page_views SET views = views OPERATOR(counter.||) '{"site_b":[7,1]}' WHERE page = '/home'; -- an older state: nothing changes
SELECT page, views, views::bigint AS value FROM page_views ORDER BY page;
DROP TABLE page_views;

-- The IMMUTABLE steps (node given, never the setting): the same states as
-- the STABLE forms, usable where only IMMUTABLE functions are (a generated
-- column here; a distributed UPDATE or upsert on Citus).
SELECT counter.pncounter_increment_at(NULL, 'site_a', 5) OPERATOR(counter.=) counter.pncounter_increment(NULL, 5, 'site_a') AS same_increment,
       counter.pncounter_decrement_at('{"site_a":[5,0]}', 'site_a', 2)
           OPERATOR(counter.=) counter.pncounter_decrement('{"site_a":[5,0]}', 2, 'site_a') AS same_decrement;
SELECT counter.pncounter_increment_at(counter.pncounter_decrement_at(NULL, 'b'), 'a', 3) AS two_nodes;
SELECT counter.pncounter_increment_at(NULL, NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.pncounter_decrement_at(NULL, 'a', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.pncounter_increment_at(NULL, 'a', NULL);
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE pn_gen (n int, c counter.pncounter GENERATED ALWAYS AS (counter.pncounter_increment_at(NULL, 'gen', n)) STORED);
INSERT INTO pn_gen VALUES (3), (4);
SELECT n, c FROM pn_gen ORDER BY n;
DROP TABLE pn_gen;
CREATE TABLE pn_gen (n int, c counter.pncounter GENERATED ALWAYS AS (counter.pncounter_increment(NULL, n, 'gen')) STORED);
\echo :LAST_ERROR_SQLSTATE

-- The merge aggregate keeps a counter.pncounter state (what Citus pushes
-- down): NULLs skipped, NULL over no states, the same bytes in parallel, in
-- a window, and for a role with no privileges.
CREATE TABLE pn_many AS
SELECT g % 10 AS grp, counter.pncounter_increment_at(NULL, 'n' || (g % 4), g % 6 + 1) AS c FROM generate_series(1, 5000) g;
INSERT INTO pn_many VALUES (1, NULL), (11, NULL);
SELECT grp, counter.pncounter_merge_agg(c) FROM pn_many GROUP BY grp ORDER BY grp;
SELECT counter.pncounter_merge_agg(c) IS NULL AS no_rows FROM pn_many WHERE false;
SELECT counter.pncounter_merge_agg(c ORDER BY grp DESC) AS ordered FROM pn_many;
ALTER TABLE pn_many SET (parallel_workers = 2);
ANALYZE pn_many;
CREATE TABLE pn_serial AS SELECT grp, counter.pncounter_merge_agg(c) AS m FROM pn_many GROUP BY grp;
SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2; SET enable_hashagg = off;
SELECT count(*) AS groups, bool_and(s.m::text IS NOT DISTINCT FROM p.m::text) AS parallel_agrees
FROM pn_serial s JOIN (SELECT grp, counter.pncounter_merge_agg(c) AS m FROM pn_many GROUP BY grp) p USING (grp);
RESET parallel_setup_cost; RESET parallel_tuple_cost; RESET min_parallel_table_scan_size;
RESET max_parallel_workers_per_gather; RESET enable_hashagg;
CREATE TABLE pn_win AS SELECT row_number() OVER (ORDER BY grp, c::text) AS i, c FROM pn_many WHERE c IS NOT NULL LIMIT 300;
SELECT bool_and(w OPERATOR(counter.=) (SELECT counter.pncounter_merge_agg(c) FROM pn_win p2 WHERE p2.i BETWEEN p1.i - 3 AND p1.i)) AS window_agrees
FROM (SELECT i, counter.pncounter_merge_agg(c) OVER (ORDER BY i ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS w FROM pn_win) p1;
SELECT counter.pncounter_merge_trans('{"a":[1,0]}', '{"b":[2,0]}');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.pncounter_merge_trans(NULL, NULL) IS NULL AS null_merge;
SELECT counter.pncounter_merge_final('{"a":[1,0]}') AS final_is_identity;
CREATE ROLE pn_nobody;
GRANT SELECT ON pn_many, pn_serial TO pn_nobody;
SET ROLE pn_nobody;
SELECT counter.pncounter_merge_agg(c) OPERATOR(counter.=) (SELECT m FROM (SELECT counter.pncounter_merge_agg(m) AS m FROM pn_serial) x) AS as_nobody
FROM pn_many;
SELECT counter.pncounter_increment_at(NULL, 'nobody', 2) AS nobody_step;
SELECT counter.pncounter_merge_trans('{"a":[1,0]}', '{"b":[2,0]}');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP TABLE pn_many, pn_serial, pn_win;
DROP ROLE pn_nobody;

-- The objects carry the right markings.
SELECT p.proname, p.provolatile, p.proparallel, p.proisstrict
FROM pg_proc p WHERE p.pronamespace = 'counter'::regnamespace AND p.proname LIKE 'pncounter%'
ORDER BY p.proname;

-- Leave the database as we found it for the next test file.
DROP FUNCTION counter_test.pncounter_recv(bytea), counter_test.pncounter_deserialize(bytea);
DROP SCHEMA counter_test;
DROP EXTENSION counter_ext;
