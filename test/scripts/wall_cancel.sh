#!/usr/bin/env bash
# A query cancel (pg_cancel_backend) stops a long C++ loop (60 s of work)
# with SQLSTATE 57014 instead of its result, and the server serves the next
# query. (No timing is asserted; the time it took is printed.)
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
if grep -q "^ *[0-9]" "$out"; then echo "the loop ran to its end: the cancel did not stop it"; exit 1; fi
ce_psql -d $db -At -c "SELECT counter_test.spin(0.01) > 0" | grep -qx t
echo "cancelled after $elapsed s"
"$CE_PGBIN/dropdb" $db
