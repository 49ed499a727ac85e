# Shared shell functions for the test suite, the demo and the benchmarks:
# set-up on a fresh Debian 12 machine, a staged install of this tree, and
# throwaway PostgreSQL clusters on free local ports. Source it; do not run it.
#
# Clusters: ce_cluster_start NAME [postgresql.conf lines...] starts one and
# sets CE_<NAME>_PORT, CE_<NAME>_DIR and CE_<NAME>_LOG; ce_cluster_use NAME
# points PGHOST/PGPORT/PGUSER/PGDATABASE at it; ce_cluster_stop NAME stops it
# and removes its directory; ce_cluster_stop_all stops every one this shell
# started (call it from a trap).

CE_TOP=${CE_TOP:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
# The PostgreSQL major under test: CE_PG_MAJOR from the environment (the
# chroot runs of test/versions.sh set it), else the one pg_config names, else
# Debian 12's 15 (a fresh machine has no pg_config yet).
if [ -z "${CE_PG_MAJOR:-}" ]; then
    CE_PG_MAJOR=$(pg_config --version 2>/dev/null | sed -n 's/^PostgreSQL \([0-9][0-9]*\).*/\1/p')
    CE_PG_MAJOR=${CE_PG_MAJOR:-15}
fi
CE_SYSTEM_BIN=/usr/lib/postgresql/$CE_PG_MAJOR/bin
# The staged PostgreSQL: build/stage in the checkout, or where
# build/stage.where says (see ce_stage_reachable).
if [ -z "${CE_STAGE:-}" ]; then
    CE_STAGE=$CE_TOP/build/stage
    if [ -f "$CE_TOP/build/stage.where" ]; then
        CE_STAGE=$(cat "$CE_TOP/build/stage.where")
    fi
fi
CE_PGBIN=$CE_STAGE/usr/lib/postgresql/$CE_PG_MAJOR/bin
CE_PGXS_DIR=/usr/lib/postgresql/$CE_PG_MAJOR/lib/pgxs
CE_CLUSTERS=()

# What the tests need; benchmarks pass their anchors to ce_require_packages.
# The format check runs once, on the host (CE_SKIP_FORMAT is set in chroots).
CE_PG_CONFIG=/usr/lib/postgresql/$CE_PG_MAJOR/bin/pg_config
CE_TEST_PACKAGES=(make g++ postgresql-$CE_PG_MAJOR postgresql-server-dev-$CE_PG_MAJOR
    postgresql-$CE_PG_MAJOR-pgtap libtap-parser-sourcehandler-pgtap-perl postgresql-$CE_PG_MAJOR-cron libboost-dev
    python3 procps iproute2 pgbouncer)
[ -n "${CE_SKIP_FORMAT:-}" ] || CE_TEST_PACKAGES+=(clang-format)
# The client programs of test/clients (test/scripts/clients.sh installs them,
# so only a run that selects it pays for them): Go with pgx v4 (built offline
# from /usr/share/gocode), PHP with PDO pgsql, Python with psycopg 3. Node.js
# is Debian's nodejs and npm unless the machine already has node and npm.
CE_CLIENT_PACKAGES=(golang-go golang-github-jackc-pgx-v4-dev php-cli php-pgsql python3-psycopg)

ce_log() { printf '%s\n' "$*" >&2; }
ce_die() { ce_log "error: $*"; exit 1; }

ce_is_root() { [ "$(id -u)" -eq 0 ]; }

# Runs a server-side command as the cluster's owner: postgres when we are
# root (initdb refuses root), ourselves otherwise.
ce_as_owner() {
    if ce_is_root; then runuser -u postgres -- "$@"; else "$@"; fi
}

ce_owner_name() {
    if ce_is_root; then echo postgres; else id -un; fi
}

# Installs missing Debian packages when root; otherwise prints the exact
# apt-get line and fails, installing nothing.
ce_require_packages() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if ! ce_is_root; then
        ce_log "missing packages: ${missing[*]}"
        ce_log "run as root:  apt-get update && apt-get install -y ${missing[*]}"
        return 1
    fi
    # One installation at a time: scripts of the two lanes of test/run.sh
    # may both install (apt-get fails at once on a held dpkg lock).
    (
        flock 9 || exit 1
        ce_log "installing: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        if ! apt-get install -y -q "${missing[@]}" >/dev/null 2>&1; then
            apt-get update -q >/dev/null 2>&1 || true
            apt-get install -y -q "${missing[@]}" >&2 || exit 1
        fi
        # Debian's postgresql-common starts a system cluster we do not use.
        if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql/$CE_PG_MAJOR/main ]; then
            pg_ctlcluster $CE_PG_MAJOR main stop >/dev/null 2>&1 || true
        fi
    ) 9>>/var/cache/counter_ext-apt.lock  # root only here, in a directory only root writes
}

