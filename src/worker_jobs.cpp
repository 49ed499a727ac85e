// The job runner. Jobs run only in a job worker (src/worker_db.cpp): a
// background-worker session connected as the job's owner. There the runner
// is CALL counter_internal.owner_session_run(). In any other session,
// CALL counter.run_jobs() and CALL counter.run_job(id) hand the jobs to such
// workers, one owner at a time, wait for each, and report what it did: no
// job code ever runs in the calling session.
//
// A job runs in three steps:
//  1. claim, in one short transaction: the job's lock (ce::locks::job, in
//     counter_ext's own lock space: no role can hold it), without waiting,
//     so that two runners never decide at once; re-read the job; if it
//     has a run in progress whose process is alive, leave it; if that process
//     is gone, mark the run failed; then insert a 'running' row in
//     counter.job_runs (with this backend's pid and start time) and point
//     counter.jobs.running_run at it. The commit releases the lock;
//     the committed claim keeps other runners off while the job runs, across
//     the job's own COMMITs, which no transaction-level lock could survive.
//  2. run the kind, under the job's statement timeout (a timer armed for the
//     whole run) and lock timeout: the kind's step function in the one loop
//     (src/spine.cpp: a commit after each step), or, for a superuser's own
//     kind that names a procedure, CALL <procedure>(target, NULL) in a
//     non-atomic context. The routine comes from counter_internal.job_kinds
//     by OID and must be owned by a superuser (a procedure executable by the
//     owner); the session user must be the job's owner.
//  3. record the outcome and the next run (back-off after a failure).
// Before step 2, a job whose object is not complete in this database (a
// restore is still loading it: counter_internal.job_hold, doc/operations.md
// "While a restore runs") is not run: the claim records a run with outcome
// 'held' and the reason, and tries again after min(run_every, 10 s),
// without a back-off.
//
// The runner's bookkeeping (reading and writing counter.jobs and
// counter.job_runs, which the owners cannot touch) runs as the extension's
// owner in a security-restricted operation with its own GUC nest level and
// search_path = pg_catalog, pg_temp: fixed SQL on the extension's own tables,
// between the job's transactions, never with job code on the stack.
//
// A job that fails cannot be caught with a subtransaction (a procedure that
// COMMITs cannot run inside one), so the runner recovers the way PL/pgSQL's
// ROLLBACK does inside a procedure: abort the transaction (which pops every
// SPI level above and including ours), start a new one, reconnect SPI. That
// is only sound with no SPI caller below us, so these procedures refuse to run
// from inside a function, a DO block or a transaction block.
//
// No C++ objects live in this file's frames: PostgreSQL calls are made
// directly, and ce::pg_guard turns the job's ERROR into a ce::PgError that is
// handled after its catch block has ended.
#include "counter_ext/buffer.hpp"
#include "counter_ext/owner.hpp"
#include "counter_ext/spine.hpp"
#include "counter_ext/wall.hpp"
#include "counter_ext/worker.hpp"
#include "counter_ext/worker_shmem.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "storage/dsm.h"
#include "storage/proc.h"
#include "tcop/pquery.h"
#include "funcapi.h"
#include "utils/backend_status.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/portal.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

#include <csignal>
#include <cstring>

namespace {

// The run this session is executing now (0 when none).
int64 session_run = 0;

// How long a session waits for a job worker it cancelled to end.
constexpr long cancel_wait_ms = 10000;
// How far past its deadline a job worker started by a session is stopped.
constexpr int deadline_grace_s = 5;

const char orphan_message[] = "run abandoned: the process running it ended before recording an outcome "
                              "(crash, termination, timeout, or an error outside the job)";
// A 'running' run of a job not armed in this database was recorded in
// another one: the database this one was restored from, where the run was
// in progress when the dump was taken. It never ran here.
const char restored_message[] = "run abandoned: it was in progress in the database this one was restored from "
                                "when the dump was taken; it never ran here";

// Next run after a failure: run_every doubled per earlier consecutive failure,
// at most max(run_every, 1 hour), minus up to 20% jitter. j.failures is the
// count before this failure.
#define BACKOFF_SQL                                                                                                    \
	"clock_timestamp() + LEAST(GREATEST(j.run_every, interval '1 hour'),"                                              \
	" j.run_every * power(2.0, LEAST(j.failures, 12)::float8)) * (1.0 - 0.2 * random())"

struct Runner {
	MemoryContext cxt; // lives across the transactions of the call
	const char *runner_name;
	Oid owner;
};

struct Claim {
	int64 job_id;
	int64 run_id;
	Oid owner;
	char *kind;
	char *target;
	int timeout_ms;
	int lock_timeout_ms;
	// dispatch (resolved at claim, checked before the call)
	bool kind_known;
	char *proc_schema;
	char *proc_name;
	bool proc_is_procedure;
	bool proc_trusted;
	bool owner_may_execute;
	char *held_reason; // when the claim is 'held'
};

enum ClaimResult { claimed = 0, busy = 1, missing = 2, not_owner = 3, not_due = 4, held = 5 };

struct Outcome {
	bool ok;
	bool rows_null;
	int64 rows;
	ErrorData *error; // when !ok
	bool rethrow;     // a cancel of the whole call: record, then raise it
};

// Bookkeeping as the extension's owner (see the file comment), through the
// one mechanism of owner.hpp.
using Bookkeeping = ce::OwnerSwitch;

Bookkeeping begin_bookkeeping() {
	return ce::owner_enter(ce::catalog_owner());
}

void end_bookkeeping(const Bookkeeping &b) {
	ce::owner_leave(b);
}

void spi_check(int rc, int expected, const char *what) {
	if (rc != expected)
		elog(ERROR, "counter_ext job runner: %s failed: %s", what, SPI_result_code_string(rc));
}

int spi_run(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls, bool read_only, int expected,
            const char *what) {
	int rc = SPI_execute_with_args(sql, nargs, types, values, nulls, read_only, 0);
	spi_check(rc, expected, what);
	return rc;
}

Datum column(int row, int col, bool *isnull) {
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, isnull);
}

// Whether the backend that claimed a run is still there, in this database
// (a run restored into another database of the same cluster names a process
// of the database it was dumped from, alive and running something else).
bool owner_alive(int pid, TimestampTz started, int64 run_id) {
	if (pid == MyProcPid)
		return started == MyStartTimestamp && run_id == session_run;
	int n = pgstat_fetch_stat_numbackends();
	for (int i = 1; i <= n; i++) {
		PgBackendStatus *be = ce::compat::backend_status_by_index(i);
		if (be != nullptr && be->st_procpid == pid)
			return be->st_proc_start_timestamp == started && be->st_databaseid == MyDatabaseId;
	}
	return false;
}

