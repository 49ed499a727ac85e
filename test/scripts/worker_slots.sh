#!/usr/bin/env bash
# More databases than counter_ext.max_workers: the launcher runs as many
# workers as there are slots, says once in the log that more are needed, and
# gives a freed slot to a waiting database.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
trap ce_cluster_stop_all EXIT

fail() { echo "FAIL: $*"; exit 1; }
q() { ce_psql -d "$1" -At -c "$2"; }
workers() { q postgres "SELECT coalesce(string_agg(datname, ',' ORDER BY datname), '') FROM pg_stat_activity
                        WHERE backend_type = 'counter_ext worker'"; }

ce_cluster_start slots "counter_ext.enabled = on" "counter_ext.naptime = 1" "counter_ext.max_workers = 1"
ce_cluster_use slots
for db in one two; do
    q postgres "CREATE DATABASE $db"
    q "$db" "CREATE EXTENSION counter_ext"
done
for i in $(seq 1 50); do [ -n "$(workers)" ] && break; sleep 0.2; done
sleep 3
first=$(workers)
case "$first" in one | two) ;; *) fail "expected one worker, got '$first'" ;; esac
grep -q "more databases need a worker than there are free slots" "$CE_slots_LOG" || fail "no log line about the missing slot"
[ "$(grep -c "more databases need a worker" "$CE_slots_LOG")" = 1 ] || fail "the log line repeats"
# Free the slot: the other database gets it.
other=$([ "$first" = one ] && echo two || echo one)
q "$first" "DROP EXTENSION counter_ext"
for i in $(seq 1 50); do [ "$(workers)" = "$other" ] && break; sleep 0.2; done
[ "$(workers)" = "$other" ] || fail "the freed slot did not go to $other (workers: $(workers))"
ce_scan_log "$CE_slots_LOG"
echo ok
