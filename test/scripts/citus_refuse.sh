#!/usr/bin/env bash
# Issue 21 item 1, the part of it 1.5 does: on a table Citus distributes
# (hash-distributed, reference, or a partition of a distributed partitioned
# table), what counter_ext cannot serve there yet is refused when it is made
# (0A000 with a hint), leaving nothing behind, so that no write to the table
# fails because counter_ext is there (1.4, with citus.enable_unsafe_triggers
# on: track and rollup_create succeeded, then every INSERT failed on the
# workers). An application-mode counter, which works there, is still made
# and counts exactly (with a filter too from 1.6: test/scripts/citus_tracked.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
source test/citus.sh
ce_citus_script_setup

trap 'ce_cluster_stop_all' EXIT
ce_citus_cluster_start
coord() { ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U "$(ce_owner_name)" -d postgres "$@"; }
fail() { echo "FAIL: $*"; exit 1; }

coord <<'SQL'
CREATE TABLE clicks (id bigint, link_id bigint NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON clicks (at);
SELECT create_distributed_table('clicks', 'link_id', shard_count := 8);
CREATE TABLE links (link_id bigint PRIMARY KEY, at timestamptz NOT NULL DEFAULT now());
SELECT create_reference_table('links');
CREATE TABLE ev (id bigint, k bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
CREATE TABLE ev_2026 PARTITION OF ev FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
SELECT create_distributed_table('ev', 'k', shard_count := 8);
SQL

# refused (0A000), on every kind of Citus table, with unsafe triggers allowed
for call in \
    "counter.track('c1', 'clicks', 'link_id', 'at')" \
    "counter.track('c2', 'clicks', 'link_id', 'at', filter => 'id > 0')" \
    "counter.track('c3', 'links', 'link_id', 'at')" \
    "counter.track('c4', 'ev_2026', 'k', 'at')" \
    "counter.track('c5', 'ev', 'k', 'at')" \
    "counter.rollup_create('r1', 'clicks', 'at', '{link_id}')" \
    "counter.rollup_create('r2', 'clicks', 'at', '{link_id}', mode => 'deferred')" \
    "counter.rollup_create('r3', 'ev', 'at', '{k}')"; do
    out=$(coord -v VERBOSITY=verbose -c "SET citus.enable_unsafe_triggers = on" -c "SELECT $call" 2>&1) &&
        fail "accepted: $call"
    case $out in
    *"ERROR:  0A000: "*"a table Citus distributes, is not supported yet"*) echo "ok: refused: $call" ;;
    *) fail "$call failed, but not with the refusal: $out" ;;
    esac
done

# nothing left behind, and every write works
got=$(coord -tA <<'SQL'
SELECT (SELECT count(*) FROM counter.tracked) + (SELECT count(*) FROM counter.rollups)
     + (SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relname IN ('clicks', 'links', 'ev', 'ev_2026') AND NOT t.tgisinternal);
SQL
)
[ "$got" = 0 ] || fail "refused registrations left $got catalog rows or triggers"
coord -c "INSERT INTO clicks SELECT g, g % 17, '2026-07-01 10:00+00' FROM generate_series(1, 500) g" \
    -c "INSERT INTO links SELECT DISTINCT link_id FROM clicks" \
    -c "INSERT INTO ev SELECT g, g % 5, '2026-07-01 10:00+00' FROM generate_series(1, 100) g" >/dev/null

# what works there is still made: an application-mode counter
# (read against counts kept in a temporary table: a query over the
# distributed table that calls counter.value is sent whole to the workers,
# which have no counter; doc/citus.md)
got=$(coord -tA <<'SQL'
SELECT counter.track('app', 'clicks', 'link_id', 'at', mode => 'application') > 0;
BEGIN;
INSERT INTO clicks VALUES (1000, 3, '2026-07-01 11:00+00');
SELECT counter.add('app', 3::bigint, 1, '2026-07-01 11:00+00');
COMMIT;
SELECT outcome FROM counter.reconcile('app', '2026-07-02', all_keys => true);
CREATE TEMP TABLE truth AS SELECT link_id AS l, count(*) AS n FROM clicks GROUP BY link_id;
SELECT count(*) FILTER (WHERE counter.value('app', l) <> n) FROM truth;
SQL
)
got=$(printf '%s\n' "$got" | grep -v '^$')
[ "$got" = "$(printf 't\nok\n0')" ] || fail "the application-mode counter on a distributed table: $got"
echo "ok: an application-mode counter without a filter is made and equals count(*) for every key"
