#!/usr/bin/env bash
# Drift above a counter's alert threshold: a WARNING and a NOTIFY on channel
# counter_ext_drift whose payload is the run's id only ({"run_id": N}); drift
# at or below the threshold sends nothing. A listener reads the alert with
# its own rights (counter.tracked_history, alerted); issue 24, item 9:
#   - 'mallory', an ordinary role listening on the channel while 'alice''s
#     counter alerts, receives nothing that names alice's counter or its
#     drift, and the documented check shows her nothing;
#   - alerts forged by mallory (NOTIFY on the channel: an id that does not
#     exist, the id of a run that did not alert, a payload that names a
#     counter) are told apart by the same check, run by alice.
# A counter registered on a table that already had rows counts them in its
# first run as a backfill: no drift, no WARNING, no NOTIFY; a later real
# drift of that counter still alerts.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
db=tracked_alert
"$CE_PGBIN/dropdb" --if-exists $db && "$CE_PGBIN/createdb" $db
out=$(mktemp)
spy=$(mktemp)
spy_pid=
trap 'rm -f "$out" "$spy"; [ -z "$spy_pid" ] || kill "$spy_pid" 2>/dev/null || true' EXIT
psql_() { "$CE_PGBIN/psql" -X -v ON_ERROR_STOP=1 -d $db "$@"; }

psql_ -q <<'SQL'
CREATE EXTENSION counter_ext;
DROP ROLE IF EXISTS alert_alice;
DROP ROLE IF EXISTS alert_mallory;
CREATE ROLE alert_alice LOGIN;
CREATE ROLE alert_mallory LOGIN;
GRANT CREATE ON SCHEMA public TO alert_alice;
SQL

# mallory listens for the whole run (until told to stop)
psql_ -U alert_mallory >"$spy" 2>&1 <<'SQL' &
LISTEN counter_ext_drift;
SELECT 'listening' AS spy, pg_sleep(0.1);
DO $$ BEGIN
    WHILE NOT EXISTS (SELECT FROM pg_catalog.pg_class WHERE relname = 'alert_done') LOOP
        PERFORM pg_sleep(0.1);
    END LOOP;
END $$;
SELECT 'done' AS spy;
SQL
spy_pid=$!
for _ in $(seq 1 100); do grep -q listening "$spy" && break; sleep 0.1; done

psql_ -U alert_alice >"$out" 2>&1 <<'SQL'
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
CREATE INDEX ON old_likes (at);
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
-- later, a real drift (a row the counter's trigger did not see: a writer
-- with session_replication_role = replica needs superuser, so the trigger is
-- disabled by the owner instead) alerts
ALTER TABLE old_likes DISABLE TRIGGER USER;
INSERT INTO old_likes VALUES ('k1', now() - interval '1 hour');
ALTER TABLE old_likes ENABLE TRIGGER USER;
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
payload=$(sed -n 's/.*with payload "\(.*\)" received from.*/\1/p' "$out" | sed -n 1p)
run=$(python3 - "$payload" <<'PY'
import json, sys
p = json.loads(sys.argv[1])
assert set(p) == {"run_id"}, p
print(p["run_id"])
PY
)
# the documented check, as alice: her alert, with its numbers
check='SELECT counter, keys_checked, keys_corrected, drift_positive, drift_negative, max_abs_drift
       FROM counter.tracked_history WHERE run_id = (:'"'"'payload'"'"'::json ->> '"'"'run_id'"'"')::bigint AND alerted'
real=$(psql_ -U alert_alice -At -v payload="$payload" <<<"$check" 2>&1 || true)
[ "$real" = "likes|3|3|5|-1|4" ] || { echo "alice's check of her alert: '$real'"; exit 1; }
quiet=$(psql_ -U alert_alice -At -c "SELECT run_id FROM counter.tracked_history WHERE counter = 'likes' AND NOT alerted
                                       AND keys_checked > 0 ORDER BY run_id LIMIT 1")

# mallory: stop listening; what she received names nothing of alice's
psql_ -q -c "CREATE TABLE alert_done ()"
wait "$spy_pid"
spy_pid=
cat "$spy"
[ "$(grep -c 'Asynchronous notification "counter_ext_drift"' "$spy")" -eq 2 ] ||
    { echo "mallory should have seen two (opaque) notifications"; exit 1; }
if grep -v '^Asynchronous' "$spy" | grep 'likes' >/dev/null ||
    sed -n 's/.*with payload "\(.*\)" received from.*/\1/p' "$spy" | grep -E 'likes|drift|keys|counter' >/dev/null; then
    echo "mallory's notification names alice's counter or its drift"; exit 1
fi
seen=$(psql_ -U alert_mallory -At -v payload="$payload" <<<"$check" 2>&1 || true)
[ -z "$seen" ] || { echo "mallory's check shows alice's alert: $seen"; exit 1; }

# forged alerts (mallory NOTIFYs on the channel), told apart by alice's check
forged=$(mktemp)
psql_ -U alert_alice >"$forged" 2>&1 <<SQL
LISTEN counter_ext_drift;
SELECT pg_sleep(0.1);
\! "$CE_PGBIN/psql" -X -q -d $db -U alert_mallory -c "NOTIFY counter_ext_drift, '{\"run_id\": 999999999}'" -c "NOTIFY counter_ext_drift, '{\"run_id\": $quiet}'" -c "NOTIFY counter_ext_drift, '{\"counter\": \"likes\", \"drift_positive\": 1000000}'"
SELECT pg_sleep(0.5);
SQL
n=0
while IFS= read -r p; do
    n=$((n + 1))
    got=$(psql_ -U alert_alice -At -v payload="$p" <<<"$check" 2>&1 || true)
    [ -z "$got" ] || { echo "forged alert $p passed the check: $got"; rm -f "$forged"; exit 1; }
    echo "forged alert $p: no alerted run (told apart)"
done < <(sed -n 's/.*with payload "\(.*\)" received from.*/\1/p' "$forged")
rm -f "$forged"
[ "$n" -eq 3 ] || { echo "alice received $n of 3 forged notifications"; exit 1; }
"$CE_PGBIN/dropdb" $db
psql_ -d postgres -q -c "DROP ROLE alert_alice" -c "DROP ROLE alert_mallory" 2>/dev/null || true
echo ok
