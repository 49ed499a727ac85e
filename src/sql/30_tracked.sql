-- Tracked counters: a cache of count(*) over a source table's rows per key,
-- written as small deltas on the hot path and repaired from the rows by
-- reconciliation (doc/reference/tracked.md).
--
-- State of counter N (its id), created by counter.track in schema
-- counter_internal, owned by the source table's owner, with the key column's
-- real type:
--   counter_internal.tracked_N_base   (key PRIMARY KEY, base)       reconciliation's
--   counter_internal.tracked_N_delta  (key, bucket, shard, delta)   the hot path's
-- value(key) = base + sum(delta). A delta is attributed to the event-time
-- bucket of the row it stands for. Reconciliation up to watermark W (a bucket
-- boundary) sets base to count(rows with time < W) and subtracts from each
-- delta row with bucket < W exactly the amount its snapshot saw, so a
-- concurrent write is never overwritten.
-- One function is generated per counter (owned by the same owner, run only
-- through counter_internal.exec_as_owner): tracked_N_batch, one
-- reconciliation batch.
--
-- Privileges (doc/security.md): everything that touches a counter's state or
-- its source runs as the source table's owner in a security-restricted
-- operation (src/owner.cpp); the SECURITY DEFINER functions below touch only
-- the catalogs of this file and hand the rest to exec_as_owner. The hot paths
-- are C++ (src/tracked.cpp): the trigger counter_internal.tracked_fold and
-- counter.add / counter.value / counter.values_of, which run as the caller
-- and switch to the owner after checking the caller's privilege.
--
-- Locks (transaction level): counter_internal.lock_take('tracked',
-- counter_id, wait => false), in counter_ext's own lock space that no role
-- can take; the classes are one registry (src/include/counter_ext/locks.hpp),
-- documented in doc/reference/worker.md "Lock classes".

CREATE TABLE counter.tracked (
    counter_id          integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9_.-]{1,63}$'),
    source              regclass NOT NULL,
    key_column          name NOT NULL,
    key_type            regtype NOT NULL,
    time_column         name NOT NULL,
    filter              text,           -- canonical text of the stored filter (src/filter.cpp)
    filter_tree         text,           -- the resolved tree (nodeToString)
    filter_relid        oid,            -- the source's oid the tree was resolved against
    mode                text NOT NULL CHECK (mode IN ('trigger', 'application')),
    watermark_lag       interval NOT NULL CHECK (watermark_lag >= interval '0'),
    bucket_width        interval NOT NULL,
    shards              integer NOT NULL CHECK (shards BETWEEN 1 AND 1024),
    batch_size          integer NOT NULL CHECK (batch_size BETWEEN 1 AND 1000000),
    drift_log_threshold bigint NOT NULL CHECK (drift_log_threshold >= 0),
    alert_threshold     bigint NOT NULL CHECK (alert_threshold >= 0),
    reconcile_every     interval NOT NULL,
    full_pending        boolean NOT NULL DEFAULT true,
    last_watermark      timestamptz,
    owner               regrole NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- the verification cycle: scheduled runs also check a slice of every
    -- key, walking them from verify_after, so the whole key space is checked
    -- once per verify_every (doc/reference/tracked.md, "What each run finds")
    verify_every        interval NOT NULL DEFAULT interval '1 day' CHECK (verify_every >= interval '1 minute'),
    verify_after        text,
    verify_started      timestamptz,
    last_verified       timestamptz,
    source_relid        oid,            -- the source's oid when registered: another one means a restore
    triggers_off        boolean NOT NULL DEFAULT false,
    replicated          boolean NOT NULL DEFAULT false,  -- also counts rows applied by logical replication
    -- registered on a table that had rows: how many of them the counter has
    -- not counted yet. Counts a run finds missing are those rows, counted
    -- for the first time, up to this many (until a run starts past
    -- created_at): a backfill ('backfill' in the run record), not drift,
    -- and no alert (doc/reference/tracked.md, "Backfill"; 31_tracked_code.sql)
    backfill_left       bigint NOT NULL DEFAULT 0
);
COMMENT ON TABLE counter.tracked IS 'tracked counters: count(*) per key of a source table, cached and reconciled';
SELECT pg_catalog.pg_extension_config_dump('counter.tracked', '');

-- A counter's reconciliation runs are rows of the one run record,
-- counter.job_runs (kind 'reconcile', object_id = counter_id; the drift in
-- info), shown by the view counter.tracked_runs (31_tracked_code.sql). The
-- keys that drifted past drift_log_threshold in a run are its detail:
CREATE TABLE counter.tracked_key_drift (
    -- counter.job_runs: no FOREIGN KEY between dumped tables (pg_restore -j
    -- loads their rows in any order); counter_internal.dumped_cascade deletes
    -- a run's rows here with it (71_dump_cascades.sql)
    run_id  bigint NOT NULL,
    key     text NOT NULL,
    cached  bigint NOT NULL,
    truth   bigint NOT NULL,
    drift   bigint NOT NULL
);
CREATE INDEX ON counter.tracked_key_drift (run_id);

COMMENT ON TABLE counter.tracked_key_drift IS
    'keys whose drift exceeded the counter''s drift_log_threshold in a run (drift = cached - truth)';

-- What counter.reconcile returns.
CREATE TYPE counter.reconcile_result AS (
    counter text, run_id bigint, watermark timestamptz, all_keys boolean, keys_checked bigint,
    keys_corrected bigint, drift_positive bigint, drift_negative bigint, max_abs_drift bigint,
    duration interval, outcome text);

