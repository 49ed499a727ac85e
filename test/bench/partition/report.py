#!/usr/bin/env python3
"""Turns the raw results of test/bench/partition/run.sh into doc/bench/partition.md.

One argument per PostgreSQL major (a directory of raw results, as run.sh
leaves them with CE_BENCH_RAW): each figure gets a row per major, each major's
ratio measured against the pg_partman of that major (test/bench/majors.sh).
"""
import sys


def load(work):
    r = {}
    for line in open(f"{work}/results.txt"):
        key, _, value = line.rstrip("\n").partition(" ")
        r[key] = value
    return r


runs = [load(d) for d in sys.argv[1:]]
multi = len(runs) > 1


def times(r, key):
    return [float(v) for v in r.get(key, "").split()]


def best_median(values):
    # the median of an even count is its lower middle, as before
    return min(values), sorted(values)[(len(values) - 1) // 2]


out = []
w = out.append
w("# Benchmark: partition maintenance beside pg_partman")
w("")
if multi:
    w("Command: `bash test/bench/majors.sh partition` (one run on PostgreSQL " + ", ".join(r["pg_major"] for r in runs) +
      ", one after the other on one machine: 15 on the machine, the others in a chroot of the Debian suite")
    w("that ships them with that suite's pg_partman; each major in one throwaway cluster, both extensions in one database).")
else:
    w("Command: `bash test/bench/partition/run.sh` (one throwaway cluster, both extensions in one database).")
w(f"Machine: {runs[0]['machine']};")
for r in runs:
    w(f"PostgreSQL {r['pg_version']}, pg_partman {r['partman_version']}, counter_ext {r['counter_version']}; "
      f"run {r['date']}, load average before: {r['load_before']}.")
w("")
w(f"Times are server round trips measured by psql \\timing over {runs[0]['runs']} interleaved runs each; the machine is")
w("shared, so the best run (least disturbed) is the headline figure and the median is shown beside it.")
w("pg_partman 4.x is set up with `create_parent(p_type := 'native', ...)`, 5.x with `p_type := 'range'`")
w("(5.0 dropped trigger-based partitioning and renamed the type); the other arguments are the same.")
w("Every run checks the partitions each tool made, kept and dropped, and stops on a wrong count.")
w("")
w("| figure | PostgreSQL / pg_partman | pg_partman ms (best / median) | counter_ext ms (best / median) | plain DDL ms (best / median) | pg_partman / counter_ext (best / median) |")
w("| --- | --- | ---: | ---: | ---: | ---: |")
figures = (
    ("setup", "set-up: 720 hourly partitions from scratch (721 + default; create_parent vs partition_manage)"),
    ("noop", "one maintenance call, 2,000 partitions, nothing to do (new session)"),
    ("warm", "the same, second call in one session (as a long-lived worker)"),
    ("churn", "one maintenance call creating 24 and dropping 24 partitions"),
)
for key, label in figures:
    for i, r in enumerate(runs):
        p, pm = best_median(times(r, f"{key}_pm"))
        c, cm = best_median(times(r, f"{key}_ce"))
        ddl = times(r, f"{key}_ddl")
        d = "%.0f / %.0f" % best_median(ddl) if ddl else "-"
        w(f"| {label if i == 0 else ''} | {r['pg_major']} / {r['partman_version']} | {p:.0f} / {pm:.0f} | {c:.0f} / {cm:.0f} | {d} | "
          f"**{p / c:.1f}x** / {pm / cm:.1f}x |")
w("")
for r in runs:
    w(f"Raw runs (ms), PostgreSQL {r['pg_major']}: set-up pg_partman {r['setup_pm']}, counter_ext {r['setup_ce']}, plain DDL {r['setup_ddl']};")
    w(f"no-op pg_partman {r['noop_pm']}, counter_ext {r['noop_ce']};")
    w(f"no-op warm pg_partman {r['warm_pm']}, counter_ext {r['warm_ce']};")
    w(f"churn pg_partman {r['churn_pm']}, counter_ext {r['churn_ce']}.")
    w("")
out.append("""Notes:
- Set-up is dominated by PostgreSQL's own catalog work: each new partition rebuilds the parent's
  partition descriptor (cost grows with the partitions already there) and builds two indexes.
  counter_ext's partition_manage is within noise of the plain-DDL floor (a DO loop of
  CREATE TABLE ... PARTITION OF); no tool doing real DDL can be much faster than that column.
- The no-op call in a new session pays for loading the catalog caches of 2,000 partitions
  (both tools do); in a warm session counter_ext reads the bounds from the relcache partition
  descriptor (C++, no deparsing) and finishes in about 2 ms.
- The churn call: counter_ext creates with CREATE TABLE (LIKE ... INCLUDING ALL) + ATTACH PARTITION
  (SHARE UPDATE EXCLUSIVE on the parent: writers and readers of other partitions go on) and drops
  last, in one bounded step (pg_partman on PostgreSQL 11+ does not analyze the parent by default).
- pg_partman tables have infinite_time_partitions = true: otherwise pg_partman makes no new
  partition for a table that received no rows, and these benchmark tables are empty.""")
print("\n".join(out))
