#!/usr/bin/env bash
# make deb-test [PG=15|17|18|all]: installs the built package
# (build/deb/postgresql-N-counter-ext_*.deb; built first when missing) into
# a clean chroot of the suite that ships PostgreSQL N (minbase plus
# postgresql-N only, cached in CE_CHROOT_CACHE and copied afresh for each
# run), starts a server there that preloads counter_ext, and runs
# test/deb/smoke.sql (CREATE EXTENSION, each feature once, the background
# worker running a job by itself). With the 15 package at hand, the 17
# server is also shown to refuse the 15 library (the magic block).
# Prints "ok" when every major passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
source test/chroot.sh

majors=()
for v in "${@:-15}"; do
    case $v in
    all) majors+=(15 17 18) ;;
    15 | 17 | 18) majors+=("$v") ;;
    *) ce_die "PG=$v: the package test runs on 15, 17, 18 or all" ;;
    esac
done
ce_is_root || ce_die "the package test needs root (debootstrap, chroot, dpkg)"

deb_of() { ls "$CE_TOP"/build/deb/postgresql-"$1"-counter-ext_*.deb 2>/dev/null | tail -n 1; }

# Runs inside the copy of the clean chroot, as root: install the package,
# then a preloaded server as postgres on a Unix socket only (the chroot
# shares the machine's network), the smoke test, and the magic-block check.
inside() {
    set -u
    major=$1 deb=$2 other_so=${3:-}
    apt-get install -y -q "$deb" >/tmp/install.log 2>&1 || { tail -20 /tmp/install.log; echo "installing $deb failed"; exit 1; }
    dpkg-query -W -f='${Package} ${Version} ${Status}\n' "postgresql-$major-counter-ext"
    bin=/usr/lib/postgresql/$major/bin
    mkdir -p /tmp/pg && chown postgres: /tmp/pg
    runuser -u postgres -- "$bin/initdb" -D /tmp/pg/data -A trust -E UTF8 --locale=C.UTF-8 --no-sync >/tmp/pg/initdb.log 2>&1 ||
        { cat /tmp/pg/initdb.log; exit 1; }
    cat >>/tmp/pg/data/postgresql.conf <<CONF
listen_addresses = ''
unix_socket_directories = '/tmp/pg'
shared_preload_libraries = 'counter_ext'
counter_ext.naptime = 1
fsync = off
lc_messages = 'C'
CONF
    runuser -u postgres -- "$bin/pg_ctl" -D /tmp/pg/data -l /tmp/pg/server.log -w start >/dev/null ||
        { cat /tmp/pg/server.log; exit 1; }
    st=0
    runuser -u postgres -- "$bin/createdb" -h /tmp/pg smoke &&
        runuser -u postgres -- "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h /tmp/pg -d smoke -f /tmp/smoke.sql 2>&1 || st=1
    if [ -n "$other_so" ]; then
        # Refused either by the dynamic loader (Debian links with -z now, so a
        # symbol the other major lacks fails the dlopen) or, when every symbol
        # resolves, by the magic block ("incompatible library ... version mismatch").
        if msg=$(runuser -u postgres -- "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h /tmp/pg -d smoke -c "LOAD '$other_so'" 2>&1); then
            echo "the server loaded another major's library"; st=1
        fi
        echo "LOAD of another major's library: $msg"
        grep -Eq "incompatible library .*version mismatch|could not load library" <<<"$msg" ||
            { echo "another major's library was not refused as expected"; st=1; }
    fi
    grep -E "terminated by signal|PANIC" /tmp/pg/server.log && st=1
    runuser -u postgres -- "$bin/pg_ctl" -D /tmp/pg/data -w -m fast stop >/dev/null
    exit $st
}

failed=0
for major in "${majors[@]}"; do
    start=$SECONDS
    echo "== package for PostgreSQL $major"
    deb=$(deb_of "$major")
    if [ -z "$deb" ]; then
        bash test/deb/build.sh "$major" >/dev/null || { failed=1; continue; }
        deb=$(deb_of "$major")
    fi
    # shellcheck disable=SC2046
    base=$(ce_chroot_ensure $(ce_deb_test_chroot "$major")) || { failed=1; continue; }
    run=$(mktemp -d "$CE_CHROOT_CACHE/run.XXXXXX") || exit 1
    cp -a "$base/." "$run/" || { rm -rf "$run"; failed=1; continue; }
    cp "$deb" "$run/tmp/" && cp test/deb/smoke.sql "$run/tmp/smoke.sql" && chmod a+r "$run/tmp/smoke.sql"
    other=""
    deb15=$(deb_of 15)
    if [ "$major" = 15 ]; then
        echo "another major's library: not tried on 15 (the 17 and 18 servers try the 15 library)"
    elif [ -z "$deb15" ]; then
        echo "another major's library: not tried (no build/deb/postgresql-15-counter-ext_*.deb: make deb PG=15 first)"
    else
        mkdir -p "$run/tmp/other" && dpkg-deb -x "$deb15" "$run/tmp/other" &&
            other=/tmp/other/usr/lib/postgresql/15/lib/counter_ext.so
    fi
    if ce_in_chroot "$run" /bin/bash -c "$(declare -f inside); inside \"\$@\"" inside "$major" "/tmp/$(basename "$deb")" "$other"; then
        echo "package for PostgreSQL $major ... ok ($((SECONDS - start)) s)"
    else
        echo "package for PostgreSQL $major ... FAILED ($((SECONDS - start)) s)"
        failed=1
    fi
    rm -rf "$run"
done
[ "$failed" -eq 0 ] && echo ok
