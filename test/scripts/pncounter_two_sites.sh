#!/usr/bin/env bash
# Two primaries, one set of counters: two throwaway clusters (site_a and
# site_b, each with its own counter_ext.node_id) increment and decrement their
# local copies of 4 counters under concurrent pgbench load, and exchange
# states during the load in random order, with duplicates and delays:
#   - pulls through postgres_fdw into an inbox, applied later, at random,
#     old entries again and again (stale and duplicate deliveries);
#   - direct merges from the peer's foreign table;
#   - binary COPY of the states from one site into the other's inbox
#     (the type's send and recv functions on the wire).
# After the load stops and one final exchange, both sites hold byte-equal
# states whose value is every increment minus every decrement made anywhere
# (recorded per transaction in each site's ops table), each node's totals are
# exactly what that site did, and re-delivering old states changes nothing.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

LOAD_SECONDS=${LOAD_SECONDS:-15}
CLIENTS=3
COUNTERS=4
work=$(mktemp -d "${TMPDIR:-/tmp}/pncounter_two_sites.XXXXXX")
chmod 755 "$work"
exchanger_pid=
cleanup() {
    [ -n "$exchanger_pid" ] && kill "$exchanger_pid" 2>/dev/null && wait "$exchanger_pid" 2>/dev/null
    ce_cluster_stop_all
    rm -rf "$work"
}
trap cleanup EXIT

ce_cluster_start site_a "counter_ext.node_id = 'site_a'"
ce_cluster_start site_b "counter_ext.node_id = 'site_b'"
owner=$(ce_owner_name)

site() { # site NAME psql-args...: psql on database app of site NAME
    local p="CE_$1_PORT"
    shift
    ce_psql -h 127.0.0.1 -p "${!p}" -U "$owner" -d app "$@"
}

for s in site_a site_b; do
    port_var="CE_${s}_PORT"
    "$CE_PGBIN/createdb" -h 127.0.0.1 -p "${!port_var}" -U "$owner" app
    site $s <<SQL
CREATE EXTENSION counter_ext;
CREATE EXTENSION postgres_fdw;
CREATE TABLE counters (id int PRIMARY KEY, c counter.pncounter NOT NULL DEFAULT '{}');
INSERT INTO counters (id) SELECT generate_series(1, $COUNTERS);
-- Every committed local change, in the same transaction as the change.
CREATE TABLE ops (id int NOT NULL, amount bigint NOT NULL);
-- States received from the peer, applied later (and again) at random.
CREATE TABLE inbox (seq bigint GENERATED ALWAYS AS IDENTITY, id int NOT NULL, c counter.pncounter NOT NULL);
CREATE TABLE exchange_log (action text NOT NULL);
SQL
done

# Each site reads the other's counters through postgres_fdw.
for s in site_a site_b; do
    if [ $s = site_a ]; then peer=site_b; else peer=site_a; fi
    peer_port_var="CE_${peer}_PORT"
    site $s <<SQL
CREATE SERVER peer FOREIGN DATA WRAPPER postgres_fdw
    OPTIONS (host '127.0.0.1', port '${!peer_port_var}', dbname 'app');
CREATE USER MAPPING FOR CURRENT_USER SERVER peer OPTIONS (user '$owner');
CREATE SCHEMA peer;
IMPORT FOREIGN SCHEMA public LIMIT TO (counters) FROM SERVER peer INTO peer;

-- Fetch the peer's current states into the inbox (delivered later).
CREATE PROCEDURE pull() LANGUAGE sql AS \$\$
    INSERT INTO inbox (id, c) SELECT id, c FROM peer.counters;
    INSERT INTO exchange_log VALUES ('pull');
\$\$;

-- Apply n inbox entries chosen at random: old ones, new ones, the same twice.
CREATE PROCEDURE apply_random(n int) LANGUAGE plpgsql AS \$\$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT i.id, i.c FROM inbox i, generate_series(1, 2) ORDER BY random() LIMIT n LOOP
        UPDATE counters SET c = counters.c OPERATOR(counter.||) r.c WHERE id = r.id;
        INSERT INTO exchange_log VALUES ('apply');
        COMMIT;
    END LOOP;
END \$\$;

-- Merge the peer's current states straight from the foreign table.
CREATE PROCEDURE merge_direct() LANGUAGE sql AS \$\$
    UPDATE counters t SET c = t.c OPERATOR(counter.||) p.c FROM peer.counters p WHERE p.id = t.id;
    INSERT INTO exchange_log VALUES ('direct');
