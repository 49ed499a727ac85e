#!/usr/bin/env bash
# counter_ext from the languages applications are written in
# (test/clients/, doc/clients.md): Go with pgx v4, PHP with PDO pgsql,
# Python with psycopg 3 and Node.js with pg. Each program works in a database
# of its own that test/clients/setup.sql prepared (the programs register
# nothing), as the login role clients_app, and exits non-zero with a message
# on any number that differs from count(*) / GROUP BY over the rows or from
# what it wrote. Python, Node.js and Go (a second time, in a database of its
# own, with statement_cache_mode=describe) go through PgBouncer in
# transaction mode (one server connection per pool: every transaction of the
# app's connections shares it). Afterwards, as the owner, every counter of every
# database is compared once more with GROUP BY over its table.
#
# Go builds offline from Debian's packages in GOPATH mode (GO111MODULE=off,
# GOPATH=/usr/share/gocode); node's pg is
# Debian's node-pg or the npm registry's (below).
# lane: side
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
fail() { echo "FAILED: $*"; exit 1; }
ce_require_packages "${CE_CLIENT_PACKAGES[@]}" || exit 1
# Node.js's pg: Debian's node-pg where node is Debian's nodejs (as in the
# chroots of the other majors), else the npm registry's as
# test/clients/node/package-lock.json pins it (npm ci), for a node from
# elsewhere (Debian's node-pg cannot be installed beside it).
command -v node >/dev/null || ce_require_packages nodejs || exit 1
debian_node=
if dpkg-query -W -f='${Maintainer}' nodejs 2>/dev/null | grep -qi debian; then
    debian_node=1
    ce_require_packages node-pg || exit 1
else
    command -v npm >/dev/null || ce_require_packages npm || exit 1
fi
src=$CE_TOP/test/clients
work=$(mktemp -d) || exit 1
chmod 755 "$work"
cleanup() {
    ce_pgbouncer_stop "$work"
    ce_cluster_stop_all
    rm -rf "$work"
}
trap cleanup EXIT

# Build first (no server needed): Go, and node's packages.
start=$SECONDS
mkdir -p "$CE_TOP/build/clients-node"
# Go's build cache: the user's (it outlives the copies of the tree that the
# chroot runs test), or build/go-cache without a home.
gocache=${GOCACHE:-}
[ -n "$gocache" ] || [ -n "${HOME:-}" ] || gocache=$CE_TOP/build/go-cache
(cd "$src/go" && env GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= ${gocache:+GOCACHE="$gocache"} \
    go build -o "$work/clients-go" main.go) || fail "go build"
node_dir=$CE_TOP/build/clients-node
if [ -n "$debian_node" ]; then
    node_modules=/usr/share/nodejs
else
    node_modules=$node_dir/node_modules
    if ! cmp -s "$src/node/package-lock.json" "$node_dir/package-lock.json" || [ ! -d "$node_modules/pg" ]; then
        cp "$src/node/package.json" "$src/node/package-lock.json" "$node_dir/" &&
            (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || fail "npm ci"
    fi
fi
echo "built: go and node's pg ($([ -n "$debian_node" ] && echo Debian || echo npm)) in $((SECONDS - start)) s"

ce_cluster_start clients "counter_ext.enabled = off" || exit 1
ce_cluster_use clients
ce_psql -c "CREATE ROLE clients_app LOGIN" || fail "role"
langs=(go php python node go_pooled)
for l in "${langs[@]}"; do
    "$CE_PGBIN/createdb" "clients_$l" || fail "createdb"
    ce_psql -d "clients_$l" -f "$src/setup.sql" >/dev/null 2>"$work/setup-$l.txt" ||
        { cat "$work/setup-$l.txt"; fail "setup.sql"; }
done

# PgBouncer in transaction mode, in front of the Python, Node.js and second Go databases.
ce_pgbouncer_start "$work" clients_app \
    "clients_go_pooled = host=127.0.0.1 port=$CE_clients_PORT dbname=clients_go_pooled" \
    "clients_python = host=127.0.0.1 port=$CE_clients_PORT dbname=clients_python" \
    "clients_node = host=127.0.0.1 port=$CE_clients_PORT dbname=clients_node" || fail "pgbouncer does not start"
port=$CE_BOUNCER_PORT

# run LANG PORT COMMAND...: one program, as clients_app, in its database.
run() {
    local lang=$1 p=$2
    shift 2
    local t=$SECONDS
    PGHOST=127.0.0.1 PGPORT=$p PGUSER=clients_app PGDATABASE=clients_$lang "$@" || fail "$lang (exit $?)"
    echo "${lang/_pooled/}: $((SECONDS - t)) s$([ "$p" = "$port" ] && echo ", through PgBouncer (transaction mode)")"
}
run go "$CE_clients_PORT" "$work/clients-go"
run php "$CE_clients_PORT" php "$src/php/app.php"
run python "$port" /usr/bin/python3 "$src/python/app.py"
NODE_PATH=$node_modules run node "$port" node "$src/node/app.js"
DATABASE_URL=statement_cache_mode=describe run go_pooled "$port" "$work/clients-go"

# The two really went through the pooler: it served their transactions.
stats=$("$CE_PGBIN/psql" -X -h 127.0.0.1 -p "$port" -U "$(ce_owner_name)" -d pgbouncer -Atc "SHOW STATS" 2>&1)
for l in python node go_pooled; do
    xacts=$(echo "$stats" | awk -F'|' -v db="clients_$l" '$1 == db { print $2 }')
    [ "${xacts:-0}" -gt 20 ] || fail "PgBouncer served ${xacts:-no} transactions of clients_$l: $stats"
done

# Every counter of every database = GROUP BY over its table, read as the owner.
for l in "${langs[@]}"; do
    bad=$(ce_psql -d "clients_$l" -At -c "
        WITH truth AS (
            SELECT 'comments_per_post' AS counter, post_id::text AS key, count(*) AS n FROM app.comments GROUP BY 2
            UNION ALL SELECT 'likes_per_user', user_name, count(*) FROM app.likes GROUP BY 2
            UNION ALL SELECT 'downloads_per_file', file_id::text, count(*) FROM app.downloads GROUP BY 2
            UNION ALL SELECT 'audit_per_actor', actor::text, count(*) FROM app.audit GROUP BY 2)
        SELECT count(*) FROM truth t FULL JOIN (SELECT * FROM counter.tracked_values WHERE value <> 0) v USING (counter, key)
        WHERE t.n IS DISTINCT FROM v.value") || fail "check as owner"
    [ "$bad" = 0 ] || fail "clients_$l: $bad keys whose counter differs from GROUP BY"
    rows=$(ce_psql -d "clients_$l" -At -c "SELECT (SELECT count(*) FROM app.comments), (SELECT count(*) FROM app.likes),
        (SELECT count(*) FROM app.downloads), (SELECT count(*) FROM app.clicks), (SELECT count(*) FROM app.daily_visitors),
        (SELECT count(*) FROM app.likes WHERE user_name = 'carol')") || fail "rows"
    [ "$rows" = "6|3|3|7|2|0" ] || fail "clients_$l: rows committed (comments|likes|downloads|clicks|sketches|carol) $rows, want 6|3|3|7|2|0"
done
ce_scan_log "$CE_clients_LOG" || fail "crash in the server log"
echo ok