# As root the servers run as postgres, which must be able to reach the staged
# binaries: every directory above them must let postgres through. A checkout
# in a folder only root can enter (root's home, a mktemp -d) does not, and we
# never widen the permissions of someone's folders to make it so. The stage
# moves instead to a directory of its own under /var/tmp (the same file system
# as /usr on a plain Debian install, so the copy is hard links; not /tmp,
# which may be a tmpfs and is cleaned at boot): made by mktemp, so no other
# user can have created it or a link in its place, owned by root, mode 0755,
# holding only copies of PostgreSQL and of this build. build/stage.where names
# it so that later runs, and the scripts a run starts, use the same one;
# `rm -rf "$(cat build/stage.where)"` removes it.
ce_stage_reachable() {
    ce_is_root || return 0
    mkdir -p "$CE_TOP/build" || return 1
    local where=$CE_TOP/build/stage.where
    if [ "$CE_STAGE" = "$CE_TOP/build/stage" ]; then
        runuser -u postgres -- test -x "$CE_TOP/build" 2>/dev/null && return 0
    elif [ -d "$CE_STAGE" ] && [ ! -L "$CE_STAGE" ] && [ "$(stat -c %u:%a "$CE_STAGE")" = 0:755 ] &&
        runuser -u postgres -- test -x "$CE_STAGE" 2>/dev/null; then
        return 0
    fi
    CE_STAGE=$(mktemp -d /var/tmp/counter_ext-stage.XXXXXX) || return 1
    chmod 755 "$CE_STAGE" || return 1
    echo "$CE_STAGE" >"$where"
    CE_PGBIN=$CE_STAGE/usr/lib/postgresql/$CE_PG_MAJOR/bin
    ce_log "the checkout is not reachable by postgres: PostgreSQL is staged in $CE_STAGE"
}

