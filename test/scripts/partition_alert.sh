#!/usr/bin/env bash
# A partition maintenance run that had to skip a slot (its rows stay in the
# default partition) raises the alert of a drifted counter: a WARNING and a
# NOTIFY on channel counter_ext_drift whose JSON payload names the table and
# the slot; a run that skips nothing sends nothing. Run as the table's owner,
# an ordinary role.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
db=partition_alert
"$CE_PGBIN/dropdb" --if-exists $db && "$CE_PGBIN/createdb" $db
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$CE_PGBIN/psql" -X -v ON_ERROR_STOP=1 -d $db >"$out" 2>&1 <<'SQL'
CREATE EXTENSION counter_ext;
CREATE ROLE pa_owner;
GRANT CREATE ON SCHEMA public TO pa_owner;
SET ROLE pa_owner;
CREATE TABLE ev (id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
CREATE FUNCTION ev_audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER ev_audit BEFORE INSERT ON ev FOR EACH ROW EXECUTE FUNCTION ev_audit();
SELECT counter.partition_manage('ev', 'at', premake => 6, as_of => '2026-07-01 00:10+00');
LISTEN counter_ext_drift;
-- nothing skipped: silent
SELECT outcome AS quiet_run FROM counter.partition_maintain('ev', '2026-07-01 01:10+00');
INSERT INTO ev SELECT g, '2026-07-01 23:30+00' FROM generate_series(1, 100) g;
SELECT created, outcome AS loud_run FROM counter.partition_maintain('ev', '2026-07-01 17:10+00');
SQL
cat "$out"
[ "$(grep -c 'Asynchronous notification "counter_ext_drift"' "$out")" -eq 1 ] || { echo "expected one notification"; exit 1; }
grep -q 'WARNING:  partition maintenance of public.ev skipped 1 slot(s)' "$out" || { echo "no WARNING"; exit 1; }
payload=$(sed -n 's/.*with payload "\(.*\)" received from.*/\1/p' "$out")
python3 - "$payload" <<'PY'
import json, sys
p = json.loads(sys.argv[1])
assert p["alert"] == "partition" and p["table"] == "public.ev" and p["outcome"] == "error", p
assert [(s["slot"], s["action"], s["sqlstate"]) for s in p["skipped"]] == [("2026-07-01T23:00:00+00:00", "drain", "42501")], p
print("payload ok:", p)
PY
"$CE_PGBIN/dropdb" $db
"$CE_PGBIN/psql" -X -q -d postgres -c "DROP ROLE pa_owner"
