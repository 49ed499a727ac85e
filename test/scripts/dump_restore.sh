#!/usr/bin/env bash
# pg_dump and pg_restore in every usual form carry a database that uses every
# feature of counter_ext to a new server (roles made there in another order,
# so every role has another OID) with every number, id, pending hour and the
# history equal, and the database keeps working: counters count new writes,
# maintenance drains the default partition, the deferred rollup's job makes
# it equal to GROUP BY, the next track / rollup_create / job_register gets a
# fresh id. The forms: plain SQL through psql, -Fc through pg_restore, -Fc
# through pg_restore -j 2, and pg_restore --single-transaction.
# A dump of part of it (--schema-only, -t one table) is refused at restore
# with a message that names what to do, and leaves the restored tables usable.
# lane: side
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
here=$CE_TOP/test/scripts/dump_restore
trap ce_cluster_stop_all EXIT
ce_cluster_start a "counter_ext.enabled = off" || exit 1
ce_cluster_start b "counter_ext.enabled = off" || exit 1
work=$(mktemp -d) || exit 1
trap 'ce_cluster_stop_all; [ -n "${CE_KEEP_WORK:-}" ] || rm -rf "$work"' EXIT
chmod 755 "$work"
fail() { echo "FAILED: $*"; exit 1; }
on() { local c=$1; shift; ce_cluster_use "$c"; ce_psql "$@"; }

# Roles: on b, made in another order (and one more first), so OIDs differ.
on a -c "CREATE ROLE app LOGIN; CREATE ROLE reader" || exit 1
on b -c "CREATE ROLE filler; CREATE ROLE reader; CREATE ROLE app LOGIN" || exit 1
[ "$(on a -Atc "SELECT 'app'::regrole::oid")" != "$(on b -Atc "SELECT 'app'::regrole::oid")" ] ||
    fail "app has the same OID on both servers: the test would prove nothing"

ce_cluster_use a
"$CE_PGBIN/createdb" src || exit 1
on a -d src -f "$here/build.sql" >"$work/build.out" 2>&1 || { cat "$work/build.out"; fail "building the source"; }
on a -d src -f "$here/fingerprint.sql" >"$work/src.fp" || fail "fingerprint of the source"
grep -q '^dirty|' "$work/src.fp" || fail "the source has no pending dirty hours"
grep -q '^job_run|' "$work/src.fp" || fail "the source has no job history"
# the one run record holds the features' runs too, and they survive
grep -q '^tracked_run|' "$work/src.fp" || fail "the source has no tracked reconciliation history"
grep -q '^job_run|[0-9]*||reconcile|clicks_per_link|call|' "$work/src.fp" || fail "the source has no direct call's run"
[ "$(grep -c '^rows|events_default|0$' "$work/src.fp")" = 0 ] || fail "the source's default partition is empty"

ce_cluster_use a
"$CE_PGBIN/pg_dump" -d src -f "$work/plain.sql" || fail "pg_dump plain"
"$CE_PGBIN/pg_dump" -d src -Fc -f "$work/custom.dump" || fail "pg_dump -Fc"

# restore FORM DB: into a fresh database on b.
restore() {
    local form=$1 db=$2
    ce_cluster_use b
    "$CE_PGBIN/createdb" "$db" || return 1
    case $form in
    plain) ce_psql -d "$db" -f "$work/plain.sql" ;;
    custom) "$CE_PGBIN/pg_restore" -d "$db" --exit-on-error "$work/custom.dump" ;;
    parallel) "$CE_PGBIN/pg_restore" -d "$db" --exit-on-error -j 2 "$work/custom.dump" ;;
    single) "$CE_PGBIN/pg_restore" -d "$db" --exit-on-error --single-transaction "$work/custom.dump" ;;
    esac
}

for form in plain custom parallel single; do
    db=dst_$form
    restore $form $db >"$work/$form.out" 2>&1 || { tail -20 "$work/$form.out"; fail "restore ($form)"; }
    on b -d $db -f "$here/fingerprint.sql" >"$work/$form.fp" || fail "fingerprint ($form)"
    if ! diff -u "$work/src.fp" "$work/$form.fp" >"$work/$form.diff"; then
        head -40 "$work/$form.diff"
        fail "the restore ($form) differs from the source"
    fi
    on b -d $db -f "$here/check.sql" >"$work/$form.check" 2>&1 || { cat "$work/$form.check"; fail "checks ($form)"; }
    echo "restore ($form): equal to the source, and keeps working"
