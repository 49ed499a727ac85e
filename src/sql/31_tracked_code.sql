-- Tracked counters: the functions and views (the tables are in
-- 30_tracked.sql). This piece holds code only, so the update from 1.4
-- (src/sql/upgrade/1.4--1.5/50_code.sql) includes it as it is
-- (everything here is CREATE OR REPLACE).

-- A tracked counter's reconciliation runs: the rows of the one run record
-- (counter.job_runs, kind 'reconcile') with the tracked part of each
-- (info), in the columns the table counter.tracked_runs had up to 1.2.
-- Each role sees the runs of the counters it owns (or belongs to the owner
-- of).
CREATE OR REPLACE VIEW counter.tracked_runs WITH (security_barrier) AS
SELECT r.run_id, r.object_id::integer AS counter_id, r.started_at,
       (r.info ->> 'finished_at')::timestamptz AS finished_at, (r.info ->> 'watermark')::timestamptz AS watermark,
       (r.info ->> 'all_keys')::boolean AS all_keys, (r.info ->> 'keys_checked')::bigint AS keys_checked,
       (r.info ->> 'keys_corrected')::bigint AS keys_corrected, (r.info ->> 'drift_positive')::bigint AS drift_positive,
       (r.info ->> 'drift_negative')::bigint AS drift_negative, (r.info ->> 'max_abs_drift')::bigint AS max_abs_drift,
       (r.info ->> 'keys_busy')::bigint AS keys_busy, (r.info ->> 'keys_verified')::bigint AS keys_verified,
       r.info ->> 'outcome' AS outcome, coalesce((r.info ->> 'backfill')::bigint, 0) AS backfill,
       coalesce((r.info ->> 'alerted')::boolean, false) AS alerted
FROM counter.job_runs r JOIN counter.tracked c ON c.counter_id = r.object_id
WHERE r.kind = 'reconcile' AND r.info ? 'watermark' AND pg_catalog.pg_has_role(c.owner, 'USAGE');
COMMENT ON VIEW counter.tracked_runs IS 'one row per reconciliation run of a tracked counter, with its drift';
GRANT SELECT ON counter.tracked_runs TO PUBLIC;

-- Logical replication (doc/operations.md): the apply worker of a
-- subscription runs with session_replication_role = replica and fires only
-- the triggers enabled for replicas, which a counter or rollup has when it was
-- made with replicated => true. This names, for a source table written by a
-- subscription of this database (the table itself, a partition of it or a
-- table it is a partition of is in pg_subscription_rel), what is not counted:
-- NULL when nothing is missed. Read by counter.track, counter.rollup_create,
-- each reconciliation, and the views tracked_status and rollup_state.
CREATE OR REPLACE FUNCTION counter.replication_warning(source regclass, replicated boolean)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
SELECT pg_catalog.format('%s is written by logical replication (subscription %s), whose apply worker fires only '
                         'triggers enabled for replicas: the rows it applies are not counted (replicated => false)',
                         source, pg_catalog.string_agg(DISTINCT s.subname::text, ', '))
FROM pg_catalog.pg_subscription_rel sr
JOIN pg_catalog.pg_subscription s ON s.oid OPERATOR(pg_catalog.=) sr.srsubid
WHERE replicated IS NOT TRUE AND source IS NOT NULL
  AND sr.srrelid OPERATOR(pg_catalog.=) ANY (ARRAY(
      SELECT t.relid FROM pg_catalog.pg_partition_tree(source) t
      UNION ALL SELECT a.relid FROM pg_catalog.pg_partition_ancestors(source) a
      UNION ALL SELECT source::pg_catalog.oid))
HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) 0
$fn$;
COMMENT ON FUNCTION counter.replication_warning(regclass, boolean) IS
    'why a counter or rollup on this table misses rows applied by logical replication, or NULL';

-- The role the entry point being run acts for (src/owner.cpp): the role
-- that called the function of schema counter whose implementation asks.
CREATE OR REPLACE FUNCTION counter_internal.caller()
RETURNS regrole
LANGUAGE c STABLE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'counter_tracked_caller';

-- The hot path of trigger mode (src/tracked.cpp): folds a statement's
-- transition tables into one delta per (key, bucket) and writes them in
-- order, as the counter's owner; on TRUNCATE, empties the counter. Its one
-- argument is the counter id; everything else comes from counter.tracked.
-- Only counter.track attaches it.
CREATE OR REPLACE FUNCTION counter_internal.tracked_fold()
RETURNS trigger
LANGUAGE c
AS 'MODULE_PATHNAME', 'counter_tracked_fold';

-- (1.8) The trigger of a counter on a table Citus distributes, on its shards
-- (src/tracked.cpp, shard_fold): its arguments carry what it needs there,
-- and PUBLIC may execute it, since Citus makes it again on a moved or split
-- shard as the table's owner (99_internal.sql; only the table's owner may
-- attach it: counter_internal.citus_trigger_creator). 1.7's are tracked_fold.
CREATE OR REPLACE FUNCTION counter_internal.tracked_shard_fold()
RETURNS trigger
LANGUAGE c
AS 'MODULE_PATHNAME', 'counter_tracked_shard_fold';

-- (1.8) The trigger of the inbox of an application-mode counter whose state
-- Citus distributes, on its shards (src/tracked.cpp, shard_add):
-- counter.add inserts into the inbox as the caller, and on the key's shard
-- this adds the amount to the colocated delta shard as the table's owner.
-- PUBLIC may execute it, as tracked_shard_fold.
CREATE OR REPLACE FUNCTION counter_internal.tracked_shard_add()
RETURNS trigger
LANGUAGE c
AS 'MODULE_PATHNAME', 'counter_tracked_shard_add';

-- (1.8) The trigger on the shards of the run table of a counter whose state
-- Citus distributes: one shard's part of a reconciliation batch
-- (counter_internal.tracked_make_run; src/tracked.cpp, shard_reconcile_run).
-- PUBLIC may execute it, as tracked_shard_fold (99_internal.sql); it does
-- nothing for a caller without the table's owner's rights.
CREATE OR REPLACE FUNCTION counter_internal.tracked_shard_reconcile()
RETURNS trigger
LANGUAGE c
AS 'MODULE_PATHNAME', 'counter_tracked_shard_reconcile';

-- (1.8) On a Citus node, the counters whose state is beside their rows as
-- their triggers describe them there (an application-mode counter's inbox
-- trigger, a trigger-mode counter's INSERT trigger; src/tracked.cpp,
-- worker_counters): what counter.tracked_values reads on a worker node.
CREATE OR REPLACE FUNCTION counter_internal.tracked_worker_counters()
RETURNS TABLE (name text, counter_id integer, source regclass, owner regrole, state_schema name, anchored boolean,
               buffered boolean, key_type regtype)
LANGUAGE c STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_tracked_worker_counters';

-- counter_internal.partition_move says it moves rows between the partitions
-- of a table, in replica mode (src/source.cpp): the row triggers of
-- replicated counters and rollups, enabled for replicas, count nothing
-- meanwhile. Until called with false, or the (sub)transaction ends.
CREATE OR REPLACE FUNCTION counter_internal.rows_moving("on" boolean)
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_rows_moving';

-- Every backend forgets the counter rows it keeps (src/tracked.cpp): called
-- by every function here that changes a row's registration.
CREATE OR REPLACE FUNCTION counter_internal.tracked_invalidate()
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_tracked_invalidate';

-- Reads without a query (src/read_cache.cpp): counter.value gives a key's
-- base + deltas kept from an earlier read while no writer of the counter's
-- tables started or ended since. This trigger counts the writers: a BEFORE
-- statement trigger, ENABLE ALWAYS (every session, also in replica mode).
-- Logical replication's apply fires no statement trigger: a background
-- worker's transaction that wrote anything counts as a writer of every
-- counter (src/read_cache.cpp). A read keeps nothing from tables without it.
CREATE OR REPLACE FUNCTION counter_internal.tracked_state_written()
RETURNS trigger
LANGUAGE c
AS 'MODULE_PATHNAME', 'counter_tracked_state_written';

CREATE OR REPLACE FUNCTION counter_internal.tracked_state_triggers(t counter.tracked)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    tbl text;
BEGIN
    FOREACH tbl IN ARRAY ARRAY[counter_internal.tracked_table(t, 'base'), counter_internal.tracked_table(t, 'delta')] LOOP
        EXECUTE format('CREATE TRIGGER ce_writers BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.tracked_state_written(%L)',
                       tbl, t.counter_id);
        EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER ce_writers', tbl);
    END LOOP;
END
$fn$;

-- This session's reads of a kept value (hits) and reads that found none
-- usable (misses), for tests and benchmarks.
CREATE OR REPLACE FUNCTION counter_internal.tracked_read_cache(OUT hits bigint, OUT misses bigint)
RETURNS record
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_tracked_read_cache';

-- The counter row, or an errcode'd error.
CREATE OR REPLACE FUNCTION counter_internal.tracked_get(counter_name text)
RETURNS counter.tracked
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t counter.tracked;
BEGIN
    IF counter_name IS NULL THEN
        RAISE EXCEPTION 'counter name must not be NULL' USING ERRCODE = '22004';
    END IF;
    SELECT * INTO t FROM counter.tracked c WHERE c.name OPERATOR(pg_catalog.=) counter_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'tracked counter "%" does not exist', counter_name
            USING ERRCODE = '42704', HINT = 'See counter.tracked for the registered counters.';
    END IF;
    RETURN t;
END
$$;

