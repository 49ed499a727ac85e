#!/usr/bin/env bash
# Issue 21 item 7 under load: dropping a counter or a rollup of a table Citus
# distributes never deadlocks with its jobs, on one node or across nodes
# (drop_beside_jobs.sh does the same on one node). A distributed table (by
# k, 4 shards) owned by an unprivileged role, written by another through the
# coordinator all the time (inserts over the last 3 hours, event-time moves
# to 200 minutes ago that mark hours dirty, deletes); a trigger-mode and a
# deferred rollup, a trigger-mode and an application-mode counter keyed by
# the distribution column and a trigger-mode counter keyed by another column
# (anchored); a loop runs their jobs' work as the owner without pause
# (rollup_refresh_dirty, reconcile), and the main loop drops each object and
# makes it again as the owner, over and over (CE_DROP_SECONDS, default 30).
# Then: no deadlock (40P01, or Citus's "distributed deadlock") in any
# session or server log, every drop and make succeeded, every writer's
# transaction committed, and after the writers stop each rollup row equals
# GROUP BY and the trigger-mode counter count(*). Seen failing (deadlock
# detected between rollup_drop and a refresh chunk) with the dirty marks
# taken in each one's scan order, before counter_internal.rollup_marks_take;
# and (Citus cancelling the drop, or 40P01) with untrack dropping the state
# while a reconciliation batch held some of its shards, and with rollup_drop
# dropping the source's triggers before it locked the rollup table and its
# dirty log; and (Citus cancelling the batch) with a reconciliation batch of
# another counter (keyed by v) before it took the table on the coordinator
# first. CE_DROP_TRACE=1 prints the time of each drop and make.
# citus: whole on 15
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
source test/citus.sh
ce_citus_script_start dj_own dj_app "deadlock_timeout = 100ms"
seconds=${CE_DROP_SECONDS:-30}
work=$(mktemp -d) # (removed at the end; left for a look when a check fails)
chmod 755 "$work"

coord -q <<'SQL'
CREATE ROLE dj_own LOGIN;
CREATE ROLE dj_app LOGIN;
CREATE SCHEMA dj AUTHORIZATION dj_own;
GRANT USAGE ON SCHEMA dj TO dj_app;
SQL
owner -q <<'SQL'
CREATE TABLE dj.ev (id bigint NOT NULL, k integer NOT NULL, t timestamptz NOT NULL, v bigint NOT NULL,
                    PRIMARY KEY (k, id));
CREATE INDEX ON dj.ev (t);
SELECT create_distributed_table('dj.ev', 'k', shard_count := 4);
INSERT INTO dj.ev SELECT g, g % 20, now() - (g % 180) * interval '1 minute', g % 7 FROM generate_series(1, 2000) g;
GRANT SELECT, INSERT, UPDATE, DELETE ON dj.ev TO dj_app;
SQL

