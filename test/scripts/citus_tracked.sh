#!/usr/bin/env bash
# Issue 21 items 4 and 7 (filters), the part 1.6 does: application-mode and
# buffered tracked counters, with and without a filter, on a table Citus
# distributes, owned by an unprivileged role. The same data is written to a
# plain table on the coordinator (one node) with the same counters; every
# value on both equals count(*) with the filter. Writes go through the
# coordinator, each row with its add in the same transaction; a re-delivered
# batch (ON CONFLICT DO NOTHING) and a rolled-back one are not counted. The
# filter runs on the shards (carried by the batch function as SQL, no
# catalog needed there). Drift injected on the cluster (state changed, rows
# deleted and written without an add) is found and repaired. A query that
# Citus would send whole to a worker and that calls counter.value fails with
# 0A000 there, never a wrong number.
# citus: smoke
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
source test/citus.sh
ce_citus_script_setup

if [ -z "${CE_CITUS_KEEP:-}" ]; then
    trap 'ce_cluster_stop_all' EXIT
    ce_citus_cluster_start
fi
coord() { ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U "$(ce_owner_name)" -d postgres -v ON_ERROR_STOP=1 "$@"; }
app() { ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U ct_app -d postgres -v ON_ERROR_STOP=1 "$@"; }
fail() { echo "FAIL: $*"; exit 1; }

if [ -n "${CE_CITUS_KEEP:-}" ]; then   # a cluster kept between runs (development)
    coord -q -c "SELECT counter.untrack(name) FROM counter.tracked WHERE name LIKE 'ev%'" \
        -c "DROP SCHEMA IF EXISTS ct CASCADE" -c "DROP ROLE IF EXISTS ct_app" -c "DROP ROLE IF EXISTS ct_w" \
        -c "DROP ROLE IF EXISTS ct_x" >/dev/null
fi
coord -q <<'SQL'
CREATE ROLE ct_app LOGIN;
CREATE ROLE ct_w LOGIN;   -- a writer: INSERT on the tables, no right on any counter's state
CREATE ROLE ct_x LOGIN;   -- no right on anything of ct_app's
CREATE SCHEMA ct AUTHORIZATION ct_app;
SQL
# the same table twice: distributed (the cluster) and plain (one node)
app -q <<'SQL'
SET client_min_messages = warning;
CREATE TYPE ct.kind AS ENUM ('view', 'bot', 'click');
CREATE TABLE ct.ev (id bigint NOT NULL, k bigint NOT NULL, at timestamptz NOT NULL, kind ct.kind NOT NULL,
                    note text, PRIMARY KEY (k, id));
CREATE INDEX ON ct.ev (at);
CREATE TABLE ct.ev_one (LIKE ct.ev INCLUDING ALL);
SELECT create_distributed_table('ct.ev', 'k', shard_count := 8);
SQL

# counters: application mode and buffered, each with a filter, and one without
for t in ev ev_one; do
    app -q -c "SET client_min_messages = warning" \
        -c "SELECT counter.track('${t}_f', 'ct.$t', 'k', 'at', mode => 'application',
                filter => \$\$kind <> 'bot' AND coalesce(note, '') NOT LIKE '%test''s%'\$\$)" \
        -c "SELECT counter.track('${t}_b', 'ct.$t', 'k', 'at', mode => 'application', buffered => true,
                filter => \$\$kind = 'click'\$\$)" \
        -c "SELECT counter.track('${t}_n', 'ct.$t', 'k', 'at', mode => 'application')" >/dev/null
done
echo "ok: application-mode and buffered counters with a filter are made on a distributed table"
# where their state is (1.8): beside the rows, on the shards, for the
# counters keyed by the distribution column, buffered too (the buffered
# one's adds go to the buffer of the node of the key's shard)
got=$(app -tA -c "SELECT string_agg(name || '=' || distributed, ' ' ORDER BY name) FROM counter.tracked WHERE name LIKE 'ev%'")
[ "$got" = "ev_b=true ev_f=true ev_n=true ev_one_b=false ev_one_f=false ev_one_n=false" ] ||
    fail "where the counters' state is: $got"
