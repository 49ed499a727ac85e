#!/usr/bin/env bash
# Documentation that runs (issue 25, section 4): every ```sql block of
# README.md, doc/*.md and doc/reference/*.md is run as written, page by page
# in a fresh database of its own, in page order in one psql session, and
# every output the page shows after a statement is compared with what the
# server prints (test/docs_run.py; the conventions are in doc/index.md,
# "Documentation that runs"). Then every function, procedure and view of
# schema counter a user may call must be named by a block that ran, unless
# it is listed below as an exception with its reason.
#
# The cluster is preloaded like the suite's (shared_preload_libraries =
# counter_ext) with the worker off, so what a page shows does not depend on
# when the worker wakes; the runner connects as a superuser named postgres.
# lane: side
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
trap ce_cluster_stop_all EXIT
cd "$CE_TOP"

ce_cluster_start docs "counter_ext.enabled = off" || exit 1
ce_cluster_use docs
# The pages show "postgres" as the owner of what they make: run as a
# superuser of that name whoever starts the suite.
ce_psql -d postgres -c "DO \$\$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'postgres') THEN
    CREATE ROLE postgres SUPERUSER LOGIN; END IF; END \$\$" || exit 1
export PGUSER=postgres

pages=(README.md doc/*.md doc/reference/*.md)
# CE_DOCS_PAGES="doc/reference/hll.md ..." runs only those pages, without
# the coverage check (which needs every page): for editing a page.
[ -n "${CE_DOCS_PAGES:-}" ] && read -ra pages <<<"$CE_DOCS_PAGES"
failed=0
names=()
for page in "${pages[@]}"; do
    grep -q '^```sql' "$page" || continue
    db="docs_$(basename "$page" .md | tr -c 'a-z0-9\n' '_')"
    [ "$page" = README.md ] && db=docs_readme
    ce_psql -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null 2>&1 || exit 1
    echo "== $page (database $db)"
    result=$(python3 test/docs_run.py "$page" "$CE_PGBIN/psql" -d "$db")
    st=$?
    grep -v '^@@names' <<<"$result" | sed 's/^/  /'
    read -ra more <<<"$(sed -n 's/^@@names //p' <<<"$result")"
    names+=("${more[@]}")
    if [ $st -ne 0 ]; then
        echo "  $page ... FAILED"
        failed=1
    fi
    # Roles belong to the cluster: the page's go with its database, so the
    # next page starts as fresh as a new cluster.
    ce_psql -d postgres -c "DROP DATABASE $db" >/dev/null || exit 1
    for r in $(ce_psql -d postgres -At -c "SELECT rolname FROM pg_roles WHERE oid > 16383 AND rolname <> 'postgres'"); do
        ce_psql -d postgres -c "DROP ROLE \"$r\"" >/dev/null || exit 1
    done
done

if [ -n "${CE_DOCS_PAGES:-}" ]; then
    echo "not run: the coverage check (CE_DOCS_PAGES chose some pages)"
    exit $failed
fi

# Coverage. What a user may call: the functions, procedures and views of
# schema counter, without the types' input/output functions, the functions
# behind aggregates, operators and operator classes (the aggregate or
# operator is what a user writes; the aggregates themselves are listed),
# functions no SQL can call (an internal argument or result: 1.4's aggregate
# support kept for its install script) and the exceptions below.
declare -A exception=()
db=docs_coverage
ce_psql -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null 2>&1 || exit 1
ce_psql -d $db -c "CREATE EXTENSION counter_ext" >/dev/null || exit 1
callable=$(ce_psql -d $db -At <<'SQL'
WITH plumbing AS (
    SELECT f FROM pg_catalog.pg_type t,
        LATERAL (VALUES (t.typinput), (t.typoutput), (t.typreceive), (t.typsend), (t.typmodin), (t.typmodout),
                        (t.typanalyze)) v(f)
    WHERE t.typnamespace OPERATOR(pg_catalog.=) 'counter'::regnamespace
    UNION
    SELECT f FROM pg_catalog.pg_aggregate a,
        LATERAL (VALUES (a.aggtransfn), (a.aggfinalfn), (a.aggcombinefn), (a.aggserialfn), (a.aggdeserialfn),
                        (a.aggmtransfn), (a.aggminvtransfn), (a.aggmfinalfn)) v(f)
    UNION
    SELECT o.oprcode FROM pg_catalog.pg_operator o
    WHERE o.oprnamespace OPERATOR(pg_catalog.=) 'counter'::regnamespace
    UNION
    SELECT a.amproc FROM pg_catalog.pg_amproc a
)
SELECT DISTINCT p.proname FROM pg_catalog.pg_proc p
WHERE p.pronamespace OPERATOR(pg_catalog.=) 'counter'::regnamespace
  AND p.oid::regproc NOT IN (SELECT f::regproc FROM plumbing WHERE f::oid OPERATOR(pg_catalog.<>) 0)
  AND NOT 'internal'::regtype OPERATOR(pg_catalog.=) ANY (p.proargtypes::oid[] OPERATOR(pg_catalog.||) p.prorettype)
UNION
SELECT c.relname FROM pg_catalog.pg_class c
WHERE c.relnamespace OPERATOR(pg_catalog.=) 'counter'::regnamespace AND c.relkind IN ('v', 'r', 'm')
ORDER BY 1
SQL
) || exit 1
declare -A ran=()
for n in "${names[@]}"; do ran[$n]=1; done
echo "== coverage: every function, procedure and view of schema counter has an example that ran"
missing=0
for n in $callable; do
    if [ -n "${exception[$n]:-}" ]; then
        echo "  exception: counter.$n: ${exception[$n]}"
    elif [ -z "${ran[$n]:-}" ]; then
        echo "  FAIL no example ran for counter.$n"
        missing=$((missing + 1))
    fi
done
for n in "${!exception[@]}"; do
    grep -qx "$n" <<<"$callable" || { echo "  FAIL exception counter.$n names nothing: remove it"; missing=$((missing + 1)); }
done
echo "  $(wc -w <<<"$callable") names, $missing without an example"
[ $missing -eq 0 ] || failed=1
[ $failed -eq 0 ] && echo "docs ... ok"
exit $failed