// Marks an abandoned run failed. Its job backs off like after any failure,
// unless the job is not armed here (counter_internal.job_armed, not dumped):
// then the run was restored, not interrupted, and the job keeps its next run
// and its count of failures. True when the job backed off.
bool fail_orphan(int64 run_id) {
	Oid types[3] = {INT8OID, TEXTOID, TEXTOID};
	Datum values[3] = {Int64GetDatum(run_id), CStringGetTextDatum(orphan_message),
	                   CStringGetTextDatum(restored_message)};
	spi_run("SELECT counter_internal.run_abandon(r.run_id, CASE WHEN r.job_id IS NULL OR EXISTS (SELECT FROM"
	        " counter_internal.job_armed a WHERE a.job_id = r.job_id) THEN $2 ELSE $3 END)"
	        " FROM counter.job_runs r WHERE r.run_id = $1",
	        3, types, values, nullptr, false, SPI_OK_SELECT, "marking an abandoned run");
	spi_run(
	    "UPDATE counter.jobs j SET running_run = NULL,"
	    " failures = CASE WHEN a.armed THEN j.failures + 1 ELSE j.failures END,"
	    " next_run = CASE WHEN a.armed THEN " BACKOFF_SQL " ELSE j.next_run END"
	    " FROM (SELECT x.job_id, EXISTS (SELECT FROM counter_internal.job_armed m WHERE m.job_id = x.job_id) AS armed"
	    "       FROM counter.jobs x WHERE x.running_run = $1) a"
	    " WHERE j.job_id = a.job_id RETURNING a.armed",
	    1, types, values, nullptr, false, SPI_OK_UPDATE_RETURNING, "freeing the job of an abandoned run");
	bool isnull = true;
	return SPI_processed > 0 && DatumGetBool(column(0, 1, &isnull)) && !isnull;
}

// Whether the SQL objects have the run record's functions (1.7's; the
// library may be newer than the SQL until ALTER EXTENSION counter_ext
// UPDATE, and then leaves the record alone). Bookkeeping.
bool run_record_ready() {
	spi_run("SELECT pg_catalog.to_regprocedure('counter_internal.run_claim(bigint,text,timestamptz)') IS NOT NULL", 0,
	        nullptr, nullptr, nullptr, true, SPI_OK_SELECT, "looking for the run record's functions");
	bool isnull;
	return DatumGetBool(column(0, 1, &isnull));
}

// Marks failed every 'running' run whose process is gone. Bookkeeping.
void sweep_orphans(MemoryContext cxt) {
	if (!run_record_ready())
		return;
	spi_run("SELECT run_id, pid, backend_start FROM counter.job_runs WHERE outcome = 'running'", 0, nullptr, nullptr,
	        nullptr, true, SPI_OK_SELECT, "reading runs in progress");
	uint64 n = SPI_processed;
	if (n == 0)
		return;
	int64 *orphans = static_cast<int64 *>(MemoryContextAlloc(cxt, sizeof(int64) * n));
	uint64 norphans = 0;
	for (uint64 i = 0; i < n; i++) {
		bool n1, n2, n3;
		int64 run_id = DatumGetInt64(column(i, 1, &n1));
		int pid = DatumGetInt32(column(i, 2, &n2));
		TimestampTz started = DatumGetTimestampTz(column(i, 3, &n3));
		if (!owner_alive(pid, started, run_id))
			orphans[norphans++] = run_id;
	}
	for (uint64 i = 0; i < norphans; i++)
		fail_orphan(orphans[i]);
	pfree(orphans);
}

// Jobs that cannot be run as their owner. Bookkeeping.
//  - the owner role was dropped (or never found): the job is disabled, with
//    the reason in counter.jobs.disabled_reason and a failed run (42704);
//  - the owner role cannot log in (PostgreSQL 15 refuses a background-worker
//    session to it): each due run is recorded failed (28000) and backs off.
// Then the job's owner is brought up to date where the target's owner
// changed (ALTER ... OWNER TO, REASSIGN OWNED): a job runs as the owner of
// what it serves.
void settle_owners(Oid only_owner) {
	if (!run_record_ready())
		return;
	// Counters, rollups and the jobs not running follow their tables' owners
	// (a change no event trigger saw: REASSIGN OWNED).
	spi_run("SELECT counter.follow_owners()", 0, nullptr, nullptr, nullptr, false, SPI_OK_SELECT,
	        "following a change of owner");
	spi_run("WITH gone AS ("
	        " UPDATE counter.jobs j SET enabled = false,"
	        "  disabled_reason = CASE WHEN j.owner IS NULL THEN 'the owner of the job''s target is unknown'"
	        "   ELSE format('its owner role (oid %s) was dropped; it runs as no one else', j.owner::oid) END"
	        " WHERE j.enabled AND j.running_run IS NULL"
	        "  AND (j.owner IS NULL OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = j.owner))"
	        " RETURNING j.job_id, j.kind, j.target, j.disabled_reason)"
	        " SELECT counter_internal.run_closed(g.job_id, g.kind, g.target, 'worker', pg_postmaster_start_time(),"
	        "  'failed', '42704', 'job disabled: ' || g.disabled_reason, NULL)"
	        " FROM gone g",
	        0, nullptr, nullptr, nullptr, false, SPI_OK_SELECT, "disabling the jobs of dropped roles");
	Oid types[1] = {OIDOID};
	Datum values[1] = {ObjectIdGetDatum(only_owner)};
	const char nulls[2] = {OidIsValid(only_owner) ? ' ' : 'n', '\0'};
	spi_run("WITH nologin AS ("
	        " UPDATE counter.jobs j SET failures = j.failures + 1, next_run = " BACKOFF_SQL
	        " FROM pg_catalog.pg_roles r"
	        " WHERE r.oid = j.owner AND NOT r.rolcanlogin AND j.enabled AND j.running_run IS NULL"
	        "  AND j.next_run <= clock_timestamp() AND ($1::oid IS NULL OR j.owner = $1)"
	        " RETURNING j.job_id, j.kind, j.target, r.rolname)"
	        " SELECT counter_internal.run_closed(n.job_id, n.kind, n.target, 'worker', pg_postmaster_start_time(),"
	        "  'failed', '28000',"
	        "  format('role \"%s\" cannot log in, so no session can run its job (ALTER ROLE %I LOGIN)',"
	        "         n.rolname, n.rolname), NULL)"
	        " FROM nologin n",
	        1, types, values, nulls, false, SPI_OK_SELECT, "recording the jobs of roles that cannot log in");
}

