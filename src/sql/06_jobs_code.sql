-- The code of the jobs' catalog (05_jobs.sql): the status view, who owns a
-- job's target, the launcher's nudge, registering and removing jobs.
-- Functions and views only, so the update from 1.1 includes this piece as it
-- is.

-- One line per job with its latest run.
CREATE OR REPLACE VIEW counter.job_status AS
SELECT j.job_id, j.kind, j.target, j.enabled, j.run_every, j.next_run, j.failures,
       j.running_run IS NOT NULL AS running,
       r.started_at AS last_started, r.finished_at AS last_finished, r.outcome AS last_outcome,
       r.rows_affected AS last_rows, r.sqlstate AS last_sqlstate, r.message AS last_message,
       j.owner, j.disabled_reason
FROM counter.jobs j
LEFT JOIN LATERAL (
    SELECT x.started_at, x.finished_at, x.outcome, x.rows_affected, x.sqlstate, x.message
    FROM counter.job_runs x
    WHERE x.job_id OPERATOR(pg_catalog.=) j.job_id
    ORDER BY x.run_id DESC
    LIMIT 1) r ON true;

-- The owner of the object a job serves, found from its target: the owner
-- the feature records (counter.tracked.owner, counter.rollups.owner: the
-- role its own checks and its state belong to), or the partitioned table's
-- owner (which follows ALTER TABLE ... OWNER TO and REASSIGN OWNED). NULL when
-- the target is gone or the kind is not a built-in one. (PL/pgSQL: the
-- features' catalogs are made by later pieces.)
CREATE OR REPLACE FUNCTION counter_internal.job_target_owner(kind text, target text)
RETURNS regrole
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN CASE kind
        WHEN 'reconcile' THEN
            (SELECT t.owner FROM counter.tracked t WHERE t.name OPERATOR(pg_catalog.=) target)
        WHEN 'flush' THEN
            (SELECT t.owner FROM counter.tracked t WHERE t.name OPERATOR(pg_catalog.=) target)
        WHEN 'rollup_refresh' THEN
            (SELECT r.owner FROM counter.rollups r WHERE r.name OPERATOR(pg_catalog.=) target)
        WHEN 'partition_maintenance' THEN
            (SELECT c.relowner::regrole FROM pg_catalog.pg_class c
             WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(target))
        END;
END
$$;
REVOKE ALL ON FUNCTION counter_internal.job_target_owner(text, text) FROM PUBLIC;

-- Tells the launcher (when the library is preloaded) that the database has a
-- job of 'owner' due at 'due', once the transaction commits.
CREATE OR REPLACE FUNCTION counter_internal.job_nudge(owner oid, due timestamptz)
RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'counter_job_nudge';
REVOKE ALL ON FUNCTION counter_internal.job_nudge(oid, timestamptz) FROM PUBLIC;

-- Registers (or re-enables with a new interval) the job of a target; returns
-- its id. 'owner' is the owner of the object the job serves, given by the
-- registering feature (NULL: found from the target, see
-- counter_internal.job_target_owner).
CREATE OR REPLACE FUNCTION counter.job_register(kind text, target text, run_every interval, owner regrole DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    id bigint;
    who regrole := job_register.owner;
BEGIN
    IF kind IS NULL OR target IS NULL OR run_every IS NULL THEN
        RAISE EXCEPTION 'kind, target and run_every must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF kind !~ '^[a-z][a-z0-9_]{0,58}$' THEN
        RAISE EXCEPTION 'invalid job kind "%"', kind
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A kind is lower-case letters, digits and "_", starting with a letter.';
    END IF;
    IF run_every <= interval '0' THEN
        RAISE EXCEPTION 'run_every must be a positive interval, not %', run_every
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM counter_internal.job_kinds k WHERE k.kind OPERATOR(pg_catalog.=) job_register.kind) THEN
        RAISE EXCEPTION 'unknown job kind "%"', kind
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'The kinds are the rows of counter_internal.job_kinds.';
    END IF;
    who := coalesce(who, counter_internal.job_target_owner(kind, target));
    IF who IS NULL THEN
        RAISE EXCEPTION 'the owner of job target "%" (kind %) is unknown', target, kind
            USING ERRCODE = 'undefined_object', HINT = 'Pass owner => the role that owns the target.';
    END IF;
    INSERT INTO counter.jobs AS j (kind, target, run_every, owner)
    VALUES (job_register.kind, job_register.target, job_register.run_every, who)
    ON CONFLICT ON CONSTRAINT jobs_kind_target_key DO UPDATE
        SET run_every = EXCLUDED.run_every, enabled = true, failures = 0, next_run = pg_catalog.now(),
            owner = EXCLUDED.owner, disabled_reason = NULL
    RETURNING j.job_id INTO id;
    -- the feature registering the job has just made its object: armed here
    INSERT INTO counter_internal.job_armed AS a (job_id) VALUES (id)
    ON CONFLICT (job_id) DO NOTHING;
    PERFORM counter_internal.job_nudge(who::oid, pg_catalog.now());
    RETURN id;
END
$$;

-- Removes the job of a target; true when there was one. Its history stays
-- until the retention trims it.
CREATE OR REPLACE FUNCTION counter.job_unregister(kind text, target text)
RETURNS boolean
LANGUAGE sql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    WITH gone AS (
        DELETE FROM counter.jobs j
        WHERE j.kind OPERATOR(pg_catalog.=) job_unregister.kind
          AND j.target OPERATOR(pg_catalog.=) job_unregister.target
        RETURNING 1)
    SELECT count(*) > 0 FROM gone
$$;
REVOKE ALL ON FUNCTION counter.job_register(text, text, interval, regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION counter.job_unregister(text, text) FROM PUBLIC;

-- ---- While a restore runs (doc/operations.md, "While a restore runs")
--
-- pg_restore (without --single-transaction, with -j N or not) makes a
-- database in steps that other sessions see one by one: CREATE EXTENSION,
-- the tables, then the rows (counter_ext's catalog rows among them: they are
-- extension configuration, dumped as data), then indexes, constraints and
-- triggers. pg_restore creates a table's indexes, constraints and triggers
-- only after that table's rows are loaded (it makes every post-data item of
-- a table wait for the table's data, -j included). So the pieces below,
-- which every object of counter_ext has once it is complete, are proof that
-- the rows they depend on are all in:
--   tracked counter (reconcile, flush): its catalog row; its triggers on the
--     source (trigger mode), enabled; the primary keys of its state tables
--     tracked_N_base and tracked_N_delta;
--   rollup (rollup_refresh): its catalog row; its three triggers on the
--     source, enabled; the primary key of its rollup table;
--   managed partitioned table (partition_maintenance): its catalog row;
--   and for a partitioned source or managed table: every index of the
--     parent valid (a partitioned index is valid once the index of every
--     partition is attached, which pg_restore does after that partition's
--     rows).
-- What this cannot see is documented: a partitioned table without any
-- index, the source of an application-mode counter, other kinds' targets.
--
-- Returns why the job's object is not complete in this database (NULL when
-- it is). Reads catalogs only.
CREATE OR REPLACE FUNCTION counter_internal.job_incomplete(kind text, target text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t counter.tracked;
    r counter.rollups;
    managed regclass;
    src regclass;
    want name[];
    missing text;
    off text;
    tbl regclass;
BEGIN
    IF kind OPERATOR(pg_catalog.=) ANY (ARRAY['reconcile', 'flush']) THEN
        SELECT * INTO t FROM counter.tracked c WHERE c.name OPERATOR(pg_catalog.=) target;
        IF NOT FOUND THEN
            RETURN format('tracked counter "%s" is not in counter.tracked (a restore loads that table''s rows later)',
                          target);
        END IF;
        src := t.source;
        IF t.mode OPERATOR(pg_catalog.=) 'trigger' THEN
            want := ARRAY[format('counter_%s_ins', t.counter_id), format('counter_%s_del', t.counter_id),
                          format('counter_%s_upd', t.counter_id), format('counter_%s_trunc', t.counter_id)]::name[];
            IF t.replicated THEN
                want := want OPERATOR(pg_catalog.||) ARRAY[format('counter_%s_rins', t.counter_id),
                    format('counter_%s_rdel', t.counter_id), format('counter_%s_rupd', t.counter_id),
                    format('counter_%s_rtrunc', t.counter_id)]::name[];
            END IF;
        END IF;
        FOREACH tbl IN ARRAY ARRAY[pg_catalog.to_regclass(counter_internal.tracked_table(t, 'base')),
                                   pg_catalog.to_regclass(counter_internal.tracked_table(t, 'delta'))] LOOP
            IF tbl IS NULL OR NOT EXISTS (SELECT FROM pg_catalog.pg_index i
                                          WHERE i.indrelid OPERATOR(pg_catalog.=) tbl AND i.indisprimary
                                            AND i.indisvalid) THEN
                RETURN format('the state table %s of tracked counter "%s" has no primary key yet '
                              '(a restore makes it after the table''s rows)',
                              coalesce(tbl::text, counter_internal.tracked_table(t, 'base')), t.name);
            END IF;
        END LOOP;
    ELSIF kind OPERATOR(pg_catalog.=) 'rollup_refresh' THEN
        SELECT * INTO r FROM counter.rollups c WHERE c.name OPERATOR(pg_catalog.=) target;
        IF NOT FOUND THEN
            RETURN format('rollup "%s" is not in counter.rollups (a restore loads that table''s rows later)', target);
        END IF;
        src := r.source;
        want := ARRAY[format('counter_rollup_%s_insert', r.rollup_id), format('counter_rollup_%s_delete', r.rollup_id),
                      format('counter_rollup_%s_update', r.rollup_id)]::name[];
        IF r.replicated THEN
            want := want OPERATOR(pg_catalog.||) ARRAY[format('counter_rollup_%s_rinsert', r.rollup_id),
                format('counter_rollup_%s_rdelete', r.rollup_id), format('counter_rollup_%s_rupdate', r.rollup_id)]::name[];
        END IF;
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_index i
                       WHERE i.indrelid OPERATOR(pg_catalog.=) r.rollup_table AND i.indisprimary AND i.indisvalid) THEN
            RETURN format('the rollup table %s of rollup "%s" has no primary key yet '
                          '(a restore makes it after the table''s rows)', r.rollup_table, r.name);
        END IF;
    ELSIF kind OPERATOR(pg_catalog.=) 'partition_maintenance' THEN
        managed := pg_catalog.to_regclass(target);
        IF managed IS NULL OR NOT EXISTS (SELECT FROM counter.partitioned_tables p
                                          WHERE p.parent OPERATOR(pg_catalog.=) managed) THEN
            RETURN format('table %s is not in counter.partitioned_tables (a restore loads that table''s rows later)',
                          target);
        END IF;
        src := managed;
    ELSE
        RETURN NULL;   -- a kind of a superuser's own: its target is not known here
    END IF;
    IF want IS NOT NULL THEN
        SELECT pg_catalog.string_agg(w, ', ' ORDER BY w) INTO missing
        FROM pg_catalog.unnest(want) w
        WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_trigger g
                          WHERE g.tgrelid OPERATOR(pg_catalog.=) src AND g.tgname OPERATOR(pg_catalog.=) w);
        IF missing IS NOT NULL THEN
            RETURN format('trigger(s) %s on %s not there yet (a restore creates a table''s triggers after its rows)',
                          missing, src);
        END IF;
        -- (a counter whose triggers its owner disabled, triggers_off, was
        -- dumped with them disabled: that is its complete state)
        SELECT pg_catalog.string_agg(g.tgname::text, ', ' ORDER BY g.tgname) INTO off
        FROM pg_catalog.pg_trigger g
        WHERE g.tgrelid OPERATOR(pg_catalog.=) src AND g.tgname OPERATOR(pg_catalog.=) ANY (want)
          AND g.tgenabled OPERATOR(pg_catalog.=) 'D' AND NOT coalesce(t.triggers_off, false);
        IF off IS NOT NULL THEN
            RETURN format('trigger(s) %s on %s are disabled (pg_restore --disable-triggers loads rows with them off; '
                          'ALTER TABLE %s ENABLE TRIGGER ... once the rows are in)', off, src, src);
        END IF;
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) src
                                                   AND c.relkind OPERATOR(pg_catalog.=) 'p') THEN
        SELECT pg_catalog.string_agg(i.indexrelid::regclass::text, ', ' ORDER BY i.indexrelid::regclass::text)
        INTO missing
        FROM pg_catalog.pg_index i
        WHERE i.indrelid OPERATOR(pg_catalog.=) src AND NOT i.indisvalid;
        IF missing IS NOT NULL THEN
            RETURN format('index(es) %s of the partitioned table %s are not valid yet (a restore attaches each '
                          'partition''s index after the partition''s rows)', missing, src);
        END IF;
    END IF;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION counter_internal.job_incomplete(text, text) FROM PUBLIC;

