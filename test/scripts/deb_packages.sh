#!/usr/bin/env bash
# The Debian packages, built and installed, on every major whose chroots are
# cached: for each of 15, 17 and 18, `make deb PG=N` (test/deb/build.sh: 15
# on the machine, 17 and 18 in their build chroot) from this tree, then
# `make deb-test PG=N` (test/deb/test.sh: the package installed into a clean
# chroot with postgresql-N only, a server preloading counter_ext, every
# feature once with the worker: test/deb/smoke.sql; the 17 and 18 servers
# refuse the 15 library).
#
# It makes no chroot (a debootstrap takes minutes and the network): a major
# whose build or test chroot is not cached is not run, and says so (make deb
# PG=N and make deb-test PG=N make them). It runs once, from the machine:
# test/versions.sh runs test/run.sh on the machine for 15 and inside chroots
# for 17 and 18, where this script says it is not run. It needs root. When
# nothing runs it exits 77, which test/run.sh reports as "not run" with the
# reason, never as passed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source test/lib.sh
source test/chroot.sh

not_run() { echo "not run: $*"; }

# Inside one of the suite's chroots (test/chroot.sh marks each one's root
# with .counter_ext-ready), or any chroot that ischroot recognises.
if [ -f /.counter_ext-ready ] || ischroot 2>/dev/null; then
    not_run "inside a chroot (test/versions.sh runs 17 and 18 there); the run on the machine builds and tests the packages of every major"
    exit 77
fi
if ! ce_is_root; then
    not_run "the package build and test need root (chroot, dpkg); as another user they do not run"
    exit 77
fi

majors=()
for major in 15 17 18; do
    # shellcheck disable=SC2046
    if [ "$major" != 15 ] && ! ce_chroot_cached $(ce_deb_build_chroot "$major"); then
        read -r name _ <<<"$(ce_deb_build_chroot "$major")"
        not_run "PostgreSQL $major: build chroot $CE_CHROOT_CACHE/$name not cached (make deb PG=$major makes it)"
        continue
    fi
    # shellcheck disable=SC2046
    if ! ce_chroot_cached $(ce_deb_test_chroot "$major"); then
        read -r name _ <<<"$(ce_deb_test_chroot "$major")"
        not_run "PostgreSQL $major: test chroot $CE_CHROOT_CACHE/$name not cached (make deb-test PG=$major makes it)"
        continue
    fi
    majors+=("$major")
done
[ ${#majors[@]} -gt 0 ] || exit 77

# The 15 package is built even when its test chroot is missing: the 17 and
# 18 servers are shown to refuse its library. Packages of an earlier tree
# are removed first, so that what is tested is this tree.
# deb_scripts_complete MAJOR: the package holds the install script of the
# current version and one update script from every released version
# (src/sql/upgrade/releases), and no other script.
deb_scripts_complete() {
    local deb want have current
    deb=$(ls "$CE_TOP"/build/deb/postgresql-"$1"-counter-ext_*.deb) || return 1
    current=$(sed -n "s/^default_version = '\(.*\)'/\1/p" counter_ext.control)
    want=$( { echo "counter_ext--$current.sql"
              grep -v '^#' src/sql/upgrade/releases | awk -v c="$current" 'NF { print "counter_ext--" $1 "--" c ".sql" }'
            } | sort)
    have=$(dpkg-deb -c "$deb" | sed -n 's#.*/extension/\(counter_ext--.*\.sql\)$#\1#p' | sort)
    [ "$have" = "$want" ] && return 0
    echo "the package for PostgreSQL $1 holds the scripts"; echo "$have"; echo "instead of"; echo "$want"
    return 1
}

build=("${majors[@]}")
[ "${majors[0]}" = 15 ] || build=(15 "${majors[@]}")
failed=0
for major in "${build[@]}"; do
    start=$SECONDS
    rm -f "$CE_TOP"/build/deb/postgresql-"$major"-counter-ext_*.deb
    if bash test/deb/build.sh "$major" && deb_scripts_complete "$major"; then
        echo "package build for PostgreSQL $major ... ok ($((SECONDS - start)) s)"
    else
        echo "package build for PostgreSQL $major ... FAILED ($((SECONDS - start)) s)"
        failed=1
    fi
done
[ "$failed" -eq 0 ] || exit 1
bash test/deb/test.sh "${majors[@]}" || exit 1
echo "packages built and tested: PostgreSQL ${majors[*]}"
