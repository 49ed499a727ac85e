#!/usr/bin/env bash
# Issue 21 item 4, its heart: trigger-mode tracked counters on a table Citus
# hash-distributes, keyed by its distribution column, with and without a
# filter, on a plain and on a partitioned distributed table, owned by an
# unprivileged role and written by another. The state (base, delta) is
# distributed colocated with the source and the triggers run on the shards,
# each writing its own delta shard in the writer's transaction. The same
# rows go to plain tables on the coordinator (one node) with the same
# counters. Rows written through the coordinator and directly through a
# worker node, by INSERT, COPY, INSERT ... SELECT, UPDATE and DELETE, are
# counted in their transaction; re-delivered (ON CONFLICT DO NOTHING) and
# rolled-back rows are not; every value equals count(*) with the filter, and
# the value of the same key on one node. Drift injected on the cluster is
# found and repaired by the reconciliation; untrack leaves nothing on any
# node; DROP OWNED and DROP EXTENSION leave nothing behind either. The
# counters with a filter reconcile in batches of 4 keys per shard (several
# batches per shard); drift injected on many keys of every shard is
# repaired by one reconcile(all_keys) and by the job, exactly as on one node,
# each shard reached by a bounded number of statements per run.
# citus: whole on 15
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib.sh
source test/citus.sh
ce_citus_script_start ct_own ct_app

coord -q <<'SQL'
CREATE ROLE ct_own LOGIN;
CREATE ROLE ct_app LOGIN;
CREATE SCHEMA ct AUTHORIZATION ct_own;
SQL
# the same tables twice: distributed (the cluster) and plain (one node)
owner -q <<'SQL'
SET client_min_messages = warning;
CREATE TYPE ct.kind AS ENUM ('view', 'bot', 'click');
CREATE TABLE ct.ev (id bigint NOT NULL, k bigint NOT NULL, at timestamptz NOT NULL, kind ct.kind NOT NULL,
                    PRIMARY KEY (k, id));
CREATE INDEX ON ct.ev (at);
CREATE TABLE ct.ev_one (LIKE ct.ev INCLUDING ALL);
SELECT create_distributed_table('ct.ev', 'k', shard_count := 8);
DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['pev', 'pev_one'] LOOP
        EXECUTE format('CREATE TABLE ct.%I (id bigint NOT NULL, k bigint NOT NULL, at timestamptz NOT NULL,'
                       ' kind ct.kind NOT NULL, PRIMARY KEY (k, id, at)) PARTITION BY RANGE (at)', t);
        EXECUTE format('CREATE TABLE ct.%I PARTITION OF ct.%I FOR VALUES FROM (''2026-07-01'') TO (''2026-07-02'')', t || '_a', t);
        EXECUTE format('CREATE TABLE ct.%I PARTITION OF ct.%I FOR VALUES FROM (''2026-07-02'') TO (''2026-07-03'')', t || '_b', t);
        EXECUTE format('CREATE TABLE ct.%I PARTITION OF ct.%I DEFAULT', t || '_d', t);
        EXECUTE format('CREATE INDEX ON ct.%I (at)', t);
    END LOOP;
END $$;
SELECT create_distributed_table('ct.pev', 'k', shard_count := 4);
GRANT USAGE ON SCHEMA ct TO ct_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON ct.ev, ct.ev_one, ct.pev, ct.pev_one TO ct_app;
SQL

F="kind <> 'bot'"
for t in ev ev_one pev pev_one; do
    owner -q -c "SET client_min_messages = warning" \
        -c "SELECT counter.track('${t}_f', 'ct.$t', 'k', 'at', filter => \$\$$F\$\$, bucket_width => '10 minutes',
                                 batch_size => 4)" \
        -c "SELECT counter.track('${t}_n', 'ct.$t', 'k', 'at')" >/dev/null
done
got=$(coord -tA -c "SELECT string_agg(name || ':' || distributed, ' ' ORDER BY name) FROM counter.tracked")
[ "$got" = "ev_f:true ev_n:true ev_one_f:false ev_one_n:false pev_f:true pev_n:true pev_one_f:false pev_one_n:false" ] ||
    fail "counters made: $got"
# the state is distributed colocated with the source; the triggers are on every shard
got=$(coord -tA <<'SQL'
SELECT count(*) FROM counter.tracked c JOIN pg_dist_partition p ON p.logicalrelid = c.source
JOIN pg_dist_partition b ON b.logicalrelid = counter_internal.tracked_table(c, 'base')::regclass
JOIN pg_dist_partition d ON d.logicalrelid = counter_internal.tracked_table(c, 'delta')::regclass
WHERE c.distributed AND b.colocationid = p.colocationid AND d.colocationid = p.colocationid
SQL
)
[ "$got" = 4 ] || fail "state tables colocated with their source: $got of 4 counters"
shard_triggers=0
for p in $CE_citus_w1_PORT $CE_citus_w2_PORT; do
    n=$(on_node "$p" -tA -c "SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE t.tgname ~ '^counter_[0-9]+_(ins|del|upd)_[0-9]+$' AND c.relname ~ '^p?ev_[0-9]+$'")
    shard_triggers=$((shard_triggers + n))