-- Called by the job runner (as the extension's owner) before it runs a job:
-- NULL when the job may act on this database, else why it is held. A job not
-- yet armed here (a restored one) is armed once its object is complete; a
-- restored tracked counter's first armed run then verifies every key (its
-- rows were loaded without its triggers).
CREATE OR REPLACE FUNCTION counter_internal.job_hold(job_id bigint)
RETURNS text
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    j counter.jobs;
    why text;
BEGIN
    IF EXISTS (SELECT FROM counter_internal.job_armed a WHERE a.job_id OPERATOR(pg_catalog.=) job_hold.job_id) THEN
        RETURN NULL;
    END IF;
    SELECT * INTO j FROM counter.jobs x WHERE x.job_id OPERATOR(pg_catalog.=) job_hold.job_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    why := counter_internal.job_incomplete(j.kind, j.target);
    IF why IS NOT NULL THEN
        RETURN why;
    END IF;
    INSERT INTO counter_internal.job_armed AS a (job_id) VALUES (j.job_id) ON CONFLICT (job_id) DO NOTHING;
    IF j.kind OPERATOR(pg_catalog.=) 'reconcile' THEN
        UPDATE counter.tracked c SET full_pending = true, verify_after = NULL
        WHERE c.name OPERATOR(pg_catalog.=) j.target;
    END IF;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION counter_internal.job_hold(bigint) FROM PUBLIC;

-- Rows added to counter.jobs by anything but counter.job_register (a restore
-- loading them with COPY) are told to the launcher at commit, so a restored
-- job is tried, and held or run, when it falls due, not at the next survey.
CREATE OR REPLACE FUNCTION counter_internal.jobs_inserted()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM counter_internal.job_nudge(n.owner::oid, pg_catalog.min(n.next_run))
    FROM new_jobs n
    WHERE n.enabled AND n.owner IS NOT NULL
    GROUP BY n.owner;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION counter_internal.jobs_inserted() FROM PUBLIC;
