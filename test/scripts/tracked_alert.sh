#!/usr/bin/env bash
# Drift above a counter's alert threshold: a WARNING and a NOTIFY on channel
# counter_ext_drift whose payload is JSON with the run's numbers; drift at or
# below the threshold sends nothing.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
db=tracked_alert
"$CE_PGBIN/dropdb" --if-exists $db && "$CE_PGBIN/createdb" $db
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$CE_PGBIN/psql" -X -v ON_ERROR_STOP=1 -d $db >"$out" 2>&1 <<'SQL'
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
SQL
cat "$out"
[ "$(grep -c 'Asynchronous notification "counter_ext_drift"' "$out")" -eq 1 ] || { echo "expected one notification"; exit 1; }
grep -q 'WARNING:  tracked counter "likes" drifted by 6 (+5, -1) over 3 keys' "$out" || { echo "no WARNING"; exit 1; }
payload=$(sed -n 's/.*with payload "\(.*\)" received from.*/\1/p' "$out")
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
