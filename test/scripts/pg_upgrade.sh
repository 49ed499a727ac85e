#!/usr/bin/env bash
# pg_upgrade carries a database that uses every feature of counter_ext
# (dump_restore/build.sql, plus filters calling the owner's functions and
# operators, on a plain and a partitioned table) to a new cluster, with the
# worker preloaded and enabled in both (pg_upgrade starts them in binary
# upgrade mode): every number, id, pending hour and the history equal
# (dump_restore/fingerprint.sql), the filters still call the owner's
# functions (whose OIDs pg_upgrade does not keep), and the database keeps
# working (dump_restore/check.sql and new writes through the filters).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
here=$CE_TOP/test/scripts/dump_restore
work=$(mktemp -d) || exit 1
trap 'ce_cluster_stop_all; [ -n "${CE_KEEP_WORK:-}" ] || rm -rf "$work"' EXIT
chmod 755 "$work"
ce_is_root && chown postgres: "$work"
fail() { echo "FAILED: $*"; exit 1; }
on() { local c=$1; shift; ce_cluster_use "$c"; ce_psql "$@"; }

ce_cluster_start old "counter_ext.enabled = off" || exit 1
ce_cluster_start new "counter_ext.enabled = off" || exit 1
on old -c "CREATE ROLE app LOGIN" || exit 1
ce_cluster_use old
"$CE_PGBIN/createdb" src || exit 1
on old -d src -f "$here/build.sql" >"$work/build.out" 2>&1 || { cat "$work/build.out"; fail "building the source"; }
# In a second database: filters that call the owner's function and operator
# (whose OIDs differ on the new cluster, below), on a plain table and a
# partitioned one, in trigger-mode counters and a trigger-mode rollup.
"$CE_PGBIN/createdb" flt || exit 1
on old -d flt >"$work/filters.out" 2>&1 <<'SQL' || { cat "$work/filters.out"; fail "the filters"; }
CREATE EXTENSION counter_ext;
GRANT CREATE ON DATABASE flt TO app;
GRANT CREATE ON SCHEMA public TO app;
SET ROLE app;
CREATE SCHEMA app_fn;
CREATE FUNCTION app_fn.keep(k bigint) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT k % 3 <> 0';
CREATE FUNCTION app_fn.not_div(a bigint, b bigint) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT a % b <> 0';
CREATE OPERATOR app_fn.%/ (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = app_fn.not_div);
CREATE TABLE public.hits (id bigserial PRIMARY KEY, k bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
SELECT counter.track('hits_kept', 'public.hits', 'k', 'at', watermark_lag => '0 seconds',
                     filter => 'app_fn.keep(k)');
INSERT INTO public.hits (k) SELECT i % 29 FROM generate_series(1, 1500) i;
CREATE TABLE public.ev2 (id bigint NOT NULL, k bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
CREATE TABLE public.ev2_default PARTITION OF public.ev2 DEFAULT;
SELECT counter.track('ev2_kept', 'public.ev2', 'k', 'at', watermark_lag => '0 seconds',
                     filter => 'k OPERATOR(app_fn.%/) 5');
SELECT counter.rollup_create('ev2_hourly', 'public.ev2', 'at', '{k}', filter => 'app_fn.keep(k)');
INSERT INTO public.ev2 SELECT i, i % 17, now() - (i % 300) * interval '1 minute' FROM generate_series(1, 2000) i;
SQL
# pg_upgrade makes functions again under new OIDs: make the new cluster hand out other ones
on new -c "DO \$\$ BEGIN FOR i IN 1..50 LOOP EXECUTE format('CREATE FUNCTION pg_temp.f%s() RETURNS int LANGUAGE sql AS ''SELECT 1''', i); END LOOP; END \$\$" || exit 1
on old -d src -f "$here/fingerprint.sql" >"$work/old.fp" || fail "fingerprint of the source"

# filter_truth DB: per counter/rollup, rows differing from the truth (0 each)
filter_truth() {
    on "$1" -d flt -At <<'SQL'
SELECT 'hits_kept', count(*) FROM (SELECT key, value FROM counter.tracked_values WHERE counter = 'hits_kept' AND value <> 0) v
    FULL JOIN (SELECT k::text AS key, count(*) AS n FROM public.hits WHERE k % 3 <> 0 GROUP BY 1) t USING (key)
    WHERE v.value IS DISTINCT FROM t.n;
SELECT 'ev2_kept', count(*) FROM (SELECT key, value FROM counter.tracked_values WHERE counter = 'ev2_kept' AND value <> 0) v
    FULL JOIN (SELECT k::text AS key, count(*) AS n FROM public.ev2 WHERE k % 5 <> 0 GROUP BY 1) t USING (key)
    WHERE v.value IS DISTINCT FROM t.n;
SELECT 'ev2_hourly', count(*) FROM ((SELECT k, hour, count FROM public.ev2_hourly
    EXCEPT SELECT k, counter.rollup_hour(at), count(*) FROM public.ev2 WHERE k % 3 <> 0 GROUP BY 1, 2)
    UNION ALL (SELECT k, counter.rollup_hour(at), count(*) FROM public.ev2 WHERE k % 3 <> 0 GROUP BY 1, 2
    EXCEPT SELECT k, hour, count FROM public.ev2_hourly)) d;
SQL
}
expect_truth() {
    local got
    got=$(filter_truth "$1") || fail "$2: reading the filtered counters"
    [ "$got" = $'hits_kept|0\nev2_kept|0\nev2_hourly|0' ] || {
        on "$1" -d flt -c "SELECT k, hour, count FROM public.ev2_hourly EXCEPT SELECT k, counter.rollup_hour(at), count(*)
            FROM public.ev2 WHERE k % 3 <> 0 GROUP BY 1, 2 ORDER BY 1, 2 LIMIT 6" \
            -c "SELECT k, counter.rollup_hour(at), count(*) FROM public.ev2 WHERE k % 3 <> 0 GROUP BY 1, 2
            EXCEPT SELECT k, hour, count FROM public.ev2_hourly ORDER BY 1, 2 LIMIT 6"
        fail "$2: filtered counters differ from count(*): $got"
    }
}
expect_truth old "before the upgrade"

# Both servers stopped; the worker enabled in both, as operators run it.
for c in old new; do
    d="CE_${c}_DIR"
    ce_as_owner "$CE_PGBIN/pg_ctl" -D "${!d}/data" -w -t 60 stop -m fast >/dev/null || fail "stopping $c"
    echo "counter_ext.enabled = on" >>"${!d}/data/postgresql.conf"
done
( cd "$work" && ce_as_owner "$CE_PGBIN/pg_upgrade" -b "$CE_PGBIN" -B "$CE_PGBIN" -d "$CE_old_DIR/data" \
      -D "$CE_new_DIR/data" -p "$CE_old_PORT" -P "$CE_new_PORT" -U "$(ce_owner_name)" --socketdir "$work" ) \
    >"$work/pg_upgrade.out" 2>&1 || {
    tail -30 "$work/pg_upgrade.out"
    find "$CE_new_DIR/data" -path '*pg_upgrade_output.d*' -name '*.txt' -exec tail -20 {} + 2>/dev/null
    find "$CE_new_DIR/data" -path '*pg_upgrade_output.d*' -name '*.log' -exec tail -20 {} + 2>/dev/null
    fail "pg_upgrade"
}
echo "pg_upgrade: done"
# the comparison with the worker off (a job run would change the history)
echo "counter_ext.enabled = off" >>"$CE_new_DIR/data/postgresql.conf"
ce_as_owner "$CE_PGBIN/pg_ctl" -D "$CE_new_DIR/data" -l "$CE_new_LOG" -w -t 60 start >/dev/null || fail "starting the upgraded cluster"
on new -d src -f "$here/fingerprint.sql" >"$work/new.fp" || fail "fingerprint after the upgrade"
if ! diff -u "$work/old.fp" "$work/new.fp" >"$work/fp.diff"; then
    head -40 "$work/fp.diff"
    fail "the upgraded database differs from the source"
fi
echo "the upgraded database equals the source"
expect_truth new "after the upgrade"
# new writes go through the filters (the owner's function and operator)
on new -d flt >"$work/writes.out" 2>&1 <<'SQL' || { cat "$work/writes.out"; fail "writes after the upgrade"; }
SET ROLE app;
INSERT INTO public.hits (k) SELECT i % 23 FROM generate_series(1, 500) i;
DELETE FROM public.hits WHERE id % 13 = 0;
INSERT INTO public.ev2 SELECT 10000 + i, i % 19, now() - (i % 200) * interval '1 minute' FROM generate_series(1, 700) i;
DELETE FROM public.ev2 WHERE id % 11 = 0;
RESET ROLE;
CALL counter.run_steps('rollup_refresh', 'ev2_hourly');  -- the job: deleted rows' hours are recomputed
SQL
expect_truth new "writes after the upgrade"
[ "$(on new -d flt -Atc "SELECT keys_corrected FROM counter.reconcile('ev2_kept', all_keys => true)")" = 0 ] ||
    fail "a reconciliation after the upgrade found drift"
on new -d src -f "$here/check.sql" >"$work/check.out" 2>&1 || { cat "$work/check.out"; fail "checks after the upgrade"; }
echo "the upgraded database keeps working: filters, counters, rollups, maintenance, jobs"
for f in "$CE_old_LOG" "$CE_new_LOG" $(find "$CE_new_DIR/data" -path '*pg_upgrade_output.d*' -name '*.log' 2>/dev/null); do
    ce_scan_log "$f" || fail "a crash in $f"
done
echo ok
