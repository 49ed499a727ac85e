#!/usr/bin/env bash
# counter_ext behind PgBouncer (Debian's pgbouncer) in transaction mode, one
# server connection per (database, role) pool, so every client of a role
# shares it: the main features through the pooler, and the documented ways
# (doc/operations.md) to give each writer its node id and hll precision and
# to watch drift without LISTEN:
#   - node id per role (ALTER ROLE ... SET counter_ext.node_id, by a
#     superuser; roles cannot SET it themselves), or an explicit node
#     argument: each client's increments count for its own node;
#   - hll precision per role or database (ALTER ROLE/DATABASE ... SET), an
#     explicit precision argument, or SET LOCAL inside the transaction; a
#     plain SET is shown to leak to the next client, SET LOCAL not;
#   - drift: counter.tracked_history / counter.tracked_drift polled through
#     the pooler show the reconciliation run and its drift.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
fail() { echo "FAILED: $*"; exit 1; }
ce_require_packages pgbouncer || exit 1
[ -x /usr/sbin/pgbouncer ] || fail "no /usr/sbin/pgbouncer"
work=$(mktemp -d) || exit 1
chmod 755 "$work"
cleanup() {
    ce_pgbouncer_stop "$work"
    ce_cluster_stop_all
    rm -rf "$work"
}
trap cleanup EXIT
ce_cluster_start pool "counter_ext.enabled = off" || exit 1
ce_cluster_use pool
"$CE_PGBIN/createdb" app || exit 1
ce_psql -d app -c "CREATE EXTENSION counter_ext" \
    -c "CREATE ROLE site_a LOGIN; CREATE ROLE site_b LOGIN; CREATE ROLE writer LOGIN" \
    -c "ALTER ROLE site_a SET counter_ext.node_id = 'site_a'" \
    -c "ALTER ROLE site_b SET counter_ext.node_id = 'site_b'" \
    -c "ALTER ROLE site_a SET counter_ext.hll_default_precision = 10" \
    -c "ALTER DATABASE app SET counter_ext.hll_default_precision = 12" \
    -c "GRANT CREATE ON SCHEMA public TO writer" \
    -c "CREATE TABLE public.page_views (page text PRIMARY KEY, views counter.pncounter NOT NULL DEFAULT '{}');
        INSERT INTO public.page_views (page) VALUES ('/home');
        GRANT SELECT, UPDATE ON public.page_views TO site_a, site_b" >/dev/null || fail "set-up"

ce_pgbouncer_start "$work" "site_a site_b writer" "app = host=127.0.0.1 port=$CE_pool_PORT dbname=app" ||
    fail "pgbouncer does not start"
port=$CE_BOUNCER_PORT
# via ROLE SQL...: one client connection through the pooler
via() { local role=$1; shift; "$CE_PGBIN/psql" -X -v ON_ERROR_STOP=1 -q -h 127.0.0.1 -p "$port" -U "$role" -d app -At "$@"; }
via writer -c "SELECT 1" >/dev/null || { cat "$work/pgbouncer.log"; fail "pgbouncer does not answer"; }
# The clients of one role share one server connection (the pool has one).
[ "$(via site_a -c "SELECT pg_backend_pid()")" = "$(via site_a -c "SELECT pg_backend_pid()")" ] ||
    fail "two clients of site_a did not share the server connection: the test would prove nothing"

# pncounter: increments without a node argument count for the role's node.
for i in 1 2 3; do
    via site_a -c "UPDATE public.page_views SET views = counter.pncounter_increment(views, 2) WHERE page = '/home'" || fail "site_a"
    via site_b -c "UPDATE public.page_views SET views = counter.pncounter_increment(views, 5) WHERE page = '/home'" || fail "site_b"
done
via site_b -c "UPDATE public.page_views SET views = counter.pncounter_decrement(views, 1, node => 'site_b') WHERE page = '/home'" ||
    fail "explicit node"
views=$(via site_a -c "SELECT views::text FROM public.page_views")
[ "$views" = '{"site_a":[6,0],"site_b":[15,1]}' ] || fail "node ids: $views"
# A role cannot change its node id (a superuser-only setting), so it cannot leak.
out=$(via site_a -c "SET counter_ext.node_id = 'site_b'" 2>&1) && fail "site_a could SET its node id"
grep -q "permission denied" <<<"$out" || fail "unexpected: $out"
echo "pncounter: each role's increments count for its own node through a shared server connection"