CREATE OR REPLACE FUNCTION counter_internal.tracked_table(t counter.tracked, part text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE WHEN t.state_schema IS NULL
            THEN pg_catalog.format('counter_internal.%I', pg_catalog.format('tracked_%s_%s', t.counter_id, part))
            ELSE pg_catalog.format('%I.%I', t.state_schema, pg_catalog.format('counter_tracked_%s_%s', t.counter_id, part))
       END
$$;

-- The statement that chooses a reconciliation batch's keys into ce_keys, for
-- the batch bodies tracked_batch_sql and tracked_citus_batch (a counter
-- keyed by another column than the distribution column chooses them on
-- each shard: src/tracked.cpp, shard_pick): the next ce_limit keys in key order among the
-- keys with a base (only with ce_all), the keys with delta rows the batch
-- folds (tracked_batch_buckets) and the keys of source rows whose event
-- time is in [ce_from, ce_w) and pass filter f (looked for only when that
-- range is not empty, decided before any row is read). after: which keys
-- it starts from: 'first' (every key: a run's first batch), 'next' (those
-- after ce_after_key) or 'either' (ce_after decides: one statement for
-- both, each batch's plan made with its values).
CREATE OR REPLACE FUNCTION counter_internal.tracked_keys_sql(t counter.tracked, f text, after text)
RETURNS text
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    op text := (counter_internal.key_operators(t.key_type))[3];
    past text := CASE after WHEN 'first' THEN 'true' WHEN 'next' THEN '%1$s %2$s ce_after_key'
                            WHEN 'either' THEN '(ce_after IS NULL OR %1$s %2$s ce_after_key)' END;
BEGIN
    IF past IS NULL THEN
        RAISE EXCEPTION 'unknown batch start "%"', after USING ERRCODE = 'internal_error';
    END IF;
    RETURN format($k$SELECT pg_catalog.array_agg(s.k ORDER BY s.k) INTO ce_keys FROM (
        SELECT DISTINCT u.k FROM (
            (SELECT b.key AS k FROM %1$s b WHERE ce_all AND %2$s ORDER BY 1 LIMIT ce_limit)
            UNION ALL
            (SELECT DISTINCT d.key FROM %3$s d WHERE %4$s AND %5$s ORDER BY 1 LIMIT ce_limit)
            UNION ALL
            (SELECT DISTINCT ce_new.%6$s FROM %7$s AS ce_new
             WHERE ce_new.%6$s IS NOT NULL AND %8$s AND ce_from < ce_w AND ce_new.%9$s >= ce_from
               AND ce_new.%9$s < ce_w AND %10$s
             ORDER BY 1 LIMIT ce_limit)
        ) u ORDER BY 1 LIMIT ce_limit) s;$k$,
        counter_internal.tracked_table(t, 'base'), format(past, 'b.key', op),
        counter_internal.tracked_table(t, 'delta'), format(past, 'd.key', op),
        (counter_internal.tracked_batch_buckets(t)).cond,
        format('%I', t.key_column), t.source::text, format(past, format('ce_new.%I', t.key_column), op),
        format('%I', t.time_column), f);
END
$fn$;

-- The body of the batch function of a counter whose state is distributed
-- colocated with its source by Citus (a counter on a hash-distributed table
-- keyed by its distribution column, in trigger mode or, since 1.8, in
-- application mode: doc/citus.md).
-- A batch is a key range of every shard: the next ce_limit keys in key
-- order (batch_size per shard: counter_internal.tracked_batch_keys),
-- chosen by one distributed query (source rows looked for only when
-- [ce_from, ce_w) is not empty, as on one node). Then (1.8) one INSERT
-- puts a row into the counter's run table for each shard the batch's keys
-- fall in, anchored by one of them, with the shard's keys, the watermark
-- and the horizon (tracked_make_run): Citus sends every shard its row at
-- once, and there the row's trigger (src/tracked.cpp, shard_reconcile_run)
-- does, as the owner, what one shard's part of a batch is: (1) locks the
-- delta rows of its keys before the watermark, skipping those a writer
-- holds or is changing (counter_internal.row_lock_skip: it never waits for
-- a writer, so a writer is never a deadlock's victim); (2) in one statement
-- reads the shard's rows before the watermark (with the filter, printed
-- from its stored tree), base rows and delta rows of those keys in one
-- snapshot (a row and its delta are written in one shard transaction: the
-- snapshot sees both or neither) and, for each key none of whose delta
-- rows a writer holds (a busy key is left to the next run), deletes the
-- delta rows it holds whose amount is the amount it saw (it holds them:
-- nothing changed them since), and only when every one of them went
-- installs the truth as the base (deleted when 0); the row returns what it
-- found, and the batch deletes the rows. A counter made by 1.7 has no run
-- table (run is false): its batch sends those statements to the shards
-- one after another (two or three per shard: the new base rows apart, as
-- Citus does not route an INSERT in a WITH). All in the caller's
-- distributed transaction.
CREATE OR REPLACE FUNCTION counter_internal.tracked_citus_batch(t counter.tracked, f text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    ops text[] := counter_internal.key_operators(t.key_type);
    bk record := counter_internal.tracked_batch_buckets(t);
    run text := counter_internal.tracked_table(t, 'run');
    shards text;
BEGIN
    IF pg_catalog.to_regclass(run) IS NOT NULL THEN
        shards := format($s$
    -- a row of the run table for each shard the keys fall in: each
    -- shard's part of the batch, done there by the row's trigger; a
    -- multi-row VALUES, which Citus sends to the shards as they are (an
    -- INSERT ... SELECT of the same rows goes through an intermediate
    -- result first: one more round trip to every shard)
    SELECT pg_catalog.format('INSERT INTO %%s AS r (anchor, w, keys, horizon) VALUES %%s'
                             ' RETURNING r.anchor, r.found_keys, r.cached, r.truth, r.busy', %1$L,
               pg_catalog.string_agg(pg_catalog.format('(%%L::%%s, %%L::timestamptz, %%L::%%s[], %%L::timestamptz)',
                                                       x.keys[1], %4$L, ce_w, x.keys, %4$L, ce_h), ', '))
    INTO ce_run
    FROM (SELECT pg_catalog.array_agg(g.k ORDER BY g.k) AS keys
          FROM (SELECT k.k, pg_catalog.get_shard_id_for_distribution_column(%2$L::pg_catalog.regclass, k.k) AS sid
                FROM pg_catalog.unnest(ce_keys) AS k(k)) g
          GROUP BY g.sid) x;
    FOR ce_r IN EXECUTE ce_run LOOP
        ce_anchors := ce_anchors || ce_r.anchor;
        ce_rk := ce_rk || ce_r.found_keys;
        ce_rc := ce_rc || ce_r.cached;
        ce_rt := ce_rt || ce_r.truth;
        ce_rb := ce_rb || ce_r.busy;
    END LOOP;
    DELETE FROM %1$s r WHERE r.anchor %3$s ANY (ce_anchors);
$s$, run, t.source::text, ops[1], t.key_type::text);
    ELSE
        shards := format($s$
    FOR ce_g IN SELECT pg_catalog.array_agg(g.k ORDER BY g.k) FROM (
                    SELECT k.k, pg_catalog.get_shard_id_for_distribution_column('%6$s'::pg_catalog.regclass, k.k) AS sid
                    FROM pg_catalog.unnest(ce_keys) AS k(k)) g
                GROUP BY g.sid LOOP
        -- (1) the rows no writer holds, locked
        SELECT pg_catalog.array_agg(d.key), pg_catalog.array_agg(d.bucket), pg_catalog.array_agg(d.shard)
        INTO ce_lk, ce_lb, ce_ls
        FROM %6$s d WHERE d.key %7$s ANY (ce_g) AND %8$s
          AND counter_internal.row_lock_skip(d.tableoid::pg_catalog.regclass, d.ctid);
        -- (2) rows, base and deltas of the shard's keys, one snapshot, and
        -- the repair of the keys no writer holds: one statement
        WITH l AS MATERIALIZED (
            SELECT * FROM ROWS FROM (pg_catalog.unnest(ce_lk), pg_catalog.unnest(ce_lb), pg_catalog.unnest(ce_ls))
                AS l(k, b, h)
        ), z AS MATERIALIZED (
            SELECT r.key, NULL::bigint AS b, r.n, NULL::timestamptz AS bucket, NULL::smallint AS shard,
                   NULL::bigint AS delta, false AS held
            FROM (SELECT ce_new.%2$s AS key, pg_catalog.count(*) AS n FROM %1$s AS ce_new
                  WHERE ce_new.%2$s %7$s ANY (ce_g) AND ce_new.%3$s < ce_w AND %4$s GROUP BY 1) r
            UNION ALL
            SELECT b.key, b.base, 0, NULL, NULL, NULL, false FROM %5$s b WHERE b.key %7$s ANY (ce_g)
            UNION ALL
            SELECT d.key, NULL, 0, d.bucket, d.shard, d.delta, l.k IS NOT NULL
            FROM %6$s d LEFT JOIN l ON l.k %7$s d.key AND l.b = d.bucket AND l.h = d.shard
            WHERE d.key %7$s ANY (ce_g) AND %8$s
        ), s AS MATERIALIZED (
            -- numeric, then bounded: no sum of deltas makes the batch fail
            SELECT z.key, pg_catalog.sum(z.b) AS base,
                   LEAST(GREATEST(coalesce(pg_catalog.sum(z.b), 0) + coalesce(pg_catalog.sum(z.delta), 0),
                                  -9223372036854775807), 9223372036854775807)::bigint AS cached,
                   pg_catalog.sum(z.n)::bigint AS truth,
                   pg_catalog.count(*) FILTER (WHERE z.held) AS held,
                   coalesce(pg_catalog.bool_or(z.delta IS NOT NULL AND NOT z.held), false) AS busy
            FROM z GROUP BY z.key
        ), absorbed AS (
            -- the rows it holds, whose amount is the amount it saw
            DELETE FROM %6$s d USING z, s
            WHERE d.key %7$s ANY (ce_g) AND z.held AND s.key %7$s z.key AND NOT s.busy
              AND d.key %7$s z.key AND d.bucket = z.bucket AND d.shard = z.shard AND d.delta = z.delta
            RETURNING d.key
        ), ok AS MATERIALIZED (
            SELECT s.key, s.truth, s.base
            FROM s LEFT JOIN (SELECT a.key, pg_catalog.count(*) AS n FROM absorbed a GROUP BY 1) a ON a.key %7$s s.key
            WHERE NOT s.busy AND s.held = coalesce(a.n, 0)
        ), updated AS (
            UPDATE %5$s b SET base = ok.truth FROM ok
            WHERE b.key %7$s ANY (ce_g) AND b.key %7$s ok.key AND ok.truth <> 0 AND b.base <> ok.truth
            RETURNING 1
        ), emptied AS (
            DELETE FROM %5$s b USING ok WHERE b.key %7$s ANY (ce_g) AND b.key %7$s ok.key AND ok.truth = 0
            RETURNING 1
        )
        SELECT pg_catalog.array_agg(s.key), pg_catalog.array_agg(s.cached), pg_catalog.array_agg(s.truth),
               pg_catalog.array_agg(ok.key IS NULL),
               pg_catalog.array_agg(ok.key) FILTER (WHERE ok.base IS NULL AND ok.truth <> 0),
               pg_catalog.array_agg(ok.truth) FILTER (WHERE ok.base IS NULL AND ok.truth <> 0)
        INTO ce_sk, ce_sc, ce_st, ce_sb, ce_nk, ce_nt
        FROM s LEFT JOIN ok ON ok.key %7$s s.key;
        -- (3) a base row for each repaired key that had none (Citus does not
        -- route an INSERT in a WITH): only when there are such keys
        IF ce_nk IS NOT NULL THEN
            INSERT INTO %5$s AS b (key, base)
            SELECT c.key, c.truth FROM ROWS FROM (pg_catalog.unnest(ce_nk), pg_catalog.unnest(ce_nt)) AS c(key, truth)
            ON CONFLICT (key) DO UPDATE SET base = excluded.base;
        END IF;
        ce_rk := ce_rk || ce_sk;
        ce_rc := ce_rc || ce_sc;
        ce_rt := ce_rt || ce_st;
        ce_rb := ce_rb || ce_sb;
    END LOOP;
$s$, t.source::text, format('%I', t.key_column), format('%I', t.time_column), f,
        counter_internal.tracked_table(t, 'base'), counter_internal.tracked_table(t, 'delta'), ops[1], bk.cond);
    END IF;
    RETURN format($b$
#variable_conflict use_column
DECLARE
    ce_keys %1$s[];
    ce_after_key %1$s := ce_after::%1$s;
    ce_g %1$s[];
    ce_lk %1$s[];
    ce_lb timestamptz[];
    ce_ls smallint[];
    ce_sk %1$s[];
    ce_sc bigint[];
    ce_st bigint[];
    ce_sb boolean[];
    ce_nk %1$s[];
    ce_nt bigint[];
    ce_r record;
    ce_run text;
    ce_anchors %1$s[] := '{}';
    ce_rk %1$s[] := '{}';
    ce_rc bigint[] := '{}';
    ce_rt bigint[] := '{}';
    ce_rb boolean[] := '{}';
    ce_h timestamptz := %2$s;   -- counter_internal.tracked_batch_buckets
BEGIN
    %3$s
    IF ce_keys IS NULL THEN
        RETURN;
    END IF;
%4$s
    RETURN QUERY
    SELECT k.key::text, coalesce(c.cached, 0::bigint), coalesce(c.truth, 0::bigint), coalesce(c.busy, false), k.o
    FROM pg_catalog.unnest(ce_keys) WITH ORDINALITY AS k(key, o)
    LEFT JOIN ROWS FROM (pg_catalog.unnest(ce_rk), pg_catalog.unnest(ce_rc), pg_catalog.unnest(ce_rt),
                         pg_catalog.unnest(ce_rb)) AS c(key, cached, truth, busy) ON c.key %5$s k.key;
END
$b$, t.key_type::text, bk.horizon, counter_internal.tracked_keys_sql(t, f, 'either'), shards, ops[1]);
END
$fn$;

-- The body of the batch function of a counter keyed by another column than
-- the distribution column of its source (t.anchor_column: doc/citus.md,
-- "Keyed by another column"), whose state is anchored on every shard.
-- A batch is the next ce_limit keys in key order, as for a counter keyed by
-- the distribution column; each key's rows are on every shard. Before a
-- run's first batch every shard is given an anchor (a split's new shard has
-- none until its trigger counts a row). Then two INSERTs each put a row per
-- shard into the run table (Citus sends each shard its row, the shards of a
-- node one after another, the nodes at once). The first chooses the keys:
-- on each shard the row's trigger (src/tracked.cpp, shard_pick) returns the
-- shard's next ce_limit keys (those with a base, only with ce_all; with
-- delta rows before the watermark; with rows whose event time is in
-- [ce_from, ce_w) that pass the filter), and the batch is the least
-- ce_limit of them all: one statement per shard, each reading its three
-- tables in key order from ce_after (three distributed queries, each a
-- fan-out to every shard, took 0.3-0.9 s a batch at 32 shards). The second
-- carries the watermark and the keys, and on each shard the row's trigger
-- (src/tracked.cpp, shard_reconcile) does what
-- tracked_citus_batch's two statements do on a key's shard, for the keys'
-- rows, base and deltas there: locks the delta rows before the watermark
-- that no writer holds, reads rows, base and deltas in one snapshot,
-- repairs each key no writer holds there (its delta rows it holds deleted,
-- the shard's truth installed as its base at the row's anchor, every other
-- anchor's base of the key deleted), and returns what it found. A key's
-- cached value and truth are the sums over the shards; it is busy when a
-- writer holds it on any shard. A shard keeps every count of the rows it
-- had when Citus split it: the shard that keeps the anchor holds them
-- after, and each shard's truth put back as its base moves them where
-- their rows are (the sums over the shards stay right). All in the
-- caller's distributed transaction (two-phase commit over the nodes).
CREATE OR REPLACE FUNCTION counter_internal.tracked_anchored_batch(t counter.tracked, f text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    ops text[] := counter_internal.key_operators(t.key_type);
BEGIN
    RETURN format($b$
#variable_conflict use_column
DECLARE
    ce_keys %5$s[];
    ce_after_key %5$s := ce_after::%5$s;
    ce_have bigint[];
    ce_missing bigint[];
    ce_tries bigint := 1024;
    ce_anchors %10$s[];
    ce_r record;
    ce_picked %5$s[] := '{}';
    ce_rk %5$s[] := '{}';
    ce_rc bigint[] := '{}';
    ce_rt bigint[] := '{}';
    ce_rb boolean[] := '{}';
BEGIN
    IF ce_after IS NULL THEN
        -- every shard an anchor (counter_internal.citus_anchor_sql's values)
        LOOP
            SELECT pg_catalog.array_agg(pg_catalog.get_shard_id_for_distribution_column(%12$L, a.anchor))
            INTO ce_have FROM %8$s a;
            SELECT pg_catalog.array_agg(s.shardid) INTO ce_missing FROM pg_catalog.pg_dist_shard s
            WHERE s.logicalrelid OPERATOR(pg_catalog.=) %12$L::pg_catalog.regclass
              AND s.shardid OPERATOR(pg_catalog.<>) ALL (coalesce(ce_have, '{}'));
            EXIT WHEN ce_missing IS NULL;
            IF ce_tries OPERATOR(pg_catalog.>) 16777216 THEN
                RAISE EXCEPTION 'no value of the distribution column of %% falls on %% of its shards', %13$L,
                    pg_catalog.cardinality(ce_missing) USING ERRCODE = 'internal_error';
            END IF;
            INSERT INTO %8$s (anchor)
            SELECT DISTINCT ON (x.s) x.v FROM (
                SELECT %11$s AS v, ce_i, pg_catalog.get_shard_id_for_distribution_column(%12$L, %11$s) AS s
                FROM pg_catalog.generate_series(0::bigint, ce_tries) AS ce_i) x
            WHERE x.s OPERATOR(pg_catalog.=) ANY (ce_missing) ORDER BY x.s, x.ce_i
            ON CONFLICT DO NOTHING;
            ce_tries := ce_tries OPERATOR(pg_catalog.*) 16;
        END LOOP;
    END IF;

    -- an anchor of each shard: its row of the run table lands there
    -- (the least of each shard's, chosen here: Citus does not push down an
    -- ordered aggregate grouped by another column)
    SELECT pg_catalog.array_agg(a.anchor) INTO ce_anchors FROM %8$s a;
    SELECT pg_catalog.array_agg(x.a) INTO ce_anchors FROM (
        SELECT DISTINCT ON (pg_catalog.get_shard_id_for_distribution_column(%12$L, u.a)) u.a
        FROM pg_catalog.unnest(ce_anchors) AS u(a)
        ORDER BY pg_catalog.get_shard_id_for_distribution_column(%12$L, u.a), u.a) x;

    -- the batch's keys: each shard's next ce_limit keys after ce_after
    -- (src/tracked.cpp, shard_pick: one row of the run table per shard),
    -- the least ce_limit of them all
    FOR ce_r IN INSERT INTO %14$s AS r (anchor, w, keys, pick, past, w_from, every)
                SELECT a.anchor, ce_w, '{}', ce_limit, ce_after_key, ce_from, ce_all
                FROM %8$s a WHERE a.anchor OPERATOR(pg_catalog.=) ANY (ce_anchors)
                RETURNING r.found_keys LOOP
        ce_picked := ce_picked || ce_r.found_keys;
    END LOOP;
    DELETE FROM %14$s r WHERE r.anchor OPERATOR(pg_catalog.=) ANY (ce_anchors);
    SELECT pg_catalog.array_agg(s.k ORDER BY s.k) INTO ce_keys
    FROM (SELECT DISTINCT u.k FROM pg_catalog.unnest(ce_picked) AS u(k) ORDER BY 1 LIMIT ce_limit) s;
    IF ce_keys IS NULL THEN
        RETURN;
    END IF;

    -- the batch: compared and repaired on every shard
    FOR ce_r IN INSERT INTO %14$s AS r (anchor, w, keys)
                SELECT a.anchor, ce_w, ce_keys FROM %8$s a WHERE a.anchor OPERATOR(pg_catalog.=) ANY (ce_anchors)
                RETURNING r.found_keys, r.cached, r.truth, r.busy LOOP
        ce_rk := ce_rk || ce_r.found_keys;
        ce_rc := ce_rc || ce_r.cached;
        ce_rt := ce_rt || ce_r.truth;
        ce_rb := ce_rb || ce_r.busy;
    END LOOP;
    DELETE FROM %14$s r WHERE r.anchor OPERATOR(pg_catalog.=) ANY (ce_anchors);

    RETURN QUERY
    SELECT k.key::text, coalesce(c.cached, 0::bigint), coalesce(c.truth, 0::bigint), coalesce(c.busy, false), k.o
    FROM pg_catalog.unnest(ce_keys) WITH ORDINALITY AS k(key, o)
    LEFT JOIN (SELECT x.key,
                      LEAST(GREATEST(pg_catalog.sum(x.cached), -9223372036854775807), 9223372036854775807)::bigint AS cached,
                      pg_catalog.sum(x.truth)::bigint AS truth, pg_catalog.bool_or(x.busy) AS busy
               FROM ROWS FROM (pg_catalog.unnest(ce_rk), pg_catalog.unnest(ce_rc), pg_catalog.unnest(ce_rt),
                               pg_catalog.unnest(ce_rb)) AS x(key, cached, truth, busy)
               GROUP BY x.key) c ON c.key %15$s k.key;
END
$b$, t.source::text, format('%I', t.key_column), format('%I', t.time_column), f, t.key_type::text,
        counter_internal.tracked_table(t, 'base'), counter_internal.tracked_table(t, 'delta'),
        counter_internal.tracked_table(t, 'anchor'), ops[3], counter_internal.tracked_anchor_type(t)::text,
        counter_internal.citus_anchor_sql(counter_internal.tracked_anchor_type(t)),
        counter_internal.tracked_table(t, 'anchor'), t.source::text, counter_internal.tracked_table(t, 'run'), ops[1]);
END
$fn$;

-- (Re)creates counter t's batch function (below); tracked_build calls it, and
-- so does the update to 1.5 for every counter.
CREATE OR REPLACE FUNCTION counter_internal.tracked_build_batch(t counter.tracked)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    fn_batch text := format('counter_internal.%I', format('tracked_%s_batch', t.counter_id));
    f text;
    body text;
BEGIN
    -- the filter, printed from its stored tree with every name qualified
    -- (counter_internal.filter_sql): an expression Citus pushes down to the
    -- shards, and the planner sees (no function call per row)
    f := CASE WHEN t.filter IS NULL THEN 'true'
              ELSE '(' || counter_internal.filter_sql(t.source, t.filter, t.filter_tree, t.filter_relid, t.owner,
                                                      'ce_new') || ')' END;
    body := CASE WHEN t.anchor_column IS NOT NULL THEN counter_internal.tracked_anchored_batch(t, f)
                 WHEN t.distributed THEN counter_internal.tracked_citus_batch(t, f)
                 ELSE counter_internal.tracked_batch_sql(t, f) END;
    -- on this node only (Citus: not propagated to the workers; it runs here)
    IF pg_catalog.to_regprocedure(fn_batch || '(timestamptz, timestamptz, text, boolean, integer)') IS NOT NULL THEN
        PERFORM counter_internal.citus_local_ddl(format('DROP FUNCTION %s(timestamptz, timestamptz, text, boolean, integer)', fn_batch));
    END IF;
    PERFORM counter_internal.citus_local_ddl(format('CREATE FUNCTION %s(ce_w timestamptz, ce_from timestamptz, ce_after text, ce_all boolean,'
                   ' ce_limit integer) RETURNS TABLE (key text, cached bigint, truth bigint, busy boolean, n bigint)'
                   ' LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp'
                   -- plans made for each batch's arrays (a generic plan takes
                   -- every unnest for 10 rows and joins 1,000 keys in loops)
                   ' SET plan_cache_mode = force_custom_plan'
                   -- no JIT: the batch's row estimates (joins of CTEs, which
                   -- have no statistics) pass jit_above_cost from a few
                   -- thousand keys, and compiling the statement took 0.8 s
                   -- of a 1 s batch of 10,000 keys (doc/bench/citus.md)
                   ' SET jit = off AS %L', fn_batch, body));
    PERFORM counter_internal.citus_local_ddl(format('ALTER FUNCTION %s(timestamptz, timestamptz, text, boolean, integer) OWNER TO %s',
                   fn_batch, t.owner));
    PERFORM counter_internal.citus_local_ddl(format('REVOKE ALL ON FUNCTION %s(timestamptz, timestamptz, text, boolean, integer) FROM PUBLIC',
                   fn_batch));
    IF t.buffered THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION counter_internal.tracked_buffer_busy(integer, timestamptz, anyarray),'
                       ' counter_internal.tracked_buffered(integer, anyelement) TO %s', t.owner);
    END IF;
END
$fn$;

-- The body of the batch function of counter t on one node
-- (counter_internal.tracked_build_batch installs it; tracked_citus_batch is
-- the form for a counter whose state Citus distributes), with f its filter
-- as SQL over the row ce_new.
-- One reconciliation batch: the next ce_limit keys after ce_after (keys
-- with deltas before the watermark, keys with source rows whose event
-- time is in [ce_from, ce_w), and with ce_all every key with a base),
-- compared and repaired. The source rows are looked for only when that
-- range is not empty (ce_from < ce_w, decided before any row is read): a
-- run whose watermark did not move since the last one, the usual scheduled
-- run between two bucket boundaries, reads no source row beside its dirty
-- keys' (with no index on the event time it would scan the whole source
-- once per batch). It never waits for a writer: delta rows a writer
-- holds or is changing are skipped (counter_internal.row_lock_skip, not
-- FOR UPDATE SKIP LOCKED, which can wait on a row's update chain:
-- src/locks.cpp), and so is every key with a delta row it did not lock
-- (busy; it stays dirty and the next run takes it), so the rows it folds
-- are exactly the rows it locked.
CREATE OR REPLACE FUNCTION counter_internal.tracked_batch_sql(t counter.tracked, f text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    ops text[] := counter_internal.key_operators(t.key_type);
    bk record := counter_internal.tracked_batch_buckets(t);
BEGIN
    RETURN format($b$
#variable_conflict use_column
DECLARE
    ce_keys %5$s[];
    ce_after_key %5$s := ce_after::%5$s;
    ce_lk %5$s[];
    ce_lb timestamptz[];
    ce_ls smallint[];
    -- past every bucket an add may still write (application mode: an event
    -- time after now + max_future is refused, so delta rows from here on
    -- are left by 1.4 or by a shorter max_future, and are folded now)
    ce_h timestamptz := %12$s;
BEGIN
    IF ce_after IS NULL THEN
        %13$s
    ELSE
        %14$s
    END IF;
    IF ce_keys IS NULL THEN
        RETURN;
    END IF;
    SELECT pg_catalog.array_agg(d.key), pg_catalog.array_agg(d.bucket), pg_catalog.array_agg(d.shard)
    INTO ce_lk, ce_lb, ce_ls
    FROM %7$s d WHERE d.key %8$s ANY (ce_keys) AND %11$s
      AND counter_internal.row_lock_skip(d.tableoid::pg_catalog.regclass, d.ctid);

    RETURN QUERY
    WITH locked AS MATERIALIZED (
        SELECT l.key, l.bucket, l.shard
        FROM ROWS FROM (pg_catalog.unnest(ce_lk), pg_catalog.unnest(ce_lb), pg_catalog.unnest(ce_ls))
             AS l(key, bucket, shard)
    ), seen AS MATERIALIZED (
        SELECT d.key, d.bucket, d.shard, d.delta FROM %7$s d
        JOIN locked l ON d.key %8$s l.key AND d.bucket = l.bucket AND d.shard = l.shard
    ), busy AS MATERIALIZED (
        SELECT DISTINCT d.key FROM %7$s d WHERE d.key %8$s ANY (ce_keys) AND %11$s
          AND NOT EXISTS (SELECT FROM locked l WHERE l.key %8$s d.key AND l.bucket = d.bucket AND l.shard = d.shard)
        %10$s
    ), keys AS MATERIALIZED (
        SELECT k.key, k.o, EXISTS (SELECT FROM busy WHERE busy.key %8$s k.key) AS busy
        FROM pg_catalog.unnest(ce_keys) WITH ORDINALITY AS k(key, o)
    ), truth AS MATERIALIZED (
        SELECT ce_new.%2$s AS key, pg_catalog.count(*) AS n FROM %1$s AS ce_new
        WHERE ce_new.%2$s %8$s ANY (ce_keys) AND ce_new.%3$s < ce_w AND %4$s
        GROUP BY 1
    ), cmp AS MATERIALIZED (
        -- numeric, then bounded: no sum of deltas makes the batch fail
        SELECT k.key, LEAST(GREATEST(coalesce(b.base, 0)::numeric + coalesce(sd.s, 0), -9223372036854775807),
                            9223372036854775807)::bigint AS cached, coalesce(t.n, 0) AS truth, b.base
        FROM keys k
        LEFT JOIN %6$s b ON b.key %8$s k.key
        LEFT JOIN (SELECT seen.key, pg_catalog.sum(seen.delta) AS s FROM seen GROUP BY 1) sd
               ON sd.key %8$s k.key
        LEFT JOIN truth t ON t.key %8$s k.key
        WHERE NOT k.busy
    ), absorbed AS (
        -- the compared keys' rows it holds: a row whose amount is the
        -- amount it saw is deleted in one write, not updated to 0 and
        -- deleted after. That is every row (it holds them, and reads and
        -- writes them in one snapshot); the update keeps the batch exact if
        -- one ever were not
        UPDATE %7$s d SET delta = d.delta - seen.delta FROM seen
        WHERE d.key %8$s seen.key AND d.bucket = seen.bucket AND d.shard = seen.shard
          AND d.delta <> seen.delta AND EXISTS (SELECT FROM cmp WHERE cmp.key %8$s seen.key)
        RETURNING 1
    ), folded AS (
        DELETE FROM %7$s d USING seen
        WHERE d.key %8$s seen.key AND d.bucket = seen.bucket AND d.shard = seen.shard
          AND d.delta = seen.delta AND EXISTS (SELECT FROM cmp WHERE cmp.key %8$s seen.key)
        RETURNING 1
    ), installed AS (
        -- only the bases that change: a key whose base is its truth keeps
        -- its row as it is (an all-keys run or a verification slice rewrote
        -- every base it checked)
        INSERT INTO %6$s AS b (key, base)
        SELECT cmp.key, cmp.truth FROM cmp WHERE cmp.truth <> 0 AND cmp.base IS DISTINCT FROM cmp.truth
        ON CONFLICT (key) DO UPDATE SET base = excluded.base
        RETURNING 1
    ), emptied AS (
        DELETE FROM %6$s b USING cmp WHERE b.key %8$s cmp.key AND cmp.truth = 0
        RETURNING 1
    )
    SELECT k.key::text, c.cached, c.truth, k.busy, k.o FROM keys k LEFT JOIN cmp c ON c.key %8$s k.key;

    DELETE FROM %7$s d
    USING ROWS FROM (pg_catalog.unnest(ce_lk), pg_catalog.unnest(ce_lb), pg_catalog.unnest(ce_ls)) AS l(key, bucket, shard)
    WHERE d.key %8$s l.key AND d.bucket = l.bucket AND d.shard = l.shard AND d.delta = 0;
END
$b$, t.source::text, format('%I', t.key_column), format('%I', t.time_column), f, t.key_type::text,
        counter_internal.tracked_table(t, 'base'), counter_internal.tracked_table(t, 'delta'), ops[1], ops[3],
        -- a buffered counter: keys with buffered amounts before the watermark
        -- that the batch's snapshot cannot account for are busy too
        CASE WHEN t.buffered THEN format('UNION SELECT bk.k FROM pg_catalog.unnest('
            'counter_internal.tracked_buffer_busy(%s, ce_w, ce_keys)) AS bk(k)', t.counter_id) ELSE '' END,
        bk.cond, bk.horizon, counter_internal.tracked_keys_sql(t, f, 'first'),
        counter_internal.tracked_keys_sql(t, f, 'next'));
END
$fn$;

-- The delta buckets a batch of counter t folds, as SQL over the delta row
-- d (cond): those before the watermark ce_w, and in application mode those
-- from ce_h on, past every bucket an add may still write (an event time
-- after now + max_future is refused, so delta rows from there on are left
-- by 1.4 or by a shorter max_future, and are folded now); horizon: ce_h's
-- value, in fixed spans of seconds (the same bound whatever the session's
-- time zone). tracked_batch_sql and tracked_citus_batch use them.
CREATE OR REPLACE FUNCTION counter_internal.tracked_batch_buckets(t counter.tracked, OUT cond text, OUT horizon text)
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE WHEN t.mode OPERATOR(pg_catalog.=) 'application' THEN '(d.bucket < ce_w OR d.bucket >= ce_h)'
            ELSE 'd.bucket < ce_w' END,
       CASE WHEN t.mode OPERATOR(pg_catalog.=) 'application'
            THEN pg_catalog.format('pg_catalog.date_bin(interval ''1 second'' * %1$s, pg_catalog.clock_timestamp()'
                                   ' + interval ''1 second'' * %2$s, ''2000-01-01 00:00:00+00''::timestamptz)'
                                   ' + interval ''1 second'' * %1$s',
                                   pg_catalog.date_part('epoch', t.bucket_width), pg_catalog.date_part('epoch', t.max_future))
            ELSE '''infinity''::timestamptz' END
$$;

-- (Re)creates what counter t needs beyond its state tables: the batch
-- function and, in trigger mode, the triggers on the source. Used by
-- counter.track and by the update from 1.1.
CREATE OR REPLACE FUNCTION counter_internal.tracked_build(t counter.tracked)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    trg text;
    args text;
    cmd text;
BEGIN
    PERFORM counter_internal.tracked_build_batch(t);
    IF t.mode = 'trigger' THEN
        -- Citus (t.distributed): made on the distributed table and copied by
        -- Citus to every shard, where no catalog of counter_ext is; the
        -- arguments carry what the shard's trigger needs there
        -- (src/tracked.cpp, shard_fold)
        args := CASE WHEN t.distributed
                     THEN format('%L, %L, %L, %L, %L, %L, %L, %L, %L, %L', t.counter_id, 'citus', t.key_column,
                                 t.time_column, pg_catalog.date_part('epoch', t.bucket_width), t.shards,
                                 coalesce(counter_internal.filter_sql(t.source, t.filter, t.filter_tree, t.filter_relid,
                                                                      t.owner, 'ce_new'), ''),
                                 counter_internal.tracked_table(t, 'delta'), counter_internal.tracked_table(t, 'base'),
                                 -- (1.8) its name: how a worker node finds the counter to read it
                                 -- (src/tracked.cpp, worker_counters)
                                 t.name)
                          -- (1.8) keyed by another column: the column its
                          -- state is anchored by, and its anchors
                          || CASE WHEN t.anchor_column IS NOT NULL
                                  -- (buffered: then 'buffered')
                                  THEN format(', %L, %L', t.anchor_column, counter_internal.tracked_table(t, 'anchor'))
                                       || CASE WHEN t.buffered THEN ', ''buffered''' ELSE '' END
                                  -- (1.8) buffered: its shards' adds go to
                                  -- the buffer of their node
                                  WHEN t.buffered THEN ', ''buffered'''
                                  ELSE '' END
                     ELSE format('%L', t.counter_id) END;
        FOR cmd IN SELECT format('DROP TRIGGER %I ON %s', g.tgname, t.source) FROM pg_catalog.pg_trigger g
                   WHERE g.tgrelid OPERATOR(pg_catalog.=) t.source
                     AND g.tgname OPERATOR(pg_catalog.~) format('^counter_%s_r?(ins|del|upd|trunc)$', t.counter_id)
                   UNION ALL
                   SELECT format('CREATE TRIGGER %I AFTER %s ON %s %s FOR EACH STATEMENT'
                                 ' EXECUTE FUNCTION counter_internal.%s(%s)',
                                 format('counter_%s_%s', t.counter_id, k.trg), k.event, t.source, k.referencing,
                                 CASE WHEN t.distributed THEN 'tracked_shard_fold' ELSE 'tracked_fold' END, args)
                   FROM (VALUES ('ins', 'INSERT', 'REFERENCING NEW TABLE AS ce_new'),
                                ('del', 'DELETE', 'REFERENCING OLD TABLE AS ce_old'),
                                ('upd', 'UPDATE', 'REFERENCING OLD TABLE AS ce_old NEW TABLE AS ce_new'),
                                ('trunc', 'TRUNCATE', '')) AS k(trg, event, referencing) LOOP
            IF t.distributed THEN
                PERFORM counter_internal.citus_trigger_ddl(cmd);
            ELSE
                EXECUTE cmd;
            END IF;
        END LOOP;
    END IF;
    -- Replicated: the apply worker of a subscription (session_replication_role
    -- = replica) fires only row triggers enabled for replicas, and none of the
    -- above; these count what it applies, row by row.
    IF t.mode = 'trigger' AND t.replicated THEN
        FOREACH trg IN ARRAY ARRAY['ins', 'del', 'upd'] LOOP
            EXECUTE format('CREATE TRIGGER %I AFTER %s ON %s FOR EACH ROW EXECUTE FUNCTION counter_internal.tracked_fold(%L)',
                           format('counter_%s_r%s', t.counter_id, trg),
                           CASE trg WHEN 'ins' THEN 'INSERT' WHEN 'del' THEN 'DELETE' ELSE 'UPDATE' END,
                           t.source, t.counter_id);
        END LOOP;
        EXECUTE format('CREATE TRIGGER %I AFTER TRUNCATE ON %s'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION counter_internal.tracked_fold(%L)',
                       format('counter_%s_rtrunc', t.counter_id), t.source, t.counter_id);
        FOREACH trg IN ARRAY ARRAY['rins', 'rdel', 'rupd', 'rtrunc'] LOOP
            EXECUTE format('ALTER TABLE %s ENABLE REPLICA TRIGGER %I', t.source, format('counter_%s_%s', t.counter_id, trg));
        END LOOP;
    END IF;
END
$fn$;

-- Says loudly when a trigger-mode counter made without replicated => true
-- has a source that a subscription writes: at counter.track, and at each
-- reconciliation (the table may have become a subscription's later).
CREATE OR REPLACE FUNCTION counter_internal.tracked_replication_check(t counter.tracked)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    msg text := counter.replication_warning(t.source, t.replicated OR t.mode OPERATOR(pg_catalog.<>) 'trigger');
BEGIN
    IF msg IS NOT NULL THEN
        RAISE WARNING 'tracked counter "%": %', t.name, msg
            USING DETAIL = 'The counter is wrong by those rows until a reconciliation of their keys or the verification cycle finds them.',
                  HINT = format('Make it again with replicated => true: SELECT counter.untrack(%L); SELECT counter.track(%L, %L, ..., replicated => true);',
                                t.name, t.name, t.source::text);
    END IF;
END
$fn$;

-- The checks of counter.track's arguments that need no table
-- (counter_internal.track): none NULL but filter, the name, the mode, the
-- bounds of each setting, no counter of that name yet.
CREATE OR REPLACE FUNCTION counter_internal.track_check_args(name text, source regclass, key_column name,
    time_column name, mode text, watermark_lag interval, bucket_width interval, shards integer, batch_size integer,
    drift_log_threshold bigint, alert_threshold bigint, reconcile_every interval, verify_every interval,
    replicated boolean, buffered boolean, max_future interval)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF name IS NULL OR source IS NULL OR key_column IS NULL OR time_column IS NULL OR mode IS NULL
       OR watermark_lag IS NULL OR bucket_width IS NULL OR shards IS NULL OR batch_size IS NULL
       OR drift_log_threshold IS NULL OR alert_threshold IS NULL OR reconcile_every IS NULL
       OR verify_every IS NULL OR replicated IS NULL OR buffered IS NULL OR max_future IS NULL THEN
        RAISE EXCEPTION 'counter.track: only filter may be NULL' USING ERRCODE = '22004';
    END IF;
    IF name !~ '^[A-Za-z0-9_.-]{1,63}$' THEN
        RAISE EXCEPTION 'invalid tracked counter name "%"', name
            USING ERRCODE = '22023', DETAIL = 'A name is 1 to 63 letters, digits, ''_'', ''-'' or ''.''.';
    END IF;
    IF mode NOT IN ('trigger', 'application') THEN
        RAISE EXCEPTION 'invalid mode "%"', mode
            USING ERRCODE = '22023', HINT = 'mode is ''trigger'' or ''application''.';
    END IF;
    IF replicated AND mode OPERATOR(pg_catalog.<>) 'trigger' THEN
        RAISE EXCEPTION 'replicated => true needs mode ''trigger''' USING ERRCODE = '22023';
    END IF;
    IF shards < 1 OR shards > 1024 THEN
        RAISE EXCEPTION 'shards must be between 1 and 1024' USING ERRCODE = '22023';
    END IF;
    IF batch_size < 1 OR batch_size > 1000000 THEN
        RAISE EXCEPTION 'batch_size must be between 1 and 1000000' USING ERRCODE = '22023';
    END IF;
    IF watermark_lag < interval '0' THEN
        RAISE EXCEPTION 'watermark_lag must not be negative' USING ERRCODE = '22023';
    END IF;
    IF bucket_width <= interval '0' OR pg_catalog.date_part('month', bucket_width) <> 0
       OR pg_catalog.date_part('year', bucket_width) <> 0 OR bucket_width > interval '1 day' THEN
        RAISE EXCEPTION 'bucket_width must be positive, at most 1 day, without months'
            USING ERRCODE = '22023';
    END IF;
    IF reconcile_every < interval '1 second' THEN
        RAISE EXCEPTION 'reconcile_every must be at least 1 second' USING ERRCODE = '22023';
    END IF;
    IF verify_every < interval '1 minute' OR verify_every < reconcile_every THEN
        RAISE EXCEPTION 'verify_every must be at least 1 minute and at least reconcile_every' USING ERRCODE = '22023';
    END IF;
    -- whole days and a time, no months: the bound is a fixed span, whatever
    -- the time zone of the session that adds
    IF max_future < interval '0' OR max_future > interval '3660 days' OR pg_catalog.date_part('month', max_future) <> 0
       OR pg_catalog.date_part('year', max_future) <> 0 THEN
        RAISE EXCEPTION 'max_future must be between 0 and 3660 days, without months'
            USING ERRCODE = '22023';
    END IF;
    IF drift_log_threshold < 0 OR alert_threshold < 0 THEN
        RAISE EXCEPTION 'thresholds must not be negative' USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT FROM counter.tracked c WHERE c.name OPERATOR(pg_catalog.=) track_check_args.name) THEN
        RAISE EXCEPTION 'tracked counter "%" already exists', name USING ERRCODE = '42710';
    END IF;
END
$$;

-- The source of a counter to be made (counter_internal.track): a table that
-- is not temporary, of an owner caller belongs to (or caller a superuser),
-- with a time column of type timestamptz and a key column whose type can
-- be compared. Its owner and the key's type.
CREATE OR REPLACE FUNCTION counter_internal.track_check_source(source regclass, key_column name, time_column name,
    caller regrole, OUT owner regrole, OUT key_type regtype)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel record;
    tcol record;
BEGIN
    SELECT c.oid, c.relkind, c.relowner::regrole AS owner, c.relpersistence INTO rel
    FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) source;
    IF rel.relkind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION '% is not a table', source USING ERRCODE = '42809';
    END IF;
    IF rel.relpersistence OPERATOR(pg_catalog.=) 't' THEN
        RAISE EXCEPTION '% is a temporary table', source USING ERRCODE = '42809';
    END IF;
    IF NOT (pg_catalog.pg_has_role(caller, rel.owner, 'USAGE')
            OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) caller)) THEN
        RAISE EXCEPTION 'permission denied to track %', source
            USING ERRCODE = '42501', DETAIL = 'Only the owner of the source table (or a superuser) may.';
    END IF;
    SELECT c.atttypid::regtype INTO key_type FROM counter_internal.column_of(source, key_column) c;
    SELECT c.attname, c.atttypid::regtype AS typ INTO tcol FROM counter_internal.column_of(source, time_column) c;
    IF tcol.typ OPERATOR(pg_catalog.<>) 'timestamptz'::regtype THEN
        RAISE EXCEPTION 'time column "%" of % has type %, not timestamp with time zone', time_column, source, tcol.typ
            USING ERRCODE = '42804', HINT = 'Event times are compared with the watermark as timestamptz.';
    END IF;
    PERFORM counter_internal.key_operators(key_type);   -- 42883 unless the key type can be compared
    owner := rel.owner;
