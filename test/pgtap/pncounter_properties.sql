-- counter.pncounter properties over random operation sequences (1,200 cases,
-- seeded, so every run replays the same cases):
--   merge is commutative, associative and idempotent;
--   replicas that receive each other's states in any order, with duplicates
--   and stale re-deliveries, converge on one state whose value is all
--   increments minus all decrements, and whose per-node totals are exactly
--   what each node did;
--   re-delivering any state ever seen changes nothing;
--   text and binary forms round-trip; the aggregate equals the operator.
-- Then the merge aggregate in a parallel plan (partial states serialized,
-- deserialized and combined) equals the serial result.
\i test/pncounter_functions.sql
BEGIN;
SELECT plan(14);
SELECT setseed(0.2026);

CREATE SCHEMA pn_prop;

-- One random case: returns (property, ok) rows.
CREATE FUNCTION pn_prop.run_case(case_no int)
RETURNS TABLE (property text, ok boolean)
LANGUAGE plpgsql AS $$
DECLARE
    pool text[] := ARRAY['a', 'b', 'site_a', 'site-b.2', 'Z9', 'n.' || repeat('x', 61), 'edge_01', 'A'];
    names text[];
    k int := 1 + floor(random() * 5)::int;      -- 1..5 replicas, one node each
    ops int := floor(random() * 40)::int;       -- 0..39 operations
    replica counter.pncounter[];
    seen counter.pncounter[] := ARRAY['{}'::counter.pncounter];
    p_by_node numeric[];
    n_by_node numeric[];
    total numeric := 0;
    r int;
    amt bigint;
    s counter.pncounter;
    x counter.pncounter;
    y counter.pncounter;
    z counter.pncounter;
    f1 counter.pncounter;
    f2 counter.pncounter;
    pick int;
    i int;
    ok_bool boolean;
BEGIN
    SELECT array_agg(n ORDER BY random()) INTO names FROM (SELECT unnest(pool) n) u;
    names := names[1:k];
    replica := array_fill('{}'::counter.pncounter, ARRAY[k]);
    p_by_node := array_fill(0::numeric, ARRAY[k]);
    n_by_node := array_fill(0::numeric, ARRAY[k]);

    FOR i IN 1..ops LOOP
        r := 1 + floor(random() * k)::int;
        IF random() < 0.6 THEN
            -- A local write at replica r, for its own node.
            amt := CASE WHEN random() < 0.1 THEN 1 + floor(random() * 1e12)::bigint
                        ELSE 1 + floor(random() * 1000)::bigint END;
            IF random() < 0.5 THEN
                -- through the setting, as an application would
                PERFORM pg_catalog.set_config('counter_ext.node_id', names[r], true);
                IF random() < 0.55 THEN
                    replica[r] := counter.pncounter_increment(replica[r], amt);
                    p_by_node[r] := p_by_node[r] + amt;
                    total := total + amt;
                ELSE
                    replica[r] := counter.pncounter_decrement(replica[r], amt);
                    n_by_node[r] := n_by_node[r] + amt;
                    total := total - amt;
                END IF;
            ELSE
                IF random() < 0.55 THEN
                    replica[r] := counter.pncounter_increment(replica[r], amt, node => names[r]);
                    p_by_node[r] := p_by_node[r] + amt;
                    total := total + amt;
                ELSE
                    replica[r] := counter.pncounter_decrement(replica[r], amt, node => names[r]);
                    n_by_node[r] := n_by_node[r] + amt;
                    total := total - amt;
                END IF;
            END IF;
            seen := seen || replica[r];
        ELSE
            -- Delivery: replica r receives any state seen so far (current,
            -- stale or already delivered).
            pick := 1 + floor(random() * array_length(seen, 1))::int;
            replica[r] := replica[r] OPERATOR(counter.||) seen[pick];
            seen := seen || replica[r];
        END IF;
    END LOOP;

    -- Algebra on random states of this case.
    FOR i IN 1..3 LOOP
        x := seen[1 + floor(random() * array_length(seen, 1))::int];
        y := seen[1 + floor(random() * array_length(seen, 1))::int];
        z := seen[1 + floor(random() * array_length(seen, 1))::int];
        property := 'commutative'; ok := (x OPERATOR(counter.||) y) OPERATOR(counter.=) (y OPERATOR(counter.||) x);
        RETURN NEXT;
        property := 'associative';
        ok := ((x OPERATOR(counter.||) y) OPERATOR(counter.||) z)
              OPERATOR(counter.=) (x OPERATOR(counter.||) (y OPERATOR(counter.||) z));
        RETURN NEXT;
        property := 'idempotent';
        ok := (x OPERATOR(counter.||) x) OPERATOR(counter.=) x
              AND ((x OPERATOR(counter.||) y) OPERATOR(counter.||) y) OPERATOR(counter.=) (x OPERATOR(counter.||) y);
        RETURN NEXT;
    END LOOP;

    -- Final exchange: every replica receives every other's state, each in its
    -- own random order, some twice.
    f1 := NULL;
    FOR r IN 1..k LOOP
        s := replica[r];
        FOR pick IN SELECT g FROM generate_series(1, k) g, generate_series(1, 1 + floor(random() * 2)::int)
                    ORDER BY random() LOOP
            s := s OPERATOR(counter.||) replica[pick];
        END LOOP;
        IF f1 IS NULL THEN
            f1 := s;
            ok_bool := true;
        ELSE
            ok_bool := ok_bool AND s OPERATOR(counter.=) f1;
        END IF;
    END LOOP;
    property := 'replicas converge in any delivery order'; ok := ok_bool;
    RETURN NEXT;

    property := 'value is all increments minus all decrements';
    ok := counter.pncounter_value(f1) = total;
    RETURN NEXT;

    property := 'per-node totals are what each node did';
    SELECT count(*) = (SELECT count(*) FROM unnest(p_by_node, n_by_node) t(p, n) WHERE p > 0 OR n > 0)
           AND coalesce(bool_and(t.node IS NOT NULL
                        AND t.increments = p_by_node[array_position(names, t.node)]
                        AND t.decrements = n_by_node[array_position(names, t.node)]), true)
      INTO ok
      FROM counter.pncounter_nodes(f1) t;
    ok := coalesce(ok, false);
    RETURN NEXT;

    property := 're-delivery of any state seen changes nothing';
    f2 := f1;
    FOR pick IN SELECT g FROM generate_series(1, array_length(seen, 1)) g, generate_series(1, 2) ORDER BY random() LOOP
        f2 := f2 OPERATOR(counter.||) seen[pick];
    END LOOP;
    ok := f2 OPERATOR(counter.=) f1;
    RETURN NEXT;

    property := 'aggregate equals the operator';
    SELECT counter.pncounter_merge_agg(v ORDER BY random()) OPERATOR(counter.=) f1 INTO ok
      FROM (SELECT unnest(replica || seen) v) u;
    RETURN NEXT;

    property := 'text and binary forms round-trip';
    ok := f1::text::counter.pncounter OPERATOR(counter.=) f1
          AND counter_test.pncounter_recv(counter.pncounter_send(f1)) OPERATOR(counter.=) f1
          AND counter_test.pncounter_deserialize(counter.pncounter_send(f1)) OPERATOR(counter.=) f1
          AND x::text::counter.pncounter OPERATOR(counter.=) x;
    RETURN NEXT;
