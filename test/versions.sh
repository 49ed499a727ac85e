#!/usr/bin/env bash
# The whole suite on several PostgreSQL majors: make test PG=17, PG=18,
# PG=15 or PG=all (15, 17 and 18).
#
# 15 is the machine's own (Debian 12) and runs test/run.sh as `make test`
# does. Every other major runs the same test/run.sh on a copy of this tree
# (as it is, uncommitted changes included) inside a chroot of the Debian
# suite that ships it (test/chroot.sh: trixie for 17, sid for 18), made on
# first use and cached in CE_CHROOT_CACHE (default
# /var/cache/counter_ext-chroots). The format check runs on the host only.
# Each run's test output is copied back to build/test-output-pgN.
#
# Last line: "N passed, N failed", summed over the majors, after one line
# per major. CE_ONLY and CE_KEEP_LOGS pass through.
set -uo pipefail
cd "$(dirname "$0")/.."
source test/lib.sh
source test/chroot.sh

CE_SUPPORTED_TESTED=(15 17 18)
majors=()
citus_smoke_majors=
citus_split=
for v in "$@"; do
    case $v in
    all)
        majors+=("${CE_SUPPORTED_TESTED[@]}")
        # The whole suite on every major, but of the Citus scripts (test/
        # run.sh): those marked "# citus: smoke" on every major; the others
        # on 15 (Citus 13) or 18 (Citus 14), the two Citus versions at the
        # two ends of the supported majors, as their "# citus: whole on"
        # line says (on both without one), and not on 17 (the same Citus 13
        # as on 15). CI's time is bounded: the heavy ones on both ends cost
        # it ~10 minutes (CI of session 60: 65.5 min). PG=15, PG=18 or
        # PG=17 alone runs them all, and so does CE_CITUS_SMOKE_MAJORS=
        # with PG=all.
        citus_smoke_majors=${CE_CITUS_SMOKE_MAJORS-17}
        citus_split=${CE_CITUS_SMOKE_MAJORS-split}
        ;;
    15 | 17 | 18) majors+=("$v") ;;
    16) ce_die "PostgreSQL 16 builds but no Debian suite ships it, so it cannot be tested here (doc/support.md); PG= takes 15, 17, 18 or all" ;;
    *) ce_die "PG=$v: the suite runs on PostgreSQL 15, 17 and 18; PG= takes 15, 17, 18 or all" ;;
    esac