done
# Part of a dump: the tables and their triggers come, counter_ext's catalog
# rows do not. Writes through those triggers are refused (42704, 55000) with a
# message naming the counter or rollup and what to do; the table's data is
# there, and following the hint makes it work again.
ce_cluster_use a
"$CE_PGBIN/pg_dump" -d src --schema-only -f "$work/schema.sql" || fail "pg_dump --schema-only"
"$CE_PGBIN/pg_dump" -d src -t public.clicks -f "$work/one_table.sql" || fail "pg_dump -t"
# refused DB SQL PATTERN: SQL fails with an error matching PATTERN (its
# SQLSTATE and message) and the hint to restore in full
refused() {
    local out
    out=$(on b -d "$1" -v VERBOSITY=verbose -c "$2" 2>&1) && fail "$2 was not refused: $out"
    grep -Eq "ERROR:  $3" <<<"$out" || fail "$2: not the expected refusal: $out"
    grep -q "HINT:  Restore the whole database from a full pg_dump" <<<"$out" || fail "$2: no hint: $out"
}
ce_cluster_use b
"$CE_PGBIN/createdb" dst_schema || exit 1
on b -d dst_schema -f "$work/schema.sql" >"$work/schema.out" 2>&1 || fail "restore of --schema-only"
refused dst_schema "INSERT INTO public.clicks (link_id, occurred_at) VALUES (1, now())" "42704: tracked counter 1 does not exist"
refused dst_schema "INSERT INTO public.events VALUES (1, 1, 1, now())" "55000: trigger counter_rollup_1_[a-z]+ on public.events belongs to rollup 1, which is not a rollup of that table"
refused dst_schema "DELETE FROM public.events" "55000: trigger counter_rollup_1_[a-z]+ on public.events belongs to rollup 1, which is not a rollup of that table"
echo "restore of --schema-only: writes through counter_ext's triggers are refused, naming what to do"

"$CE_PGBIN/createdb" dst_table || exit 1
on b -d dst_table -c "CREATE EXTENSION counter_ext" || exit 1
# psql goes on after an error, as a restore by hand does.
on b -d dst_table -v ON_ERROR_STOP=0 -f "$work/one_table.sql" >"$work/one_table.out" 2>&1
[ "$(on b -d dst_table -Atc "SELECT count(*) FROM public.clicks")" = \
  "$(on a -d src -Atc "SELECT count(*) FROM public.clicks")" ] || fail "-t: the rows did not come"
refused dst_table "INSERT INTO public.clicks (link_id, occurred_at) VALUES (1, now())" "42704: tracked counter 1 does not exist"
# What the hint says: drop the triggers, register again.
on b -d dst_table -Atc "SELECT format('DROP TRIGGER %I ON public.clicks;', tgname) FROM pg_trigger
                       WHERE tgrelid = 'public.clicks'::regclass AND tgname LIKE 'counter\_1\_%'" >"$work/drop.sql" &&
    on b -d dst_table -f "$work/drop.sql" || fail "-t: dropping the triggers"
on b -d dst_table -c "SELECT counter.track('clicks_per_link', 'public.clicks', 'link_id', 'occurred_at',
                                            watermark_lag => '0 seconds')" \
    -c "INSERT INTO public.clicks (link_id, occurred_at) VALUES (1000, now()), (1000, now())" >/dev/null ||
    fail "-t: tracking again"
on b -d dst_table -Atc "SELECT counter.value('clicks_per_link', 1000::bigint) = 2" |
    grep -qx t || fail "-t: the counter registered again does not count"
echo "restore of -t public.clicks: refused, naming what to do; done so, it counts"

# Into a database whose counter 1 and rollup 1 count other tables: the
# restored triggers name them, and are refused rather than count into them.
"$CE_PGBIN/createdb" dst_collide || exit 1
on b -d dst_collide -c "CREATE EXTENSION counter_ext" \
    -c "CREATE TABLE public.other (k int NOT NULL, at timestamptz NOT NULL)" \
    -c "SELECT counter.track('other_per_k', 'public.other', 'k', 'at')" \
    -c "SELECT counter.rollup_create('other_hourly', 'public.other', 'at', '{k}')" >/dev/null || exit 1
"$CE_PGBIN/pg_dump" -h 127.0.0.1 -p "$CE_a_PORT" -d src -t public.clicks -t public.events -t 'public.events_*' \
    -T public.events_hourly -f "$work/two_tables.sql" || fail "pg_dump -t -t"
on b -d dst_collide -v ON_ERROR_STOP=0 -f "$work/two_tables.sql" >"$work/two_tables.out" 2>&1
out=$(on b -d dst_collide -c "INSERT INTO public.clicks (link_id, occurred_at) VALUES (1, now())" 2>&1) &&
    fail "a restored trigger counted into another table's counter"
grep -q "names tracked counter \"other_per_k\", whose source is public.other" <<<"$out" || fail "unexpected: $out"
refused dst_collide "INSERT INTO public.events VALUES (1, 1, 1, now())" "55000: trigger counter_rollup_1_[a-z]+ on public.events belongs to rollup 1, which is not a rollup of that table"
[ "$(on b -d dst_collide -Atc "SELECT (SELECT count(*) FROM counter.tracked_values) + (SELECT count(*) FROM public.other_hourly)")" = 0 ] ||
    fail "the other table's counter or rollup changed"
echo "restore of tables into a database whose ids are taken: refused, nothing counted into the wrong counter"

# The same checks hold on the source itself (they are not made to fit a restore).
on a -d src -f "$here/check.sql" >"$work/src.check" 2>&1 || { cat "$work/src.check"; fail "checks on the source"; }
echo ok