ClaimResult claim(Runner *r, int64 job_id, bool force, Claim *out, int *busy_pid) {
	// (no lock space: the SQL is still 1.4's; no run record functions: it is
	// older than 1.7; no job runs until the update)
	if (ce::locks::space() == InvalidOid || !run_record_ready() ||
	    !ce::locks::take(ce::locks::job, static_cast<uint32>(static_cast<uint64>(job_id) & 0xffffffffu), false, false))
		return busy;
	bool isnull;

	Oid id_type[1] = {INT8OID};
	Datum id_value[1] = {Int64GetDatum(job_id)};
	spi_run("SELECT j.kind, j.target, (extract(epoch FROM j.timeout) * 1000)::int4,"
	        " (extract(epoch FROM j.lock_timeout) * 1000)::int4, j.running_run, x.pid, x.backend_start,"
	        " j.enabled AND j.next_run <= clock_timestamp(), j.owner::oid,"
	        " k.kind IS NOT NULL, n.nspname::text, p.proname::text, p.prokind = 'p',"
	        " coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = p.proowner), false),"
	        " p.oid IS NOT NULL AND j.owner IS NOT NULL AND has_function_privilege(j.owner::oid, p.oid, 'EXECUTE')"
	        " FROM counter.jobs j LEFT JOIN counter.job_runs x ON x.run_id = j.running_run"
	        " LEFT JOIN counter_internal.job_kinds k ON k.kind = j.kind"
	        " LEFT JOIN pg_catalog.pg_proc p ON p.oid = pg_catalog.to_regprocedure(k.procedure::pg_catalog.text)"
	        " LEFT JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace"
	        " WHERE j.job_id = $1",
	        1, id_type, id_value, nullptr, false, SPI_OK_SELECT, "reading a job");
	if (SPI_processed == 0)
		return missing;
	MemoryContext old = MemoryContextSwitchTo(r->cxt);
	out->job_id = job_id;
	out->kind = TextDatumGetCString(column(0, 1, &isnull));
	out->target = TextDatumGetCString(column(0, 2, &isnull));
	bool n_schema, n_name, n_kind;
	Datum schema = column(0, 11, &n_schema);
	Datum name = column(0, 12, &n_name);
	out->proc_schema = n_schema ? nullptr : TextDatumGetCString(schema);
	out->proc_name = n_name ? nullptr : TextDatumGetCString(name);
	MemoryContextSwitchTo(old);
	out->timeout_ms = DatumGetInt32(column(0, 3, &isnull));
	out->lock_timeout_ms = DatumGetInt32(column(0, 4, &isnull));
	bool no_owner;
	Datum owner = column(0, 9, &no_owner);
	out->owner = no_owner ? InvalidOid : DatumGetObjectId(owner);
	out->kind_known = DatumGetBool(column(0, 10, &n_kind));
	bool n1;
	Datum d = column(0, 13, &n1);
	out->proc_is_procedure = !n1 && DatumGetBool(d);
	out->proc_trusted = DatumGetBool(column(0, 14, &isnull));
	out->owner_may_execute = DatumGetBool(column(0, 15, &isnull));
	if (out->owner != r->owner)
		return not_owner; // never run as someone else
	bool no_run;
	int64 running = DatumGetInt64(column(0, 5, &no_run));
	bool due = DatumGetBool(column(0, 8, &isnull));
	if (!no_run) {
		bool np, ns;
		int pid = DatumGetInt32(column(0, 6, &np));
		TimestampTz started = DatumGetTimestampTz(column(0, 7, &ns));
		if (!np && owner_alive(pid, started, running)) {
			*busy_pid = pid;
			return busy;
		}
		if (fail_orphan(running))
			due = false; // it backs off like any failure
	}
	if (!force && !due)
		return not_due;

	// Held: the job's object is not complete here (a restore still loads it).
	// Bookkeeping SQL on the extension's catalogs only (job_hold reads
	// catalogs and arms the job).
	spi_run("SELECT counter_internal.job_hold($1)", 1, id_type, id_value, nullptr, false, SPI_OK_SELECT,
	        "checking that the job's object is complete");
	bool not_held;
	Datum why = column(0, 1, &not_held);
	if (!not_held) {
		MemoryContext o2 = MemoryContextSwitchTo(r->cxt);
		out->held_reason = TextDatumGetCString(why);
		MemoryContextSwitchTo(o2);
		Oid ht[4] = {INT8OID, TEXTOID, TIMESTAMPTZOID, TEXTOID};
		Datum hv[4] = {Int64GetDatum(job_id), CStringGetTextDatum(r->runner_name),
		               TimestampTzGetDatum(MyStartTimestamp), CStringGetTextDatum(out->held_reason)};
		spi_run("WITH h AS (UPDATE counter.jobs j"
		        " SET next_run = clock_timestamp() + LEAST(j.run_every, interval '10 seconds')"
		        " WHERE j.job_id = $1 RETURNING j.job_id, j.kind, j.target)"
		        " SELECT counter_internal.run_closed(h.job_id, h.kind, h.target, $2, $3, 'held', '55000', $4,"
		        "  pg_catalog.quote_ident(session_user)::pg_catalog.regrole) FROM h",
		        4, ht, hv, nullptr, false, SPI_OK_SELECT, "recording a held job");
		return held;
	}

	// the 'running' row (and the bound of the run record per role)
	Oid ct[3] = {INT8OID, TEXTOID, TIMESTAMPTZOID};
	Datum cv[3] = {Int64GetDatum(job_id), CStringGetTextDatum(r->runner_name), TimestampTzGetDatum(MyStartTimestamp)};
	spi_run("SELECT counter_internal.run_claim($1, $2, $3)", 3, ct, cv, nullptr, false, SPI_OK_SELECT,
	        "recording the start of a run");
	out->run_id = DatumGetInt64(column(0, 1, &isnull));
	Oid types2[2] = {INT8OID, INT8OID};
	Datum values2[2] = {Int64GetDatum(job_id), Int64GetDatum(out->run_id)};
	spi_run("UPDATE counter.jobs SET running_run = $2 WHERE job_id = $1", 2, types2, values2, nullptr, false,
	        SPI_OK_UPDATE, "claiming a job");
	return claimed;
}

void record(const Claim *c, const Outcome *o) {
	if (o->ok) {
		Oid types[3] = {INT8OID, INT8OID, INT8OID};
		Datum values[3] = {Int64GetDatum(c->run_id), Int64GetDatum(o->rows), Int64GetDatum(c->job_id)};
		const char nulls[4] = {' ', o->rows_null ? 'n' : ' ', ' ', '\0'};
		// a run whose work could not be done says so (counter_internal.run_skipped)
		spi_run("SELECT counter_internal.run_finish($1, $2)", 2, types, values, nulls, false, SPI_OK_SELECT,
		        "recording a run");
		Datum v2[2] = {Int64GetDatum(c->job_id), Int64GetDatum(c->run_id)};
		spi_run("UPDATE counter.jobs j SET running_run = NULL, failures = 0, next_run = clock_timestamp() + j.run_every"
		        " WHERE j.job_id = $1 AND j.running_run = $2",
		        2, types, v2, nullptr, false, SPI_OK_UPDATE, "scheduling a job");
	} else {
		// the error whole: SQLSTATE, message, detail, hint, context
		const ErrorData *e = o->error;
		Oid types[6] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};
		Datum values[6] = {Int64GetDatum(c->run_id),
		                   CStringGetTextDatum(unpack_sql_state(e->sqlerrcode)),
		                   CStringGetTextDatum(e->message != nullptr ? e->message : ""),
		                   e->detail != nullptr ? CStringGetTextDatum(e->detail) : 0,
		                   e->hint != nullptr ? CStringGetTextDatum(e->hint) : 0,
		                   e->context != nullptr ? CStringGetTextDatum(e->context) : 0};
		const char nulls[7] = {' ',
		                       ' ',
		                       ' ',
		                       e->detail != nullptr ? ' ' : 'n',
		                       e->hint != nullptr ? ' ' : 'n',
		                       e->context != nullptr ? ' ' : 'n',
		                       '\0'};
		spi_run("SELECT counter_internal.run_finish($1, NULL, $2, $3, $4, $5, $6)", 6, types, values, nulls, false,
		        SPI_OK_SELECT, "recording a failed run");
		Oid t2[2] = {INT8OID, INT8OID};
		Datum v2[2] = {Int64GetDatum(c->job_id), Int64GetDatum(c->run_id)};
		spi_run("UPDATE counter.jobs j SET running_run = NULL, failures = j.failures + 1, next_run = " BACKOFF_SQL
		        " WHERE j.job_id = $1 AND j.running_run = $2",
		        2, t2, v2, nullptr, false, SPI_OK_UPDATE, "backing off a job");
	}
}

