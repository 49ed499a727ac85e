-- The mechanisms every feature uses (doc/security.md): functions only, so
-- the update from 1.1 includes this piece as it is.

-- The one mechanism that runs work as the owner of the object it serves
-- (src/owner.cpp): the SQL runs as 'owner' in a security-restricted
-- operation with search_path pg_catalog, pg_temp; parameters are the
-- variadic arguments ($1, $2, ...). Called only by the extension's functions,
-- after they have checked the caller's privilege.
CREATE OR REPLACE FUNCTION counter_internal.exec_as_owner(owner regrole, sql text, VARIADIC args "any")
RETURNS SETOF record
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_exec_as_owner';

-- The same, for a view that lists the objects of many owners
-- (counter.tracked_values, rollup_state, partition_status): when the role
-- the view is read for is not the owner, no row-level security policy of the
-- owner's runs (row_security off: the read fails instead) and a lock on the
-- owner's table is waited for at most counter_ext.view_lock_timeout, so the
-- view leaves that object out (owner_read_failed) rather than wait for it.
CREATE OR REPLACE FUNCTION counter_internal.exec_as_owner_listed(owner regrole, sql text, VARIADIC args "any")
RETURNS SETOF record
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_exec_as_owner_listed';

CREATE OR REPLACE FUNCTION counter_internal.exec_as_owner_cmd(owner regrole, sql text, VARIADIC args "any")
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'counter_exec_as_owner_cmd';

