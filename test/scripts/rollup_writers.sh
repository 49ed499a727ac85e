#!/usr/bin/env bash
# 8 concurrent writers into trigger-mode rollups, which write a transaction's
# rows at its commit (src/rollup.cpp): a plain and an hourly-partitioned
# source, each with a rollup of counts only and one with a filter, a sum and
# a distinct_on column. The writers (pgbench -c 8) insert batches over few
# keys and 3 hours (the same (key, hour) rows in every batch), re-deliver
# events (ON CONFLICT DO NOTHING), roll back savepoints and whole
# transactions, and write several statements per transaction. Then: no
# writer failed, no deadlock; every rollup row equals a GROUP BY over its
# source (counts, sums; sketches equal recomputed ones byte for byte); no
# dirty hour was left. And in one session: a recompute in the writing
# transaction does not count its rows twice; PREPARE TRANSACTION writes them
# (seen at COMMIT PREPARED, gone with ROLLBACK PREPARED); a rollup dropped in
# the writing transaction is not written.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
db=rollup_writers
seconds=${ROLLUP_WRITERS_SECONDS:-15}
"$CE_PGBIN/dropdb" --if-exists $db && "$CE_PGBIN/createdb" $db
export PGDATABASE=$db
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
deadlocks_before=$(grep -c "deadlock detected" "$CE_main_LOG" 2>/dev/null || true)

ce_psql <<'SQL'
CREATE EXTENSION counter_ext;
CREATE TABLE ev_plain (
    event_id    bigint NOT NULL,
    link_id     bigint NOT NULL,
    visitor_id  bigint NOT NULL,
    amount      integer,
    kind        text NOT NULL,
    occurred_at timestamptz NOT NULL,
    UNIQUE (event_id, occurred_at)
);
CREATE TABLE ev_part (LIKE ev_plain INCLUDING ALL) PARTITION BY RANGE (occurred_at);
CREATE TABLE ev_part_h09 PARTITION OF ev_part FOR VALUES FROM ('2026-10-06 09:00+00') TO ('2026-10-06 10:00+00');
CREATE TABLE ev_part_h10 PARTITION OF ev_part FOR VALUES FROM ('2026-10-06 10:00+00') TO ('2026-10-06 11:00+00');
CREATE TABLE ev_part_default PARTITION OF ev_part DEFAULT;
SELECT counter.rollup_create('w_plain', 'ev_plain', 'occurred_at', '{link_id}');
SELECT counter.rollup_create('w_plain_f', 'ev_plain', 'occurred_at', '{link_id}', sums => '{amount}',
                             distinct_on => '{visitor_id}', filter => 'kind <> ''bot''');
SELECT counter.rollup_create('w_part', 'ev_part', 'occurred_at', '{link_id}');
SELECT counter.rollup_create('w_part_f', 'ev_part', 'occurred_at', '{link_id}', sums => '{amount}',
                             distinct_on => '{visitor_id}', filter => 'kind <> ''bot''');
-- A re-delivered event is the same event: everything follows from its id.
-- The ids of range r are r * 10,000,000 + 1 .. + 3,000,000, in id order.
CREATE FUNCTION batch(n integer, r integer) RETURNS TABLE (event_id bigint, link_id bigint, visitor_id bigint,
                                                           amount integer, kind text, occurred_at timestamptz)
LANGUAGE sql VOLATILE AS $$
    SELECT e, 1 + (e * 7919) % 12, e % 997, CASE WHEN e % 5 = 0 THEN NULL ELSE (e % 13)::integer END,
           CASE WHEN e % 7 = 0 THEN 'bot' ELSE 'human' END,
           '2026-10-06 09:00+00'::timestamptz + make_interval(secs => (e * 104729) % 10800)
    FROM (SELECT DISTINCT r * 10000000::bigint + 1 + floor(random() * 3000000)::bigint AS e
          FROM generate_series(1, n)) s
    ORDER BY e
$$;
SQL