make_sql() {
    case $1 in
    r_trig) echo "SELECT counter.rollup_create('r_trig', 'dj.ev', 't', '{k}')" ;;
    r_def) echo "SELECT counter.rollup_create('r_def', 'dj.ev', 't', '{k}', mode => 'deferred')" ;;
    c_trig) echo "SELECT counter.track('c_trig', 'dj.ev', 'k', 't', watermark_lag => '0')" ;;
    c_app) echo "SELECT counter.track('c_app', 'dj.ev', 'k', 't', mode => 'application', watermark_lag => '0')" ;;
    c_by_v) echo "SELECT counter.track('c_by_v', 'dj.ev', 'v', 't', watermark_lag => '0')" ;;
    esac
}
objects="r_trig r_def c_trig c_app c_by_v"
# shellcheck disable=SC2086
ce_drop_make_all owner $objects
got=$(coord -tA -c "SELECT (SELECT string_agg(name || ':' || distributed, ' ' ORDER BY name) FROM counter.rollups)
                           || ' ' || (SELECT string_agg(name || ':' || distributed, ' ' ORDER BY name) FROM counter.tracked)")
[ "$got" = "r_def:true r_trig:true c_app:true c_by_v:true c_trig:true" ] || fail "made: $got"

cat >"$work/write.sql" <<'SQL'
\set id random(100000, 900000000)
\set k random(0, 19)
INSERT INTO dj.ev VALUES (:id, :k, now() - random() * interval '3 hours', :id % 7) ON CONFLICT DO NOTHING;
SQL
cat >"$work/move.sql" <<'SQL'
\set k random(0, 19)
\set id random(1, 2000)
UPDATE dj.ev SET t = now() - interval '200 minutes' WHERE k = :k AND id = :id;
SQL
cat >"$work/delete.sql" <<'SQL'
\set k random(0, 19)
\set id random(1, 2000)
DELETE FROM dj.ev WHERE k = :k AND id = :id;
SQL
chmod 644 "$work"/*.sql
PGOPTIONS="-c client_min_messages=warning" "$CE_PGBIN/pgbench" -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U dj_app \
    -n -c 3 -j 1 -T "$seconds" --max-tries=50 -f "$work/write.sql@6" -f "$work/move.sql@2" -f "$work/delete.sql@1" \
    postgres >"$work/pgbench.txt" 2>&1 &
bench=$!

# the jobs' work as the owner, without pause; an object the main loop has
# just dropped is not there: any other error is kept
(
    while true; do
        for o in $objects; do
            case $o in
            r_*) sql="SELECT counter.rollup_refresh_dirty('$o')" ;;
            c_*) sql="SELECT counter.reconcile('$o')" ;;
            esac
            owner -q -c "SET client_min_messages = error" -c "$sql" >/dev/null 2>>"$work/jobs.err" || true
        done
    done
) &
jobs_loop=$!

# shellcheck disable=SC2086
ce_drop_make_rounds owner "$bench" $objects
rounds=$ce_drop_rounds
wait "$bench" || true
kill "$jobs_loop" 2>/dev/null || true
wait 2>/dev/null || true
echo "ok: $rounds rounds of dropping and making again 5 objects of a distributed table beside their jobs and 3 writers"
[ "$rounds" -ge 2 ] || fail "only $rounds rounds"

gone='does not exist|could not open relation with OID'
grep -q -i deadlock "$work/jobs.err" && fail "a job's work deadlocked: $(grep -i -m3 -A3 deadlock "$work/jobs.err")"
other=$(grep -E '^(ERROR|psql:.*ERROR)' "$work/jobs.err" | grep -v -E "$gone" | sort | uniq -c || true)
[ -z "$other" ] || fail "a job's work failed otherwise: $other
$(grep -v -E "$gone" "$work/jobs.err" | grep -A8 -E '^(ERROR|psql:.*ERROR)' | head -40)"
echo "ok: the jobs' work met no deadlock ($(grep -c ERROR "$work/jobs.err" || true) statements found their object dropped)"
for n in citus_coord citus_w1 citus_w2; do
    log="CE_${n}_LOG"
    grep -q -i 'deadlock' "${!log}" && fail "a deadlock in the server log of $n: $(grep -i -m3 -A2 'deadlock' "${!log}")"
done
grep -E 'processed: [0-9]+' "$work/pgbench.txt" >/dev/null || fail "the writers did not run: $(cat "$work/pgbench.txt")"
grep -q 'aborted' "$work/pgbench.txt" && fail "a writer aborted: $(grep -m3 aborted "$work/pgbench.txt")"
grep -q 'number of failed transactions: 0 ' "$work/pgbench.txt" ||
    fail "a writer failed: $(grep -E 'failed|error|ERROR' "$work/pgbench.txt" | head -5)"
echo "ok: no deadlock in any node's server log; every writer's transaction committed"

# the objects made last are right (read as the owner; the truth first into
# a temporary table: doc/citus.md)
for r in r_trig r_def; do
    owner -q -c "SELECT counter.rollup_recompute('$r', (SELECT counter.rollup_hour(min(t)) FROM dj.ev),
                                                   counter.rollup_hour(now()) + interval '1 hour')" >/dev/null
    n=$(owner -tA <<SQL | grep -v '^$' | tail -1
CREATE TEMP TABLE g AS SELECT k, counter.rollup_hour(t) AS hour, count(*) AS count FROM dj.ev GROUP BY 1, 2;
CREATE TEMP TABLE r AS SELECT k, hour, count FROM dj.$r;
SELECT count(*) FROM g FULL JOIN r USING (k, hour) WHERE coalesce(g.count, 0) <> coalesce(r.count, 0);
SQL
    )
    [ "$n" = 0 ] || fail "rollup $r: $n rows differ from GROUP BY"
done
owner -q -c "SELECT counter.reconcile('c_trig', now() + interval '2 minutes', all_keys => true)" >/dev/null
owner -q -c "SELECT counter.reconcile('c_by_v', now() + interval '2 minutes', all_keys => true)" >/dev/null
n=$(ce_citus_mismatches owner c_trig dj.ev true)
[ "$n" = 0 ] || fail "counter c_trig: $n keys differ from count(*)"
n=$(ce_citus_mismatches owner c_by_v dj.ev true v)
[ "$n" = 0 ] || fail "counter c_by_v: $n keys differ from count(*)"
echo "ok: every rollup row equals GROUP BY, every key of the trigger-mode counters (keyed by k and by v) count(*)"
ce_scan_log "$CE_citus_coord_LOG" && ce_scan_log "$CE_citus_w1_LOG" && ce_scan_log "$CE_citus_w2_LOG" ||
    fail "a server process crashed"
rm -rf "$work"
echo ok
