// The per-database worker: runs CALL counter.run_jobs() whenever a job is
// due, exactly as a client (or pg_cron) would, through a top-level portal so
// that jobs may COMMIT.
//
// ERRORs are survived in the loop, as autovacuum's launcher does: a pass runs
// under ce::pg_guard; when it fails the worker logs the error, aborts the
// transaction, forgets pending timeouts and cancels, and sleeps longer after
// each consecutive failure (a job's own failure never gets here: the runner
// records it and goes on). FATAL (SIGTERM, postmaster death) ends the
// process; the launcher starts a new one if the database still wants it.
#include "counter_ext/wall.hpp"
#include "counter_ext/worker.hpp"
#include "counter_ext/worker_shmem.hpp"

extern "C" {
#include "access/xact.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "parser/analyze.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/pquery.h"
#include "tcop/tcopprot.h"
#include "tcop/utility.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

#include <cstring>

using namespace ce::worker_shm;

namespace {

int my_slot = -1;
char my_dbname[NAMEDATALEN];
TimestampTz last_full_pass = 0;
char connected_role[NAMEDATALEN];
MemoryContext pass_context = nullptr;

void worker_detach(int, Datum) {
	if (shared == nullptr || my_slot < 0)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	Slot &s = shared->slots[my_slot];
	if (s.pid == MyProcPid) {
		s.pid = 0;
		s.latch = nullptr;
		s.state = slot_exited;
	}
	LWLockRelease(shared->lock);
}

[[noreturn]] void exit_quietly(ExitReason reason) {
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	shared->slots[my_slot].reason = reason;
	LWLockRelease(shared->lock);
	proc_exit(0);
}

// Runs one top-level statement the way a client's simple query runs it.
void run_top_level(const char *sql) {
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	// The plan must outlive the transactions the procedure commits (a client's
	// simple query keeps it in MessageContext for the same reason).
	MemoryContextSwitchTo(pass_context);
	debug_query_string = sql;
	List *parsed = pg_parse_query(sql);
	RawStmt *raw = linitial_node(RawStmt, parsed);
	bool snapshot_set = false;
	if (analyze_requires_snapshot(raw)) {
		PushActiveSnapshot(GetTransactionSnapshot());
		snapshot_set = true;
	}
	List *queries = pg_analyze_and_rewrite_fixedparams(raw, sql, nullptr, 0, nullptr);
	List *plans = pg_plan_queries(queries, sql, CURSOR_OPT_PARALLEL_OK, nullptr);
	if (snapshot_set)
		PopActiveSnapshot();

	Portal portal = CreatePortal("", true, true);
	portal->visible = false;
	PortalDefineQuery(portal, nullptr, sql, CreateCommandTag(raw->stmt), plans, nullptr);
	PortalStart(portal, nullptr, 0, InvalidSnapshot);
	DestReceiver *receiver = CreateDestReceiver(DestNone);
	QueryCompletion qc;
	InitializeQueryCompletion(&qc);
	(void)ce::compat::portal_run(portal, FETCH_ALL, true, receiver, receiver, &qc);
	receiver->rDestroy(receiver);
	PortalDrop(portal, false);
	CommitTransactionCommand();
	debug_query_string = nullptr;
}

// One look at the database. Returns how long to sleep (ms).
long pass() {
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (!OidIsValid(get_extension_oid("counter_ext", true))) {
		PopActiveSnapshot();
		CommitTransactionCommand();
		exit_quietly(exit_no_extension);
	}
	pgstat_report_activity(STATE_RUNNING, "counter_ext worker: looking for due jobs");
	SPI_connect();
	// Due jobs, runs in progress, and seconds until the next job falls due.
	int rc = SPI_execute("SELECT count(*) FILTER (WHERE j.running_run IS NULL AND j.next_run <= clock_timestamp()),"
	                     " count(j.running_run),"
	                     " extract(epoch FROM min(j.next_run) FILTER (WHERE j.running_run IS NULL) - clock_timestamp())"
	                     "::float8"
	                     " FROM counter.jobs j WHERE j.enabled",
	                     true, 0);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "counter_ext worker: could not read counter.jobs");
	bool isnull = false;
	int64 due = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	int64 running = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	Datum wait_datum = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull);
	double wait_s = isnull ? ce::worker_naptime_s : DatumGetFloat8(wait_datum);
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();

	// counter.run_jobs() also marks failed the runs whose process is gone: it
	// runs at start (after a crash) and every naptime while runs are shown in
	// progress, besides whenever a job is due.
	TimestampTz now = GetCurrentTimestamp();
	bool sweep = last_full_pass == 0 ||
	             (running > 0 && now >= TimestampTzPlusMilliseconds(last_full_pass, ce::worker_naptime_s * 1000L));
	if (due > 0 || sweep) {
		last_full_pass = now;
		run_top_level("CALL counter.run_jobs()");
		return 100; // look again soon: more may have fallen due meanwhile
	}
	if (wait_s > ce::worker_naptime_s)
		wait_s = ce::worker_naptime_s;
	return wait_s < 0.01 ? 10 : static_cast<long>(wait_s * 1000.0);
}