END
$$;

-- The parts of counter t's state, by the names counter_internal.tracked_table
-- gives them: base and delta; on Citus the inbox of an application-mode
-- counter (tracked_make_inbox), and the anchors and run table of a counter
-- keyed by another column than the distribution column (tracked_make_run).
CREATE OR REPLACE FUNCTION counter_internal.tracked_state_parts(t counter.tracked)
RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT ARRAY['base', 'delta']
       OPERATOR(pg_catalog.||) CASE WHEN t.distributed AND t.mode OPERATOR(pg_catalog.=) 'application'
                                    THEN ARRAY['inbox'] ELSE '{}'::text[] END
       OPERATOR(pg_catalog.||) CASE WHEN t.anchor_column IS NOT NULL THEN ARRAY['anchor', 'run']
                                    WHEN t.distributed THEN ARRAY['run'] ELSE '{}'::text[] END
$$;

-- The type of the column counter t's state is anchored by (its source's
-- distribution column: counter.tracked.anchor_column), or NULL.
CREATE OR REPLACE FUNCTION counter_internal.tracked_anchor_type(t counter.tracked)
RETURNS regtype
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE WHEN t.anchor_column IS NOT NULL
            THEN (counter_internal.column_of(t.source, t.anchor_column)).atttypid::pg_catalog.regtype END
