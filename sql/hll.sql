-- counter.hll: the SQL surface, the pinned hash, the representations, and
-- every way a malformed value is refused.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS counter_ext;
RESET client_min_messages;
\set ON_ERROR_STOP 0
\set SHOW_CONTEXT never
SET search_path = counter, public;
SET extra_float_digits = 0;

-- ---- the pinned hash: XXH3-64, seed 0 (golden values from the reference xxhsum -H3)
SELECT lpad(to_hex(hll_hash(''::text)), 16, '0') AS empty_text,      -- 2d06800538d394c2
       lpad(to_hex(hll_hash('ab'::text)), 16, '0') AS ab,            -- a873719c24d5735c
       lpad(to_hex(hll_hash('abc'::text)), 16, '0') AS abc,          -- 78af5f94892f3950
       lpad(to_hex(hll_hash('hello'::text)), 16, '0') AS hello,      -- 9555e8555c62dcfd
       lpad(to_hex(hll_hash('abcdefghijkl'::text)), 16, '0') AS twelve; -- 52beba2086c3f6d7
SELECT lpad(to_hex(hll_hash('The quick brown fox jumps over the lazy dog'::text)), 16, '0') AS fox, -- ce7d19a5418fb365
       lpad(to_hex(hll_hash(repeat('y', 100))), 16, '0') AS y100,    -- 317b1a1ea1e09bb5
       lpad(to_hex(hll_hash(repeat('x', 200))), 16, '0') AS x200,    -- 50ef124fb1e4de53
       lpad(to_hex(hll_hash(repeat('abcdefghij', 30))), 16, '0') AS a300,    -- 39e8cd0956fe8cc2
       lpad(to_hex(hll_hash(repeat('0123456789', 200))), 16, '0') AS d2000;  -- bb5c092b45e50578
-- integers: the 8 little-endian bytes of the int64 value, whatever the width
SELECT to_hex(hll_hash(5::int2)) AS i2, to_hex(hll_hash(5::int4)) AS i4, to_hex(hll_hash(5::int8)) AS i8,
       to_hex(hll_hash(5::numeric)) AS num, to_hex(hll_hash(5.000::numeric)) AS num_scaled,
       to_hex(hll_hash(5::oid)) AS oid;                      -- 8e03e9aa39aaa78c
SELECT to_hex(hll_hash(-1::int8)) AS minus_one,             -- 5111c7e47d784413
       to_hex(hll_hash(0::int4)) AS zero;                    -- c77b3abb6f87acd9
