# Chroots with another PostgreSQL major, for the suite (test/versions.sh) and
# the package test (test/deb/build.sh, test/deb/test.sh). Source it; do not run it.
#
# A chroot is a debootstrap --variant=minbase of the Debian suite that ships
# the major, with that major's packages installed. It lives under
# CE_CHROOT_CACHE (default /var/cache/counter_ext-chroots), is made by the
# first run that needs it, reused by later runs on the same machine, and made
# again when it is missing or was left half-made. Each run works in a private
# mount namespace (unshare --mount), so the /proc and /dev/shm it mounts are
# its own, unmounted when it ends, and never seen by the machine or by
# another run using the same chroot at the same time. The machine's apt
# sources are only read (for the mirror), never changed.

CE_CHROOT_CACHE=${CE_CHROOT_CACHE:-/var/cache/counter_ext-chroots}

# The Debian suite that ships a major.
ce_suite_of() {
    case $1 in
    15) echo bookworm ;;
    17) echo trixie ;;
    18) echo sid ;;
    *) return 1 ;;
    esac
}

# The Debian mirror this machine's own apt source uses (the URIs: line of a
# deb822 .sources file, or a sources.list line), skipping security archives.
ce_mirror() {
    local f uri
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        uri=$(awk 'BEGIN { RS = ""; FS = "\n" }
            /(^|\n)Types:[^\n]*deb([ \t\n]|$)/ && !/(^|\n)Enabled: *no/ {
                for (i = 1; i <= NF; i++) if ($i ~ /^URIs:/) { sub(/^URIs: */, "", $i); split($i, u, " ");
                    if (u[1] !~ /security/) { print u[1]; exit } } }' "$f")
        [ -n "$uri" ] && { echo "$uri"; return 0; }
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        uri=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) { if ($i !~ /security/) { print $i; exit } break } }' "$f")
        [ -n "$uri" ] && { echo "$uri"; return 0; }
    done
    return 1
}

# The security archive of this machine's apt sources (a URIs: or deb line
# naming "security"), empty when it has none.
ce_security_mirror() {
    local f
    for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        grep -hoE '^(URIs:[[:space:]]*|deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)[^[:space:]]*security[^[:space:]]*' "$f" |
            awk '{ print $NF; exit }' | grep . && return 0
    done
    return 0
}

# The packages a test chroot for MAJOR holds (clang-format stays out: the
# format check runs once, on the host).
ce_chroot_packages() {
    echo "postgresql-$1 postgresql-server-dev-$1 postgresql-$1-pgtap libtap-parser-sourcehandler-pgtap-perl" \
        "postgresql-$1-cron g++ make libboost-dev python3 procps iproute2 debhelper postgresql-server-dev-all"
}

# The chroots of the Debian packages (test/deb/): NAME SUITE PACKAGES..., as
# ce_chroot_ensure and ce_chroot_cached take them. The build's (17, 18; 15
# builds on the machine) is the suite's test chroot plus build-essential
# (dpkg-buildpackage wants it); the install test's is minbase plus
# postgresql-N only.
ce_deb_build_chroot() {
    local suite
    suite=$(ce_suite_of "$1") || return 1
    echo "pg$1-$suite-deb $suite $(ce_chroot_packages "$1") build-essential"
}
ce_deb_test_chroot() {
    local suite
    suite=$(ce_suite_of "$1") || return 1
    echo "clean-pg$1-$suite $suite postgresql-$1"
}

# ce_in_chroot DIR COMMAND...: runs COMMAND (as root) inside the chroot DIR,
# in a mount namespace of its own with /proc and /dev/shm mounted.
ce_in_chroot() {
    local dir=$1; shift
    unshare --mount --propagation private -- /bin/bash -c '
        dir=$1; shift
        trap "umount \"$dir/dev/shm\" 2>/dev/null; umount \"$dir/proc\" 2>/dev/null" EXIT
        mount -t proc proc "$dir/proc" || exit 1
        mkdir -p "$dir/dev/shm" && mount -t tmpfs -o mode=1777 shm "$dir/dev/shm" || exit 1
        chroot "$dir" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
            DEBIAN_FRONTEND=noninteractive "$@"
    ' ce_in_chroot "$dir" "$@"
}

