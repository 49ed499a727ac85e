// counter_ext from Go with pgx v4 (Debian's golang-github-jackc-pgx-v4-dev).
//
// What an application does, against a database prepared by setup.sql: records
// events, reads counters, a rollup and sketches, and maps errors. Connects
// with libpq's environment (PGHOST, PGPORT, PGDATABASE, PGUSER) and
// DATABASE_URL. Exits 1 with a message on the first wrong number.
package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgtype"
	"github.com/jackc/pgx/v4"
)

var ctx = context.Background()

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "go: FAILED: "+format+"\n", args...)
	os.Exit(1)
}

func check(what string, got, want interface{}) {
	if !reflect.DeepEqual(got, want) {
		fail("%s: got %#v, want %#v", what, got, want)
	}
}

func must(err error, what string) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

func one(conn *pgx.Conn, dst interface{}, sql string, args ...interface{}) {
	must(conn.QueryRow(ctx, sql, args...).Scan(dst), sql)
}

var (
	fileA = pgtype.UUID{Bytes: [16]byte{0x01, 0x92, 0xf1, 0xc4, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, 0x0a}, Status: pgtype.Present}
	fileB = pgtype.UUID{Bytes: [16]byte{0x01, 0x92, 0xf1, 0xc4, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, 0x0b}, Status: pgtype.Present}
)

