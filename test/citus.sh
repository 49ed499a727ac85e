# Citus for the tests: a real cluster (coordinator + 2 workers on loopback
# ports) for the test/scripts/citus_*.sh scripts. Source it after test/lib.sh;
# do not run it. See doc/citus.md.
#
# Citus comes from one of two places:
#   - installed for the PostgreSQL under test (citus.so and citus.control in
#     the system directories: ce_build_and_stage copies them into the stage);
#   - a source tarball given as CITUS_SRC=/path/citus-X.Y.Z.tar.gz (with
#     CITUS_PATCH=/path/fix.patch when that version needs a build fix for the
#     server's minor), built once into CE_CITUS_CACHE/<version>-pg<major>
#     (default /var/cache/counter_ext-citus as root) and reused by later runs;
#     each run installs the cached build into its stage. The sources are
#     third-party (AGPL): they are unpacked in the cache, never in this tree.
# When neither is there, ce_citus_prepare returns 77 with the reason in
# CE_CITUS_SKIP: the Citus tests are skipped (test/run.sh prints one line and
# does not count them as passed).

if ce_is_root; then
    CE_CITUS_CACHE=${CE_CITUS_CACHE:-/var/cache/counter_ext-citus}
else
    CE_CITUS_CACHE=${CE_CITUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/counter_ext-citus}
fi
CE_CITUS_SKIP=
# What building Citus needs (--without-libcurl; citus.so links libpq and
# OpenSSL only, so the server's -lselinux / -lpam need no -dev package).
CE_CITUS_BUILD_PACKAGES=(patch libicu-dev liblz4-dev libzstd-dev libkrb5-dev flex bison libreadline-dev zlib1g-dev
    libssl-dev libxslt1-dev libnuma-dev)

ce_citus_installed() {
    [ -f "/usr/lib/postgresql/$CE_PG_MAJOR/lib/citus.so" ] &&
        [ -f "/usr/share/postgresql/$CE_PG_MAJOR/extension/citus.control" ]
}

# ce_citus_build DIR: unpacks CITUS_SRC (+ CITUS_PATCH) in DIR/src, builds it
# and installs it into DIR/root (a DESTDIR). DIR/key records what was built.
ce_citus_build() {
    local dir=$1 key=$2 name
    rm -rf "$dir/src" "$dir/root" "$dir/key"
    mkdir -p "$dir/src" "$dir/root" || return 1
    tar -xzf "$CITUS_SRC" -C "$dir/src" || return 1
    name=$(ls "$dir/src")
    [ "$(echo "$name" | wc -l)" -eq 1 ] || { ce_log "unexpected layout in $CITUS_SRC"; return 1; }
    if [ -n "${CITUS_PATCH:-}" ]; then
        (cd "$dir/src/$name" && patch -p1 <"$CITUS_PATCH") >"$dir/build.log" 2>&1 || return 1
    fi
    ce_log "building $name for PostgreSQL $CE_PG_MAJOR in $dir (once; log: $dir/build.log)"
    # Without libcurl (Citus's usage statistics), unless the server's headers
    # define HAVE_LIBCURL (Debian's PostgreSQL 18, for OAuth): then Citus
    # compiles its curl code whatever configure says, so it must link libcurl.
    local curl=--without-libcurl
    if grep -q '^#define HAVE_LIBCURL 1' "$("$CE_PG_CONFIG" --includedir-server)/pg_config.h"; then
        curl=
        ce_require_packages libcurl4-openssl-dev || return 1
    fi
    (
        cd "$dir/src/$name" &&
            ./configure ${curl:+"$curl"} PG_CONFIG="$CE_PG_CONFIG" &&
            nice -n 10 make -j2 &&
            make install DESTDIR="$dir/root"
    ) >>"$dir/build.log" 2>&1 || { grep -E "error|Error" "$dir/build.log" | tail -15 >&2; return 1; }
    echo "$key" >"$dir/key"
}