# hll precision: the role's, the database's, an explicit argument, SET LOCAL.
p() { via "$1" -c "SELECT (counter.hll_info(counter.hll_add_agg(g))).precision FROM generate_series(1, 100) g"; }
[ "$(p site_a)" = 10 ] || fail "site_a's precision is $(p site_a), not 10 (ALTER ROLE)"
[ "$(p writer)" = 12 ] || fail "writer's precision is $(p writer), not 12 (ALTER DATABASE)"
[ "$(via writer -c "SELECT (counter.hll_info(counter.hll_add_agg(g, 14))).precision FROM generate_series(1, 100) g")" = 14 ] ||
    fail "explicit precision"
[ "$(via writer -c "BEGIN" -c "SET LOCAL counter_ext.hll_default_precision = 9" \
      -c "SELECT (counter.hll_info(counter.hll_add_agg(g))).precision FROM generate_series(1, 100) g" -c "COMMIT")" = 9 ] ||
    fail "SET LOCAL"
[ "$(p writer)" = 12 ] || fail "SET LOCAL leaked to the next client"
# What the documentation warns about: a plain SET stays on the server
# connection, and the next client of the role gets it.
via writer -c "SET counter_ext.hll_default_precision = 8" || fail "SET"
[ "$(p writer)" = 8 ] || fail "expected the plain SET to leak through the pooler (the documented hazard)"
via writer -c "RESET counter_ext.hll_default_precision" || fail "RESET"
[ "$(p writer)" = 12 ] || fail "RESET"
echo "hll precision: per role, per database, explicit, SET LOCAL all right; a plain SET leaks, as documented"

# Tracked counters and a rollup through the pooler, owned by writer.
via writer -c "CREATE TABLE public.likes (post_id int NOT NULL, at timestamptz NOT NULL DEFAULT now())" \
    -c "SELECT counter.track('likes', 'public.likes', 'post_id', 'at', mode => 'application', watermark_lag => '0 seconds')" \
    -c "CREATE TABLE public.clicks (link_id int NOT NULL, at timestamptz NOT NULL)" \
    -c "SELECT counter.rollup_create('clicks_hourly', 'public.clicks', 'at', '{link_id}')" >/dev/null || fail "registering"
for i in $(seq 1 10); do
    via writer -c "BEGIN" -c "INSERT INTO public.likes (post_id) SELECT g % 3 FROM generate_series(1, $i) g" \
        -c "SELECT counter.add('likes', k, n) FROM (SELECT g % 3 AS k, count(*) AS n FROM generate_series(1, $i) g GROUP BY 1) s" \
        -c "INSERT INTO public.clicks SELECT g % 4, now() - (g % 3) * interval '1 hour' FROM generate_series(1, 7 * $i) g" \
        -c "COMMIT" >/dev/null || fail "writes through the pooler"
done
# Rows whose add never happened: the drift reconciliation finds.
via writer -c "INSERT INTO public.likes (post_id, at) SELECT 1, now() - interval '1 minute' FROM generate_series(1, 4)" >/dev/null
via writer -c "SELECT sum(n - counter.value('likes', k)) FROM (SELECT post_id AS k, count(*) AS n FROM public.likes GROUP BY 1) s" |
    grep -qx 4 ||
    fail "the counter should be off by the 4 rows without an add"
via writer -c "SELECT keys_corrected FROM counter.reconcile('likes', all_keys => true)" >/dev/null 2>&1 || fail "reconcile"
[ "$(via writer -c "SELECT bool_and(counter.value('likes', k) = n) FROM (SELECT post_id AS k, count(*) AS n FROM public.likes GROUP BY 1) s")" = t ] ||
    fail "after reconcile, value = count(*)"
# Polling instead of LISTEN: the drift is in the views, for any client.
[ "$(via writer -c "SELECT drift_negative FROM counter.tracked_history WHERE counter = 'likes' ORDER BY run_id DESC LIMIT 1")" = -4 ] ||
    fail "tracked_history does not show the drift: $(via writer -c "SELECT * FROM counter.tracked_history" 2>&1)"
[ "$(via writer -c "SELECT drift_negative FROM counter.tracked_drift WHERE counter = 'likes'")" = -4 ] ||
    fail "tracked_drift does not show the drift"
[ "$(via writer -c "SELECT count(*) FROM (SELECT link_id, date_bin('1 hour', at, '2000-01-01 00:00+00') AS hour, count(*) AS n
                                       FROM public.clicks GROUP BY 1, 2) e
                     FULL JOIN public.clicks_hourly r USING (link_id, hour) WHERE r.count IS DISTINCT FROM e.n")" = 0 ] ||
    fail "the rollup is not GROUP BY of the events"
echo "tracked add/value/reconcile, drift views and a rollup: exact through the pooler"
# No advisory lock is left on the shared server connections.
[ "$(ce_psql -d app -Atc "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")" = 0 ] || fail "an advisory lock was left"
ce_scan_log "$CE_pool_LOG" || fail "crash in the server log"
echo ok