END $$;

CREATE TABLE pn_prop.results AS
SELECT c AS case_no, r.property, r.ok
FROM generate_series(1, 1200) c, LATERAL pn_prop.run_case(c) r;

SELECT is((SELECT count(DISTINCT case_no) FROM pn_prop.results), 1200::bigint, '1,200 random cases ran');
SELECT is(count(*) FILTER (WHERE ok IS NOT TRUE), 0::bigint,
          format('%s (%s checks)', property, count(*)))
FROM pn_prop.results GROUP BY property ORDER BY property;

-- The merge aggregate in a parallel plan: partial states are serialized,
-- deserialized and combined; the result equals the serial one.
CREATE TABLE pn_prop.many AS
SELECT g % 97 AS grp,
       counter.pncounter_decrement(
           counter.pncounter_increment(NULL, 1 + g % 1000, node => 'n' || (g % 40)),
           1 + g % 7, node => 'n' || ((g * 7) % 53)) AS c
FROM generate_series(1, 60000) g;
ANALYZE pn_prop.many;

SET LOCAL max_parallel_workers_per_gather = 0;
CREATE TABLE pn_prop.serial AS SELECT counter.pncounter_merge_agg(c) AS total FROM pn_prop.many;
CREATE TABLE pn_prop.serial_grouped AS
SELECT grp, counter.pncounter_merge_agg(c) AS total FROM pn_prop.many GROUP BY grp;

SET LOCAL max_parallel_workers_per_gather = 2;
SET LOCAL parallel_setup_cost = 0;
SET LOCAL parallel_tuple_cost = 0;
SET LOCAL min_parallel_table_scan_size = 0;
SET LOCAL parallel_leader_participation = off;

CREATE FUNCTION pn_prop.plan_of(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    line text;
    out text := '';
BEGIN
    FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
        out := out || line || E'\n';
    END LOOP;
    RETURN out;
END $$;

SELECT matches(pn_prop.plan_of('SELECT counter.pncounter_merge_agg(c) FROM pn_prop.many'),
               'Partial Aggregate', 'the merge aggregate runs as a parallel partial aggregate');
SELECT is((SELECT counter.pncounter_merge_agg(c) FROM pn_prop.many)::text,
          (SELECT total::text FROM pn_prop.serial), 'parallel merge equals serial merge');
SELECT is((SELECT counter.pncounter_value(counter.pncounter_merge_agg(c)) FROM pn_prop.many),
          (SELECT sum(m)::bigint FROM (SELECT max(increments) - max(decrements) AS m FROM pn_prop.many,
                                        LATERAL counter.pncounter_nodes(c) GROUP BY node) x),
          'merged value is the sum over nodes of max increments minus max decrements');
SELECT is_empty($$
    SELECT grp, counter.pncounter_merge_agg(c)::text FROM pn_prop.many GROUP BY grp
    EXCEPT
    SELECT grp, total::text FROM pn_prop.serial_grouped
$$, 'grouped parallel merge equals grouped serial merge');

SELECT * FROM finish();
ROLLBACK;
