// counter_ext from Node.js with node-postgres (pg, from the npm registry;
// package-lock.json pins it).
//
// What an application does, against a database prepared by setup.sql: records
// events, reads counters, a rollup and sketches, and maps errors. Connects
// with PGHOST, PGPORT, PGDATABASE, PGUSER. Exits 1 with a message on the
// first wrong number.
'use strict';
const assert = require('node:assert/strict');
const pg = require('pg');

// bigint as BigInt, not the default string.
pg.types.setTypeParser(pg.types.builtins.INT8, BigInt);

const FILE_A = '0192f1c4-0000-7000-8000-00000000000a';
const FILE_B = '0192f1c4-0000-7000-8000-00000000000b';

function check(what, got, want) {
  try {
    assert.deepStrictEqual(got, want);
  } catch (e) {
    throw new Error(`${what}: got ${JSON.stringify(got, jsonBig)}, want ${JSON.stringify(want, jsonBig)}`);
  }
}
function jsonBig(_k, v) {
  if (typeof v === 'bigint') return `${v}n`;
  return v instanceof Map ? [...v] : v;
}

async function main() {
  // A pool, as an application has; each transaction on a client of its own.
  const pool = new pg.Pool({ max: 2, application_name: 'clients-node' });
  const one = async (text, values) => Object.values((await pool.query(text, values)).rows[0])[0];
  async function inTx(f) {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await f(client);
      await client.query('COMMIT');
    } catch (e) {
      await client.query('ROLLBACK');
      throw e;
    } finally {
      client.release();
    }
  }

  // counter.hll: a Buffer parameter is sent in binary (its storage bytes).
  // Results come in text: node-pg decodes every result field as UTF-8 text,
  // so `binary: true` results corrupt bytes above 0x7f (node-postgres issue
  // #3495); a type parser turns the text form (\x + hex) into the same bytes.
  const hllOid = await one("SELECT 'counter.hll'::regtype::oid::int");
  const hllTypes = {
    getTypeParser: (oid, format) =>
      oid === hllOid ? (s) => Buffer.from(s.slice(2), 'hex') : pg.types.getTypeParser(oid, format),
  };

  // --- Record events --------------------------------------------------------
  // Trigger mode: a plain INSERT counts.
  await inTx(async (c) => {
    for (const post of [101, 101, 101, 102, 102, 103]) {
      await c.query('INSERT INTO app.comments (post_id) VALUES ($1)', [post]);
    }
  });
  // Application mode: counter.add in the transaction that inserts the row.
  const like = (user) =>
    inTx(async (c) => {
      await c.query('INSERT INTO app.likes (user_name) VALUES ($1)', [user]);
      await c.query("SELECT counter.add('likes_per_user', $1::text)", [user]);
    });
  const download = (file) =>
    inTx(async (c) => {
      await c.query('INSERT INTO app.downloads (file_id) VALUES ($1)', [file]);
      await c.query("SELECT counter.add('downloads_per_file', $1::uuid)", [file]);
    });
  await like('alice');
  await like('alice');
  await like('bob');
  await download(FILE_A);
  await download(FILE_A);
  await download(FILE_B);
  // A transaction that rolls back: its rows and its adds never count.
  await assert.rejects(
    inTx(async (c) => {
      await c.query('INSERT INTO app.comments (post_id) VALUES (101)');
      await c.query("INSERT INTO app.likes (user_name) VALUES ('carol')");
      await c.query("SELECT counter.add('likes_per_user', 'carol'::text)");
      await c.query("SELECT counter.add('likes_per_user', 'alice'::text, 5)");
      throw new Error('abort');
    }),
    /abort/,
  );

  // --- Read counters with native types -------------------------------------
  check('value(bigint 101)', await one("SELECT counter.value('comments_per_post', $1::bigint)", [101n]), 3n);
  check('value(text alice)', await one("SELECT counter.value('likes_per_user', $1::text)", ['alice']), 2n);
  check('value(text carol)', await one("SELECT counter.value('likes_per_user', $1::text)", ['carol']), 0n);
  check('value(uuid A)', await one("SELECT counter.value('downloads_per_file', $1::uuid)", [FILE_A]), 2n);

  // values_of(keys) must equal GROUP BY over the rows, and what we wrote.
  const pairs = async (text, values) =>
    new Map((await pool.query({ text, values, rowMode: 'array' })).rows.map(([k, v]) => [k, v]));
  async function compare(counter, keys, type, truthSql, want) {
    const got = await pairs(`SELECT key, value FROM counter.values_of($1, $2::${type}[])`, [counter, keys]);
    const truth = await pairs(truthSql);
    for (const k of keys) if (!truth.has(k)) truth.set(k, 0n);
    const sorted = (m) => new Map([...m].sort((x, y) => (x[0] < y[0] ? -1 : 1)));
    check(`${counter}: values_of vs GROUP BY`, sorted(got), sorted(truth));
    check(`${counter}: values_of vs what the program wrote`, sorted(got), sorted(new Map(want)));
  }
  await compare('comments_per_post', [101n, 102n, 103n, 104n], 'bigint',
    'SELECT post_id, count(*) FROM app.comments GROUP BY 1', [[101n, 3n], [102n, 2n], [103n, 1n], [104n, 0n]]);
  await compare('likes_per_user', ['alice', 'bob', 'carol'], 'text',
    'SELECT user_name, count(*) FROM app.likes GROUP BY 1', [['alice', 2n], ['bob', 1n], ['carol', 0n]]);
  await compare('downloads_per_file', [FILE_A, FILE_B], 'uuid',
    'SELECT file_id, count(*) FROM app.downloads GROUP BY 1', [[FILE_A, 2n], [FILE_B, 1n]]);

  // --- A rollup's hours -------------------------------------------------------
  const clicks = [
    [1, 1, '2026-01-01 10:05+00'], [1, 2, '2026-01-01 10:10+00'], [1, 3, '2026-01-01 10:20+00'],
    [1, 1, '2026-01-01 10:50+00'], [1, 1, '2026-01-01 11:05+00'], [1, 4, '2026-01-01 11:30+00'],
    [2, 5, '2026-01-01 10:15+00'],
  ];
  await inTx(async (c) => {
    for (const [i, [link, visitor, at]] of clicks.entries()) {
      await c.query(
        `INSERT INTO app.clicks (event_id, link_id, visitor_id, occurred_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (event_id, occurred_at) DO NOTHING`,
        [`0192f1c4-0000-7000-8000-0000000000${(0x20 + i).toString(16)}`, link, visitor, new Date(at.replace(' ', 'T') + ':00')]);
    }
  });
  const rows = async (text, values) => (await pool.query({ text, values, rowMode: 'array' })).rows;
  const hours = await rows(`SELECT link_id, hour, count, round(counter.hll_cardinality(distinct_visitor_id))::bigint
                            FROM app.clicks_hourly ORDER BY 1, 2`);
  check('clicks_hourly vs GROUP BY', hours, await rows(
    `SELECT link_id, date_bin('1 hour', occurred_at, '2000-01-01 00:00+00'), count(*), count(DISTINCT visitor_id)
     FROM app.clicks GROUP BY 1, 2 ORDER BY 1, 2`));
  const h = (s) => new Date(`2026-01-01T${s}:00:00Z`);
  check('clicks_hourly vs what the program wrote', hours,
    [[1n, h('10'), 4n, 3n], [1n, h('11'), 2n, 2n], [2n, h('10'), 1n, 1n]]);
  check('rollup_totals per day', await rows(
    `SELECT key->>'link_id', count, (distinct_counts->>'visitor_id')::numeric::bigint
     FROM counter.rollup_totals('clicks_hourly', $1, $2) ORDER BY 1`,
    [new Date('2026-01-01T00:00:00Z'), new Date('2026-01-02T00:00:00Z')]), [['1', 6n, 4n], ['2', 1n, 1n]]);

  // --- Sketches: counter.hll sent in binary and in text -----------------------
  const make = 'SELECT counter.hll_add_agg(g) FROM generate_series($1::int, $2::int) g';
  const sketch = async (text, values) =>
    Object.values((await pool.query({ text, values, types: hllTypes })).rows[0])[0];
  const a = await sketch(make, [1, 100]);             // a Buffer, from the text form
  const bText = await one(make, [51, 150]);           // the text form itself: \x + hex
  check('text form of a sketch', bText.slice(0, 2), '\\x');
  const b = Buffer.from(bText.slice(2), 'hex');
  check('the bytes = the storage form (::bytea)', a, await one('SELECT counter.hll_add_agg(g)::bytea FROM generate_series(1, 100) g'));
  await inTx(async (c) => {
    await c.query('INSERT INTO app.daily_visitors VALUES ($1, $2::counter.hll)', ['2026-01-01', a]);      // in binary
    await c.query('INSERT INTO app.daily_visitors VALUES ($1, $2::counter.hll)', ['2026-01-02', bText]);  // in text
  });
  check('stored sketch = the bytes sent', await sketch("SELECT visitors FROM app.daily_visitors WHERE day = '2026-01-01'"), a);
  const truth = await one(
    'SELECT count(DISTINCT g) FROM (SELECT generate_series(1, 100) UNION ALL SELECT generate_series(51, 150)) s(g)');
  check('hll_union_agg of the stored days',
    await one('SELECT counter.hll_cardinality(counter.hll_union_agg(visitors)) FROM app.daily_visitors'), Number(truth));
  check('a || b sent in binary',
    await sketch('SELECT $1::counter.hll OPERATOR(counter.||) $2::counter.hll', [a, b]), await sketch(make, [1, 150]));
  check('#(a || b)', await one('SELECT OPERATOR(counter.#) ($1::counter.hll OPERATOR(counter.||) $2::counter.hll)', [a, b]), 150);

  // --- Errors arrive as pg.DatabaseError with the documented SQLSTATE -------
  async function expect(what, code, text, values) {
    await assert.rejects(pool.query(text, values), (e) => {
      if (!(e instanceof pg.DatabaseError)) throw new Error(`${what}: not a DatabaseError: ${e}`);
      check(`${what}: SQLSTATE`, e.code, code);
      return true;
    }, `${what}: no error`);
  }
  await expect('a bigint key for a uuid counter', '42804', "SELECT counter.value('downloads_per_file', $1::bigint)", [7]);
  await expect('a text key that is not a bigint', '22P02', "SELECT counter.value('comments_per_post', $1::text)", ['abc']);
  await expect('an unknown counter', '42704', "SELECT counter.value('no_such_counter', $1::bigint)", [1]);
  await expect('add without INSERT on the table', '42501', "SELECT counter.add('audit_per_actor', $1::bigint)", [1]);
  // The formats really used: bad bytes in binary are hll_recv's 22P03, bad text hll_in's 22P02.
  await expect('a malformed sketch sent in binary', '22P03', 'SELECT $1::counter.hll', [Buffer.from([0xff, 0x00])]);
  await expect('a malformed sketch sent in text', '22P02', 'SELECT $1::counter.hll', ['not a sketch']);
  check('after the errors', await one("SELECT counter.value('audit_per_actor', 1::bigint)"), 0n);
  await pool.end();
  console.log('node: ok');
}

main().catch((e) => {
  console.error(`node: FAILED: ${e.message}`);
  process.exit(1);
});