# The vendored Citus source tarballs beside the repository, per major, for
# test/versions.sh and the demo: ../shared/vendor (CI clones the repository
# with shared/ beside it; CE_CITUS_VENDOR overrides).
citus_vendor=${CE_CITUS_VENDOR:-$CE_TOP/../shared/vendor}
# citus_for MAJOR: sets citus_src and citus_patch (empty: none), and
# citus_why (why a major runs without Citus).
citus_for() {
    local tarball= patch=
    citus_why=
    case $1 in
    15) tarball=citus-13.2.2.tar.gz patch=citus-13.2.2-pg15.20.patch ;; # 15.20 exports have_createdb_privilege
    17) tarball=citus-13.2.2.tar.gz ;;                                  # its copy of it is for 15 only
    18) tarball=citus-14.0.1.tar.gz ;;                                  # with libcurl (test/citus.sh)
    esac
    # CE_CITUS_TARBALL_<major> names another tarball of the vendor folder
    # (no patch), e.g. CE_CITUS_TARBALL_17=citus-14.0.1.tar.gz.
    local other=CE_CITUS_TARBALL_$1
    [ -n "${!other:-}" ] && tarball=${!other} patch=
    citus_src= citus_patch=
    if [ -z "$tarball" ]; then
        return 0
    elif [ ! -r "$citus_vendor/$tarball" ]; then
        citus_why="$citus_vendor/$tarball is not there"
        return 0
    fi
    citus_src=$(cd "$citus_vendor" && pwd)/$tarball
    if [ -n "$patch" ]; then
        [ -r "$citus_vendor/$patch" ] || { citus_src=; return 0; }
        citus_patch=$(cd "$citus_vendor" && pwd)/$patch
    fi
}