# ce_chroot_make DIR SUITE PACKAGES...: a fresh minbase chroot of SUITE with
# PACKAGES installed, no cluster created and no service started in it.
ce_chroot_make() {
    local dir=$1 suite=$2; shift 2
    local mirror
    mirror=$(ce_mirror) || { ce_log "no Debian mirror found in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list"; return 1; }
    command -v debootstrap >/dev/null || ce_require_packages debootstrap || return 1
    rm -rf "$dir" && mkdir -p "$(dirname "$dir")" || return 1
    ce_log "making a $suite chroot in $dir from $mirror"
    if ! debootstrap --variant=minbase "$suite" "$dir" "$mirror" >"$dir.debootstrap.log" 2>&1; then
        tail -20 "$dir.debootstrap.log" >&2
        ce_log "debootstrap of $suite from $mirror failed (log: $dir.debootstrap.log): is the archive reachable?"
        return 1
    fi
    rm -f "$dir.debootstrap.log"
    # A released suite gets its point-release updates and security fixes, as
    # an installed machine would (PostgreSQL minors come through them).
    if [ "$suite" != sid ]; then
        local security
        security=$(ce_security_mirror)
        {
            echo "deb $mirror $suite main"
            echo "deb $mirror $suite-updates main"
            [ -n "$security" ] && echo "deb $security $suite-security main"
        } >"$dir/etc/apt/sources.list"
    fi
    # sid's Release files may carry a Valid-Until that a mirror snapshot has
    # passed; the chroot's apt only (the machine's apt is left alone).
    echo 'Acquire::Check-Valid-Until "false";' >"$dir/etc/apt/apt.conf.d/99counter-ext"
    # No daemon starts inside (a cluster there would take the machine's 5432).
    printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d" && chmod 755 "$dir/usr/sbin/policy-rc.d"
    mkdir -p "$dir/etc/postgresql-common"
    echo "create_main_cluster = false" >"$dir/etc/postgresql-common/createcluster.conf"
    if ! ce_in_chroot "$dir" apt-get update -q >"$dir.apt.log" 2>&1 ||
        ! ce_in_chroot "$dir" apt-get install -y -q --no-install-recommends \
            -o Dpkg::Options::=--force-confold "$@" >>"$dir.apt.log" 2>&1; then
        tail -20 "$dir.apt.log" >&2
        ce_log "installing $* into the $suite chroot failed (log: $dir.apt.log):"
        ce_log "is each package in Debian $suite (apt-cache policy inside the chroot) and the archive reachable?"
        return 1
    fi
    rm -f "$dir.apt.log"
    ce_in_chroot "$dir" apt-get clean >/dev/null 2>&1
}

# ce_chroot_cached NAME SUITE PACKAGES...: true when the cached chroot NAME
# is complete and holds exactly SUITE with PACKAGES (ce_chroot_ensure would
# use it as it is, without making it).
ce_chroot_cached() {
    local name=$1 suite=$2; shift 2
    local dir=$CE_CHROOT_CACHE/$name
    [ -f "$dir/.counter_ext-ready" ] && [ "$(cat "$dir/.counter_ext-ready")" = "$suite (with updates) $*" ]
}

# ce_chroot_ensure NAME SUITE PACKAGES...: prints the directory of the cached
# chroot NAME, making it first when it is missing, half-made, or holds another
# package list. One maker at a time per chroot (flock).
ce_chroot_ensure() {
    local name=$1 suite=$2; shift 2
    local dir=$CE_CHROOT_CACHE/$name want="$suite (with updates) $*"
    mkdir -p "$CE_CHROOT_CACHE" || return 1
    (
        flock 9 || exit 1
        ce_chroot_cached "$name" "$suite" "$@" && exit 0
        start=$SECONDS
        ce_chroot_make "$dir.new" "$suite" "$@" || { rm -rf "$dir.new"; exit 1; }
        echo "$want" >"$dir.new/.counter_ext-ready"
        rm -rf "$dir" && mv "$dir.new" "$dir" || exit 1
        ce_log "chroot $name made in $((SECONDS - start)) s"
    ) 9>"$CE_CHROOT_CACHE/$name.lock" || return 1
    echo "$dir"
}

# ce_copy_tree DEST: this checkout as it is (committed or not, untracked files
# included, ignored build products left out) copied to DEST.
ce_copy_tree() {
    mkdir -p "$1" || return 1
    if git -C "$CE_TOP" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        (cd "$CE_TOP" && git ls-files -z -co --exclude-standard | xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
            tar --null -T - -cf -) | tar -xf - -C "$1"
    else
        (cd "$CE_TOP" && tar --exclude=./build --exclude='*.o' --exclude='*.so' --exclude=.deps -cf - .) | tar -xf - -C "$1"
    fi
}

# ce_chroot_copy MAJOR: the test chroot of MAJOR (ce_chroot_ensure) and a copy
# of this tree (ce_copy_tree) in a fresh directory under its /tmp, for a
# script to run there (test/versions.sh, test/bench/majors.sh). Prints two
# lines: the chroot's directory, then the copy's (inside the chroot it is the
# copy's path without the chroot's prefix). The caller removes the copy.
ce_chroot_copy() {
    local suite dir work
    suite=$(ce_suite_of "$1") || return 1
    # shellcheck disable=SC2046
    dir=$(ce_chroot_ensure "pg$1-$suite" "$suite" $(ce_chroot_packages "$1")) || return 1
    work=$(mktemp -d "$dir/tmp/counter_ext.tree.XXXXXX") || return 1
    chmod 755 "$work"
    ce_copy_tree "$work" || { rm -rf "$work"; return 1; }
    printf '%s\n%s\n' "$dir" "$work"
}