// After a job's ERROR: what PostgreSQL's own ROLLBACK-in-a-procedure does,
// without a SPI level of ours to protect (ours is popped and made again).
void recover(Runner *r) {
	HOLD_INTERRUPTS();
	AbortCurrentTransaction();
	// The portal running this CALL keeps going; its snapshot died with the
	// transaction (a new one is made when a statement needs it).
	if (ActivePortal != nullptr)
		ActivePortal->portalSnapshot = nullptr;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	MemoryContextSwitchTo(r->cxt);
	RESUME_INTERRUPTS();
	if (SPI_connect_ext(SPI_OPT_NONATOMIC) != SPI_OK_CONNECT)
		elog(ERROR, "counter_ext job runner: SPI_connect failed");
	MemoryContextSwitchTo(r->cxt);
}

// The kind of the job, when it may run here; raises (and so fails the run)
// if not. A kind with a step function runs in the one loop (spine.hpp).
ce::spine::Kind job_kind(const Claim *c) {
	if (GetSessionUserId() != c->owner || GetUserId() != c->owner)
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
		                errmsg("job %lld belongs to role %u, not to this session's role %u", (long long)c->job_id,
		                       c->owner, GetSessionUserId())));
	return ce::spine::resolve(c->kind, c->owner);
}

// A kind whose registry row names a procedure (a superuser's own kind):
// CALL it, if it may run here; raises (and so fails the run) if not.
void call_job(const Claim *c, Outcome *o) {
	if (!c->kind_known || c->proc_name == nullptr)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_FUNCTION),
		                errmsg("job kind \"%s\" has no procedure in counter_internal.job_kinds", c->kind)));
	if (!c->proc_is_procedure || !c->proc_trusted)
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
		                errmsg("the procedure of job kind \"%s\" is not a procedure owned by a superuser", c->kind)));
	if (!c->owner_may_execute)
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
		                errmsg("role %s may not execute %s.%s, the procedure of job kind \"%s\"",
		                       GetUserNameFromId(c->owner, false), c->proc_schema, c->proc_name, c->kind)));
	char *sql = psprintf("CALL %s.%s($1, NULL)", quote_identifier(c->proc_schema), quote_identifier(c->proc_name));
	ParamListInfo params = makeParamList(1);
	params->params[0].value = CStringGetTextDatum(c->target);
	params->params[0].isnull = false;
	params->params[0].pflags = PARAM_FLAG_CONST;
	params->params[0].ptype = TEXTOID;
	SPIExecuteOptions options;
	memset(&options, 0, sizeof options);
	options.params = params;
	options.read_only = false;
	options.allow_nonatomic = true;
	int rc = SPI_execute_extended(sql, &options);
	spi_check(rc, SPI_OK_UTILITY, "calling the job's procedure");
	o->rows_null = true;
	if (SPI_tuptable != nullptr && SPI_processed == 1 && SPI_tuptable->tupdesc->natts >= 1 &&
	    TupleDescAttr(SPI_tuptable->tupdesc, 0)->atttypid == INT8OID) {
		bool isnull;
		Datum d = column(0, 1, &isnull);
		o->rows_null = isnull;
		o->rows = isnull ? 0 : DatumGetInt64(d);
	}
}

// Runs a claimed job and leaves the outcome in 'o'.
void execute(Runner *r, const Claim *c, Outcome *o) {
	snprintf(ce::job_worker_activity, sizeof ce::job_worker_activity, "counter_ext worker: job %lld %s(%s) as %s",
	         static_cast<long long>(c->job_id), c->kind, c->target, GetUserNameFromId(c->owner, false));
	pgstat_report_activity(STATE_RUNNING, ce::job_worker_activity);
	SPI_commit(); // the claim becomes visible; the job starts in a fresh transaction
	MemoryContextSwitchTo(r->cxt);
	session_run = c->run_id;

	TimestampTz job_deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), c->timeout_ms);
	ce::job_worker_set_running(c->job_id, c->run_id, job_deadline);
	bool outer_active = get_timeout_active(STATEMENT_TIMEOUT);
	TimestampTz outer_deadline = outer_active ? get_timeout_finish_time(STATEMENT_TIMEOUT) : 0;
	enable_timeout_at(STATEMENT_TIMEOUT, outer_active && outer_deadline < job_deadline ? outer_deadline : job_deadline);
	int saved_lock_timeout = LockTimeout;
	LockTimeout = c->lock_timeout_ms;

	ErrorData *error = nullptr;
	o->ok = true;
	o->rethrow = false;
	try {
		ce::spine::Kind kind = ce::pg_guard([c] { return job_kind(c); });
		if (OidIsValid(kind.step)) {
			Datum target = ce::pg_guard([r, c] {
				MemoryContext old = MemoryContextSwitchTo(r->cxt);
				Datum t = CStringGetTextDatum(c->target);
				MemoryContextSwitchTo(old);
				return t;
			});
			Datum args = ce::pg_guard([] { return DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")); });
			ce::spine::Outcome out = ce::spine::run(kind.step, c->owner, target, false, args, true, r->cxt);
			o->rows_null = out.rows_null;
			o->rows = out.rows;
		} else {
			ce::pg_guard([c, o] { call_job(c, o); });
		}
	} catch (const ce::PgError &e) {
		error = e.data();
	}

	LockTimeout = saved_lock_timeout;
	disable_timeout(STATEMENT_TIMEOUT, false);
	if (outer_active)
		enable_timeout_at(STATEMENT_TIMEOUT, outer_deadline);
	ce::job_worker_set_running(0, 0, 0);
	ce::job_worker_activity[0] = '\0';

	if (error != nullptr) {
		bool job_timed_out = error->sqlerrcode == ERRCODE_QUERY_CANCELED && GetCurrentTimestamp() >= job_deadline &&
		                     (!outer_active || job_deadline <= outer_deadline);
		o->ok = false;
		o->error = error;
		o->rethrow = error->sqlerrcode == ERRCODE_QUERY_CANCELED && !job_timed_out;
		recover(r);
	}
	session_run = 0;
}

struct IdList {
	int64 *ids;
	uint64 count;
};

// Makes the owner's flush jobs due now when a transaction that committed
// adds into the owner's pressed share of the buffer asked for it (ce::buffer::take_flush_ask;
// doc/reference/tracked.md, "The flush job"): the flush frees entries before
// the share overflows to the direct path. As the catalog's owner.
void flush_when_asked(Runner *r) {
	if (!ce::buffer::take_flush_ask(r->owner))
		return;
	Oid types[1] = {OIDOID};
	Datum values[1] = {ObjectIdGetDatum(r->owner)};
	spi_run("UPDATE counter.jobs SET next_run = clock_timestamp()"
	        " WHERE kind = 'flush' AND owner = $1 AND enabled AND running_run IS NULL AND next_run > clock_timestamp()",
	        1, types, values, nullptr, false, SPI_OK_UPDATE, "making the flush jobs due");
}

IdList due_jobs(Runner *r) {
	Oid types[1] = {OIDOID};
	Datum values[1] = {ObjectIdGetDatum(r->owner)};
	spi_run("SELECT job_id FROM counter.jobs WHERE enabled AND next_run <= clock_timestamp() AND running_run IS NULL"
	        " AND owner = $1 ORDER BY next_run, job_id",
	        1, types, values, nullptr, true, SPI_OK_SELECT, "reading due jobs");
	IdList list;
	list.count = SPI_processed;
	list.ids = static_cast<int64 *>(MemoryContextAlloc(r->cxt, sizeof(int64) * (list.count + 1)));
	for (uint64 i = 0; i < list.count; i++) {
		bool isnull;
		list.ids[i] = DatumGetInt64(column(i, 1, &isnull));
	}
	return list;
}

void trim_history() {
	if (!run_record_ready())
		return;
	Oid types[1] = {INT4OID};
	Datum values[1] = {Int32GetDatum(ce::history_retention_s)};
	spi_run("SELECT counter_internal.run_expire($1)", 1, types, values, nullptr, false, SPI_OK_SELECT,
	        "trimming the run history");
}

void require_top_level(FunctionCallInfo fcinfo, const char *name) {
	bool nonatomic = fcinfo->context != nullptr && IsA(fcinfo->context, CallContext) &&
	                 !castNode(CallContext, fcinfo->context)->atomic;
	if (!nonatomic)
		ereport(ERROR, (errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
		                errmsg("%s cannot run inside a transaction block or a function", name),
		                errhint("Use CALL %s outside BEGIN ... COMMIT.", name)));
	if (SPI_inside_nonatomic_context())
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
		                errmsg("%s must be called at top level, not from a procedure or DO block", name),
		                errdetail("A job may COMMIT, and a failing job is rolled back at top level.")));
}

} // namespace