# ce_citus_prepare: makes Citus loadable by the staged server (call after
# ce_build_and_stage). 0: ready; 77: not available (CE_CITUS_SKIP says why);
# other: a given tarball failed to build (a failure, not a skip).
ce_citus_prepare() {
    if ce_citus_installed; then
        return 0
    fi
    if [ -z "${CITUS_SRC:-}" ]; then
        CE_CITUS_SKIP="Citus is not installed for PostgreSQL $CE_PG_MAJOR and no source tarball was given (CITUS_SRC)"
        [ -n "${CE_CITUS_WHY_NOT:-}" ] && CE_CITUS_SKIP="$CE_CITUS_SKIP: $CE_CITUS_WHY_NOT"
        return 77
    fi
    if [ ! -r "$CITUS_SRC" ]; then
        CE_CITUS_SKIP="CITUS_SRC=$CITUS_SRC cannot be read"
        return 77
    fi
    ce_require_packages "${CE_CITUS_BUILD_PACKAGES[@]}" || return 1
    local version dir key
    version=$(basename "$CITUS_SRC" .tar.gz)
    version=${version#citus-}
    dir=$CE_CITUS_CACHE/$version-pg$CE_PG_MAJOR
    key="$(sha256sum <"$CITUS_SRC" | cut -c1-16) ${CITUS_PATCH:+$(sha256sum <"$CITUS_PATCH" | cut -c1-16)} $("$CE_PG_CONFIG" --version)"
    mkdir -p "$dir" || return 1
    (
        # One build at a time per cache folder; later runs reuse it.
        flock 9 || exit 1
        [ -f "$dir/key" ] && [ "$(cat "$dir/key")" = "$key" ] && exit 0
        ce_citus_build "$dir" "$key"
    ) 9>"$dir/.lock" || return 1
    cp -a "$dir/root/usr/." "$CE_STAGE/usr/" || return 1
    chmod -R a+rX "$CE_STAGE/usr" 2>/dev/null || true
}

# ce_citus_cluster_start: starts the clusters citus_coord, citus_w1 and
# citus_w2 with citus and counter_ext preloaded, creates both extensions in
# DB (default postgres) on each, and registers the workers on the
# coordinator. Extra postgresql.conf lines may be given.
# CE_CITUS_COUNTER_VERSION: that version of counter_ext (default: the newest).
ce_citus_cluster_start() {
    local db=${CE_CITUS_DB:-postgres} names=(citus_coord citus_w1 citus_w2) pids=() work i p st=0
    # the three initdb at once, then the three servers, then the extensions
    # in the three at once (half the time of one after another)
    work=$(mktemp -d) || return 1
    for i in 0 1 2; do
        ce_cluster_initdb "${names[$i]}" >"$work/$i" &
        pids[$i]=$!
    done
    for i in 0 1 2; do wait "${pids[$i]}" || st=1; done
    for i in 0 1 2; do
        [ $st = 0 ] || break
        CE_CLUSTER_DIR=$(cat "$work/$i") ce_cluster_start "${names[$i]}" \
            "shared_preload_libraries = 'citus,counter_ext'" "counter_ext.enabled = off" "max_connections = 200" \
            "max_prepared_transactions = 200" "citus.shard_replication_factor = 1" \
            "citus.enable_statistics_collection = off" "$@" || st=1
    done
    rm -rf "$work"
    [ $st = 0 ] || return 1
    for i in 0 1 2; do
        p="CE_${names[$i]}_PORT"
        (
            if [ "$db" != postgres ]; then
                "$CE_PGBIN/createdb" -h 127.0.0.1 -p "${!p}" -U "$(ce_owner_name)" "$db" || exit 1
            fi
            ce_psql -h 127.0.0.1 -p "${!p}" -U "$(ce_owner_name)" -d "$db" \
                -c "CREATE EXTENSION citus; CREATE EXTENSION counter_ext${CE_CITUS_COUNTER_VERSION:+ VERSION '$CE_CITUS_COUNTER_VERSION'};"
        ) &
        pids[$i]=$!
    done
    for i in 0 1 2; do wait "${pids[$i]}" || st=1; done
    [ $st = 0 ] || return 1
    ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U "$(ce_owner_name)" -d "$db" -c "
        SELECT pg_catalog.citus_set_coordinator_host('127.0.0.1', $CE_citus_coord_PORT);
        SELECT pg_catalog.citus_add_node('127.0.0.1', $CE_citus_w1_PORT);
        SELECT pg_catalog.citus_add_node('127.0.0.1', $CE_citus_w2_PORT);" >/dev/null || return 1
}

# For a script run by hand (not through test/run.sh): builds and stages this
# tree and Citus, or prints the skip line and exits 77.
ce_citus_script_setup() {
    [ -n "${CE_CITUS_READY:-}" ] || ce_build_and_stage || exit 1
    local st=0
    ce_citus_ready || st=$?
    if [ $st -eq 77 ]; then
        echo "skipped: $CE_CITUS_SKIP"
        exit 77
    fi
    [ $st -eq 0 ] || exit 1
}

# ce_citus_ready: whether Citus is ready for the staged server: 0 when it is
# (prepared here, or before by test/run.sh: CE_CITUS_READY, exported for the
# scripts it runs); 77 when it is not available (CE_CITUS_SKIP says why);
# 1 when a given source tarball failed to build (said on stderr: a failure,
# not a skip). The one place the callers' three outcomes are decided.
ce_citus_ready() {
    [ -n "${CE_CITUS_READY:-}" ] && return 0
    local st=0
    ce_citus_prepare || st=$?
    case $st in
        0) export CE_CITUS_READY=1 ;;
        77) ;;
        *)
            echo "Citus ($CITUS_SRC) could not be built for PostgreSQL $CE_PG_MAJOR" >&2
            st=1
            ;;
    esac
    return $st
}

# ce_citus_mismatches RUN COUNTER TABLE FILTER [KEY]: how many keys (column
# KEY, a bigint; default k) of tracked counter COUNTER differ from count(*) of
# TABLE with FILTER, read through RUN (a function running psql on the
# coordinator); the truth is read into a temporary table first
# (doc/citus.md: never in one query with a distributed table).
ce_citus_mismatches() {
    local run=$1 c=$2 t=$3 f=$4 k=${5:-k}
    $run -tA <<SQL | grep -v '^$' | tail -1
CREATE TEMP TABLE truth AS SELECT $k, count(*) AS n FROM $t WHERE $f GROUP BY $k;
SELECT count(*) FROM truth t FULL JOIN (SELECT key::bigint AS $k, value FROM counter.tracked_values WHERE counter = '$c') v
    USING ($k) WHERE coalesce(t.n, 0) <> coalesce(v.value, 0);
SQL
}