\$\$;

-- Apply everything in the inbox at once, through the merge aggregate.
CREATE PROCEDURE apply_all() LANGUAGE sql AS \$\$
    UPDATE counters t SET c = t.c OPERATOR(counter.||) m.c
    FROM (SELECT id, counter.pncounter_merge_agg(c) AS c FROM inbox GROUP BY id) m
    WHERE m.id = t.id;
\$\$;
SQL
done

cat >"$work/load.sql" <<SQL
\set id random(1, $COUNTERS)
\set amt random(1, 1000)
\set dir random(0, 2)
BEGIN;
\if :dir = 0
UPDATE counters SET c = counter.pncounter_decrement(c, :amt) WHERE id = :id;
INSERT INTO ops VALUES (:id, -:amt);
\else
UPDATE counters SET c = counter.pncounter_increment(c, :amt) WHERE id = :id;
INSERT INTO ops VALUES (:id, :amt);
\endif
END;
SQL

binary_copy() { # binary_copy FROM TO: FROM's states into TO's inbox, through send/recv
    site "$1" -c "COPY (SELECT id, c FROM counters) TO STDOUT (FORMAT binary)" >"$work/states.bin"
    site "$2" -c "COPY inbox (id, c) FROM STDIN (FORMAT binary)" <"$work/states.bin"
    site "$2" -c "INSERT INTO exchange_log VALUES ('binary')"
}

exchanger() {
    local i=0 action
    # The first round does every kind of exchange once on each side; then random.
    local fixed=(0 1 2 3 4 5 6 7)
    while [ ! -e "$work/stop" ]; do
        if [ $i -lt ${#fixed[@]} ]; then action=${fixed[$i]}; else action=$((RANDOM % 8)); fi
        case $action in
            0) site site_a -c "CALL pull()" ;;
            1) site site_b -c "CALL pull()" ;;
            2) site site_a -c "CALL apply_random(1 + $((RANDOM % 4)))" ;;
            3) site site_b -c "CALL apply_random(1 + $((RANDOM % 4)))" ;;
            4) binary_copy site_a site_b ;;
            5) binary_copy site_b site_a ;;
            6) site site_a -c "CALL merge_direct()" ;;
            7) site site_b -c "CALL merge_direct()" ;;
        esac
        i=$((i + 1))
        sleep "0.$((RANDOM % 4))"
    done
}

echo "load: $CLIENTS clients per site for $LOAD_SECONDS s, states exchanged meanwhile"
exchanger &
exchanger_pid=$!
"$CE_PGBIN/pgbench" -h 127.0.0.1 -p "$CE_site_a_PORT" -U "$owner" -n -c $CLIENTS -j 1 -T "$LOAD_SECONDS" \
    -f "$work/load.sql" app >"$work/pgbench_a.txt" 2>&1 &
pgbench_a=$!
"$CE_PGBIN/pgbench" -h 127.0.0.1 -p "$CE_site_b_PORT" -U "$owner" -n -c $CLIENTS -j 1 -T "$LOAD_SECONDS" \
    -f "$work/load.sql" app >"$work/pgbench_b.txt" 2>&1 &
pgbench_b=$!
st=0
wait $pgbench_a || st=1
wait $pgbench_b || st=1
touch "$work/stop"
wait "$exchanger_pid" || st=1
exchanger_pid=
grep -E "^(number of transactions actually processed|number of failed)" "$work/pgbench_a.txt" "$work/pgbench_b.txt" || true
if [ $st -ne 0 ]; then
    cat "$work/pgbench_a.txt" "$work/pgbench_b.txt"
    echo "FAILED: a load client or the exchanger failed"
    exit 1
fi