Datum ce::one_column_result(FunctionCallInfo fcinfo, MemoryContext cxt, Datum value, bool isnull) {
	MemoryContextSwitchTo(cxt);
	TupleDesc desc;
	if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "counter_ext: a procedure with an INOUT parameter must return a row");
	desc = BlessTupleDesc(desc);
	HeapTuple tuple = heap_form_tuple(desc, &value, &isnull);
	return HeapTupleGetDatum(tuple);
}

namespace {

void copy_error(ce::JobResult *res, const ErrorData *e) {
	res->ok = false;
	res->sqlerrcode = e->sqlerrcode;
	strlcpy(res->message, e->message != nullptr ? e->message : "", sizeof res->message);
	strlcpy(res->detail, e->detail != nullptr ? e->detail : "", sizeof res->detail);
	strlcpy(res->hint, e->hint != nullptr ? e->hint : "", sizeof res->hint);
	strlcpy(res->context, e->context != nullptr ? e->context : "", sizeof res->context);
}

// ---- the job worker's side ----

// Runs this job worker's jobs: the due ones of its owner (for at most one
// naptime when the scheduler started it), or the one job a session asked for.
void owner_session_run(FunctionCallInfo fcinfo) {
	const ce::JobWorkerArgs *a = ce::job_worker_args;
	if (a == nullptr || a->mode == ce::JobWorkerMode::survey || GetSessionUserId() != a->owner)
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
		                errmsg("counter_internal.owner_session_run() runs only in a counter_ext job worker"),
		                errhint("Use CALL counter.run_jobs() or CALL counter.run_job(id).")));
	require_top_level(fcinfo, "counter_internal.owner_session_run()");
	// The CALL's EXECUTE check was made as the extension's owner; from here on
	// everything runs as the session's user, the job owner (the transactions
	// the jobs commit start as that user too).
	SetUserIdAndSecContext(GetSessionUserId(), 0);
	session_run = 0;
	bool scheduled = a->mode == ce::JobWorkerMode::scheduled;
	ce::JobResult *res = ce::job_worker_result;

	Runner r;
	r.cxt = AllocSetContextCreate(CurrentMemoryContext, "counter_ext job runner", ALLOCSET_DEFAULT_SIZES);
	r.runner_name = scheduled ? "worker" : "session";
	r.owner = a->owner;
	if (SPI_connect_ext(SPI_OPT_NONATOMIC) != SPI_OK_CONNECT)
		elog(ERROR, "counter_ext job runner: SPI_connect failed");
	MemoryContextSwitchTo(r.cxt);

	Bookkeeping b = begin_bookkeeping();
	sweep_orphans(r.cxt);
	IdList list;
	if (a->mode == ce::JobWorkerMode::session_one) {
		list.count = 1;
		list.ids = static_cast<int64 *>(MemoryContextAlloc(r.cxt, sizeof(int64)));
		list.ids[0] = a->job_id;
	} else {
		flush_when_asked(&r);
		list = due_jobs(&r);
	}
	end_bookkeeping(b);
	SPI_commit();
	MemoryContextSwitchTo(r.cxt);

	TimestampTz budget_end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ce::worker_naptime_s * 1000L);
	int ran = 0;
	for (uint64 i = 0; i < list.count; i++) {
		CHECK_FOR_INTERRUPTS();
		if (scheduled && ran > 0 && GetCurrentTimestamp() >= budget_end) {
			ce::job_worker_budget_cut = true;
			break;
		}
		Claim c;
		memset(&c, 0, sizeof c);
		int busy_pid = 0;
		b = begin_bookkeeping();
		ClaimResult got = claim(&r, list.ids[i], a->mode == ce::JobWorkerMode::session_one, &c, &busy_pid);
		end_bookkeeping(b);
		if (res != nullptr && a->mode == ce::JobWorkerMode::session_one) {
			res->claim = got == not_due ? claimed : got;
			res->busy_pid = busy_pid;
			if (got == held)
				strlcpy(res->message, c.held_reason, sizeof res->message);
		}
		if (got != claimed) {
			SPI_commit();
			MemoryContextSwitchTo(r.cxt);
			continue;
		}
		Outcome o;
		execute(&r, &c, &o);
		b = begin_bookkeeping();
		record(&c, &o);
		end_bookkeeping(b);
		ran++;
		if (res != nullptr) {
			res->jobs_run = ran;
			if (a->mode == ce::JobWorkerMode::session_one) {
				res->ok = o.ok;
				res->rows = o.rows;
				res->rows_null = o.rows_null;
				if (!o.ok)
					copy_error(res, o.error);
			}
		}
		if (!o.ok && o.rethrow) {
			// A cancel of the whole call: recorded, then it ends the worker.
			SPI_commit();
			if (res != nullptr) {
				copy_error(res, o.error);
				res->finished = true;
			}
			ReThrowError(o.error);
		}
		SPI_commit();
		MemoryContextSwitchTo(r.cxt);
	}
	ce::job_worker_jobs_run = ran;
	b = begin_bookkeeping();
	trim_history();
	end_bookkeeping(b);
	pgstat_report_activity(STATE_RUNNING, "counter_ext worker: jobs done");
	SPI_finish();
	MemoryContextDelete(r.cxt);
	if (res != nullptr)
		res->finished = true;
}

