#!/usr/bin/env bash
# One registry of the locks counter_ext takes (src/include/counter_ext/locks.hpp,
# counter_internal.lock_take / lock_classes()), all in counter_ext's own lock
# space (object locks whose class id is counter_internal.lock_space; on Citus,
# a trigger-mode rollup's classes in its table's, ce::locks::take_in): no
# advisory lock is taken anywhere in the generated install and update scripts
# or in the C++ sources (1.4's advisory class ids appear only in locks.hpp's
# legacy table); every class used (lock_take('x' in SQL, ce::locks::x in C++)
# is one lock_classes() lists; the numbers are distinct; and the table in
# doc/reference/worker.md is that list, number for number. Uses the suite's
# main cluster (PGHOST/PGPORT from test/run.sh) for lock_classes().
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
cd "$CE_TOP"
db=lock_registry
"$CE_PGBIN/dropdb" --if-exists $db && "$CE_PGBIN/createdb" $db
trap '"$CE_PGBIN/dropdb" --if-exists $db >/dev/null 2>&1 || true' EXIT
current=$(sed -n "s/^default_version = '\(.*\)'/\1/p" counter_ext.control)
scripts=(counter_ext--"$current".sql)
# the update scripts make builds, one from each released version
# (src/sql/upgrade/README.md)
for f in counter_ext--*--"$current".sql; do
    [ -f "$f" ] && scripts+=("$f")
done
[ ${#scripts[@]} -gt 1 ] || ce_die "no update script to $current is built (run make)"
for f in "${scripts[@]}"; do [ -f "$f" ] || ce_die "$f is not built (run make)"; done
classes=$(ce_psql -d $db -At -F ' ' -c "CREATE EXTENSION counter_ext" \
    -c "SELECT class, number FROM counter_internal.lock_classes() ORDER BY number")
[ -n "$classes" ] || ce_die "counter_internal.lock_classes() is empty"
# lock_take and the lock space are the extension's own: PUBLIC may not call or read them
ce_psql -d $db -At -c "SELECT has_function_privilege('public', 'counter_internal.lock_take(text, bigint, timestamptz, boolean)', 'EXECUTE')
    OR has_table_privilege('public', 'counter_internal.lock_space', 'SELECT')" | grep -qx f \
    || ce_die "PUBLIC may call counter_internal.lock_take or read counter_internal.lock_space"

CLASSES=$classes python3 - "${scripts[@]}" <<'PY'
import glob, os, re, sys

errors = []
registry = {}
for line in os.environ["CLASSES"].splitlines():
    name, number = line.split()
    registry[name] = int(number)
if len(set(registry.values())) != len(registry):
    errors.append(f"two classes share a number: {registry}")

legacy = [1667563524, 1667576885, 1380928579, 1380928584, 1667590754, 1667563535]
def spellings(key):
    h = f"{key & 0xffffffff:08x}"
    return [str(key), "0x" + h, "x'" + h + "'"]

advisory = re.compile(r"(pg_(try_)?advisory_\w*|advisory_(xact_)?lock\w*_int[48])\s*\(?", re.I)
sources = {f: open(f).read() for f in sys.argv[1:]}
c_files = sorted(glob.glob("src/*.cpp") + glob.glob("src/include/counter_ext/*.hpp"))
for f in c_files:
    if not f.endswith("/locks.hpp"):
        sources[f] = open(f).read()

used = set()
for f, text in sources.items():
    for key in legacy:
        for s in spellings(key):
            for m in re.finditer(r"(?<![0-9A-Za-z_])" + re.escape(s) + r"(?![0-9A-Za-z_])", text, re.I):
                line = text.count("\n", 0, m.start()) + 1
                errors.append(f"{f}:{line}: 1.4's advisory class id {s} outside locks.hpp")
    for m in advisory.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        errors.append(f"{f}:{line}: an advisory lock: {m.group(0)!r} (take the registry's lock instead)")
    if f.endswith(".sql"):
        used |= set(re.findall(r"lock_take\('([^']*)'", text))
    else:
        used |= set(re.findall(r"\blocks::([a-z_]+)\b", text))
used -= {"find", "classes", "LockClass", "LegacyClass", "legacy_advisory", "take", "take_in", "space", "rollup_id"}
for name in sorted(used - set(registry)):
    errors.append(f"class {name!r} is used but counter_internal.lock_classes() does not list it")
if not {"tracked", "partition", "rollup_day", "rollup_hour", "job", "flush"} <= used:
    errors.append(f"the classes found in use are too few (the search is broken?): {sorted(used)}")

# the one table in the docs
doc = open("doc/reference/worker.md").read()
rows = dict((n, int(k)) for n, k in re.findall(r"^\| `([a-z_]+)` \| (\d+) \|", doc, re.M))
if rows != registry:
    errors.append(f"doc/reference/worker.md's table {rows} is not the registry {registry}")

for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PY
echo ok