$$;

-- The state tables of a new counter t (counter_internal.track): base (a
-- value per key) and delta (per key, bucket and shard), the owner's, no
-- right for PUBLIC; on Citus colocated with the source (its shards'
-- triggers write their own shard), else with the triggers that count their
-- writers (reads keep values while none is in flight: src/read_cache.cpp).
-- Keyed by another column than the distribution column (t.anchor_column,
-- doc/citus.md, "Keyed by another column"), each row of base and delta also
-- holds an anchor, a value of the distribution column that Citus places on
-- the shard whose rows it counts, and is distributed by it: a key has a
-- base and deltas on every shard that has its rows.
CREATE OR REPLACE FUNCTION counter_internal.tracked_make_state(t counter.tracked)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    base_t text := counter_internal.tracked_table(t, 'base');
    delta_t text := counter_internal.tracked_table(t, 'delta');
    anchor_type regtype := counter_internal.tracked_anchor_type(t);
    part text;
BEGIN
    IF anchor_type IS NULL THEN
        EXECUTE format('CREATE TABLE %s (key %s PRIMARY KEY, base bigint NOT NULL)', base_t, t.key_type);
        -- fillfactor (1.7): a delta row is updated in place by every flush and
        -- every fold that touches its key; room on its page keeps the update HOT
        -- (no new index entry, no index bloat for the next upsert's probe)
        EXECUTE format('CREATE TABLE %s (key %s NOT NULL, bucket timestamptz NOT NULL, shard smallint NOT NULL,'
                       ' delta bigint NOT NULL, PRIMARY KEY (key, bucket, shard)) WITH (fillfactor = 60)',
                       delta_t, t.key_type);
    ELSE
        EXECUTE format('CREATE TABLE %s (key %s NOT NULL, anchor %s NOT NULL, base bigint NOT NULL,'
                       ' PRIMARY KEY (key, anchor))', base_t, t.key_type, anchor_type);
        EXECUTE format('CREATE TABLE %s (key %s NOT NULL, bucket timestamptz NOT NULL, shard smallint NOT NULL,'
                       ' delta bigint NOT NULL, anchor %s NOT NULL, PRIMARY KEY (key, bucket, shard, anchor))'
                       ' WITH (fillfactor = 60)', delta_t, t.key_type, anchor_type);
    END IF;
    IF t.distributed THEN
        -- first: the event trigger counter_citus_state wants every state
        -- table of the counter there at each ALTER TABLE
        -- (tracked_make_run)
        EXECUTE format('CREATE TABLE %s (anchor %s NOT NULL, w timestamptz NOT NULL, keys %s[] NOT NULL,'
                       ' found_keys %s[], cached bigint[], truth bigint[], busy boolean[],'
                       ' pick integer, past %s, w_from timestamptz, every boolean, horizon timestamptz)',
                       counter_internal.tracked_table(t, 'run'), coalesce(anchor_type, t.key_type), t.key_type,
                       t.key_type, t.key_type);
        IF anchor_type IS NOT NULL THEN
            EXECUTE format('CREATE TABLE %s (anchor %s PRIMARY KEY)', counter_internal.tracked_table(t, 'anchor'),
                           anchor_type);
        END IF;
    END IF;
    IF t.distributed AND t.mode OPERATOR(pg_catalog.=) 'application' THEN
        PERFORM counter_internal.tracked_make_inbox(t);
    END IF;
    IF t.distributed THEN
        PERFORM counter_internal.tracked_make_run(t, coalesce(anchor_type, t.key_type));
    END IF;
    EXECUTE format('ALTER TABLE %s OWNER TO %s', base_t, t.owner);
    EXECUTE format('ALTER TABLE %s OWNER TO %s', delta_t, t.owner);
    EXECUTE format('REVOKE ALL ON %s, %s FROM PUBLIC', base_t, delta_t);
    IF t.distributed THEN
        FOREACH part IN ARRAY ARRAY['base', 'delta'] LOOP
            PERFORM counter_internal.citus_colocate(counter_internal.tracked_table(t, part)::regclass, t.source,
                                                    coalesce(CASE WHEN anchor_type IS NOT NULL THEN 'anchor' END, 'key'));
        END LOOP;
    ELSE
        PERFORM counter_internal.tracked_state_triggers(t);
    END IF;
END
$$;

-- The run table of counter t, whose state Citus distributes colocated with
-- its source, and, keyed by another column than the distribution column of
-- its source (doc/citus.md, "Keyed by another column"), its anchors, both
-- the owner's, no right for PUBLIC, distributed colocated with the source
-- by their column anchor (of anchor_type, the distribution column's):
-- - anchor: a value of the distribution column for each shard (or a few).
--   A shard's trigger anchors what it counts to the least one in the
--   shard's (src/tracked.cpp, shard_fold; it adds the distribution column
--   of a row it counts when the shard has none, as after a split), and
--   the batch function gives every shard one before each reconciliation
--   (tracked_anchored_batch).
-- - run: the reconciliation's way to each shard. The batch function
--   inserts a row per shard twice a batch, and on the shard this BEFORE
--   INSERT trigger (counter_internal.tracked_shard_reconcile), as the
--   table's owner, writes what it found into the row, which the insert
--   returns; the batch then deletes the rows. First a row with pick (the
--   batch's size), past (the last key of the batch before, or NULL),
--   w_from and every: the trigger puts the shard's next pick keys after
--   past into found_keys (the key choice of tracked_keys_sql, on the
--   shard). Then a row with the batch's keys and the watermark w: the
--   trigger compares and repairs those keys there, in one snapshot. Every
--   shard's part is in the batch's distributed transaction.
--   (1.8) Keyed by the distribution column (no anchor table; the trigger's
--   last argument 'key'), the run table's anchor is a key: the batch
--   function inserts a row per shard its batch's keys fall in, anchored
--   by one of them, with that shard's keys, the watermark and horizon (the
--   delta rows from horizon on are folded too: an application-mode
--   counter's, tracked_batch_buckets); the trigger locks, compares and
--   repairs them there (tracked_citus_batch).
-- The tables are made by tracked_make_state (before the inbox: every
-- state table there at each ALTER TABLE); this makes the rest.
CREATE OR REPLACE FUNCTION counter_internal.tracked_make_run(t counter.tracked, anchor_type regtype)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    anchor_t text := counter_internal.tracked_table(t, 'anchor');
    run_t text := counter_internal.tracked_table(t, 'run');
BEGIN
    -- moved and split with the source's shards by logical replication: a
    -- replica identity (it holds a row only within a batch)
    EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', run_t);
    IF t.anchor_column IS NOT NULL THEN
        EXECUTE format('ALTER TABLE %s OWNER TO %s', anchor_t, t.owner);
        EXECUTE format('REVOKE ALL ON %s FROM PUBLIC', anchor_t);
        PERFORM counter_internal.citus_colocate(anchor_t::regclass, t.source, 'anchor');
    END IF;
    EXECUTE format('ALTER TABLE %s OWNER TO %s', run_t, t.owner);
    EXECUTE format('REVOKE ALL ON %s FROM PUBLIC', run_t);
    PERFORM counter_internal.citus_colocate(run_t::regclass, t.source, 'anchor');
    -- the arguments: counter id, 'citus', the source, its key column, time
    -- column, the filter as SQL printed from its stored tree (or ''), the
    -- delta and base tables (none changes after track), and 'key' for a
    -- counter keyed by the distribution column (its state has no anchor)
    PERFORM counter_internal.citus_trigger_ddl(format(
        'CREATE TRIGGER %I BEFORE INSERT ON %s FOR EACH ROW EXECUTE FUNCTION counter_internal.tracked_shard_reconcile(%s)',
        format('counter_%s_run', t.counter_id), run_t,
        concat_ws(', ', format('%L, %L, %L, %L, %L, %L, %L, %L', t.counter_id, 'citus', t.source::text, t.key_column,
            t.time_column,
            coalesce(counter_internal.filter_sql(t.source, t.filter, t.filter_tree, t.filter_relid, t.owner, 'ce_new'), ''),
            counter_internal.tracked_table(t, 'delta'), counter_internal.tracked_table(t, 'base')),
            CASE WHEN t.anchor_column IS NULL THEN quote_literal('key') END)));
END
$$;

-- The inbox of an application-mode counter t whose state Citus distributes
-- (doc/citus.md, "Tracked counters in application mode"): a table of the
-- owner's beside the state, colocated with the source, that never holds a
-- row (CHECK (false)). counter.add inserts (key, bucket, slot, amount) into
-- it as the caller; on the key's shard the row trigger
-- counter_internal.tracked_shard_add checks that the caller may insert into
-- the source, adds the amount to the colocated delta shard as the owner,
-- and drops the row. PUBLIC may insert (the trigger asks for INSERT on the
-- source, the right counter.add asks for).
CREATE OR REPLACE FUNCTION counter_internal.tracked_make_inbox(t counter.tracked)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    inbox text := counter_internal.tracked_table(t, 'inbox');
BEGIN
    EXECUTE format('CREATE TABLE %s (key %s NOT NULL, bucket timestamptz NOT NULL, shard smallint NOT NULL,'
                   ' delta bigint NOT NULL, CONSTRAINT never_kept CHECK (false))', inbox, t.key_type);
    -- Citus moves, splits and rebalances the colocated shards by logical
    -- replication unless told otherwise: every table of the group needs a
    -- replica identity (this one never holds a row to send)
    EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', inbox);
    EXECUTE format('ALTER TABLE %s OWNER TO %s', inbox, t.owner);
    EXECUTE format('REVOKE ALL ON %s FROM PUBLIC', inbox);
    EXECUTE format('GRANT INSERT ON %s TO PUBLIC', inbox);
    PERFORM counter_internal.citus_colocate(inbox::regclass, t.source);
    -- the arguments: counter id, 'citus', the source, the delta table, and
    -- what counter.add needs on a worker node, where counter_ext's catalog
    -- is not (src/tracked.cpp, worker_counter): the name, the bucket width
    -- in microseconds, the slots, max_future in microseconds (none changes after
    -- track; a new owner makes the inbox again); (1.8) 'buffered' for a
    -- buffered counter: the trigger adds to the buffer of its node
    PERFORM counter_internal.citus_trigger_ddl(format(
        'CREATE TRIGGER %I BEFORE INSERT ON %s FOR EACH ROW EXECUTE FUNCTION counter_internal.tracked_shard_add(%L, %L, %L, %L, %L, %L, %L, %L%s)',
        format('counter_%s_add', t.counter_id), inbox, t.counter_id, 'citus', t.source::text,
        counter_internal.tracked_table(t, 'delta'), t.name,
        (pg_catalog.date_part('epoch', t.bucket_width) OPERATOR(pg_catalog.*) 1000000)::bigint, t.shards,
        (pg_catalog.date_part('epoch', t.max_future) OPERATOR(pg_catalog.*) 1000000)::bigint,
        CASE WHEN t.buffered THEN ', ''buffered''' ELSE '' END));
END
$$;

-- The rows already in the source of a new counter t, a backfill for its
-- first runs (30_tracked.sql), counted as its owner; t comes back with
-- backfill_left. On Citus, which refuses a read as the owner of placements
-- that this transaction changed as counter_ext's role (the triggers), a bare
-- count(*) as that role, which runs no code of the owner's (no filter).
CREATE OR REPLACE FUNCTION counter_internal.tracked_count_backfill(t counter.tracked)
RETURNS counter.tracked
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    sql text := format('SELECT count(*) FROM %s WHERE %I IS NOT NULL AND %I IS NOT NULL', t.source, t.key_column,
                       t.time_column);
BEGIN
    IF t.distributed THEN
        EXECUTE sql INTO t.backfill_left;
    ELSE
        SELECT x.n INTO t.backfill_left FROM counter_internal.exec_as_owner(t.owner, sql || ' AND $1', true) AS x(n bigint);
    END IF;
    UPDATE counter.tracked c SET backfill_left = t.backfill_left WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id
    RETURNING * INTO t;
    RETURN t;
END
$$;

-- Registers a tracked counter. See doc/reference/tracked.md.
CREATE OR REPLACE FUNCTION counter_internal.track(
    name text,
    source regclass,
    key_column name,
    time_column name,
    filter text DEFAULT NULL,
    mode text DEFAULT 'trigger',
    watermark_lag interval DEFAULT interval '5 seconds',
    bucket_width interval DEFAULT interval '1 minute',
    shards integer DEFAULT 64,
    batch_size integer DEFAULT 1000,
    drift_log_threshold bigint DEFAULT 0,
    alert_threshold bigint DEFAULT 1000,
    reconcile_every interval DEFAULT interval '1 minute',
    verify_every interval DEFAULT interval '1 day',
    replicated boolean DEFAULT false,
    buffered boolean DEFAULT false,
    max_future interval DEFAULT interval '1 day')
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
    caller regrole := counter_internal.caller();
    src record; -- counter_internal.track_check_source: owner, key_type
    t counter.tracked;
    compiled text[];
    distributed boolean := false;
    anchor_column name;
BEGIN
    PERFORM counter_internal.track_check_args(name, source, key_column, time_column, mode, watermark_lag,
        bucket_width, shards, batch_size, drift_log_threshold, alert_threshold, reconcile_every, verify_every,
        replicated, buffered, max_future);
    IF mode OPERATOR(pg_catalog.=) 'trigger' THEN
        -- on Citus: a hash-distributed source, its state anchored to the
        -- distribution column when the key is another column, or refused
        -- (0A000)
        distributed := counter_internal.citus_tracked_check(source, key_column, buffered, replicated);
        IF distributed THEN
            anchor_column := counter_internal.citus_anchor_column(source, key_column);
        END IF;
    ELSE
        -- on Citus: the state beside the rows when the source is
        -- hash-distributed by the key (buffered too since 1.8: buffered on
        -- the node of the key's shard), else the coordinator's
        distributed := counter_internal.citus_app_colocated(source, key_column);
    END IF;
    SELECT * INTO src FROM counter_internal.track_check_source(source, key_column, time_column, caller);
    -- The filter is resolved here, once, as the owner (src/filter.cpp).
    IF filter IS NOT NULL THEN
        compiled := counter_internal.filter_compile(source, filter, src.owner);
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_index i
                   WHERE i.indrelid OPERATOR(pg_catalog.=) source
                     AND (i.indkey[0] OPERATOR(pg_catalog.=) (counter_internal.column_of(source, time_column)).attnum
                          OR i.indkey[1] OPERATOR(pg_catalog.=) (counter_internal.column_of(source, time_column)).attnum)) THEN
        RAISE WARNING 'no index on %(%): each scheduled reconciliation scans the table for rows newly past the watermark',
            source, time_column
            USING HINT = format('CREATE INDEX ON %s (%I)', source, time_column);
    END IF;

    INSERT INTO counter.tracked AS c (name, source, key_column, key_type, time_column, filter, filter_tree,
        filter_relid, mode, watermark_lag, bucket_width, shards, batch_size, drift_log_threshold, alert_threshold,
        reconcile_every, owner, verify_every, source_relid, replicated, buffered, max_future, distributed,
        anchor_column)
    VALUES (name, source, key_column, src.key_type, time_column, compiled[1], compiled[2],
        CASE WHEN compiled IS NOT NULL THEN source::oid END, mode, watermark_lag, bucket_width, shards,
        batch_size, drift_log_threshold, alert_threshold, reconcile_every, src.owner, verify_every, source::oid,
        replicated, buffered, max_future, distributed, anchor_column)
    RETURNING * INTO t;
    IF distributed THEN
        -- beside the source, so that Citus can move its shards with the source's
        t.state_schema := counter_internal.citus_state_schema('counter', source, src.owner,
            ARRAY(SELECT format('counter_tracked_%s_%s', t.counter_id, p.p)
                  FROM pg_catalog.unnest(counter_internal.tracked_state_parts(t)) AS p(p)));
        UPDATE counter.tracked c SET state_schema = t.state_schema WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id;
    END IF;
    PERFORM counter_internal.tracked_make_state(t);
    PERFORM counter_internal.tracked_build(t);
    PERFORM counter_internal.tracked_invalidate();
    -- counted after the functions are made (on Citus a function made after a
    -- parallel read of a distributed table in the same transaction fails)
    t := counter_internal.tracked_count_backfill(t);

    PERFORM counter.job_register('reconcile', name, reconcile_every);
    IF mode OPERATOR(pg_catalog.=) 'trigger' THEN
        PERFORM counter_internal.tracked_replication_check(t);
    END IF;
    IF buffered THEN
        INSERT INTO counter_internal.tracked_flushes (counter_id, epoch)
        VALUES (t.counter_id, counter_internal.tracked_buffer_epoch());
        PERFORM counter.job_register('flush', name,
            coalesce(pg_catalog.current_setting('counter_ext.flush_interval', true), '1s')::interval);
        IF distributed THEN
            -- Citus: where each shard is, and its node's shared table
            PERFORM counter_internal.tracked_citus_flush(t, true);
        END IF;
        IF counter_internal.tracked_buffer_epoch() IS NULL THEN
            RAISE WARNING 'counter_ext is not loaded by shared_preload_libraries: the adds of buffered counter "%" are written directly', name
                USING HINT = 'Add counter_ext to shared_preload_libraries and restart the server.';
        END IF;
    END IF;
    RETURN t.counter_id;
END
$fn$;
-- The entry point: counter_entry (src/owner.cpp) notes the role calling it, then runs
-- counter_internal.track above with the same arguments.
CREATE OR REPLACE FUNCTION counter.track(
    name text,
    source regclass,
    key_column name,
    time_column name,
    filter text DEFAULT NULL,
    mode text DEFAULT 'trigger',
    watermark_lag interval DEFAULT interval '5 seconds',
    bucket_width interval DEFAULT interval '1 minute',
    shards integer DEFAULT 64,
    batch_size integer DEFAULT 1000,
    drift_log_threshold bigint DEFAULT 0,
    alert_threshold bigint DEFAULT 1000,
    reconcile_every interval DEFAULT interval '1 minute',
    verify_every interval DEFAULT interval '1 day',
    replicated boolean DEFAULT false,
    buffered boolean DEFAULT false,
    max_future interval DEFAULT interval '1 day')
RETURNS integer
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_entry';
COMMENT ON FUNCTION counter.track(text, regclass, name, name, text, text, interval, interval, integer, integer,
    bigint, bigint, interval, interval, boolean, boolean, interval) IS 'registers a tracked counter of count(*) per key of a source table';

-- Removes a tracked counter and every object track created for it.
CREATE OR REPLACE FUNCTION counter_internal.untrack(name text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
    t counter.tracked := counter_internal.tracked_get(name);
    src regclass;
    trg text;
    rels regclass[];
BEGIN
    PERFORM counter_internal.require_owner(t.owner, pg_catalog.format('tracked counter "%s"', t.name), 'untrack it');
    -- The source, when it still exists (to_regclass of the OID's text is no such
    -- test: since PostgreSQL 16 it takes a number as the OID it names).
    SELECT c.oid INTO src FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) t.source::oid;
    IF NOT t.distributed THEN
        -- The locks the drops below take and the catalog row, all or none,
        -- never waiting while holding one (counter_internal.lock_all): a
        -- reconciliation's batch holds the source's or the state's lock to
        -- its commit and writes this row before it; counter.reconcile writes
        -- the row first; a buffered counter's reconciliation flushes,
        -- holding the delta table, then reads the source. Each of them
        -- deadlocked with untrack taking its locks one by one in a fixed
        -- order (40P01, seen: tracked_untrack_job.spec,
        -- test/scripts/drop_beside_jobs.sh).
        rels := ARRAY(
            SELECT x.r FROM (SELECT 0::bigint AS o, src AS r WHERE t.mode = 'trigger' AND src IS NOT NULL
                             UNION ALL
                             SELECT p.o, pg_catalog.to_regclass(counter_internal.tracked_table(t, p.p))
                             FROM pg_catalog.unnest(ARRAY['base', 'delta']) WITH ORDINALITY AS p(p, o)) x
            WHERE x.r IS NOT NULL ORDER BY x.o);
        PERFORM counter_internal.lock_all(rels, pg_catalog.array_fill('ACCESS EXCLUSIVE'::text, ARRAY[cardinality(rels)]),
                                          'counter.tracked', 'counter_id', t.counter_id);
    ELSE
        -- Citus: first the counter's reconciliation lock, holding nothing
        -- (a batch takes it without waiting, so it never waits for us): a
        -- batch goes from shard to shard, node to node, holding each one's
        -- locks, while the drops below take every shard's at once; the two
        -- waited for each other across nodes and Citus cancelled the drop
        -- (test/scripts/citus_drop_beside_jobs.sh)
        PERFORM counter_internal.lock_take('tracked', t.counter_id);
        IF t.buffered AND pg_catalog.to_regclass(counter_internal.tracked_table(t, 'delta')) IS NOT NULL THEN
            -- buffered: what the nodes hold goes to the delta shards first
            -- (each node in a transaction of its own), and with them
            PERFORM counter_internal.tracked_citus_flush(t, false);
        END IF;
    END IF;
    IF t.mode = 'trigger' AND src IS NOT NULL THEN
        FOR trg IN SELECT g.tgname FROM pg_catalog.pg_trigger g
                   WHERE g.tgrelid OPERATOR(pg_catalog.=) src
                     AND g.tgname OPERATOR(pg_catalog.~) format('^counter_%s_r?(ins|del|upd|trunc)$', t.counter_id) LOOP
            IF t.distributed THEN
                -- on every shard, as the owner: Citus refuses to change as
                -- another role placements its writes changed in this
                -- transaction
                PERFORM counter_internal.citus_trigger_ddl_as(t.owner, format('DROP TRIGGER %I ON %s', trg, src));
            ELSE
                EXECUTE format('DROP TRIGGER %I ON %s', trg, src);
            END IF;
        END LOOP;
    END IF;
    -- on this node only (Citus: after a parallel distributed operation in
    -- this transaction it refuses to propagate a function's DDL)
    PERFORM counter_internal.citus_local_ddl(format('DROP FUNCTION IF EXISTS counter_internal.%I(timestamptz, timestamptz, text, boolean, integer)',
                   format('tracked_%s_batch', t.counter_id)));
    IF t.distributed AND pg_catalog.to_regclass(counter_internal.tracked_table(t, 'base')) IS NOT NULL THEN
        -- distributed: dropped on every node, as the owner (above)
        PERFORM counter_internal.exec_as_owner_cmd(t.owner, 'DROP TABLE IF EXISTS ' || pg_catalog.array_to_string(
            ARRAY(SELECT counter_internal.tracked_table(t, p.p)
                  FROM pg_catalog.unnest(counter_internal.tracked_state_parts(t)) AS p(p)), ', '), true);
    ELSE
        EXECUTE format('DROP TABLE IF EXISTS %s, %s', counter_internal.tracked_table(t, 'base'),
                       counter_internal.tracked_table(t, 'delta'));
    END IF;
    IF t.distributed THEN
        -- Citus: the catalog row after the drops, which waited for a batch
        -- holding the shards' locks (that batch writes the row before its
        -- commit: locked first, the two waited for each other on two nodes
        -- and Citus cancelled one, seen in test/scripts/citus_trigger.sh)
        PERFORM 1 FROM counter.tracked c WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id FOR UPDATE;
    END IF;
    IF t.buffered AND NOT t.distributed THEN
        PERFORM counter_internal.tracked_buffer_forget(t.counter_id);
    END IF;
    IF t.buffered THEN
        PERFORM counter.job_unregister('flush', name);
    END IF;
    DELETE FROM counter.tracked c WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id;
    PERFORM counter_internal.run_forget('reconcile', t.counter_id);
    PERFORM counter_internal.tracked_invalidate();
    PERFORM counter.job_unregister('reconcile', name);
END
$fn$;
-- The entry point: counter_entry (src/owner.cpp) notes the role calling it, then runs
-- counter_internal.untrack above with the same arguments.
CREATE OR REPLACE FUNCTION counter.untrack(name text)
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_entry';
COMMENT ON FUNCTION counter.untrack(text) IS 'removes a tracked counter, its state, triggers, history and job';

-- Application mode: adds delta to key, attributed to event time 'at'. The
-- key is of the counter's key type, or text (through the type's input
-- function). src/tracked.cpp: runs as the caller, checks INSERT on the
-- source, then writes as the source's owner.
CREATE OR REPLACE FUNCTION counter.add(name text, key anyelement, delta bigint DEFAULT 1,
                            at timestamptz DEFAULT pg_catalog.now())
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_tracked_add';
COMMENT ON FUNCTION counter.add(text, anyelement, bigint, timestamptz) IS
    'application mode: adds delta (default 1) to a key of a tracked counter at event time "at"';

-- Value of one key: base + every delta; 0 for a key never seen. Needs SELECT
-- on the source.
CREATE OR REPLACE FUNCTION counter.value(name text, key anyelement)
RETURNS bigint
LANGUAGE c STABLE
AS 'MODULE_PATHNAME', 'counter_tracked_value';
COMMENT ON FUNCTION counter.value(text, anyelement) IS 'value of one key of a tracked counter (0 when never seen)';

-- Values of many keys, one row per distinct key given, in key order.
CREATE OR REPLACE FUNCTION counter.values_of(name text, keys anyarray)
RETURNS TABLE (key anyelement, value bigint)
LANGUAGE c STABLE
AS 'MODULE_PATHNAME', 'counter_tracked_values_of';
COMMENT ON FUNCTION counter.values_of(text, anyarray) IS 'values of many keys of a tracked counter';

-- The statement that reads every key of a counter whose state Citus
-- distributes (base and delta tables, qualified names): each key's amounts
-- summed on its shard, in numeric, bounded to bigint; $1 is exec_as_owner's
-- argument. tracked_all_values runs it on the coordinator and on a worker
-- node.
CREATE OR REPLACE FUNCTION counter_internal.tracked_distributed_values_sql(base text, delta text, anchors text,
    buffered boolean, key_type regtype)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
-- (anchored, 'anchors' not NULL: a counter keyed by another column than the
-- distribution column, whose state is distributed by its column anchor: the
-- union names it, so that Citus pushes the union down to the shards, and
-- each key's sum is made from the shards' parts; buffered, 1.8: what the
-- buffer of each key's shard's node holds added there, where its group is
-- made, or, anchored, each shard's buffered amounts one more part of the
-- union, read once per shard at its least anchor)
SELECT pg_catalog.format(
    'WITH x AS MATERIALIZED (SELECT z.key, pg_catalog.sum(z.v)%5$s AS s FROM ('
    ' SELECT b.key, %3$s b.base::numeric AS v FROM %1$s b UNION ALL SELECT d.key, %4$s d.delta::numeric FROM %2$s d%6$s) z'
    ' GROUP BY z.key)'
    ' SELECT x.key::text, LEAST(GREATEST(x.s, -9223372036854775807), 9223372036854775807)::bigint'
    ' FROM x WHERE $1 ORDER BY x.key', base, delta, CASE WHEN anchors IS NOT NULL THEN 'b.anchor,' ELSE '' END,
    CASE WHEN anchors IS NOT NULL THEN 'd.anchor,' ELSE '' END,
    CASE WHEN buffered AND anchors IS NULL
         THEN pg_catalog.format(' OPERATOR(pg_catalog.+) counter_internal.tracked_shard_pending(%L::pg_catalog.regclass, z.key)', delta)
         ELSE '' END,
    CASE WHEN buffered AND anchors IS NOT NULL
         THEN pg_catalog.format(' UNION ALL SELECT (p.r).key, p.anchor, (p.r).amount::numeric FROM (SELECT a.anchor,'
                                ' counter_internal.tracked_anchor_pending_rows(%L::pg_catalog.regclass, %L::pg_catalog.regclass,'
                                ' a.anchor, NULL::%s) AS r FROM %s a) p', delta, anchors, key_type, anchors)
         ELSE '' END)
$$;

-- Every key with state of every tracked counter the caller may read (SELECT
-- on the source), each read as its owner. It touches only counter.tracked
-- itself; the state is read through exec_as_owner. On a Citus worker node,
-- whose copy of counter.tracked is empty, the counters a trigger describes
-- there (1.8; before, refused with 0A000).
CREATE OR REPLACE FUNCTION counter_internal.tracked_all_values()
RETURNS TABLE (counter text, key text, value bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    t counter.tracked;
    w record;
    caller regrole := counter_internal.caller();
    on_worker boolean := false;
    q text;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_local_group') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_local_group g WHERE g.groupid OPERATOR(pg_catalog.<>) 0)'
            INTO on_worker;
    END IF;
    IF on_worker THEN
        -- counter_ext's catalog is the coordinator's: here, the counters a
        -- trigger describes (state beside the rows), as counter.value reads
        -- them on a worker node
        IF pg_catalog.current_setting('application_name') LIKE 'citus\_internal gpid=%' THEN
            -- a query Citus sent here runs on a shard, where Citus refuses
            -- a distributed query
            RAISE EXCEPTION 'counter.tracked_values is not read in a query Citus sends to a worker node'
                USING ERRCODE = 'feature_not_supported',
                      HINT = 'Read it in a statement of its own (doc/citus.md).';
        END IF;
        IF EXISTS (SELECT FROM counter_internal.tracked_worker_counters() d GROUP BY d.name HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) 1) THEN
            RAISE EXCEPTION 'a tracked counter is named by two triggers on this Citus worker node'
                USING ERRCODE = 'duplicate_object', HINT = 'Read it on the coordinator.';
        END IF;
        FOR w IN SELECT x.* FROM counter_internal.tracked_worker_counters() x ORDER BY x.name LOOP
            CONTINUE WHEN NOT pg_catalog.has_table_privilege(caller, w.source, 'SELECT');
            BEGIN
                RETURN QUERY SELECT w.name, v.key, v.value FROM counter_internal.exec_as_owner_listed(w.owner,
                    counter_internal.tracked_distributed_values_sql(
                        pg_catalog.format('%I.%I', w.state_schema, pg_catalog.format('counter_tracked_%s_base', w.counter_id)),
                        pg_catalog.format('%I.%I', w.state_schema, pg_catalog.format('counter_tracked_%s_delta', w.counter_id)),
                        CASE WHEN w.anchored
                             THEN pg_catalog.format('%I.%I', w.state_schema, pg_catalog.format('counter_tracked_%s_anchor', w.counter_id))
                        END, w.buffered, w.key_type),
                    true) AS v(key text, value bigint);
            EXCEPTION WHEN OTHERS THEN
                IF counter_internal.owner_read_failed('tracked counter', w.name, w.owner, 'counter.tracked_values',
                                                      'It is left out.', SQLSTATE, SQLERRM) THEN
                    RAISE;
                END IF;
            END;
        END LOOP;
        RETURN;
    END IF;
    FOR t IN SELECT * FROM counter.tracked c ORDER BY c.name LOOP
        CONTINUE WHEN NOT pg_catalog.has_table_privilege(caller, t.source, 'SELECT');
        IF t.distributed THEN
            -- Citus: base and delta distributed colocated, read and summed
            -- per key on the shards (src/tracked.cpp, value_plan)
            q := counter_internal.tracked_distributed_values_sql(counter_internal.tracked_table(t, 'base'),
                                                                 counter_internal.tracked_table(t, 'delta'),
                                                                 CASE WHEN t.anchor_column IS NOT NULL
                                                                      THEN counter_internal.tracked_table(t, 'anchor') END,
                                                                 t.buffered, t.key_type);
        ELSE
            -- a buffered counter adds what its buffer holds beyond the table
            q := format(
                'WITH m AS MATERIALIZED (%4$s)'
                -- numeric, then bounded: one key's sum never makes the others unreadable
                ' SELECT k.key::text, LEAST(GREATEST(coalesce(b.base, 0)::numeric + coalesce(d.s, 0) + coalesce(m.amount, 0),'
                ' -9223372036854775807), 9223372036854775807)::bigint'
                ' FROM (SELECT key FROM %1$s UNION SELECT key FROM %2$s UNION SELECT key FROM m) k'
                ' LEFT JOIN %1$s b ON b.key %3$s k.key'
                ' LEFT JOIN (SELECT key, pg_catalog.sum(delta) AS s FROM %2$s GROUP BY key) d ON d.key %3$s k.key'
                ' LEFT JOIN m ON m.key %3$s k.key'
                ' WHERE $1 ORDER BY k.key',
                counter_internal.tracked_table(t, 'base'), counter_internal.tracked_table(t, 'delta'),
                (counter_internal.key_operators(t.key_type))[1],
                CASE WHEN t.buffered
                     THEN format('SELECT x.key, x.amount FROM counter_internal.tracked_buffered(%s, NULL::%s) x',
                                 t.counter_id, t.key_type)
                     ELSE format('SELECT NULL::%s AS key, 0::bigint AS amount WHERE false', t.key_type) END);
        END IF;
        BEGIN
            RETURN QUERY SELECT t.name, v.key, v.value
                         FROM counter_internal.exec_as_owner_listed(t.owner, q, true) AS v(key text, value bigint);
        EXCEPTION WHEN OTHERS THEN
            IF counter_internal.owner_read_failed('tracked counter', t.name, t.owner, 'counter.tracked_values',
                                                  'It is left out.', SQLSTATE, SQLERRM) THEN
                RAISE;
            END IF;
        END;
    END LOOP;
END
$fn$;
-- The entry point: counter_entry (src/owner.cpp) notes the role calling it, then runs
-- counter_internal.tracked_all_values above with the same arguments.
CREATE OR REPLACE FUNCTION counter.tracked_all_values()
RETURNS TABLE (counter text, key text, value bigint)
LANGUAGE c STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_entry';

CREATE OR REPLACE VIEW counter.tracked_values AS SELECT * FROM counter.tracked_all_values();
COMMENT ON VIEW counter.tracked_values IS 'every key with state of every tracked counter the caller may read';

-- The watermark a run uses: the given one (or now - lag), down to a bucket
-- boundary.
CREATE OR REPLACE FUNCTION counter_internal.tracked_watermark(t counter.tracked, w timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.date_bin(t.bucket_width, coalesce(w, pg_catalog.now() OPERATOR(pg_catalog.-) t.watermark_lag),
                               '2000-01-01 00:00:00+00'::timestamptz)
$$;

-- The keys of one reconciliation batch of counter t: its batch_size, and
-- on Citus batch_size per shard of its source (batch_size times the
-- source's shard count, at most 100,000 unless batch_size is larger), for
-- every counter of a distributed source, whatever its mode: each batch
-- costs a fan-out to every shard whatever its size (application mode: two
-- distributed queries; trigger mode: the key choice), so its keys are taken
-- in proportion (doc/citus.md, "Batch size").
CREATE OR REPLACE FUNCTION counter_internal.tracked_batch_keys(t counter.tracked)
RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    shards bigint;
BEGIN
    -- (a counter keyed by another column than the distribution column: a
    -- batch's keys go to every shard, in one statement, and each shard
    -- takes the few of them it holds (src/tracked.cpp, shard_keys): as
    -- many keys for the same work per shard)
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_shard') IS NULL THEN
        RETURN t.batch_size;
    END IF;
    EXECUTE 'SELECT pg_catalog.count(*) FROM pg_catalog.pg_dist_shard s WHERE s.logicalrelid OPERATOR(pg_catalog.=) $1'
        INTO shards USING t.source;
    RETURN GREATEST(t.batch_size, LEAST(t.batch_size::bigint * shards, 100000))::integer;
END
$fn$;

-- One batch of a run, inside the caller's transaction: takes the counter's
-- lock (false when another reconciler holds it), runs the counter's
-- batch function as the owner, records drifted keys; 'after' moves to the
-- batch's last key.
CREATE OR REPLACE FUNCTION counter_internal.tracked_run_batch(t counter.tracked, run bigint, w timestamptz,
    w_from timestamptz, all_keys boolean, INOUT after text, OUT locked boolean, OUT checked bigint,
    OUT corrected bigint, OUT pos bigint, OUT neg bigint, OUT max_abs bigint, OUT busy bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    propagate text;
BEGIN
    locked := counter_internal.lock_take('tracked', t.counter_id, wait => false);
    IF NOT locked THEN
        RETURN;
    END IF;
    IF t.distributed THEN
        -- Citus: the table as a distributed query takes it, before any
        -- shard. The batch reads and writes the shards by name, one after
        -- another; a DDL on the table (Citus's DROP TRIGGER of another
        -- counter's untrack or of a rollup_drop) takes it ACCESS EXCLUSIVE
        -- on every node first and then all shards at once: without this
        -- each held a shard the other waited for, across nodes, and Citus
        -- cancelled one (test/scripts/citus_drop_beside_jobs.sh). On this
        -- node only: the DDL takes it here before any shard, and Citus
        -- would send a propagated LOCK to every node, each batch.
        propagate := pg_catalog.current_setting('citus.enable_ddl_propagation');
        PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true);
        PERFORM counter_internal.exec_as_owner_cmd(t.owner, format('LOCK TABLE %s IN ACCESS SHARE MODE', t.source), true);
        PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', propagate, true);
    END IF;
    WITH r AS MATERIALIZED (
        SELECT * FROM counter_internal.exec_as_owner(t.owner,
            format('SELECT * FROM counter_internal.%I($1, $2, $3, $4, $5)', format('tracked_%s_batch', t.counter_id)),
            w, CASE WHEN all_keys THEN '-infinity'::timestamptz ELSE w_from END, after, all_keys,
            counter_internal.tracked_batch_keys(t))
        AS x(key text, cached bigint, truth bigint, busy boolean, n bigint)
    ), d AS MATERIALIZED (   -- drift in numeric: a cached value may be near either end of bigint
        SELECT r.*, r.cached::numeric - r.truth AS drift FROM r
    ), logged AS (
        INSERT INTO counter.tracked_key_drift (run_id, key, cached, truth, drift)
        SELECT run, d.key, d.cached, d.truth, LEAST(GREATEST(d.drift, -9223372036854775807), 9223372036854775807)::bigint
        FROM d WHERE NOT d.busy AND d.drift <> 0 AND abs(d.drift) > t.drift_log_threshold
    )
    SELECT count(*) FILTER (WHERE NOT r.busy), count(*) FILTER (WHERE r.drift <> 0),
        LEAST(coalesce(sum(r.drift) FILTER (WHERE r.drift > 0), 0), 9223372036854775807)::bigint,
        GREATEST(coalesce(sum(r.drift) FILTER (WHERE r.drift < 0), 0), -9223372036854775807)::bigint,
        LEAST(coalesce(max(abs(r.drift)), 0), 9223372036854775807)::bigint, count(*) FILTER (WHERE r.busy),
        (SELECT r2.key FROM r r2 ORDER BY r2.n DESC LIMIT 1)
    INTO checked, corrected, pos, neg, max_abs, busy, after
    FROM d r;
    IF after IS NULL THEN
        checked := 0;   -- no key left
    ELSIF checked = 0 THEN
        checked := -1;  -- every key of this batch was busy: go on after it
    END IF;
END
$fn$;

-- A run of counter t that could not be done (its lock is taken: another
-- session reconciles it): recorded as skipped with the reason
-- (counter_internal.run_skipped); when the counter's last 3 runs were all
-- skipped, the alert (counter_internal.alert), as for drift.
CREATE OR REPLACE FUNCTION counter_internal.tracked_skipped(t counter.tracked, reason text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    run bigint := counter_internal.run_skipped('reconcile', t.name, t.counter_id, reason);
    skipped bigint;
BEGIN
    SELECT count(*) INTO skipped
    FROM (SELECT x.info FROM counter.job_runs x
          WHERE x.kind OPERATOR(pg_catalog.=) 'reconcile' AND x.object_id OPERATOR(pg_catalog.=) t.counter_id
          ORDER BY x.run_id DESC LIMIT 3) x
    WHERE x.info ? 'skip_reason';
    IF skipped >= 3 THEN
        PERFORM counter_internal.alert(
            format('tracked counter "%s" was not reconciled: its last %s runs were skipped', t.name, skipped),
            format('Run %s: %s; see counter.job_status.', run, reason), run);
    END IF;
END
$fn$;

-- Closes a run: totals, outcome, and the alert when total |drift| exceeds
-- the counter's threshold: a WARNING to the session that ran it, the run
-- marked alerted, and a NOTIFY on channel counter_ext_drift whose payload
-- is the run's id only (any role can LISTEN to any channel, and NOTIFY on
-- it: a listener reads the run with its own rights, in
-- counter.tracked_history, where an alert it may not see, or a forged one,
-- has no alerted row).
CREATE OR REPLACE FUNCTION counter_internal.tracked_finish_run(t counter.tracked, run bigint, run_outcome text,
    error jsonb DEFAULT NULL)
RETURNS counter.tracked_runs
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    r counter.tracked_runs;
BEGIN
    PERFORM counter_internal.run_end(run, pg_catalog.jsonb_build_object('outcome', run_outcome, 'error', error ->> 'message'),
        rows_affected => (SELECT x.keys_corrected FROM counter.tracked_runs x WHERE x.run_id OPERATOR(pg_catalog.=) run),
        error => error);
    SELECT * INTO r FROM counter.tracked_runs x
    WHERE x.run_id OPERATOR(pg_catalog.=) run AND x.counter_id OPERATOR(pg_catalog.=) t.counter_id;
    -- what the backfill took is counted; a run whose missing counts were
    -- all backfill logs no drifted keys for them
    IF r.backfill OPERATOR(pg_catalog.>) 0 THEN
        UPDATE counter.tracked c SET backfill_left = GREATEST(c.backfill_left OPERATOR(pg_catalog.-) r.backfill, 0)
        WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id;
        IF r.drift_negative OPERATOR(pg_catalog.=) 0 THEN
            DELETE FROM counter.tracked_key_drift k
            WHERE k.run_id OPERATOR(pg_catalog.=) run AND k.drift OPERATOR(pg_catalog.<) 0;
        END IF;
    END IF;
    IF r.drift_positive::numeric - r.drift_negative > t.alert_threshold THEN
        PERFORM counter_internal.alert(format('tracked counter "%s" drifted by %s (+%s, %s) over %s keys', t.name,
            r.drift_positive::numeric - r.drift_negative, r.drift_positive, r.drift_negative, r.keys_corrected),
            format('Run %s up to %s; see counter.tracked_history.', r.run_id, r.watermark), r.run_id);
        r.alerted := true;
    END IF;
    PERFORM counter_internal.tracked_replication_check(t);
    RETURN r;
END
$fn$;

-- Starts a run. Watermarks never go back: a base holds the truth before the
-- watermark its key was last reconciled at, and the deltas before it are
-- gone, so a run uses the greatest watermark ever used for the counter.
-- run_from is the previous watermark: source rows in [run_from, watermark)
-- are newly past it, and their keys are checked even when nothing was
-- written through the counter.
CREATE OR REPLACE FUNCTION counter_internal.tracked_start_run(t counter.tracked, w timestamptz, all_keys boolean,
    OUT run bigint, OUT run_watermark timestamptz, OUT run_from timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    -- a run of this counter still running died (we hold the counter's lock).
    -- Before the counter's row is locked: a step of another run that found
    -- the counter's lock taken ends its run, its run row first and then the
    -- counter's row (tracked_finish_run), so the other order could deadlock.
    PERFORM counter_internal.run_interrupted('reconcile', t.counter_id);
    SELECT coalesce(c.last_watermark, '-infinity') INTO run_from FROM counter.tracked c
    WHERE c.counter_id = t.counter_id FOR UPDATE;
    UPDATE counter.tracked c SET last_watermark = GREATEST(c.last_watermark, w)
    WHERE c.counter_id = t.counter_id
    RETURNING c.last_watermark INTO run_watermark;
    -- A counter registered on a table that had rows: the counts a run finds
    -- missing are those rows, counted for the first time, up to as many as
    -- there were (backfill_left) and until a run starts from a watermark at
    -- or after the moment it was registered: a backfill, not drift (recorded
    -- as 'backfill', no alert; 30_tracked.sql, tracked_add_batch).
    IF t.backfill_left OPERATOR(pg_catalog.>) 0 AND run_from OPERATOR(pg_catalog.>=) t.created_at THEN
        UPDATE counter.tracked c SET backfill_left = 0 WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id;
        t.backfill_left := 0;
    END IF;
    run := counter_internal.run_begin('reconcile', t.name, t.counter_id, pg_catalog.jsonb_build_object(
        'watermark', run_watermark, 'all_keys', all_keys, 'keys_checked', 0, 'keys_corrected', 0,
        'drift_positive', 0, 'drift_negative', 0, 'max_abs_drift', 0, 'keys_busy', 0, 'keys_verified', 0,
        'outcome', 'running')
        OPERATOR(pg_catalog.||) CASE WHEN t.backfill_left OPERATOR(pg_catalog.>) 0
                                     THEN '{"backfill": 0}'::jsonb ELSE '{}'::jsonb END);
END
$fn$;

CREATE OR REPLACE FUNCTION counter_internal.tracked_add_batch(t counter.tracked, run bigint, b record)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    part jsonb;
BEGIN
    -- a backfill run (counter_internal.tracked_start_run): counts missing
    -- from the counter are the rows its table held before track, up to as
    -- many as are left of them (t.backfill_left, less what this run took)
    SELECT pg_catalog.jsonb_build_object(
        'keys_checked', (x.info ->> 'keys_checked')::bigint + GREATEST(b.checked, 0),
        'keys_corrected', (x.info ->> 'keys_corrected')::bigint + b.corrected,
        'drift_positive', LEAST((x.info ->> 'drift_positive')::numeric + b.pos, 9223372036854775807)::bigint,
        'drift_negative', GREATEST((x.info ->> 'drift_negative')::numeric + b.neg OPERATOR(pg_catalog.+) f.took,
                                   -9223372036854775807)::bigint,
        'max_abs_drift', GREATEST((x.info ->> 'max_abs_drift')::bigint,
                                  CASE WHEN f.took OPERATOR(pg_catalog.=) OPERATOR(pg_catalog.-) b.neg AND f.took OPERATOR(pg_catalog.>) 0
                                       THEN LEAST(b.max_abs, b.pos) ELSE b.max_abs END),
        'keys_busy', (x.info ->> 'keys_busy')::bigint + b.busy)
        OPERATOR(pg_catalog.||) CASE WHEN x.info ? 'backfill'
            THEN pg_catalog.jsonb_build_object('backfill', (x.info ->> 'backfill')::bigint + f.took) ELSE '{}'::jsonb END
    INTO part
    FROM counter.job_runs x,
         (SELECT CASE WHEN y.info ? 'backfill'
                      THEN GREATEST(LEAST(OPERATOR(pg_catalog.-) b.neg,
                                          t.backfill_left OPERATOR(pg_catalog.-) (y.info ->> 'backfill')::bigint), 0)
                      ELSE 0 END AS took
          FROM counter.job_runs y WHERE y.run_id OPERATOR(pg_catalog.=) run) f
    WHERE x.run_id = run AND x.kind = 'reconcile' AND x.object_id = t.counter_id;
    IF part IS NOT NULL THEN
        PERFORM counter_internal.run_note(run, part);
    END IF;
END
$fn$;

-- The run of counter t with id 'run', while it runs; or 42704.
CREATE OR REPLACE FUNCTION counter_internal.tracked_require_run(t counter.tracked, run bigint)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF NOT EXISTS (SELECT FROM counter.tracked_runs x WHERE x.run_id = run AND x.counter_id = t.counter_id
                   AND x.outcome = 'running') THEN
        RAISE EXCEPTION 'tracked counter "%" has no running run %', t.name, run USING ERRCODE = '42704';
    END IF;
END
$fn$;

-- Reconciles a tracked counter up to watermark W (default now() - lag, down
-- to a bucket boundary), in the caller's transaction: dirty keys, or every
-- key when all_keys (or after registration, until one full run finished).
-- A counter whose source has another oid than at registration was restored
-- from a dump (or its table replaced): its rows were loaded without its
-- triggers, so every key is verified in the next run, and a stored filter is
-- resolved again against the new table (as the owner, from its canonical
-- text). Returns the row as it now is.
CREATE OR REPLACE FUNCTION counter_internal.tracked_check_restored(t counter.tracked)
RETURNS counter.tracked
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    compiled text[];
BEGIN
    IF t.source_relid IS NOT DISTINCT FROM t.source::oid THEN
        RETURN t;
    END IF;
    IF t.filter IS NOT NULL AND t.filter_relid IS DISTINCT FROM t.source::oid THEN
        compiled := counter_internal.filter_compile(t.source, t.filter, t.owner);
    END IF;
    UPDATE counter.tracked c SET full_pending = true, source_relid = t.source::oid, verify_after = NULL,
        filter = coalesce(compiled[1], c.filter), filter_tree = coalesce(compiled[2], c.filter_tree),
        filter_relid = CASE WHEN compiled IS NULL THEN c.filter_relid ELSE t.source::oid END
    WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id
    RETURNING * INTO t;
    PERFORM counter_internal.tracked_invalidate();
    RAISE NOTICE 'tracked counter "%": its source % is not the table it was registered on (restored?); every key is verified now',
        t.name, t.source;
    RETURN t;
END
$fn$;

-- The batch function of counter t carries its filter as SQL printed from
-- the stored tree with the columns' names of the time it was made: when that
-- text is not what the tree prints now (a column renamed, the source
-- restored, or a batch function made by 1.5, which called filter_match), the
-- function is made again. Called by each run, holding the counter's lock.
CREATE OR REPLACE FUNCTION counter_internal.tracked_filter_follow(t counter.tracked)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    f text;
BEGIN
    IF t.filter IS NULL THEN
        RETURN;
    END IF;
    f := '(' || counter_internal.filter_sql(t.source, t.filter, t.filter_tree, t.filter_relid, t.owner, 'ce_new') || ')';
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_proc p
                   WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(
                             counter_internal.tracked_table(t, 'batch')
                             OPERATOR(pg_catalog.||) '(timestamptz, timestamptz, text, boolean, integer)')
                     AND pg_catalog.strpos(p.prosrc, f) OPERATOR(pg_catalog.>) 0) THEN
        PERFORM counter_internal.tracked_build_batch(t);
    END IF;
END
$fn$;

-- Reconciles a tracked counter up to watermark W (default now() - lag, down
-- to a bucket boundary), in the caller's transaction: dirty keys, or every
-- key when all_keys (or while a full run is pending). The steps of the
-- reconcile job, in the one loop (src/spine.cpp) without its commits; the
-- last step hands back the summary row.
CREATE OR REPLACE FUNCTION counter_internal.reconcile(name text, watermark timestamptz DEFAULT NULL, all_keys boolean DEFAULT false)
RETURNS counter.reconcile_result
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM pg_catalog.jsonb_populate_record(NULL::counter.reconcile_result,
        counter_internal.run_steps_here('reconcile', name,
            pg_catalog.jsonb_build_object('watermark', watermark, 'all_keys', all_keys)) OPERATOR(pg_catalog.->) 'result')
$fn$;
-- The entry point: counter_entry (src/owner.cpp) notes the role calling it, then runs
-- counter_internal.reconcile above with the same arguments.
CREATE OR REPLACE FUNCTION counter.reconcile(name text, watermark timestamptz DEFAULT NULL, all_keys boolean DEFAULT false)
RETURNS counter.reconcile_result
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_entry';
COMMENT ON FUNCTION counter.reconcile(text, timestamptz, boolean) IS
    'reconciles a tracked counter from its source rows up to a watermark; one summary row';

-- The first step of a reconciliation run of t (counter_internal.tracked_run_step;
-- target names t, args as there, direct: counter.reconcile's form): flushes a
-- buffered counter, takes the counter's lock (else the run is recorded
-- skipped and this is its last state), follows a restore and the filter's
-- functions, starts the run (the watermark, every key or the dirty ones)
-- and sizes this run's slice of the verification cycle. The run's first
-- state.
CREATE OR REPLACE FUNCTION counter_internal.tracked_run_begin(t counter.tracked, target text, args jsonb,
    direct boolean)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    run bigint;
    w timestamptz;
    w_from timestamptz;
    every_key boolean;
    est double precision;
    slice bigint;
BEGIN
    -- a buffered counter is flushed first (this transaction commits
    -- before the steps); the flush may schedule a repair (full_pending)
    IF t.buffered THEN
        PERFORM counter.flush(t.name);
        t := counter_internal.tracked_get(target);
    END IF;
    IF direct AND args ->> 'all_keys' IS NULL THEN
        RAISE EXCEPTION 'all_keys must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF NOT counter_internal.lock_take('tracked', t.counter_id, wait => false) THEN
        RAISE NOTICE 'tracked counter "%" is being reconciled by another session; skipped', t.name;
        PERFORM counter_internal.tracked_skipped(t, 'another session is reconciling the counter');
        RETURN '{"finished": true, "rows": 0, "outcome": "skipped"}'::jsonb || CASE WHEN direct THEN
            pg_catalog.jsonb_build_object('result', pg_catalog.jsonb_build_object('counter', t.name,
                'watermark', counter_internal.tracked_watermark(t, (args ->> 'watermark')::timestamptz),
                'all_keys', (args ->> 'all_keys')::boolean OR t.full_pending, 'keys_checked', 0,
                'keys_corrected', 0, 'drift_positive', 0, 'drift_negative', 0, 'max_abs_drift', 0,
                'duration', interval '0', 'outcome', 'skipped')) ELSE '{}' END;
    END IF;
    t := counter_internal.tracked_check_restored(t);
    PERFORM counter_internal.tracked_filter_follow(t);
    IF direct THEN
        w := counter_internal.tracked_watermark(t, (args ->> 'watermark')::timestamptz);
        every_key := (args ->> 'all_keys')::boolean OR t.full_pending;
    ELSE
        w := pg_catalog.date_bin(t.bucket_width, pg_catalog.clock_timestamp() - t.watermark_lag,
                                 '2000-01-01 00:00:00+00'::timestamptz);
        every_key := t.full_pending;
    END IF;
    SELECT s.run, s.run_watermark, s.run_from INTO run, w, w_from FROM counter_internal.tracked_start_run(t, w, every_key) s;
    SELECT GREATEST(c.reltuples, 0) INTO est FROM pg_catalog.pg_class c
    WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(counter_internal.tracked_table(t, 'base'));
    -- This run's slice of the verification cycle: enough keys that every
    -- key is checked once per verify_every at this job's interval.
    IF NOT every_key AND NOT direct THEN
        slice := GREATEST(1, pg_catalog.ceil(coalesce(est, 0) * pg_catalog.date_part('epoch', t.reconcile_every)
                                       / pg_catalog.date_part('epoch', t.verify_every)))::bigint;
        IF t.verify_after IS NULL THEN
            UPDATE counter.tracked c SET verify_started = pg_catalog.clock_timestamp()
            WHERE c.counter_id = t.counter_id;
        END IF;
    END IF;
    RETURN pg_catalog.jsonb_build_object('run', run, 'watermark', w, 'from', w_from, 'every_key', every_key,
        'verify_slice', slice, 'verify_from', t.verify_after, 'verified', 0, 'after', NULL,
        'phase', CASE WHEN every_key THEN 'every key' ELSE 'dirty keys' END, 'done', 0,
        'total', CASE WHEN every_key THEN est::bigint END, 'rows', 0, 'finished', false);
END
$fn$;

-- The end of reconciliation run 'run' of state of t with outcome
-- (counter_internal.tracked_run_step): a verification run moves the cycle on
-- to where it got (unless cycle_done: it went round) and notes the keys it
-- verified; a full run that succeeded clears full_pending; the run's record
-- is finished. The last state: outcome, the keys corrected as rows, and for
-- counter.reconcile's form (direct) the summary row ('result').
CREATE OR REPLACE FUNCTION counter_internal.tracked_run_end(t counter.tracked, run bigint, state jsonb,
    outcome text, cycle_done boolean, direct boolean)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    verifying boolean := state ->> 'phase' = 'verify';
    r counter.tracked_runs;
BEGIN
    IF verifying AND NOT cycle_done THEN
        UPDATE counter.tracked c SET verify_after = state ->> 'after' WHERE c.counter_id = t.counter_id;
    END IF;
    IF verifying THEN
        PERFORM counter_internal.run_note(run, pg_catalog.jsonb_build_object('keys_verified',
            (SELECT (x.info ->> 'keys_verified')::bigint FROM counter.job_runs x
             WHERE x.run_id = run AND x.kind = 'reconcile' AND x.object_id = t.counter_id)
            + (state ->> 'verified')::bigint));
    END IF;
    IF outcome = 'ok' AND (state ->> 'every_key')::boolean AND t.full_pending THEN
        UPDATE counter.tracked c SET full_pending = false WHERE c.counter_id = t.counter_id;
    END IF;
    r := counter_internal.tracked_finish_run(t, run, outcome, state -> 'error');
    RETURN state || pg_catalog.jsonb_build_object('finished', true, 'outcome', outcome, 'rows', r.keys_corrected)
        || CASE WHEN direct THEN pg_catalog.jsonb_build_object('result', pg_catalog.jsonb_build_object(
               'counter', t.name, 'run_id', r.run_id, 'watermark', r.watermark, 'all_keys', r.all_keys,
               'keys_checked', r.keys_checked, 'keys_corrected', r.keys_corrected,
               'drift_positive', r.drift_positive, 'drift_negative', r.drift_negative,
               'max_abs_drift', r.max_abs_drift, 'duration', r.finished_at - r.started_at,
               'outcome', r.outcome)) ELSE '{}' END;
END
$fn$;

-- The reconciliation's step function for the one commit loop
-- (src/spine.cpp, kind 'reconcile': the job's run; checks the caller
-- owns the counter, and from the second step on that the run is this
-- counter's running run). One run, with the default watermark: the dirty
-- keys (every key while a full run is pending), phase 'keys', a batch per
-- step; then this run's slice of the verification cycle, phase 'verify'.
-- args {"watermark", "all_keys"} (counter.reconcile's form): that watermark
-- (NULL: now() - lag), every key when all_keys, no verification slice; the
-- last state holds the summary row ('result': counter.reconcile_result).
CREATE OR REPLACE FUNCTION counter_internal.tracked_run_step(target text, args jsonb, state jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    t counter.tracked := counter_internal.tracked_get(target);
    direct boolean := args ? 'all_keys';   -- counter.reconcile's form
    run bigint;
    w timestamptz;
    verifying boolean;
    cycle_done boolean := false;
    b record;
    outcome text;
BEGIN
    PERFORM counter_internal.require_owner(t.owner, pg_catalog.format('tracked counter "%s"', t.name), 'reconcile it');
    IF state IS NULL THEN
        RETURN counter_internal.tracked_run_begin(t, target, args, direct);
    END IF;
    run := (state ->> 'run')::bigint;
    PERFORM counter_internal.tracked_require_run(t, run);
    w := (state ->> 'watermark')::timestamptz;
    IF w OPERATOR(pg_catalog.<>) (SELECT x.watermark FROM counter.tracked_runs x WHERE x.run_id = run) THEN
        RAISE EXCEPTION 'run % of tracked counter "%" has another watermark', run, t.name USING ERRCODE = '22023';
    END IF;
    verifying := state ->> 'phase' = 'verify';
    IF state ? 'error' OR state ? 'stop' THEN
        outcome := CASE WHEN state ? 'error' THEN 'error' ELSE 'partial' END;
    ELSE
        b := counter_internal.tracked_run_batch(t, run, w, (state ->> 'from')::timestamptz,
                                                verifying OR (state ->> 'every_key')::boolean, state ->> 'after');
        IF NOT b.locked THEN
            outcome := 'partial';
        ELSIF b.checked <> 0 THEN
            PERFORM counter_internal.tracked_add_batch(t, run, b);
            state := state || pg_catalog.jsonb_build_object('after', b.after,
                'done', (state ->> 'done')::bigint + abs(b.checked));
            IF NOT verifying THEN
                RETURN state;
            END IF;
            state := state || pg_catalog.jsonb_build_object(
                'verified', (state ->> 'verified')::bigint + abs(b.checked));
            IF (state ->> 'verified')::bigint < (state ->> 'verify_slice')::bigint THEN
                RETURN state;
            END IF;
            outcome := 'ok';   -- this run's slice is verified
        ELSIF NOT verifying AND state ->> 'verify_slice' IS NOT NULL THEN
            -- the dirty keys are done: the verification slice, from where the last run left it
            RETURN state || pg_catalog.jsonb_build_object('phase', 'verify', 'after', state -> 'verify_from',
                'done', 0, 'total', (state ->> 'verify_slice')::bigint);
        ELSE
            outcome := 'ok';   -- no key left
            IF verifying THEN   -- the cycle is complete: the next one starts from the first key
                UPDATE counter.tracked c SET verify_after = NULL, last_verified = pg_catalog.clock_timestamp()
                WHERE c.counter_id = t.counter_id;
                cycle_done := true;
            END IF;
        END IF;
    END IF;
    RETURN counter_internal.tracked_run_end(t, run, state, outcome, cycle_done, direct);
END
$fn$;
CREATE OR REPLACE VIEW counter.tracked_history WITH (security_barrier) AS
SELECT c.name AS counter, r.run_id, r.started_at, r.finished_at - r.started_at AS duration, r.watermark,
       r.all_keys, r.keys_checked, r.keys_corrected, r.drift_positive, r.drift_negative, r.max_abs_drift,
       r.outcome, r.keys_busy, r.keys_verified, r.backfill, r.alerted
FROM counter.tracked_runs r JOIN counter.tracked c USING (counter_id)
WHERE pg_catalog.pg_has_role(c.owner, 'USAGE');
COMMENT ON VIEW counter.tracked_history IS 'reconciliation runs of every tracked counter, with their drift';

CREATE OR REPLACE VIEW counter.tracked_drift WITH (security_barrier) AS
SELECT c.name AS counter, count(r.run_id) AS runs, max(r.started_at) AS last_run,
       coalesce(sum(r.keys_corrected), 0) AS keys_corrected, coalesce(sum(r.drift_positive), 0) AS drift_positive,
       coalesce(sum(r.drift_negative), 0) AS drift_negative, coalesce(max(r.max_abs_drift), 0) AS max_abs_drift,
       (SELECT LEAST(x.drift_positive::numeric - x.drift_negative, 9223372036854775807)::bigint FROM counter.tracked_runs x
        WHERE x.counter_id = c.counter_id AND x.outcome <> 'running' ORDER BY x.run_id DESC LIMIT 1) AS last_abs_drift,
       coalesce(sum(r.backfill), 0) AS backfill
FROM counter.tracked c LEFT JOIN counter.tracked_runs r ON r.counter_id = c.counter_id AND r.outcome <> 'running'
WHERE pg_catalog.pg_has_role(c.owner, 'USAGE')
GROUP BY c.counter_id, c.name;
COMMENT ON VIEW counter.tracked_drift IS 'per tracked counter: runs and total drift found';

CREATE OR REPLACE VIEW counter.tracked_key_drift_history WITH (security_barrier) AS
SELECT c.name AS counter, r.run_id, r.started_at, k.key, k.cached, k.truth, k.drift
FROM counter.tracked_key_drift k JOIN counter.tracked_runs r USING (run_id) JOIN counter.tracked c USING (counter_id)
WHERE pg_catalog.pg_has_role(c.owner, 'USAGE');
COMMENT ON VIEW counter.tracked_key_drift_history IS 'keys that drifted past their counter''s drift_log_threshold';

-- Triggers switched off and on again: rows written meanwhile were not
-- counted, so when a counter's triggers are enabled again (ALTER TABLE ...
-- ENABLE TRIGGER), every key is verified in its next run. (Rows written with
-- session_replication_role = replica cannot be seen this way; the
-- verification cycle and the check of rows newly past the watermark find
-- them.) It reads pg_trigger and writes counter.tracked only.
CREATE OR REPLACE FUNCTION counter_internal.tracked_ddl()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    t counter.tracked;
    off boolean;
BEGIN
    FOR t IN SELECT c.* FROM counter.tracked c
             WHERE c.mode OPERATOR(pg_catalog.=) 'trigger'
               AND c.source::oid IN (SELECT d.objid FROM pg_catalog.pg_event_trigger_ddl_commands() d
                                     WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass) LOOP
        off := EXISTS (SELECT FROM pg_catalog.pg_trigger g
                       WHERE g.tgrelid OPERATOR(pg_catalog.=) t.source
                         AND g.tgname OPERATOR(pg_catalog.=) ANY (ARRAY[format('counter_%s_ins', t.counter_id),
                             format('counter_%s_del', t.counter_id), format('counter_%s_upd', t.counter_id)]::name[])
                         AND g.tgenabled OPERATOR(pg_catalog.=) ANY (ARRAY['D', 'R']::"char"[]));
        IF off AND NOT t.triggers_off THEN
            UPDATE counter.tracked c SET triggers_off = true WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id;
            RAISE WARNING 'tracked counter "%" stops counting while the triggers of % are disabled', t.name, t.source
                USING HINT = 'Every key is verified once they are enabled again.';
        ELSIF NOT off AND t.triggers_off THEN
            UPDATE counter.tracked c SET triggers_off = false, full_pending = true, verify_after = NULL
            WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id;
        END IF;
    END LOOP;
END
$fn$;

-- A source table dropped (DROP TABLE, DROP SCHEMA, DROP OWNED): its counters
-- go with it, state, catalog rows, history and jobs.
CREATE OR REPLACE FUNCTION counter_internal.tracked_forget_dropped()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    t counter.tracked;
BEGIN
    FOR t IN SELECT c.* FROM counter.tracked c
             WHERE c.source::oid IN (SELECT d.objid FROM pg_catalog.pg_event_trigger_dropped_objects() d
                                     WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                                       AND d.objsubid OPERATOR(pg_catalog.=) 0) LOOP
        EXECUTE format('DROP FUNCTION IF EXISTS counter_internal.%I(timestamptz, timestamptz, text, boolean, integer)',
                       format('tracked_%s_batch', t.counter_id));
        EXECUTE format('DROP TABLE IF EXISTS %s, %s, %s', counter_internal.tracked_table(t, 'base'),
                       counter_internal.tracked_table(t, 'delta'), counter_internal.tracked_table(t, 'inbox'));
        DELETE FROM counter.tracked c WHERE c.counter_id OPERATOR(pg_catalog.=) t.counter_id;
        PERFORM counter_internal.run_forget('reconcile', t.counter_id);
        PERFORM counter_internal.tracked_invalidate();
        PERFORM counter.job_unregister('reconcile', t.name);
    END LOOP;
END
$fn$;

-- Where each counter stands: the watermark, pending full runs, the
-- verification cycle, triggers switched off, the backfill, and
-- owner_not_followed: the role its table now belongs to, when
-- counter.follow_owners could not give the counter to it (80_drop.sql); such
-- a counter is shown to members of that role too.
CREATE OR REPLACE VIEW counter.tracked_status WITH (security_barrier) AS
SELECT c.name AS counter, c.source, c.mode, c.last_watermark, c.full_pending, c.triggers_off, c.verify_every,
       c.verify_started AS verify_cycle_started, c.verify_after AS verify_cursor, c.last_verified,
       c.last_verified IS NULL OR c.last_verified < pg_catalog.now() - c.verify_every AS verify_overdue,
       c.backfill_left,
       (SELECT coalesce(sum(r.backfill), 0) FROM counter.tracked_runs r
        WHERE r.counter_id OPERATOR(pg_catalog.=) c.counter_id) AS backfilled,
       CASE WHEN s.relowner OPERATOR(pg_catalog.<>) c.owner::oid THEN s.relowner::regrole END AS owner_not_followed,
       counter.replication_warning(c.source, c.replicated OR c.mode OPERATOR(pg_catalog.<>) 'trigger')
           AS replication_warning
FROM counter.tracked c LEFT JOIN pg_catalog.pg_class s ON s.oid OPERATOR(pg_catalog.=) c.source
WHERE pg_catalog.pg_has_role(c.owner, 'USAGE')
   OR (s.relowner OPERATOR(pg_catalog.<>) c.owner::oid AND pg_catalog.pg_has_role(s.relowner, 'USAGE'));
COMMENT ON VIEW counter.tracked_status IS 'per tracked counter: watermark, pending full run, verification cycle';

-- The views show the counters of the roles the reader belongs to.
GRANT SELECT ON counter.tracked_values, counter.tracked_history, counter.tracked_drift,
    counter.tracked_key_drift_history, counter.tracked_status TO PUBLIC;