-- uuid: its 16 bytes; bytea and varchar: their bytes, like text
SELECT to_hex(hll_hash('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid)) AS uuid, -- 55df69482c6d3767
       hll_hash('abc'::bytea) = hll_hash('abc'::text) AS bytea_is_text,
       hll_hash('abc'::varchar) = hll_hash('abc'::text) AS varchar_is_text,
       hll_hash('abc  '::char(5)) = hll_hash('abc'::text) AS bpchar_ignores_trailing_spaces,
       hll_hash('abc'::name) = hll_hash('abc'::text) AS name_is_text;
-- numeric: integral values as integers, others by normalized text ('1.5')
SELECT to_hex(hll_hash(1.50::numeric)) AS num_1_5,         -- 3d006affbf7f50ee
       hll_hash(1.5::numeric) = hll_hash(1.500::numeric) AS trailing_zeros_ignored,
       hll_hash(99999999999999999999::numeric) = hll_hash('99999999999999999999'::text) AS beyond_int64_is_text;
-- floats: the big-endian bytes of the float8 value; -0 is 0, float4 widens
SELECT to_hex(hll_hash(1.5::float8)) AS f8,                 -- 63df53725e097d8e
       hll_hash(1.5::float4) = hll_hash(1.5::float8) AS float4_widens,
       hll_hash('-0'::float8) = hll_hash(0::float8) AS minus_zero;
-- timestamps and dates: their binary send form (big-endian int64 / int32)
SELECT hll_hash('2000-01-01 00:00:00.000005'::timestamp) = hll_hash('2000-01-01 00:00:00.000005+00'::timestamptz)
           AS ts_tstz_same_instant,
       hll_hash('2000-01-01 00:00:01'::timestamp) <> hll_hash(1000000::int8) AS ts_not_int;
-- any other type: its binary send form; domains hash as their base type
CREATE DOMAIN pg_temp.visitor AS bigint;
SELECT hll_hash(5::pg_temp.visitor) = hll_hash(5) AS domain_as_base,
       hll_hash(true) <> hll_hash(false) AS bool_by_send,
       hll_hash('10.0.0.1'::inet) <> hll_hash('10.0.0.2'::inet) AS inet_by_send;

-- ---- building sketches
SELECT hll_empty() AS empty_default, hll_empty(11) AS empty_11, hll_empty(NULL) AS empty_null;
SELECT hll_info(hll_empty());
SELECT hll_add(hll_empty(), 1) AS one, #hll_add(hll_empty(), 1) AS card;
SELECT hll_add(hll_empty(), 5::int2) = hll_add(hll_empty(), 5::int8) AS widths_agree;
SELECT hll_add(hll_add(hll_empty(), 1), 1) = hll_add(hll_empty(), 1) AS idempotent_add;
SELECT hll_add(hll_empty(), NULL::int) = hll_empty() AS null_value_ignored,
       hll_add(NULL, 1) IS NULL AS null_sketch_stays_null;

-- exact while sparse: the cardinality is the count, up to thousands
SELECT n, hll_cardinality(s) AS estimate, i.representation, i.bytes, i.entries
FROM (SELECT n, hll_add_agg(g) AS s
      FROM (VALUES (1), (10), (100), (1000), (2000), (5000)) v(n), generate_series(1, n) g
      GROUP BY n) x, hll_info(s) i
ORDER BY n;
-- dense past the sparse limit: 5-bit registers, Rice-coded (about 3 bits each) when smaller
SELECT n, round(hll_cardinality(s)) AS estimate, abs(hll_cardinality(s) / n - 1) < 0.03 AS within_3pct,
       i.representation, i.bytes
FROM (SELECT n, hll_add_agg(g) AS s
      FROM (VALUES (10000), (100000)) v(n), generate_series(1, n) g
      GROUP BY n) x, hll_info(s) i
ORDER BY n;
SELECT precision, representation, bytes FROM hll_info((SELECT hll_add_agg(g, 11) FROM generate_series(1, 100000) g));

-- duplicates do not count; text, uuid, numeric values
SELECT #hll_add_agg(g % 100) AS hundred FROM generate_series(1, 10000) g;
SELECT hll_count_distinct(md5(g::text)) AS text_values FROM generate_series(1, 1234) g;
SELECT hll_count_distinct(('00000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid) AS uuids
FROM generate_series(1, 777) g;
SELECT hll_count_distinct(g::numeric / 4) AS quarters FROM generate_series(1, 400) g;

-- ---- empty input, FILTER and NULLs: the empty sketch, never NULL
SELECT hll_add_agg(g) AS no_rows, hll_union_agg(NULL::hll) AS union_no_rows, hll_count_distinct(g) AS count_no_rows
FROM generate_series(1, 10) g WHERE false;
SELECT hll_add_agg(g) FILTER (WHERE g > 100) AS filtered_out,
       hll_add_agg(NULL::int, 12) AS all_null_values,
       #hll_add_agg(CASE WHEN g % 2 = 0 THEN g END) AS nulls_skipped
FROM generate_series(1, 10) g;
SELECT hll_union_agg(s) AS union_of_nulls FROM (VALUES (NULL::hll), (NULL)) v(s);
SELECT hll_union(NULL, hll_empty()) IS NULL AS union_with_null_is_null;
-- over no rows, a constant precision argument still decides the precision
SELECT hll_add_agg(g, 12) AS no_rows_12, hll_add_agg(g, 6 + 4) AS no_rows_10,
       hll_add_agg(g, 12) FILTER (WHERE g > 100) AS filtered_out_12
FROM generate_series(1, 10) g WHERE g > 5;
SELECT hll_add_agg(g, 12) AS no_rows_12 FROM generate_series(1, 10) g WHERE false;
SELECT hll_add_agg(g, 3) FROM generate_series(1, 10) g WHERE false;
\echo :LAST_ERROR_SQLSTATE

-- ---- many values at once: hll_add_array
SELECT hll_add_array(hll_empty(), ARRAY[1, 2, 3, NULL, 2]) = hll_add_agg(g) AS same_as_aggregate
FROM generate_series(1, 3) g;
SELECT hll_add_array(hll_empty(), ARRAY[[1, 2], [3, 4]]) = hll_add_agg(g) AS any_dimensions,
       hll_add_array(hll_empty(), ARRAY[5::int2, 6::int2]) = hll_add_array(hll_empty(), ARRAY[5::int8, 6]) AS widths_agree,
       hll_add_array(hll_empty(), '{}'::text[]) = hll_empty() AS empty_array,
       hll_add_array(hll_empty(), NULL::int[]) = hll_empty() AS null_array,
       hll_add_array(NULL, ARRAY[1]) IS NULL AS null_sketch
FROM generate_series(1, 4) g;
SELECT round(#hll_add_array(hll_empty(11), array_agg(md5(g::text)))) AS text_values,
       hll_add_array(hll_empty(11), array_agg(md5(g::text))) = hll_add_agg(md5(g::text), 11) AS same_as_aggregate,
       (hll_info(hll_add_array(hll_empty(11), array_agg(md5(g::text))))).representation
FROM generate_series(1, 20000) g;
SELECT hll_add_array(hll_empty(), ARRAY[makeaclitem(10, 10, 'SELECT', false)]); -- no send function
\echo :LAST_ERROR_SQLSTATE
SELECT hll_add_array('\x012e01'::bytea::hll, ARRAY[1]);  -- a malformed sketch
\echo :LAST_ERROR_SQLSTATE
SELECT hll_add_array(hll_empty(), ARRAY['a'::text]) = hll_add(hll_empty(), 'a'::text) AS one_text,
       hll_add_array(hll_add(hll_empty(), 'x'::text), ARRAY['a', 'b']) = hll_add_agg(v) AS onto_a_sketch
FROM (VALUES ('x'), ('a'), ('b')) t(v);

-- ---- union: commutative, associative, idempotent; lower precision wins
WITH a AS (SELECT hll_add_agg(g) s FROM generate_series(1, 600) g),
     b AS (SELECT hll_add_agg(g) s FROM generate_series(400, 1000) g),
     c AS (SELECT hll_add_agg(g) s FROM generate_series(900, 3000) g)
SELECT #(a.s || b.s) AS a_or_b, (a.s || b.s) = (b.s || a.s) AS commutative,
       ((a.s || b.s) || c.s) = (a.s || (b.s || c.s)) AS associative,
       (a.s || a.s) = a.s AS idempotent, hll_union(a.s, b.s) = a.s OPERATOR(counter.||) b.s AS operator_form
FROM a, b, c;
WITH a AS (SELECT hll_add_agg(g, 16) s FROM generate_series(1, 50000) g),
     b AS (SELECT hll_add_agg(g, 12) s FROM generate_series(25001, 75000) g)
SELECT (hll_info(a.s || b.s)).precision AS folded_to,
       (a.s || b.s) = (SELECT hll_add_agg(g, 12) FROM generate_series(1, 75000) g) AS same_as_adding_at_12
FROM a, b;
-- sparse sketches fold too, exactly
SELECT (SELECT hll_add_agg(g, 16) FROM generate_series(1, 300) g) || hll_empty(13)
       = (SELECT hll_add_agg(g, 16) FROM generate_series(1, 300) g) AS empty_never_lowers,
       (SELECT hll_add_agg(g, 16) FROM generate_series(1, 300) g) || hll_add(hll_empty(13), 1)
       = (SELECT hll_add_agg(g, 13) FROM generate_series(1, 300) g) AS sparse_fold_exact;
SELECT hll_empty(13) || s = s AS empty_first_never_lowers, s || hll_empty(13) = s AS empty_last_never_lowers,
       hll_union_agg(x ORDER BY o) = s AS union_agg_empty_first, (hll_info(hll_union_agg(x ORDER BY o))).precision
FROM (SELECT hll_add_agg(g, 16) AS s FROM generate_series(1, 300) g) a,
     LATERAL (VALUES (1, hll_empty(12)), (2, hll_empty(13)), (3, s), (4, hll_empty(11))) v(o, x)
GROUP BY s;
SELECT hll_union_agg(s) = hll_add_agg_all AS union_agg_equals_add_agg
FROM (SELECT g % 7 AS k, hll_add_agg(g) AS s FROM generate_series(1, 20000) g GROUP BY 1) x,
     (SELECT hll_add_agg(g) AS hll_add_agg_all FROM generate_series(1, 20000) g) y
GROUP BY hll_add_agg_all;

-- the same set in any order and split gives the same bytes
SELECT setseed(0.5);
SELECT n,
       (SELECT hll_add_agg(g ORDER BY random()) FROM generate_series(1, n) g)
     = (SELECT hll_add_agg(g ORDER BY g DESC) FROM generate_series(1, n) g) AS order_free,
       (SELECT hll_union_agg(s ORDER BY random()) FROM (
            SELECT hll_add_agg(g) AS s FROM generate_series(1, n) g GROUP BY (g * 7919) % 13) x)
     = (SELECT hll_add_agg(g) FROM generate_series(1, n) g) AS split_free
FROM (VALUES (3), (500), (6000), (7000), (50000)) v(n);

-- ---- comparison, grouping, ordering
SELECT count(DISTINCT s) AS distinct_sketches
FROM (SELECT hll_add_agg(g % 3) AS s FROM generate_series(1, 30) g GROUP BY g % 5) x;
SELECT s, count(*) FROM (SELECT hll_add(hll_empty(), g % 2) AS s FROM generate_series(1, 10) g) x GROUP BY s ORDER BY s;
SELECT hll_empty() < hll_add(hll_empty(), 1) AS lt, hll_empty() <> hll_empty(12) AS precision_differs;

-- ---- typmod
CREATE TEMP TABLE daily (day int PRIMARY KEY, visitors hll(12));
INSERT INTO daily VALUES (1, (SELECT hll_add_agg(g, 14) FROM generate_series(1, 20000) g));
INSERT INTO daily VALUES (2, hll_empty(16));
SELECT day, (hll_info(visitors)).precision, round((#visitors) / 1000) AS thousands FROM daily ORDER BY day;
SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'daily'::regclass AND attname = 'visitors';
INSERT INTO daily VALUES (3, hll_empty(10) || hll_add(hll_empty(10), 1));
\echo :LAST_ERROR_SQLSTATE
SELECT hll_empty()::hll(3);
\echo :LAST_ERROR_SQLSTATE
SELECT '\x010e'::hll(19);
\echo :LAST_ERROR_SQLSTATE
CREATE TEMP TABLE bad_mod (s hll(12, 5));
\echo :LAST_ERROR_SQLSTATE
SELECT '\x0112'::hll(14) AS literal_folds_to_typmod;

-- ---- bad arguments
SELECT hll_empty(3);
\echo :LAST_ERROR_SQLSTATE
SELECT hll_empty(19);
\echo :LAST_ERROR_SQLSTATE
SELECT hll_add_agg(g, 2) FROM generate_series(1, 3) g;
\echo :LAST_ERROR_SQLSTATE
SELECT hll_add(hll_empty(), makeaclitem(10, 10, 'SELECT', false)); -- aclitem has no send function
\echo :LAST_ERROR_SQLSTATE

-- ---- text and binary forms round-trip; bytea casts
SELECT s::text::hll = s AS text_round_trip, s::bytea::hll = s AS bytea_round_trip,
       length(s::bytea) = (hll_info(s)).bytes AS bytea_is_storage
FROM (SELECT hll_add_agg(g) AS s FROM generate_series(1, 100) g) x;
SELECT '\x010e'::hll AS empty14, '\x010E'::hll AS upper_hex_ok;

-- ---- every way in refuses malformed values (22P02 text syntax, 22P03 bytes)
SELECT ''::hll;
\echo :LAST_ERROR_SQLSTATE
SELECT 'abc'::hll;
\echo :LAST_ERROR_SQLSTATE
SELECT '\x0'::hll;
\echo :LAST_ERROR_SQLSTATE
SELECT '\xzz'::hll;
\echo :LAST_ERROR_SQLSTATE
SELECT '\x'::hll;                 -- no bytes
\echo :LAST_ERROR_SQLSTATE
SELECT '\x01'::hll;               -- truncated header
\echo :LAST_ERROR_SQLSTATE
SELECT '\x030e'::hll;             -- unknown version
\echo :LAST_ERROR_SQLSTATE
SELECT '\x020e'::hll;             -- version 2 holds sparse sketches only
\echo :LAST_ERROR_SQLSTATE
SELECT '\x022e0164f1be'::hll;     -- version 2 sparse, truncated entry
\echo :LAST_ERROR_SQLSTATE
SELECT '\x022e0164f1be0400'::hll; -- version 2 sparse, trailing byte
\echo :LAST_ERROR_SQLSTATE
SELECT '\x0103'::hll;             -- precision 3
\echo :LAST_ERROR_SQLSTATE
SELECT '\x0113'::hll;             -- precision 19
\echo :LAST_ERROR_SQLSTATE
SELECT '\x018e'::hll;             -- representation 4
\echo :LAST_ERROR_SQLSTATE
SELECT '\x010e00'::hll;           -- trailing byte after an empty sketch
\echo :LAST_ERROR_SQLSTATE
SELECT '\x012e'::hll;             -- sparse, no entry count
\echo :LAST_ERROR_SQLSTATE
SELECT '\x012e00'::hll;           -- sparse with 0 entries
\echo :LAST_ERROR_SQLSTATE
SELECT '\x012e01'::hll;           -- one entry, no bits
\echo :LAST_ERROR_SQLSTATE
SELECT '\x012e01e594'::hll;       -- truncated entry
\echo :LAST_ERROR_SQLSTATE
SELECT '\x012e01e594cf00'::hll;   -- trailing byte
\echo :LAST_ERROR_SQLSTATE
SELECT '\x012e01e5944f'::hll;     -- high-bit bitmap never ends
\echo :LAST_ERROR_SQLSTATE
SELECT '\x012e02e5944f39e563'::hll; -- two equal entries
\echo :LAST_ERROR_SQLSTATE
SELECT '\x012e02e903c0000060'::hll; -- entries not increasing (second below first)
\echo :LAST_ERROR_SQLSTATE
SELECT '\x012e01000080'::hll;     -- an entry of value 0 needs its rho field
\echo :LAST_ERROR_SQLSTATE
SELECT '\x012e0100008000'::hll;   -- rho field 0
\echo :LAST_ERROR_SQLSTATE
SELECT '\x012e0100008003'::hll AS value_zero_rho_3;
SELECT '\x012e8100e594cf'::hll;   -- overlong entry count
\echo :LAST_ERROR_SQLSTATE
SELECT '\x012effff7f'::hll;       -- entry count beyond the sparse limit
\echo :LAST_ERROR_SQLSTATE
SELECT ('\x014e' || repeat('00', 10240))::hll; -- dense with no register set
\echo :LAST_ERROR_SQLSTATE
SELECT ('\x014e' || repeat('00', 10239))::hll; -- dense, one byte short
\echo :LAST_ERROR_SQLSTATE
SELECT ('\x014e' || repeat('21', 10241))::hll; -- dense, one byte long
\echo :LAST_ERROR_SQLSTATE
SELECT ('\x014e' || repeat('ff', 10240))::hll; -- all registers 31, packed: valid but not canonical
\echo :LAST_ERROR_SQLSTATE
SELECT hll_info(('\x016e1f00' || repeat('00', 2048))::hll) AS all_31_rice_coded; -- the canonical form of it
SELECT '\x016e1f00'::hll;         -- dense_rice with no registers
\echo :LAST_ERROR_SQLSTATE
SELECT ('\x016e1f00' || repeat('00', 2047))::hll; -- dense_rice, one byte short
\echo :LAST_ERROR_SQLSTATE
SELECT ('\x016e1f00' || repeat('00', 2049))::hll; -- dense_rice, one trailing byte
\echo :LAST_ERROR_SQLSTATE
SELECT ('\x016e2000' || repeat('00', 2048))::hll; -- dense_rice, base 32
\echo :LAST_ERROR_SQLSTATE
SELECT ('\x016e1f04' || repeat('00', 2048))::hll; -- dense_rice, Rice parameter 4
\echo :LAST_ERROR_SQLSTATE
SELECT ('\x016e1e000f' || repeat('00', 2047))::hll; -- dense_rice, a register coded as 32
\echo :LAST_ERROR_SQLSTATE
SELECT ('\x016e1f00' || repeat('ff', 2048))::hll; -- dense_rice, unary run past the end
\echo :LAST_ERROR_SQLSTATE
-- the same through the bytea cast
SELECT '\x0103'::bytea::hll;
\echo :LAST_ERROR_SQLSTATE
SELECT '\x012e01e594cf00'::bytea::hll;
\echo :LAST_ERROR_SQLSTATE
SELECT ''::bytea::hll;
\echo :LAST_ERROR_SQLSTATE
-- and through binary COPY (hll_recv)
SET client_min_messages = warning;
CREATE FUNCTION pg_temp.via_recv(bytes bytea) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    path text := format('/tmp/counter_ext_hll_recv_%s.bin', pg_backend_pid());
    result text;
BEGIN
    CREATE TEMP TABLE IF NOT EXISTS recv_in (b bytea);
    CREATE TEMP TABLE IF NOT EXISTS recv_out (s counter.hll);
    TRUNCATE recv_in, recv_out;
    INSERT INTO recv_in VALUES (bytes);
    EXECUTE format('COPY recv_in TO %L (FORMAT binary)', path);
    BEGIN
        EXECUTE format('COPY recv_out FROM PROGRAM %L (FORMAT binary)', format('{ rm -f %s; cat; } < %s', path, path));
        SELECT 'ok ' || s::text INTO result FROM recv_out;
    EXCEPTION WHEN OTHERS THEN
        result := SQLSTATE || ' ' || SQLERRM;
    END;
    RETURN result;
END $$;
SELECT b, pg_temp.via_recv(b) FROM (VALUES ('\x012e01e594cf'::bytea), ('\x01'), ('\x020e'), ('\x0103'),
    ('\x012e01e594cf00'), ('\x012e01e5944f'), ('')) v(b);
RESET client_min_messages;

-- ---- sparse entries of 26 bits: exact counts up to about 1,000 values
-- (100 disjoint sets of 1,000 values; the hashes are pinned, so the verdict
-- is fixed: a 23-bit entry made 6 of them one short)
SELECT count(*) FILTER (WHERE #s = 1000) AS exact_of_100, min(#s) AS lowest, max(#s) AS highest,
       bool_and((hll_info(s)).representation = 'sparse') AS all_sparse
FROM (SELECT t, hll_add_agg(t::bigint * 1000000000 + g) AS s
      FROM generate_series(1, 100) t, generate_series(1, 1000) g GROUP BY t) x;

-- ---- format version 1 (counter_ext 1.0): 23-bit sparse entries are still read,
-- and a union with one keeps its width (23 bits: it cannot be widened)
SELECT '\x012e012cde97'::hll AS v1_one, #'\x012e012cde97'::hll AS card,
       (hll_info('\x012e012cde97')).format_version AS v1,
       (hll_info(hll_add(hll_empty(), 1))).format_version AS v2;
SELECT hll_union('\x012e012cde97', hll_add(hll_empty(), 1)) AS same_value_v1,
       hll_add('\x012e012cde97'::hll, 1) = '\x012e012cde97' AS add_keeps_v1,
       hll_add('\x012e012cde97'::hll, 2) AS v1_two,
       #hll_add('\x012e012cde97'::hll, 2) AS two;
-- canonical within version 1: any split, any order, aggregate or scalar union
WITH v AS (SELECT g FROM generate_series(2, 3000) g),
     whole AS (SELECT hll_union('\x012e012cde97', hll_add_agg(g)) AS s FROM v),
     parts AS (SELECT hll_union_agg(s ORDER BY k DESC) AS s
               FROM (SELECT g % 7 AS k, hll_add_agg(g) AS s FROM v GROUP BY 1
                     UNION ALL SELECT 99, '\x012e012cde97') x)
SELECT w.s = p.s AS splits_agree, (hll_info(w.s)).format_version AS version,
       (hll_info(w.s)).representation AS repr, #w.s AS estimate
FROM whole w, parts p;
-- narrowed entries keep the registers: once dense, the union equals the
-- version 2 sketch of the same values (dense bytes are version 1 in both)
SELECT hll_union('\x012e012cde97'::hll(12), hll_add_agg(g, 12)) = hll_add_agg(g, 12) AS dense_agrees,
       (hll_info(hll_union('\x012e012cde97'::hll(12), hll_add_agg(g, 12)))).representation AS repr
FROM generate_series(1, 3000) g;
-- At precision 18 a version 2 entry needs its rho field when its 8 low bits
-- are zero, a version 1 entry when its 5 low bits are: narrowing computes the
-- missing ones from the dropped bits (about 3,000 entries here). '\x0132...'
-- is the version 1 sketch of the value 1 at precision 18.
SELECT (hll_info(n)).format_version AS narrowed_version, (hll_info(n)).representation AS narrowed_repr,
       hll_union(n, hll_add_agg(g, 18) FILTER (WHERE g > 100000)) = hll_add_agg(g, 18) AS narrowed_then_dense_agrees
FROM (SELECT hll_union('\x0132012cde97', hll_add_agg(g, 18)) AS n FROM generate_series(1, 100000) g) x,
     generate_series(1, 250000) g
GROUP BY n;

-- ---- hll_count_distinct over smallint, integer, bigint, text, uuid: a
-- counter.hll state with a combine function (what Citus pushes down). The
-- counts are those of the sketch of the same values; NULLs are skipped; no
-- rows count 0; other types keep the anyelement form.
CREATE TABLE cd AS
SELECT g, (g % 300)::smallint AS si, (g * 7919) % 5003 AS i4, (g::bigint * 1000003) % 40009 AS i8,
       md5((g % 3001)::text) AS t, md5((g % 2500)::text)::uuid AS u
FROM generate_series(1, 20000) g;
INSERT INTO cd VALUES (0, NULL, NULL, NULL, NULL, NULL);
SELECT hll_count_distinct(si) AS si, hll_count_distinct(i4) AS i4, hll_count_distinct(i8) AS i8,
       hll_count_distinct(t) AS t, hll_count_distinct(u) AS u FROM cd;
SELECT hll_count_distinct(si) = round(#hll_add_agg(si)) AS si, hll_count_distinct(i4) = round(#hll_add_agg(i4)) AS i4,
       hll_count_distinct(i8) = round(#hll_add_agg(i8)) AS i8, hll_count_distinct(t) = round(#hll_add_agg(t)) AS t,
       hll_count_distinct(u) = round(#hll_add_agg(u)) AS u
FROM cd;
SELECT count(*) AS groups, bool_and(c = round(e)) AS all_agree
FROM (SELECT g % 37, hll_count_distinct(i4) AS c, #hll_add_agg(i4) AS e FROM cd GROUP BY 1) x;
SELECT hll_count_distinct(i4) AS none, hll_count_distinct(t) AS none_text FROM cd WHERE g < 0;
SELECT hll_count_distinct(i4) AS only_nulls FROM cd WHERE g = 0;
-- which form each type gets: no ambiguity for the types around them
SELECT p.oid::regprocedure AS aggregate, t.typname AS state
FROM pg_aggregate a JOIN pg_proc p ON p.oid = a.aggfnoid JOIN pg_type t ON t.oid = a.aggtranstype
WHERE p.proname = 'hll_count_distinct' ORDER BY 1::text;
SELECT hll_count_distinct(t::varchar) = hll_count_distinct(t) AS varchar_as_text,
       hll_count_distinct(t::name) = hll_count_distinct(t) AS name_as_text,
       hll_count_distinct(i4::numeric) AS numeric_anyelement, hll_count_distinct(DATE '2020-01-01' + si) AS date_anyelement
FROM cd;
SELECT hll_count_distinct('a') AS unknown_literal_is_text;
-- the default precision applies, as for hll_add_agg
SET counter_ext.hll_default_precision = 10;
SELECT hll_count_distinct(i4) = round(#hll_add_agg(i4, 10)) AS default_precision_10 FROM cd;
RESET counter_ext.hll_default_precision;
-- parallel partial aggregates combine to the same counts
CREATE TABLE cd_big AS SELECT g % 50 AS k, g AS v, md5(g::text) AS t FROM generate_series(1, 60000) g;
ALTER TABLE cd_big SET (parallel_workers = 2);
ANALYZE cd_big;
CREATE TABLE cd_serial AS SELECT k, hll_count_distinct(v) AS v, hll_count_distinct(t) AS t FROM cd_big GROUP BY k;
SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2; SET enable_hashagg = off;
SELECT count(*) AS groups, bool_and(s.v = p.v AND s.t = p.t) AS parallel_agrees
FROM cd_serial s JOIN (SELECT k, hll_count_distinct(v) AS v, hll_count_distinct(t) AS t FROM cd_big GROUP BY k) p USING (k);
SELECT hll_count_distinct(v) = (SELECT round(#hll_add_agg(v)) FROM cd_big) AS parallel_whole FROM cd_big;
RESET parallel_setup_cost; RESET parallel_tuple_cost; RESET min_parallel_table_scan_size;
RESET max_parallel_workers_per_gather; RESET enable_hashagg;
-- in a window with a moving frame (the aggregate restarts)
SELECT bool_and(w = (SELECT hll_count_distinct(i4) FROM cd c2 WHERE c2.g BETWEEN c1.g - 2 AND c1.g)) AS window_agrees
FROM (SELECT g, hll_count_distinct(i4) OVER (ORDER BY g ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS w FROM cd WHERE g < 200) c1;
-- its support functions are for the aggregate only; the final one reads any sketch
SELECT hll_count_trans(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT hll_count_combine(hll_empty(), hll_add(hll_empty(), 1));
\echo :LAST_ERROR_SQLSTATE
SELECT hll_count_combine(NULL, NULL) IS NULL AS null_combine;
SELECT hll_count_final(hll_add(hll_add(hll_empty(), 1), 2)) AS two, hll_count_final(NULL) AS zero;
SELECT hll_count_final('\x01'::bytea::hll);
\echo :LAST_ERROR_SQLSTATE
-- as a role with no privileges: the aggregates work, the support functions
-- still refuse outside an aggregate, and malformed bytes are refused
CREATE ROLE hll_nobody;
GRANT USAGE ON SCHEMA public TO hll_nobody;
GRANT SELECT ON cd TO hll_nobody;
SET ROLE hll_nobody;
SELECT hll_count_distinct(i4) = round(#hll_add_agg(i4)) AS as_nobody FROM cd;
SELECT hll_count_trans(hll_empty(), 'x'::text);
\echo :LAST_ERROR_SQLSTATE
SELECT hll_count_distinct(x) FROM (VALUES ('\x0102'::bytea::hll::text)) v(x);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP TABLE cd, cd_big, cd_serial;
REVOKE USAGE ON SCHEMA public FROM hll_nobody;
DROP ROLE hll_nobody;

-- Leave the database as it was found: other test files create the extension.
SET client_min_messages = warning;
DROP EXTENSION counter_ext CASCADE;
RESET client_min_messages;