app -q -c "GRANT USAGE ON SCHEMA ct TO ct_w, ct_x" -c "GRANT SELECT, INSERT ON ct.ev, ct.ev_one TO ct_w"

F="kind <> 'bot' AND coalesce(note, '') NOT LIKE '%test''s%'"
B="kind = 'click'"
# One delivery of a batch of events (ids a..b) into table t, each row with
# its adds in the same transaction: the application counts only the rows it
# inserted (a re-delivered row conflicts and is not counted again), and
# applies each counter's filter itself.
deliver() {
    local t=$1 a=$2 b=$3 end=${4:-COMMIT} as=${5:-app}
    $as -q >/dev/null <<SQL
BEGIN;
CREATE TEMP TABLE new_rows ON COMMIT DROP AS WITH ins AS (
    INSERT INTO ct.$t SELECT g, g % 97, '2026-07-01 10:00+00'::timestamptz + (g % 60) * interval '1 minute',
        (ARRAY['view', 'bot', 'click'])[1 + g % 3]::ct.kind, CASE WHEN g % 11 = 0 THEN 'a test''s row' END
    FROM generate_series($a, $b) g
    ON CONFLICT DO NOTHING RETURNING *)
SELECT * FROM ins;
SELECT count(counter.add('${t}_f', k, n, at)) FROM (SELECT k, at, count(*) AS n FROM new_rows WHERE $F GROUP BY 1, 2) x;
SELECT count(counter.add('${t}_b', k, n, at)) FROM (SELECT k, at, count(*) AS n FROM new_rows WHERE $B GROUP BY 1, 2) x;
SELECT count(counter.add('${t}_n', k, n, at)) FROM (SELECT k, at, count(*) AS n FROM new_rows GROUP BY 1, 2) x;
$end;
SQL
}
writer() { ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U ct_w -d postgres -v ON_ERROR_STOP=1 "$@"; }
for t in ev ev_one; do
    deliver "$t" 1 3000
    deliver "$t" 2001 5000            # re-delivered: 2001-3000 again
    deliver "$t" 5001 6000 ROLLBACK   # rolled back: neither rows nor adds
    # another role than the owner writes rows and adds (Citus refuses a
    # write as the owner to the placements the writer's INSERT wrote: the
    # add reaches the shard as the writer, through the counter's inbox)
    deliver "$t" 6001 7000 COMMIT writer
    deliver "$t" 6501 7500 COMMIT writer   # re-delivered in part
done

# Keys where counter c and count(*) of table ct.t with filter f differ.
mismatches() { ce_citus_mismatches app "$1" "ct.$2" "$3"; }
check_all() {
    local what=$1 t got
    for t in ev ev_one; do
        for c in "f|$F" "b|$B" "n|true"; do
            got=$(mismatches "${t}_${c%%|*}" "$t" "${c#*|}")
            [ "$got" = 0 ] || fail "$what: counter ${t}_${c%%|*}: $got keys differ from count(*)"
        done
    done
    echo "ok: $what: every value of every counter equals count(*) with its filter, on the cluster and on one node"
}
check_all "written with their adds"

# The inbox of a counter whose state is on the shards: a role without
# INSERT on the table cannot add through it (42501, on the shard), nor with
# counter.add; a writer's rows never stay in it.
inbox=$(coord -tA -c "SELECT counter_internal.tracked_table(t, 'inbox') FROM counter.tracked t WHERE name = 'ev_n'")
out=$(ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U ct_x -d postgres -v VERBOSITY=verbose \
    -c "INSERT INTO $inbox VALUES (7, now(), 0, 1000)" 2>&1) && fail "a role without rights added through the inbox: $out"
case $out in
*"ERROR:  42501: permission denied to add to tracked counter"*) ;;
*) fail "an insert into the inbox by a role without INSERT on the table: $out" ;;
esac
out=$(ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U ct_x -d postgres -v VERBOSITY=verbose \
    -c "SELECT counter.add('ev_n', 7::bigint, 1000)" 2>&1) && fail "a role without rights added: $out"
