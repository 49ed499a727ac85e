// The job runner behind CALL counter.run_jobs() and CALL counter.run_job(id),
// which the per-database worker runs too.
//
// A job runs in three steps:
//  1. claim, in one short transaction: pg_try_advisory_xact_lock(job_lock_class,
//     job id) so that two runners never decide at once; re-read the job; if it
//     has a run in progress whose process is alive, leave it; if that process
//     is gone, mark the run failed; then insert a 'running' row in
//     counter.job_runs (with this backend's pid and start time) and point
//     counter.jobs.running_run at it. The commit releases the advisory lock;
//     the committed claim keeps other runners off while the job runs, across
//     the job's own COMMITs, which no transaction-level lock could survive.
//  2. CALL counter.job_<kind>(target, NULL) in a non-atomic context, under the
//     job's statement timeout (a timer armed for the whole call) and lock
//     timeout.
//  3. record the outcome and the next run (back-off after a failure).
//
// A job that fails cannot be caught with a subtransaction (a procedure that
// COMMITs cannot run inside one), so the runner recovers the way PL/pgSQL's
// ROLLBACK does inside a procedure: abort the transaction (which pops every
// SPI level above and including ours), start a new one, reconnect SPI. That
// is only sound with no SPI caller below us, so these procedures refuse to run
// from inside a function, a DO block or a transaction block.
//
// The runner's own SQL runs with SET LOCAL search_path = pg_catalog, pg_temp
// in its own transactions; jobs run with the session's search_path (the
// worker's is pg_catalog, pg_temp).
//
// No C++ objects live in this file's frames: PostgreSQL calls are made
// directly, and ce::pg_guard turns the job's ERROR into a ce::PgError that is
// handled after its catch block has ended.
#include "counter_ext/wall.hpp"
#include "counter_ext/worker.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "storage/proc.h"
#include "tcop/pquery.h"
#include "utils/backend_status.h"
#include "utils/guc.h"
#include "utils/portal.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "utils/lsyscache.h"
}

#include <cstring>

