-- counter.pncounter on malformed input: thousands of seeded random mutations
-- of valid text and binary forms (flipped, inserted, deleted bytes,
-- truncations). Every input is either accepted, and then is a canonical
-- state that round-trips, or refused with the documented SQLSTATE; never a
-- crash, never another error.
\i test/pncounter_functions.sql
BEGIN;
SELECT plan(6);
SELECT setseed(0.77);

CREATE SCHEMA pn_fuzz;

-- A random valid state of 0..6 nodes with totals of every size.
CREATE FUNCTION pn_fuzz.random_state() RETURNS counter.pncounter LANGUAGE plpgsql AS $$
DECLARE
    s counter.pncounter := '{}';
    i int;
BEGIN
    FOR i IN 1..floor(random() * 7)::int LOOP
        s := counter.pncounter_increment(s, (1 + floor(random() * (2 ^ (1 + floor(random() * 58)))))::bigint,
                                         node => 'n' || floor(random() * 10)::int);
        IF random() < 0.5 THEN
            s := counter.pncounter_decrement(s, 1 + floor(random() * 1e6)::bigint,
                                             node => 'n' || floor(random() * 10)::int);
        END IF;
    END LOOP;
    RETURN s;
END $$;

CREATE FUNCTION pn_fuzz.mutate_bytes(b bytea) RETURNS bytea LANGUAGE plpgsql AS $$
DECLARE
    i int;
    pos int;
BEGIN
    FOR i IN 1..1 + floor(random() * 3)::int LOOP
        pos := floor(random() * greatest(length(b), 1))::int;
        CASE floor(random() * 5)::int
            WHEN 0 THEN IF length(b) > 0 THEN b := set_byte(b, pos, floor(random() * 256)::int); END IF;
            WHEN 1 THEN IF length(b) > 0 THEN b := set_byte(b, pos, get_byte(b, pos) # (1 << floor(random() * 8)::int)); END IF;
            WHEN 2 THEN b := substring(b FROM 1 FOR pos) || decode(lpad(to_hex(floor(random() * 256)::int), 2, '0'), 'hex')
                             || substring(b FROM pos + 1);
            WHEN 3 THEN b := substring(b FROM 1 FOR pos) || substring(b FROM pos + 2);
            ELSE b := substring(b FROM 1 FOR pos);
        END CASE;
    END LOOP;
    RETURN b;
END $$;

CREATE FUNCTION pn_fuzz.mutate_text(t text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    alphabet text := '{}[]":,-0123456789 ae_.x' || chr(233) || E'\t';
    i int;
    pos int;
BEGIN
    FOR i IN 1..1 + floor(random() * 3)::int LOOP
        pos := floor(random() * (length(t) + 1))::int;
        CASE floor(random() * 4)::int
            WHEN 0 THEN t := overlay(t PLACING substr(alphabet, 1 + floor(random() * length(alphabet))::int, 1)
                                     FROM pos + 1 FOR 1);
            WHEN 1 THEN t := substr(t, 1, pos) || substr(alphabet, 1 + floor(random() * length(alphabet))::int, 1)
                             || substr(t, pos + 1);
            WHEN 2 THEN t := substr(t, 1, pos) || substr(t, pos + 2);
            ELSE t := substr(t, 1, pos) || '99999999999999999999' || substr(t, pos + 1);
        END CASE;
    END LOOP;
    RETURN t;
END $$;

-- outcome: 'ok' (accepted and canonical), an SQLSTATE, or 'BAD: ...'.
CREATE FUNCTION pn_fuzz.try_recv(b bytea) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    s counter.pncounter;
BEGIN
    s := counter_test.pncounter_recv(b);
    IF counter.pncounter_send(s) <> b THEN
        RETURN 'BAD: accepted a non-canonical encoding ' || b::text;
    END IF;
    IF s::text::counter.pncounter OPERATOR(counter.<>) s THEN
        RETURN 'BAD: no text round trip for ' || s::text;
    END IF;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;

CREATE FUNCTION pn_fuzz.try_deserialize(b bytea) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    IF counter.pncounter_send(counter_test.pncounter_deserialize(b)) <> b THEN
        RETURN 'BAD: accepted a non-canonical encoding ' || b::text;
    END IF;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;

CREATE FUNCTION pn_fuzz.try_in(t text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    s counter.pncounter;
BEGIN
    s := t::counter.pncounter;
    IF s::text::counter.pncounter OPERATOR(counter.<>) s
       OR counter_test.pncounter_recv(counter.pncounter_send(s)) OPERATOR(counter.<>) s THEN
        RETURN 'BAD: no round trip for ' || t;
    END IF;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;

CREATE TABLE pn_fuzz.bin AS
SELECT g, m, pn_fuzz.try_recv(m) AS recv, pn_fuzz.try_deserialize(m) AS deserialize
FROM (SELECT g, pn_fuzz.mutate_bytes(counter.pncounter_send(pn_fuzz.random_state())) AS m
      FROM generate_series(1, 4000) g) x;

CREATE TABLE pn_fuzz.txt AS
SELECT g, pn_fuzz.try_in(pn_fuzz.mutate_text(pn_fuzz.random_state()::text)) AS outcome
FROM generate_series(1, 4000) g;

SELECT is_empty($$ SELECT recv FROM pn_fuzz.bin WHERE recv NOT IN ('ok', '22P03', '54000') $$,
                'mutated bytes: recv accepts canonical states only, otherwise 22P03 or 54000');
SELECT is_empty($$ SELECT deserialize FROM pn_fuzz.bin WHERE deserialize NOT IN ('ok', '22P03', '54000') $$,
                'mutated bytes: the aggregate''s deserialize behaves like recv');
SELECT is_empty($$ SELECT g FROM pn_fuzz.bin WHERE recv <> deserialize $$,
                'recv and deserialize agree on every input');
SELECT ok((SELECT count(*) FILTER (WHERE recv = 'ok') > 100 AND count(*) FILTER (WHERE recv = '22P03') > 1000
           FROM pn_fuzz.bin), 'the byte mutations produce both accepted and refused inputs');
SELECT is_empty($$ SELECT outcome FROM pn_fuzz.txt WHERE outcome NOT IN ('ok', '22P02', '22003', '54000') $$,
                'mutated text: accepted and round-trips, otherwise 22P02, 22003 or 54000');
SELECT ok((SELECT count(*) FILTER (WHERE outcome = 'ok') > 100 AND count(*) FILTER (WHERE outcome = '22P02') > 1000
           FROM pn_fuzz.txt), 'the text mutations produce both accepted and refused inputs');

SELECT * FROM finish();
ROLLBACK;