# ce_citus_run_table_refused APP OWNER RUN_TABLE ROLE ID: the writer (APP,
# a function running psql as role ROLE) may not insert into the run table
# of tracked counter ID (42501), nor, granted INSERT on it by the owner
# (OWNER, likewise), make the owner's reconciliation run through it (its
# trigger asks for the owner's rights); echoes what failed, nothing when
# both were refused.
ce_citus_run_table_refused() {
    local app=$1 owner=$2 run=$3 role=$4 id=$5 out
    out=$($app -v VERBOSITY=verbose -c "INSERT INTO $run (anchor, w, keys) VALUES (1, now(), '{1}')" 2>&1) &&
        { echo "the writer inserted into the run table: $out"; return; }
    grep -q "ERROR:  42501" <<<"$out" || { echo "an insert into the run table by the writer: $out"; return; }
    $owner -q -c "GRANT INSERT ON $run TO $role"
    out=$($app -v VERBOSITY=verbose -c "INSERT INTO $run (anchor, w, keys) VALUES (1, now(), '{1}')" 2>&1)
    local st=$?
    $owner -q -c "REVOKE INSERT ON $run FROM $role"
    [ $st -ne 0 ] || { echo "the writer ran a reconciliation through the run table: $out"; return; }
    grep -q "ERROR:  42501: only the owner of tracked counter $id reconciles it" <<<"$out" ||
        echo "an insert into the run table by the writer granted INSERT: $out"
}

# ce_citus_script_start OWNER APP [CONF...]: the start of a test script that
# writes as two unprivileged roles: builds and stages (when run by hand),
# starts the cluster (unless CE_CITUS_KEEP: a cluster kept between runs;
# CONF: more postgresql.conf lines for its nodes) and defines
# coord (the superuser on the coordinator), owner and app (roles OWNER and
# APP on the coordinator), app_w1 and app_w2 (APP directly on worker 1, 2), on_node PORT
# (the superuser on any node, shards visible), nodes (the three ports) and
# fail.
ce_citus_script_start() {
    CE_CITUS_OWNER=$1
    CE_CITUS_APP=$2
    ce_citus_script_setup
    if [ -z "${CE_CITUS_KEEP:-}" ]; then
        trap 'ce_cluster_stop_all' EXIT
        ce_citus_cluster_start "${@:3}"
    fi
    nodes="$CE_citus_coord_PORT $CE_citus_w1_PORT $CE_citus_w2_PORT"
}
coord() { ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U "$(ce_owner_name)" -d postgres -v ON_ERROR_STOP=1 "$@"; }
owner() { ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U "$CE_CITUS_OWNER" -d postgres -v ON_ERROR_STOP=1 "$@"; }
app() { ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U "$CE_CITUS_APP" -d postgres -v ON_ERROR_STOP=1 "$@"; }
app_w1() { ce_psql -h 127.0.0.1 -p "$CE_citus_w1_PORT" -U "$CE_CITUS_APP" -d postgres -v ON_ERROR_STOP=1 "$@"; }
app_w2() { ce_psql -h 127.0.0.1 -p "$CE_citus_w2_PORT" -U "$CE_CITUS_APP" -d postgres -v ON_ERROR_STOP=1 "$@"; }
on_node() {
    local p=$1
    shift
    PGOPTIONS="-c citus.override_table_visibility=off" ce_psql -h 127.0.0.1 -p "$p" -U "$(ce_owner_name)" -d postgres \
        -v ON_ERROR_STOP=1 "$@"
}
fail() {
    echo "FAIL: $*"
    exit 1
}
# on_nodes_sum SQL: the sum, over every node (shards visible), of the number
# SQL returns there
on_nodes_sum() {
    local p
    for p in $nodes; do on_node "$p" -tA -c "$1"; done | awk '{ s += $1 } END { print s + 0 }'
}
# on_nodes_list SQL: what SQL returns on every node (shards visible), one
# line per node (its port, then the values), for a failure's message
on_nodes_list() {
    local p
    for p in $nodes; do echo "$p: $(on_node "$p" -tA -c "$1" | tr '\n' ' ')"; done
}

