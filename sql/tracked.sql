-- Tracked counters: registration, trigger mode (every way rows change),
-- application mode, values, watermark reconciliation, drift repair for each
-- drift source, the job, unregistration, and bad input.
CREATE EXTENSION counter_ext;
\set ON_ERROR_STOP 0
\set SHOW_CONTEXT never
SET client_min_messages = warning;
SET timezone = 'UTC';
CREATE SCHEMA tt;

-- Keys where the counter and the truth differ (none when exact).
CREATE FUNCTION tt.mismatches(cname text, truth_query text)
RETURNS TABLE (key text, value bigint, truth bigint) LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY EXECUTE format(
        'SELECT coalesce(v.key, t.key), coalesce(v.value, 0), coalesce(t.n, 0)::bigint'
        ' FROM (SELECT x.key, x.value FROM counter.tracked_values x WHERE x.counter = %L) v'
        ' FULL JOIN (%s) t(key, n) ON v.key = t.key'
        ' WHERE coalesce(v.value, 0) <> coalesce(t.n, 0) ORDER BY 1', cname, truth_query);
END $$;

-- ---------------------------------------------------------------- trigger mode, bigint keys
CREATE TABLE tt.comments (
    id bigint PRIMARY KEY,
    post bigint,
    at timestamptz,
    deleted_at timestamptz
);
CREATE INDEX ON tt.comments (post, at);
-- rows that exist before registration: counted by the first reconciliation
INSERT INTO tt.comments SELECT g, g % 3, '2024-01-01 10:00+00'::timestamptz + g * interval '1 minute'
FROM generate_series(1, 10) g;

SELECT counter.track('comments', 'tt.comments', 'post', 'at', filter => 'deleted_at IS NULL',
                     bucket_width => '1 hour', shards => 4, reconcile_every => '30 seconds') AS counter_id;
SELECT name, source, key_column, key_type, time_column, filter, mode, watermark_lag, bucket_width, shards,
       full_pending
FROM counter.tracked;
SELECT kind, target, run_every FROM counter.jobs;
SELECT tgname FROM pg_trigger WHERE tgrelid = 'tt.comments'::regclass ORDER BY 1;

-- A key never seen reads 0; rows from before registration are not counted yet.
SELECT counter.value('comments', 1::bigint) AS before_reconcile, counter.value('comments', 42::bigint) AS never_seen;
-- The first run covers every key (full_pending), whatever all_keys says.
SELECT watermark, all_keys, keys_checked, keys_corrected, drift_positive, drift_negative, max_abs_drift, outcome
FROM counter.reconcile('comments', '2024-01-02 00:00+00');
SELECT full_pending FROM counter.tracked WHERE name = 'comments';

\set truth_comments 'SELECT post::text, count(*) FROM tt.comments WHERE deleted_at IS NULL AND post IS NOT NULL AND at IS NOT NULL GROUP BY 1'

-- INSERT of 10,000 rows: one delta per (key, bucket), not one per row.
INSERT INTO tt.comments SELECT g, g % 3, '2024-01-03 00:00+00'::timestamptz + (g % 120) * interval '1 minute'
FROM generate_series(100, 10099) g;
SELECT count(*) AS delta_rows, sum(delta) AS delta_sum FROM counter_internal.tracked_1_delta;
SELECT * FROM tt.mismatches('comments', :'truth_comments');

-- COPY counts like INSERT.
COPY tt.comments (id, post, at) FROM stdin;
20001	7	2024-01-03 05:00+00
20002	7	2024-01-03 05:01+00
20003	8	2024-01-03 05:02+00
\.
SELECT counter.value('comments', 7::bigint) AS copied_7, counter.value('comments', 8::bigint) AS copied_8;

-- ON CONFLICT DO NOTHING counts only the rows really inserted.
INSERT INTO tt.comments (id, post, at)
VALUES (20001, 7, '2024-01-03 05:00+00'), (20004, 7, '2024-01-03 05:03+00'), (20002, 7, '2024-01-03 05:01+00')
ON CONFLICT DO NOTHING;
SELECT counter.value('comments', 7::bigint) AS after_on_conflict;
-- ON CONFLICT DO UPDATE moving a row to another key counts as an update.
INSERT INTO tt.comments (id, post, at) VALUES (20004, 8, '2024-01-03 05:03+00')
ON CONFLICT (id) DO UPDATE SET post = excluded.post;
SELECT counter.value('comments', 7::bigint) AS key7, counter.value('comments', 8::bigint) AS key8;

