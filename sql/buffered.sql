-- Buffered counters (doc/reference/tracked.md, "Buffered counters"): adds
-- kept in the transaction, published at commit, flushed to the delta table;
-- reads include what is buffered; savepoints, PREPARE TRANSACTION, long
-- keys, TRUNCATE, untrack; and the privilege boundary, run as roles without
-- rights: one counter's buffer never reaches another, nobody reads or
-- flushes a buffer whose counter they may not read or own.
CREATE EXTENSION counter_ext;
\set ON_ERROR_STOP 0
\set SHOW_CONTEXT never
SET client_min_messages = notice;
SET timezone = 'UTC';
CREATE ROLE buf_owner;
CREATE ROLE buf_other;
CREATE ROLE buf_reader;
CREATE SCHEMA buf_s AUTHORIZATION buf_owner;
GRANT USAGE ON SCHEMA buf_s TO buf_other, buf_reader;

SET ROLE buf_owner;
CREATE TABLE buf_s.calls (api text NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON buf_s.calls (at);
CREATE TABLE buf_s.posts (id bigint PRIMARY KEY, author bigint NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON buf_s.posts (at);
SELECT counter.track('buf_calls', 'buf_s.calls', 'api', 'at', mode => 'application', buffered => true) > 0 AS ok;
-- a second counter on the same table and keys: it never sees the first one's buffer
SELECT counter.track('buf_calls2', 'buf_s.calls', 'api', 'at', mode => 'application', buffered => true) > 0 AS ok;
SELECT counter.track('buf_posts', 'buf_s.posts', 'author', 'at', buffered => true) > 0 AS ok;
-- the old signature still works by name and position (buffered is last, default false)
SELECT counter.track('buf_plain', 'buf_s.calls', 'api', 'at', NULL, 'application') > 0 AS ok;
SELECT name, buffered FROM counter.tracked ORDER BY name;
RESET ROLE;
-- delta tables keep room on their pages: a flush updates its keys' rows in place (HOT)
SELECT c.reloptions FROM counter.tracked t
JOIN pg_class c ON c.oid = pg_catalog.to_regclass(counter_internal.tracked_table(t, 'delta'))
WHERE t.name = 'buf_calls';
SELECT kind, target, run_every FROM counter.jobs WHERE kind = 'flush' ORDER BY target;
SET ROLE buf_owner;
SELECT counter.track('buf_bad', 'buf_s.calls', 'api', 'at', buffered => NULL);
\echo :LAST_ERROR_SQLSTATE

-- ---------------------------------------------------------------- adds in the transaction
SELECT counter.add('buf_calls', 'search'::text, 2, '2024-01-01 10:00+00');
BEGIN;
SELECT counter.add('buf_calls', 'search'::text, 10, '2024-01-01 10:00+00');
SAVEPOINT a;
SELECT counter.add('buf_calls', 'search'::text, 100, '2024-01-01 10:00+00');
SELECT counter.add('buf_calls', 'login'::text, 100, '2024-01-01 10:00+00');
ROLLBACK TO SAVEPOINT a;
SAVEPOINT b;
SELECT counter.add('buf_calls', 'search'::text, 1000, '2024-01-01 11:00+00');
RELEASE SAVEPOINT b;
-- not published yet: another session would not see it; this one does (as it sees its own rows)
SELECT counter.value('buf_calls', 'search'::text) AS before_commit;
COMMIT;
BEGIN;
SELECT counter.add('buf_calls', 'search'::text, 5000);
ROLLBACK;
SELECT counter.value('buf_calls', 'search'::text) AS search, counter.value('buf_calls', 'login'::text) AS login,
       counter.value('buf_calls2', 'search'::text) AS other_counter;
SELECT * FROM counter.values_of('buf_calls', ARRAY['search', 'login', 'search']);
SELECT * FROM counter.tracked_values WHERE counter LIKE 'buf_calls%' ORDER BY counter, key;
SELECT counter, preloaded, entries, pending, in_flight, pinned, flushes FROM counter.buffered ORDER BY counter;

-- ---------------------------------------------------------------- flush
BEGIN;
SELECT counter.flush('buf_calls') AS entries;
SELECT counter, pending, in_flight FROM counter.buffered WHERE counter = 'buf_calls';
-- written in this transaction, not yet let go of: still counted once
SELECT counter.value('buf_calls', 'search'::text);
ROLLBACK;
-- the rollback put it back
SELECT counter, pending, in_flight FROM counter.buffered WHERE counter = 'buf_calls';
SELECT counter.value('buf_calls', 'search'::text);
SELECT counter.flush('buf_calls') AS entries;
SELECT counter, pending, in_flight, flushes FROM counter.buffered WHERE counter = 'buf_calls';
SELECT key, bucket, delta FROM counter_internal.tracked_1_delta ORDER BY key, bucket;
SELECT counter.value('buf_calls', 'search'::text);
SELECT counter.flush('buf_calls') AS nothing_left;
CALL counter.run_steps('flush', 'buf_calls') \gset
SELECT :'result'::jsonb ->> 'rows' AS rows_affected;
SELECT counter.flush() AS every_counter;
-- a plain counter flushes nothing
SELECT counter.flush('buf_plain');
SELECT counter.flush('no_such_counter');
\echo :LAST_ERROR_SQLSTATE

-- ---------------------------------------------------------------- PREPARE TRANSACTION
-- backend memory cannot be prepared: the adds are written directly
BEGIN;
SELECT counter.add('buf_calls', 'prepared'::text, 7, '2024-01-01 10:00+00');
PREPARE TRANSACTION 'buf_p1';
SELECT counter.value('buf_calls', 'prepared'::text) AS before_commit_prepared;
COMMIT PREPARED 'buf_p1';
SELECT counter.value('buf_calls', 'prepared'::text) AS after_commit_prepared;
SELECT counter, pending FROM counter.buffered WHERE counter = 'buf_calls';
-- a transaction that flushed cannot be prepared (its claim lives in this backend)
SELECT counter.add('buf_calls', 'search'::text, 1, '2024-01-01 10:00+00');
BEGIN;
SELECT counter.flush('buf_calls') AS entries;
PREPARE TRANSACTION 'buf_p2';
\echo :LAST_ERROR_SQLSTATE
SELECT counter.value('buf_calls', 'search'::text);

-- ---------------------------------------------------------------- keys too long for the buffer
SELECT counter.add('buf_calls', repeat('k', 200), 3, '2024-01-01 10:00+00');
SELECT counter.value('buf_calls', repeat('k', 200)) AS long_key;
SELECT count(*) AS written_directly FROM counter_internal.tracked_1_delta WHERE length(key) = 200;

-- ---------------------------------------------------------------- trigger mode
INSERT INTO buf_s.posts SELECT g, g % 3, '2024-01-01 10:00+00' FROM generate_series(1, 30) g;
DELETE FROM buf_s.posts WHERE id <= 3;
UPDATE buf_s.posts SET author = 9 WHERE id = 4;
SELECT author, counter.value('buf_posts', author) AS value, count(*) AS truth FROM buf_s.posts GROUP BY author ORDER BY author;
SELECT count(*) AS delta_rows FROM counter_internal.tracked_3_delta;
SELECT counter, entries, pending FROM counter.buffered WHERE counter = 'buf_posts';
SELECT keys_checked, keys_corrected, drift_positive, drift_negative, outcome
FROM counter.reconcile('buf_posts', '2024-01-02 00:00+00');
SELECT author, counter.value('buf_posts', author) AS value, count(*) AS truth FROM buf_s.posts GROUP BY author ORDER BY author;
-- TRUNCATE empties the counter, buffer included
INSERT INTO buf_s.posts VALUES (100, 1, '2024-01-01 10:00+00');
BEGIN;
INSERT INTO buf_s.posts VALUES (101, 1, '2024-01-01 10:00+00');
TRUNCATE buf_s.posts;
INSERT INTO buf_s.posts VALUES (102, 2, '2024-01-01 10:00+00');
COMMIT;
SELECT g.k, counter.value('buf_posts', g.k) AS value FROM generate_series(0, 2) g(k);
RESET ROLE;

-- ---------------------------------------------------------------- privileges
-- buf_other has no right on the tables: cannot add, read or flush
SET ROLE buf_other;
SELECT counter.add('buf_calls', 'search'::text);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.value('buf_calls', 'search'::text);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.flush('buf_calls');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.flush() AS flushes_nothing_of_others;
SELECT count(*) AS visible FROM counter.buffered;
SELECT count(*) AS visible FROM counter.tracked_values;
SELECT * FROM counter_internal.tracked_buffered(1, NULL::text);
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.tracked_buffer_busy(1, now(), ARRAY['search']);
\echo :LAST_ERROR_SQLSTATE
SELECT counter_internal.tracked_buffer_forget(1);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM counter_internal.tracked_flushes;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- buf_reader may read (SELECT on the table) but not flush
GRANT SELECT, INSERT ON buf_s.calls TO buf_reader;
SET ROLE buf_reader;
SELECT counter.add('buf_calls', 'search'::text, 1, '2024-01-01 10:00+00');
SELECT counter.value('buf_calls', 'search'::text);
SELECT counter.flush('buf_calls');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS visible FROM counter.buffered;
-- the helpers check the owner's rights themselves, whoever has EXECUTE
SELECT * FROM counter_internal.tracked_buffered(1, NULL::text);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT EXECUTE ON FUNCTION counter_internal.tracked_buffered(integer, anyelement) TO buf_reader;
SET ROLE buf_reader;
SELECT * FROM counter_internal.tracked_buffered(1, NULL::text);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
REVOKE EXECUTE ON FUNCTION counter_internal.tracked_buffered(integer, anyelement) FROM buf_reader;
-- the owner's own helper call with another counter's key type is refused
SET ROLE buf_owner;
SELECT * FROM counter_internal.tracked_buffered(1, NULL::bigint);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.flush('buf_calls') AS entries;
RESET ROLE;

-- ---------------------------------------------------------------- untrack
SET ROLE buf_owner;
SELECT counter.add('buf_calls', 'search'::text, 1, '2024-01-01 10:00+00');
SELECT counter.untrack('buf_calls');
-- (how many entries an unflushed counter holds depends on when the last
-- sweep ran: doc/reference/tracked.md, "Lists of changed entries")
SELECT counter, entries > 0 AS holds_entries FROM counter.buffered ORDER BY counter;
SELECT counter.value('buf_calls', 'search'::text);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT kind, target FROM counter.jobs WHERE kind = 'flush' ORDER BY target;

-- ---------------------------------------------------------------- many adds in one transaction
-- past 8 (counter, key, bucket) adds a transaction finds its own through a
-- hash index, past 64 it gives that memory back when it ends: every amount
-- counts once, a rolled back savepoint drops exactly its own, and the next
-- (small) transaction starts clean
SET ROLE buf_owner;
BEGIN;
SELECT count(counter.add('buf_calls2', 'm' || g % 100, 1, '2024-01-01 10:00+00')) AS adds FROM generate_series(1, 300) g;
SAVEPOINT s;
SELECT count(counter.add('buf_calls2', 'm' || g % 150, 1000, '2024-01-01 10:00+00')) AS adds FROM generate_series(1, 150) g;
ROLLBACK TO SAVEPOINT s;
SELECT count(counter.add('buf_calls2', 'm' || g % 10, 10, '2024-01-01 11:00+00')) AS adds FROM generate_series(1, 20) g;
COMMIT;
-- 20 adds: indexed, and kept for the next transaction
SELECT count(counter.add('buf_calls2', 'm' || g, 1000000, '2024-01-01 12:00+00')) AS adds FROM generate_series(0, 19) g;
BEGIN;
SELECT counter.add('buf_calls2', 'm7'::text, 5, '2024-01-01 12:00+00');
SELECT counter.add('buf_calls2', 'm15'::text, 5, '2024-01-01 12:00+00');
SELECT counter.add('buf_calls2', 'm1'::text, 100000, '2024-01-01 10:00+00');
SELECT counter.add('buf_calls2', 'm1'::text, 100000, '2024-01-01 10:00+00');
COMMIT;
SELECT count(*) AS keys, sum(value) AS total, min(value), max(value)
FROM counter.tracked_values WHERE counter = 'buf_calls2' AND key LIKE 'm%';
SELECT counter.value('buf_calls2', 'm1'::text) AS m1, counter.value('buf_calls2', 'm7'::text) AS m7,
       counter.value('buf_calls2', 'm9'::text) AS m9, counter.value('buf_calls2', 'm15'::text) AS m15,
       counter.value('buf_calls2', 'm99'::text) AS m99, counter.value('buf_calls2', 'm120'::text) AS m120;
SELECT counter.flush('buf_calls2') AS entries;
SELECT counter.value('buf_calls2', 'm1'::text) AS m1_flushed;
RESET ROLE;

-- ---------------------------------------------------------------- what a flush writes
-- one row per (key, bucket): equal keys with different images (numeric 1.0,
-- 1.00 and 1) are one key, their amounts summed; in (key, bucket) order
SET ROLE buf_owner;
CREATE TABLE buf_s.prices (p numeric NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON buf_s.prices (at);
SELECT counter.track('buf_prices', 'buf_s.prices', 'p', 'at', mode => 'application', buffered => true) > 0 AS ok;
SELECT counter.add('buf_prices', 1.0, 1, '2024-01-01 10:00+00'), counter.add('buf_prices', 1.00, 2, '2024-01-01 10:00+00'),
       counter.add('buf_prices', 1, 4, '2024-01-01 10:00+00'), counter.add('buf_prices', 2, 8, '2024-01-01 10:00+00'),
       counter.add('buf_prices', 1, 16, '2024-01-01 11:00+00'), counter.add('buf_prices', 0.5, -32, '2024-01-01 10:00+00');
SELECT counter.flush('buf_prices') > 0 AS flushed;
RESET ROLE;
SELECT key::numeric = 1 AS one, bucket, delta FROM counter_internal.tracked_5_delta ORDER BY key, bucket;
SET ROLE buf_owner;
SELECT counter.value('buf_prices', 1.000) AS one, counter.value('buf_prices', 2) AS two,
       counter.value('buf_prices', 0.50) AS half;
-- a row's delta plus a flushed amount is bounded to +-(2^63 - 1), never refused
RESET ROLE;
UPDATE counter_internal.tracked_5_delta SET delta = CASE WHEN key = 2 THEN 9223372036854775000 ELSE -9223372036854775000 END
WHERE key IN (2, 0.5);
SET ROLE buf_owner;
SELECT counter.add('buf_prices', 2, 1000, '2024-01-01 10:00+00'), counter.add('buf_prices', 0.5, -1000, '2024-01-01 10:00+00');
SELECT counter.flush('buf_prices') AS entries;
SELECT counter.value('buf_prices', 2) AS two, counter.value('buf_prices', 0.5) AS half;
SELECT counter.add('buf_prices', 2, -7, '2024-01-01 10:00+00'), counter.add('buf_prices', 0.5, 7, '2024-01-01 10:00+00');
SELECT counter.flush('buf_prices') AS entries;
SELECT counter.value('buf_prices', 2) AS two, counter.value('buf_prices', 0.5) AS half;
SELECT counter.untrack('buf_prices');
RESET ROLE;

DROP EXTENSION counter_ext CASCADE;
DROP SCHEMA buf_s CASCADE;
DROP OWNED BY buf_owner, buf_other, buf_reader;
DROP ROLE buf_owner, buf_other, buf_reader;
