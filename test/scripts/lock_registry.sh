#!/usr/bin/env bash
# One registry of advisory-lock classes (src/include/counter_ext/locks.hpp,
# counter_internal.lock_class(name) / lock_classes()): no advisory lock in the
# generated install and update scripts or in the C++ sources outside
# locks.hpp names its class with a literal; every class used (lock_class('x')
# in SQL, ce::locks::x in C++) is one lock_classes() lists; and the table in
# doc/reference/worker.md is that list, key for key. Uses the suite's main
# cluster (PGHOST/PGPORT from test/run.sh) for lock_classes().
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
cd "$CE_TOP"
db=lock_registry
"$CE_PGBIN/dropdb" --if-exists $db && "$CE_PGBIN/createdb" $db
trap '"$CE_PGBIN/dropdb" --if-exists $db >/dev/null 2>&1 || true' EXIT
current=$(sed -n "s/^default_version = '\(.*\)'/\1/p" counter_ext.control)
scripts=(counter_ext--"$current".sql)
for f in src/sql/upgrade/*--"$current"; do
    [ -d "$f" ] && scripts+=("counter_ext--$(basename "$f").sql")
done
for f in "${scripts[@]}"; do [ -f "$f" ] || ce_die "$f is not built (run make)"; done
classes=$(ce_psql -d $db -At -F ' ' -c "CREATE EXTENSION counter_ext" \
    -c "SELECT class, key FROM counter_internal.lock_classes() ORDER BY key")
[ -n "$classes" ] || ce_die "counter_internal.lock_classes() is empty"

CLASSES=$classes python3 - "${scripts[@]}" <<'PY'
import glob, os, re, sys

errors = []
registry = {}
for line in os.environ["CLASSES"].splitlines():
    name, key = line.split()
    registry[name] = int(key)
if len(set(registry.values())) != len(registry):
    errors.append(f"two classes share a key: {registry}")

def spellings(key):
    h = f"{key & 0xffffffff:08x}"
    return [str(key), "0x" + h, "x'" + h + "'"]

call = re.compile(r"advisory_(?:xact_)?lock(?:_shared)?(?:_int4)?\s*\(\s*([^,)]*)", re.I)
sources = {f: open(f).read() for f in sys.argv[1:]}
c_files = sorted(glob.glob("src/*.cpp") + glob.glob("src/include/counter_ext/*.hpp"))
for f in c_files:
    if not f.endswith("/locks.hpp"):
        sources[f] = open(f).read()

used = set()
for f, text in sources.items():
    for name, key in registry.items():
        for s in spellings(key):
            for m in re.finditer(r"(?<![0-9A-Za-z_])" + re.escape(s) + r"(?![0-9A-Za-z_])", text, re.I):
                line = text.count("\n", 0, m.start()) + 1
                errors.append(f"{f}:{line}: the literal {s} (class {name}) outside the registry")
    for m in call.finditer(text):
        first = re.sub(r"^(\s|--)*", "", m.group(1)).strip()  # a comment may break the line
        line = text.count("\n", 0, m.start()) + 1
        # from the registry: lock_class('x') in SQL, a format argument
        # filled with it (checked by the literal search above), a C++ name
        if re.match(r"(counter_internal\.)?lock_class\('", first) or re.match(r"%\d+\$s$", first) \
                or re.match(r"(Int32GetDatum\()?[A-Za-z_][A-Za-z_0-9:]*\)?$", first) or first in ("", "$1"):
            continue
        errors.append(f"{f}:{line}: an advisory lock whose class is not from the registry: {first!r}")
    if f.endswith(".sql"):
        used |= set(re.findall(r"lock_class\('([^']*)'\)", text))
    else:
        used |= set(re.findall(r"\blocks::([a-z_]+)\b", text))
used -= {"find", "classes", "LockClass"}
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