# ce_citus_dirty_mark NAME [HOUR]: marks HOUR (default 2026-07-01 10:00)
# dirty for rollup NAME (on the coordinator) and prints its id, for
# ce_citus_drop_beside_chunk
ce_citus_dirty_mark() {
    local rid
    rid=$(coord -tA -c "SELECT rollup_id FROM counter.rollups WHERE name = '$1'")
    coord -q -c "INSERT INTO counter.rollup_dirty VALUES ($rid, '${2:-2026-07-01 10:00+00}')"
    echo "$rid"
}
# ce_citus_drop_beside_chunk NAME PSQL-ARGS...: the owner's rollup_drop of
# NAME while a refresh chunk written out as PSQL-ARGS (one transaction on the
# coordinator, holding its locks for a few seconds) runs: the drop starts
# 1.5 s after the chunk, with $CE_DROP_OPTIONS as its PGOPTIONS; both must
# succeed (no deadlock either way round)
ce_citus_drop_beside_chunk() {
    local name=$1 chunk jout dout
    shift
    jout=$(mktemp) dout=$(mktemp)
    coord -q "$@" >"$jout" 2>&1 &
    chunk=$!
    sleep 1.5
    PGOPTIONS=${CE_DROP_OPTIONS:-} owner -q -c "SELECT counter.rollup_drop('$name')" >"$dout" 2>&1 ||
        fail "rollup_drop beside a refresh chunk failed: $(cat "$dout")"
    wait "$chunk" || fail "the refresh chunk beside rollup_drop failed: $(cat "$jout")"
    rm -f "$jout" "$dout"
    echo "ok: rollup_drop waits for a refresh chunk of its rollup (no deadlock)"
}

# ce_citus_event_tables SCHEMA: the event tables the rollup scripts write
# (citus_rollup.sh, citus_rollup_trigger.sh), made as the owner in SCHEMA
# (the owner's): the enum kind; the owner's filter function probe(kind),
# which raises unless it runs as the owner (counter_ext must run a filter as
# the owner, with search_path pinned); ev (distributed by k, 8 shards) and
# pev (partitioned by day: _a, _b and a default _d; distributed by k, 4
# shards), and their one-node twins ev_one and pev_one, plain tables on the
# coordinator. The writer may read and write them.
ce_citus_event_tables() {
    local s=$1
    owner -q -v s="$s" -v own="$CE_CITUS_OWNER" -v app="$CE_CITUS_APP" >/dev/null <<'SQL'
SET client_min_messages = warning;
CREATE TYPE :"s".kind AS ENUM ('view', 'bot', 'click');
SELECT format($f$CREATE FUNCTION %I.probe(k %I.kind) RETURNS boolean LANGUAGE plpgsql STABLE AS $b$
    BEGIN
        IF current_user <> %L THEN
            RAISE EXCEPTION 'the filter ran as %%', current_user;
        END IF;
        RETURN k <> 'bot';
    END $b$$f$, :'s', :'s', :'own') \gexec
SELECT format('CREATE TABLE %1$I.%2$I (id bigint NOT NULL, k bigint NOT NULL, at timestamptz NOT NULL,'
              ' kind %1$I.kind NOT NULL, v integer NOT NULL, PRIMARY KEY (k, id))', :'s', t)
FROM unnest(ARRAY['ev', 'ev_one']) t \gexec
SELECT format('CREATE TABLE %1$I.%2$I (id bigint NOT NULL, k bigint NOT NULL, at timestamptz NOT NULL,'
              ' kind %1$I.kind NOT NULL, v integer NOT NULL, PRIMARY KEY (k, id, at)) PARTITION BY RANGE (at)', :'s', t)
FROM unnest(ARRAY['pev', 'pev_one']) t \gexec
SELECT format('CREATE TABLE %1$I.%2$I PARTITION OF %1$I.%3$I %4$s', :'s', t || p, t, b)
FROM unnest(ARRAY['pev', 'pev_one']) t,
     (VALUES ('_a', 'FOR VALUES FROM (''2026-07-01'') TO (''2026-07-02'')'),
             ('_b', 'FOR VALUES FROM (''2026-07-02'') TO (''2026-07-03'')'), ('_d', 'DEFAULT')) v(p, b) \gexec
SELECT create_distributed_table(format('%I.ev', :'s'), 'k', shard_count := 8);
SELECT create_distributed_table(format('%I.pev', :'s'), 'k', shard_count := 4);
GRANT USAGE ON SCHEMA :"s" TO :"app";
GRANT SELECT, INSERT, UPDATE, DELETE ON :"s".ev, :"s".ev_one, :"s".pev, :"s".pev_one TO :"app";
SQL
}