// ---- the calling session's side ----

// Hands jobs of 'owner' to a job worker connected as that owner and waits for
// it to end. A cancel or timeout of the call cancels the worker's job (which
// records it), then is raised. Fills *out with what the worker did.
void hand_off(Oid owner, ce::JobWorkerMode mode, int64 job_id, ce::JobResult *out) {
	dsm_segment *seg = dsm_create(sizeof(ce::JobResult), 0);
	ce::JobResult *res = static_cast<ce::JobResult *>(dsm_segment_address(seg));
	memset(res, 0, sizeof *res);
	ce::JobWorkerArgs args;
	memset(&args, 0, sizeof args);
	args.dboid = MyDatabaseId;
	args.owner = owner;
	args.mode = mode;
	args.slot = -1;
	args.result = dsm_segment_handle(seg);
	args.job_id = job_id;
	args.caller = GetUserId();
	BackgroundWorkerHandle *handle = nullptr;
	if (!ce::start_job_worker(args, get_database_name(MyDatabaseId), &handle))
		ereport(ERROR,
		        (errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
		         errmsg("no background worker slot is free to run a job as role %s", GetUserNameFromId(owner, false)),
		         errdetail("Every job runs in a background-worker session connected as its owner."),
		         errhint("Raise max_worker_processes, or try again when fewer workers run.")));

	InvalidateCatalogSnapshot(); // hold back no vacuum while the job runs
	pid_t pid = 0;
	ErrorData *interrupted = nullptr;
	bool terminated = false;
	for (;;) {
		BgwHandleStatus st = GetBackgroundWorkerPid(handle, &pid);
		if (st == BGWH_STOPPED)
			break;
		if (st == BGWH_POSTMASTER_DIED)
			ereport(FATAL, (errcode(ERRCODE_ADMIN_SHUTDOWN), errmsg("the postmaster died")));
		TimestampTz deadline = res->deadline;
		if (!terminated && deadline != 0 &&
		    GetCurrentTimestamp() >= TimestampTzPlusMilliseconds(deadline, deadline_grace_s * 1000L)) {
			ereport(LOG, (errmsg("counter_ext: a job outlived its timeout by %d s; its worker (pid %d) is stopped",
			                     deadline_grace_s, static_cast<int>(pid))));
			TerminateBackgroundWorker(handle);
			terminated = true;
		}
		(void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 200, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		if (InterruptPending) {
			try {
				ce::pg_guard([] { CHECK_FOR_INTERRUPTS(); });
			} catch (const ce::PgError &e) {
				interrupted = e.data();
			}
			if (interrupted != nullptr)
				break;
		}
	}
	if (interrupted != nullptr) {
		// Cancel the job (SIGINT is a query cancel in a background worker with a
		// database connection): the worker records the run failed and ends.
		HOLD_INTERRUPTS();
		if (pid > 0)
			(void)kill(pid, SIGINT);
		TimestampTz give_up = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), cancel_wait_ms);
		while (GetBackgroundWorkerPid(handle, &pid) != BGWH_STOPPED) {
			if (GetCurrentTimestamp() >= give_up) {
				TerminateBackgroundWorker(handle);
				break;
			}
			(void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 50, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
		RESUME_INTERRUPTS();
		ReThrowError(interrupted);
	}
	*out = *res;
	dsm_detach(seg);
	pfree(handle);
}

// The calling role may run jobs of 'owner': a superuser, or a member.
const char *visible_jobs_sql = " AND (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = $1)"
                               " OR pg_catalog.pg_has_role($1, j.owner, 'USAGE')";

[[noreturn]] void raise_job_error(const ce::JobResult &res, int64 job_id) {
	ereport(ERROR, (errcode(res.sqlerrcode != 0 ? res.sqlerrcode : ERRCODE_INTERNAL_ERROR),
	                errmsg("%s", res.message[0] != '\0' ? res.message : "the job failed"),
	                res.detail[0] != '\0' ? errdetail_internal("%s", res.detail) : 0,
	                res.hint[0] != '\0' ? errhint("%s", res.hint) : 0,
	                errcontext("counter_ext job %lld, run in a session of its owner%s%s",
	                           static_cast<long long>(job_id), res.context[0] != '\0' ? ": " : "", res.context)));
}

} // namespace

namespace ce {
// The report of a scheduler worker (see worker_shmem.hpp).
void job_report_due(worker_shm::Report *r) {
	MemoryContext cxt = CurrentMemoryContext;
	Bookkeeping b = begin_bookkeeping();
	sweep_orphans(cxt);
	settle_owners(InvalidOid);
	spi_run("SELECT j.owner::oid, min(j.next_run) FROM counter.jobs j"
	        " WHERE j.enabled AND j.running_run IS NULL AND j.owner IS NOT NULL"
	        " AND (SELECT r.rolcanlogin FROM pg_catalog.pg_roles r WHERE r.oid = j.owner)"
	        " GROUP BY j.owner ORDER BY 2, 1",
	        0, nullptr, nullptr, nullptr, true, SPI_OK_SELECT, "reading when jobs fall due");
	uint64 n = SPI_processed;
	for (uint64 i = 0; i < n; i++) {
		bool isnull;
		Oid owner = DatumGetObjectId(column(i, 1, &isnull));
		TimestampTz due = DatumGetTimestampTz(column(i, 2, &isnull));
		if (i < static_cast<uint64>(worker_shm::report_owners)) {
			r->owners[r->nowners].owner = owner;
			r->owners[r->nowners].due = due;
			r->nowners++;
		} else if (!r->more) {
			r->more = true;
			r->more_due = due;
		}
	}
	// Jobs of roles that cannot log in fall due too: the next survey records them.
	spi_run("SELECT min(j.next_run) FROM counter.jobs j JOIN pg_catalog.pg_roles r ON r.oid = j.owner"
	        " WHERE j.enabled AND j.running_run IS NULL AND NOT r.rolcanlogin",
	        0, nullptr, nullptr, nullptr, true, SPI_OK_SELECT, "reading when jobs of roles without LOGIN fall due");
	bool isnull;
	Datum d = column(0, 1, &isnull);
	if (!isnull) {
		TimestampTz due = DatumGetTimestampTz(d);
		r->more = true;
		r->more_due = r->more_due == 0 ? due : Min(r->more_due, due);
	}
	end_bookkeeping(b);
}
} // namespace ce

// CALL counter_internal.owner_session_run(): the runner of a job worker.
CE_FUNCTION(counter_owner_session_run) {
	owner_session_run(fcinfo);
	PG_RETURN_VOID();
}

