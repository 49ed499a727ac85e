#!/usr/bin/env bash
# make deb [PG=15|17|18|all]: Debian packages postgresql-N-counter-ext from
# this tree (as it is), with debian/ (pg_buildext, pgxs_loop), into
# build/deb/. No PG builds for the machine's own majors (Debian 12: 15);
# 17 and 18 are built in cached chroots (test/chroot.sh: the suite's test
# chroot plus build-essential, pgN-SUITE-deb), where debian/pgversions meets
# that suite's PostgreSQL. Prints the .deb files.
set -uo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
source test/chroot.sh

out=$CE_TOP/build/deb
majors=()
for v in "${@:-host}"; do
    case $v in
    host) majors+=(host) ;;
    all) majors+=(15 17 18) ;;
    15 | 17 | 18) majors+=("$v") ;;
    *) ce_die "PG=$v: packages are built for 15, 17, 18 or all" ;;
    esac
done
mkdir -p "$out"

# build_here SRC: debian/control for the PostgreSQL majors present, then the
# binary packages, next to SRC (run on the host or inside a chroot). Each
# package depends on at least the server release it was compiled against
# (debian/minor_versions, which pg_buildext prefers to postgresql-common's
# list: that list can name a minor the suite does not have yet).
build_here() {
    cd "$1" || exit 1
    local v
    for v in $(pg_buildext supported-versions); do
        echo "$v $(dpkg-query -W -f='${Version}' "postgresql-server-dev-$v" | sed 's/-[^-]*$//')"
    done >debian/minor_versions
    pg_buildext updatecontrol && dpkg-buildpackage -us -uc -b >../build.log 2>&1 ||
        { tail -40 ../build.log >&2; exit 1; }
}

for major in "${majors[@]}"; do
    if [ "$major" = host ] || [ "$major" = 15 ]; then
        ce_require_packages debhelper postgresql-server-dev-all libboost-dev g++ make || exit 1
        work=$(mktemp -d "${TMPDIR:-/tmp}/counter_ext.deb.XXXXXX") || exit 1
        ce_copy_tree "$work/src" || exit 1
        (build_here "$work/src") || { rm -rf "$work"; ce_die "the package build failed (log above)"; }
        pattern='postgresql-*-counter-ext_*.deb'
        [ "$major" = 15 ] && pattern='postgresql-15-counter-ext_*.deb'
        found=$(cd "$work" && ls $pattern 2>/dev/null | sed "s|^|$work/|") || true
    else
        # shellcheck disable=SC2046
        dir=$(ce_chroot_ensure $(ce_deb_build_chroot "$major")) || exit 1
        work=$(mktemp -d "$dir/tmp/counter_ext.deb.XXXXXX") || exit 1
        ce_copy_tree "$work/src" || exit 1
        ce_in_chroot "$dir" /bin/bash -c "$(declare -f build_here); build_here \"\$1\"" build "${work#"$dir"}/src" ||
            { rm -rf "$work"; ce_die "the package build for PostgreSQL $major failed (log above)"; }
        found=$(ls "$work"/postgresql-"$major"-counter-ext_*.deb 2>/dev/null) || true
    fi
    [ -n "$found" ] || { rm -rf "$work"; ce_die "no package was built (PG=$major)"; }
    for f in $found; do cp "$f" "$out/" && echo "$out/$(basename "$f")"; done
    rm -rf "$work"
done
