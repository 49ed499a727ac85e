#!/usr/bin/env bash
# Dropping a counter or a rollup never deadlocks with its jobs. On one
# table, with writers inserting, moving (event-time updates: dirty hours)
# and deleting rows all the time: a trigger-mode, a deferred and a buffered
# rollup and a trigger-mode, an application-mode and a buffered counter;
# a loop runs their jobs' work by hand without pause (rollup_refresh_dirty,
# rollup_flush, reconcile, flush), and the main loop drops each object and
# makes it again, over and over (CE_DROP_SECONDS, default 40). Then: no
# 40P01 in any session or in the server log, every drop and make succeeded,
# and after the writers stop each rollup equals GROUP BY and each counter
# count(*) (the objects made last are right). Seen failing (deadlock
# detected, in rollup_drop) with rollup_drop dropping the rollup table
# before it deleted the dirty marks.
# lane: side
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
seconds=${CE_DROP_SECONDS:-40}
ce_trap_holders
work=$(mktemp -d)   # (removed at the end; left for a look when a check fails)
fail() { ce_fail "$@"; }

ce_cluster_start dj "counter_ext.enabled = off" "deadlock_timeout = 100ms" || fail "cannot start the cluster"
ce_cluster_use dj
"$CE_PGBIN/createdb" dj
export PGDATABASE=dj
ce_psql -q <<'SQL'
CREATE EXTENSION counter_ext;
CREATE TABLE ev (id bigint PRIMARY KEY, k integer NOT NULL, t timestamptz NOT NULL);
CREATE INDEX ON ev (t);
INSERT INTO ev SELECT g, g % 20, now() - (g % 180) * interval '1 minute' FROM generate_series(1, 2000) g;
SQL

# what the main loop drops and makes again (name, then the call that makes it)
make_sql() {
    case $1 in
    r_trig) echo "SELECT counter.rollup_create('r_trig', 'ev', 't', '{k}')" ;;
    r_def) echo "SELECT counter.rollup_create('r_def', 'ev', 't', '{k}', mode => 'deferred')" ;;
    r_buf) echo "SELECT counter.rollup_create('r_buf', 'ev', 't', '{k}', mode => 'buffered')" ;;
    c_trig) echo "SELECT counter.track('c_trig', 'ev', 'k', 't', watermark_lag => '0')" ;;
    c_app) echo "SELECT counter.track('c_app', 'ev', 'k', 't', mode => 'application', watermark_lag => '0')" ;;
    c_buf) echo "SELECT counter.track('c_buf', 'ev', 'k', 't', buffered => true, watermark_lag => '0')" ;;
    esac
}
objects="r_trig r_def r_buf c_trig c_app c_buf"
# shellcheck disable=SC2086
ce_drop_make_all ce_psql $objects

# writers: new rows over the last 3 hours, moves across hours, deletes
cat >"$work/write.sql" <<'SQL'
\set id random(100000, 900000000)
\set k random(0, 19)
INSERT INTO ev VALUES (:id, :k, now() - random() * interval '3 hours') ON CONFLICT (id) DO NOTHING;
SQL
cat >"$work/move.sql" <<'SQL'
\set k random(0, 19)
UPDATE ev SET t = t - interval '1 hour' WHERE id = (SELECT id FROM ev WHERE k = :k ORDER BY id DESC LIMIT 1 OFFSET 3);
SQL
cat >"$work/delete.sql" <<'SQL'
\set k random(0, 19)
DELETE FROM ev WHERE id = (SELECT id FROM ev WHERE k = :k ORDER BY id DESC LIMIT 1 OFFSET 5);
SQL
"$CE_PGBIN/pgbench" -n -c 3 -j 1 -T "$seconds" --max-tries=50 -f "$work/write.sql@6" -f "$work/move.sql@2" \
    -f "$work/delete.sql@1" >"$work/pgbench.txt" 2>&1 &
bench=$!

# the jobs' work, without pause; an object the main loop has just dropped
# is not there (42704): any other error is kept
( while true; do
      for o in $objects; do
          case $o in
          r_buf) sql="SELECT counter.rollup_flush('$o'); SELECT counter.rollup_refresh_dirty('$o')" ;;
          r_*) sql="SELECT counter.rollup_refresh_dirty('$o')" ;;
          c_buf) sql="SELECT counter.flush('$o'); SELECT counter.reconcile('$o')" ;;
          c_*) sql="SELECT counter.reconcile('$o')" ;;
          esac
          ce_psql -q -c "SET client_min_messages = error" -c "$sql" >/dev/null 2>>"$work/jobs.err" || true
      done
  done ) &