# The writers' own deadlocks are ruled out, so that any deadlock is
# counter_ext's: a re-delivered event waits for the writer that has it
# uncommitted (ON CONFLICT DO NOTHING), so writers inserting the same ids in
# different orders would deadlock on the sources' unique indexes without any
# rollup (seen: 30 deadlocks in 20 s with 30,000 ids and no rollup). Every
# transaction inserts in one order: statement k of a script draws from id
# range k, ranges rise along a transaction, ev_plain before ev_part in one
# range, ids in increasing order within a statement (INSERT ... SELECT ...
# ORDER BY). A range is shared by the scripts, so events are re-delivered
# across writers as before.
cat >"$work/batch.sql" <<'SQL'
BEGIN;
CREATE TEMP TABLE IF NOT EXISTS b ON COMMIT DELETE ROWS AS SELECT * FROM batch(0, 1);
INSERT INTO b SELECT * FROM batch(300, 1);
INSERT INTO ev_plain SELECT * FROM b ORDER BY event_id ON CONFLICT (event_id, occurred_at) DO NOTHING;
INSERT INTO ev_part SELECT * FROM b ORDER BY event_id ON CONFLICT (event_id, occurred_at) DO NOTHING;
COMMIT;
SQL
cat >"$work/savepoints.sql" <<'SQL'
BEGIN;
INSERT INTO ev_plain SELECT * FROM batch(100, 1) ON CONFLICT (event_id, occurred_at) DO NOTHING;
SAVEPOINT a;
INSERT INTO ev_plain SELECT * FROM batch(100, 2) ON CONFLICT (event_id, occurred_at) DO NOTHING;
INSERT INTO ev_part SELECT * FROM batch(100, 3) ON CONFLICT (event_id, occurred_at) DO NOTHING;
SAVEPOINT b;
INSERT INTO ev_part SELECT * FROM batch(100, 4) ON CONFLICT (event_id, occurred_at) DO NOTHING;
ROLLBACK TO SAVEPOINT a;
INSERT INTO ev_plain SELECT * FROM batch(100, 5) ON CONFLICT (event_id, occurred_at) DO NOTHING;
SAVEPOINT c;
INSERT INTO ev_part SELECT * FROM batch(100, 6) ON CONFLICT (event_id, occurred_at) DO NOTHING;
RELEASE SAVEPOINT c;
SAVEPOINT d;
INSERT INTO ev_part SELECT * FROM batch(100, 7) ON CONFLICT (event_id, occurred_at) DO NOTHING;
ROLLBACK TO SAVEPOINT d;
COMMIT;
SQL
cat >"$work/aborted.sql" <<'SQL'
BEGIN;
INSERT INTO ev_plain SELECT * FROM batch(200, 1) ON CONFLICT (event_id, occurred_at) DO NOTHING;
INSERT INTO ev_part SELECT * FROM batch(200, 2) ON CONFLICT (event_id, occurred_at) DO NOTHING;
ROLLBACK;
SQL

"$CE_PGBIN/pgbench" -n -c 8 -j 2 -T "$seconds" -f "$work/batch.sql@6" -f "$work/savepoints.sql@3" \
    -f "$work/aborted.sql@1" >"$work/writers.out" 2>&1 || { cat "$work/writers.out"; exit 1; }
grep -E "processed|failed" "$work/writers.out"
grep -E "number of failed transactions: 0 " "$work/writers.out" >/dev/null || { cat "$work/writers.out"; exit 1; }
deadlocks_after=$(grep -c "deadlock detected" "$CE_main_LOG" 2>/dev/null || true)
[ "$deadlocks_after" = "$deadlocks_before" ] || { echo "deadlock detected in the server log"; exit 1; }

# Rows of rollup $1 (of source $2, filter $3, with the sum and sketch when $4)
# that differ from a GROUP BY over the source, both ways.
check() {
    local rollup=$1 source=$2 filter=$3 full=$4 cols truth
    if [ "$full" = 1 ]; then
        cols="link_id, hour, count, sum_amount, round(counter.hll_cardinality(distinct_visitor_id))::bigint"
        truth="link_id, counter.rollup_hour(occurred_at), count(*), coalesce(sum(amount), 0), count(DISTINCT visitor_id)"
    else
        cols="link_id, hour, count"
        truth="link_id, counter.rollup_hour(occurred_at), count(*)"
    fi
    ce_psql -At -c "SELECT count(*) FROM ((SELECT $truth FROM $source WHERE $filter GROUP BY 1, 2 EXCEPT SELECT $cols FROM $rollup)
                    UNION ALL (SELECT $cols FROM $rollup EXCEPT SELECT $truth FROM $source WHERE $filter GROUP BY 1, 2)) d"
}
events=$(ce_psql -At -c "SELECT (SELECT count(*) FROM ev_plain) || ' ' || (SELECT count(*) FROM ev_part)")
echo "events: $events (plain, partitioned)"
read -r n_plain n_part <<<"$events"
[ "$n_plain" -gt 1000 ] && [ "$n_part" -gt 1000 ] || { echo "too few events: the writers did not run"; exit 1; }
fail=0
for r in "w_plain ev_plain true 0" "w_plain_f ev_plain kind<>'bot' 1" "w_part ev_part true 0" "w_part_f ev_part kind<>'bot' 1"; do
    read -r rollup source filter full <<<"$r"
    d=$(check "$rollup" "$source" "$filter" "$full")
    rows=$(ce_psql -At -c "SELECT count(*) FROM $rollup")
    echo "$rollup: $rows rows, differing from GROUP BY: $d"
    [ "$d" = 0 ] && [ "$rows" -gt 0 ] || fail=1
