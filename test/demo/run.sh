#!/usr/bin/env bash
# The demo: installs what is missing, builds, installs, starts a throwaway
# cluster and shows counter_ext at work on a generated click stream, one
# section per feature (test/demo/NN_*.sql, run in name order).
#
# The sections named NN_*_citus.sql run last, on a Citus cluster of three
# nodes on this machine (a coordinator and two workers, test/citus.sh), when
# Citus is installed for this PostgreSQL or can be built (once, then cached)
# from a source tarball: CITUS_SRC, or the vendored one beside the repository
# (../shared/vendor, as for the tests). Without either, one line says why
# they were skipped.
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

# run_section FILE [PSQL OPTION...]: its title, then its statements echoed
# with their results.
run_section() {
    local section=$1
    shift
    echo
    echo "################################################################"
    sed -n 's/^-- Demo: //p' "$section" | sed 's/^/## /'
    echo "################################################################"
    "$CE_PGBIN/psql" -X -v ON_ERROR_STOP=1 --echo-queries -P pager=off "$@" -f "$section" || {
        echo "demo section $section failed"
        exit 1
    }
}

# CE_DEMO_ONLY=regex runs only the sections whose file name matches.
ce_demo_sections sections citus_sections "${CE_DEMO_ONLY:-.}"
for section in "${sections[@]}"; do
    run_section "$section"
done

if [ ${#citus_sections[@]} -gt 0 ]; then
    source test/citus.sh
    citus_for "$CE_PG_MAJOR"
    CITUS_SRC=${CITUS_SRC:-$citus_src} CITUS_PATCH=${CITUS_PATCH:-$citus_patch} CE_CITUS_WHY_NOT=$citus_why
    echo
    echo "preparing Citus for the Citus sections (a build from source takes minutes the first time, then is cached)..."
    st=0
    ce_citus_ready || st=$?
    if [ $st -eq 77 ]; then
        echo "## the Citus sections were skipped: $CE_CITUS_SKIP"
    elif [ $st -ne 0 ]; then
        exit 1
    else
        CE_CITUS_DB=clicks ce_citus_cluster_start >/dev/null || exit 1
        for section in "${citus_sections[@]}"; do
            run_section "$section" -h 127.0.0.1 -p "$CE_citus_coord_PORT" -d clicks \
                -v coordinator="$CE_citus_coord_PORT" -v worker_1="$CE_citus_w1_PORT"
        done
    fi
fi
echo
echo "demo finished: the clusters are thrown away now."
