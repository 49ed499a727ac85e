#!/usr/bin/env bash
# Drift found by the scheduled job alone, at scale (issue 13), with the
# durable defaults (fsync, synchronous_commit, full_page_writes on):
#   1,000,000 keys (CE_BENCH_KEYS), one row each; a counter with the default
#   schedule (reconcile_every 1 minute, verify_every 1 day, batch 1,000);
#   1% of the keys get new rows through the trigger (dirty), 0.1% get rows
#   with the triggers off and backdated (only the verification cycle can
#   find them).
# Measured: a full all-keys run; one scheduled run (dirty keys + its slice of
# the cycle) as a ratio to it (target: at most 5%); then the whole cycle, run
# by calling the job back to back (each call is one scheduled run): how many
# runs until every key is exact (with the defaults that many minutes), the
# median and largest run against the full run, and the check that every key
# equals count(*) at the end.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source test/lib.sh
keys=${CE_BENCH_KEYS:-1000000}
ce_require_packages "${CE_TEST_PACKAGES[@]}" || exit 1
ce_build_and_stage || exit 1
ce_cluster_start vbench "counter_ext.enabled = off" "shared_buffers = '512MB'" "max_wal_size = '4GB'" \
    "fsync = on" "synchronous_commit = on" "full_page_writes = on" || exit 1
trap ce_cluster_stop_all EXIT INT TERM
ce_cluster_use vbench
"$CE_PGBIN/createdb" vbench || exit 1
export PGDATABASE=vbench

ce_psql -q <<SQL
CREATE EXTENSION counter_ext;
CREATE TABLE src (k bigint NOT NULL, t timestamptz NOT NULL);
INSERT INTO src SELECT g, '2024-01-01'::timestamptz + (g % 86400) * interval '1 second' FROM generate_series(1, $keys) g;
CREATE INDEX ON src (k, t);
CREATE INDEX ON src (t);
VACUUM ANALYZE src;
SELECT FROM counter.track('src', 'src', 'k', 't', bucket_width => '1 hour');
SQL
ce_psql -At -c "SELECT 'first run (full, from nothing): ' || keys_checked || ' keys, ' || round(extract(epoch FROM duration)::numeric, 2) || ' s' FROM counter.reconcile('src')"
ce_psql -q <<SQL
VACUUM ANALYZE counter_internal.tracked_1_base;
INSERT INTO src SELECT g * 100, now() - interval '1 hour' FROM generate_series(1, $keys / 100) g;   -- 1% active
SET session_replication_role = replica;
INSERT INTO src SELECT g * 1000 + 7, '2023-06-01' FROM generate_series(1, $keys / 1000) g;          -- 0.1% drifted
RESET session_replication_role;
VACUUM ANALYZE src;
SQL
# A full run from this state, in a transaction rolled back (the state stays).
full=$(ce_psql -At -c "BEGIN" -c "SELECT extract(epoch FROM duration) FROM counter.reconcile('src', all_keys => true)" \
    -c "ROLLBACK" 2>/dev/null | grep -E '^[0-9.]+$' | head -1)
echo "full all-keys run: $full s"
drifted=$(ce_psql -At -c "SELECT count(*) FROM generate_series(1, $keys / 1000) g WHERE counter.value('src', g * 1000 + 7) <> (SELECT count(*) FROM src WHERE k = g * 1000 + 7)")
echo "keys drifted before the cycle: $drifted"

runs=0
times=()
start=$(date +%s.%N)
while :; do
    t0=$(date +%s%N)
    ce_psql -At -c "CALL counter.run_steps('reconcile', 'src')" >/dev/null 2>&1
    t=$(( ($(date +%s%N) - t0) / 1000000 ))
    times+=("$t")
    runs=$((runs + 1))
    done_=$(ce_psql -At -c "SELECT last_verified IS NOT NULL FROM counter.tracked_status WHERE counter = 'src'")
    [ "$done_" = t ] && break
    [ $runs -ge 5000 ] && { echo "the cycle did not complete in 5000 runs"; break; }
done
end=$(date +%s.%N)
left=$(ce_psql -At -c "SELECT count(*) FROM generate_series(1, $keys / 1000) g WHERE counter.value('src', g * 1000 + 7) <> (SELECT count(*) FROM src WHERE k = g * 1000 + 7)")
wrong=$(ce_psql -At -c "SELECT count(*) FROM (SELECT k, count(*) AS n FROM src GROUP BY k) x WHERE counter.value('src', k) <> n")
printf '%s\n' "${times[@]}" > /tmp/verify_times.txt
python3 - "$full" "$runs" "$keys" "$(python3 -c "print($end - $start)")" "$drifted" "$left" "$wrong" <<'PY'
import statistics, sys
full, runs, keys, wall, drifted, left, wrong = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7]
t = [float(x) / 1000 for x in open('/tmp/verify_times.txt').read().split()]
print(f"scheduled runs to verify all {keys:,} keys: {runs} (with reconcile_every 1 minute: {runs} minutes, {runs / 60:.1f} h; verify_every 1 day)")
print(f"first scheduled run (dirty 1% + slice): {t[0]:.3f} s = {t[0] / full * 100:.2f}% of a full run")
print(f"median run {statistics.median(t):.3f} s = {statistics.median(t) / full * 100:.2f}%, largest {max(t):.3f} s = {max(t) / full * 100:.2f}% of a full run ({full:.2f} s)")
print(f"the cycle back to back: {wall:.1f} s of work in all ({wall / full:.2f} full runs)")
print(f"drifted keys before: {drifted}, after: {left}; keys not equal to count(*) after the cycle: {wrong}")
PY
echo "machine: $(nproc) cores (shared with other work when run), PostgreSQL $("$CE_PGBIN/postgres" --version | awk '{print $3}'), durable defaults"