for s in site_a site_b; do
    echo "$s exchanges during the load: $(site $s -At -c "SELECT string_agg(action || '=' || n, ' ' ORDER BY action)
        FROM (SELECT action, count(*) n FROM exchange_log GROUP BY action) x")"
    # The peer's node arrived during the load, not only at the end.
    peer_seen=$(site $s -At -c "SELECT count(*) FROM counters, counter.pncounter_nodes(c) n
        WHERE n.node <> current_setting('counter_ext.node_id')")
    if [ "$peer_seen" -eq 0 ]; then
        echo "FAILED: $s never merged a state of its peer during the load"
        exit 1
    fi
done

# The final exchange: each side pulls the other's last states and applies its
# whole inbox; a stale duplicate of everything is delivered as well.
site site_a -c "CALL pull()" -c "CALL apply_all()"
site site_b -c "CALL pull()" -c "CALL apply_all()"
binary_copy site_a site_b
site site_b -c "CALL apply_all()"

fail=0
check() { # check DESCRIPTION SQL-returning-a-boolean SITE
    local got
    got=$(site "$3" -At -c "$2")
    if [ "$got" = t ]; then
        echo "ok - $1 ($3)"
    else
        echo "not ok - $1 ($3): got '$got'"
        fail=1
    fi
}

# Truth: every change committed anywhere.
site site_a -At -c "COPY (SELECT id, amount FROM ops) TO STDOUT" >"$work/ops_a.txt"
site site_b -At -c "COPY (SELECT id, amount FROM ops) TO STDOUT" >"$work/ops_b.txt"
for s in site_a site_b; do
    site $s -c "CREATE TEMP TABLE all_ops (id int, amount bigint, site text)" \
        -c "\\copy all_ops (id, amount) FROM '$work/ops_a.txt'" -c "UPDATE all_ops SET site = 'site_a' WHERE site IS NULL" \
        -c "\\copy all_ops (id, amount) FROM '$work/ops_b.txt'" -c "UPDATE all_ops SET site = 'site_b' WHERE site IS NULL" \
        -c "CREATE TABLE truth AS SELECT * FROM all_ops"
done

for s in site_a site_b; do
    check "at least 100 changes per site" \
        "SELECT bool_and(n >= 100) FROM (SELECT count(*) n FROM truth GROUP BY site) x" $s
    check "every counter's value is all increments minus all decrements made anywhere" \
        "SELECT bool_and(coalesce(counter.pncounter_value(c) = t.total, false))
           FROM counters LEFT JOIN (SELECT id, sum(amount) AS total FROM truth GROUP BY id) t USING (id)" $s
    check "each node's totals are exactly what its site did" \
        "SELECT count(*) = (SELECT count(*) FROM (SELECT DISTINCT id, site FROM truth) d)
                AND bool_and(n.increments = coalesce(t.p, 0) AND n.decrements = coalesce(t.n, 0))
           FROM counters, counter.pncounter_nodes(c) n
           LEFT JOIN LATERAL (SELECT sum(amount) FILTER (WHERE amount > 0) AS p,
                                     -sum(amount) FILTER (WHERE amount < 0) AS n
                              FROM truth WHERE truth.id = counters.id AND truth.site = n.node) t ON true" $s
done

# Both sites hold the same bytes.
a_states=$(site site_a -At -c "SELECT string_agg(id || ' ' || counter.pncounter_send(c)::text, ',' ORDER BY id) FROM counters")
b_states=$(site site_b -At -c "SELECT string_agg(id || ' ' || counter.pncounter_send(c)::text, ',' ORDER BY id) FROM counters")
if [ "$a_states" = "$b_states" ]; then
    echo "ok - both sites hold byte-equal states"
else
    echo "not ok - the sites differ:"
    echo "  site_a: $a_states"
    echo "  site_b: $b_states"
    fail=1
fi

# Re-delivery of anything, any number of times, changes nothing.
site site_a -c "CALL apply_random(50)" -c "CALL merge_direct()" -c "CALL apply_all()"
site site_b -c "CALL pull()" -c "CALL apply_random(50)" -c "CALL merge_direct()"
binary_copy site_b site_a
site site_a -c "CALL apply_all()"
for s in site_a site_b; do
    now=$(site $s -At -c "SELECT string_agg(id || ' ' || counter.pncounter_send(c)::text, ',' ORDER BY id) FROM counters")
    if [ "$now" = "$a_states" ]; then
        echo "ok - re-delivering old states changed nothing ($s)"
    else
        echo "not ok - re-delivery changed $s: $now"
        fail=1
    fi
done
site site_a -c "SELECT id, c, c::bigint AS value FROM counters ORDER BY id"

ce_scan_log "$CE_site_a_LOG" || fail=1
ce_scan_log "$CE_site_b_LOG" || fail=1
[ $fail -eq 0 ] && echo "pncounter_two_sites: all checks passed"
exit $fail