-- UPDATE: key change, filter flip both ways, event-time change, no-op update.
UPDATE tt.comments SET post = 9 WHERE id IN (20001, 20002);
UPDATE tt.comments SET deleted_at = '2024-01-05' WHERE id % 7 = 0;
UPDATE tt.comments SET deleted_at = NULL WHERE id % 14 = 0;
UPDATE tt.comments SET at = at - interval '1 day' WHERE id % 5 = 0;
UPDATE tt.comments SET id = id WHERE id < 50;
-- NULL keys and NULL times are not counted.
INSERT INTO tt.comments VALUES (30001, NULL, '2024-01-03'), (30002, 1, NULL);
UPDATE tt.comments SET post = 1 WHERE id = 30001;
UPDATE tt.comments SET at = '2024-01-03' WHERE id = 30002;
-- DELETE
DELETE FROM tt.comments WHERE id % 11 = 0;
SELECT * FROM tt.mismatches('comments', :'truth_comments');
SELECT counter.value('comments', 9::bigint) AS key9;

-- The many-keys form and the view.
SELECT * FROM counter.values_of('comments', ARRAY[0, 1, 2, 7, 8, 9, 42, 1]::bigint[]);
SELECT count(*) AS keys_in_view FROM counter.tracked_values WHERE counter = 'comments';
-- An int key is cast to the bigint key type.
SELECT counter.value('comments', 9) AS int_key;

-- Reconciliation up to a watermark inside the deltas: buckets before it are
-- folded into the base, buckets from it on are kept.
SELECT watermark, keys_checked, keys_corrected, drift_positive, drift_negative, outcome
FROM counter.reconcile('comments', '2024-01-03 01:30+00');
SELECT min(bucket) AS first_kept_bucket, count(*) > 0 AS kept FROM counter_internal.tracked_1_delta;
SELECT * FROM tt.mismatches('comments', :'truth_comments');
-- A second run finds nothing dirty.
SELECT keys_checked, keys_corrected FROM counter.reconcile('comments', '2024-01-03 01:30+00');
-- Drift in the base, introduced by hand, is found and repaired with its sign.
UPDATE counter_internal.tracked_1_base SET base = base + 5 WHERE key = 0;
UPDATE counter_internal.tracked_1_base SET base = base - 2 WHERE key = 1;
SELECT keys_checked, keys_corrected, drift_positive, drift_negative, max_abs_drift
FROM counter.reconcile('comments', '2024-01-03 01:30+00', all_keys => true);
SELECT key, cached, truth, drift FROM counter.tracked_key_drift_history
WHERE counter = 'comments' AND run_id = (SELECT max(run_id) FROM counter.tracked_runs) ORDER BY key;
SELECT * FROM tt.mismatches('comments', :'truth_comments');
-- Keys whose rows are all gone reconcile to 0 and keep no state.
DELETE FROM tt.comments WHERE post = 9;
SELECT keys_corrected FROM counter.reconcile('comments', '2024-01-10 00:00+00');
SELECT count(*) AS state_rows_of_key_9 FROM (
    SELECT key FROM counter_internal.tracked_1_base WHERE key = 9 UNION ALL
    SELECT key FROM counter_internal.tracked_1_delta WHERE key = 9) s;
SELECT counter.value('comments', 9::bigint) AS key9;
-- TRUNCATE of the source empties the counter at once.
TRUNCATE tt.comments;
SELECT count(*) AS keys_after_truncate FROM counter.tracked_values WHERE counter = 'comments';
INSERT INTO tt.comments VALUES (1, 5, '2024-01-03');
SELECT * FROM tt.mismatches('comments', :'truth_comments');

-- The job procedure reconciles with the default watermark.
CALL counter.run_steps('reconcile', 'comments') \gset
SELECT :'result'::jsonb ->> 'rows' AS rows_affected;
SELECT counter, all_keys, outcome FROM counter.tracked_history WHERE counter = 'comments' ORDER BY run_id;
SELECT counter, runs, keys_corrected, drift_positive, drift_negative, max_abs_drift FROM counter.tracked_drift;

-- ---------------------------------------------------------------- trigger mode, uuid keys
CREATE TABLE tt.views (page uuid, seen timestamptz, bot boolean NOT NULL DEFAULT false);
SELECT counter.track('views', 'tt.views', 'page', 'seen', 'NOT bot', bucket_width => '10 minutes') > 0 AS ok;
INSERT INTO tt.views
SELECT ('00000000-0000-0000-0000-00000000000' || (g % 4))::uuid, '2024-02-01'::timestamptz + g * interval '1 second',
       g % 10 = 0
