#!/usr/bin/python3
"""counter_ext from Python with psycopg 3 (Debian's python3-psycopg).

What an application does, against a database prepared by setup.sql: records
events, reads counters, a rollup and sketches, and maps errors. Connects with
libpq's environment (PGHOST, PGPORT, PGDATABASE, PGUSER); run through
PgBouncer in transaction mode by test/scripts/clients.sh. Exits 1 with a
message on the first wrong number.
"""
import sys
import uuid
from datetime import date, datetime, timezone

import psycopg
from psycopg import errors
from psycopg.adapt import Dumper, Loader
from psycopg.pq import Format
from psycopg.types import TypeInfo


def fail(msg):
    print(f"python: FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def check(what, got, want):
    if got != want:
        fail(f"{what}: got {got!r}, want {want!r}")


class Hll(bytes):
    """A counter.hll sketch: its storage bytes, as its binary form carries them."""


class HllBinaryDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj):
        return bytes(obj)


class HllBinaryLoader(Loader):
    format = Format.BINARY

    def load(self, data):
        return Hll(data)


# autocommit: each statement commits on its own, and `with conn.transaction()`
# is a real transaction (without it, the first statement would open one that
# lasts until commit, and transaction() blocks would be savepoints inside it).
# PgBouncer in transaction mode hands each transaction any server
# connection: no server-side prepared statements (prepare_threshold=None).
conn = psycopg.connect("", autocommit=True, prepare_threshold=None, application_name="clients-python")

# Teach psycopg the type counter.hll: binary in and out as bytes.
info = TypeInfo.fetch(conn, "counter.hll")
if info is None:
    fail("type counter.hll not found")
HllBinaryDumper.oid = info.oid
conn.adapters.register_dumper(Hll, HllBinaryDumper)
conn.adapters.register_loader(info.oid, HllBinaryLoader)

# --- Record events -------------------------------------------------------
# Trigger mode: a plain INSERT counts.
with conn.transaction():
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO app.comments (post_id) VALUES (%s)",
                        [(101,), (101,), (101,), (102,), (102,), (103,)])

# Application mode: counter.add in the transaction that inserts the row.
def like(user):
    with conn.transaction():
        conn.execute("INSERT INTO app.likes (user_name) VALUES (%s)", (user,))
        conn.execute("SELECT counter.add('likes_per_user', %s::text)", (user,))


FILE_A = uuid.UUID("0192f1c4-0000-7000-8000-00000000000a")
FILE_B = uuid.UUID("0192f1c4-0000-7000-8000-00000000000b")


def download(file_id):
    with conn.transaction():
        conn.execute("INSERT INTO app.downloads (file_id) VALUES (%s)", (file_id,))
        conn.execute("SELECT counter.add('downloads_per_file', %s)", (file_id,))  # uuid.UUID -> uuid


like("alice")
like("alice")
like("bob")
download(FILE_A)
download(FILE_A)
download(FILE_B)


# A transaction that rolls back: its rows and its adds never count.
class Abort(Exception):
    pass


try:
    with conn.transaction():
        conn.execute("INSERT INTO app.comments (post_id) VALUES (101)")
        conn.execute("INSERT INTO app.likes (user_name) VALUES ('carol')")
        conn.execute("SELECT counter.add('likes_per_user', 'carol'::text)")
        conn.execute("SELECT counter.add('likes_per_user', 'alice'::text, 5)")
        raise Abort
except Abort:
    pass

# --- Read counters with native types --------------------------------------
check("value(bigint 101)", conn.execute("SELECT counter.value('comments_per_post', %s::bigint)", (101,)).fetchone()[0], 3)
check("value(text alice)", conn.execute("SELECT counter.value('likes_per_user', %s::text)", ("alice",)).fetchone()[0], 2)
check("value(text carol)", conn.execute("SELECT counter.value('likes_per_user', %s::text)", ("carol",)).fetchone()[0], 0)
check("value(uuid A)", conn.execute("SELECT counter.value('downloads_per_file', %s)", (FILE_A,)).fetchone()[0], 2)


def compare(counter, keys, array_type, truth_sql, want):
    """values_of(keys) must equal GROUP BY over the rows, and what we wrote."""
    got = dict(conn.execute(f"SELECT key, value FROM counter.values_of(%s, %s::{array_type})",
                            (counter, keys)).fetchall())
    truth = dict(conn.execute(truth_sql).fetchall())
    for k in keys:
        truth.setdefault(k, 0)
    check(f"{counter}: values_of vs GROUP BY", got, truth)
    check(f"{counter}: values_of vs what the program wrote", got, want)
    for k, v in got.items():  # native types came back
        check(f"{counter}: key type", type(k), type(keys[0]))


compare("comments_per_post", [101, 102, 103, 104], "bigint[]",
        "SELECT post_id, count(*) FROM app.comments GROUP BY 1", {101: 3, 102: 2, 103: 1, 104: 0})
compare("likes_per_user", ["alice", "bob", "carol"], "text[]",
        "SELECT user_name, count(*) FROM app.likes GROUP BY 1", {"alice": 2, "bob": 1, "carol": 0})
compare("downloads_per_file", [FILE_A, FILE_B], "uuid[]",
        "SELECT file_id, count(*) FROM app.downloads GROUP BY 1", {FILE_A: 2, FILE_B: 1})