case $out in
*"ERROR:  42501: permission denied to add to tracked counter \"ev_n\""*) ;;
*) fail "counter.add by a role without INSERT on the table: $out" ;;
esac
# a writer's row with a NULL (the trigger drops every row, so the columns'
# NOT NULL is never checked): refused by the trigger
out=$(ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U ct_w -d postgres -v VERBOSITY=verbose \
    -c "INSERT INTO $inbox VALUES (7, NULL, 0, 1000)" 2>&1) && fail "a NULL bucket was taken by the inbox: $out"
case $out in
*"ERROR:  23502: a row of the inbox of tracked counter "[0-9]*" has a NULL"*) ;;
*) fail "an insert of a NULL into the inbox: $out" ;;
esac
[ "$(coord -tA -c "SELECT count(*) FROM $inbox")" = 0 ] || fail "rows stayed in the inbox $inbox"
echo "ok: the inbox takes adds of writers of the table only (42501 on the shard), refuses a NULL (23502), and keeps no row"

# Through a worker node (1.8): a writer connected to worker 1 inserts its
# rows and adds to the counters whose state is beside the rows (ev_f, ev_n)
# in the same transaction; the worker knows them from their inboxes'
# triggers. A re-delivered batch adds only its new rows, a rolled-back one
# nothing; so does the buffered counter (1.8: its adds go to the buffer of
# the node of the key's shard). value and values_of read there what they read on the
# coordinator; a role without INSERT on the table is refused there too
# (42501).
writer_w1() { ce_psql -h 127.0.0.1 -p "$CE_citus_w1_PORT" -U "${W1_ROLE:-ct_w}" -d postgres -v ON_ERROR_STOP=1 "$@"; }
deliver_w1() { # A B [END]
    writer_w1 -q >/dev/null <<SQL
BEGIN;
CREATE TEMP TABLE new_rows ON COMMIT DROP AS WITH ins AS (
    INSERT INTO ct.ev SELECT g, g % 97, '2026-07-01 10:00+00'::timestamptz + (g % 60) * interval '1 minute',
        (ARRAY['view', 'bot', 'click'])[1 + g % 3]::ct.kind, CASE WHEN g % 11 = 0 THEN 'a test''s row' END
    FROM generate_series($1, $2) g
    ON CONFLICT DO NOTHING RETURNING *)
SELECT * FROM ins;
SELECT count(counter.add('ev_f', k, n, at)) FROM (SELECT k, at, count(*) AS n FROM new_rows WHERE $F GROUP BY 1, 2) x;
SELECT count(counter.add('ev_n', k, n, at)) FROM (SELECT k, at, count(*) AS n FROM new_rows GROUP BY 1, 2) x;
SELECT count(counter.add('ev_b', k, n, at)) FROM (SELECT k, at, count(*) AS n FROM new_rows WHERE $B GROUP BY 1, 2) x;
${3:-COMMIT};
SQL
}
deliver_w1 8001 9000
deliver_w1 8501 9500            # re-delivered in part
deliver_w1 9501 9700 ROLLBACK   # neither rows nor adds
deliver ev_one 8001 9000 COMMIT writer
deliver ev_one 8501 9500 COMMIT writer
[ "$(coord -tA -c "SELECT count(*) FROM ct.ev WHERE id BETWEEN 8001 AND 9700")" = 1500 ] ||
    fail "the worker's deliveries left $(coord -tA -c "SELECT count(*) FROM ct.ev WHERE id BETWEEN 8001 AND 9700") rows (1500 expected)"
check_all "rows and adds written through a worker node"
# reads on the worker: every key of the counters beside the rows, by value
# and by values_of, as on the coordinator (the buffered one's too)
reads="SELECT string_agg(k || ':' || counter.value('ev_n', k), ',' ORDER BY k) FROM generate_series(0, 96::bigint) k"
reads_of="SELECT string_agg(key || ':' || value, ',' ORDER BY key) FROM counter.values_of('ev_f', ARRAY(SELECT generate_series(0, 96::bigint)))"
reads_b="SELECT string_agg(k || ':' || counter.value('ev_b', k), ',' ORDER BY k) FROM generate_series(0, 96::bigint) k"
reads_b_of="SELECT string_agg(key || ':' || value, ',' ORDER BY key) FROM counter.values_of('ev_b', ARRAY(SELECT generate_series(0, 96::bigint)))"
for q in "$reads" "$reads_of" "$reads_b" "$reads_b_of"; do
    want=$(writer -tA -c "$q")
    got=$(writer_w1 -tA -c "$q")
    [ -n "$want" ] && [ "$got" = "$want" ] || fail "a read on worker 1 ($q): $got, on the coordinator: $want"
