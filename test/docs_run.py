#!/usr/bin/env python3
"""Runs the SQL of one documentation page as written and compares what it
shows with what the server prints (test/scripts/docs.sh runs it per page).

    docs_run.py PAGE.md PSQL [psql connection options...]

The conventions (doc/index.md, "Documentation that runs"):
- A ```sql block runs, in page order, in one psql session per page
  (ON_ERROR_STOP: an unexpected error fails the page).
- A ```sql norun: REASON block is shown but not run; the reason is required.
- Output shown for a statement: the `-- ` comment lines right after it, in
  psql's aligned format (a header, a `---+---` line, the rows, optionally the
  `(N rows)` footer); rows are written `--  ` plus the row, as psql
  prints them with a leading space, so a `-- comment` below ends them. `...` in a shown line matches any text; a line that is
  only `...` matches any number of rows. Widths and spacing are not compared.
- Messages shown right after a statement (`-- WARNING:`, `-- NOTICE:`,
  `-- ERROR:`, `-- DETAIL:`, `-- HINT:`, continuation lines indented) must be
  among what the server printed for it; a shown `-- ERROR:` means the
  statement must fail with that message, `-- error: SQLSTATE` (on its own
  line, right after the statement) that it must fail with that SQLSTATE.
Prints one line per block (run / not run and why) and per failure; the last
line lists the counter.* names the blocks that ran mention (for coverage).
Exit status 1 when anything differs.
"""
import re
import subprocess
import sys

LEVELS = ("ERROR", "WARNING", "NOTICE", "DETAIL", "HINT", "INFO")
SEP_RE = re.compile(r"^-+(\+-+)*$")
MSG_RE = re.compile(r"^(%s):\s" % "|".join(LEVELS))
FOOTER_RE = re.compile(r"^\(\d+ rows?\)$")


def blocks(text):
    """(line number, info string, body) of each fenced block."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\S*)(.*)$", lines[i])
        if m and (m.group(1) or m.group(2) == ""):
            start = i + 1
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append((start, (m.group(1) + m.group(2)).strip(), "\n".join(lines[i + 1 : j])))
            i = j + 1
        else:
            i += 1
    return out


def split_statements(sql):
    """Statements of a block: (text, tail) where tail is the comment lines
    right after the statement (same line after the ';' and the following
    consecutive comment lines)."""
    stmts = []
    i, n, start = 0, len(sql), 0
    while i < n:
        c = sql[i]
        if sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j
            continue
        if sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        if c == "'" or c == '"':
            j = i + 1
            while j < n:
                if sql[j] == c:
                    if j + 1 < n and sql[j + 1] == c:
                        j += 2
                        continue
                    break
                j += 1
            i = j + 1
            continue
        if c == "$":
            m = re.match(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$", sql[i:])
            if m and not (i > 0 and (sql[i - 1].isalnum() or sql[i - 1] == "_")):
                tag = m.group(0)
                j = sql.find(tag, i + len(tag))
                i = n if j < 0 else j + len(tag)
                continue
        if c == "\\" and (i == 0 or sql[i - 1] == "\n"):  # a psql meta-command: the whole line
            j = sql.find("\n", i)
            j = n if j < 0 else j
            stmts.append((sql[start:j].strip(), []))
            start = i = j
            continue
        if c == ";":
            text = sql[start : i + 1]
            # the tail: the rest of this line, then the comment lines below
            j = sql.find("\n", i)
            j = n if j < 0 else j
            same = sql[i + 1 : j].strip()
            tail = []
            if same.startswith("--"):
                tail.append(same)
            k = j + 1
            while k < n:
                e = sql.find("\n", k)
                e = n if e < 0 else e
                line = sql[k:e].strip()
                if not line.startswith("--"):
                    break
                tail.append(line)
                k = e + 1
            stmts.append((text.strip(), tail))
            start = i = min(k, n)
            continue
        i += 1
    rest = sql[start:]
    if re.sub(r"--[^\n]*", "", rest).strip():
        stmts.append((rest.strip(), []))
    return stmts


def uncomment(line):
    s = line[2:]
    return s[1:] if s.startswith(" ") else s


def parse_tail(tail):
    """What a statement's tail shows: (table lines or None, messages, sqlstate)."""
    lines = [uncomment(t) for t in tail]
    msgs, table, sqlstate = [], None, None
    i = 0
    while i < len(lines):
        s = lines[i].strip()
        m = re.match(r"^error:\s*([0-9A-Z]{5})\b", s)
        if m:
            sqlstate = m.group(1)
            i += 1
            continue
        if MSG_RE.match(s):
            msg = s
            i += 1
            while i < len(lines) and lines[i].startswith("  ") and not MSG_RE.match(lines[i].strip()) \
                    and not (i + 1 < len(lines) and SEP_RE.match(lines[i + 1].strip())):
                msg += " " + lines[i].strip()
                i += 1
            msgs.append(msg)
            continue
        if table is None and i + 1 < len(lines) and SEP_RE.match(lines[i + 1].strip()):
            table = [s, lines[i + 1].strip()]
            i += 2
            while i < len(lines):
                s = lines[i].strip()
                # rows start with psql's space (`--  value`): a comment
                # written `-- text` below a result ends it
                if s == "" or MSG_RE.match(s) or not (lines[i].startswith(" ") or FOOTER_RE.match(s)
                                                      or s == "..."):
                    break
                table.append(s)
                i += 1
                if FOOTER_RE.match(s):
                    break
            continue
        break  # ordinary comments: end of what is shown
    return table, msgs, sqlstate