done
dirty=$(ce_psql -At -c "SELECT count(*) FROM counter.rollup_dirty")
echo "dirty hours: $dirty"
[ "$dirty" = 0 ] || fail=1
# The sketches (and sums) the commits merged equal recomputed ones byte for byte.
for rollup in w_plain w_plain_f w_part w_part_f; do
    changed=$(ce_psql -At -c "SELECT counter.rollup_recompute('$rollup', '2026-10-06 09:00+00', '2026-10-06 12:00+00')")
    echo "$rollup: rows a recompute changed: $changed"
    [ "$changed" = 0 ] || fail=1
done
[ "$fail" = 0 ] || exit 1

# One session: a recompute in the writing transaction sees the rows once.
ce_psql -v ON_ERROR_STOP=1 -At <<'SQL' >"$work/same"
BEGIN;
INSERT INTO ev_plain SELECT * FROM batch(500, 1) ON CONFLICT (event_id, occurred_at) DO NOTHING;
SAVEPOINT s;
INSERT INTO ev_plain SELECT * FROM batch(500, 1) ON CONFLICT (event_id, occurred_at) DO NOTHING;
SELECT counter.rollup_recompute('w_plain_f', '2026-10-06 09:00+00', '2026-10-06 12:00+00') >= 0;
ROLLBACK TO SAVEPOINT s;
SELECT counter.rollup_recompute('w_plain', '2026-10-06 09:00+00', '2026-10-06 12:00+00') >= 0;
INSERT INTO ev_plain SELECT * FROM batch(500, 1) ON CONFLICT (event_id, occurred_at) DO NOTHING;
COMMIT;
SQL
for r in "w_plain ev_plain true 0" "w_plain_f ev_plain kind<>'bot' 1"; do
    read -r rollup source filter full <<<"$r"
    d=$(check "$rollup" "$source" "$filter" "$full")
    echo "after a recompute in the writing transaction, $rollup differing from GROUP BY: $d"
    [ "$d" = 0 ] || exit 1
done

# PREPARE TRANSACTION writes the rows before the prepare: counted at COMMIT
# PREPARED, not at all after ROLLBACK PREPARED. (The two write different
# rollup rows: a prepared transaction holds its rows' locks until it ends.)
before=$(ce_psql -At -c "SELECT sum(count) FROM w_part")
ce_psql -v ON_ERROR_STOP=1 -c "BEGIN" -c "INSERT INTO ev_part VALUES (9000001, 1, 1, 1, 'human', '2026-10-06 09:30+00')" \
    -c "PREPARE TRANSACTION 'rw1'" >/dev/null
ce_psql -v ON_ERROR_STOP=1 -c "BEGIN" -c "INSERT INTO ev_part VALUES (9000002, 2, 1, 1, 'human', '2026-10-06 09:30+00')" \
    -c "PREPARE TRANSACTION 'rw2'" >/dev/null
mid=$(ce_psql -At -c "SELECT sum(count) FROM w_part")
ce_psql -v ON_ERROR_STOP=1 -c "COMMIT PREPARED 'rw1'" -c "ROLLBACK PREPARED 'rw2'" >/dev/null
after=$(ce_psql -At -c "SELECT sum(count) FROM w_part")
echo "prepared: rollup sum before $before, while prepared $mid, after commit/rollback prepared $after"
[ "$mid" = "$before" ] && [ "$after" = $((before + 1)) ] || exit 1
[ "$(check w_part ev_part true 0)" = 0 ] || exit 1

# A rollup dropped in the writing transaction is not written at its commit.
ce_psql -v ON_ERROR_STOP=1 -At -c "BEGIN" -c "INSERT INTO ev_plain SELECT * FROM batch(50, 1) ON CONFLICT DO NOTHING" \
    -c "SELECT counter.rollup_drop('w_plain')" -c "COMMIT" >/dev/null
left=$(ce_psql -At -c "SELECT count(*) FROM counter.rollups WHERE name = 'w_plain'")
[ "$left" = 0 ] || exit 1
[ "$(check w_plain_f ev_plain "kind<>'bot'" 1)" = 0 ] || exit 1
echo "a rollup dropped in the writing transaction: commit ok, the other rollup of the source exact"
"$CE_PGBIN/dropdb" $db