done
# counter.tracked_values on worker 1 (1.8): the counters an inbox describes
# there (ev_b, ev_f, ev_n), every key as on the coordinator; none for a role
# that may not read the table
got=$(writer_w1 -tA -c "SELECT string_agg(DISTINCT counter, ',' ORDER BY counter) FROM counter.tracked_values")
[ "$got" = "ev_b,ev_f,ev_n" ] || fail "counter.tracked_values on worker 1 lists the counters $got (expected ev_b,ev_f,ev_n)"
worker_values() { # WHAT
    local q="SELECT md5(string_agg(counter || ':' || key || ':' || value, ',' ORDER BY counter, key)), count(*) FROM counter.tracked_values WHERE counter IN ('ev_b', 'ev_f', 'ev_n')"
    local want got
    want=$(writer -tA -c "$q")
    got=$(writer_w1 -tA -c "$q")
    [ "$got" = "$want" ] && [ "${want#*|}" -ge 150 ] || fail "$1: counter.tracked_values on worker 1: $got, on the coordinator: $want"
}
worker_values "adds only"
got=$(W1_ROLE=ct_x writer_w1 -tA -c "SELECT count(*) FROM counter.tracked_values WHERE counter IN ('ev_f', 'ev_n')")
[ "$got" = 0 ] || fail "a role without SELECT on ct.ev read $got keys of its counters on worker 1"
# in a query Citus sends to a worker (its connections name themselves so):
# refused, as value and add are
out=$(PGAPPNAME='citus_internal gpid=10000000001' writer_w1 -v VERBOSITY=verbose -c "SELECT count(*) FROM counter.tracked_values" 2>&1) &&
    fail "counter.tracked_values in a query named as Citus's: $out"
grep -q "ERROR:  0A000: counter.tracked_values is not read in a query Citus sends to a worker node" <<<"$out" ||
    fail "counter.tracked_values in a query named as Citus's: $out"
out=$(W1_ROLE=ct_x writer_w1 -v VERBOSITY=verbose -c "SELECT counter.value('ev_n', 7::bigint)" 2>&1) &&
    fail "a role without rights read on a worker: $out"
grep -q "ERROR:  42501: permission denied to read tracked counter \"ev_n\"" <<<"$out" || fail "a read by ct_x on a worker: $out"
out=$(W1_ROLE=ct_x writer_w1 -v VERBOSITY=verbose -c "SELECT counter.add('ev_n', 7::bigint, 1000)" 2>&1) &&
    fail "a role without rights added on a worker: $out"
grep -q "ERROR:  42501: permission denied to add to tracked counter \"ev_n\"" <<<"$out" || fail "an add by ct_x on a worker: $out"
# Single-row transactions (one shard, one node: committed there alone) keep
# the buffered counter's adds in the buffer of the key's node (1.8), through
# the coordinator and through worker 1; the reads count them, the flush
# writes them
single() { # RUN ID
    $1 -q >/dev/null <<SQL
BEGIN;
INSERT INTO ct.ev VALUES ($2, 5, '2026-07-01 10:30+00', 'click', NULL);
SELECT counter.add('ev_f', 5::bigint, 1, '2026-07-01 10:30+00'), counter.add('ev_b', 5::bigint, 1, '2026-07-01 10:30+00'),
       counter.add('ev_n', 5::bigint, 1, '2026-07-01 10:30+00');
COMMIT;
SQL
}
for i in $(seq 1 10); do single writer $((9900 + i)); single writer_w1 $((9950 + i)); done
# (the same rows and adds on one node)
writer -q -c "BEGIN" -c "INSERT INTO ct.ev_one SELECT * FROM ct.ev WHERE id BETWEEN 9901 AND 9960" \
    -c "SELECT counter.add(c, 5::bigint, 20, '2026-07-01 10:30+00') FROM unnest(ARRAY['ev_one_f', 'ev_one_b', 'ev_one_n']) c" \
    -c "COMMIT" >/dev/null
