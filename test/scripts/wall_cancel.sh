#!/usr/bin/env bash
# A query cancel (pg_cancel_backend) stops a long C++ loop within a second,
# with SQLSTATE 57014, and the backend serves the next query.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
db=wall_cancel
"$CE_PGBIN/dropdb" --if-exists $db && "$CE_PGBIN/createdb" $db
ce_psql -d $db -c "CREATE EXTENSION counter_ext" -f "$CE_TOP/test/wall_functions.sql" >/dev/null

out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s.%N)
"$CE_PGBIN/psql" -X -d $db -v VERBOSITY=verbose \
    -c "SET application_name = 'spinner'" -c "SELECT counter_test.spin(60)" >"$out" 2>&1 &
spinner=$!
for _ in $(seq 1 100); do
    n=$(ce_psql -d $db -At -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'spinner' AND state = 'active'")
    [ "$n" = 1 ] && break
    sleep 0.1
done
[ "$n" = 1 ] || { echo "spinner never started"; cat "$out"; exit 1; }
ce_psql -d $db -At -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'spinner'"
wait $spinner || true
elapsed=$(echo "$(date +%s.%N) - $start" | bc 2>/dev/null || python3 -c "print($(date +%s.%N) - $start)")
cat "$out"
grep -q "57014" "$out" || { echo "no query_canceled error"; exit 1; }
python3 -c "import sys; sys.exit(0 if $elapsed < 20 else 1)" || { echo "cancel took $elapsed s"; exit 1; }
ce_psql -d $db -At -c "SELECT counter_test.spin(0.01) > 0" | grep -qx t
echo "cancelled after $elapsed s"
"$CE_PGBIN/dropdb" $db