# --- A rollup's hours --------------------------------------------------------
clicks = [  # (link, visitor, time): link 1 has 4 clicks by 3 visitors at 10h, 2 at 11h
    (1, 1, "2026-01-01 10:05+00"), (1, 2, "2026-01-01 10:10+00"), (1, 3, "2026-01-01 10:20+00"),
    (1, 1, "2026-01-01 10:50+00"), (1, 1, "2026-01-01 11:05+00"), (1, 4, "2026-01-01 11:30+00"),
    (2, 5, "2026-01-01 10:15+00"),
]
with conn.transaction():
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO app.clicks (event_id, link_id, visitor_id, occurred_at) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (event_id, occurred_at) DO NOTHING",
            [(uuid.uuid5(uuid.NAMESPACE_URL, f"click-{i}"), link, v, t) for i, (link, v, t) in enumerate(clicks)])
hours = conn.execute(
    "SELECT link_id, hour, count, round(counter.hll_cardinality(distinct_visitor_id))::bigint FROM app.clicks_hourly ORDER BY 1, 2").fetchall()
truth = conn.execute(
    "SELECT link_id, date_bin('1 hour', occurred_at, '2000-01-01 00:00+00'), count(*), count(DISTINCT visitor_id)"
    " FROM app.clicks GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
check("clicks_hourly vs GROUP BY", hours, truth)
H10 = datetime(2026, 1, 1, 10, tzinfo=timezone.utc)
H11 = datetime(2026, 1, 1, 11, tzinfo=timezone.utc)
check("clicks_hourly vs what the program wrote", hours, [(1, H10, 4, 3), (1, H11, 2, 2), (2, H10, 1, 1)])
days = conn.execute(
    "SELECT key->>'link_id', count, (distinct_counts->>'visitor_id')::numeric"
    " FROM counter.rollup_totals('clicks_hourly', %s, %s) ORDER BY 1",
    (datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 1, 2, tzinfo=timezone.utc))).fetchall()
check("rollup_totals per day", [(k, c, int(d)) for k, c, d in days], [("1", 6, 4), ("2", 1, 1)])

# --- Sketches: counter.hll in binary and in text ----------------------------
make = "SELECT counter.hll_add_agg(g) FROM generate_series(%s::int, %s::int) g"
a = conn.cursor(binary=True).execute(make, (1, 100)).fetchone()[0]       # received in binary
check("binary result type", type(a), Hll)
b_text = conn.execute(make.replace("counter.hll_add_agg(g)", "counter.hll_add_agg(g)::text"), (51, 150)).fetchone()[0]
b_text_native = conn.execute(make, (51, 150)).fetchone()[0]               # received in text
check("text result", b_text_native, b_text)
if not b_text.startswith("\\x"):
    fail(f"text form of a sketch: {b_text[:10]!r}")
b = Hll(bytes.fromhex(b_text[2:]))
check("binary form = text form's bytes",
      bytes(conn.cursor(binary=True).execute(make, (51, 150)).fetchone()[0]), bytes(b))
with conn.transaction():
    conn.execute("INSERT INTO app.daily_visitors VALUES (%s, %s)", (date(2026, 1, 1), a))               # sent in binary
    conn.execute("INSERT INTO app.daily_visitors VALUES (%s, %s::counter.hll)", (date(2026, 1, 2), b_text))  # sent in text
stored = conn.cursor(binary=True).execute(
    "SELECT visitors FROM app.daily_visitors WHERE day = %s", (date(2026, 1, 1),)).fetchone()[0]
check("stored sketch = the bytes sent", bytes(stored), bytes(a))
truth = conn.execute("SELECT count(DISTINCT g) FROM (SELECT generate_series(1, 100) UNION ALL"
                     " SELECT generate_series(51, 150)) s(g)").fetchone()[0]
merged = conn.execute("SELECT counter.hll_cardinality(counter.hll_union_agg(visitors)) FROM app.daily_visitors").fetchone()[0]
check("hll_union_agg of the stored days", merged, float(truth))
check("a || b sent in binary", conn.execute(
    "SELECT %s OPERATOR(counter.||) %s", (a, b), binary=True).fetchone()[0],
    conn.cursor(binary=True).execute(make, (1, 150)).fetchone()[0])
check("#(a || b)", conn.execute("SELECT OPERATOR(counter.#) (%s OPERATOR(counter.||) %s)", (a, b)).fetchone()[0], 150.0)


# --- Errors arrive as exceptions with the documented SQLSTATE --------------
def expect_error(what, sql, params, exc, sqlstate):
    try:
        with conn.transaction():
            conn.execute(sql, params)
    except exc as e:
        check(f"{what}: SQLSTATE", e.sqlstate, sqlstate)
        return
    except psycopg.Error as e:
        fail(f"{what}: {type(e).__name__} {e.sqlstate}: {e}")
    fail(f"{what}: no error")


expect_error("a bigint key for a uuid counter", "SELECT counter.value('downloads_per_file', %s::bigint)", (7,),
             errors.DatatypeMismatch, "42804")
expect_error("a text key that is not a bigint", "SELECT counter.value('comments_per_post', %s::text)", ("abc",),
             errors.InvalidTextRepresentation, "22P02")
expect_error("an unknown counter", "SELECT counter.value('no_such_counter', %s::bigint)", (1,),
             errors.UndefinedObject, "42704")
expect_error("add without INSERT on the table", "SELECT counter.add('audit_per_actor', %s::bigint)", (1,),
             errors.InsufficientPrivilege, "42501")
# The formats really used: bad bytes in binary are hll_recv's 22P03, bad text hll_in's 22P02.
expect_error("a malformed sketch sent in binary", "SELECT %s", (Hll(b"\xff\x00"),), errors.InvalidBinaryRepresentation, "22P03")
expect_error("a malformed sketch sent in text", "SELECT %s::counter.hll", ("not a sketch",),
             errors.InvalidTextRepresentation, "22P02")
check("after the errors", conn.execute("SELECT counter.value('audit_per_actor', 1::bigint)").fetchone()[0], 0)

conn.close()
print("python: ok")
