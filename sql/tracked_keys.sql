-- Tracked counters: equal keys with different images (numeric 1.0, 1.00 and
-- 1) are one key. Which image the key is shown with is not specified: the
-- first the statement's fold writes, in the order of its hash map, whose
-- hash is Boost's (1.74 on Debian 12, 1.83 with PostgreSQL 17 and 18 in
-- trixie and sid). expected/tracked_keys.out has Debian 12's image,
-- expected/tracked_keys_1.out the other (doc/support.md).
CREATE EXTENSION counter_ext;
SET client_min_messages = warning;
SET timezone = 'UTC';
CREATE SCHEMA tt;
-- equal keys with different images (numeric 1.0 and 1.00) are one key
CREATE TABLE tt.prices (p numeric, at timestamptz NOT NULL DEFAULT '2024-04-01');
SELECT counter.track('prices', 'tt.prices', 'p', 'at') > 0 AS ok;
INSERT INTO tt.prices (p) VALUES (1.0), (1.00), (2), (1);
SELECT key, value FROM counter.tracked_values WHERE counter = 'prices' ORDER BY key;
SELECT counter.value('prices', 1.000) AS one;
SELECT counter.untrack('prices');
