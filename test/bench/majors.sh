#!/usr/bin/env bash
# The benchmarks beside their anchors on several PostgreSQL majors in one run
# (issue 25): each page gets a row or a column per major, every ratio measured
# against that major's anchor in this run.
#
#   bash test/bench/majors.sh                  # hll and partition on 15, 17, 18
#   bash test/bench/majors.sh partition        # one of them
#   CE_BENCH_MAJORS="15 18" bash test/bench/majors.sh hll
#   bash test/bench/majors.sh tracked/run.sh   # any other test/bench script:
#       run on each major, its output kept (no page: those pages are written
#       by hand from the output)
#
# hll and partition write doc/bench/hll.md and doc/bench/partition.md (or
# CE_BENCH_PAGES/hll.md ...) from the raw results of every major, and only
# when every major's run passed its checks. Sizes and repetitions are the
# scripts' own (CE_BENCH_ROWS, CE_BENCH_REPS, CE_BENCH_ACC, CE_BENCH_RUNS,
# CE_BENCH_SECONDS, ...: every CE_BENCH_* variable, and the rollup script's
# EVENTS, LINKS, ROUNDS, HOT_LINKS, STEPS, reach every major).
#
# 15 runs on the machine as the script alone would; every other major runs
# the same script on a copy of this tree inside the chroot of the Debian
# suite that ships it (test/chroot.sh, as test/versions.sh runs the suite),
# whose own apt installs the anchors the script asks for (postgresql-N-hll,
# postgresql-N-partman, redis-server). Each run's output is kept in
# build/bench-majors/NAME-pgN.log, its raw results in build/bench-majors/raw/.
set -uo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
source test/chroot.sh

read -ra majors <<<"${CE_BENCH_MAJORS:-15 17 18}"
benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(hll partition)
pages=${CE_BENCH_PAGES:-doc/bench}
logs=$CE_TOP/build/bench-majors

for m in "${majors[@]}"; do
    [ "$m" = 15 ] || ce_suite_of "$m" >/dev/null || ce_die "no Debian suite ships PostgreSQL $m here: CE_BENCH_MAJORS takes 15, 17, 18"
done
[ "${majors[*]}" = 15 ] || ce_is_root || ce_die "PostgreSQL ${majors[*]} needs root (chroot, mount)"

# script_of BENCH: the script a name stands for (hll -> test/bench/hll/run.sh).
script_of() {
    case $1 in
    */*.sh) echo "test/bench/$1" ;;
    *) echo "test/bench/$1/run.sh" ;;
    esac
}
# Whether a benchmark keeps raw results and writes its page from several majors.
paged() { case $1 in hll | partition) return 0 ;; *) return 1 ;; esac; }
for b in "${benches[@]}"; do
    [ -f "$(script_of "$b")" ] || ce_die "no benchmark $b ($(script_of "$b") is not there)"
done

# The settings that reach every major's run, as NAME=VALUE words.
passed_env() {
    local v
    for v in $(compgen -e | grep -E '^(CE_BENCH_[A-Z_]+|EVENTS|LINKS|ROUNDS|HOT_LINKS|STEPS)$'); do
        case $v in CE_BENCH_RAW | CE_BENCH_REPORT | CE_BENCH_OUT | CE_BENCH_PAGES | CE_BENCH_MAJORS) continue ;; esac
        printf '%s=%s\0' "$v" "${!v}"
    done
}

# run_one BENCH MAJOR RAW: the script on MAJOR, raw results (when it keeps
# them) to RAW.
run_one() {
    local bench=$1 major=$2 raw=$3 script dir='' work='' rc
    script=$(script_of "$bench")
    local -a envs=()
    mapfile -d '' envs < <(passed_env)
    paged "$bench" && envs+=("CE_BENCH_RAW=@RAW@")
    if [ "$major" = 15 ]; then
        env "${envs[@]//@RAW@/$raw}" CE_PG_MAJOR=15 bash "$script"
        return
    fi
    { read -r dir && read -r work; } < <(ce_chroot_copy "$major")
    [ -n "$work" ] || return 1
    local inner=${work#"$dir"}
    ce_in_chroot "$dir" /usr/bin/env "${envs[@]//@RAW@/$inner/build/bench-raw}" CE_PG_MAJOR="$major" \
        /bin/bash -c 'cd "$1" && exec bash "$2"' run "$inner" "$script"
    rc=$?
    if [ $rc -eq 0 ] && paged "$bench"; then
        rm -rf "$raw" && mkdir -p "$(dirname "$raw")" && cp -a "$work/build/bench-raw" "$raw" || rc=1
    fi
    rm -rf "$work"
    return $rc
}

mkdir -p "$logs"
# The commit the pages name (the chroots' copies of the tree have no .git).
CE_BENCH_GIT=${CE_BENCH_GIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export CE_BENCH_GIT
failed=()
start=$SECONDS
for bench in "${benches[@]}"; do
    name=${bench%.sh}
    name=${name//\//-}
    raws=()
    ok=1
    for major in "${majors[@]}"; do
        raw=$logs/raw/$name-pg$major
        log=$logs/$name-pg$major.log
        echo "=== $bench on PostgreSQL $major (output: $log)"
        t0=$SECONDS
        rm -rf "$raw"
        run_one "$bench" "$major" "$raw" 2>&1 | tee "$log"
        rc=${PIPESTATUS[0]}
        echo "=== $bench on PostgreSQL $major: $([ $rc -eq 0 ] && echo passed || echo FAILED) in $((SECONDS - t0)) s"
        [ $rc -eq 0 ] || { ok=0; failed+=("$bench on $major"); }
        raws+=("$raw")
    done
    if paged "$bench"; then
        if [ $ok = 1 ]; then
            CE_BENCH_REPORT="${raws[*]}" CE_BENCH_OUT="$pages/$bench.md" bash "$(script_of "$bench")" >/dev/null &&
                echo "=== wrote $pages/$bench.md (PostgreSQL ${majors[*]})" || failed+=("$bench page")
        else
            echo "=== $pages/$bench.md left as it was: a major failed"
        fi
    fi
done
echo "=== ${#failed[@]} failed${failed:+: ${failed[*]}} ($((SECONDS - start)) s)"
[ ${#failed[@]} -eq 0 ]
