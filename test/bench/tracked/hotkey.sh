#!/usr/bin/env bash
# A hot buffered key against SELECT 1, at several client counts, durably, in
# one run (doc/bench/tracked.md, "A hot buffered key"). pgbench, interleaved
# rounds of $CE_BENCH_SECONDS s at each of $CE_BENCH_CLIENTS (default 8 32 64):
#   select_1      SELECT 1                                        (the ceiling)
#   add_hot       SELECT counter.add('appb', 1::bigint)           (one key)
#   select_zipf   SELECT :k::bigint, k drawn by pgbench as for add_zipf
#                 (the ceiling of add_zipf: pgbench's own cost of the draw)
#   add_zipf      the same add over 100,000 keys, random_zipfian(1.1)
#   add_hot_draw  add_hot after the same draw, its key left unused: what one
#                 key costs with pgbench's draw paid, so add_zipf / add_hot_draw
#                 is the many-keys cost alone (1.8; the default table's last
#                 column)
#   value_hot     SELECT counter.value('appb', 1::bigint)         (a buffered key)
#   value_tables  the same with counter_ext.read_cache = off: every read reads
#                 the tables (1.6's read)
#   add_zipf_held add_zipf with the flush job off during the run (the adds
#                 stay in shared memory; flushed, untimed, after it): not run
#                 unless named in CE_BENCH_RUNS (the runs, in order)
#   add_zipf_ff100  add_zipf on a second counter whose delta table is packed
#                 (fillfactor 100, as before 1.7): its flushes' updates find no
#                 room on their page (not HOT); only when named in CE_BENCH_RUNS
# Each add run's line says what the flush job took meanwhile (the sum of its
# runs' durations in counter.job_runs over the run's wall time, and the rows
# it wrote).
# counter_ext.buffer_entries is 262,144 (CE_BENCH_BUFFER_ENTRIES: 16384 is
# the default, whose owner's share of 3,104 keys 100,000 zipf keys overflow).
# The flush job runs every second as in production (CE_BENCH_FLUSH_INTERVAL,
# default 1s: counter_ext.flush_interval, the flush jobs' run_every). Prints the median tps,
# each run's ratio to SELECT 1 and the load average beside it: on a shared
# machine the absolute figures are loaded, the ratios less so. Afterwards
# every add is checked counted once (value = committed pgbench transactions).
# CE_BENCH_CPU=1: each run's line also says where the machine's CPU went from
# 2 s into the run to 3 s before its end (/proc, read twice): busy share of
# the 2 cores, pgbench, the client backends, and the server's own processes
# by kind, the short-lived ones (the job worker of each flush, autovacuum
# workers) counted when the postmaster reaps them.
# With it, the client backends' minor page faults per second (over the tps:
# per add): a backend maps a page of shared memory on its first touch of it,
# so adds to many keys may fault where one key's do not.
# CE_BENCH_HUGE_PAGES=1: the server runs with huge_pages = on, the machine's
# vm.nr_hugepages raised for it (CE_BENCH_HUGE_PAGES_COUNT 2 MB pages,
# default 1,000) and set back at the end.
# CE_BENCH_PERF=1: perf samples the whole machine (cpu-clock, a software
# event: this VM has no hardware counters) from 2 s into each run to 3 s
# before its end, and the run's line gives the 15 functions the postgres
# processes spent most samples in, with their shares of all postgres samples;
# CE_BENCH_PERF_SYMBOL=name adds the call chains that led to that function.
# CE_BENCH_WAITS=1: meanwhile a psql samples pg_stat_activity every 20 ms,
# and each run's line gives the share of pgbench's sessions' samples by wait
# (cpu: running; LWLock:counter_ext buffer: a partition of the shared table,
# ... stripes, ... shares; Client:ClientRead: waiting for pgbench).
#   bash test/bench/tracked/hotkey.sh       (~16 minutes: 3 rounds x 3 client counts x 7 runs x 15 s)
#   CE_BENCH_SECONDS=5 CE_BENCH_ROUNDS=1 bash test/bench/tracked/hotkey.sh   (a short check)
set -uo pipefail
cd "$(dirname "$0")/../../.."
source test/lib.sh
seconds=${CE_BENCH_SECONDS:-15}
rounds=${CE_BENCH_ROUNDS:-3}
read -r -a client_counts <<<"${CE_BENCH_CLIENTS:-8 32 64}"
mode=${CE_BENCH_PROTOCOL:-prepared}
work=$(mktemp -d)
chmod 755 "$work"
huge_before=
cleanup() {
    ce_cluster_stop_all
    [ -z "$huge_before" ] || echo "$huge_before" >/proc/sys/vm/nr_hugepages
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

ce_require_packages "${CE_TEST_PACKAGES[@]}" || exit 1
ce_build_and_stage || exit 1
huge="huge_pages = try"
if [ -n "${CE_BENCH_HUGE_PAGES:-}" ]; then
    huge_before=$(cat /proc/sys/vm/nr_hugepages)
    echo "${CE_BENCH_HUGE_PAGES_COUNT:-1000}" >/proc/sys/vm/nr_hugepages || exit 1
    huge="huge_pages = on"
fi
ce_cluster_start bench "$huge" "fsync = on" "synchronous_commit = on" "full_page_writes = on" \
    "shared_buffers = '512MB'" "max_wal_size = '4GB'" "checkpoint_timeout = '30min'" "max_connections = 200" \
    "counter_ext.buffer_entries = ${CE_BENCH_BUFFER_ENTRIES:-262144}" "counter_ext.naptime = 1" \
    "counter_ext.flush_interval = '${CE_BENCH_FLUSH_INTERVAL:-1s}'" || exit 1
ce_cluster_use bench
"$CE_PGBIN/createdb" bench || exit 1
export PGDATABASE=bench
ce_psql <<'SQL' || exit 1
CREATE EXTENSION counter_ext;
CREATE TABLE app (id bigserial PRIMARY KEY, link bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON app (at);
SELECT counter.track('appb', 'app', 'link', 'at', mode => 'application', buffered => true);
SELECT counter.track('appz', 'app', 'link', 'at', mode => 'application', buffered => true);
SELECT counter.track('appzp', 'app', 'link', 'at', mode => 'application', buffered => true);
SELECT format('ALTER TABLE counter_internal.tracked_%s_delta SET (fillfactor = 100)', counter_id)
FROM counter.tracked WHERE name = 'appzp' \gexec
UPDATE counter.jobs SET enabled = false WHERE kind = 'reconcile';
SQL

echo 'SELECT 1;' >"$work/select_1.sql"
echo "SELECT counter.add('appb', 1::bigint);" >"$work/add_hot.sql"
printf '%s\n%s\n' '\set k random_zipfian(1, 100000, 1.1)' "SELECT counter.add('appz', :k::bigint);" >"$work/add_zipf.sql"
printf '%s\n%s\n' '\set k random_zipfian(1, 100000, 1.1)' "SELECT :k::bigint;" >"$work/select_zipf.sql"
printf '%s\n%s\n' '\set k random_zipfian(1, 100000, 1.1)' "SELECT counter.add('appb', 1::bigint);" >"$work/add_hot_draw.sql"
echo "SELECT counter.value('appb', 1::bigint);" >"$work/value_hot.sql"
cp "$work/value_hot.sql" "$work/value_tables.sql"
cp "$work/add_zipf.sql" "$work/add_zipf_held.sql"
sed 's/appz/appzp/' "$work/add_zipf.sql" >"$work/add_zipf_ff100.sql"
read -r -a runs <<<"${CE_BENCH_RUNS:-select_1 add_hot select_zipf add_zipf add_hot_draw value_hot value_tables}"
# cpu.py POSTMASTER SECONDS: the CE_BENCH_CPU line (above)
cat >"$work/cpu.py" <<'PY'
import os, sys, time
pm, seconds = int(sys.argv[1]), float(sys.argv[2])
tick = os.sysconf("SC_CLK_TCK")

def read(path, mode="r"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:
        return None

def kind(pid):
    args = read(f"/proc/{pid}/cmdline", "rb")
    if args is None or not args.startswith(b"postgres: "):
        return None
    title = args.replace(b"\0", b" ").decode(errors="replace")[len("postgres: "):].strip()
    if "127.0.0.1(" in title or "[local]" in title:
        return "client backends"
    return title.split(" for database")[0].split(" bench")[0].strip()

def used(pid):  # (user + system ticks, children's when reaped, minor faults) or None
    stat = read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    f = stat[stat.rindex(")") + 2:].split()
    return int(f[11]) + int(f[12]), int(f[13]) + int(f[14]), int(f[7])

def snapshot(extra):
    cpu = {}
    for pid in [int(p) for p in (read(f"/proc/{pm}/task/{pm}/children") or "").split()] + extra:
        k, u = ("pgbench" if pid in extra else kind(pid)), used(pid)
        if k is not None and u is not None:
            cpu[pid] = (k, u[0], u[2])
    u = used(pm)
    cpu[pm], reaped = ("postmaster", u[0], u[2]), u[1]
    f = (read("/proc/stat") or "").split("\n")[0].split()[1:]
    return cpu, reaped, (sum(int(x) for x in f), int(f[3]) + int(f[4]))  # all, idle + iowait

time.sleep(2)  # pgbench connected
bench = [int(d) for d in os.listdir("/proc") if d.isdigit() and (read(f"/proc/{d}/comm") or "").strip() == "pgbench"]
(a, ra, ma), t0 = snapshot(bench), time.time()
time.sleep(max(seconds - 5, 1))  # before pgbench ends
(b, rb, mb), t1 = snapshot(bench), time.time()
wall = t1 - t0
by = {}
faults = 0
for pid, (k, u, mf) in b.items():
    by[k] = by.get(k, 0) + u - (a[pid][1] if pid in a and a[pid][0] == k else 0)
    if k == "client backends":
        faults += mf - (a[pid][2] if pid in a and a[pid][0] == k else 0)
by["exited (job workers, autovacuum workers)"] = rb - ra
if "pgbench" not in by or "client backends" not in by:
    print("                cpu: pgbench or its sessions not seen (a run too short for the samples)")
    sys.exit(0)
total, idle = mb[0] - ma[0], mb[1] - ma[1]
parts = ", ".join(f"{k} {100 * v / tick / wall:.1f}%" for k, v in sorted(by.items(), key=lambda x: -x[1]) if v > 0)
print(f"                cpu: machine busy {100 * (total - idle) / max(total, 1):.0f}%; of a core: {parts}")
print(f"                client backends' minor page faults: {faults / wall:.0f}/s")
PY

tps_of() { sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$1"; }
tx_of() { sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$1"; }
expect_hot=0
expect_zipf=0
expect_zipfp=0
run() { # run NAME CLIENTS
    local out="$work/$1.$2.out" t n since flush=
    local options=
    [ "$1" = value_tables ] && options="-c counter_ext.read_cache=off"
    # (counter.job_alter, not an UPDATE of counter.jobs: it tells the worker,
    # which otherwise learns of a job switched on at its next survey, up to
    # 30 naptimes later; the runs after this one had no flush until then)
    [ "$1" = add_zipf_held ] && ce_psql -q -c "SELECT counter.job_alter(job_id, enabled => false) FROM counter.jobs WHERE kind = 'flush'" >/dev/null
    since=$(ce_psql -At -c "SELECT pg_catalog.clock_timestamp()")
    if [ -n "${CE_BENCH_WAITS:-}" ]; then
        { echo "SELECT coalesce(wait_event_type || ':' || wait_event, 'cpu') FROM pg_catalog.pg_stat_activity
                WHERE application_name = 'pgbench' AND backend_type = 'client backend'"
          echo '\watch 0.02'; } | timeout "$((seconds - 1))" "$CE_PGBIN/psql" -X -At >"$out.waits" 2>/dev/null &
    fi
    [ -n "${CE_BENCH_CPU:-}" ] && python3 "$work/cpu.py" "$(head -1 "$CE_bench_DIR/data/postmaster.pid")" "$seconds" \
        >"$out.cpu" &
    [ -n "${CE_BENCH_PERF:-}" ] && { sleep 2; perf record -q -e cpu-clock -F 999 -a -g -o "$out.perf" \
        -- sleep "$((seconds - 5))" >/dev/null 2>&1; } &
    PGOPTIONS=$options "$CE_PGBIN/pgbench" -n -M "$mode" -c "$2" -j 2 -T "$seconds" -f "$work/$1.sql" >"$out" 2>&1
    case $1 in
        add_hot | add_hot_draw | add_zipf | add_zipf_ff100) flush=$(ce_psql -At -c "SELECT '   flush: ' || round(100 * extract(epoch FROM coalesce(
                sum(finished_at - started_at), '0')) / $seconds, 1) || '% of a core, ' || coalesce(sum(rows_affected), 0)
                || ' rows' FROM counter.job_runs WHERE kind = 'flush' AND started_at >= '$since'") ;;
        add_zipf_held) ce_psql -q -c "SELECT counter.job_alter(job_id, enabled => true) FROM counter.jobs WHERE kind = 'flush'" \
            -c "SELECT counter.flush()" >/dev/null
            flush="   flush: off during the run" ;;
    esac
    t=$(tps_of "$out")
    n=$(tx_of "$out")
    echo "${t:-0}" >>"$work/$1.$2.tps"
    case $1 in
        add_hot | add_hot_draw) expect_hot=$((expect_hot + ${n:-0})) ;;
        add_zipf | add_zipf_held) expect_zipf=$((expect_zipf + ${n:-0})) ;;
        add_zipf_ff100) expect_zipfp=$((expect_zipfp + ${n:-0})) ;;
    esac
    printf '  %-13s %3s clients %10s tps   load %s%s\n' "$1" "$2" "${t:-FAILED}" "$(cut -d' ' -f1-3 /proc/loadavg)" "$flush"
    if [ -n "${CE_BENCH_CPU:-}" ]; then
        wait
        cat "$out.cpu"
    fi
    if [ -n "${CE_BENCH_PERF:-}" ]; then
        wait
        perf report -q -i "$out.perf" --comm postgres --no-children -g none --sort dso,sym --stdio 2>/dev/null | grep '%' | head -15 |
            sed 's/^/                perf: /'
        [ -z "${CE_BENCH_PERF_SYMBOL:-}" ] ||
            perf report -q -i "$out.perf" --comm postgres --no-children -S "$CE_BENCH_PERF_SYMBOL" -G --stdio 2>/dev/null |
            grep -v '^$' | head -60 | sed 's/^/                perf: /'
    fi
    if [ -n "${CE_BENCH_WAITS:-}" ]; then
        wait
        echo "                waits: $(grep . "$out.waits" | sort | uniq -c | sort -rn |
            awk '{ n[NR] = $1; w[NR] = substr($0, index($0, $2)); s += $1 } END { for (i = 1; i <= NR && i <= 5; i++)
                printf "%s %.1f%%%s", w[i], 100 * n[i] / s, (i < NR && i < 5) ? ", " : ""; printf " of %d samples", s }')"
    fi
}
median() { sort -n "$work/$1.tps" | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
ratio() { python3 -c "print('%.2fx' % ($1 / $2) if $2 else '-')"; }

for r in $(seq 1 "$rounds"); do
    for c in "${client_counts[@]}"; do
        echo "round $r of $rounds, $c clients"
        for t in "${runs[@]}"; do run "$t" "$c"; done
    done
done

ce_psql -q -c "SELECT counter.flush()" >/dev/null
got_hot=$(ce_psql -At -c "SELECT counter.value('appb', 1::bigint)")
got_zipf=$(ce_psql -At -c "SELECT coalesce(sum(value), 0) FROM counter.tracked_values WHERE counter = 'appz'")
got_zipfp=$(ce_psql -At -c "SELECT coalesce(sum(value), 0) FROM counter.tracked_values WHERE counter = 'appzp'")
zipf_overflows=$(ce_psql -At -c "SELECT overflows FROM counter.buffered WHERE counter = 'appz'")

echo
echo "## Results (durable: fsync, synchronous_commit, full_page_writes on; pgbench -M $mode," \
    "median of $rounds interleaved rounds of $seconds s)"
echo
if [ -n "${CE_BENCH_RUNS:-}" ]; then
    echo "| clients | run | median tps | / SELECT 1 | / the zipf draw |"
    echo "| ---: | --- | ---: | ---: | ---: |"
    for c in "${client_counts[@]}"; do
        s=$( [ -f "$work/select_1.$c.tps" ] && median "select_1.$c" || echo 0)
        z=$( [ -f "$work/select_zipf.$c.tps" ] && median "select_zipf.$c" || echo 0)
        for t in "${runs[@]}"; do
            m=$(median "$t.$c")
            printf '| %s | %s | %.0f | %s | %s |\n' "$c" "$t" "$m" "$(ratio "$m" "$s")" "$(ratio "$m" "$z")"
        done
    done
else
    echo "| clients | SELECT 1 tps | add, one key | SELECT of a zipf draw | add, 100,000 zipf keys (/ SELECT 1, / the draw) | value of a buffered key | the same, read_cache off | one key after the draw | zipf keys / one key, both after the draw |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for c in "${client_counts[@]}"; do
        s=$(median "select_1.$c")
        z=$(median "select_zipf.$c")
        d=$(median "add_hot_draw.$c")
        printf '| %s | %.0f | %.0f (%s) | %.0f (%s) | %.0f (%s, %s) | %.0f (%s) | %.0f (%s) | %.0f (%s) | %s |\n' "$c" "$s" \
            "$(median "add_hot.$c")" "$(ratio "$(median "add_hot.$c")" "$s")" \
            "$z" "$(ratio "$z" "$s")" \
            "$(median "add_zipf.$c")" "$(ratio "$(median "add_zipf.$c")" "$s")" "$(ratio "$(median "add_zipf.$c")" "$z")" \
            "$(median "value_hot.$c")" "$(ratio "$(median "value_hot.$c")" "$s")" \
            "$(median "value_tables.$c")" "$(ratio "$(median "value_tables.$c")" "$s")" \
            "$d" "$(ratio "$d" "$s")" "$(ratio "$(median "add_zipf.$c")" "$d")"
    done
    echo
fi
echo "targets: add one key >= 0.9x SELECT 1 (32 clients), value >= 0.8x, 100,000 zipf keys no slower than one key"
if [ "$got_hot" = "$expect_hot" ] && [ "$got_zipf" = "$expect_zipf" ] && [ "$got_zipfp" = "$expect_zipfp" ]; then
    echo "every add counted once: one key $got_hot = $expect_hot transactions, zipf keys $got_zipf = $expect_zipf" \
        "(packed delta table: $got_zipfp = $expect_zipfp)"
else
    echo "ADDS MISCOUNTED: one key $got_hot, expected $expect_hot; zipf keys $got_zipf, expected $expect_zipf;" \
        "packed: $got_zipfp, expected $expect_zipfp"
fi
echo "zipf keys: ${zipf_overflows:-?} adds found the owner's share full and were written directly"
echo "machine: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), shared with other" \
    "sessions; PostgreSQL $("$CE_PGBIN/postgres" --version | awk '{print $3}'); load average at the end:" \
    "$(cut -d' ' -f1-3 /proc/loadavg)"
