#!/usr/bin/env bash
# Building against a major other than 15-18 stops with a message naming the
# supported ones: the Makefile, from pg_config --version, and, should a build
# get past it, the #error of src/include/counter_ext/compat.hpp, from the
# headers' PG_VERSION_NUM. Both for 14 and 19; the real headers still build.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
cd "$CE_TOP"
work=$(mktemp -d "${TMPDIR:-/tmp}/counter_ext.major.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
server=$("$CE_PG_CONFIG" --includedir-server)

for major in 14 19; do
    # pg_config of another major (the real one for everything but --version)
    printf '#!/bin/sh\n[ "$1" = --version ] && { echo "PostgreSQL %s.1"; exit 0; }\nexec %s "$@"\n' \
        "$major" "$CE_PG_CONFIG" >"$work/pg_config"
    chmod +x "$work/pg_config"
    out=$(make -s -n PG_CONFIG="$work/pg_config" 2>&1) && fail "make accepted PostgreSQL $major"
    grep -q "counter_ext builds against PostgreSQL 15 16 17 18; .*PostgreSQL $major\.1" <<<"$out" ||
        fail "make's message for $major: $out"
    echo "make, PostgreSQL $major: $(echo "$out" | sed 's/^Makefile:[0-9]*: \*\*\* //' | cut -c1-100)..."

    # the server headers with another PG_VERSION_NUM (hard links but for pg_config.h)
    rm -rf "$work/server"
    cp -al "$server" "$work/server" 2>/dev/null || cp -a "$server" "$work/server"
    rm "$work/server/pg_config.h"
    sed "s/^#define PG_VERSION_NUM .*/#define PG_VERSION_NUM ${major}0001/" "$server/pg_config.h" >"$work/server/pg_config.h"
    out=$(echo '#include "counter_ext/pg.hpp"' | g++ -std=c++17 -fsyntax-only -isystem "$work/server" -Isrc/include -x c++ - 2>&1) &&
        fail "the compiler accepted headers of PostgreSQL $major"
    grep -q "#error \"counter_ext supports PostgreSQL 15, 16, 17 and 18" <<<"$out" ||
        fail "the compiler's message for $major: $out"
    echo "compiler, PostgreSQL $major: $(echo "$out" | grep -m1 -o 'counter_ext supports[^"]*')"
done
out=$(echo '#include "counter_ext/pg.hpp"' | g++ -std=c++17 -fsyntax-only -isystem "$server" -Isrc/include -x c++ - 2>&1) ||
    fail "the real headers do not build: $out"
echo ok