held=0
for p in $CE_citus_w1_PORT $CE_citus_w2_PORT; do
    n=$(ce_psql -h 127.0.0.1 -p "$p" -U "$(ce_owner_name)" -d postgres -tA -c "SELECT coalesce(sum(entries), 0) FROM counter.buffer_shares()")
    held=$((held + n))
done
[ "$held" -gt 0 ] || fail "the single-row adds to the buffered counter ev_b left nothing in a node's buffer"
check_all "single-row transactions, the buffered counter's adds in its node's buffer"
app -q -c "SELECT counter.flush('ev_b')" >/dev/null
check_all "single-row transactions, then flushed"
echo "ok: single-row transactions through the coordinator and worker 1 keep the buffered counter's adds in the buffer of the key's node ($held entries), read exactly there and after the flush"

echo "ok: through a worker node, rows and their adds in one transaction (re-delivered, rolled back) count exactly, and value/values_of/tracked_values read there what the coordinator reads (a buffered counter's too); a role without INSERT (SELECT) may not add (read) there (42501)"

# A worker node finds a counter by its inbox's trigger: another role may not
# make a trigger naming ct_app's counter on a table of its own (it would
# take the writers' adds on the workers), refused where it is made
n_id=$(coord -tA -c "SELECT counter_id FROM counter.tracked WHERE name = 'ev_n'")
coord -q -c "CREATE SCHEMA ct_xs AUTHORIZATION ct_x"
forged() { # forged SOURCE: an inbox trigger naming ev_n (and SOURCE) on ct_x's own table
    echo "SET citus.enable_unsafe_triggers = on;
CREATE TRIGGER counter_${n_id}_add BEFORE INSERT ON ct_xs.counter_tracked_${n_id}_inbox FOR EACH ROW
    EXECUTE FUNCTION counter_internal.tracked_shard_add('${n_id}', 'citus', '$1', 'ct_xs.d', 'ev_n', '300000000', '64', '0');"
}
out=$(ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U ct_x -d postgres -v ON_ERROR_STOP=1 -v VERBOSITY=verbose <<SQL 2>&1
SET client_min_messages = warning;
CREATE TABLE ct_xs.counter_tracked_${n_id}_inbox (key bigint NOT NULL, bucket timestamptz NOT NULL, shard smallint NOT NULL, delta bigint NOT NULL);
SELECT create_distributed_table('ct_xs.counter_tracked_${n_id}_inbox', 'key', colocate_with := 'none');
CREATE TABLE ct_xs.d (key bigint, bucket timestamptz, shard smallint, delta bigint, PRIMARY KEY (key, bucket, shard));
$(forged ct.ev)
SQL
) && fail "another role attached an inbox trigger naming ev_n: $out"
grep -q "ERROR:  0A000: trigger counter_${n_id}_add of counter_ext on ct_xs.counter_tracked_${n_id}_inbox is refused" <<<"$out" ||
    fail "another role's inbox trigger naming ev_n: $out"
# nor on a worker node alone, with Citus's DDL propagation turned off (a
# trigger naming ev_n on its own table there would make the worker's
# lookup of ev_n ambiguous: every add there refused)
out=$(W1_ROLE=ct_x writer_w1 -v VERBOSITY=verbose <<SQL 2>&1
SET citus.enable_ddl_propagation = off;
$(forged "ct_xs.counter_tracked_${n_id}_inbox")
SQL
) && fail "another role attached an inbox trigger naming ev_n on worker 1: $out"
grep -q "ERROR:  42501: the trigger counter_${n_id}_add of counter_ext on ct_xs.counter_tracked_${n_id}_inbox is made on a Citus worker node by counter.track only" <<<"$out" ||
    fail "another role's inbox trigger naming ev_n on worker 1: $out"