namespace {

// The run this session is executing now (0 when none).
int64 session_run = 0;

const char orphan_message[] = "run abandoned: the process running it ended before recording an outcome "
                              "(crash, termination, or an error outside the job)";

// Next run after a failure: run_every doubled per earlier consecutive failure,
// at most max(run_every, 1 hour), minus up to 20% jitter. j.failures is the
// count before this failure.
#define BACKOFF_SQL                                                                                                    \
	"clock_timestamp() + LEAST(GREATEST(j.run_every, interval '1 hour'),"                                              \
	" j.run_every * power(2.0, LEAST(j.failures, 12)::float8)) * (1.0 - 0.2 * random())"

struct Runner {
	MemoryContext cxt; // lives across the transactions of the call
	const char *runner_name;
};

struct Claim {
	int64 job_id;
	int64 run_id;
	char *kind;
	char *target;
	int timeout_ms;
	int lock_timeout_ms;
};

enum ClaimResult { claimed, busy, not_due, missing };

struct Outcome {
	bool ok;
	bool rows_null;
	int64 rows;
	ErrorData *error; // when !ok
	bool rethrow;     // a cancel of the whole call: record, then raise it
};

void local_search_path() {
	(void)set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0,
	                        false);
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

// Whether the backend that claimed a run is still there (and running it).
bool owner_alive(int pid, TimestampTz started, int64 run_id) {
	if (pid == MyProcPid)
		return started == MyStartTimestamp && run_id == session_run;
	int n = pgstat_fetch_stat_numbackends();
	for (int i = 1; i <= n; i++) {
		PgBackendStatus *be = ce::compat::backend_status_by_index(i);
		if (be != nullptr && be->st_procpid == pid)
			return be->st_proc_start_timestamp == started;
	}
	return false;
}

void fail_orphan(int64 run_id) {
	Oid types[2] = {INT8OID, TEXTOID};
	Datum values[2] = {Int64GetDatum(run_id), CStringGetTextDatum(orphan_message)};
	spi_run("UPDATE counter.job_runs SET outcome = 'failed', finished_at = clock_timestamp(), message = $2"
	        " WHERE run_id = $1 AND outcome = 'running'",
	        2, types, values, nullptr, false, SPI_OK_UPDATE, "marking an abandoned run");
	spi_run("UPDATE counter.jobs j SET running_run = NULL, failures = j.failures + 1, next_run = " BACKOFF_SQL
	        " WHERE j.running_run = $1",
	        1, types, values, nullptr, false, SPI_OK_UPDATE, "backing off a job whose run was abandoned");
}

// Marks failed every 'running' run whose process is gone.
void sweep_orphans(Runner *r) {
	local_search_path();
	spi_run("SELECT run_id, pid, backend_start FROM counter.job_runs WHERE outcome = 'running'", 0, nullptr, nullptr,
	        nullptr, true, SPI_OK_SELECT, "reading runs in progress");
	uint64 n = SPI_processed;
	if (n == 0)
		return;
	MemoryContext old = MemoryContextSwitchTo(r->cxt);
	int64 *orphans = static_cast<int64 *>(palloc(sizeof(int64) * n));
	MemoryContextSwitchTo(old);
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

ClaimResult claim(Runner *r, int64 job_id, bool force, Claim *out, int *busy_pid) {
	local_search_path();
	Oid types[5] = {INT4OID, INT8OID, TEXTOID, TIMESTAMPTZOID, INT8OID};
	Datum values[5] = {Int32GetDatum(ce::job_lock_class), Int64GetDatum(job_id), 0, 0, 0};
	spi_run("SELECT pg_try_advisory_xact_lock($1, ($2 % 2147483648)::int4)", 2, types, values, nullptr, false,
	        SPI_OK_SELECT, "locking a job");
	bool isnull;
	if (!DatumGetBool(column(0, 1, &isnull)))
		return busy;

	Oid id_type[1] = {INT8OID};
	Datum id_value[1] = {Int64GetDatum(job_id)};
	spi_run("SELECT j.kind, j.target, (extract(epoch FROM j.timeout) * 1000)::int4,"
	        " (extract(epoch FROM j.lock_timeout) * 1000)::int4, j.running_run, x.pid, x.backend_start,"
	        " j.enabled AND j.next_run <= clock_timestamp()"
	        " FROM counter.jobs j LEFT JOIN counter.job_runs x ON x.run_id = j.running_run WHERE j.job_id = $1",
	        1, id_type, id_value, nullptr, false, SPI_OK_SELECT, "reading a job");
	if (SPI_processed == 0)
		return missing;
	MemoryContext old = MemoryContextSwitchTo(r->cxt);
	out->job_id = job_id;
	out->kind = TextDatumGetCString(column(0, 1, &isnull));
	out->target = TextDatumGetCString(column(0, 2, &isnull));
	MemoryContextSwitchTo(old);
	out->timeout_ms = DatumGetInt32(column(0, 3, &isnull));
	out->lock_timeout_ms = DatumGetInt32(column(0, 4, &isnull));
	bool no_run;
	int64 running = DatumGetInt64(column(0, 5, &no_run));
	bool due = DatumGetBool(column(0, 8, &isnull));
	if (!no_run) {
		bool n1, n2;
		int pid = DatumGetInt32(column(0, 6, &n1));
		TimestampTz started = DatumGetTimestampTz(column(0, 7, &n2));
		if (!n1 && owner_alive(pid, started, running)) {
			*busy_pid = pid;
			return busy;
		}
		fail_orphan(running);
		due = false; // it backs off like any failure
	}
	if (!force && !due)
		return not_due;

	values[1] = Int64GetDatum(job_id);
	values[2] = CStringGetTextDatum(r->runner_name);
	values[3] = TimestampTzGetDatum(MyStartTimestamp);
	spi_run("INSERT INTO counter.job_runs (job_id, kind, target, runner, pid, backend_start, started_at, outcome)"
	        " SELECT j.job_id, j.kind, j.target, $3, pg_backend_pid(), $4, clock_timestamp(), 'running'"
	        " FROM counter.jobs j WHERE j.job_id = $2 RETURNING run_id",
	        4, types, values, nullptr, false, SPI_OK_INSERT_RETURNING, "recording the start of a run");
	out->run_id = DatumGetInt64(column(0, 1, &isnull));
	Oid types2[2] = {INT8OID, INT8OID};
	Datum values2[2] = {Int64GetDatum(job_id), Int64GetDatum(out->run_id)};
	spi_run("UPDATE counter.jobs SET running_run = $2 WHERE job_id = $1", 2, types2, values2, nullptr, false,
	        SPI_OK_UPDATE, "claiming a job");
	return claimed;
}

void record(const Claim *c, const Outcome *o) {
	local_search_path();
	if (o->ok) {
		Oid types[3] = {INT8OID, INT8OID, INT8OID};
		Datum values[3] = {Int64GetDatum(c->run_id), Int64GetDatum(o->rows), Int64GetDatum(c->job_id)};
		const char nulls[4] = {' ', o->rows_null ? 'n' : ' ', ' ', '\0'};
		spi_run("UPDATE counter.job_runs SET outcome = 'succeeded', finished_at = clock_timestamp(),"
		        " rows_affected = $2 WHERE run_id = $1",
		        2, types, values, nulls, false, SPI_OK_UPDATE, "recording a run");
		Datum v2[2] = {Int64GetDatum(c->job_id), Int64GetDatum(c->run_id)};
		spi_run("UPDATE counter.jobs j SET running_run = NULL, failures = 0, next_run = clock_timestamp() + j.run_every"
		        " WHERE j.job_id = $1 AND j.running_run = $2",
		        2, types, v2, nullptr, false, SPI_OK_UPDATE, "scheduling a job");
	} else {
		Oid types[3] = {INT8OID, TEXTOID, TEXTOID};
		Datum values[3] = {Int64GetDatum(c->run_id), CStringGetTextDatum(unpack_sql_state(o->error->sqlerrcode)),
		                   CStringGetTextDatum(o->error->message != nullptr ? o->error->message : "")};
		spi_run("UPDATE counter.job_runs SET outcome = 'failed', finished_at = clock_timestamp(),"
		        " sqlstate = $2, message = $3 WHERE run_id = $1",
		        3, types, values, nullptr, false, SPI_OK_UPDATE, "recording a failed run");
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

void call_job(const Claim *c, Outcome *o) {
	char *name = psprintf("job_%s", c->kind);
	char *sql = psprintf("CALL counter.%s($1, NULL)", quote_identifier(name));
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
	if (ce::in_database_worker) {
		char *activity =
		    psprintf("counter_ext worker: job %lld %s(%s)", static_cast<long long>(c->job_id), c->kind, c->target);
		pgstat_report_activity(STATE_RUNNING, activity);
		pfree(activity);
	}
	SPI_commit(); // the claim becomes visible; the job starts in a fresh transaction
	MemoryContextSwitchTo(r->cxt);
	session_run = c->run_id;

	TimestampTz job_deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), c->timeout_ms);
	bool outer_active = get_timeout_active(STATEMENT_TIMEOUT);
	TimestampTz outer_deadline = outer_active ? get_timeout_finish_time(STATEMENT_TIMEOUT) : 0;
	enable_timeout_at(STATEMENT_TIMEOUT, outer_active && outer_deadline < job_deadline ? outer_deadline : job_deadline);
	int saved_lock_timeout = LockTimeout;
	LockTimeout = c->lock_timeout_ms;

	ErrorData *error = nullptr;
	o->ok = true;
	o->rethrow = false;
	try {
		ce::pg_guard([c, o] { call_job(c, o); });
	} catch (const ce::PgError &e) {
		error = e.data();
	}

	LockTimeout = saved_lock_timeout;
	disable_timeout(STATEMENT_TIMEOUT, false);
	if (outer_active)
		enable_timeout_at(STATEMENT_TIMEOUT, outer_deadline);

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

struct DueList {
	int64 *ids;
	uint64 count;
};

DueList due_jobs(Runner *r) {
	local_search_path();
	spi_run("SELECT job_id FROM counter.jobs WHERE enabled AND next_run <= clock_timestamp() AND running_run IS NULL"
	        " ORDER BY next_run, job_id",
	        0, nullptr, nullptr, nullptr, true, SPI_OK_SELECT, "reading due jobs");
	DueList list;
	list.count = SPI_processed;
	list.ids = static_cast<int64 *>(MemoryContextAlloc(r->cxt, sizeof(int64) * (list.count + 1)));
	for (uint64 i = 0; i < list.count; i++) {
		bool isnull;
		list.ids[i] = DatumGetInt64(column(i, 1, &isnull));
	}
	return list;
}

void trim_history() {
	local_search_path();
	Oid types[1] = {INT4OID};
	Datum values[1] = {Int32GetDatum(ce::history_retention_s)};
	spi_run("DELETE FROM counter.job_runs WHERE run_id IN (SELECT run_id FROM counter.job_runs"
	        " WHERE finished_at < clock_timestamp() - make_interval(secs => $1) ORDER BY finished_at LIMIT 10000)",
	        1, types, values, nullptr, false, SPI_OK_DELETE, "trimming the run history");
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

Runner start_runner() {
	Runner r;
	r.cxt = AllocSetContextCreate(CurrentMemoryContext, "counter_ext job runner", ALLOCSET_DEFAULT_SIZES);
	r.runner_name = ce::in_database_worker ? "worker" : "session";
	if (SPI_connect_ext(SPI_OPT_NONATOMIC) != SPI_OK_CONNECT)
		elog(ERROR, "counter_ext job runner: SPI_connect failed");
	MemoryContextSwitchTo(r.cxt);
	return r;
}

Datum one_column_result(FunctionCallInfo fcinfo, MemoryContext cxt, Datum value, bool isnull) {
	MemoryContextSwitchTo(cxt);
	TupleDesc desc;
	if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "counter_ext: a procedure with an INOUT parameter must return a row");
	desc = BlessTupleDesc(desc);
	HeapTuple tuple = heap_form_tuple(desc, &value, &isnull);
	return HeapTupleGetDatum(tuple);
}

// Finishes a failed job that run_job or a cancel must report: the record is
// committed first, then the job's error is raised again.
[[noreturn]] void raise_after_record(ErrorData *error) {
	SPI_commit();
	ReThrowError(error);
}

} // namespace

// CALL counter.run_jobs(): every due job once; returns how many ran.
CE_FUNCTION(counter_run_jobs) {
	session_run = 0; // a new top-level call runs nothing yet, whatever an ERROR left behind
	require_top_level(fcinfo, "counter.run_jobs()");
	MemoryContext entry = CurrentMemoryContext;
	Runner r = start_runner();
	sweep_orphans(&r);
	SPI_commit();
	MemoryContextSwitchTo(r.cxt);
	DueList due = due_jobs(&r);
	int ran = 0;
	for (uint64 i = 0; i < due.count; i++) {
		CHECK_FOR_INTERRUPTS();
		Claim c;
		int busy_pid = 0;
		ClaimResult got = claim(&r, due.ids[i], false, &c, &busy_pid);
		if (got != claimed) {
			SPI_commit();
			MemoryContextSwitchTo(r.cxt);
			continue;
		}
		Outcome o;
		execute(&r, &c, &o);
		record(&c, &o);
		if (!o.ok && o.rethrow)
			raise_after_record(o.error);
		SPI_commit();
		MemoryContextSwitchTo(r.cxt);
		ran++;
	}
	trim_history();
	if (ce::in_database_worker)
		pgstat_report_activity(STATE_RUNNING, "counter_ext worker: jobs done");
	SPI_finish();
	Datum result = one_column_result(fcinfo, entry, Int32GetDatum(ran), false);
	MemoryContextDelete(r.cxt);
	return result;
}

// CALL counter.run_job(job_id): that job now, due or not (even disabled).
CE_FUNCTION(counter_run_job) {
	session_run = 0; // a new top-level call runs nothing yet, whatever an ERROR left behind
	require_top_level(fcinfo, "counter.run_job()");
	if (PG_ARGISNULL(0))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("job_id must not be NULL")));
	int64 job_id = PG_GETARG_INT64(0);
	MemoryContext entry = CurrentMemoryContext;
	Runner r = start_runner();
	sweep_orphans(&r);
	SPI_commit();
	MemoryContextSwitchTo(r.cxt);
	Claim c;
	int busy_pid = 0;
	ClaimResult got = claim(&r, job_id, true, &c, &busy_pid);
	if (got == missing)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("job %lld does not exist", (long long)job_id)));
	if (got == busy)
		ereport(ERROR,
		        (errcode(ERRCODE_OBJECT_IN_USE), errmsg("job %lld is running in another session", (long long)job_id),
		         busy_pid != 0 ? errdetail("It runs in the process with pid %d.", busy_pid) : 0,
		         errhint("Wait for that run to finish, or call counter.run_job again.")));
	Outcome o;
	execute(&r, &c, &o);
	record(&c, &o);
	if (!o.ok)
		raise_after_record(o.error);
	SPI_finish();
	Datum result = one_column_result(fcinfo, entry, Int64GetDatum(o.rows), o.rows_null);
	MemoryContextDelete(r.cxt);
	return result;
}
