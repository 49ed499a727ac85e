#!/usr/bin/env bash
# The monitoring kit (contrib/monitoring/, doc/monitoring.md) with the real
# programs, on loopback: a database with drift, a dirty rollup, rows in a
# default partition and a buffered counter with adds not flushed, owned by an
# ordinary role; Debian's prometheus-sql-exporter with the shipped collector
# file (only the connections changed: a pg_monitor member owning nothing, and
# the owner); Debian's prometheus-postgres-exporter with the shipped queries
# file (as the pg_monitor member); Debian's prometheus scraping both every
# second. Checks that
#   - every metric of counter.metrics is in both files and scraped, and
#     nothing else of ours is;
#   - the pg_monitor member's series name no object (object="*") and carry
#     the owner's sums; the owner's name its objects; the values are those
#     set up (drift 2, 3 dirty hours, 3 rows in the default, 3 pending adds);
#   - both exporters give the same series (name, owner, object, kind, value);
#   - every PromQL expression of the dashboard returns data through
#     prometheus's HTTP API, none an error.
# Needs prometheus-sql-exporter, prometheus-postgres-exporter and
# prometheus; installed when missing on the host (as root, when apt has
# them); where they are not and cannot be (not root, or a chroot of make test
# PG=17/18 without them) it is not run, and says why (exit 77, test/run.sh). CE_METRICS_PNG=FILE also
# draws the dashboard's panels from prometheus's data into FILE (matplotlib;
# how doc/monitoring.png was made).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
fail() { echo "FAILED: $*"; exit 1; }
pkgs=(prometheus-sql-exporter prometheus-postgres-exporter prometheus curl)
if [ -n "${CE_SKIP_FORMAT:-}" ]; then
    # a chroot of another major: only when they are there already
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            { echo "not run: $p is not installed in this chroot"; exit 77; }
    done
else
    # the host: installed when they can be (root, and Debian has them)
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && continue
        if ! ce_is_root || ! apt-cache policy "$p" 2>/dev/null | grep 'Candidate: [0-9]' >/dev/null; then
            echo "not run: $p is not installed and cannot be installed here"
            exit 77
        fi
    done
    ce_require_packages "${pkgs[@]}" || exit 1
fi

kit=$CE_TOP/contrib/monitoring
work=$(mktemp -d) || exit 1
chmod 755 "$work"
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT

# The cluster of the suite (test/run.sh) when there is one, else our own.
if [ -z "${CE_main_PORT:-}" ]; then
    ce_cluster_start mx "counter_ext.enabled = off" || fail "cluster"
    trap 'cleanup; ce_cluster_stop_all' EXIT
    ce_cluster_use mx
    port=$CE_mx_PORT
else
    port=$CE_main_PORT
    export PGHOST=127.0.0.1 PGPORT=$port PGUSER=$(ce_owner_name) PGDATABASE=postgres
fi
db=metrics_exporter
"$CE_PGBIN/dropdb" --if-exists $db && "$CE_PGBIN/createdb" $db || fail "createdb"
ce_psql -d $db >"$work/setup.out" 2>&1 <<'SQL' || { cat "$work/setup.out"; fail "set-up"; }
SET client_min_messages = error;
CREATE EXTENSION counter_ext;
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mx_owner') THEN CREATE ROLE mx_owner LOGIN; END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mx_monitor') THEN
        CREATE ROLE mx_monitor LOGIN IN ROLE pg_monitor;
    END IF;
