#!/usr/bin/env bash
# A pressed share flushes early (doc/reference/tracked.md, "The flush job"):
# in a cluster with a small shared table (counter_ext.buffer_entries = 2048:
# one (database, owner) share holds at most 388 entries, pressed from 194 on)
# and the background worker on, the ordinary roles alice and bob each own a
# buffered counter whose flush job runs once an hour. alice's adds of 150
# distinct keys leave her share below the mark: nothing is flushed. 100 more
# in one transaction pass it: at its commit her flush job is made due and
# the worker flushes her counter (no entry left pending; every key equals
# count(*); the worker's run of her job recorded). bob's counter, in the
# same database, is not flushed: another owner's pressure makes no job of his
# due, and alice cannot make it so. counter.buffer_shares shows each role its
# own share (entries against the cap of 388 and the mark of 194, early
# flushes: alice 1 or more after hers, bob 0), never the other's; a member
# of pg_monitor sees both.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

trap 'ce_cluster_stop_all' EXIT
ce_cluster_start bpress "counter_ext.buffer_entries = 2048" "counter_ext.naptime = 1" \
    "counter_ext.flush_interval = '1h'" || { echo "cannot start the cluster"; exit 1; }
ce_cluster_use bpress
"$CE_PGBIN/createdb" press
ce_psql -q -d press <<'SQL'
CREATE EXTENSION counter_ext;
CREATE ROLE alice LOGIN; CREATE ROLE bob LOGIN; CREATE ROLE watcher LOGIN IN ROLE pg_monitor;
GRANT CREATE ON SCHEMA public TO alice, bob;
SQL
mk() { # mk ROLE TABLE
    ce_psql -q -d press -U "$1" <<SQL >/dev/null
CREATE TABLE $2 (k bigint NOT NULL, t timestamptz NOT NULL DEFAULT '2024-01-01 10:00+00');
SELECT counter.track('$2', '$2', 'k', 't', buffered => true);
SQL
}
mk alice a_ev
mk bob b_ev
q() { ce_psql -At -d press -U "$1" -c "$2"; }
flushes() { q "$1" "SELECT coalesce(flushes, 0) FROM counter.buffered WHERE counter = '$2'"; }
fail() { echo "FAIL: $*"; exit 1; }

# reconciliation flushes first: its jobs off, so that only a flush job
# flushes here; the flush jobs' first runs (made due at registration, or
# not) are behind us
ce_psql -q -d press -c "UPDATE counter.jobs SET enabled = false WHERE kind = 'reconcile'"
for _ in $(seq 1 60); do
    late=$(ce_psql -At -d press -c "SELECT count(*) FROM counter.jobs WHERE running_run IS NOT NULL
                    OR (kind = 'flush' AND next_run < now() + interval '30 minutes')")
    [ "$late" = 0 ] && break
    sleep 0.5
done
[ "$late" = 0 ] || fail "the flush jobs are still due: $late"

q bob "INSERT INTO b_ev (k) SELECT g FROM generate_series(1, 20) g" >/dev/null
q alice "INSERT INTO a_ev (k) SELECT g FROM generate_series(1, 150) g" >/dev/null
sleep 3 # three naptimes: a flush here would be the bug
got="$(flushes alice a_ev) $(flushes bob b_ev)"
[ "$got" = "0 0" ] || fail "flushes (alice, bob) below the mark: $got"
echo "ok: 150 keys, below half of alice's share: nothing flushed"
got=$(q alice "SELECT string_agg(concat_ws(' ', owner, entries, reserve, cap, pressed_from, overflows, early_flushes),
               ',' ORDER BY owner) FROM counter.buffer_shares()")
[ "$got" = "alice 150 4 388 194 0 0" ] || fail "alice's counter.buffer_shares below the mark: $got"
got=$(q bob "SELECT string_agg(concat_ws(' ', owner, entries, early_flushes), ',' ORDER BY owner) FROM counter.buffer_shares()")
[ "$got" = "bob 20 0" ] || fail "bob's counter.buffer_shares (his share only): $got"
echo "ok: counter.buffer_shares shows alice her share (150 of 388, mark 194) and bob his own only"

q alice "INSERT INTO a_ev (k) SELECT g FROM generate_series(151, 250) g" >/dev/null
for _ in $(seq 1 60); do
    [ "$(flushes alice a_ev)" != 0 ] && break
    sleep 0.5
done
[ "$(flushes alice a_ev)" != 0 ] || fail "alice's share passed its mark (250 of 388 entries) and no flush ran in 30 s"
got=$(q alice "SELECT pending || ' ' || in_flight FROM counter.buffered WHERE counter = 'a_ev'")
[ "$got" = "0 0" ] || fail "alice's counter after the early flush: pending, in flight $got"
got=$(ce_psql -At -d press -c "SELECT count(*) FROM counter.job_runs r JOIN counter.jobs j USING (job_id)
               WHERE j.kind = 'flush' AND j.target = 'a_ev' AND r.runner = 'worker' AND r.outcome = 'succeeded'")
[ "$got" -ge 1 ] || fail "no run of alice's flush job by the worker is recorded ($got)"
bad=$(q alice "WITH truth AS (SELECT k, count(*) AS n FROM a_ev GROUP BY k)
               SELECT count(*) FROM counter.values_of('a_ev', (SELECT array_agg(k) FROM truth)) v
               JOIN truth t ON t.k = v.key WHERE v.value <> t.n")
[ "$bad" = 0 ] || fail "$bad keys of a_ev differ from count(*)"
echo "ok: 250 keys passed the mark: alice's flush job ran early, by the worker; nothing left pending, every key equal to count(*)"

got="$(flushes bob b_ev) $(ce_psql -At -d press -c "SELECT next_run > now() + interval '30 minutes' FROM counter.jobs WHERE kind = 'flush' AND target = 'b_ev'")"
[ "$got" = "0 t" ] || fail "bob's counter (flushes, next run an hour away): $got"
got=$(q bob "SELECT pending FROM counter.buffered WHERE counter = 'b_ev'")
[ "$got" = 20 ] || fail "bob's 20 adds pending: $got"
echo "ok: bob's counter in the same database not flushed by alice's pressure (his 20 adds still pending, his job an hour away)"
got=$(q watcher "SELECT string_agg(concat_ws(' ', owner, early_flushes >= 1, cap), ',' ORDER BY owner)
                 FROM counter.buffer_shares()")
[ "$got" = "alice t 388,bob f 388" ] || fail "a pg_monitor member's counter.buffer_shares (alice flushed early, bob not): $got"
got=$(q watcher "SELECT string_agg(owner || ' ' || object || ' ' || value, ',' ORDER BY owner) FROM counter.metrics
                 WHERE metric = 'counter_ext_buffer_share_early_flushes_total' AND value >= 1")
[ "$got" = "alice * $(q watcher "SELECT early_flushes FROM counter.buffer_shares() WHERE owner = 'alice'::regrole")" ] ||
    fail "counter_ext_buffer_share_early_flushes_total for a pg_monitor member: $got"
got=$(q bob "SELECT count(*) FROM counter.buffer_shares() WHERE owner = 'alice'::regrole")
[ "$got" = 0 ] || fail "bob sees alice's share"
echo "ok: counter.buffer_shares: alice's share flushed early, bob's not; a pg_monitor member sees both (and the metric, folded), bob never alice's"
