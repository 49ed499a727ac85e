#!/usr/bin/env bash
# Drift above a counter's alert threshold: a WARNING and a NOTIFY on channel
# counter_ext_drift whose payload is JSON with the run's numbers; drift at or
# below the threshold sends nothing. A counter registered on a table that
# already had rows counts them in its first run as a backfill: no drift, no
# WARNING, no NOTIFY; a later real drift of that counter still alerts.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
db=tracked_alert
"$CE_PGBIN/dropdb" --if-exists $db && "$CE_PGBIN/createdb" $db
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$CE_PGBIN/psql" -X -v ON_ERROR_STOP=1 -d $db >"$out" 2>&1 <<'SQL' || { cat "$out"; echo "psql failed"; exit 1; }
CREATE EXTENSION counter_ext;
CREATE TABLE likes (item text NOT NULL, at timestamptz NOT NULL);
SELECT counter.track('likes', 'likes', 'item', 'at', mode => 'application', alert_threshold => 3);
SELECT outcome FROM counter.reconcile('likes', '2024-01-01');
LISTEN counter_ext_drift;
-- |drift| 3: at the threshold, silent
SELECT counter.add('likes', 'a'::text, 3, '2024-01-01 10:00+00');
SELECT keys_corrected AS quiet_run FROM counter.reconcile('likes', '2024-01-02');
-- |drift| 4 + 1 + 1 = 6 over three keys: above it
INSERT INTO likes VALUES ('b', '2024-01-01 10:00+00');
SELECT counter.add('likes', 'a'::text, 4, '2024-01-01 10:00+00'), counter.add('likes', 'c'::text, 1, '2024-01-01');
SELECT keys_corrected AS loud_run FROM counter.reconcile('likes', '2024-01-02', all_keys => true);
-- a backfill: 7 rows before track, alert_threshold 0
CREATE TABLE old_likes (item text NOT NULL, at timestamptz NOT NULL);
INSERT INTO old_likes SELECT 'k' || (g % 2), now() - interval '1 hour' FROM generate_series(1, 7) g;
SELECT counter.track('old_likes', 'old_likes', 'item', 'at', alert_threshold => 0) IS NOT NULL AS tracked;
SELECT backfill_left FROM counter.tracked_status WHERE counter = 'old_likes';
SELECT keys_corrected, drift_positive, drift_negative AS backfill_run
FROM counter.reconcile('old_likes', now() + interval '10 minutes');
DO $$
BEGIN
    IF (SELECT (backfill, drift_positive, drift_negative) <> (7::bigint, 0::bigint, 0::bigint)
        FROM counter.tracked_history WHERE counter = 'old_likes') THEN
        RAISE EXCEPTION 'the backfill run is not recorded as one: %', (SELECT row(h.*) FROM counter.tracked_history h WHERE h.counter = 'old_likes');
    END IF;
    IF (SELECT (backfilled, backfill_left) <> (7::numeric, 0::bigint) FROM counter.tracked_status WHERE counter = 'old_likes') THEN
        RAISE EXCEPTION 'tracked_status does not show the backfill';
    END IF;
    IF EXISTS (SELECT FROM counter.tracked_key_drift_history WHERE counter = 'old_likes') THEN
        RAISE EXCEPTION 'backfilled keys logged as drifted keys';
    END IF;
    IF counter.value('old_likes', 'k1'::text) <> (SELECT count(*) FROM old_likes WHERE item = 'k1') THEN
        RAISE EXCEPTION 'the backfill did not count the rows';
    END IF;
END $$;
-- later, a real drift (a row written with the triggers off) alerts
SET session_replication_role = replica;
INSERT INTO old_likes VALUES ('k1', now() - interval '1 hour');
RESET session_replication_role;
SELECT drift_negative AS real_drift_run FROM counter.reconcile('old_likes', now() + interval '20 minutes', all_keys => true);
DO $$
BEGIN
    IF (SELECT (backfilled, backfill_left) <> (7::numeric, 0::bigint) FROM counter.tracked_status WHERE counter = 'old_likes') THEN
        RAISE EXCEPTION 'the real drift was taken for a backfill';
    END IF;
END $$;
SQL
cat "$out"
[ "$(grep -c 'Asynchronous notification "counter_ext_drift"' "$out")" -eq 2 ] || { echo "expected two notifications"; exit 1; }
grep -q 'WARNING:  tracked counter "likes" drifted by 6 (+5, -1) over 3 keys' "$out" || { echo "no WARNING"; exit 1; }
[ "$(grep -c 'tracked counter "old_likes" drifted' "$out")" -eq 1 ] || { echo "expected one WARNING for old_likes (the real drift)"; exit 1; }
grep -q 'WARNING:  tracked counter "old_likes" drifted by 1 (+0, -1) over 1 keys' "$out" || { echo "no WARNING for the real drift"; exit 1; }
grep -q '"counter" : "old_likes"' "$out" || { echo "no NOTIFY for the real drift"; exit 1; }
payload=$(sed -n 's/.*with payload "\(.*\)" received from.*/\1/p' "$out" | head -1)
python3 - "$payload" <<'PY'
import json, sys
p = json.loads(sys.argv[1])
want = {"counter": "likes", "keys_checked": 3, "keys_corrected": 3, "drift_positive": 5, "drift_negative": -1,
        "max_abs_drift": 4, "alert_threshold": 3}
bad = {k: (p.get(k), v) for k, v in want.items() if p.get(k) != v}
assert not bad, bad
assert "run_id" in p and "watermark" in p
print("payload ok:", p)
PY
"$CE_PGBIN/dropdb" $db
