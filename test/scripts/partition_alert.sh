#!/usr/bin/env bash
# A partition maintenance run that had to skip a slot (its rows stay in the
# default partition) raises the alert of a drifted counter: a WARNING and a
# NOTIFY on channel counter_ext_drift whose payload is the run's id only
# ({"run_id": N}, the run marked alerted, its skipped slots in its info); a
# run that skips nothing sends nothing. A table whose maintenance is overdue
# alerts with {"partitioned_table": OID}. Run as the table's owner, an
# ordinary role, who reads what the ids stand for with its own rights.
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
# Maintenance that has not run for longer than its interval: reading
# partition_status raises the alert (a table managed two hours ago that
# never ran, against its job interval of one hour).
"$CE_PGBIN/psql" -X -v ON_ERROR_STOP=1 -d $db >>"$out" 2>&1 <<'SQL'
SET ROLE pa_owner;
CREATE TABLE ev2 (id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
SELECT counter.partition_manage('ev2', 'at', premake => 1) > 0 AS managed;
RESET ROLE;
UPDATE counter.partitioned_tables SET created_at = now() - interval '2 hours' WHERE parent = 'ev2'::regclass;
SET ROLE pa_owner;
LISTEN counter_ext_drift;
SELECT parent, alert FROM counter.partition_status WHERE parent = 'ev2'::regclass;
SQL
cat "$out"
grep -q 'WARNING:  partitioned table public.ev2: maintenance has not run for 120 minutes (its interval: 60 minutes)' "$out" ||
    { echo "no WARNING for the overdue table"; exit 1; }
ev2=$("$CE_PGBIN/psql" -X -At -d $db -c "SELECT 'ev2'::regclass::oid")
grep -q "Asynchronous notification \"counter_ext_drift\" with payload \"{\"partitioned_table\" : $ev2}\"" "$out" ||
    { echo "no NOTIFY for the overdue table"; exit 1; }
[ "$(grep -c 'Asynchronous notification "counter_ext_drift"' "$out")" -ge 2 ] || { echo "expected the notifications"; exit 1; }
grep -q 'WARNING:  partition maintenance of public.ev skipped 1 slot(s)' "$out" || { echo "no WARNING"; exit 1; }
payload=$(sed -n 's/.*with payload "\(.*\)" received from.*/\1/p' "$out" | sed -n 1p)
run=$(python3 - "$payload" <<'PY'
import json, sys
p = json.loads(sys.argv[1])
assert set(p) == {"run_id"}, p
print(p["run_id"])
PY
)
# the owner reads the run the alert names: the table, the outcome, the slot
got=$("$CE_PGBIN/psql" -X -At -d $db -c "SET ROLE pa_owner" -c "SELECT kind, target, info ->> 'outcome', info -> 'skipped' -> 0 ->> 'slot',
    info -> 'skipped' -> 0 ->> 'action', info -> 'skipped' -> 0 ->> 'sqlstate'
    FROM counter.alerts WHERE run_id = $run" | tail -1)
[ "$got" = "partition_maintenance|public.ev|error|2026-07-01T23:00:00+00:00|drain|42501" ] || { echo "the alerted run reads: $got"; exit 1; }
echo "payload ok: $payload -> $got"
"$CE_PGBIN/dropdb" $db
"$CE_PGBIN/psql" -X -q -d postgres -c "DROP ROLE pa_owner"