// CALL counter.run_jobs(): every due job once, each in a session of its
// owner (one job worker per owner, one after another); returns how many ran.
CE_FUNCTION(counter_run_jobs) {
	require_top_level(fcinfo, "counter.run_jobs()");
	MemoryContext entry = CurrentMemoryContext;
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "counter_ext run_jobs", ALLOCSET_DEFAULT_SIZES);
	if (SPI_connect_ext(SPI_OPT_NONATOMIC) != SPI_OK_CONNECT)
		elog(ERROR, "counter_ext job runner: SPI_connect failed");
	MemoryContextSwitchTo(cxt);
	Oid caller = GetUserId();
	Bookkeeping b = begin_bookkeeping();
	sweep_orphans(cxt);
	settle_owners(InvalidOid);
	Oid types[1] = {OIDOID};
	Datum values[1] = {ObjectIdGetDatum(caller)};
	char *sql = psprintf("SELECT j.owner::oid FROM counter.jobs j"
	                     " WHERE j.enabled AND j.next_run <= clock_timestamp() AND j.running_run IS NULL"
	                     " AND j.owner IS NOT NULL AND (true %s)"
	                     " GROUP BY j.owner ORDER BY min(j.next_run), 1",
	                     visible_jobs_sql);
	spi_run(sql, 1, types, values, nullptr, true, SPI_OK_SELECT, "reading the owners of due jobs");
	uint64 nowners = SPI_processed;
	Oid *owners = static_cast<Oid *>(MemoryContextAlloc(cxt, sizeof(Oid) * (nowners + 1)));
	for (uint64 i = 0; i < nowners; i++) {
		bool isnull;
		owners[i] = DatumGetObjectId(column(i, 1, &isnull));
	}
	end_bookkeeping(b);
	SPI_commit();
	MemoryContextSwitchTo(cxt);
	int ran = 0;
	for (uint64 i = 0; i < nowners; i++) {
		CHECK_FOR_INTERRUPTS();
		ce::JobResult res;
		hand_off(owners[i], ce::JobWorkerMode::session_due, 0, &res);
		ran += res.jobs_run;
		if (!res.connected || !res.finished)
			ereport(WARNING, (errcode(res.connected ? res.sqlerrcode : ERRCODE_CONNECTION_FAILURE),
			                  errmsg("the jobs of role %s did not all run: %s", GetUserNameFromId(owners[i], true),
			                         res.connected ? res.message : "its session could not connect"),
			                  errhint("The server log has the reason.")));
	}
	SPI_finish();
	Datum result = ce::one_column_result(fcinfo, entry, Int32GetDatum(ran), false);
	MemoryContextDelete(cxt);
	return result;
}

// CALL counter.run_job(job_id): that job now, due or not (even disabled), in
// a session of its owner; its error is raised here with its own SQLSTATE.
CE_FUNCTION(counter_run_job) {
	require_top_level(fcinfo, "counter.run_job()");
	if (PG_ARGISNULL(0))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("job_id must not be NULL")));
	int64 job_id = PG_GETARG_INT64(0);
	MemoryContext entry = CurrentMemoryContext;
	if (SPI_connect_ext(SPI_OPT_NONATOMIC) != SPI_OK_CONNECT)
		elog(ERROR, "counter_ext job runner: SPI_connect failed");
	Oid caller = GetUserId();
	// SQL objects older than the library (1.6 or before, until the update):
	// no job runs (claim), which is to say so, not that it runs elsewhere
	if (ce::locks::space() == InvalidOid || !run_record_ready())
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		                errmsg("counter_ext's SQL objects are older than its library, so job %lld cannot run",
		                       (long long)job_id),
		                errdetail("Jobs run only once the extension's SQL objects match the library."),
		                errhint("Run ALTER EXTENSION counter_ext UPDATE in this database.")));
	Bookkeeping b = begin_bookkeeping();
	settle_owners(InvalidOid);
	Oid types[2] = {OIDOID, INT8OID};
	Datum values[2] = {ObjectIdGetDatum(caller), Int64GetDatum(job_id)};
	char *sql = psprintf("SELECT j.owner::oid, (true %s), r.rolcanlogin, j.disabled_reason FROM counter.jobs j"
	                     " LEFT JOIN pg_catalog.pg_roles r ON r.oid = j.owner WHERE j.job_id = $2",
	                     visible_jobs_sql);
	spi_run(sql, 2, types, values, nullptr, false, SPI_OK_SELECT, "reading a job"); // sees settle_owners
	bool found = SPI_processed == 1;
	bool no_owner = true, isnull, n3, n4;
	Oid owner = InvalidOid;
	bool visible = false, can_login = false;
	char *reason = nullptr;
	if (found) {
		Datum d = column(0, 1, &no_owner);
		owner = no_owner ? InvalidOid : DatumGetObjectId(d);
		visible = DatumGetBool(column(0, 2, &isnull)) && !isnull;
		Datum l = column(0, 3, &n3);
		can_login = !n3 && DatumGetBool(l);
		Datum why = column(0, 4, &n4);
		reason = n4 ? nullptr : TextDatumGetCString(why);
	}
	end_bookkeeping(b);
	SPI_commit();
	if (!found || (!visible && !no_owner))
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("job %lld does not exist", (long long)job_id)));
	if (!OidIsValid(owner) || n3)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("job %lld has no owner to run as", (long long)job_id),
		                reason != nullptr ? errdetail("%s", reason) : 0));
	if (!can_login)
		ereport(ERROR, (errcode(ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION),
		                errmsg("role \"%s\" cannot log in, so no session can run its job %lld",
		                       GetUserNameFromId(owner, false), (long long)job_id),
		                errdetail("Jobs run in a background-worker session of their owner; PostgreSQL 15 refuses "
		                          "such a session to a role without LOGIN."),
		                errhint("ALTER ROLE %s LOGIN (no password is needed).",
		                        quote_identifier(GetUserNameFromId(owner, false)))));
	ce::JobResult res;
	hand_off(owner, ce::JobWorkerMode::session_one, job_id, &res);
	if (!res.connected)
		ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
		                errmsg("the session of role %s for job %lld could not connect", GetUserNameFromId(owner, false),
		                       (long long)job_id),
		                errhint("The server log has the reason.")));
	if (res.claim == missing)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("job %lld does not exist", (long long)job_id)));
	if (res.claim == not_owner)
		ereport(ERROR, (errcode(ERRCODE_OBJECT_IN_USE),
		                errmsg("job %lld changed owner while it was handed over", (long long)job_id),
		                errhint("Call counter.run_job again.")));
	if (res.claim == busy)
		ereport(ERROR,
		        (errcode(ERRCODE_OBJECT_IN_USE), errmsg("job %lld is running in another session", (long long)job_id),
		         res.busy_pid != 0 ? errdetail("It runs in the process with pid %d.", res.busy_pid) : 0,
		         errhint("Wait for that run to finish, or call counter.run_job again.")));
	if (res.claim == held)
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		                errmsg("job %lld is held: %s", (long long)job_id, res.message),
		                errdetail("A job does not act on an object that is not complete in this database (a restore "
		                          "still loading it)."),
		                errhint("Let the restore finish; see \"While a restore runs\" in doc/operations.md.")));
	if (!res.finished || !res.ok)
		raise_job_error(res, job_id);
	SPI_finish();
	return ce::one_column_result(fcinfo, entry, Int64GetDatum(res.rows), res.rows_null);
}

