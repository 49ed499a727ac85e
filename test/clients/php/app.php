<?php
// counter_ext from PHP with PDO pgsql (Debian's php-cli, php-pgsql).
//
// What an application does, against a database prepared by setup.sql: records
// events, reads counters, a rollup and sketches, and maps errors. Connects
// with PGHOST, PGPORT, PGDATABASE, PGUSER. Exits 1 with a message on the
// first wrong number. PDO returns bigint as int, double precision as a
// string. PDO receives every result in text; it sends a
// parameter bound as PDO::PARAM_LOB in binary.
declare(strict_types=1);

function fail(string $msg): never
{
    fwrite(STDERR, "php: FAILED: $msg\n");
    exit(1);
}

function check(string $what, mixed $got, mixed $want): void
{
    if ($got !== $want) {
        fail("$what: got " . var_export($got, true) . ", want " . var_export($want, true));
    }
}

$dsn = sprintf('pgsql:host=%s;port=%s;dbname=%s', getenv('PGHOST'), getenv('PGPORT'), getenv('PGDATABASE'));
$db = new PDO($dsn, getenv('PGUSER'), null, [
    PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
    PDO::ATTR_EMULATE_PREPARES => false,
    PDO::ATTR_STRINGIFY_FETCHES => false,   // bigint as int
]);

function one(PDO $db, string $sql, array $params = []): mixed
{
    $st = $db->prepare($sql);
    $st->execute($params);
    return $st->fetchColumn();
}

// --- Record events ----------------------------------------------------------
// Trigger mode: a plain INSERT counts.
$db->beginTransaction();
$st = $db->prepare('INSERT INTO app.comments (post_id) VALUES (?)');
foreach ([101, 101, 101, 102, 102, 103] as $post) {
    $st->execute([$post]);
}
$db->commit();

// Application mode: counter.add in the transaction that inserts the row.
function like(PDO $db, string $user): void
{
    $db->beginTransaction();
    $db->prepare('INSERT INTO app.likes (user_name) VALUES (?)')->execute([$user]);
    $db->prepare("SELECT counter.add('likes_per_user', ?::text)")->execute([$user]);
    $db->commit();
}
const FILE_A = '0192f1c4-0000-7000-8000-00000000000a';
const FILE_B = '0192f1c4-0000-7000-8000-00000000000b';
function download(PDO $db, string $file): void
{
    $db->beginTransaction();
    $db->prepare('INSERT INTO app.downloads (file_id) VALUES (?)')->execute([$file]);
    $db->prepare("SELECT counter.add('downloads_per_file', ?::uuid)")->execute([$file]);
    $db->commit();
}
like($db, 'alice');
like($db, 'alice');
like($db, 'bob');
download($db, FILE_A);
download($db, FILE_A);
download($db, FILE_B);

// A transaction that rolls back: its rows and its adds never count.
$db->beginTransaction();
$db->exec('INSERT INTO app.comments (post_id) VALUES (101)');
$db->exec("INSERT INTO app.likes (user_name) VALUES ('carol')");
$db->query("SELECT counter.add('likes_per_user', 'carol'::text)");
$db->query("SELECT counter.add('likes_per_user', 'alice'::text, 5)");
$db->rollBack();

// --- Read counters with native types ---------------------------------------
check('value(bigint 101)', one($db, "SELECT counter.value('comments_per_post', ?::bigint)", [101]), 3);
check('value(text alice)', one($db, "SELECT counter.value('likes_per_user', ?::text)", ['alice']), 2);
check('value(text carol)', one($db, "SELECT counter.value('likes_per_user', ?::text)", ['carol']), 0);
check('value(uuid A)', one($db, "SELECT counter.value('downloads_per_file', ?::uuid)", [FILE_A]), 2);

// values_of(keys) must equal GROUP BY over the rows, and what we wrote. PDO
// has no array binding: the keys go as one text array literal.
function pairs(PDO $db, string $sql, array $params = []): array
{
    $st = $db->prepare($sql);
    $st->execute($params);
    return $st->fetchAll(PDO::FETCH_KEY_PAIR);
}
function compare(PDO $db, string $counter, array $keys, string $type, string $truthSql, array $want): void
{
    $literal = '{' . implode(',', array_map(fn ($k) => '"' . $k . '"', $keys)) . '}';
    $got = pairs($db, "SELECT key, value FROM counter.values_of(?, ?::{$type}[])", [$counter, $literal]);
    $truth = pairs($db, $truthSql) + array_fill_keys($keys, 0);
    ksort($got);
    ksort($truth);
    ksort($want);
    check("$counter: values_of vs GROUP BY", $got, $truth);
    check("$counter: values_of vs what the program wrote", $got, $want);
}
compare($db, 'comments_per_post', [101, 102, 103, 104], 'bigint',
    'SELECT post_id, count(*) FROM app.comments GROUP BY 1', [101 => 3, 102 => 2, 103 => 1, 104 => 0]);
compare($db, 'likes_per_user', ['alice', 'bob', 'carol'], 'text',
    'SELECT user_name, count(*) FROM app.likes GROUP BY 1', ['alice' => 2, 'bob' => 1, 'carol' => 0]);
compare($db, 'downloads_per_file', [FILE_A, FILE_B], 'uuid',
    'SELECT file_id, count(*) FROM app.downloads GROUP BY 1', [FILE_A => 2, FILE_B => 1]);