END $$;
GRANT CREATE ON SCHEMA public TO mx_owner;
SET ROLE mx_owner;
CREATE TABLE public.mx_ev (id serial, k text NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON public.mx_ev (at);
-- drift 2: the application added 5 for 3 rows
SELECT counter.track('mx_secret_counter', 'public.mx_ev', 'k', 'at', mode => 'application', bucket_width => '1 hour');
SELECT counter.reconcile('mx_secret_counter', '2024-03-01');
INSERT INTO public.mx_ev (k, at) SELECT 'x', '2024-03-01 10:00+00' FROM generate_series(1, 3);
SELECT counter.add('mx_secret_counter', 'x'::text, 5, '2024-03-01 10:00+00');
SELECT counter.reconcile('mx_secret_counter', '2024-03-02', all_keys => true);
-- 3 adds of a buffered counter, not flushed
SELECT counter.track('mx_secret_buffered', 'public.mx_ev', 'k', 'at', mode => 'application', buffered => true);
SELECT counter.add('mx_secret_buffered', k, 1, '2024-03-01 10:00+00') FROM unnest(ARRAY['p', 'q', 'r']) k;
-- a deferred rollup with 3 dirty hours
SELECT counter.rollup_create('mx_secret_rollup', 'public.mx_ev', 'at', '{k}', mode => 'deferred');
INSERT INTO public.mx_ev (k, at) VALUES ('y', '2024-03-03 10:00+00'), ('y', '2024-03-03 11:00+00');
-- 3 rows in the default partition of a managed table
CREATE TABLE public.mx_secret_parts (id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
SELECT counter.partition_manage('public.mx_secret_parts', 'at', premake => 3);
INSERT INTO public.mx_secret_parts SELECT g, now() + interval '30 days' FROM generate_series(1, 3) g;
SELECT pg_stat_force_next_flush();
SQL
# the metrics the view has (as the superuser, who sees every one)
ce_psql -d $db -Atc "SELECT DISTINCT metric FROM counter.metrics ORDER BY 1" >"$work/view-metrics.txt" || fail "view"
[ "$(wc -l <"$work/view-metrics.txt")" -ge 20 ] || fail "too few metrics in the view: $(cat "$work/view-metrics.txt")"

# prometheus-sql-exporter with the shipped collector file, the connection
# replaced by two: the pg_monitor member and the owner.
sx_port=$(ce_random_port) || fail "no free port"
python3 - "$kit/sql_exporter.yml" "$work/sql_exporter.yml" "$port" "$db" <<'PY' || fail "collector file"
import re, sys
src, dst, port, db = sys.argv[1:]
text = open(src).read()
conn = re.compile(r"^      - 'postgres://[^']*'\n", re.M)
assert len(conn.findall(text)) == 1, "one connection line expected"
mine = "".join(f"      - 'postgres://{u}@127.0.0.1:{port}/{db}?sslmode=disable'\n" for u in ("mx_monitor", "mx_owner"))
text = conn.sub(mine, text).replace("interval: '1m'", "interval: '1s'")
open(dst, "w").write(text)
PY
prometheus-sql-exporter -config.file "$work/sql_exporter.yml" -web.listen-address "127.0.0.1:$sx_port" \
    >"$work/sql_exporter.log" 2>&1 &
pids+=($!)
# prometheus-postgres-exporter with the shipped queries file, as the pg_monitor member
px_port=$(ce_random_port) || fail "no free port"
# (the sql exporter may not listen yet: not its port)
while [ "$px_port" = "$sx_port" ]; do px_port=$(ce_random_port) || fail "no free port"; done
DATA_SOURCE_NAME="postgresql://mx_monitor@127.0.0.1:$port/$db?sslmode=disable" \
    prometheus-postgres-exporter --web.listen-address="127.0.0.1:$px_port" --disable-default-metrics \
    --disable-settings-metrics --extend.query-path="$kit/postgres_exporter_queries.yaml" \
    >"$work/postgres_exporter.log" 2>&1 &
pids+=($!)
# until the first run of every query, for both connections, is in
n_metrics=$(wc -l <"$work/view-metrics.txt")
seen() { grep "^sql_counter_ext_.*user=\"$1\"" "$work/sx.txt" | sed 's/{.*//' | sort -u | wc -l; }
for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$sx_port/metrics" >"$work/sx.txt" 2>/dev/null &&
        [ "$(seen mx_owner)" -eq "$n_metrics" ] && [ "$(seen mx_monitor)" -eq "$n_metrics" ] && break
    sleep 0.2
done
curl -sf "http://127.0.0.1:$px_port/metrics" >"$work/px.txt" || { cat "$work/postgres_exporter.log"; fail "postgres_exporter"; }

python3 - "$work" "$kit" <<'PY' || { tail -n 20 "$work/sql_exporter.log" "$work/postgres_exporter.log"; fail "exporters"; }
import re, sys
work, kit = sys.argv[1:]
view = open(f"{work}/view-metrics.txt").read().split()
series_re = re.compile(r'^(sql_counter_ext_\w+)\{(.*)\} (\S+)$')
label_re = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
def parse(path):
    out = []
    for line in open(path):
        m = series_re.match(line.strip())
        if m:
            out.append((m.group(1), dict(label_re.findall(m.group(2))), float(m.group(3))))
    return out
sx, px = parse(f"{work}/sx.txt"), parse(f"{work}/px.txt")
# every metric of the view, in both files, scraped from both exporters, and nothing else
collector = re.findall(r"^      - name: (\S+)$", open(f"{kit}/sql_exporter.yml").read(), re.M)
queries = open(f"{kit}/postgres_exporter_queries.yaml").read()
assert sorted(collector) == sorted(view), ("collector file", sorted(set(view) ^ set(collector)))
for name in ("sql_" + v for v in view):
    key, col = name.rsplit("_", 1)
    assert re.search(rf"^{key}:\n(?:  .*\n|    .*\n)*?    - {col}:\n", queries, re.M), ("queries file", name)
want = sorted("sql_" + v for v in view)
for label, got in (("sql_exporter", sx), ("postgres_exporter", px)):
    assert sorted({n for n, _, _ in got}) == want, (label, sorted(set(want) ^ {n for n, _, _ in got}))
# no series names a secret to the pg_monitor member; the owner's name them
for n, l, v in sx + px:
    if l.get("user", "mx_monitor") == "mx_monitor":
        assert l["object"] == "*" and l["owner"] == "mx_owner", (n, l)
    else:
        assert l["owner"] == "mx_owner" and (l["object"].startswith(("mx_secret", "public.mx_secret")) or
                                            (l["object"] == "" and n in ("sql_counter_ext_buffered_overflows_total",
                                                  "sql_counter_ext_buffer_share_entries",
                                                  "sql_counter_ext_buffer_share_cap",
                                                  "sql_counter_ext_buffer_share_early_flushes_total"))), (n, l)
def value(got, name, user, **labels):
    vals = [v for n, l, v in got if n == name and l.get("user", "mx_monitor") == user
            and all(l.get(k) == x for k, x in labels.items())]
    assert len(vals) == 1, (name, user, labels, vals)
    return vals[0]
expect = {
    "sql_counter_ext_tracked_drift": ({"object": "mx_secret_counter"}, 2),
    "sql_counter_ext_tracked_drift_total": ({"object": "mx_secret_counter"}, 2),
    "sql_counter_ext_tracked_keys_corrected_total": ({"object": "mx_secret_counter"}, 1),
    "sql_counter_ext_tracked_reconcile_runs_total": ({"object": "mx_secret_counter"}, 2),
    "sql_counter_ext_buffered_pending": ({"object": "mx_secret_buffered"}, 3),
    "sql_counter_ext_buffer_share_entries": ({"object": ""}, 3),
    "sql_counter_ext_rollup_dirty_hours": ({"object": "mx_secret_rollup"}, 3),
    "sql_counter_ext_partition_default_rows": ({"object": "public.mx_secret_parts"}, 3),
    "sql_counter_ext_job_failures": ({"object": "mx_secret_rollup", "kind": "rollup_refresh"}, 0),
    "sql_counter_ext_job_enabled": ({"object": "mx_secret_rollup", "kind": "rollup_refresh"}, 1),
}
for name, (labels, v) in expect.items():
    assert value(sx, name, "mx_owner", **labels) == v, (name, labels, value(sx, name, "mx_owner", **labels))
    mon = {k: x for k, x in labels.items() if k != "object"}
    # the pg_monitor member's sum over the owner: the owner's one object here (two for the drift of two counters)
    assert value(sx, name, "mx_monitor", object="*", **mon) == v, name
    assert value(px, name, "mx_monitor", object="*", **mon) == v, name
# premade partitions: the current one and 3 ahead at least (2 ahead once an
# hour turned since they were made: partitions_ahead counts those after now())
assert value(sx, "sql_counter_ext_partition_partitions", "mx_owner", object="public.mx_secret_parts") >= 4
assert value(sx, "sql_counter_ext_partition_partitions_ahead", "mx_owner", object="public.mx_secret_parts") >= 2
assert value(sx, "sql_counter_ext_rollup_refresh_lag_seconds", "mx_owner", object="mx_secret_rollup") > 0
assert value(sx, "sql_counter_ext_partition_ahead_seconds", "mx_owner", object="public.mx_secret_parts") > 0
# both exporters: the same series for the pg_monitor member (ages aside, and
# the partitions ahead of now(): the two exporters read at different moments)
def key(got, user):
    return sorted((n, l["owner"], l["object"], l["kind"], v) for n, l, v in got
                  if l.get("user", "mx_monitor") == user
                  and not n.endswith(("_age_seconds", "_lag_seconds", "_ahead_seconds", "_partitions_ahead")))
assert key(sx, "mx_monitor") == key(px, "mx_monitor"), (set(key(sx, "mx_monitor")) ^ set(key(px, "mx_monitor")))
for n, l, v in sx:
    assert l["col"] == "value" and l["database"] == "metrics_exporter" and l["sql_job"] == "counter_ext", (n, l)
print(f"exporters ok: {len(view)} metrics, {len(sx)} series from sql_exporter, {len(px)} from postgres_exporter")
PY

# prometheus scraping the sql exporter every second; every expression of the dashboard
pm_port=$(ce_random_port) || fail "no free port"
cat >"$work/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: counter_ext
    static_configs:
      - targets: ['127.0.0.1:$sx_port']
YML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/prometheus-data" \
    --web.listen-address="127.0.0.1:$pm_port" >"$work/prometheus.log" 2>&1 &
pids+=($!)
py=python3
[ -n "${CE_METRICS_PNG:-}" ] && py=/usr/bin/python3   # Debian's, with python3-matplotlib
"$py" - "$pm_port" "$CE_TOP/contrib/monitoring/grafana-dashboard.json" "${CE_METRICS_PNG:-}" <<'PY' ||
import json, sys, time, urllib.parse, urllib.request
port, dashboard, png = sys.argv[1:]
def query(expr, path="query", **extra):
    args = urllib.parse.urlencode(dict(query=expr, **extra))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/{path}?{args}", timeout=10) as r:
        return json.load(r)
# wait for 4 scrapes (rate and increase want two samples in their window)
deadline = time.time() + 30
while True:
    try:
        r = query("count_over_time(sql_counter_ext_tracked_drift[1m])")
        if r["status"] == "success" and r["data"]["result"] and min(float(x["value"][1]) for x in r["data"]["result"]) >= 4:
            break
    except OSError:
        pass
    assert time.time() < deadline, "prometheus did not scrape the exporter"
    time.sleep(0.5)
panels = json.load(open(dashboard))["panels"]
exprs = [(p["title"], t["expr"]) for p in panels for t in p["targets"]]
assert len(exprs) >= 12, exprs
results = {}
for title, expr in exprs:
    r = query(expr)
    assert r["status"] == "success", (title, expr, r)
    assert r["data"]["result"], ("no data", title, expr)
    results.setdefault(title, []).append(r)
    print(f"ok  {title}: {expr} -> {len(r['data']['result'])} series")
# the panels' values at the end: drift 2 per user, 3 rows in the default
drift = query("sum by (user) (sql_counter_ext_tracked_drift)")["data"]["result"]
assert sorted((x["metric"]["user"], float(x["value"][1])) for x in drift) == [("mx_monitor", 2.0), ("mx_owner", 2.0)], drift
if png:   # a picture of the panels (doc/monitoring.md), when asked for
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    end = time.time()
    fig, axes = plt.subplots(4, 3, figsize=(15, 12))
    for ax, p in zip(axes.flat, panels):
        for t in p["targets"]:
            r = query(t["expr"], "query_range", start=end - 20, end=end, step=1)
            for s in r["data"]["result"]:
                m = s["metric"]
                label = t["legendFormat"]
                for k, v in m.items():
                    label = label.replace("{{" + k + "}}", v)
                xs = [float(a) - end for a, _ in s["values"]]
                ax.plot(xs, [float(b) for _, b in s["values"]], label=label[:40])
        ax.set_title(p["title"], fontsize=9)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(png, dpi=70)
    print("wrote", png)
PY
    { tail -n 20 "$work/prometheus.log"; fail "prometheus"; }
# the exporters and prometheus go first (the exporters hold connections)
for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
pids=()
"$CE_PGBIN/dropdb" --force $db || fail "dropdb"
ce_psql -c "DROP ROLE mx_owner, mx_monitor" || fail "drop role"
echo "metrics_exporter ok"
