#!/usr/bin/env bash
# Without shared_preload_libraries, CREATE EXTENSION and the SQL features work;
# only the background worker and the buffer of buffered counters need the
# preload: a buffered counter then writes its adds directly, and says so.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
trap ce_cluster_stop_all EXIT
ce_cluster_start plain "shared_preload_libraries = ''"
ce_cluster_use plain
ce_psql -c "CREATE EXTENSION counter_ext"
[ "$(ce_psql -At -c "SELECT counter.preloaded()")" = f ]
[ "$(ce_psql -At -c "SELECT counter.version()")" = "$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$CE_TOP/counter_ext.control")" ]
# The prefix is reserved once the library is loaded: a misspelt setting fails.
if ce_psql -c "LOAD 'counter_ext'; SET counter_ext.no_such_setting = 1" 2>/dev/null; then
    echo "counter_ext.no_such_setting was accepted"; exit 1
fi
# The library loaded in the session (not at server start), its settings are
# checked: a good node id is taken and read back, a bad one refused.
[ "$(ce_psql -At -c "LOAD 'counter_ext'" -c "SET counter_ext.node_id = 'site-a.1'" -c "SHOW counter_ext.node_id" \
    | tail -1)" = site-a.1 ] || { echo "the node id was not taken"; exit 1; }
if ce_psql -c "LOAD 'counter_ext'" -c "SET counter_ext.node_id = 'bad id!'" 2>/dev/null; then
    echo "a bad node id was accepted"; exit 1
fi
# A tracked counter counts without the preload (the library loads on first use).
n=$(ce_psql -At <<'SQL'
CREATE TABLE ev (k int NOT NULL, t timestamptz NOT NULL);
SELECT FROM counter.track('ev', 'ev', 'k', 't');
INSERT INTO ev SELECT g % 3, now() FROM generate_series(1, 30) g;
SELECT counter.value('ev', 1);
SQL
)
[ "$(printf '%s\n' "$n" | tail -1)" = 10 ] || { echo "the counter did not count without the preload: $n"; exit 1; }
# A buffered counter without the shared table: registration warns, the
# first add of a session says so once, nothing is lost, counter.buffered
# shows preloaded = false, a flush has nothing to do.
out=$(ce_psql 2>&1 <<'SQL'
CREATE TABLE calls (api text NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON calls (at);
SELECT counter.track('calls', 'calls', 'api', 'at', mode => 'application', buffered => true) > 0;
SELECT counter.add('calls', 'search'::text);
SELECT counter.add('calls', 'search'::text);
BEGIN; SELECT counter.add('calls', 'search'::text); ROLLBACK;
SELECT 'value ' || counter.value('calls', 'search'::text);
SELECT 'flushed ' || counter.flush('calls');
SELECT 'preloaded ' || preloaded FROM counter.buffered;
SQL
)
grep -q "WARNING:  counter_ext is not loaded by shared_preload_libraries" <<<"$out" ||
    { echo "no warning at registration: $out"; exit 1; }
[ "$(echo "$out" | grep -c "NOTICE:  counter_ext is not loaded by shared_preload_libraries")" -eq 1 ] ||
    { echo "not one notice per session: $out"; exit 1; }
for want in "value 2" "flushed 0" "preloaded false"; do
    grep -q "$want" <<<"$out" || { echo "missing '$want': $out"; exit 1; }
done
id=$(ce_psql -At -c "SELECT counter_id FROM counter.tracked WHERE name = 'calls'")
[ "$(ce_psql -At -c "SELECT sum(delta) FROM counter_internal.tracked_${id}_delta")" = 2 ] ||
    { echo "the adds were not written directly"; exit 1; }
ce_scan_log "$CE_plain_LOG"
echo ok