# Builds this tree, installs it into the system PostgreSQL (when we may), and
# into a staged copy of PostgreSQL under build/stage that the tests run: the
# server there finds its share and lib directories relative to its binary, so
# each checkout tests exactly its own build, whatever else is installed.
ce_build_and_stage() {
    (cd "$CE_TOP" && make -s -j2 PG_CONFIG="$CE_PG_CONFIG" >&2) || return 1
    ce_stage_reachable || return 1
    export CE_STAGE CE_PGBIN
    local libdir=/usr/lib/postgresql/$CE_PG_MAJOR share=/usr/share/postgresql/$CE_PG_MAJOR
    # The scripts of this tree only: one left by an older tree (a full
    # install script of a version that now installs through its updates)
    # would change what CREATE EXTENSION ... VERSION runs.
    if ce_is_root; then
        rm -f "$share"/extension/counter_ext--*.sql
        (cd "$CE_TOP" && make -s install PG_CONFIG="$CE_PG_CONFIG" >/dev/null) || return 1
    fi
    local stamp
    stamp=$(stat -c %Y "$libdir/bin/postgres")
    if [ ! -f "$CE_STAGE/.stamp" ] || [ "$(cat "$CE_STAGE/.stamp")" != "$stamp" ]; then
        # Emptied, not removed: a stage under /var/tmp keeps its directory.
        rm -rf "${CE_STAGE:?}/usr" "$CE_STAGE/.stamp"
        mkdir -p "$CE_STAGE/usr/lib/postgresql" "$CE_STAGE/usr/share/postgresql"
        cp -al "$libdir" "$CE_STAGE/usr/lib/postgresql/" 2>/dev/null || cp -a "$libdir" "$CE_STAGE/usr/lib/postgresql/"
        cp -al "$share" "$CE_STAGE/usr/share/postgresql/" 2>/dev/null || cp -a "$share" "$CE_STAGE/usr/share/postgresql/"
        echo "$stamp" > "$CE_STAGE/.stamp"
    fi
    # Extensions installed after the stage was made (pgtap, pg_cron, hll...).
    cp -alf "$share/extension/." "$CE_STAGE$share/extension/" 2>/dev/null ||
        cp -af "$share/extension/." "$CE_STAGE$share/extension/"
    cp -alf "$libdir/lib/." "$CE_STAGE$libdir/lib/" 2>/dev/null || cp -af "$libdir/lib/." "$CE_STAGE$libdir/lib/"
    rm -f "$CE_STAGE$share"/extension/counter_ext--*.sql
    (cd "$CE_TOP" && make -s install PG_CONFIG="$CE_PG_CONFIG" DESTDIR="$CE_STAGE" >/dev/null) || return 1
    chmod -R a+rX "$CE_STAGE" 2>/dev/null || true
}

# ce_stage_released_scripts: the install script of every released version
# (src/sql/upgrade/releases) in the staged extension directory, beside this
# tree's scripts, for the tests that start at an old version (upgrade.sh,
# worker_upgrade.sh; the tree keeps no copy of them). Built from the commits
# that released them (test/released_scripts.sh, into build/released-sql), or
# taken from CE_RELEASED_SQL (test/versions.sh builds them on the host: a
# chroot's copy of the tree has no history). Exits when they cannot be had:
# no history, no test. ce_unstage_released_scripts (from the EXIT trap)
# removes them again; CE_RELEASED_VERSIONS lists the versions.
CE_RELEASED_STAGED=()
ce_stage_released_scripts() {
    local dir=${CE_RELEASED_SQL:-} ext v
    if [ -z "$dir" ]; then
        dir=$CE_TOP/build/released-sql
        rm -rf "$dir"
        CE_PG_CONFIG=$CE_PG_CONFIG bash "$CE_TOP/test/released_scripts.sh" "$dir" ||
            ce_die "the install scripts of the released versions could not be built from git history"
    fi
    ext=$CE_STAGE/usr/share/postgresql/$CE_PG_MAJOR/extension
    CE_RELEASED_VERSIONS=$(grep -v '^#' "$CE_TOP/src/sql/upgrade/releases" | awk 'NF { print $1 }')
    for v in $CE_RELEASED_VERSIONS; do
        [ -f "$dir/counter_ext--$v.sql" ] || ce_die "no install script of the released version $v in $dir"
        [ ! -e "$ext/counter_ext--$v.sql" ] || ce_die "$ext already holds counter_ext--$v.sql (this tree installs no old version)"
        cp "$dir/counter_ext--$v.sql" "$ext/" && chmod a+r "$ext/counter_ext--$v.sql" || ce_die "cannot write $ext"
        CE_RELEASED_STAGED+=("$ext/counter_ext--$v.sql")
    done
}
ce_unstage_released_scripts() {
    local f
    for f in "${CE_RELEASED_STAGED[@]}"; do rm -f "$f"; done
    CE_RELEASED_STAGED=()
}

