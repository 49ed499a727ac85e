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
for v in "$@"; do
    case $v in
    all) majors+=("${CE_SUPPORTED_TESTED[@]}") ;;
    15 | 17 | 18) majors+=("$v") ;;
    16) ce_die "PostgreSQL 16 builds but no Debian suite ships it, so it cannot be tested here (doc/support.md); PG= takes 15, 17, 18 or all" ;;
    *) ce_die "PG=$v: the suite runs on PostgreSQL 15, 17 and 18; PG= takes 15, 17, 18 or all" ;;
    esac
done
[ ${#majors[@]} -gt 0 ] || ce_die "usage: test/versions.sh 15|17|18|all ..."
ce_is_root || ce_die "PG=${majors[*]} needs root (debootstrap, chroot, mount); as another user only 'make test' (PostgreSQL 15) runs"

summary=()
total_passed=0
total_failed=0

# run_one MAJOR: the suite on MAJOR; sets last to its last output line.
run_one() {
    local major=$1 log=$CE_TOP/build/versions-pg$1.log
    mkdir -p "$CE_TOP/build"
    local start=$SECONDS
    echo "=== PostgreSQL $major"
    if [ "$major" = 15 ]; then
        CE_PG_MAJOR=15 bash test/run.sh 2>&1 | tee "$log"
    else
        run_in_chroot "$major" 2>&1 | tee "$log"
    fi
    last=$(tail -n 1 "$log")
    elapsed=$((SECONDS - start))
}

run_in_chroot() {
    local major=$1 suite dir work rc
    suite=$(ce_suite_of "$major")
    # shellcheck disable=SC2046
    dir=$(ce_chroot_ensure "pg$major-$suite" "$suite" $(ce_chroot_packages "$major")) || {
        echo "0 passed, 1 failed"
        return 1
    }
    work=$(mktemp -d "$dir/tmp/counter_ext.tree.XXXXXX") || return 1
    chmod 755 "$work"
    ce_copy_tree "$work" || { echo "0 passed, 1 failed"; return 1; }
    local inner=${work#"$dir"}
    ce_in_chroot "$dir" /bin/bash -c 'cd "$1" && CE_PG_MAJOR=$2 CE_SKIP_FORMAT=1 CE_ONLY=$3 CE_KEEP_LOGS=$4 bash test/run.sh' \
        run "$inner" "$major" "${CE_ONLY:-.}" "${CE_KEEP_LOGS:+$inner/build/kept-logs}"
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
    summary+=("PostgreSQL $major: $p passed, $f failed ($elapsed s)")
done

echo "==="
for line in "${summary[@]}"; do echo "$line"; done
echo "$total_passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]