# ce_citus_singles SCHEMA TABLE A B VIA: events A..B into SCHEMA.TABLE by the
# writer, one single-row INSERT (ON CONFLICT DO NOTHING) each, through the
# coordinator (VIA coord) or worker 1 (VIA w1): each commits on one node
# (the rows of ce_citus_deliver, one statement each)
ce_citus_singles() {
    local s=$1 run=app
    [ "$5" = w1 ] && run=app_w1
    seq "$3" "$4" | awk -v t="$s.$2" -v s="$s" '{ printf "INSERT INTO %s VALUES (%d, %d %% 97, %s, %s, %d %% 11) ON CONFLICT DO NOTHING;\n",
        t, $1, $1, "'\''2026-07-01 10:00+00'\''::timestamptz + (" $1 " % 37) * interval '\''47 minutes'\''",
        "(ARRAY['\''view'\'', '\''bot'\'', '\''click'\''])[1 + " $1 " % 3]::" s ".kind", $1 }' | $run -q >/dev/null
}
# ce_citus_state_total NAME: what the base and delta tables (their shards) of
# tracked counter NAME hold, summed
ce_citus_state_total() {
    local base delta
    base=$(coord -tA -c "SELECT counter_internal.tracked_table(t, 'base') FROM counter.tracked t WHERE name = '$1'")
    delta=$(coord -tA -c "SELECT counter_internal.tracked_table(t, 'delta') FROM counter.tracked t WHERE name = '$1'")
    coord -tA -c "SELECT (SELECT coalesce(sum(base), 0) FROM $base) + (SELECT coalesce(sum(delta), 0) FROM $delta)"
}
# ce_citus_buffered_reads SCHEMA KEY MAX TYPE FILTER WHAT: the reads check of
# the buffered counters of citus_buffered.sh and citus_buffered_anchored.sh
# ({ev,pev}_{f,n} and their one-node twins {ev,pev}_one_{f,n} on SCHEMA's
# tables, keyed by column KEY, _f with FILTER): counter.value and values_of
# of keys 0..MAX (of TYPE) equal count(*) on the coordinator, and on worker 1
# equal the coordinator's (ev_f, pev_n); WHAT names the moment in a failure
ce_citus_buffered_reads() {
    local s=$1 key=$2 max=$3 type=$4 filter=$5 what=$6 c t f got q want
    for c in ev_f ev_n pev_f pev_n ev_one_f pev_one_n; do
        t=${c%_*}
        f=$([ "${c##*_}" = f ] && echo "$filter" || echo true)
        got=$(app -tA <<SQL | grep -v '^$' | tail -1
CREATE TEMP TABLE c AS SELECT $key AS k, count(*) AS n FROM $s.$t WHERE $f GROUP BY 1;
CREATE TEMP TABLE truth AS SELECT g AS k, coalesce(c.n, 0) AS n FROM generate_series(0, $max) g LEFT JOIN c ON c.k = g;
CREATE TEMP TABLE vals AS SELECT * FROM counter.values_of('$c', ARRAY(SELECT g::$type FROM generate_series(0, $max) g));
CREATE TEMP TABLE one AS SELECT g AS k, counter.value('$c', g::$type) AS value FROM generate_series(0, $max) g;
SELECT count(*) FROM truth t LEFT JOIN vals v ON v.key = t.k LEFT JOIN one o ON o.k = t.k
WHERE v.value IS DISTINCT FROM t.n OR o.value IS DISTINCT FROM t.n;
SQL
)
        [ "$got" = 0 ] || fail "$what: counter.value / values_of('$c'): $got keys differ from count(*)"
    done
    for c in ev_f pev_n; do
        q="SELECT string_agg(k || ':' || counter.value('$c', k), ',' ORDER BY k) FROM generate_series(0, $max::$type) k"
        want=$(app -tA -c "$q")
        got=$(app_w1 -tA -c "$q" 2>&1) || fail "$what: on worker 1: $got"
        [ "$got" = "$want" ] || fail "$what: counter.value of $c on worker 1: $got, on the coordinator: $want"
        q="SELECT string_agg(key || ':' || value, ',' ORDER BY key) FROM counter.values_of('$c', ARRAY(SELECT generate_series(0, $max::$type)))"
        got=$(app_w1 -tA -c "$q" 2>&1) || fail "$what: on worker 1: $got"
        [ "$got" = "$want" ] || fail "$what: counter.values_of of $c on worker 1: $got, on the coordinator: $want"
    done
}
# ce_citus_buffered_all SCHEMA KEY FILTER WHAT [W1]: counter.tracked_values of
# the same counters against count(*) grouped by KEY, and the cluster against
# one node (a key at 0 may be listed on one side only: a reconciliation
# drops it); with W1 (w1) also ev_n and pev_f read on worker 1
ce_citus_buffered_all() {
    local s=$1 key=$2 filter=$3 what=$4 t c got
    for t in ev ev_one pev pev_one; do
        for c in "f|$filter" "n|true"; do
            got=$(ce_citus_mismatches app "${t}_${c%%|*}" "$s.$t" "${c#*|}" "$key")
            [ "$got" = 0 ] || fail "$what: counter ${t}_${c%%|*}: $got keys differ from count(*)"
        done
    done
    if [ "${5:-}" = w1 ]; then
        for c in "ev_n|true" "pev_f|$filter"; do
            got=$(ce_citus_mismatches app_w1 "${c%%|*}" "$s.${c%%_*}" "${c#*|}" "$key")
            [ "$got" = 0 ] || fail "$what: counter ${c%%|*} read on worker 1: $got keys differ from count(*)"
        done
    fi
    got=$(app -tA -c "SELECT count(*) FROM counter.tracked_values a FULL JOIN counter.tracked_values b
        ON b.counter = replace(a.counter, '_one_', '_') AND a.key = b.key
        WHERE (a.counter LIKE '%\_one\_%' OR a.counter IS NULL) AND (b.counter NOT LIKE '%\_one\_%' OR b.counter IS NULL)
          AND coalesce(a.value, 0) <> coalesce(b.value, 0)")
    [ "$got" = 0 ] || fail "$what: $got values differ between the cluster and one node"
}
# ce_citus_buffered_restart SCHEMA: the restart check of a script with
# buffered counters {ev,pev}_{f,n} on SCHEMA.ev and SCHEMA.pev (one-node
# twins ev_one, pev_one) and its check_all and check_reads: single-row
# writes through worker 1, worker 1 restarted as after a crash (what its
# buffer held is lost: some value falls short of count(*)), then the next
# flush schedules the repair of every counter (full_pending, one repair
# each) and the reconciliation makes every value equal count(*) again
ce_citus_buffered_restart() {
    local s=$1 lost=0 c total v got
    ce_citus_singles "$s" ev 5101 5400 w1
    ce_citus_singles "$s" pev 5101 5400 w1
    ce_citus_singles "$s" ev_one 5101 5400 coord
    ce_citus_singles "$s" pev_one 5101 5400 coord
    coord -q -c "UPDATE counter.tracked SET full_pending = false WHERE distributed"
    ce_cluster_restart citus_w1
    for c in ev_n pev_n; do
        total=$(app -tA -c "SELECT count(*) FROM $s.${c%_n}")
        v=$(app -tA -c "SELECT sum(value) FROM counter.tracked_values WHERE counter = '$c'")
        [ "$v" -lt "$total" ] && lost=1
    done
    [ $lost = 1 ] || fail "a restart of worker 1 lost nothing of the buffered adds (the test writes nothing buffered?)"
    for c in ev_f ev_n pev_f pev_n; do owner -q -c "SELECT counter.flush('$c')" >/dev/null; done
    got=$(coord -tA -c "SELECT string_agg(t.name || ':' || t.full_pending || ':' || f.repairs, ' ' ORDER BY t.name)
                        FROM counter.tracked t JOIN counter_internal.tracked_flushes f USING (counter_id) WHERE t.distributed")
    [ "$got" = "ev_f:true:1 ev_n:true:1 pev_f:true:1 pev_n:true:1" ] || fail "the flush after worker 1's restart scheduled: $got"
    for c in ev_f ev_n pev_f pev_n; do owner -q -c "SELECT counter.reconcile('$c')" >/dev/null; done
    check_all "worker 1 restarted, then flushed and reconciled"
    check_reads "worker 1 restarted, then flushed and reconciled"
    echo "ok: a worker restarted with adds in its buffer: the next flush schedules the repair, and the reconciliation makes every value equal count(*)"
}

# ce_citus_deliver SCHEMA TABLE A B [END] [VIA]: one delivery of events A..B
# into SCHEMA.TABLE by the writer, in one transaction ended by END (COMMIT,
# or ROLLBACK), through the coordinator or, with VIA w1, directly through
# worker 1; a re-delivered event conflicts and is not written
ce_citus_deliver() {
    local s=$1 t=$2 a=$3 b=$4 end=${5:-COMMIT} via=${6:-coord}
    local run=app
    [ "$via" = w1 ] && run=app_w1
    $run -q >/dev/null <<SQL
BEGIN;
INSERT INTO $s.$t SELECT g, g % 97, '2026-07-01 10:00+00'::timestamptz + (g % 37) * interval '47 minutes',
    (ARRAY['view', 'bot', 'click'])[1 + g % 3]::$s.kind, g % 11
FROM generate_series($a, $b) g
ON CONFLICT DO NOTHING;
$end;
SQL
}

# ce_citus_drift FILTER COUNTER...: drift injected into the state of each
# tracked COUNTER (named TABLE_X, filtered by FILTER when X is f), as a
# changed state without a write would: +5 on the base of keys 1, 2 and 3
# (at the least anchor of key 1 when the counter is keyed by another
# column than the distribution column), a delta row of -2 for key 4 and
# one of +1 for key 77777, which has no row and no base (found by the delta
# rows alone); then the 5 keys differ from count(*) (the script's
# mismatches) and counter.reconcile corrects those 5 keys by +16 and -2.
# Needs coord, owner, mismatches and fail.
ce_citus_drift() {
    local filter=$1 c t got
    shift
    coord -q -v names="{$(IFS=,; echo "$*")}" <<'SQL'
SELECT set_config('ce.drift_names', :'names', false);
DO $$
DECLARE
    c record;
    a text;
BEGIN
    FOR c IN SELECT counter_internal.tracked_table(t, 'base') AS b, counter_internal.tracked_table(t, 'delta') AS d,
                    t.anchor_column IS NOT NULL AS anchored
             FROM counter.tracked t WHERE name = ANY (current_setting('ce.drift_names')::text[]) LOOP
        IF c.anchored THEN
            EXECUTE format('SELECT min(anchor)::text FROM %s WHERE key = 1', c.b) INTO a;
            EXECUTE format('UPDATE %s SET base = base + 5 WHERE key IN (1, 2, 3) AND anchor = %L', c.b, a);
            EXECUTE format('INSERT INTO %s (key, bucket, shard, delta, anchor)'
                           ' VALUES (4, ''2026-07-01 10:00+00'', 999, -2, 7), (77777, ''2026-07-01 10:00+00'', 999, 1, 7)', c.d);
        ELSE
            EXECUTE format('UPDATE %s SET base = base + 5 WHERE key IN (1, 2, 3)', c.b);
            EXECUTE format('INSERT INTO %s (key, bucket, shard, delta)'
                           ' VALUES (4, ''2026-07-01 10:00+00'', 999, -2), (77777, ''2026-07-01 10:00+00'', 999, 1)', c.d);
        END IF;
    END LOOP;
END $$;
SQL
    for c in "$@"; do
        t=${c%_*}
        got=$(mismatches "$c" "$t" "$([ "${c##*_}" = f ] && echo "$filter" || echo true)")
        [ "$got" = 5 ] || fail "the injected drift of $c is not seen ($got keys)"
        got=$(owner -tA -c "SELECT keys_corrected || ' ' || drift_positive || ' ' || drift_negative || ' ' || outcome
                            FROM counter.reconcile('$c', '2026-07-06', all_keys => true)")
        [ "$got" = "5 16 -2 ok" ] || fail "reconcile of $c after injected drift: $got (5 keys, +16, -2 expected)"
    done
}
