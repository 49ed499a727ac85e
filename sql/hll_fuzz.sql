-- counter.hll fuzz: 100,000 random and mutated inputs through the bytea cast
-- (and one in eight also through the text input). Every input is either
-- accepted as a well-formed sketch that every function can use, or refused
-- with 22P03 (22P02 for text syntax); never another error, never a crash.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS counter_ext;
RESET client_min_messages;
SELECT setseed(0.31);

CREATE TEMP TABLE seeds AS
SELECT row_number() OVER () AS i, b FROM (
    SELECT counter.hll_empty(p)::bytea AS b FROM (VALUES (4), (11), (14), (18)) v(p)
    UNION ALL
    SELECT counter.hll_add_agg(g, p)::bytea FROM (VALUES (1, 14), (2, 14), (10, 14), (100, 14), (1000, 14),
        (6000, 14), (30, 4), (3, 5), (200, 9), (100, 18), (40000, 11), (100000, 4), (20000, 8)) v(n, p),
        generate_series(1, n) g GROUP BY n, p
) x;

CREATE FUNCTION pg_temp.random_bytes(n int) RETURNS bytea LANGUAGE sql AS $$
    SELECT decode(substr(string_agg(md5(random()::text), ''), 1, 2 * n), 'hex')
    FROM generate_series(0, n / 16)
$$;

CREATE FUNCTION pg_temp.fuzz(iterations int) RETURNS TABLE (outcome text, inputs bigint)
LANGUAGE plpgsql AS $$
DECLARE
    seed_count int := (SELECT count(*) FROM seeds);
    seed_bytes bytea[] := (SELECT array_agg(b ORDER BY i) FROM seeds);
    v bytea;
    s counter.hll;
    base bytea;
    kind int;
    len int;
    pos int;
    n_ok bigint := 0;
    n_refused bigint := 0;
    n_text_refused bigint := 0;
    n_other bigint := 0;
    n_broken bigint := 0;
    card float8;
BEGIN
    FOR it IN 1 .. iterations LOOP
        base := seed_bytes[1 + floor(random() * seed_count)::int];
        len := length(base);
        kind := floor(random() * 7)::int;
        IF kind = 0 THEN       -- random bytes
            v := pg_temp.random_bytes(floor(random() * 24)::int);
        ELSIF kind = 1 THEN    -- random bytes after a plausible header
            v := set_byte(set_byte('\x0000'::bytea, 0, 1), 1, floor(random() * 256)::int)
                 || pg_temp.random_bytes(floor(random() * 40)::int);
        ELSIF kind = 2 THEN    -- a few bytes of a valid sketch overwritten
            v := base;
            FOR k IN 1 .. 1 + floor(random() * 3)::int LOOP
                pos := floor(random() * length(v))::int;
                v := set_byte(v, pos, floor(random() * 256)::int);
            END LOOP;
        ELSIF kind = 3 THEN    -- one bit flipped
            v := base;
            pos := floor(random() * length(v) * 8)::int;
            v := set_bit(v, pos, 1 - get_bit(v, pos));
        ELSIF kind = 4 THEN    -- truncated
            v := substr(base, 1, floor(random() * len)::int);
        ELSIF kind = 5 THEN    -- extended
            v := base || pg_temp.random_bytes(1 + floor(random() * 3)::int);
        ELSE                   -- spliced from two valid sketches
            v := substr(base, 1, floor(random() * len)::int)
                 || substr(seed_bytes[1 + floor(random() * seed_count)::int], 1 + floor(random() * 12)::int);
        END IF;

        BEGIN
            s := v::counter.hll;
            -- accepted: every function works on it and the value is canonical
            card := counter.hll_cardinality(s);
            IF NOT (card >= 0 AND card < 1e19)
               OR (s OPERATOR(counter.||) s)::bytea <> v
               OR counter.hll_union(s, counter.hll_empty(18))::bytea <> v
               OR (counter.hll_info(s)).bytes <> length(v)
               OR counter.hll_add(s, it) IS NULL THEN
                n_broken := n_broken + 1;
            END IF;
            n_ok := n_ok + 1;
        EXCEPTION
            WHEN invalid_binary_representation THEN
                n_refused := n_refused + 1;
            WHEN OTHERS THEN
                n_other := n_other + 1;
                RAISE WARNING 'input % gave % %', v, SQLSTATE, SQLERRM;
        END;

        IF it % 8 = 0 THEN
            BEGIN
                s := ('\x' || encode(v, 'hex'))::counter.hll;
            EXCEPTION
                WHEN invalid_binary_representation OR invalid_text_representation THEN
                    n_text_refused := n_text_refused + 1;
                WHEN OTHERS THEN
                    n_other := n_other + 1;
                    RAISE WARNING 'text input % gave % %', v, SQLSTATE, SQLERRM;
            END;
        END IF;
    END LOOP;
    RETURN QUERY VALUES ('inputs', iterations::bigint), ('any error but 22P03/22P02', n_other),
                        ('accepted but broken', n_broken),
                        ('accepted or refused with 22P03', n_ok + n_refused),
                        ('accepted (valid mutations)', n_ok), ('refused with 22P03', n_refused),
                        ('text input refused', n_text_refused);
END $$;

SET client_min_messages = warning;
SELECT * FROM pg_temp.fuzz(100000);

-- Leave the database as it was found: other test files create the extension.
SET client_min_messages = warning;
DROP EXTENSION counter_ext CASCADE;
RESET client_min_messages;