# nor a second trigger on the inbox of a counter of its own (its id, its
# table) that gives ct_app's counter's name: on a worker node the lookup of
# ev_n would find it (the name must be the counter's)
out=$(ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U ct_x -d postgres -v ON_ERROR_STOP=1 -v VERBOSITY=verbose <<'SQL' 2>&1
SET client_min_messages = warning;
CREATE TABLE ct_xs.mine (k bigint NOT NULL, at timestamptz NOT NULL);
SELECT create_distributed_table('ct_xs.mine', 'k', shard_count := 2);
SELECT counter.track('x_mine', 'ct_xs.mine', 'k', 'at', mode => 'application');
SET citus.enable_unsafe_triggers = on;
DO $$
DECLARE id integer := (SELECT counter_id FROM counter.tracked WHERE name = 'x_mine');
BEGIN
    EXECUTE format('CREATE TRIGGER %I BEFORE INSERT ON ct_xs.%I FOR EACH ROW EXECUTE FUNCTION counter_internal.tracked_shard_add(%L, %L, %L, %L, %L, %L, %L, %L)',
                   'counter_' || id || '_add2', 'counter_tracked_' || id || '_inbox', id, 'citus', 'ct_xs.mine',
                   'ct_xs.counter_tracked_' || id || '_delta', 'ev_n', '300000000', '64', '0');
END $$;
SQL
) && fail "another role attached a trigger naming ev_n to the inbox of its own counter: $out"
grep -q "ERROR:  0A000: trigger counter_[0-9]*_add2 of counter_ext on ct_xs.counter_tracked_[0-9]*_inbox is refused" <<<"$out" ||
    fail "another role's trigger naming ev_n on its own counter's inbox: $out"
deliver_w1 9701 9800
deliver ev_one 9701 9800 COMMIT writer
check_all "another role's trigger naming the counter refused (on the coordinator, and on a worker alone), then more rows through the worker"