FROM generate_series(1, 1000) g;
SELECT key, value FROM counter.tracked_values WHERE counter = 'views' ORDER BY key;
UPDATE tt.views SET bot = NOT bot WHERE seen < '2024-02-01 00:01';
\set truth_views 'SELECT page::text, count(*) FROM tt.views WHERE NOT bot GROUP BY 1'
SELECT * FROM tt.mismatches('views', :'truth_views');
SELECT counter.value('views', '00000000-0000-0000-0000-000000000001'::uuid) AS uuid_key;
SELECT keys_checked, keys_corrected FROM counter.reconcile('views', '2024-02-01 00:10+00');
SELECT * FROM tt.mismatches('views', :'truth_views');

-- ---------------------------------------------------------------- trigger mode, text keys
CREATE TABLE tt.tags (id serial PRIMARY KEY, tag text COLLATE "C", at timestamptz NOT NULL DEFAULT '2024-04-01');
SELECT counter.track('tags', 'tt.tags', 'tag', 'at', 'length(tag) > 1') > 0 AS ok;
-- long keys are stored compressed: the fold compares them by their bytes
INSERT INTO tt.tags (tag) SELECT t FROM unnest(ARRAY['b', 'ab', 'Ab', 'ab', repeat('x', 5000), repeat('x', 5000),
    'é', 'éé', 'zz']) t;
SELECT left(key, 10) AS key, length(key), value FROM counter.tracked_values WHERE counter = 'tags' ORDER BY key;
\set truth_tags 'SELECT tag, count(*) FROM tt.tags WHERE length(tag) > 1 GROUP BY 1'
-- the trigger recompiles the filter after the source table changes
ALTER TABLE tt.tags ADD COLUMN extra int;
UPDATE tt.tags SET tag = 'ab' WHERE tag IN ('zz', 'b');
DELETE FROM tt.tags WHERE tag = 'Ab';
SELECT * FROM tt.mismatches('tags', :'truth_tags');
-- renaming a tracked column breaks the counter loudly, not silently
ALTER TABLE tt.tags RENAME COLUMN tag TO label;
INSERT INTO tt.tags (label) VALUES ('nope');
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE tt.tags RENAME COLUMN label TO tag;
INSERT INTO tt.tags (tag) VALUES ('ab');
SELECT counter.value('tags', 'ab'::text) AS ab;
SELECT counter.untrack('tags');
-- equal keys with different images (numeric 1.0 and 1.00): sql/tracked_keys.sql