done
# ev: 8 shards, pev: 4 shards, 2 counters each, 3 triggers each (Citus
# copies no TRUNCATE trigger: the distributed table's empties the state)
[ "$shard_triggers" = $(((8 + 4) * 2 * 3)) ] || fail "triggers on the shards: $shard_triggers"
echo "ok: trigger-mode counters with and without a filter are made on a distributed and a distributed partitioned table, state colocated, triggers on every shard"

# One delivery of events a..b into table t (by the writer, through the
# coordinator unless via=w1): re-delivered rows conflict and are not counted
deliver() {
    local t=$1 a=$2 b=$3 end=${4:-COMMIT} via=${5:-coord}
    local run=app
    [ "$via" = w1 ] && run=app_w1
    $run -q >/dev/null <<SQL
BEGIN;
INSERT INTO ct.$t SELECT g, g % 97, '2026-07-01 10:00+00'::timestamptz + (g % 37) * interval '47 minutes',
    (ARRAY['view', 'bot', 'click'])[1 + g % 3]::ct.kind
FROM generate_series($a, $b) g
ON CONFLICT DO NOTHING;
$end;
SQL
}
for t in ev ev_one pev pev_one; do
    deliver "$t" 1 3000
    deliver "$t" 2001 5000                # re-delivered: 2001-3000 again
    deliver "$t" 5001 6000 ROLLBACK       # rolled back
done
# directly through a worker node (Citus's metadata is there): the cluster's
# tables; the same rows through the coordinator for one node
for t in ev pev; do
    deliver "$t" 6001 7000 COMMIT w1
    deliver "$t" 6501 7500 COMMIT w1      # re-delivered in part
    deliver "$t" 7501 8000 ROLLBACK w1
    deliver "${t}_one" 6001 7500
done
# COPY, INSERT ... SELECT (pushed down on the cluster), UPDATE, DELETE
for t in ev ev_one pev pev_one; do
    app -q <<SQL
COPY ct.$t FROM STDIN;
900001	3	2026-07-01 12:00:00+00	click
900002	4	2026-07-01 23:59:59+00	bot
900003	5	2026-07-02 00:00:00+00	view
900004	98	2026-07-05 00:00:00+00	click
\.
INSERT INTO ct.$t SELECT id + 1000000, k, at + interval '1 hour', kind FROM ct.$t WHERE id % 10 = 3;
UPDATE ct.$t SET kind = 'bot' WHERE id % 7 = 0 AND kind = 'view';
UPDATE ct.$t SET kind = 'view' WHERE id % 11 = 0 AND kind = 'bot';
DELETE FROM ct.$t WHERE id % 13 = 0;
SQL
done

