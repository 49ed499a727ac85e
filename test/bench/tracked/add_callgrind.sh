#!/usr/bin/env bash
# Where one buffered add spends its instructions beyond SELECT 1 (valgrind's
# callgrind: deterministic, unlike any timing on a shared machine), this
# tree only. A preloaded cluster (durable defaults) gets a buffered
# application-mode counter with one key flushed; then `postgres --single`
# runs `SELECT 1` and `SELECT counter.add('appb', 1::bigint)` as prepared
# statements, each 1,000 and 3,000 times, one transaction each, under
# callgrind. Per execution, for each function: the difference of its
# inclusive count between the two runs over 2,000 (what the start of the
# process costs cancels out); printed for the add, for SELECT 1 and their
# difference, for the stages of a statement and for counter_ext's own
# functions on the add's path. doc/bench/tracked.md, "What one key's add
# costs beyond SELECT 1". On demand, not in CI:
#   bash test/bench/tracked/add_callgrind.sh
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
ce_require_packages valgrind "${CE_TEST_PACKAGES[@]}" || exit 1
ce_build_and_stage || exit 1
work=$(mktemp -d)
chmod 755 "$work"
trap 'ce_cluster_stop_all; rm -rf "$work"' EXIT INT TERM
ce_cluster_start add "fsync = on" "synchronous_commit = on" "full_page_writes = on" "counter_ext.enabled = off" ||
    exit 1
ce_cluster_use add
ce_psql >/dev/null <<'SQL'
CREATE EXTENSION counter_ext;
CREATE TABLE appb (k bigint NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON appb (at);
SELECT counter.track('appb', 'appb', 'k', 'at', mode => 'application', buffered => true);
SELECT counter.add('appb', 1::bigint);
SELECT counter.flush('appb');
SQL
ce_as_owner "$CE_PGBIN/pg_ctl" -D "$CE_add_DIR/data" -w -t 60 stop -m fast >/dev/null

# annotate NAME STATEMENT N: callgrind's inclusive counts per function, for
# N executions, into $work/NAME.N.txt
annotate() {
    local name=$1 stmt=$2 n=$3
    ce_callgrind_single "$CE_PGBIN" "$CE_add_DIR/data" "$work/run" "$stmt" "$n" >/dev/null || ce_die "$stmt failed"
    callgrind_annotate --tree=calling --inclusive=yes --threshold=100 "$work/run/cg.out" >"$work/$name.$n.txt" 2>/dev/null
}
for n in 1000 3000; do
    annotate select "SELECT 1" "$n"
    annotate add "SELECT counter.add('appb', 1::bigint)" "$n"
done

python3 - "$work" <<'PY'
import re, sys
work = sys.argv[1]

def load(path):
    # the "*" lines of --tree=calling: each function's inclusive count once
    out = {}
    for line in open(path):
        m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+\*\s+(\S.*?)(?: \[.*\])?$", line)
        if m:
            out[m.group(2)] = out.get(m.group(2), 0) + int(m.group(1).replace(",", ""))
    return out

def per(name):
    a, b = load(f"{work}/{name}.1000.txt"), load(f"{work}/{name}.3000.txt")
    return {k: (b.get(k, 0) - a.get(k, 0)) / 2000 for k in set(a) | set(b)}

def total(name):
    t = []
    for n in (1000, 3000):
        m = re.search(r"([\d,]+) \(100.0%\)\s+PROGRAM TOTALS", open(f"{work}/{name}.{n}.txt").read())
        t.append(int(m.group(1).replace(",", "")))
    return (t[1] - t[0]) / 2000

sel, add = per("select"), per("add")
st, at = total("select"), total("add")
print(f"{'per execution (instructions)':58} {'SELECT 1':>9} {'add':>9} {'add - SELECT 1':>15}")
print(f"{'the whole statement':58} {st:9.0f} {at:9.0f} {at - st:15.0f}")
stages = [("ExecutorStart", "???:ExecutorStart"), ("  of which ExecInitResult (the projection)", "???:ExecInitResult"),
          ("  of which fmgr_info (the function's lookup)", "???:fmgr_info"),
          ("ExecutorRun", "???:ExecutorRun"), ("ExecutorEnd", "???:ExecutorEnd"),
          ("PortalDrop", "???:PortalDrop"), ("CommitTransactionCommand", "???:CommitTransactionCommand")]
for label, key in stages:
    s, a = sel.get(key, 0), add.get(key, 0)
    print(f"{label:58} {s:9.0f} {a:9.0f} {a - s:15.0f}")
print("counter_ext on the add's path (inclusive):")
# (process_utility wraps the EXECUTE of postgres --single, in both runs alike)
ours = sorted(((v, k) for k, v in add.items() if "/src/" in k.split(":")[0] and "process_utility" not in k),
              reverse=True)
seen = set()
for v, k in ours:
    label = re.sub(r"^\S*/src/(include/counter_ext/)?", "", k)
    label = re.sub(r"\(anonymous namespace\)::", "", label)[:70]
    if v < 20 or label in seen:
        continue
    seen.add(label)
    print(f"  {label:70} {v:9.0f}")
PY
