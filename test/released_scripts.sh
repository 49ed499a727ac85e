#!/usr/bin/env bash
# test/released_scripts.sh DIR: the install script of every released version
# (src/sql/upgrade/releases: version and the commit whose tree installs it),
# built from git history into DIR as counter_ext--X.sql. The tree keeps no
# copy of them (src/sql/upgrade/README.md); test/scripts/upgrade.sh installs
# each and updates it. Fails loudly when the history is not there (a shallow
# clone, a tarball): the upgrade test must never pass without its old versions.
# Cached: a commit's scripts are built once into build/released/COMMIT.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: test/released_scripts.sh DIR}
mkdir -p "$out"
git -C "$top" rev-parse --git-dir >/dev/null 2>&1 ||
    { echo "error: $top is not a git checkout: the released install scripts are built from its history" >&2; exit 1; }
pg_config=${CE_PG_CONFIG:-pg_config}
grep -v '^#' "$top/src/sql/upgrade/releases" | while read -r version commit; do
    [ -n "$version" ] || continue
    cache=$top/build/released/$commit
    if [ ! -f "$cache/.done" ]; then
        git -C "$top" cat-file -e "$commit^{commit}" 2>/dev/null ||
            { echo "error: commit $commit (release $version) is not in this clone's history; a full clone is needed (git fetch --unshallow)" >&2; exit 1; }
        rm -rf "$cache" && mkdir -p "$cache/tree"
        git -C "$top" archive "$commit" Makefile counter_ext.control src/sql | tar -x -C "$cache/tree"
        touch "$cache/.done"
    fi
    script=$cache/tree/src/sql/released/counter_ext--$version.sql
    if [ ! -f "$script" ]; then
        made=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$cache/tree/counter_ext.control")
        [ "$made" = "$version" ] ||
            { echo "error: commit $commit has no install script of $version and makes $made" >&2; exit 1; }
        script=$cache/tree/counter_ext--$version.sql
        [ -f "$script" ] || make -s -C "$cache/tree" PG_CONFIG="$pg_config" "counter_ext--$version.sql" >&2
    fi
    grep -q "^CREATE" "$script" || { echo "error: $script holds no CREATE" >&2; exit 1; }
    cp "$script" "$out/counter_ext--$version.sql"
done