# Keys where counter c and count(*) of table ct.t with filter f differ.
mismatches() { ce_citus_mismatches app "$1" "ct.$2" "$3"; }
check_all() {
    local what=$1 t got
    for t in ev ev_one pev pev_one; do
        for c in "f|$F" "n|true"; do
            got=$(mismatches "${t}_${c%%|*}" "$t" "${c#*|}")
            [ "$got" = 0 ] || fail "$what: counter ${t}_${c%%|*}: $got keys differ from count(*)"
        done
    done
    # the same numbers on the cluster and on one node, and rows there
    got=$(app -tA -c "SELECT count(*) FROM counter.tracked_values a FULL JOIN counter.tracked_values b
        ON b.counter = replace(a.counter, '_one_', '_') AND a.key = b.key
        WHERE (a.counter LIKE '%\_one\_%' OR a.counter IS NULL) AND (b.counter NOT LIKE '%\_one\_%' OR b.counter IS NULL)
          AND a.value IS DISTINCT FROM b.value")
    [ "$got" = 0 ] || fail "$what: $got values differ between the cluster and one node"
    got=$(app -tA -c "SELECT count(*) FILTER (WHERE value > 0) > 50 FROM counter.tracked_values WHERE counter = 'pev_f'")
    [ "$got" = t ] || fail "$what: too few counted keys"
    echo "ok: $what: every value equals count(*) with its filter, on the cluster and on one node, and the two agree"
}
check_all "written through the coordinator and a worker (INSERT, re-delivery, rollback, COPY, INSERT ... SELECT, UPDATE, DELETE)"

# counter.value and values_of (distributed reads) against count(*)
for c in ev_f pev_n; do
    t=${c%_*}
    f=$([ "${c#*_}" = f ] && echo "$F" || echo true)
    v=$(app -tA -c "SELECT counter.value('$c', 3::bigint)")
    n=$(app -tA -c "SELECT count(*) FROM ct.$t WHERE k = 3 AND $f")
    [ "$v" = "$n" ] && [ "$n" -gt 0 ] || fail "counter.value('$c', 3) = $v, count(*) = $n"
    got=$(app -tA <<SQL | grep -v '^$' | tail -1
CREATE TEMP TABLE c AS SELECT k, count(*) AS n FROM ct.$t WHERE $f GROUP BY k;
CREATE TEMP TABLE truth AS SELECT g AS k, coalesce(c.n, 0) AS n FROM generate_series(0, 99) g LEFT JOIN c ON c.k = g;
CREATE TEMP TABLE vals AS SELECT * FROM counter.values_of('$c', ARRAY(SELECT g::bigint FROM generate_series(0, 99) g));
SELECT count(*) FROM truth t LEFT JOIN vals v ON v.key = t.k WHERE v.value IS DISTINCT FROM t.n;
SQL
)
    [ "$got" = 0 ] || fail "counter.values_of('$c'): $got keys differ from count(*)"
done
echo "ok: counter.value and counter.values_of equal count(*)"

# Through worker 1 (1.8): counter.value, values_of and tracked_values read
# the trigger-mode counters there (the worker knows them by their INSERT
# trigger's arguments) with the coordinator's numbers; a role that may not
# read the table is refused (42501) and sees none of their rows; the
# counters on one node are not there (0A000); counter.add is refused as on
# the coordinator (55000: trigger mode)
coord -q -c "CREATE ROLE ct_none LOGIN"
none_w1() { ce_psql -h 127.0.0.1 -p "$CE_citus_w1_PORT" -U ct_none -d postgres -v ON_ERROR_STOP=1 "$@"; }
worker_reads() { # WHAT
    local c q want got
    for c in ev_f ev_n pev_f pev_n; do
        for q in "SELECT string_agg(k || ':' || counter.value('$c', k), ',' ORDER BY k) FROM generate_series(0, 99::bigint) k" \
            "SELECT string_agg(key || ':' || value, ',' ORDER BY key) FROM counter.values_of('$c', ARRAY(SELECT generate_series(0, 99::bigint)))" \
            "SELECT string_agg(key || ':' || value, ',' ORDER BY key::bigint) FROM counter.tracked_values WHERE counter = '$c'"; do
            want=$(app -tA -c "$q")
            got=$(app_w1 -tA -c "$q" 2>&1) || fail "$1: on worker 1 ($q): $got"
            [ -n "$want" ] && [ "$got" = "$want" ] || fail "$1: on worker 1 ($q): $got, on the coordinator: $want"
        done
    done
    got=$(app_w1 -tA -c "SELECT string_agg(DISTINCT counter, ',' ORDER BY counter) FROM counter.tracked_values")
    [ "$got" = "ev_f,ev_n,pev_f,pev_n" ] || fail "$1: counter.tracked_values on worker 1 lists $got (expected ev_f,ev_n,pev_f,pev_n)"
}
worker_reads "written"
out=$(none_w1 -v VERBOSITY=verbose -c "SELECT counter.value('ev_n', 3::bigint)" 2>&1) && fail "a role without rights read ev_n on worker 1: $out"
grep -q "ERROR:  42501: permission denied to read tracked counter \"ev_n\"" <<<"$out" || fail "a read of ev_n by ct_none on worker 1: $out"
got=$(none_w1 -tA -c "SELECT count(*) FROM counter.tracked_values")
[ "$got" = 0 ] || fail "a role without SELECT on the tables read $got keys on worker 1"
out=$(app_w1 -v VERBOSITY=verbose -c "SELECT counter.value('ev_one_n', 3::bigint)" 2>&1) && fail "a read of a one-node counter on worker 1: $out"
grep -q "ERROR:  0A000: tracked counter \"ev_one_n\" is not on this Citus worker node" <<<"$out" || fail "a read of ev_one_n on worker 1: $out"
out=$(app_w1 -v VERBOSITY=verbose -c "SELECT counter.add('ev_n', 3::bigint)" 2>&1) && fail "an add to a trigger-mode counter on worker 1: $out"
grep -q "ERROR:  55000: tracked counter \"ev_n\" is counted by triggers" <<<"$out" || fail "an add to ev_n on worker 1: $out"
# another role's trigger naming the counter: refused on the coordinator
# (0A000: only onto the source of the counter it names), and on a worker
# node alone, with Citus's DDL propagation off (42501: counter.track only);
# made, it would make ev_n's reads there ambiguous or answer them
coord -q <<'SQL'
CREATE SCHEMA cx AUTHORIZATION ct_none;
SQL
ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U ct_none -d postgres -v ON_ERROR_STOP=1 -q \
    -c "SET client_min_messages = warning" \
    -c "CREATE TABLE cx.t (k bigint NOT NULL, at timestamptz NOT NULL)" -c "SELECT create_distributed_table('cx.t', 'k', shard_count := 2)"
id=$(coord -tA -c "SELECT counter_id FROM counter.tracked WHERE name = 'ev_n'")
forge="CREATE TRIGGER counter_${id}_ins AFTER INSERT ON cx.t REFERENCING NEW TABLE AS ce_new FOR EACH STATEMENT
       EXECUTE FUNCTION counter_internal.tracked_shard_fold('$id', 'citus', 'k', 'at', '3600', '64', '',
                                                            'cx.counter_tracked_${id}_delta', 'cx.counter_tracked_${id}_base', 'ev_n')"
out=$(ce_psql -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U ct_none -d postgres -v ON_ERROR_STOP=1 -v VERBOSITY=verbose \
    -c "SET citus.enable_unsafe_triggers = on" -c "$forge" 2>&1) && fail "another role's trigger naming ev_n was made: $out"
grep -q "ERROR:  0A000: trigger counter_${id}_ins of counter_ext on cx.t is refused" <<<"$out" || fail "a forged trigger on the coordinator: $out"
out=$(none_w1 -v VERBOSITY=verbose -c "SET citus.enable_ddl_propagation = off" -c "$forge" 2>&1) &&
    fail "another role's trigger naming ev_n was made on worker 1 alone: $out"
grep -q "ERROR:  42501: the trigger counter_${id}_ins of counter_ext on cx.t is made on a Citus worker node by counter.track only" <<<"$out" ||
    fail "a forged trigger on worker 1: $out"
worker_reads "after the forged triggers"
echo "ok: through a worker node, counter.value, values_of and tracked_values read the trigger-mode counters with the coordinator's numbers; a role without SELECT is refused (42501) and sees no row; a one-node counter is not there (0A000), an add is refused (55000); another role's trigger naming a counter is refused on the coordinator (0A000) and on a worker alone (42501)"

# In the writer's transaction: its rows are counted there (and read there:
# Citus reads through the same connections), and gone with a rollback
# (the value and count(*) in two statements: doc/citus.md; as the owner:
# Citus refuses, in a transaction, to read as the counter's owner shards
# that another role wrote in it)
got=$(owner -tA <<'SQL' | grep -v '^$' | tr '\n' ' '
SELECT counter.value('ev_n', 42::bigint) AS v \gset
SELECT count(*) AS n FROM ct.ev WHERE k = 42 \gset
SELECT :v - :n;
BEGIN;
INSERT INTO ct.ev SELECT g, 42, '2026-07-01 10:00+00', 'click' FROM generate_series(2000001, 2000010) g;
SELECT counter.value('ev_n', 42::bigint) AS v \gset
SELECT count(*) AS n FROM ct.ev WHERE k = 42 \gset
SELECT :v - :n, :n;
ROLLBACK;
SELECT counter.value('ev_n', 42::bigint) AS v \gset
SELECT count(*) AS n FROM ct.ev WHERE k = 42 \gset
SELECT :v - :n, :n;
SQL
)
n42=$(app -tA -c "SELECT count(*) FROM ct.ev WHERE k = 42")
[ "$got" = "0 0|$((n42 + 10)) 0|$n42 " ] || fail "value - count(*) before, inside and after a rolled-back transaction: $got"
echo "ok: rows are counted in their own transaction, and a rollback takes their count with it"

# The writer cannot touch the state, yet its writes count: the shard
# triggers run as the owner, whatever the writer's search_path
id=$(coord -tA -c "SELECT counter_id FROM counter.tracked WHERE name = 'ev_n'")
delta=$(coord -tA -c "SELECT counter_internal.tracked_table(c, 'delta') FROM counter.tracked c WHERE name = 'ev_n'")
out=$(app_w1 -c "SELECT * FROM $delta LIMIT 1" 2>&1) && fail "the writer read the delta table: $out"
app -q -c "CREATE TEMP TABLE tracked_${id}_delta (key bigint)" \
    -c "SET search_path = pg_temp, pg_catalog, public" \
    -c "INSERT INTO ct.ev VALUES (3000001, 7, '2026-07-01 10:00+00', 'view')"
app -q -c "INSERT INTO ct.ev_one VALUES (3000001, 7, '2026-07-01 10:00+00', 'view')"
got=$(mismatches ev_n ev true)
[ "$got" = 0 ] || fail "a write with a hostile search_path: $got keys differ"
echo "ok: the writer has no right on the state; the shard trigger writes it as the owner, whatever its search_path"

# The shard trigger runs as the counter's owner with search_path pinned,
# whoever writes and whatever the writer's settings: a filter calling the
# owner's function checks it on every shard (Citus makes the function on
# every node), through the coordinator and through a worker
owner -q <<'SQL' >/dev/null
SET client_min_messages = warning;
CREATE FUNCTION ct.probe(k ct.kind) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    -- (in the shard trigger; the reconciliation's statement, pushed down,
    -- runs in Citus's connection as the owner, whose settings are its own)
    IF current_user <> 'ct_own'
       OR (pg_trigger_depth() > 0 AND current_setting('search_path') <> 'pg_catalog, pg_temp') THEN
        RAISE EXCEPTION 'the filter ran as % with search_path %', current_user, current_setting('search_path');
    END IF;
    RETURN k <> 'bot';
END $$;
SELECT counter.track('ev_p', 'ct.ev', 'k', 'at', filter => 'ct.probe(kind)');
SQL
# the rows already there are a backfill: counted by a first reconciliation
got=$(owner -tA -c "SELECT keys_corrected > 0 AND outcome = 'ok' FROM counter.reconcile('ev_p', '2026-07-06', all_keys => true)")
[ "$got" = t ] || fail "the backfill of ev_p: $got"
for run in app app_w1; do
    $run -q -c "SET search_path = public, pg_catalog" -c "SET ROLE NONE" \
        -c "INSERT INTO ct.ev SELECT g, g % 50, '2026-07-01 10:00+00', 'view' FROM generate_series(4000001, 4000100) g
            WHERE '$run' = 'app' OR g > 4000050 ON CONFLICT DO NOTHING" ||
        fail "a write through $run with the probing filter failed"
done
got=$(mismatches ev_p ev "$F")
[ "$got" = 0 ] || fail "the probing filter's counter: $got keys differ from count(*)"
got=$(owner -tA -c "SELECT keys_corrected || ' ' || outcome FROM counter.reconcile('ev_p', '2026-07-06', all_keys => true)")
[ "$got" = "0 ok" ] || fail "reconcile of ev_p: $got"
owner -q -c "SELECT counter.untrack('ev_p')" >/dev/null
app -q -c "INSERT INTO ct.ev_one SELECT g, g % 50, '2026-07-01 10:00+00', 'view' FROM generate_series(4000001, 4000100) g"
echo "ok: on every shard the trigger runs as the owner with search_path pinned, for a writer with other settings"

# Reconciliation: nothing to correct, then injected drift found and repaired
for t in ev ev_one pev pev_one; do
    for c in f n; do
        got=$(owner -tA -c "SELECT keys_corrected || ' ' || outcome FROM counter.reconcile('${t}_$c', '2026-07-06', all_keys => true)")
        [ "$got" = "0 ok" ] || fail "reconcile ${t}_$c found drift where there was none: $got"
    done
done
check_all "reconciled"
# the comparison is pushed down: one INSERT puts a row into the counter's
# run table for each shard its batch's keys fall in, and Citus sends every
# shard its row at once; there the row's trigger reads the source's shard,
# the base shard and the delta shard (one snapshot there). No statement
# that compares (names the source's, base and delta shards) or locks delta
# rows goes from the coordinator (1.7's batch sent two or three to each
# shard, one shard after another).
id=$(coord -tA -c "SELECT counter_id FROM counter.tracked WHERE name = 'ev_f'")
out=$(owner -c "SET citus.log_remote_commands = on" -c "SET client_min_messages = log" \
    -c "SELECT outcome FROM counter.reconcile('ev_f', '2026-07-06', all_keys => true)" 2>&1)
n=$(printf '%s\n' "$out" | grep -c "INSERT INTO [^ ]*tracked_${id}_run_[0-9][0-9]* " || true)
m=$(printf '%s\n' "$out" | grep -c "ev_[0-9][0-9]* .*tracked_${id}_base_[0-9][0-9]* .*tracked_${id}_delta_[0-9][0-9]* \|row_lock_skip" || true)
[ "$n" -ge 4 ] && [ "$m" = 0 ] ||
    fail "the reconciliation's comparison was not sent to the shards through the run table ($n run rows, $m statements comparing or locking sent from the coordinator): $out"
echo "ok: the reconciliation compares each shard's rows, base and deltas there, through one INSERT into the run table per batch ($n rows in all)"
# the writer may not write the run table, nor, granted INSERT on it by the
# owner, make the owner's reconciliation run (its trigger asks for the
# owner's rights)
got=$(ce_citus_run_table_refused app owner "ct.counter_tracked_${id}_run" ct_app "$id")
[ -z "$got" ] || fail "$got"
echo "ok: the writer may not write the run table (42501), nor run the owner's reconciliation through it granted INSERT"
ce_citus_drift "$F" ev_f ev_n pev_f pev_n
check_all "drift injected on the cluster, reconciled"
# a late row (before the watermark) written after a reconciliation, and the
# scheduled kind of run (not all keys)
app -q -c "INSERT INTO ct.ev VALUES (3000002, 8, '2026-07-01 09:00+00', 'click')" \
    -c "INSERT INTO ct.ev_one VALUES (3000002, 8, '2026-07-01 09:00+00', 'click')"
for c in ev_n ev_one_n; do
    got=$(owner -tA -c "SELECT keys_corrected || ' ' || outcome FROM counter.reconcile('$c', '2026-07-06')")
    [ "$got" = "0 ok" ] || fail "reconcile $c after a late row: $got"
done
check_all "a late row, reconciled"

# Drift on many keys of every shard, the same on the cluster and on one
# node: a base one too high (every third key), a base gone (k % 5 = 1), a
# delta row no write made (k % 4 = 2). One reconcile(all_keys) repairs
# every key and finds the same drift as on one node; then the same drift
# again, repaired by the job (a full run pending: every key).
inject_many() {
    coord -q <<'SQL'
DO $$
DECLARE c record;
BEGIN
    FOR c IN SELECT counter_internal.tracked_table(t, 'base') AS b, counter_internal.tracked_table(t, 'delta') AS d FROM counter.tracked t WHERE name ~ '^p?ev_(one_)?[fn]$' LOOP
        EXECUTE format('UPDATE %s SET base = base + 1 WHERE key %% 3 = 0', c.b);
        EXECUTE format('DELETE FROM %s WHERE key %% 5 = 1', c.b);
        EXECUTE format('INSERT INTO %s SELECT g, ''2026-07-01 10:00+00'', 998, 1
                        FROM generate_series(0, 96) g WHERE g %% 4 = 2', c.d);
    END LOOP;
END $$;
SQL
}
got=$(coord -tA -c "SELECT count(DISTINCT get_shard_id_for_distribution_column('ct.ev', g)) || ' ' ||
                           count(DISTINCT get_shard_id_for_distribution_column('ct.pev', g))
                    FROM generate_series(0, 96) g WHERE g % 3 = 0 OR g % 5 = 1 OR g % 4 = 2")
[ "$got" = "8 4" ] || fail "the drifted keys are not on every shard: $got of 8 4"
# the last run of counter c: what it found
last_run() {
    owner -tA -c "SELECT r.all_keys || ' ' || r.keys_corrected || ' ' || r.drift_positive || ' ' || r.drift_negative
                         || ' ' || r.keys_busy || ' ' || r.outcome
                  FROM counter.tracked_runs r JOIN counter.tracked c USING (counter_id)
                  WHERE c.name = '$1' ORDER BY r.run_id DESC LIMIT 1"
}
for how in "reconcile(all_keys)" "the job"; do
    inject_many
    for t in ev pev; do
        for c in "f|$F" "n|true"; do
            got=$(mismatches "${t}_${c%%|*}" "$t" "${c#*|}")
            [ "$got" -gt 40 ] || fail "$how: the drift injected on ${t}_${c%%|*} is not seen ($got keys)"
        done
    done
    for t in ev pev ev_one pev_one; do
        for c in f n; do
            if [ "$how" = "the job" ]; then
                coord -q -c "UPDATE counter.tracked SET full_pending = true WHERE name = '${t}_$c'"
                owner -q -c "SET client_min_messages = warning" -c "CALL counter.run_steps('reconcile', '${t}_$c')"
            else
                owner -q -c "SELECT counter.reconcile('${t}_$c', '2026-07-06', all_keys => true)" >/dev/null
            fi
        done
    done
    for t in ev pev; do
        for c in f n; do
            a=$(last_run "${t}_$c")
            b=$(last_run "${t}_one_$c")
            [ "$a" = "$b" ] || fail "$how: the run of ${t}_$c found '$a', on one node '$b'"
            read -r all n _ _ busy outcome <<<"$a"
            [ "$all $busy $outcome" = "true 0 ok" ] && [ "$n" -gt 40 ] || fail "$how: the run of ${t}_$c: $a"
        done
    done
    check_all "drift on many keys of every shard, repaired by $how (the same drift found as on one node)"
done
# Each shard is reached by a bounded number of statements per run, not one
# set per batch of keys: for 97 keys in 8 shards (one batch), the key choice
# (3 pushed-down queries, twice), then a row of the run table for each shard
# (inserted, deleted: 2 statements per shard), and no lock or comparison
# sent from the coordinator (the run table's trigger does them on the shard)
id=$(coord -tA -c "SELECT counter_id FROM counter.tracked WHERE name = 'ev_n'")
out=$(owner -c "SET citus.log_remote_commands = on" -c "SET client_min_messages = log" \
    -c "SELECT outcome FROM counter.reconcile('ev_n', '2026-07-06', all_keys => true)" 2>&1)
locks=$(grep -c "issuing .*tracked_${id}_delta_[0-9]* d .*counter_internal.row_lock_skip(" <<<"$out" || true)
cmps=$(grep -c "issuing WITH .*ev_[0-9]* .*tracked_${id}_base_[0-9]* .*tracked_${id}_delta_[0-9]* " <<<"$out" || true)
runs=$(grep -c "issuing INSERT INTO [^ ]*tracked_${id}_run_[0-9]* " <<<"$out" || true)
all=$(grep "issuing " <<<"$out" | grep -cv "issuing \(BEGIN\|COMMIT\|PREPARE\|ROLLBACK\)" || true)
[ "$locks $cmps $runs" = "0 0 8" ] && [ "$all" -le $((8 * 8)) ] ||
    fail "statements to the shards for one run of 97 keys: $locks locks, $cmps comparisons, $runs run rows, $all in all: $out"
echo "ok: a run reaches each shard with a bounded number of statements ($all in all for 8 shards)"

# Writers (through the coordinator and through a worker) and
# reconciliations at once, on the buckets being reconciled: no write is
# overwritten, every value stays exact without another run
writers() { # writers RUN FIRST_ID
    local i
    for i in $(seq 0 14); do
        $1 -q -c "INSERT INTO ct.ev SELECT g, g % 97, '2026-07-01 10:00+00'::timestamptz + (g % 30) * interval '1 minute',
                  (ARRAY['view', 'bot', 'click'])[1 + g % 3]::ct.kind
                  FROM generate_series($2 + $i * 300, $2 + $i * 300 + 299) g" || return 1
    done
}
writers app 5000000 & wa=$!
writers app_w1 6000000 & wb=$!
for i in 1 2 3 4; do
    for c in ev_f ev_n; do
        # (ok, or some keys busy: a writer held their rows)
        owner -q -c "SELECT counter.reconcile('$c', '2026-07-06', all_keys => true)" >/dev/null ||
            fail "a reconciliation during the writes failed"
    done
done
wait $wa || fail "a write through the coordinator failed during the reconciliations"
wait $wb || fail "a write through a worker failed during the reconciliations"
app -q -c "INSERT INTO ct.ev_one SELECT * FROM ct.ev WHERE id >= 5000000 AND id < 7000000"
check_all "written while reconciled"

# A writer's transaction left open on a delta row before the watermark:
# the reconciliation does not wait for it (that key is busy, the others are
# reconciled) and the write, committed after, is counted
tmp=$(mktemp -d)
mkfifo "$tmp/w"
app -q <"$tmp/w" >/dev/null &
wr=$!
exec 3>"$tmp/w"
echo "INSERT INTO ct.ev VALUES (7000001, 11, '2026-07-01 10:00:10+00', 'view');" >&3
echo "BEGIN; INSERT INTO ct.ev VALUES (7000002, 11, '2026-07-01 10:00:20+00', 'view');" >&3
open_writer() { coord -tA -c "SELECT count(*) FROM pg_stat_activity WHERE usename = 'ct_app' AND state = 'idle in transaction'"; }
for i in $(seq 1 300); do   # until the writer's transaction is open
    [ "$(open_writer)" = 1 ] && break
    sleep 0.1
done
[ "$(open_writer)" = 1 ] || fail "the writer's transaction did not open"
got=$(timeout 120 "$CE_PGBIN/psql" -X -q -h 127.0.0.1 -p "$CE_citus_coord_PORT" -U ct_own -d postgres -tA \
    -c "SELECT outcome FROM counter.reconcile('ev_n', '2026-07-06', all_keys => true)") ||
    fail "the reconciliation waited for the writer's open transaction, or failed"
[ "$(open_writer)" = 1 ] || fail "the writer's transaction ended before the reconciliation returned"
busy=$(owner -tA -c "SELECT r.keys_busy FROM counter.tracked_runs r JOIN counter.tracked c USING (counter_id)
                     WHERE c.name = 'ev_n' ORDER BY r.run_id DESC LIMIT 1")
[ "$busy" = 1 ] || fail "keys busy in the run during the writer's transaction: $busy (1 expected; outcome $got)"
echo "COMMIT;" >&3
exec 3>&-
wait $wr || fail "the writer failed"
rm -rf "$tmp"
app -q -c "INSERT INTO ct.ev_one VALUES (7000001, 11, '2026-07-01 10:00:10+00', 'view'),
                                        (7000002, 11, '2026-07-01 10:00:20+00', 'view')"
# the next run takes the key the writer held
got=$(owner -tA -c "SELECT outcome FROM counter.reconcile('ev_n', '2026-07-06', all_keys => true)")
read -r _ n _ _ busy outcome <<<"$(last_run ev_n)"
[ "$n $busy $outcome" = "0 0 ok" ] || fail "the run after the writer committed: $(last_run ev_n)"
check_all "a writer's transaction open during a reconciliation (its key busy), committed after"

# TRUNCATE empties the counter on every shard
app -q -c "SELECT 1" >/dev/null
owner -q -c "TRUNCATE ct.pev" -c "TRUNCATE ct.pev_one"
got=$(app -tA -c "SELECT count(*) FROM counter.tracked_values WHERE counter LIKE 'pev%' AND value <> 0")
[ "$got" = 0 ] || fail "TRUNCATE left $got values"
deliver pev 1 500
deliver pev_one 1 500
check_all "truncated and written again"

# A read of counter.tracked_values in a transaction whose writes (as the
# writer) touched the shards that the counters' state (read as their owner)
# is on: Citus refuses the owner's read there ("modified in this
# transaction by a different user"); the view leaves those counters out
# with a WARNING (1.8; before, the view failed), the transaction goes on
# and commits its rows, and the counters are exact after it
out=$(app -v VERBOSITY=terse -tA 2>&1 <<'SQL'
BEGIN;
INSERT INTO ct.ev SELECT g, g % 11, '2026-07-01 10:00+00', 'view' FROM generate_series(8000001, 8000100) g;
SELECT 'listed', count(*) FROM counter.tracked_values WHERE counter IN ('ev_f', 'ev_n');
INSERT INTO ct.ev SELECT g, g % 11, '2026-07-01 10:00+00', 'view' FROM generate_series(8000101, 8000200) g;
COMMIT;
SQL
) || fail "tracked_values in a transaction that wrote the table: $out"
grep -q 'WARNING:  counter.tracked_values: reading tracked counter "ev_f" as its owner ct_own failed: .*(SQLSTATE ' <<<"$out" &&
    grep -q 'WARNING:  counter.tracked_values: reading tracked counter "ev_n" as its owner ct_own failed' <<<"$out" &&
    grep -q '^listed|0$' <<<"$out" || fail "tracked_values in a transaction that wrote the table: $out"
[ "$(app -tA -c "SELECT count(*) FROM ct.ev WHERE id BETWEEN 8000001 AND 8000200")" = 200 ] ||
    fail "the transaction that read tracked_values lost rows"
app -q -c "INSERT INTO ct.ev_one SELECT g, g % 11, '2026-07-01 10:00+00', 'view' FROM generate_series(8000001, 8000200) g"
check_all "tracked_values read (counters left out, warned) in a transaction that wrote the table"

# untrack while a reconciliation's batch of the same counter runs: the batch
# (here its steps written out, as the superuser the job's owner stands for
# does not matter: the locks do) reads the source and the state on the
# shards, holding their locks to its commit, then writes the counter's
# catalog row. untrack's drops wait for the batch, which commits; no
# deadlock (with the catalog row locked first, untrack and the batch waited
# for each other on two nodes and Citus cancelled one).
delta_f=$(coord -tA -c "SELECT counter_internal.tracked_table(t, 'delta') FROM counter.tracked t WHERE name = 'ev_f'")
jout=$(mktemp) uout=$(mktemp)
coord -q -c "BEGIN" -c "SELECT count(*) FROM ct.ev" -c "SELECT count(*) FROM $delta_f" -c "SELECT pg_sleep(4)" \
    -c "UPDATE counter.tracked SET last_watermark = last_watermark WHERE name = 'ev_f'" -c "COMMIT" >"$jout" 2>&1 &
batch=$!
sleep 1.5
owner -q -c "SELECT counter.untrack('ev_f')" >"$uout" 2>&1 || fail "untrack beside a batch failed: $(cat "$uout")"
wait "$batch" || fail "the batch beside untrack failed: $(cat "$jout")"
got=$(owner -tA -c "SELECT count(*) FROM counter.tracked WHERE name = 'ev_f'")
[ "$got" = 0 ] || fail "untrack beside a batch left the counter"
rm -f "$jout" "$uout"
owner -q -c "SET client_min_messages = warning" \
    -c "SELECT counter.track('ev_f', 'ct.ev', 'k', 'at', filter => \$\$$F\$\$, bucket_width => '10 minutes')" >/dev/null
echo "ok: untrack waits for a reconciliation batch of its counter on the shards (no deadlock)"

# untrack: nothing left on any node
# (the objects of counters ids, a regular expression: on every node, shards included)
leftovers() {
    local ids=$1 p total=0 n
    for p in $nodes; do
        n=$(on_node "$p" -tA -c "SELECT (SELECT count(*) FROM pg_trigger WHERE tgname ~ '^counter_($ids)_')
            + (SELECT count(*) FROM pg_class WHERE relname ~ '^(counter_)?tracked_($ids)_(base|delta)')
            + (SELECT count(*) FROM pg_proc WHERE proname ~ '^tracked_($ids)_batch')")
        total=$((total + n))
    done
    echo "$total"
}
ids=$(coord -tA -c "SELECT string_agg(counter_id::text, '|') FROM counter.tracked WHERE distributed")
n=$(leftovers "$ids")
[ "$n" -gt 100 ] || fail "the distributed counters' objects on every node: $n"
owner -q -c "SELECT counter.untrack(name) FROM counter.tracked WHERE name IN ('ev_f', 'pev_n')"
got=$(owner -tA -c "SELECT count(*) FROM counter.tracked")
[ "$got" = 6 ] || fail "untrack: $got counters left of 6"
# in a transaction after a parallel distributed operation
got=$(owner -tA -c "BEGIN" -c "UPDATE ct.ev SET kind = kind" -c "SELECT counter.untrack('ev_n')" \
    -c "SHOW citus.enable_unsafe_triggers" -c "COMMIT" | grep -v '^$')
[ "$got" = off ] || fail "untrack left citus.enable_unsafe_triggers in its caller's transaction: $got"
owner -q -c "SELECT counter.untrack('pev_f')"
app -q -c "INSERT INTO ct.ev VALUES (3000003, 9, '2026-07-01 10:00+00', 'view')" \
    -c "INSERT INTO ct.pev VALUES (3000003, 9, '2026-07-01 10:00+00', 'view')"
n=$(leftovers "$ids")
[ "$n" = 0 ] || fail "untrack left triggers, tables or functions: $n objects"
echo "ok: untrack leaves no trigger, table or function on any node; the tables take writes after it"

# DROP OWNED: the owner's counters go with its tables, on every node
owner -q -c "SET client_min_messages = warning" \
    -c "SELECT counter.track('ev_n', 'ct.ev', 'k', 'at')" >/dev/null
ids=$(coord -tA -c "SELECT string_agg(counter_id::text, '|') FROM counter.tracked")
coord -q -c "SET client_min_messages = warning" -c "DROP OWNED BY ct_own CASCADE"
got=$(coord -tA -c "SELECT count(*) FROM counter.tracked")
[ "$got" = 0 ] || fail "DROP OWNED left $got counters"
n=$(leftovers "$ids")
[ "$n" = 0 ] || fail "DROP OWNED left $n triggers, tables or functions"
echo "ok: DROP OWNED drops the owner's distributed counters with their tables, on every node"

# DROP EXTENSION: a distributed table keeps taking writes, nothing left
coord -q <<'SQL'
SET client_min_messages = warning;
CREATE TABLE public.dx (id bigint, k bigint NOT NULL, at timestamptz NOT NULL);
SELECT create_distributed_table('public.dx', 'k', shard_count := 4);
SELECT counter.track('dx', 'public.dx', 'k', 'at');
INSERT INTO public.dx SELECT g, g % 5, now() FROM generate_series(1, 50) g;
SQL
out=$(coord -c "DROP EXTENSION counter_ext" 2>&1) && fail "DROP EXTENSION without CASCADE dropped a served counter: $out"
for p in $nodes; do on_node "$p" -q -c "SET client_min_messages = warning" -c "DROP EXTENSION counter_ext CASCADE" 2>/dev/null || true; done
coord -q -c "INSERT INTO public.dx SELECT g, g % 5, now() FROM generate_series(51, 100) g"
n=$(for p in $nodes; do on_node "$p" -tA -c "SELECT count(*) FROM pg_trigger WHERE tgname ~ '^counter_[0-9]+_'"; done | awk '{ s += $1 } END { print s + 0 }')
[ "$n" = 0 ] || fail "DROP EXTENSION left $n triggers"
got=$(coord -tA -c "SELECT count(*) FROM public.dx")
[ "$got" = 100 ] || fail "writes after DROP EXTENSION: $got rows"
echo "ok: DROP EXTENSION ... CASCADE removes the shard triggers on every node; the table takes writes"
