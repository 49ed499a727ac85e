#!/usr/bin/env bash
# A checkout in a folder only root can enter (mktemp -d is 0700, like root's
# home): `make test` and `make demo` work there, the folder keeps its mode,
# and the servers (run as postgres) use a stage outside it (test/lib.sh,
# ce_stage_reachable). The copy is this working tree with its build products,
# so nothing is compiled again; the inner `make test` runs one file only,
# the demo its first two sections.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
if ! ce_is_root; then
    echo "the servers run as ourselves, not as postgres: not applicable"
    exit 0
fi

home=$(mktemp -d) || exit 1
copy=$home/checkout
cleanup() {
    local where=$copy/build/stage.where
    if [ -f "$where" ]; then
        case $(cat "$where") in
        /var/tmp/counter_ext-stage.*) rm -rf "$(cat "$where")" ;;
        esac
    fi
    rm -rf "$home"
}
trap cleanup EXIT
mode_before=$(stat -c %a "$home")
[ "$mode_before" = 700 ] || { echo "mktemp -d gave mode $mode_before, expected 700"; exit 1; }
runuser -u postgres -- test -x "$home" 2>/dev/null && { echo "postgres can enter $home: not a real test"; exit 1; }

mkdir "$copy" && tar -C "$CE_TOP" --exclude=./build -cf - . | tar -C "$copy" -xf - || exit 1

# A fresh environment: nothing of the outer run's stage or cluster leaks in,
# nor its make's variables (CI's `make test PG=all` puts PG=all in the
# environment and in MAKEFLAGS: the inner run would test every major again).
clean_env=(env -u CE_STAGE -u CE_PGBIN -u CE_TOP -u PGHOST -u PGPORT -u PGUSER -u PGDATABASE
    -u CE_ONLY -u CE_main_PORT -u CE_main_DIR -u CE_main_LOG -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u PG)

out=$("${clean_env[@]}" CE_ONLY='^wall$' make -C "$copy" test 2>&1)
st=$?
echo "$out" | tail -5
[ $st -eq 0 ] || { echo "make test failed in a 0700 folder"; exit 1; }
# its last line: one major (this machine's), its two checks
[ "$(grep -v '^make\(\[[0-9]*\]\)\?: ' <<<"$out" | tail -n 1)" = "2 passed, 0 failed" ] || { echo "make test did not run its two checks on one major"; exit 1; }

# The demo's set-up, build and cluster, and its first two sections.
out=$("${clean_env[@]}" CE_DEMO_ONLY='^(00|10)_' make -C "$copy" demo 2>&1)
st=$?
echo "$out" | tail -2
[ $st -eq 0 ] || { echo "make demo failed in a 0700 folder"; exit 1; }
grep -q "demo finished" <<<"$out" || { echo "the demo did not finish"; exit 1; }

[ "$(stat -c %a "$home")" = 700 ] || { echo "the folder's mode changed to $(stat -c %a "$home")"; exit 1; }
stage=$(cat "$copy/build/stage.where" 2>/dev/null) || { echo "no build/stage.where"; exit 1; }
[ "$(stat -c %U:%a "$stage")" = root:755 ] || { echo "stage $stage is $(stat -c %U:%a "$stage")"; exit 1; }
echo ok