def norm(line):
    line = line.strip()
    if SEP_RE.match(line):
        return re.sub(r"-+", "-", line)
    return re.sub(r"\s+", " ", line)


def line_match(shown, actual):
    shown, actual = norm(shown), norm(actual)
    if "..." not in shown:
        return shown == actual
    pat = ".*".join(re.escape(p) for p in shown.split("..."))
    return re.fullmatch(pat, actual) is not None


def lines_match(shown, actual):
    if not shown:
        return not actual
    if norm(shown[0]) == "...":
        return any(lines_match(shown[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and line_match(shown[0], actual[0]) and lines_match(shown[1:], actual[1:])


def server_messages(err):
    msgs = []
    for raw in err.split("\n"):
        line = re.sub(r"^psql:[^:]*:\d+: ", "", raw)
        if MSG_RE.match(line) or re.match(r"^(CONTEXT|QUERY|LINE \d+|STATEMENT):", line):
            msgs.append(line.strip())
        elif msgs and line.strip() and not line.startswith("@@"):
            msgs[-1] += " " + line.strip()
    return [re.sub(r"\s+", " ", m) for m in msgs]


def main():
    page, psql, conn = sys.argv[1], sys.argv[2], sys.argv[3:]
    text = open(page, encoding="utf-8").read()
    script = ["\\set ON_ERROR_STOP 1", "\\pset pager off"]
    checks = []  # (index, block line, statement, table, msgs, sqlstate)
    ran_text = []
    report = []
    for line, info, body in blocks(text):
        lang = info.split()[0] if info else ""
        if lang != "sql" and not lang.startswith("sql"):
            continue
        words = info.split(None, 1)
        if len(words) > 1 or lang != "sql":
            m = re.match(r"^sql\s+norun:\s*(\S.*)$", info)
            if not m:
                report.append(f"FAIL {page}:{line}: fence ```{info}: a block is ```sql or ```sql norun: REASON")
                continue
            report.append(f"not run {page}:{line}: {m.group(1)}")
            continue
        report.append(f"run {page}:{line}")
        ran_text.append(body)
        for stmt, tail in split_statements(body):
            if not stmt:
                continue
            table, msgs, sqlstate = parse_tail(tail)
            k = len(checks)
            expect_error = sqlstate is not None or any(m.startswith("ERROR:") for m in msgs)
            script.append(f"\\echo @@{k}")
            script.append(f"\\warn @@{k}")
            if expect_error:
                script.append("\\set ON_ERROR_STOP 0")
            script.append(stmt)
            if expect_error:
                script.append("\\set ON_ERROR_STOP 1")
                script.append(f"\\echo @@state {k} :SQLSTATE")
            checks.append((k, line, stmt, table, msgs, sqlstate, expect_error))
    if not ran_text:
        report.append(f"no block of {page} runs")
    elif not any(re.search(r"CREATE EXTENSION (IF NOT EXISTS )?counter_ext", b) for b in ran_text):
        # a page about an installed extension: create it first, as the page assumes
        script[2:2] = ["CREATE EXTENSION counter_ext;"]
        report.insert(0, f"set-up {page}: CREATE EXTENSION counter_ext (the page assumes it installed)")
    script.append("\\echo @@end")
    script.append("\\warn @@end")
    p = subprocess.run([psql, "-X", "-v", "ON_ERROR_STOP=1", "--no-psqlrc"] + conn, input="\n".join(script) + "\n",
                       capture_output=True, text=True)
    out_parts = re.split(r"^@@(\d+|end)\n", p.stdout, flags=re.M)
    err_parts = re.split(r"^@@(\d+|end)\n", p.stderr, flags=re.M)
    outs, errs = {}, {}
    for parts, into in ((out_parts, outs), (err_parts, errs)):
        for j in range(1, len(parts) - 1, 2):
            into[parts[j]] = parts[j + 1]
    failed = 0
    for k, line, stmt, table, msgs, sqlstate, expect_error in checks:
        key = str(k)
        where = f"{page}:{line}: {stmt.splitlines()[0][:90]}"
        if key not in outs:
            failed += 1
            report.append(f"FAIL {where}: not reached (an earlier statement failed)")
            break
        out, err = outs[key], errs.get(key, "")
        state = re.search(r"^@@state \d+ (\S*)$", out, flags=re.M)
        out = re.sub(r"^@@state .*\n?", "", out, flags=re.M)
        got_state = state.group(1) if state else None
        smsgs = server_messages(err)
        if expect_error:
            if got_state in (None, "", "00000"):
                failed += 1
                report.append(f"FAIL {where}: shown failing, it succeeded")
                continue
            if sqlstate and got_state != sqlstate:
                failed += 1
                report.append(f"FAIL {where}: shown failing with {sqlstate}, failed with {got_state}: {smsgs}")
                continue
        elif "end" not in outs and str(k + 1) not in outs:
            failed += 1
            report.append(f"FAIL {where}: failed: " + " | ".join(smsgs or [err.strip()]))
            break
        for m in msgs:
            if not any(line_match(m, s) for s in smsgs):
                failed += 1
                report.append(f"FAIL {where}: shows\n      {m}\n    the server printed\n      "
                              + "\n      ".join([x[:300] for x in smsgs] or ["(no message)"]))
        if table is not None:
            actual = [s for s in out.split("\n") if s.strip()]
            shown = table
            if not any(FOOTER_RE.match(norm(s)) for s in shown):
                actual = [s for s in actual if not FOOTER_RE.match(norm(s))]
            if not lines_match(shown, actual):
                failed += 1
                report.append(f"FAIL {where}: shows\n      " + "\n      ".join(shown)
                              + "\n    the server printed\n      " + "\n      ".join(actual))
    if p.returncode not in (0,) and "end" in outs and not failed:
        failed += 1
        report.append(f"FAIL {page}: psql exited {p.returncode}: {p.stderr[-500:]}")
    for r in report:
        print(r)
    # what the statements that ran name (not their comments)
    code = re.sub(r"--[^\n]*", "", "\n".join(ran_text))
    names = sorted(set(re.findall(r"\bcounter\.([a-z_][a-z_0-9]*)", code)))
    print("@@names " + " ".join(names))
    sys.exit(1 if failed or any(r.startswith("FAIL") for r in report) else 0)


if __name__ == "__main__":
    main()