ce_holders+=($!)

# drop and make again, each object in turn, until the writers stop
# shellcheck disable=SC2086
ce_drop_make_rounds ce_psql "$bench" $objects
rounds=$ce_drop_rounds
wait "$bench" || true
for p in "${ce_holders[@]}"; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
ce_holders=()
echo "ok: $rounds rounds of dropping and making again 6 objects beside their jobs and 3 writers"
[ "$rounds" -ge 3 ] || fail "only $rounds rounds"

# the jobs' sessions: only 'does not exist' (the object just dropped, or
# its table in the statement that waited for the drop; PostgreSQL's own
# "could not open relation with OID" when it went between a lookup and the open)
gone='does not exist|could not open relation with OID'
other=$(grep -E '^(ERROR|psql:.*ERROR)' "$work/jobs.err" | grep -v -E "$gone" | sort | uniq -c || true)
grep -q -i deadlock "$work/jobs.err" && fail "a job's work deadlocked: $(grep -i -m3 deadlock "$work/jobs.err")"
[ -z "$other" ] || fail "a job's work failed otherwise: $other
$(grep -v -E "$gone" "$work/jobs.err" | grep -A8 -E '^(ERROR|psql:.*ERROR)' | head -40)"
echo "ok: the jobs' work met no deadlock ($(grep -c ERROR "$work/jobs.err" || true) statements found their object dropped)"
grep -q 'deadlock detected' "$CE_dj_LOG" && fail "a deadlock in the server log: $(grep -m3 -A2 'deadlock detected' "$CE_dj_LOG")"
grep -E 'processed: [0-9]+' "$work/pgbench.txt" >/dev/null || fail "the writers did not run: $(cat "$work/pgbench.txt")"
grep -q 'number of failed transactions: 0 ' "$work/pgbench.txt" ||
    fail "a writer failed: $(grep -E 'failed|error' "$work/pgbench.txt" | head -5)"
echo "ok: no deadlock in the server log; every writer's transaction committed"

# the objects made last are right
ce_psql -q -c "SET client_min_messages = warning" -c "SELECT counter.rollup_flush('r_buf')" \
    -c "SELECT counter.flush('c_buf')" >/dev/null
for r in r_trig r_def r_buf; do
    ce_psql -q -c "SELECT counter.rollup_recompute('$r', (SELECT counter.rollup_hour(min(t)) FROM ev),
                                                   counter.rollup_hour(now()) + interval '1 hour')" >/dev/null
    n=$(ce_psql -At -c "SELECT count(*) FROM (SELECT k, counter.rollup_hour(t) AS hour, count(*) AS count FROM ev GROUP BY 1, 2) g
                        FULL JOIN $r r USING (k, hour) WHERE coalesce(g.count, 0) <> coalesce(r.count, 0)")
    [ "$n" = 0 ] || fail "rollup $r: $n rows differ from GROUP BY"
done
for c in c_trig c_buf; do
    # (a watermark past every row: rows written before the last track with
    # times in the current bucket are counted once it is past them)
    ce_psql -q -c "SELECT counter.reconcile('$c', now() + interval '2 minutes', all_keys => true)" >/dev/null
    n=$(ce_psql -At -c "SELECT count(*) FROM (SELECT k, count(*) n FROM ev GROUP BY k) g
                        WHERE counter.value('$c', g.k) <> g.n")
    [ "$n" = 0 ] || fail "counter $c: $n keys differ from count(*): $(ce_psql -At -c "SELECT string_agg(format('%s: %s/%s', g.k, counter.value('$c', g.k), g.n), ', ') FROM (SELECT k, count(*) n FROM ev GROUP BY k) g")
$(ce_psql -c "SELECT * FROM counter.tracked WHERE name = '$c'" -c "SELECT * FROM counter.reconcile('$c', all_keys => true)" -x)"
done
echo "ok: every rollup row equals GROUP BY, every counter key count(*)"
ce_scan_log "$CE_dj_LOG" || fail "a server process crashed"
rm -rf "$work"
echo ok