ce_port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# ce_random_port: a port for a listener of the tests (a cluster, PgBouncer,
# an exporter, Redis), not listened on now, and below the kernel's range of
# ephemeral ports (ip_local_port_range), which outgoing connections take
# without listening: a port there can be free to connect to and still fail
# to bind (a prometheus of metrics_exporter.sh did, once). Callers retry on
# a failed start.
ce_random_port() {
    local low=32768 p
    { read -r low _ </proc/sys/net/ipv4/ip_local_port_range; } 2>/dev/null || low=32768
    [ "$low" -gt 21024 ] || low=21024
    for _ in $(seq 1 20); do
        p=$((20000 + RANDOM % (low - 20000)))
        ce_port_free "$p" && { echo "$p"; return 0; }
    done
    return 1
}

# ce_cluster_initdb NAME: prints a new directory holding a fresh cluster's
# data directory (initdb), not started
ce_cluster_initdb() {
    local dir
    dir=$(mktemp -d "${TMPDIR:-/tmp}/counter_ext.$1.XXXXXX") || return 1
    chmod 755 "$dir"
    mkdir "$dir/data"
    ce_is_root && chown -R postgres: "$dir"
    ce_as_owner "$CE_PGBIN/initdb" -D "$dir/data" -A trust -U "$(ce_owner_name)" -E UTF8 --locale=C.UTF-8 \
        --no-sync >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; rm -rf "$dir"; return 1; }
    echo "$dir"
}

# ce_cluster_start NAME [conf line ...]
# (CE_CLUSTER_DIR=DIR: in DIR, which ce_cluster_initdb made, instead of a new one)
ce_cluster_start() {
    local name=$1; shift
    local dir=${CE_CLUSTER_DIR:-} port try
    if [ -z "$dir" ]; then
        dir=$(ce_cluster_initdb "$name") || return 1
    fi
    {
        echo "listen_addresses = '127.0.0.1'"
        echo "unix_socket_directories = '$dir'"
        echo "shared_preload_libraries = 'counter_ext'"
        echo "fsync = off"
        echo "synchronous_commit = off"
        echo "full_page_writes = off"
        echo "max_connections = 120"
        echo "max_worker_processes = 24"
        echo "max_prepared_transactions = 10"
        echo "log_line_prefix = '%m [%p] %q%u@%d '"
        echo "lc_messages = 'C'"
        echo "timezone = 'UTC'"
        local line
        for line in "$@"; do echo "$line"; done
    } >>"$dir/data/postgresql.conf"
    for try in 1 2 3 4 5 6 7 8; do
        port=$(ce_random_port) || continue
        sed -i '/^port = /d' "$dir/data/postgresql.conf"
        echo "port = $port" >>"$dir/data/postgresql.conf"
        if ce_as_owner "$CE_PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null 2>&1; then
            declare -g "CE_${name}_DIR=$dir" "CE_${name}_PORT=$port" "CE_${name}_LOG=$dir/server.log"
            CE_CLUSTERS+=("$name")
            return 0
        fi
    done
    cat "$dir/server.log" >&2
    rm -rf "$dir"
    return 1
}

ce_cluster_use() {
    local p="CE_$1_PORT"
    export PGHOST=127.0.0.1 PGPORT=${!p} PGUSER=$(ce_owner_name) PGDATABASE=${2:-postgres}
}

# Restarts a cluster after a crash test (kill -9 of the postmaster).
ce_cluster_restart() {
    local d="CE_$1_DIR"
    ce_as_owner "$CE_PGBIN/pg_ctl" -D "${!d}/data" -l "${!d}/server.log" -w -t 60 restart -m immediate >/dev/null 2>&1 ||
        ce_as_owner "$CE_PGBIN/pg_ctl" -D "${!d}/data" -l "${!d}/server.log" -w -t 60 start >/dev/null
}