// --- A rollup's hours --------------------------------------------------------
$clicks = [
    [1, 1, '2026-01-01 10:05+00'], [1, 2, '2026-01-01 10:10+00'], [1, 3, '2026-01-01 10:20+00'],
    [1, 1, '2026-01-01 10:50+00'], [1, 1, '2026-01-01 11:05+00'], [1, 4, '2026-01-01 11:30+00'],
    [2, 5, '2026-01-01 10:15+00'],
];
$db->beginTransaction();
$st = $db->prepare('INSERT INTO app.clicks (event_id, link_id, visitor_id, occurred_at) VALUES (?::uuid, ?, ?, ?)
                    ON CONFLICT (event_id, occurred_at) DO NOTHING');
foreach ($clicks as $i => [$link, $visitor, $at]) {
    $st->execute([sprintf('0192f1c4-0000-7000-8000-0000000000%02x', 0x20 + $i), $link, $visitor, $at]);
}
$db->commit();
$rows = fn (string $sql, array $p = []) => (function () use ($db, $sql, $p) {
    $st = $db->prepare($sql);
    $st->execute($p);
    return $st->fetchAll(PDO::FETCH_NUM);
})();
$hours = $rows("SELECT link_id, to_char(hour AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24'), count,
                       round(counter.hll_cardinality(distinct_visitor_id))::bigint
                FROM app.clicks_hourly ORDER BY 1, 2");
check('clicks_hourly vs GROUP BY', $hours, $rows(
    "SELECT link_id, to_char(date_bin('1 hour', occurred_at, '2000-01-01 00:00+00') AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24'),
            count(*), count(DISTINCT visitor_id) FROM app.clicks GROUP BY 1, 2 ORDER BY 1, 2"));
check('clicks_hourly vs what the program wrote', $hours,
    [[1, '2026-01-01 10', 4, 3], [1, '2026-01-01 11', 2, 2], [2, '2026-01-01 10', 1, 1]]);
check('rollup_totals per day', $rows(
    "SELECT key->>'link_id', count, (distinct_counts->>'visitor_id')::numeric::bigint
     FROM counter.rollup_totals('clicks_hourly', ?, ?) ORDER BY 1", ['2026-01-01 00:00+00', '2026-01-02 00:00+00']),
    [['1', 6, 4], ['2', 1, 1]]);

// --- Sketches: counter.hll in text, and sent in binary ----------------------
$make = 'SELECT counter.hll_add_agg(g) FROM generate_series(?::int, ?::int) g';
$aText = one($db, $make, [1, 100]);        // received in text: \x + hex
$bText = one($db, $make, [51, 150]);
if (!str_starts_with($aText, '\\x')) {
    fail('text form of a sketch: ' . substr($aText, 0, 10));
}
$a = hex2bin(substr($aText, 2));           // the binary form: the storage bytes
$db->beginTransaction();
$st = $db->prepare('INSERT INTO app.daily_visitors VALUES (?, ?)');
$st->bindValue(1, '2026-01-01');
$st->bindValue(2, $a, PDO::PARAM_LOB);     // sent in binary
$st->execute();
$db->prepare('INSERT INTO app.daily_visitors VALUES (?, ?::counter.hll)')->execute(['2026-01-02', $bText]);  // in text
$db->commit();
check('stored sketch = the bytes sent', one($db, "SELECT visitors FROM app.daily_visitors WHERE day = '2026-01-01'"), $aText);
$truth = one($db, 'SELECT count(DISTINCT g) FROM (SELECT generate_series(1, 100) UNION ALL SELECT generate_series(51, 150)) s(g)');
check('hll_union_agg of the stored days',
    (float) one($db, 'SELECT counter.hll_cardinality(counter.hll_union_agg(visitors)) FROM app.daily_visitors'), (float) $truth);
$st = $db->prepare('SELECT ?::counter.hll OPERATOR(counter.||) ?::counter.hll');
$st->bindValue(1, $a, PDO::PARAM_LOB);
$st->bindValue(2, $bText);
$st->execute();
check('a || b', $st->fetchColumn(), one($db, $make, [1, 150]));
check('#(a || b)', (float) one($db, 'SELECT OPERATOR(counter.#) (?::counter.hll OPERATOR(counter.||) ?::counter.hll)', [$aText, $bText]), 150.0);

// --- Errors arrive as PDOException with the documented SQLSTATE -------------
function expect(PDO $db, string $what, string $sqlstate, string $sql, array $params, int $type = PDO::PARAM_STR): void
{
    try {
        $st = $db->prepare($sql);
        foreach ($params as $i => $p) {
            $st->bindValue($i + 1, $p, $type);
        }
        $st->execute();
    } catch (PDOException $e) {
        check("$what: SQLSTATE", $e->getCode(), $sqlstate);
        return;
    }
    fail("$what: no error");
}
expect($db, 'a bigint key for a uuid counter', '42804', "SELECT counter.value('downloads_per_file', ?::bigint)", [7], PDO::PARAM_INT);
expect($db, 'a text key that is not a bigint', '22P02', "SELECT counter.value('comments_per_post', ?::text)", ['abc']);
expect($db, 'an unknown counter', '42704', "SELECT counter.value('no_such_counter', ?::bigint)", [1], PDO::PARAM_INT);
expect($db, 'add without INSERT on the table', '42501', "SELECT counter.add('audit_per_actor', ?::bigint)", [1], PDO::PARAM_INT);
// The formats really used: bad bytes in binary are hll_recv's 22P03, bad text hll_in's 22P02.
expect($db, 'a malformed sketch sent in binary', '22P03', 'SELECT ?::counter.hll', ["\xff\x00"], PDO::PARAM_LOB);
expect($db, 'a malformed sketch sent in text', '22P02', 'SELECT ?::counter.hll', ['not a sketch']);
check('after the errors', one($db, "SELECT counter.value('audit_per_actor', 1::bigint)"), 0);
echo "php: ok\n";