# the same numbers on the cluster and on one node
got=$(app -tA -c "SELECT count(*) FROM counter.tracked_values a FULL JOIN counter.tracked_values b
    ON b.counter = replace(a.counter, 'ev_one_', 'ev_') AND a.key = b.key
    WHERE (a.counter LIKE 'ev\_one\_%' OR a.counter IS NULL) AND (b.counter NOT LIKE 'ev\_one\_%' OR b.counter IS NULL)
      AND a.value IS DISTINCT FROM b.value")
[ "$got" = 0 ] || fail "$got values differ between the cluster and one node"
echo "ok: every value on the cluster equals the value on one node"

# reconciliation: the filter runs on the shards
for t in ev ev_one; do
    for c in f b n; do
        got=$(app -tA -c "SELECT keys_corrected || ' ' || outcome FROM counter.reconcile('${t}_$c', '2026-07-02', all_keys => true)")
        [ "$got" = "0 ok" ] || fail "reconcile ${t}_$c found drift where there was none: $got"
    done
done
check_all "reconciled"

# A batch takes batch_size keys per shard of a distributed source (the
# keys query and the count are fan-outs to every shard whatever the batch's
# size): with batch_size 3 and 8 shards the first batch checks 24 of the 97
# keys on the cluster, 3 on one node; the run goes on to every key.
first_batch() {
    coord -tA <<SQL
SELECT counter.track('$1', 'ct.$2', 'k', 'at', mode => 'application', batch_size => 3);
DO \$\$
DECLARE
    args jsonb := '{"watermark": "2026-07-02", "all_keys": true}';
    s jsonb := counter_internal.tracked_run_step('$1', args, NULL);
    first bigint;
BEGIN
    s := counter_internal.tracked_run_step('$1', args, s);
    first := (s ->> 'done')::bigint;
    WHILE NOT (s ->> 'finished')::boolean LOOP
        s := counter_internal.tracked_run_step('$1', args, s);
    END LOOP;
    RAISE NOTICE 'first batch % keys, %', first, s -> 'result' ->> 'outcome';
END
\$\$;
SQL
}
for t in ev:24 ev_one:3; do
    got=$(first_batch "${t%%:*}_3" "${t%%:*}" 2>&1 | sed -n 's/.*NOTICE:  //p')
    [ "$got" = "first batch ${t#*:} keys, ok" ] || fail "reconciliation of ${t%%:*}_3 (batch_size 3): $got"
    got=$(mismatches "${t%%:*}_3" "${t%%:*}" true)
    [ "$got" = 0 ] || fail "counter ${t%%:*}_3: $got keys differ from count(*) after its run"
done
echo "ok: a batch takes batch_size keys per shard of the distributed table (24 with 8 shards), 3 on one node"

# drift injected on the cluster: the state changed, rows deleted without a
# decrement, rows written without an add
coord -q <<'SQL'
DO $$
DECLARE c record;
BEGIN
    FOR c IN SELECT counter_internal.tracked_table(t, 'base') AS b FROM counter.tracked t WHERE name IN ('ev_f', 'ev_b', 'ev_n') LOOP
        EXECUTE format('UPDATE %s SET base = base + 5 WHERE key IN (1, 2, 3)', c.b);
    END LOOP;
END $$;
SQL
app -q -c "DELETE FROM ct.ev WHERE k = 4 AND id % 2 = 0" \
    -c "INSERT INTO ct.ev SELECT g, 5, '2026-07-01 11:00+00', 'click', NULL FROM generate_series(100001, 100010) g"
for c in f b n; do
    got=$(mismatches "ev_$c" ev "$(case $c in f) echo "$F" ;; b) echo "$B" ;; n) echo true ;; esac)")
    [ "$got" -ge 4 ] || fail "the injected drift of ev_$c is not seen ($got keys)"
    got=$(app -tA -c "SELECT keys_corrected || ' ' || outcome FROM counter.reconcile('ev_$c', '2026-07-02', all_keys => true)")
    [ "$got" = "5 ok" ] || fail "reconcile of ev_$c after injected drift: $got (5 keys corrected expected)"
done
app -q -c "DELETE FROM ct.ev_one WHERE k = 4 AND id % 2 = 0" \
    -c "INSERT INTO ct.ev_one SELECT g, 5, '2026-07-01 11:00+00', 'click', NULL FROM generate_series(100001, 100010) g"
for c in f b n; do app -q -c "SELECT counter.reconcile('ev_one_$c', '2026-07-02', all_keys => true)" >/dev/null; done
check_all "drift injected on the cluster, reconciled"
# reconciled: the keys' amounts are in the base tables now, read on worker 1 too
[ "$(coord -tA -c "SELECT count(*) FROM $(coord -tA -c "SELECT counter_internal.tracked_table(t, 'base') FROM counter.tracked t WHERE name = 'ev_n'") WHERE base <> 0")" -ge 50 ] ||
    fail "the reconciliation left ev_n's base table (nearly) empty"
worker_values "reconciled (base and deltas)"

# A query that Citus sends whole to a worker (routed to one shard) and that
# calls counter.value: 0A000 with a hint, never a number read on the worker
out=$(app -v VERBOSITY=verbose -c "SELECT counter.value('ev_f', 7::bigint), (SELECT count(*) FROM ct.ev WHERE k = 7)" 2>&1) &&
    fail "counter.value in a query routed to a worker returned: $out"
case $out in
*"ERROR:  0A000: tracked counter \"ev_f\" is not on this Citus worker node"*"HINT:  Read the counter in a statement of its own"*)
    echo "ok: counter.value in a query Citus routes to a worker fails with 0A000 and a hint" ;;
*) fail "counter.value in a query routed to a worker: $out" ;;
esac
# the way to read both: two statements
v=$(app -tA -c "SELECT counter.value('ev_f', 7::bigint)")
n=$(app -tA -c "SELECT count(*) FROM ct.ev WHERE k = 7 AND $F")
[ "$v" = "$n" ] && [ "$n" -gt 0 ] || fail "counter.value read alone: $v, count(*): $n"
echo "ok: read in a statement of its own, the value equals count(*)"