// counter.job_progress(phase text, done bigint, total bigint): the running
// job says what it does and how far it is. Shown at once in
// pg_stat_activity.query of its worker and in counter.running_jobs (with the
// rate since the phase began and the time left). Outside a job it changes
// nothing.
CE_FUNCTION(counter_job_progress) {
	const char *phase = PG_ARGISNULL(0) ? nullptr : text_to_cstring(PG_GETARG_TEXT_PP(0));
	int64 done = PG_ARGISNULL(1) ? 0 : PG_GETARG_INT64(1);
	int64 total = PG_ARGISNULL(2) ? -1 : PG_GETARG_INT64(2);
	ce::pg_guard([phase, done, total] { ce::job_progress(phase, done, total); });
	PG_RETURN_VOID();
}

// The progress of the running job (see counter.job_progress above); phase
// NULL is "working", total -1 unknown. Owns nothing C++.
void ce::job_progress(const char *phase, int64 done, int64 total) {
	if (ce::job_worker_args == nullptr || ce::job_worker_activity[0] == '\0')
		return;
	if (phase == nullptr)
		phase = "working";
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz phase_started = now;
	if (ce::worker_shm::shared != nullptr) {
		LWLockAcquire(ce::worker_shm::shared->lock, LW_EXCLUSIVE);
		for (int i = 0; i < ce::worker_shm::shared->nprogress; i++) {
			ce::worker_shm::Progress *p = ce::worker_shm::progress_entry(i);
			if (p->pid != MyProcPid)
				continue;
			if (strncmp(p->phase, phase, sizeof p->phase - 1) != 0 || p->phase_started == 0) {
				strlcpy(p->phase, phase, sizeof p->phase);
				p->phase_started = now;
			}
			phase_started = p->phase_started;
			p->done = done;
			p->total = total;
			p->updated = now;
			break;
		}
		LWLockRelease(ce::worker_shm::shared->lock);
	}
	double secs = static_cast<double>(now - phase_started) / 1e6;
	char tail[160];
	if (total >= 0 && secs > 0.5 && done > 0) {
		double rate = static_cast<double>(done) / secs;
		snprintf(tail, sizeof tail, ": %s %lld/%lld (%.0f/s, %.0f s left)", phase, static_cast<long long>(done),
		         static_cast<long long>(total), rate, static_cast<double>(total > done ? total - done : 0) / rate);
	} else if (total >= 0) {
		snprintf(tail, sizeof tail, ": %s %lld/%lld", phase, static_cast<long long>(done),
		         static_cast<long long>(total));
	} else {
		snprintf(tail, sizeof tail, ": %s %lld", phase, static_cast<long long>(done));
	}
	char *activity = psprintf("%s%s", ce::job_worker_activity, tail);
	pgstat_report_activity(STATE_RUNNING, activity);
	pfree(activity);
}

// counter_internal.job_progress_entries(): the progress entries of the jobs
// running now (empty without the preload).
CE_FUNCTION(counter_job_progress_entries) {
	ReturnSetInfo *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
	InitMaterializedSRF(fcinfo, 0);
	if (ce::worker_shm::shared == nullptr)
		return static_cast<Datum>(0);
	int n = ce::worker_shm::shared->nprogress;
	ce::worker_shm::Progress *copy =
	    static_cast<ce::worker_shm::Progress *>(palloc(sizeof(ce::worker_shm::Progress) * n));
	LWLockAcquire(ce::worker_shm::shared->lock, LW_SHARED);
	for (int i = 0; i < n; i++)
		copy[i] = *ce::worker_shm::progress_entry(i);
	LWLockRelease(ce::worker_shm::shared->lock);
	for (int i = 0; i < n; i++) {
		const ce::worker_shm::Progress &p = copy[i];
		if (p.pid == 0)
			continue;
		Datum values[8];
		bool nulls[8] = {false, false, false, false, false, false, false, false};
		values[0] = Int32GetDatum(p.pid);
		values[1] = Int64GetDatum(p.job_id);
		values[2] = Int64GetDatum(p.run_id);
		nulls[3] = p.phase[0] == '\0';
		values[3] = nulls[3] ? 0 : CStringGetTextDatum(p.phase);
		nulls[4] = p.phase_started == 0;
		values[4] = TimestampTzGetDatum(p.phase_started);
		nulls[5] = p.updated == 0;
		values[5] = Int64GetDatum(p.done);
		nulls[6] = p.total < 0;
		values[6] = Int64GetDatum(p.total);
		nulls[7] = p.updated == 0;
		values[7] = TimestampTzGetDatum(p.updated);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	pfree(copy);
	return static_cast<Datum>(0);
}

// counter.run_deadline() and counter.run_reraise() of 1.5 and 1.6, whose
// PL/pgSQL commit loop used them (1.7's loop is src/spine.cpp): kept so that
// their install scripts, and an installation not yet updated, find them.
//
// counter.run_deadline(): when the running statement's timeout (the job's
// timeout the worker armed, or statement_timeout) would cancel it; NULL
// when none is armed.
CE_FUNCTION(counter_run_deadline) {
	(void)fcinfo;
	TimestampTz at = 0;
	bool armed = ce::pg_guard([&at] {
		if (!get_timeout_active(STATEMENT_TIMEOUT))
			return false;
		at = get_timeout_finish_time(STATEMENT_TIMEOUT);
		return true;
	});
	if (!armed)
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(at);
}

// counter.run_reraise(sqlstate, message, detail, hint, context): raises the
// error a failed step raised, again, once the (1.6) commit loop has recorded
// it; the step's own context comes first in the new error's context.
CE_FUNCTION(counter_run_reraise) {
	ce::pg_guard([fcinfo] {
		auto arg = [fcinfo](int i) -> char * {
			if (PG_ARGISNULL(i))
				return nullptr;
			char *v = text_to_cstring(PG_GETARG_TEXT_PP(i));
			return v[0] == '\0' ? nullptr : v;
		};
		char *state = arg(0);
		char *message = arg(1);
		char *detail = arg(2);
		char *hint = arg(3);
		char *context = arg(4);
		bool valid = state != nullptr && strlen(state) == 5;
		for (int i = 0; valid && i < 5; i++)
			valid = (state[i] >= '0' && state[i] <= '9') || (state[i] >= 'A' && state[i] <= 'Z');
		int code = valid ? MAKE_SQLSTATE(state[0], state[1], state[2], state[3], state[4]) : ERRCODE_INTERNAL_ERROR;
		if (code == ERRCODE_SUCCESSFUL_COMPLETION)
			code = ERRCODE_INTERNAL_ERROR;
		ereport(ERROR,
		        (errcode(code), errmsg_internal("%s", message != nullptr ? message : "a step failed"),
		         detail != nullptr ? errdetail_internal("%s", detail) : 0, hint != nullptr ? errhint("%s", hint) : 0,
		         context != nullptr ? (errcontext("%s", context)) : 0));
	});
	PG_RETURN_VOID();
}
