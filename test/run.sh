#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs what is
# missing, builds, installs, starts a throwaway preloaded cluster and runs
#   format check, pg_regress (sql/ + expected/), isolation specs
#   (test/isolation/specs/), pgTAP files (test/pgtap/) with pg_prove and
#   script tests (test/scripts/*.sh: concurrency, crashes, several clusters),
# then scans the server logs for crashes. Last line: "N passed, N failed".
#
# Environment: CE_ONLY=regex runs only the test files whose name matches;
# CE_KEEP_LOGS=dir keeps the server logs there; CITUS_SRC (and CITUS_PATCH)
# give a Citus source tarball for the test/scripts/citus_*.sh tests when
# Citus is not installed (test/citus.sh); without either they are skipped
# with one line saying why, and not counted as passed.
set -uo pipefail
cd "$(dirname "$0")/.."
source test/lib.sh

passed=0
failed=0
failures=()
skip_line=  # tests not run, and why: printed, never counted as passed
out=$CE_TOP/build/test-output
only=${CE_ONLY:-.}

finish() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "${side_pid:-}" ]; then kill "$side_pid" 2>/dev/null; wait "$side_pid" 2>/dev/null; fi
    ce_cluster_stop_all
    if [ ${#failures[@]} -gt 0 ]; then
        echo "failed: ${failures[*]}"
    fi
    [ -n "$skip_line" ] && echo "$skip_line"
    echo "$passed passed, $failed failed"
    if [ "$failed" -gt 0 ] || [ "$rc" -ne 0 ]; then exit 1; fi
    exit 0
}
trap finish EXIT
trap 'echo "interrupted"; failed=$((failed + 1)); exit 130' INT TERM

record() { # record NAME STATUS
    if [ "$2" -eq 0 ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        failures+=("$1")
    fi
}

wanted() { [[ $1 =~ $only ]]; }

echo "== set-up"
if ! ce_require_packages "${CE_TEST_PACKAGES[@]}"; then
    record setup 1
    exit 1
fi
if ! ce_build_and_stage; then
    record build 1
    exit 1
fi
rm -rf "$out" && mkdir -p "$out"
[ -w "$out" ] && ce_is_root && chmod 777 "$out"

if [ -n "${CE_SKIP_FORMAT:-}" ]; then
    echo "== format check: not here (it runs once, on the host)"
elif wanted format-check; then
    echo "== format check"
    make -s format-check >"$out/format.txt" 2>&1
    st=$?
    [ $st -ne 0 ] && head -40 "$out/format.txt"
    echo "format-check ... $([ $st -eq 0 ] && echo ok || echo FAILED)"
    record format-check $st
fi

if ! ce_cluster_start main "counter_ext.enabled = off"; then  # tests that want the worker start their own cluster
    record cluster-start 1
    exit 1
fi
ce_cluster_use main
export CE_main_PORT CE_main_DIR CE_main_LOG

regress_tests=()
for f in sql/*.sql; do
    [ -e "$f" ] || continue
    t=$(basename "$f" .sql)
    wanted "$t" && regress_tests+=("$t")
done
# run_regress KIND TOOL INPUTDIR TEST: one pg_regress-style file in a fresh
# database of its own (the file creates what it needs).
run_regress() {
    local kind=$1 tool=$2 inputdir=$3 t=$4
    local db="${kind}_$t"
    mkdir -p "$out/$kind"
    "$CE_PGBIN/dropdb" --if-exists "$db" >/dev/null 2>&1
    "$CE_PGBIN/createdb" "$db"
    "$tool" --use-existing --host=$PGHOST --port=$PGPORT --user=$PGUSER --bindir="$CE_PGBIN" \
        --inputdir="$inputdir" --outputdir="$out/$kind/$t" --dbname="$db" "$t" >"$out/$kind-$t.txt" 2>&1
    # pg_regress's line per test: "test NAME ... ok" on 15, TAP since 16
    # ("ok 1 - NAME 12 ms", "not ok 1 - NAME").
    local line="^((test )?[[:space:]]*$t[[:space:]]+\.\.\. |(not )?ok [0-9]+[[:space:]]+[-+][[:space:]]+$t([[:space:]]|$))"
    if grep -Eq "^(test )?[[:space:]]*$t[[:space:]]+\.\.\. ok|^ok [0-9]+[[:space:]]+[-+][[:space:]]+$t([[:space:]]|$)" \
        "$out/$kind-$t.txt"; then
        grep -E "$line" "$out/$kind-$t.txt"
        record "$kind/$t" 0
    else
        grep -E "$line" "$out/$kind-$t.txt" || cat "$out/$kind-$t.txt"
        [ -f "$out/$kind/$t/regression.diffs" ] && head -150 "$out/$kind/$t/regression.diffs"
        record "$kind/$t" 1
    fi
}

if [ ${#regress_tests[@]} -gt 0 ]; then
    echo "== pg_regress"
    for t in "${regress_tests[@]}"; do
        run_regress regress "$CE_PGXS_DIR/src/test/regress/pg_regress" . "$t"
    done
fi

iso_tests=()
not_run=()
for f in test/isolation/specs/*.spec; do
    [ -e "$f" ] || continue
    t=$(basename "$f" .spec)
    wanted "$t" && iso_tests+=("$t")
done
for n in "${not_run[@]}"; do echo "not run: $n"; done
# Autovacuum off while the specs run: an ANALYZE takes a transaction id,
# and any transaction id held open holds back the xmin of a spec's
# snapshots (tracked_read_cache's reads are then not kept: seen once).
# autovacuum_set SQL: ALTER SYSTEM SQL on the main cluster, then a reload.
autovacuum_set() {
    ce_psql -d postgres -c "ALTER SYSTEM $1" -c "SELECT pg_catalog.pg_reload_conf()" >/dev/null
}
if [ ${#iso_tests[@]} -gt 0 ]; then
    echo "== isolation"
    autovacuum_set 'SET autovacuum = off'
    for t in "${iso_tests[@]}"; do
        run_regress isolation "$CE_PGXS_DIR/src/test/isolation/pg_isolation_regress" test/isolation "$t"
    done
    autovacuum_set 'RESET autovacuum'
fi

tap_files=()
for f in test/pgtap/*.sql; do
    [ -e "$f" ] || continue
    wanted "$(basename "$f" .sql)" && tap_files+=("$f")
done
if [ ${#tap_files[@]} -gt 0 ]; then
    echo "== pgTAP"
    for f in "${tap_files[@]}"; do
        t=$(basename "$f" .sql)
        db="tap_$t"
        "$CE_PGBIN/dropdb" --if-exists "$db" >/dev/null 2>&1
        "$CE_PGBIN/createdb" "$db" &&
            ce_psql -d "$db" -c "CREATE EXTENSION pgtap; CREATE EXTENSION counter_ext;" >/dev/null &&
            timeout 900 pg_prove -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d "$db" "$f" >"$out/pgtap-$t.txt" 2>&1
        st=$?
        if [ $st -eq 0 ]; then
            echo "$f ... ok"
        else
            echo "$f ... FAILED"
            tail -40 "$out/pgtap-$t.txt"
        fi
        record "pgtap/$t" $st
    done
fi

script_files=()
citus_names=()
for f in test/scripts/*.sh; do
    [ -e "$f" ] || continue
    t=$(basename "$f" .sh)
    wanted "$t" || continue
    [[ $t == citus_* ]] && citus_names+=("$t")
    script_files+=("$f")
done
# The Citus scripts need Citus (installed, or built once from CITUS_SRC:
# test/citus.sh). Without it they are skipped, with one line saying why.
if [ ${#citus_names[@]} -gt 0 ]; then
    source test/citus.sh
    st=0
    ce_citus_ready || st=$?
    if [ $st -eq 0 ] && [ -n "${CE_CITUS_SMOKE:-}" ]; then
        # (test/versions.sh, PG=all) on this major the Citus scripts marked
        # "# citus: smoke", and, when CE_CITUS_SMOKE names this major (not
        # 1), those whose "# citus: whole on" line names it or that have no
        # such line; the others are named as not run
        kept=()
        left=()
        for f in "${script_files[@]}"; do
            if [[ $(basename "$f") != citus_* ]] || grep -qx '# citus: smoke' "$f" ||
                { [ "$CE_CITUS_SMOKE" != 1 ] &&
                    { ! grep -q '^# citus: whole on ' "$f" ||
                        grep -qE "^# citus: whole on( [0-9]+)* $CE_CITUS_SMOKE( |\$)" "$f"; }; }; then
                kept+=("$f")
            else
                left+=("$(basename "$f" .sh)")
            fi
        done
        script_files=("${kept[@]}")
        [ ${#left[@]} -gt 0 ] &&
            skip_line="skipped (not counted as passed): ${left[*]}: with PG=all the Citus scripts run whole on PostgreSQL 15 (Citus 13) or 18 (Citus 14), as their '# citus: whole on' line says, and their smoke set on every major (test/versions.sh)"
    fi
    if [ $st -ne 0 ]; then
        kept=()
        for f in "${script_files[@]}"; do [[ $(basename "$f") == citus_* ]] || kept+=("$f"); done
        script_files=("${kept[@]}")
        if [ $st -eq 77 ]; then
            skip_line="skipped (not counted as passed): ${citus_names[*]}: $CE_CITUS_SKIP"
        else
            echo "the Citus tests fail"
            for t in "${citus_names[@]}"; do record "script/$t" 1; done
        fi
    fi
fi
# cpu_ticks: busy and total jiffies of the machine (/proc/stat);
# cpu_busy BEFORE: the percentage of the machine busy since BEFORE. Written
# to script-times.txt beside each script's seconds, to see which scripts
# wait and which compute.
cpu_ticks() { awk '/^cpu /{ print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9; exit }' /proc/stat; }
cpu_busy() {
    local b0 t0 b1 t1
    read -r b0 t0 <<<"$1"
    read -r b1 t1 <<<"$(cpu_ticks)"
    echo "$(((b1 - b0) * 100 / (t1 - t0 > 0 ? t1 - t0 : 1)))% busy"
}
# run_script FILE: one script test, under a 20-minute timeout; leaves its
# output in script-NAME.txt, its exit status in script-NAME.status and its
# seconds and the machine's busy share in script-times.txt.
run_script() {
    local f=$1 t st secs start=$SECONDS cpu_before
    t=$(basename "$f" .sh)
    cpu_before=$(cpu_ticks)
    timeout --signal=TERM --kill-after=30 1200 bash ${CE_TRACE:+-x} "$f" >"$out/script-$t.txt" 2>&1
    st=$?
    secs=$((SECONDS - start))
    echo "$t $secs $(cpu_busy "$cpu_before")" >>"$out/script-times.txt"
    echo "$st $secs" >"$out/script-$t.status"
}
# report FILE: prints and records the result run_script left.
report() {
    local f=$1 t st secs
    t=$(basename "$f" .sh)
    read -r st secs <"$out/script-$t.status"
    rm -f "$out/script-$t.status"
    # A script that runs nothing exits 77 and says why on "not run:"
    # lines; a script that ran only part says so on the same lines.
    if [ "$st" -eq 77 ]; then
        echo "$f ... not run ($secs s)"
        grep '^not run: ' "$out/script-$t.txt" | sed 's/^/    /'
        return
    elif [ "$st" -eq 0 ]; then
        echo "$f ... ok ($secs s)"
        grep '^not run: ' "$out/script-$t.txt" | sed 's/^/    /'
    else
        echo "$f ... FAILED (exit $st, $secs s)"
        tail -40 "$out/script-$t.txt"
    fi
    record "script/$t" "$st"
}
# Scripts that mostly wait (on a job schedule, on pg_cron's minute, on apt)
# and share nothing with the others (a cluster of their own, no staged
# script; package installations take turns, ce_require_packages) say so on a
# line "# lane: side" and run one after another beside the rest, which also
# run one after another (CE_SCRIPT_LANES=1: all in one lane). Results are
# printed as the scripts end.
side_files=()
main_files=()
for f in "${script_files[@]}"; do
    if [ "${CE_SCRIPT_LANES:-2}" != 1 ] && grep -qx '# lane: side' "$f"; then
        side_files+=("$f")
    else
        main_files+=("$f")
    fi
done
side_pid=
# report_side: reports the side lane's scripts that have ended, in order.
report_side() {
    while [ ${#side_files[@]} -gt 0 ] && [ -e "$out/script-$(basename "${side_files[0]}" .sh).status" ]; do
        report "${side_files[0]}"
        side_files=("${side_files[@]:1}")
    done
}
if [ ${#script_files[@]} -gt 0 ]; then
    echo "== scripts"
    : >"$out/script-times.txt"
    rm -f "$out"/script-*.status
    if [ ${#side_files[@]} -gt 0 ]; then
        (
            child=
            trap '[ -n "$child" ] && { pkill -TERM -P "$child"; wait "$child"; }; exit 130' TERM
            for f in "${side_files[@]}"; do
                run_script "$f" &
                child=$!
                wait "$child"
            done
        ) &
        side_pid=$!
    fi
    for f in "${main_files[@]}"; do
        run_script "$f"
        report "$f"
        report_side
    done
    if [ -n "$side_pid" ]; then
        wait "$side_pid"
        side_pid=
        report_side
        for f in "${side_files[@]}"; do
            echo "$f ... FAILED (it did not end)"
            record "script/$(basename "$f" .sh)" 1
        done
    fi
fi

echo "== server log"
if ce_scan_log "$CE_main_LOG"; then
    echo "no crash in the server log ... ok"
    record crash-scan 0
else
    record crash-scan 1
fi
