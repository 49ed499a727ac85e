#!/usr/bin/env bash
# Without shared_preload_libraries, CREATE EXTENSION and the SQL features work;
# only the background worker needs the preload.
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
ce_scan_log "$CE_plain_LOG"
echo ok