-- ---------------------------------------------------------------- application mode, text keys: drift repair
CREATE TABLE tt.likes (id serial PRIMARY KEY, item text NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON tt.likes (item, at);
SELECT counter.track('likes', 'tt.likes', 'item', 'at', mode => 'application', bucket_width => '1 hour') > 0 AS ok;
SELECT count(*) AS triggers FROM pg_trigger WHERE tgrelid = 'tt.likes'::regclass;
SELECT keys_checked FROM counter.reconcile('likes', '2024-03-01');   -- the first (full) run: nothing yet
\set truth_likes 'SELECT item, count(*) FROM tt.likes GROUP BY 1'
-- The application writes a row and adds 1, at the row's event time ...
INSERT INTO tt.likes (item, at) VALUES ('ok', '2024-03-01 10:00'), ('ok', '2024-03-01 10:05');
SELECT counter.add('likes', 'ok'::text, 1, '2024-03-01 10:00'), counter.add('likes', 'ok'::text, 1, '2024-03-01 10:05');
-- ... but misses some adds (drift -2) ...
INSERT INTO tt.likes (item, at) VALUES ('missed', '2024-03-01 11:00'), ('missed', '2024-03-01 11:00'),
                                       ('missed', '2024-03-01 11:30');
SELECT counter.add('likes', 'missed'::text, 1, '2024-03-01 11:00');
-- ... doubles others (drift +2) ...
INSERT INTO tt.likes (item, at) VALUES ('doubled', '2024-03-01 12:00'), ('doubled', '2024-03-01 12:10');
SELECT counter.add('likes', 'doubled'::text, 2, '2024-03-01 12:00'), counter.add('likes', 'doubled'::text, 2, '2024-03-01 12:10');
-- ... deletes without decrementing (drift +1) ...
INSERT INTO tt.likes (item, at) VALUES ('undeleted', '2024-03-01 13:00'), ('undeleted', '2024-03-01 13:00');
SELECT counter.add('likes', 'undeleted'::text, 2, '2024-03-01 13:00');
DELETE FROM tt.likes WHERE id = (SELECT max(id) FROM tt.likes WHERE item = 'undeleted');
-- ... and adds late at the current time for a row of yesterday, which a
-- watermark inside the day keeps (bucket after W) until a later run.
INSERT INTO tt.likes (item, at) VALUES ('late', '2024-03-01 09:00');
SELECT counter.add('likes', 'late'::text, 1, '2024-03-02 09:00');
SELECT * FROM counter.values_of('likes', ARRAY['ok', 'missed', 'doubled', 'undeleted', 'late']);
SELECT keys_checked, keys_corrected, drift_positive, drift_negative, max_abs_drift
FROM counter.reconcile('likes', '2024-03-02', all_keys => true);
SELECT key, cached, truth, drift FROM counter.tracked_key_drift_history WHERE counter = 'likes' ORDER BY key;
-- 'late' reads 2: its row is in the base now and its add is still kept
-- after W; the next run past the add's bucket finds that +1.
SELECT * FROM tt.mismatches('likes', :'truth_likes');
-- A dirty-only run fixes doubled adds on keys with activity.
SELECT counter.add('likes', 'ok'::text, 3, '2024-03-01 10:00');
SELECT keys_checked, keys_corrected, drift_positive, drift_negative
FROM counter.reconcile('likes', '2024-03-03');
SELECT key, drift FROM counter.tracked_key_drift_history
WHERE counter = 'likes' AND run_id = (SELECT max(run_id) FROM counter.tracked_runs) ORDER BY key;
SELECT * FROM tt.mismatches('likes', :'truth_likes');
-- TRUNCATE in application mode is drift the next full run repairs (positive).
TRUNCATE tt.likes;
SELECT keys_checked, keys_corrected, drift_positive, drift_negative
FROM counter.reconcile('likes', '2024-03-02', all_keys => true);
SELECT count(*) AS likes_state_rows FROM counter.tracked_values WHERE counter = 'likes' AND value <> 0;

-- Rows written with triggers off (session_replication_role = replica) are
-- drift the next full run repairs (negative).
SET session_replication_role = replica;
INSERT INTO tt.views VALUES ('00000000-0000-0000-0000-000000000009', '2024-02-01 00:00:01', false),
                            ('00000000-0000-0000-0000-000000000009', '2024-02-01 00:00:02', false);
RESET session_replication_role;
SELECT counter.value('views', '00000000-0000-0000-0000-000000000009'::uuid) AS replica_rows_uncounted;
SELECT keys_checked, keys_corrected, drift_positive, drift_negative
FROM counter.reconcile('views', '2024-02-01 00:10+00', all_keys => true);
SELECT * FROM tt.mismatches('views', :'truth_views');

-- Drift above the alert threshold raises a WARNING (and a NOTIFY on
-- counter_ext_drift, tested in test/scripts/tracked_alert.sh).
SET client_min_messages = warning;
\set VERBOSITY terse
SELECT counter.untrack('likes');
SELECT counter.track('likes', 'tt.likes', 'item', 'at', mode => 'application', alert_threshold => 2) > 0 AS ok;
SELECT counter.add('likes', 'ghost'::text, 3, '2024-03-01');
SELECT keys_corrected, drift_positive FROM counter.reconcile('likes', '2024-03-02');
\set VERBOSITY default

-- ---------------------------------------------------------------- bad input
-- unknown counter
SELECT counter.value('nope', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.reconcile('nope');
\echo :LAST_ERROR_SQLSTATE
CALL counter.run_steps('reconcile', 'nope');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.untrack('nope');
\echo :LAST_ERROR_SQLSTATE
-- wrong key type, NULL key
SELECT counter.value('comments', 'abc'::text);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.value('views', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.add('likes', 5);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.value('comments', NULL::bigint);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.add('likes', NULL::text);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM counter.values_of('comments', ARRAY[1, NULL]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.value(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
-- a failed add inside a savepoint leaves the session working
BEGIN;
SAVEPOINT s;
SELECT counter.add('likes', 5);
ROLLBACK TO SAVEPOINT s;
SELECT counter.add('likes', 'after-savepoint'::text, 2);
COMMIT;
SELECT counter.value('likes', 'after-savepoint'::text) AS after_savepoint;
-- an integer key is cast to a bigint key type
CREATE TABLE tt.ints (k bigint, at timestamptz);
SELECT counter.track('ints', 'tt.ints', 'k', 'at', mode => 'application') > 0 AS ok;
SELECT counter.add('ints', 5), counter.add('ints', 5::smallint, 2), counter.add('ints', 5::bigint, -1);
SELECT counter.value('ints', 5) AS ints_5;
SELECT counter.add('ints', 5.0);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.add('ints', 5, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.untrack('ints');
-- counter.add on a trigger-mode counter
SELECT counter.add('comments', 1::bigint);
\echo :LAST_ERROR_SQLSTATE
-- registration errors, none of which leaves anything behind
CREATE TABLE tt.bad (k bigint, t timestamptz, ts timestamp, n int);
SELECT counter.track('bad1', 'tt.bad', 'k', 't', 'k >');                 -- does not parse
\echo :LAST_ERROR_SQLSTATE
SELECT counter.track('bad1', 'tt.bad', 'k', 't', 'true) OR (true) LIMIT (1');  -- not one expression
\echo :LAST_ERROR_SQLSTATE
SELECT counter.track('bad1', 'tt.bad', 'k', 't', 'true; DROP TABLE tt.bad');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.track('bad1', 'tt.bad', 'k', 't', 'missing_column > 0');  -- missing column
\echo :LAST_ERROR_SQLSTATE
SELECT counter.track('bad1', 'tt.bad', 'k', 't', 'n + 1');               -- not boolean
\echo :LAST_ERROR_SQLSTATE
SELECT counter.track('bad1', 'tt.bad', 'k', 't', 'n IN (SELECT 1)');     -- a subquery
\echo :LAST_ERROR_SQLSTATE
SELECT counter.track('bad1', 'tt.bad', 'k', 't', 'count(*) > 0');        -- an aggregate
\echo :LAST_ERROR_SQLSTATE
SELECT counter.track('bad1', 'tt.bad', 'k', 'ts');                       -- time column not timestamptz
\echo :LAST_ERROR_SQLSTATE
SELECT counter.track('bad1', 'tt.bad', 'k', 'n');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.track('bad1', 'tt.bad', 'nokey', 't');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.track('bad1', 'tt.bad', 'k', 't', mode => 'magic');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.track('bad1', 'tt.bad', 'k', 't', shards => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.track('bad1', 'tt.bad', 'k', 't', bucket_width => '1 month');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.track('bad1', 'tt.bad', 'k', 't', watermark_lag => '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.track('bad name!', 'tt.bad', 'k', 't');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.track('comments', 'tt.bad', 'k', 't');                    -- name taken
\echo :LAST_ERROR_SQLSTATE
SELECT counter.track(NULL, 'tt.bad', 'k', 't');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.track('bad1', 'counter.tracked_history', 'counter', 'started_at');  -- a view
\echo :LAST_ERROR_SQLSTATE
SELECT counter.reconcile('comments', all_keys => NULL);
\echo :LAST_ERROR_SQLSTATE
-- non-owner registration
CREATE ROLE tracked_stranger;
GRANT USAGE ON SCHEMA tt TO tracked_stranger;
GRANT SELECT, INSERT ON tt.bad TO tracked_stranger;
SET ROLE tracked_stranger;
SELECT counter.track('bad1', 'tt.bad', 'k', 't');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.untrack('comments');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.reconcile('comments');
\echo :LAST_ERROR_SQLSTATE
SELECT counter.add('likes', 'x'::text);
\echo :LAST_ERROR_SQLSTATE
SELECT counter.value('comments', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS visible_values FROM counter.tracked_values;
SELECT count(*) AS visible_runs FROM counter.tracked_history;
RESET ROLE;
-- nothing half-created
SELECT count(*) AS counters FROM counter.tracked WHERE name = 'bad1';
SELECT count(*) AS triggers_on_bad FROM pg_trigger WHERE tgrelid = 'tt.bad'::regclass;
SELECT count(*) AS stray_state_tables FROM pg_class WHERE relnamespace = 'counter_internal'::regnamespace
  AND relname ~ '^tracked_[0-9]+_' AND relkind = 'r'
  AND substring(relname from '^tracked_([0-9]+)_')::int NOT IN (SELECT counter_id FROM counter.tracked);
SELECT count(*) AS stray_functions FROM pg_proc WHERE pronamespace = 'counter_internal'::regnamespace
  AND proname ~ '^tracked_[0-9]+_'
  AND substring(proname from '^tracked_([0-9]+)_')::int NOT IN (SELECT counter_id FROM counter.tracked);

-- A table owned by another role: its owner may track it; the state and the
-- generated functions belong to that owner.
ALTER TABLE tt.bad OWNER TO tracked_stranger;
SET ROLE tracked_stranger;
SELECT counter.track('strangers', 'tt.bad', 'k', 't') > 0 AS ok;
INSERT INTO tt.bad VALUES (1, '2024-01-01'), (1, '2024-01-01');
SELECT counter.value('strangers', 1::bigint) AS strangers_value;
SELECT keys_checked FROM counter.reconcile('strangers', '2024-02-01');
RESET ROLE;
SELECT DISTINCT pg_get_userbyid(relowner) AS state_owner FROM pg_class
WHERE relname ~ ('^tracked_' || (SELECT counter_id FROM counter.tracked WHERE name = 'strangers') || '_')
  AND relkind = 'r';
-- A writer with INSERT on the source only: the trigger writes the state as
-- the counter's owner; the writer cannot attach the fold trigger itself.
CREATE ROLE tracked_writer;
GRANT USAGE ON SCHEMA tt TO tracked_writer;
GRANT INSERT ON tt.bad TO tracked_writer;
SET ROLE tracked_writer;
INSERT INTO tt.bad VALUES (1, '2024-01-01');
RESET ROLE;
CREATE TABLE tt.mine (k bigint, t timestamptz);
ALTER TABLE tt.mine OWNER TO tracked_writer;
SET ROLE tracked_writer;
CREATE TRIGGER steal AFTER INSERT ON tt.mine REFERENCING NEW TABLE AS ce_new FOR EACH STATEMENT
    EXECUTE FUNCTION counter_internal.tracked_fold('1');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT counter.value('strangers', 1::bigint) AS after_writer;
SET ROLE tracked_stranger;
SELECT counter.untrack('strangers');
RESET ROLE;
DROP TABLE tt.mine;
-- A dropped source takes its counter with it: state, catalog row, job.
CREATE TABLE tt.gone (k bigint, t timestamptz);
SELECT counter.track('gone', 'tt.gone', 'k', 't') > 0 AS ok;
SELECT counter_id AS gone_id FROM counter.tracked WHERE name = 'gone' \gset
DROP TABLE tt.gone;
SELECT count(*) AS gone_left FROM counter.tracked WHERE name = 'gone';
SELECT count(*) AS gone_jobs FROM counter.jobs WHERE kind = 'reconcile' AND target = 'gone';
SELECT count(*) AS gone_state FROM pg_class WHERE relnamespace = 'counter_internal'::regnamespace
  AND relname ~ ('^tracked_' || :gone_id || '_');
-- Its triggers switched off and on again: every key is verified next run.
CREATE TABLE tt.switch (k bigint, t timestamptz);
SELECT counter.track('switch', 'tt.switch', 'k', 't') > 0 AS ok;
SELECT outcome FROM counter.reconcile('switch', '2024-02-01');
ALTER TABLE tt.switch DISABLE TRIGGER ALL;
INSERT INTO tt.switch VALUES (1, '2023-01-01'), (1, '2023-01-01');   -- backdated, not counted
SELECT counter.value('switch', 1::bigint) AS while_off, triggers_off, full_pending
FROM counter.tracked_status WHERE counter = 'switch';
ALTER TABLE tt.switch ENABLE TRIGGER ALL;
SELECT triggers_off, full_pending FROM counter.tracked_status WHERE counter = 'switch';
SELECT all_keys, keys_corrected, drift_negative FROM counter.reconcile('switch', '2024-02-01');
SELECT counter.value('switch', 1::bigint) AS repaired;
DROP TABLE tt.switch;

-- ---------------------------------------------------------------- values_of over many keys
-- 60,000 keys at once: the answer outgrows what the read's own memory held
-- (1.2 read it after freeing it, and one key in three came back as garbage).
CREATE TABLE tt.many (k bigint NOT NULL, t timestamptz NOT NULL);
CREATE INDEX ON tt.many (t);
INSERT INTO tt.many SELECT g % 60000, '2024-01-01' FROM generate_series(1, 120000) g;
SELECT FROM counter.track('many', 'tt.many', 'k', 't');
SELECT outcome, keys_checked FROM counter.reconcile('many', '2024-02-01');
SELECT count(*) AS keys, count(*) FILTER (WHERE v.value <> 2) AS wrong
FROM counter.values_of('many', (SELECT array_agg(g::bigint) FROM generate_series(0, 59999) g)) v;
SELECT counter.untrack('many');
DROP TABLE tt.many;

-- ---------------------------------------------------------------- a read is base + deltas, without a query
-- counter.value reads the state tables through their primary keys (src/tracked.cpp,
-- read_direct): it equals count(*) for bigint, text and uuid keys, before and after a
-- reconciliation moved rows into base, 0 for a key never seen, with a key of many
-- delta rows, inside a transaction that added rows itself; an enum key is read by the
-- plan (its comparison is not initdb's alone) and equals count(*) as well.
CREATE TYPE tt.color AS ENUM ('red', 'green', 'blue');
CREATE TABLE tt.rk (b bigint NOT NULL, t text NOT NULL, u uuid NOT NULL, c tt.color NOT NULL,
                    at timestamptz NOT NULL);
CREATE INDEX ON tt.rk (at);
SELECT FROM counter.track('rk_b', 'tt.rk', 'b', 'at', bucket_width => '1 hour');
SELECT FROM counter.track('rk_t', 'tt.rk', 't', 'at', bucket_width => '1 hour');
SELECT FROM counter.track('rk_u', 'tt.rk', 'u', 'at', bucket_width => '1 hour');
SELECT FROM counter.track('rk_c', 'tt.rk', 'c', 'at', bucket_width => '1 hour');
INSERT INTO tt.rk SELECT g % 5, 'k' || g % 5, ('00000000-0000-0000-0000-00000000000' || g % 5)::uuid,
    (enum_range(NULL::tt.color))[1 + g % 3], '2024-01-01'::timestamptz + g * interval '1 hour'
FROM generate_series(1, 2000) g;
SELECT (xpath('/row/n/text()', query_to_xml(format('SELECT count(*) AS n FROM counter_internal.%I WHERE key = 1',
       'tracked_' || counter_id || '_delta'), false, true, '')))[1]::text AS key_1_delta_rows
FROM counter.tracked WHERE name = 'rk_b';
CREATE FUNCTION tt.rk_check() RETURNS TABLE (k bigint, b_ok boolean, t_ok boolean, u_ok boolean)
LANGUAGE sql AS $$
    SELECT k, counter.value('rk_b', k) = (SELECT count(*) FROM tt.rk WHERE b = k),
           counter.value('rk_t', 'k' || k) = (SELECT count(*) FROM tt.rk WHERE t = 'k' || k),
           counter.value('rk_u', ('00000000-0000-0000-0000-00000000000' || k)::uuid)
               = (SELECT count(*) FROM tt.rk WHERE u = ('00000000-0000-0000-0000-00000000000' || k)::uuid)
    FROM generate_series(0::bigint, 6) k   -- 5 and 6: never seen
$$;
SELECT * FROM tt.rk_check();
SELECT counter.value('rk_b', 5::bigint) AS never_seen, counter.value('rk_b', 1::bigint) AS key_1;
SELECT c, counter.value('rk_c', c) = (SELECT count(*) FROM tt.rk r WHERE r.c = e.c) AS enum_ok
FROM unnest(enum_range(NULL::tt.color)) e(c);
SELECT outcome FROM counter.reconcile('rk_b', '2024-02-01');
SELECT outcome FROM counter.reconcile('rk_t', '2024-02-01');
SELECT outcome FROM counter.reconcile('rk_u', '2024-02-01');
SELECT * FROM tt.rk_check();
BEGIN;
INSERT INTO tt.rk SELECT 1, 'k1', '00000000-0000-0000-0000-000000000001', 'red', '2024-06-01'
FROM generate_series(1, 3);
SELECT counter.value('rk_b', 1::bigint) AS own_adds_seen;
SELECT * FROM tt.rk_check();
ROLLBACK;
SELECT * FROM tt.rk_check();
SELECT counter.untrack('rk_b'), counter.untrack('rk_t'), counter.untrack('rk_u'), counter.untrack('rk_c');
DROP TABLE tt.rk;
DROP TYPE tt.color;
DROP FUNCTION tt.rk_check();
-- The sum is exact, then held within [-INT64_MAX, INT64_MAX]: two deltas of INT64_MAX
-- and one of -INT64_MAX are INT64_MAX (not 0, as a sum saturating at each step would be).
CREATE TABLE tt.sat (k bigint NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON tt.sat (at);
SELECT FROM counter.track('sat', 'tt.sat', 'k', 'at', mode => 'application', bucket_width => '1 hour');
BEGIN;
SELECT counter.add('sat', 1::bigint, 9223372036854775807, '2024-01-01 00:00+00'),
       counter.add('sat', 1::bigint, 9223372036854775807, '2024-01-01 01:00+00');
SELECT counter.value('sat', 1::bigint) AS own_high;
SELECT counter.add('sat', 1::bigint, -9223372036854775807, '2024-01-01 02:00+00');
SELECT counter.add('sat', 2::bigint, -9223372036854775807, '2024-01-01 00:00+00'),
       counter.add('sat', 2::bigint, -9223372036854775807, '2024-01-01 01:00+00');
COMMIT;
SELECT counter.value('sat', 1::bigint) AS high, counter.value('sat', 2::bigint) AS low,
       counter.value('sat', 3::bigint) AS none;
SELECT counter.untrack('sat');
DROP TABLE tt.sat;

-- ---------------------------------------------------------------- a dirty run reads only its keys' rows
-- A run whose watermark did not move since the last one has an empty
-- event-time range [from, watermark): it must not look for source rows in
-- it (without an index on the event time that was a scan of the whole
-- source in every batch). Two dirty keys: the run reads their 9 rows, not
-- the 6,000 rows of the table.
CREATE TABLE tt.scan (k bigint NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON tt.scan (k);
INSERT INTO tt.scan SELECT g % 2000, '2024-01-01 00:00+00'::timestamptz + (g % 60) * interval '1 minute'
FROM generate_series(1, 6000) g;
ANALYZE tt.scan;
SELECT FROM counter.track('scan', 'tt.scan', 'k', 'at', bucket_width => '1 hour');
SELECT keys_checked FROM counter.reconcile('scan', '2024-01-01 02:00+00');
INSERT INTO tt.scan VALUES (7, '2024-01-01 00:30+00'), (7, '2024-01-01 00:40+00'), (9, '2024-01-01 00:50+00');
SELECT counter_internal.tracked_table(t, 'delta') AS scan_delta, counter_internal.tracked_table(t, 'base') AS scan_base
FROM counter.tracked t WHERE t.name = 'scan' \gset
-- What a run read and wrote is a difference of pg_stat_xact_user_tables
-- taken in one transaction (the view also holds counts of earlier
-- transactions not yet reported). The dirty run reads only its keys' rows,
-- and deletes its folded delta rows without first updating them to 0.
BEGIN;
CREATE TEMP TABLE scan_before ON COMMIT DROP AS
SELECT x.relid, x.seq_tup_read + coalesce(x.idx_tup_fetch, 0) AS r, x.n_tup_upd AS u, x.n_tup_del AS d
FROM pg_stat_xact_user_tables x WHERE x.relid IN ('tt.scan'::regclass, :'scan_delta'::regclass);
SELECT keys_checked, keys_corrected FROM counter.reconcile('scan', '2024-01-01 02:00+00');
SELECT x.seq_tup_read + coalesce(x.idx_tup_fetch, 0) - b.r < 100 AS read_only_dirty_rows
FROM pg_stat_xact_user_tables x JOIN scan_before b USING (relid) WHERE x.relid = 'tt.scan'::regclass;
SELECT x.n_tup_upd - b.u AS delta_rows_updated, x.n_tup_del - b.d AS delta_rows_deleted
FROM pg_stat_xact_user_tables x JOIN scan_before b USING (relid) WHERE x.relid = :'scan_delta'::regclass;
COMMIT;
SELECT counter.value('scan', 7::bigint) = 5 AND counter.value('scan', 9::bigint) = 4 AS exact;
-- A run that finds nothing to correct writes nothing: every key checked,
-- no base row rewritten (1.7 rewrote the base of every key it checked)
BEGIN;
CREATE TEMP TABLE scan_writes ON COMMIT DROP AS
SELECT x.n_tup_ins + x.n_tup_upd + x.n_tup_del AS n FROM pg_stat_xact_user_tables x
WHERE x.relid = :'scan_base'::regclass;
SELECT keys_checked, keys_corrected FROM counter.reconcile('scan', '2024-01-01 02:00+00', all_keys => true);
SELECT x.n_tup_ins + x.n_tup_upd + x.n_tup_del - w.n AS base_rows_written
FROM pg_stat_xact_user_tables x, scan_writes w WHERE x.relid = :'scan_base'::regclass;
COMMIT;
SELECT counter.untrack('scan');
DROP TABLE tt.scan;

-- ---------------------------------------------------------------- untrack removes everything
SELECT counter.untrack('comments'), counter.untrack('views'), counter.untrack('likes');
SELECT count(*) AS counters FROM counter.tracked;
SELECT count(*) AS runs FROM counter.tracked_runs;
SELECT count(*) AS jobs FROM counter.jobs WHERE kind = 'reconcile';
SELECT count(*) AS triggers FROM pg_trigger WHERE tgrelid IN ('tt.comments'::regclass, 'tt.views'::regclass);
SELECT count(*) AS state_objects FROM pg_class WHERE relnamespace = 'counter_internal'::regnamespace
  AND relname ~ '^tracked_[0-9]+_';
SELECT count(*) AS generated_functions FROM pg_proc WHERE pronamespace = 'counter_internal'::regnamespace
  AND proname ~ '^tracked_[0-9]+_';
INSERT INTO tt.comments VALUES (2, 5, '2024-01-03');   -- the source works without its triggers

DROP SCHEMA tt CASCADE;
DROP ROLE tracked_stranger, tracked_writer;
DROP EXTENSION counter_ext;
