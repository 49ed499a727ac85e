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

-- The objects carry the right markings.
SELECT p.proname, p.provolatile, p.proparallel, p.proisstrict
FROM pg_proc p WHERE p.pronamespace = 'counter'::regnamespace AND p.proname LIKE 'pncounter%'
ORDER BY p.proname;

-- Leave the database as we found it for the next test file.
DROP FUNCTION counter_test.pncounter_recv(bytea), counter_test.pncounter_deserialize(bytea);
DROP SCHEMA counter_test;
DROP EXTENSION counter_ext;
