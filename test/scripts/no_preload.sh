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
ce_psql -c "SET counter_ext.node_id = 'site-a.1'"
if ce_psql -c "LOAD 'counter_ext'" -c "SET counter_ext.node_id = 'bad id!'" 2>/dev/null; then
    echo "a bad node id was accepted"; exit 1
fi
ce_scan_log "$CE_plain_LOG"
echo ok