done
[ ${#majors[@]} -gt 0 ] || ce_die "usage: test/versions.sh 15|17|18|all ..."
ce_is_root || ce_die "PG=${majors[*]} needs root (debootstrap, chroot, mount); as another user only 'make test' (PostgreSQL 15) runs"

# Citus for the test/scripts/citus_*.sh tests: the vendored tarballs
# (citus_for, test/citus.sh), built once per major into a cache and reused.
# A major with no tarball there runs without Citus: run.sh prints one line
# saying the Citus tests were skipped.
source test/citus.sh

summary=()
excerpts=()  # majors with failures
total_passed=0
total_failed=0

# run_one MAJOR: the suite on MAJOR; sets last to its last output line.
run_one() {
    local major=$1 log=$CE_TOP/build/versions-pg$1.log
    mkdir -p "$CE_TOP/build"
    local start=$SECONDS
    echo "=== PostgreSQL $major"
    citus_for "$major"
    if [ "$major" = 15 ]; then
        CE_PG_MAJOR=15 CITUS_SRC=${CITUS_SRC:-$citus_src} CITUS_PATCH=${CITUS_PATCH:-$citus_patch} \
            CE_CITUS_WHY_NOT=$citus_why CE_CITUS_SMOKE=$(citus_smoke 15) bash test/run.sh 2>&1 | tee "$log"
    else
        run_in_chroot "$major" 2>&1 | tee "$log"
    fi
    last=$(tail -n 1 "$log")
    elapsed=$((SECONDS - start))
}

# citus_smoke MAJOR: 1 when only the Citus smoke scripts run on MAJOR;
# MAJOR when those and the ones whole on MAJOR run (PG=all); else nothing
citus_smoke() {
    if [[ " $citus_smoke_majors " == *" $1 "* ]]; then
        echo 1
    elif [ -n "${citus_split:-}" ]; then
        echo "$1"
    fi
}

run_in_chroot() {
    local major=$1 dir='' work='' rc
    { read -r dir && read -r work; } < <(ce_chroot_copy "$major")
    [ -n "$work" ] || {
        echo "0 passed, 1 failed"
        return 1
    }
    local inner=${work#"$dir"} src= patch=
    # The Citus tarball (and patch) go in with the copy of the tree.
    if [ -n "$citus_src" ]; then
        mkdir -p "$work/build/citus-vendor" && cp "$citus_src" ${citus_patch:+"$citus_patch"} "$work/build/citus-vendor/" &&
            src=$inner/build/citus-vendor/$(basename "$citus_src") &&
            patch=${citus_patch:+$inner/build/citus-vendor/$(basename "$citus_patch")}
    fi
    # The install scripts of the released versions (test/scripts/upgrade.sh)
    # are built from git history here: the copy of the tree has none. A
    # failure leaves them out, and the upgrade test fails saying so.
    CE_PG_CONFIG=pg_config bash test/released_scripts.sh "$work/build/released-sql" ||
        rm -rf "$work/build/released-sql"
    # The 60 s writers-against-reconciliation stress (tracked_no_deadlock.sh)
    # runs whole on 15 and for 30 s on the other majors: the same code, and
    # CI's time is bounded (60 minutes for all three).
    ce_in_chroot "$dir" /bin/bash -c 'cd "$1" && CE_PG_MAJOR=$2 CE_SKIP_FORMAT=1 CE_ONLY=$3 CE_KEEP_LOGS=$4 \
        CITUS_SRC=$5 CITUS_PATCH=$6 CE_CITUS_WHY_NOT=$7 CE_RELEASED_SQL=$8 CE_DEADLOCK_SECONDS=$9 \
        CE_CITUS_SMOKE=${10} bash test/run.sh' \
        run "$inner" "$major" "${CE_ONLY:-.}" "${CE_KEEP_LOGS:+$inner/build/kept-logs}" "$src" "$patch" "$citus_why" \
        "$inner/build/released-sql" "${CE_DEADLOCK_SECONDS:-30}" "$(citus_smoke "$major")"
    rc=$?
    rm -rf "$CE_TOP/build/test-output-pg$major"
    cp -a "$work/build/test-output" "$CE_TOP/build/test-output-pg$major" 2>/dev/null
    if [ -n "${CE_KEEP_LOGS:-}" ] && [ -d "$work/build/kept-logs" ]; then
        mkdir -p "$CE_KEEP_LOGS/pg$major" && cp -a "$work/build/kept-logs/." "$CE_KEEP_LOGS/pg$major/"
    fi
    rm -rf "$work"
    return $rc
}

for major in "${majors[@]}"; do
    run_one "$major"
    if [[ $last =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
        p=${BASH_REMATCH[1]} f=${BASH_REMATCH[2]}
    else
        p=0 f=1
    fi
    total_passed=$((total_passed + p))
    total_failed=$((total_failed + f))
    skipped=$(grep -m1 '^skipped (not counted as passed): ' "$CE_TOP/build/versions-pg$major.log" | sed 's/^skipped (not counted as passed): //')
    failed_names=$(grep -m1 '^failed: ' "$CE_TOP/build/versions-pg$major.log" | sed 's/^failed: //')
    summary+=("PostgreSQL $major: $p passed, $f failed ($elapsed s)${failed_names:+; failed: $failed_names}${skipped:+; skipped: $skipped}")
    [ -n "$failed_names" ] && excerpts+=("$major")
done

# What failed, in a few lines each, just above the summary: a CI log that
# keeps only its tail still says which test failed and how.
for major in "${excerpts[@]}"; do
    echo "=== PostgreSQL $major: the failures' last lines (whole: build/versions-pg$major.log)"
    # each failure's line, then the last 12 lines of what follows it up to
    # the next test's line (a failed script's output ends with why)
    awk '/\.\.\. FAILED|^not ok|^test .* FAILED/ { if (n) flush(); print; n = 0; on = 1; next }
         on && /^(test\/|test |== |ok [0-9]+[ \t]+[-+][ \t]|no crash|failed: |[0-9]+ passed)/ { flush(); on = 0 }
         on { buf[++n] = $0 }
         function flush(  i) { for (i = (n > 12 ? n - 11 : 1); i <= n; i++) print "    " buf[i]; n = 0 }
         END { if (on) flush() }' "$CE_TOP/build/versions-pg$major.log" | tail -n 40
done
echo "==="
for line in "${summary[@]}"; do echo "$line"; done
echo "$total_passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]