-- The one owner check (doc/security.md): raises unless the role that called
-- the entry point (counter_internal.caller()) is a member of 'owner' or a
-- superuser. 'what' names the object as the caller gave it; the error is the
-- same for an object that does not exist (owner NULL) and one the caller does
-- not own, so it tells nobody which objects other roles have.
CREATE OR REPLACE FUNCTION counter_internal.require_owner(owner regrole, what text, action text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := counter_internal.caller();
BEGIN
    IF owner IS NULL OR NOT coalesce(pg_catalog.pg_has_role(caller, owner, 'USAGE')
            OR (SELECT a.rolsuper FROM pg_catalog.pg_roles a WHERE a.oid OPERATOR(pg_catalog.=) caller), false) THEN
        RAISE EXCEPTION '% does not exist or you do not own it', what
            USING ERRCODE = 'insufficient_privilege',
                  HINT = pg_catalog.format('Only members of its owner (or a superuser) may %s.', action);
    END IF;
END
$$;

-- The one way a reader of many roles' objects (counter.tracked_values,
-- partition_status, rollup_state) goes on past an object whose owner's read
-- failed. Each object is read as its owner, so the owner decides whether
-- that read works (a right it revoked from itself, a policy on its table, a
-- table it changed by hand): one role's object never makes another role's
-- read of the view fail. Called in the handler of that read: true when the
-- caller is the owner itself (the handler re-raises the error: RAISE);
-- otherwise a WARNING naming the view, the object, the owner and the error,
-- and false (the handler leaves the object out, or its column NULL, as
-- consequence says).
CREATE OR REPLACE FUNCTION counter_internal.owner_read_failed(what text, name text, owner regrole, place text,
    consequence text, state text, message text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF counter_internal.caller() OPERATOR(pg_catalog.=) owner THEN
        RETURN true;
    END IF;
    RAISE WARNING '%: reading % "%" as its owner % failed: % (SQLSTATE %)', place, what, name, owner, message, state
        USING DETAIL = consequence,
              HINT = 'Its owner can read it again (a right revoked, a row-level security policy, a lock held longer than counter_ext.view_lock_timeout or a table changed by hand); the other objects are read as usual.';
    RETURN false;
END
$$;

-- Locks for a drop (untrack, rollup_drop): relation rels[i] in modes[i], and
-- the object's catalog row (FOR UPDATE of the row of row_of whose
-- row_column is row_id), all or none, never waiting while holding one. It
-- waits for one (first the source: its writers finish, new ones wait) and
-- takes the others without waiting; when one of them is held (by a job that
-- holds it and then waits for another: a buffered counter's reconciliation
-- flushes, holding the delta table, then reads the source; the job's batch
-- reads the source, then writes the catalog row; counter.reconcile writes
-- the row, then reads the tables), it lets every lock go and waits for that
-- one alone, and so on: no order another transaction takes them in can make
-- a cycle with it. The caller's lock_timeout bounds each wait.
CREATE OR REPLACE FUNCTION counter_internal.lock_all(rels regclass[], modes text[], row_of regclass DEFAULT NULL,
    row_column name DEFAULT NULL, row_id integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n integer := coalesce(cardinality(rels), 0);
    items integer;
    waited integer := 1;  -- the one waited for (n + 1: the row)
    i integer;
    busy integer;
BEGIN
    IF n IS DISTINCT FROM coalesce(cardinality(modes), 0)
       OR EXISTS (SELECT FROM unnest(modes) m WHERE m NOT IN ('SHARE ROW EXCLUSIVE', 'ACCESS EXCLUSIVE'))
       OR (row_of IS NULL) <> (row_id IS NULL) OR (row_of IS NULL) <> (row_column IS NULL) THEN
        RAISE EXCEPTION 'counter_internal.lock_all: one mode (SHARE ROW EXCLUSIVE or ACCESS EXCLUSIVE) per relation, and a whole row'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    items := n + CASE WHEN row_of IS NULL THEN 0 ELSE 1 END;
    IF items = 0 THEN
        RETURN;
    END IF;
    LOOP
        busy := NULL;
        BEGIN
            FOR i IN SELECT waited UNION ALL SELECT g FROM generate_series(1, items) g WHERE g <> waited LOOP
                IF i <> waited THEN
                    busy := i;  -- taken without waiting
                END IF;
                IF i <= n THEN
                    EXECUTE format('LOCK TABLE %s IN %s MODE%s', rels[i], modes[i],
                                   CASE WHEN i <> waited THEN ' NOWAIT' ELSE '' END);
                ELSE
                    EXECUTE format('SELECT 1 FROM %s WHERE %I OPERATOR(pg_catalog.=) $1 FOR UPDATE%s', row_of, row_column,
                                   CASE WHEN i <> waited THEN ' NOWAIT' ELSE '' END) USING row_id;
                END IF;
            END LOOP;
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            IF busy IS NULL THEN
                RAISE;  -- the wait itself: the caller's lock_timeout
            END IF;
        END;
        -- every lock let go (the block's end): wait for the busy one alone next
        waited := busy;
    END LOOP;
END
$$;

-- The one filter compiler (src/filter.cpp): resolves a filter as the owner,
-- once, and returns {canonical text, tree}; filter_match applies the stored
-- tree of a tracked counter ('tracked') or rollup ('rollup') to a source row.
CREATE OR REPLACE FUNCTION counter_internal.filter_compile(source regclass, filter text, owner regrole)
RETURNS text[]
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'counter_filter_compile';

CREATE OR REPLACE FUNCTION counter_internal.filter_match(kind text, id integer, source_row anyelement)
RETURNS boolean
LANGUAGE c STABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_filter_match';

-- The stored filter as an SQL expression over alias.column (src/filter.cpp):
-- printed from the tree under search_path pg_catalog, pg_temp, so every name
-- outside pg_catalog is schema-qualified, as a view is dumped. A tracked
-- counter's batch function carries it (made once per function; Citus pushes
-- it down to the shards, which have no catalog of counter_ext).
CREATE OR REPLACE FUNCTION counter_internal.filter_sql(source regclass, canonical text, tree text, tree_relid oid,
    owner regrole, alias name)
RETURNS text
LANGUAGE c STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'counter_filter_sql';

-- {=, <, >} of a key type's default btree operator class, written as
-- OPERATOR(schema.op): resolved from the catalog, never from a search_path.
CREATE OR REPLACE FUNCTION counter_internal.key_operators(key_type regtype)
RETURNS text[]
LANGUAGE c STABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'counter_key_operators';
