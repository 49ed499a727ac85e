#!/usr/bin/env bash
# The demo: installs what is missing, builds, installs, starts a throwaway
# cluster and shows counter_ext at work on a generated click stream, one
# section per feature (test/demo/NN_*.sql, run in name order).
set -uo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
trap ce_cluster_stop_all EXIT INT TERM

ce_require_packages "${CE_TEST_PACKAGES[@]}" || exit 1
echo "building and installing counter_ext..."
ce_build_and_stage || exit 1
# The worker stays off until its own section, so the sections before it show
# their manual calls without the worker running their jobs in between.
ce_cluster_start demo "counter_ext.enabled = off" || exit 1
ce_cluster_use demo
"$CE_PGBIN/createdb" clicks || exit 1
export PGDATABASE=clicks

# CE_DEMO_ONLY=regex runs only the sections whose file name matches.
for section in test/demo/[0-9]*.sql; do
    [[ $(basename "$section") =~ ${CE_DEMO_ONLY:-.} ]] || continue
    echo
    echo "################################################################"
    sed -n 's/^-- Demo: //p' "$section" | sed 's/^/## /'
    echo "################################################################"
    "$CE_PGBIN/psql" -X -v ON_ERROR_STOP=1 --echo-queries -P pager=off -f "$section" || {
        echo "demo section $section failed"
        exit 1
    }
done
echo
echo "demo finished: the cluster is thrown away now."
