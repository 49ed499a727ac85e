-- Tracked counters: equal keys with different images (numeric 1.0, 1.00 and
-- 1) are one key. Which image the key is shown with is not specified, and
-- differs between PostgreSQL majors: expected/tracked_keys.out has 15's,
-- expected/tracked_keys_1.out 17's and 18's (doc/support.md).
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