# Kills a cluster's postmaster with SIGKILL (a crash test), stops the load
# given as pids (our own processes), and waits for the orphaned backends.
ce_cluster_kill() { # ce_cluster_kill NAME [load pid ...]
    local d="CE_$1_DIR" postmaster children c p alive
    shift
    postmaster=$(head -1 "${!d}/data/postmaster.pid")
    children=$(ps -o pid= --ppid "$postmaster" | tr '\n' ' ')
    kill -9 "$postmaster"
    for p in "$@"; do kill -9 "$p" 2>/dev/null || true; done
    wait "$@" 2>/dev/null || true
    for _ in $(seq 1 100); do
        alive=0
        for c in $children; do kill -0 "$c" 2>/dev/null && alive=1; done
        [ $alive -eq 0 ] && break
        sleep 0.2
    done
    for c in $children; do kill -9 "$c" 2>/dev/null || true; done
    sleep 0.5
}

ce_cluster_stop() {
    local d="CE_$1_DIR"
    local dir=${!d:-}
    [ -n "$dir" ] && [ -d "$dir" ] || return 0
    ce_as_owner "$CE_PGBIN/pg_ctl" -D "$dir/data" -w -t 20 stop -m fast >/dev/null 2>&1 ||
        ce_as_owner "$CE_PGBIN/pg_ctl" -D "$dir/data" stop -m immediate >/dev/null 2>&1 || true
    if [ -n "${CE_KEEP_LOGS:-}" ]; then
        mkdir -p "$CE_KEEP_LOGS" && cp "$dir/server.log" "$CE_KEEP_LOGS/$1.server.log" 2>/dev/null
    fi
    rm -rf "$dir"
    declare -g "CE_$1_DIR="
}

ce_cluster_stop_all() {
    local name
    for name in "${CE_CLUSTERS[@]}"; do ce_cluster_stop "$name"; done
    CE_CLUSTERS=()
}

# Fails (and prints the lines) when a server log shows a backend crash.
ce_scan_log() {
    local hits
    hits=$(grep -E "terminated by signal|server process .* was terminated|was terminated by exception" "$1" 2>/dev/null || true)
    [ -z "$hits" ] && return 0
    ce_log "crash lines in $1:"
    ce_log "$hits"
    return 1
}

# ce_pgbouncer_start DIR "USER ..." "DB = host=... port=... dbname=..." ...:
# Debian's pgbouncer in transaction mode with one server connection per
# (database, role) pool, on a free loopback port, its files in DIR (made
# the server owner's), trust authentication for the USERs and the owner (its
# admin: psql -d pgbouncer). Sets CE_BOUNCER_PORT and CE_BOUNCER_PID (a child
# of the calling shell); returns when it answers. Stop it with
# ce_pgbouncer_stop DIR.
ce_pgbouncer_start() {
    local dir=$1 users=$2 try port= line u
    shift 2
    for try in 1 2 3 4 5 6 7 8; do
        port=$(ce_random_port) && break
    done
    {
        echo "[databases]"
        for line in "$@"; do echo "$line"; done
        cat <<INI
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
default_pool_size = 1
max_client_conn = 50
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
admin_users = $(ce_owner_name)
INI
    } >"$dir/pgbouncer.ini"
    for u in $users "$(ce_owner_name)"; do printf '"%s" ""\n' "$u"; done >"$dir/users.txt"
    ce_is_root && chown -R postgres: "$dir"
    ce_as_owner /usr/sbin/pgbouncer "$dir/pgbouncer.ini" >/dev/null 2>&1 &
    CE_BOUNCER_PID=$!
    CE_BOUNCER_PORT=$port
    for try in $(seq 1 50); do
        "$CE_PGBIN/psql" -X -h 127.0.0.1 -p "$port" -U "$(ce_owner_name)" -d pgbouncer -Atc "SHOW VERSION" \
            >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    cat "$dir/pgbouncer.log" >&2
    return 1
}