// The error of a failed pass goes to the server log; the transaction and
// everything it held is released, as after an ERROR in a client session.
void recover(ErrorData *edata, int failures) {
	HOLD_INTERRUPTS();
	disable_all_timeouts(false);
	QueryCancelPending = false;
	ereport(LOG, (errcode(edata->sqlerrcode),
	              errmsg("counter_ext worker: a pass over database \"%s\" failed: %s", my_dbname, edata->message),
	              edata->detail != nullptr ? errdetail_internal("%s", edata->detail) : 0,
	              errhint("The worker tries again in %d s.", failures)));
	AbortCurrentTransaction();
	debug_query_string = nullptr;
	MemoryContextSwitchTo(TopMemoryContext);
	RESUME_INTERRUPTS();
}

void worker_main(Datum arg) {
	my_slot = DatumGetInt32(arg);
	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	strlcpy(my_dbname, MyBgworkerEntry->bgw_extra, NAMEDATALEN);
	strlcpy(connected_role, MyBgworkerEntry->bgw_extra + NAMEDATALEN, NAMEDATALEN);
	BackgroundWorkerInitializeConnection(my_dbname, connected_role[0] != '\0' ? connected_role : nullptr, 0);
	ce::in_database_worker = true;

	// Attach to the slot, unless a database-level command wants us gone.
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	Slot &s = shared->slots[my_slot];
	bool go = s.dboid == MyDatabaseId && !is_blocked(MyDatabaseId);
	if (go) {
		s.pid = MyProcPid;
		s.latch = MyLatch;
		s.state = slot_running;
	} else {
		s.reason = exit_blocked;
		s.state = slot_exited;
	}
	LWLockRelease(shared->lock);
	if (!go)
		proc_exit(0);
	on_shmem_exit(worker_detach, 0);

	pgstat_report_appname("counter_ext worker");
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_SESSION);
	pass_context = AllocSetContextCreate(TopMemoryContext, "counter_ext worker pass", ALLOCSET_DEFAULT_SIZES);

	int failures = 0;
	for (;;) {
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending) {
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			if (strcmp(connected_role, ce::worker_role != nullptr ? ce::worker_role : "") != 0)
				exit_quietly(exit_role_changed);
		}
		if (!ce::worker_enabled)
			exit_quietly(exit_disabled);

		long sleep_ms = 0;
		ErrorData *failed = nullptr;
		MemoryContextSwitchTo(pass_context);
		try {
			sleep_ms = ce::pg_guard([] { return pass(); });
		} catch (const ce::PgError &e) {
			failed = e.data();
		}
		if (failed == nullptr) {
			failures = 0;
		} else {
			failures++;
			int backoff_s = ce::worker_naptime_s << (failures < 6 ? failures : 6);
			if (backoff_s > 300)
				backoff_s = 300;
			recover(failed, backoff_s);
			sleep_ms = backoff_s * 1000L;
		}
		MemoryContextSwitchTo(TopMemoryContext);
		MemoryContextReset(pass_context);
		if (sleep_ms <= 0)
			continue;
		pgstat_report_activity(STATE_IDLE, "counter_ext worker: waiting for the next due job");
		(void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

} // namespace

extern "C" {
PGDLLEXPORT void counter_ext_worker_main(Datum);
}

extern "C" void counter_ext_worker_main(Datum arg) {
	ce::boundary([arg] { worker_main(arg); });
}