func main() {
	// DATABASE_URL may add settings (behind PgBouncer in transaction mode:
	// statement_cache_mode=describe); the rest comes from PGHOST, PGPORT...
	conn, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	must(err, "connect")
	defer conn.Close(ctx)

	// Teach pgx the type counter.hll: its binary form is its storage bytes,
	// so pgtype.Bytea carries it as []byte, in binary both ways.
	var hllOID uint32
	one(conn, &hllOID, "SELECT 'counter.hll'::regtype::oid")
	conn.ConnInfo().RegisterDataType(pgtype.DataType{Value: &pgtype.Bytea{}, Name: "hll", OID: hllOID})

	// --- Record events ----------------------------------------------------
	// Trigger mode: a plain INSERT counts (a batch: one round trip).
	batch := &pgx.Batch{}
	for _, post := range []int64{101, 101, 101, 102, 102, 103} {
		batch.Queue("INSERT INTO app.comments (post_id) VALUES ($1)", post)
	}
	must(conn.SendBatch(ctx, batch).Close(), "comments")

	// Application mode: counter.add in the transaction that inserts the row.
	inTx := func(what string, f func(tx pgx.Tx) error) {
		must(conn.BeginFunc(ctx, f), what)
	}
	like := func(user string) {
		inTx("like", func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO app.likes (user_name) VALUES ($1)", user); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "SELECT counter.add('likes_per_user', $1::text)", user)
			return err
		})
	}
	download := func(file pgtype.UUID) {
		inTx("download", func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO app.downloads (file_id) VALUES ($1)", file); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "SELECT counter.add('downloads_per_file', $1::uuid)", file)
			return err
		})
	}
	like("alice")
	like("alice")
	like("bob")
	download(fileA)
	download(fileA)
	download(fileB)

	// A transaction that rolls back: its rows and its adds never count.
	tx, err := conn.Begin(ctx)
	must(err, "begin")
	for _, sql := range []string{
		"INSERT INTO app.comments (post_id) VALUES (101)",
		"INSERT INTO app.likes (user_name) VALUES ('carol')",
		"SELECT counter.add('likes_per_user', 'carol'::text)",
		"SELECT counter.add('likes_per_user', 'alice'::text, 5)",
	} {
		_, err := tx.Exec(ctx, sql)
		must(err, sql)
	}
	must(tx.Rollback(ctx), "rollback")

	// --- Read counters with native types ----------------------------------
	var n int64
	one(conn, &n, "SELECT counter.value('comments_per_post', $1::bigint)", int64(101))
	check("value(bigint 101)", n, int64(3))
	one(conn, &n, "SELECT counter.value('likes_per_user', $1::text)", "alice")
	check("value(text alice)", n, int64(2))
	one(conn, &n, "SELECT counter.value('likes_per_user', $1::text)", "carol")
	check("value(text carol)", n, int64(0))
	one(conn, &n, "SELECT counter.value('downloads_per_file', $1::uuid)", fileA)
	check("value(uuid A)", n, int64(2))

	// values_of(keys) must equal GROUP BY over the rows, and what we wrote.
	int64s := func(sql string, args ...interface{}) map[int64]int64 {
		m := map[int64]int64{}
		rows, err := conn.Query(ctx, sql, args...)
		must(err, sql)
		for rows.Next() {
			var k, v int64
			must(rows.Scan(&k, &v), sql)
			m[k] = v
		}
		must(rows.Err(), sql)
		return m
	}
	got := int64s("SELECT key, value FROM counter.values_of('comments_per_post', $1::bigint[])", []int64{101, 102, 103, 104})
	truth := int64s("SELECT post_id, count(*) FROM app.comments GROUP BY 1")
	truth[104] = 0
	check("comments_per_post: values_of vs GROUP BY", got, truth)
	check("comments_per_post: values_of vs what the program wrote", got, map[int64]int64{101: 3, 102: 2, 103: 1, 104: 0})

	texts := func(sql string, args ...interface{}) map[string]int64 {
		m := map[string]int64{}
		rows, err := conn.Query(ctx, sql, args...)
		must(err, sql)
		for rows.Next() {
			var k string
			var v int64
			must(rows.Scan(&k, &v), sql)
			m[k] = v
		}
		must(rows.Err(), sql)
		return m
	}
	gotT := texts("SELECT key, value FROM counter.values_of('likes_per_user', $1::text[])", []string{"alice", "bob", "carol"})
	truthT := texts("SELECT user_name, count(*) FROM app.likes GROUP BY 1")
	truthT["carol"] = 0
	check("likes_per_user: values_of vs GROUP BY", gotT, truthT)
	check("likes_per_user: values_of vs what the program wrote", gotT, map[string]int64{"alice": 2, "bob": 1, "carol": 0})

	uuids := func(sql string, args ...interface{}) map[[16]byte]int64 {
		m := map[[16]byte]int64{}
		rows, err := conn.Query(ctx, sql, args...)
		must(err, sql)
		for rows.Next() {
			var k pgtype.UUID
			var v int64
			must(rows.Scan(&k, &v), sql)
			m[k.Bytes] = v
		}
		must(rows.Err(), sql)
		return m
	}
	gotU := uuids("SELECT key, value FROM counter.values_of('downloads_per_file', $1::uuid[])", []pgtype.UUID{fileA, fileB})
	check("downloads_per_file: values_of vs GROUP BY", gotU, uuids("SELECT file_id, count(*) FROM app.downloads GROUP BY 1"))
	check("downloads_per_file: values_of vs what the program wrote", gotU, map[[16]byte]int64{fileA.Bytes: 2, fileB.Bytes: 1})

	// --- A rollup's hours ---------------------------------------------------
	at := func(s string) time.Time {
		t, err := time.Parse("2006-01-02 15:04Z07", s)
		must(err, s)
		return t.UTC()
	}
	clicks := []struct {
		link, visitor int64
		at            string
	}{
		{1, 1, "2026-01-01 10:05+00"}, {1, 2, "2026-01-01 10:10+00"}, {1, 3, "2026-01-01 10:20+00"},
		{1, 1, "2026-01-01 10:50+00"}, {1, 1, "2026-01-01 11:05+00"}, {1, 4, "2026-01-01 11:30+00"},
		{2, 5, "2026-01-01 10:15+00"},
	}
	inTx("clicks", func(tx pgx.Tx) error {
		for i, c := range clicks {
			id := fileA
			id.Bytes[15] = byte(0x20 + i)
			if _, err := tx.Exec(ctx, `INSERT INTO app.clicks (event_id, link_id, visitor_id, occurred_at)
			                           VALUES ($1, $2, $3, $4) ON CONFLICT (event_id, occurred_at) DO NOTHING`,
				id, c.link, c.visitor, at(c.at)); err != nil {
				return err
			}
		}
		return nil
	})
	type hour struct {
		Link        int64
		Hour        time.Time
		Count, Uniq int64
	}
	hours := func(sql string) []hour {
		var out []hour
		rows, err := conn.Query(ctx, sql)
		must(err, sql)
		for rows.Next() {
			var h hour
			must(rows.Scan(&h.Link, &h.Hour, &h.Count, &h.Uniq), sql)
			h.Hour = h.Hour.UTC()
			out = append(out, h)
		}
		must(rows.Err(), sql)
		return out
	}
	gotH := hours(`SELECT link_id, hour, count, round(counter.hll_cardinality(distinct_visitor_id))::bigint
	               FROM app.clicks_hourly ORDER BY 1, 2`)
	check("clicks_hourly vs GROUP BY", gotH, hours(`SELECT link_id, date_bin('1 hour', occurred_at, '2000-01-01 00:00+00'),
	            count(*), count(DISTINCT visitor_id) FROM app.clicks GROUP BY 1, 2 ORDER BY 1, 2`))
	check("clicks_hourly vs what the program wrote", gotH, []hour{
		{1, at("2026-01-01 10:00+00"), 4, 3}, {1, at("2026-01-01 11:00+00"), 2, 2}, {2, at("2026-01-01 10:00+00"), 1, 1}})
	days := texts(`SELECT key->>'link_id', count FROM counter.rollup_totals('clicks_hourly', $1, $2)`,
		at("2026-01-01 00:00+00"), at("2026-01-02 00:00+00"))
	check("rollup_totals per day", days, map[string]int64{"1": 6, "2": 1})
	uniq := texts(`SELECT key->>'link_id', (distinct_counts->>'visitor_id')::numeric::bigint
	               FROM counter.rollup_totals('clicks_hourly', $1, $2)`, at("2026-01-01 00:00+00"), at("2026-01-02 00:00+00"))
	check("rollup_totals distinct visitors per day", uniq, map[string]int64{"1": 4, "2": 1})

	// --- Sketches: counter.hll in binary and in text ------------------------
	const mk = "SELECT counter.hll_add_agg(g) FROM generate_series($1::int, $2::int) g"
	var a, b, b2 []byte
	var bText string
	must(conn.QueryRow(ctx, mk, pgx.QueryResultFormats{pgx.BinaryFormatCode}, 1, 100).Scan(&a), "binary result")
	must(conn.QueryRow(ctx, mk, pgx.QueryResultFormats{pgx.TextFormatCode}, 51, 150).Scan(&bText), "text result")
	if !strings.HasPrefix(bText, `\x`) {
		fail("text form of a sketch: %.10q", bText)
	}
	b, err = hex.DecodeString(bText[2:])
	must(err, "hex")
	one(conn, &b2, mk, 51, 150)
	check("binary form = text form's bytes", b2, b)
	inTx("sketches", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO app.daily_visitors VALUES ($1, $2)", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), a); err != nil {
			return err // sent in binary
		}
		_, err := tx.Exec(ctx, "INSERT INTO app.daily_visitors VALUES ($1, $2)", time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC), bText)
		return err // sent in text
	})
	var stored []byte
	one(conn, &stored, "SELECT visitors FROM app.daily_visitors WHERE day = '2026-01-01'")
	if !bytes.Equal(stored, a) {
		fail("stored sketch differs from the bytes sent")
	}
	var truthN int64
	var merged float64
	one(conn, &truthN, "SELECT count(DISTINCT g) FROM (SELECT generate_series(1, 100) UNION ALL SELECT generate_series(51, 150)) s(g)")
	one(conn, &merged, "SELECT counter.hll_cardinality(counter.hll_union_agg(visitors)) FROM app.daily_visitors")
	check("hll_union_agg of the stored days", merged, float64(truthN))
	var union, all []byte
	one(conn, &union, "SELECT $1::counter.hll OPERATOR(counter.||) $2::counter.hll", a, b)
	one(conn, &all, mk, 1, 150)
	check("a || b sent in binary", union, all)
	one(conn, &merged, "SELECT OPERATOR(counter.#) ($1::counter.hll OPERATOR(counter.||) $2::counter.hll)", a, b)
	check("#(a || b)", merged, 150.0)

	// --- Errors arrive as *pgconn.PgError with the documented SQLSTATE ------
	expect := func(what, sqlstate, sql string, args ...interface{}) {
		_, err := conn.Exec(ctx, sql, args...)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			fail("%s: want SQLSTATE %s, got %v", what, sqlstate, err)
		}
		check(what+": SQLSTATE", pgErr.Code, sqlstate)
	}
	expect("a bigint key for a uuid counter", "42804", "SELECT counter.value('downloads_per_file', $1::bigint)", int64(7))
	expect("a text key that is not a bigint", "22P02", "SELECT counter.value('comments_per_post', $1::text)", "abc")
	expect("an unknown counter", "42704", "SELECT counter.value('no_such_counter', $1::bigint)", int64(1))
	expect("add without INSERT on the table", "42501", "SELECT counter.add('audit_per_actor', $1::bigint)", int64(1))
	// The formats really used: bad bytes in binary are hll_recv's 22P03, bad text hll_in's 22P02.
	expect("a malformed sketch sent in binary", "22P03", "SELECT $1::counter.hll", []byte{0xff, 0x00})
	expect("a malformed sketch sent in text", "22P02", "SELECT $1::counter.hll", "not a sketch")
	one(conn, &n, "SELECT counter.value('audit_per_actor', 1::bigint)")
	check("after the errors", n, int64(0))
	fmt.Println("go: ok")
}