# ce_pgbouncer_stop DIR: stops the pgbouncer that ce_pgbouncer_start DIR
# started, by the pid in its pidfile (CE_BOUNCER_PID is runuser's when root,
# and killing runuser left pgbouncer running), and waits until it is gone.
ce_pgbouncer_stop() {
    local dir=$1 pid try
    pid=$(cat "$dir/pgbouncer.pid" 2>/dev/null)
    if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
        for try in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null
    fi
    if [ -n "${CE_BOUNCER_PID:-}" ]; then
        kill "$CE_BOUNCER_PID" 2>/dev/null
        wait "$CE_BOUNCER_PID" 2>/dev/null
    fi
    return 0
}

# ce_demo_sections ONE_NODE CITUS [REGEX]: the demo's sections whose file
# name matches REGEX (test/demo/NN_*.sql, in name order; run from the top of
# the tree) into the arrays named ONE_NODE and CITUS: the NN_*_citus.sql
# ones run last, on a three-node Citus cluster (test/citus.sh).
ce_demo_sections() {
    local -n ce_one=$1 ce_cit=$2
    local s
    ce_one=()
    ce_cit=()
    for s in test/demo/[0-9]*.sql; do
        [[ $(basename "$s") =~ ${3:-.} ]] || continue
        if [[ $s == *_citus.sql ]]; then
            ce_cit+=("$s")
        else
            ce_one+=("$s")
        fi
    done
}

# psql with the settings every script wants: stop on error, no psqlrc.
ce_psql() {
    "$CE_PGBIN/psql" -X -v ON_ERROR_STOP=1 -q "$@"
}

# ce_trap_holders: on exit, kills the background sessions a script started
# (their pids appended to ce_holders) and stops its clusters.
ce_holders=()
ce_stop_holders() {
    local p
    for p in "${ce_holders[@]}"; do kill "$p" 2>/dev/null || true; done
    ce_cluster_stop_all
}
ce_trap_holders() { trap ce_stop_holders EXIT; }

# The assertions of the script tests: each prints "ok: DESCRIPTION" or
# "FAIL: ..." and exits 1.
ce_fail() { echo "FAIL: $*"; exit 1; }
ce_expect() { # DESCRIPTION EXPECTED ACTUAL
    [ "$2" = "$3" ] || ce_fail "$1: expected '$2', got '$3'"
    echo "ok: $1"
}
ce_contains() { # DESCRIPTION NEEDLE HAYSTACK
    grep -qF -- "$2" <<<"$3" || ce_fail "$1: '$2' not in: $3"
    echo "ok: $1"
}
# ce_wait_true DB SQL SECONDS: polls until SQL (as the superuser, in DB)
# returns t; fails after SECONDS.
ce_wait_true() {
    local i
    for ((i = 0; i < $3 * 5; i++)); do
        [ "$(ce_psql -d "$1" -At -c "$2" 2>/dev/null || true)" = t ] && return 0
        sleep 0.2
    done
    return 1
}

# ce_callgrind_single BIN DATA OUT STATEMENT N [PRELUDE]: for the callgrind
# benchmarks (test/bench/*/*callgrind*.sh): in `postgres --single` (BIN's) on
# the stopped cluster's DATA, under callgrind, runs PRELUDE (SQL, one
# statement a line) and then STATEMENT prepared and executed N times, each in
# a transaction of its own; leaves OUT/cg.out and OUT/valgrind.txt (the
# server's messages too) and prints callgrind's totals ("Collected"). Fails
# when a statement raised an error.
ce_callgrind_single() {
    local bin=$1 data=$2 out=$3 stmt=$4 n=$5 prelude=${6:-}
    mkdir -p "$out" && chmod 777 "$out" || return 1
    {
        if [ -n "$prelude" ]; then printf '%s\n' "$prelude"; fi
        echo "PREPARE p AS $stmt"
        for _ in $(seq 1 "$n"); do echo "EXECUTE p"; done
    } >"$out/in.sql"
    chmod 644 "$out/in.sql"
    ce_as_owner valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" \
        "$bin/postgres" --single -D "$data" postgres <"$out/in.sql" >/dev/null 2>"$out/valgrind.txt"
    if grep -q ' ERROR: ' "$out/valgrind.txt"; then
        tail "$out/valgrind.txt" >&2
        return 1
    fi
    sed -n 's/^==[0-9]*== Collected : //p' "$out/valgrind.txt" | tail -1
}

# ce_bench_beside_release REF: for the benchmarks that compare this tree with
# a released version (test/bench/*/vs_release.sh): builds REF's source (git
# archive) in a temporary folder ($work, removed on exit) and starts two
# clusters with the durable defaults, "this" (this tree's build) and "ref"
# (REF's). Exits on failure.
ce_bench_beside_release() {
    local ref=$1
    ce_require_packages "${CE_TEST_PACKAGES[@]}" || exit 1
    ce_build_and_stage || exit 1
    work=$(mktemp -d)
    chmod 755 "$work" # the server's owner reaches REF's stage in it
    trap 'ce_cluster_stop_all; rm -rf "$work"' EXIT INT TERM
    mkdir "$work/ref"
    git -C "$CE_TOP" archive "$ref" | tar -x -C "$work/ref"
    ( export CE_TOP="$work/ref" CE_STAGE="$work/ref/build/stage"; source "$work/ref/test/lib.sh"
      ce_build_and_stage ) >"$work/ref-build.log" 2>&1 || { tail "$work/ref-build.log"; exit 1; }
    chmod -R a+rX "$work"
    local durable=("fsync = on" "synchronous_commit = on" "full_page_writes = on" "counter_ext.enabled = off")
    local this_bin=$CE_PGBIN ref_bin=$work/ref/build/stage${CE_PGBIN#$CE_STAGE}
    CE_PGBIN=$this_bin ce_cluster_start this "${durable[@]}" || exit 1
    CE_PGBIN=$ref_bin ce_cluster_start ref "${durable[@]}" || exit 1
}

# For the drop-beside-jobs tests (drop_beside_jobs.sh, citus_drop_beside_jobs.sh):
# ce_drop_sql NAME: the call that drops counter c_* or rollup r_* NAME
ce_drop_sql() {
    case $1 in
    r_*) echo "SELECT counter.rollup_drop('$1')" ;;
    c_*) echo "SELECT counter.untrack('$1')" ;;
    esac
}
# ce_drop_make_all RUN OBJECTS...: makes each object (make_sql NAME)
ce_drop_make_all() {
    local run=$1 o
    shift
    for o in "$@"; do $run -q -c "SET client_min_messages = warning" -c "$(make_sql "$o")" >/dev/null; done
}
# ce_drop_make_rounds RUN PID OBJECTS...: while process PID runs, drops each
# object and makes it again (the caller's make_sql NAME gives the call),
# through RUN (a function running psql); fails (the caller's fail) on any
# error; sets ce_drop_rounds to the number of rounds
ce_drop_make_rounds() {
    local run=$1 pid=$2 o out
    shift 2
    ce_drop_rounds=0
    while kill -0 "$pid" 2>/dev/null; do
        for o in "$@"; do
            [ -n "${CE_DROP_TRACE:-}" ] && echo "$(date +%T.%N | cut -c1-12) drop $o" >&2
            out=$($run -q -c "$(ce_drop_sql "$o")" 2>&1 >/dev/null) || fail "dropping $o failed: $out"
            [ -n "${CE_DROP_TRACE:-}" ] && echo "$(date +%T.%N | cut -c1-12) make $o" >&2
            out=$($run -q -c "SET client_min_messages = warning" -c "$(make_sql "$o")" 2>&1 >/dev/null) ||
                fail "making $o again failed: $out"
        done
        ce_drop_rounds=$((ce_drop_rounds + 1))
    done
}
