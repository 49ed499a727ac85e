// The job worker: a short-lived background worker connected to one database
// as one job owner (BackgroundWorkerInitializeConnectionByOid), so the
// session user of every job it runs is the job's owner and nothing the job
// does can leave that role: SET ROLE reaches only the owner's own roles, SET
// SESSION AUTHORIZATION is refused (the authenticated user is the owner).
//
// Started by the launcher (a survey, which reads the database's jobs and runs
// none, connected as the bootstrap superuser; or the due jobs of one owner),
// or by counter.run_jobs()/counter.run_job() in a session, which waits for it
// (a dsm segment carries the outcome back). It runs the jobs through CALL
// counter_internal.owner_session_run(), a top-level portal like a client's
// simple query, so that jobs may COMMIT; then (scheduler modes) it reports in
// its slot when each owner's jobs fall due next, and exits, unless its
// owner's jobs fall due again within one naptime (linger, below).
//
// An ERROR outside a job (a job's own failure never gets here: the runner
// records it and goes on) ends the worker after logging it; the launcher
// backs off that database and owner (naptime x 2^n, at most 5 minutes).
// FATAL (SIGTERM, postmaster death) ends the process. No C++ exception
// reaches the top frame: the main runs inside ce::boundary, the passes under
// ce::pg_guard.
#include "counter_ext/owner.hpp"
#include "counter_ext/wall.hpp"
#include "counter_ext/worker.hpp"
#include "counter_ext/worker_shmem.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "parser/analyze.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/procarray.h"
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

namespace ce {
const JobWorkerArgs *job_worker_args = nullptr;
JobResult *job_worker_result = nullptr;
int job_worker_jobs_run = 0;
bool job_worker_budget_cut = false;
char job_worker_activity[256] = "";
} // namespace ce

namespace {

ce::JobWorkerArgs args;
MemoryContext pass_context = nullptr;
bool attached = false;

bool scheduler_mode() {
	return args.mode == ce::JobWorkerMode::survey || args.mode == ce::JobWorkerMode::scheduled;
}

void worker_detach(int, Datum) {
	if (shared == nullptr || !attached)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	Slot &s = shared->slots[args.slot];
	if (s.pid == MyProcPid) {
		s.pid = 0;
		s.latch = nullptr;
		s.deadline = 0;
		s.state = slot_exited;
	}
	LWLockRelease(shared->lock);
}

void set_reason(ExitReason reason) {
	if (!attached)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (shared->slots[args.slot].pid == MyProcPid)
		shared->slots[args.slot].reason = reason;
	LWLockRelease(shared->lock);
}

// Runs the runner's top-level CALL the way a client's simple query runs it.
// The CALL passes its EXECUTE check as the extension's owner (EXECUTE on the
// runner is not granted to the job owners); the runner goes back to the
// session's user, the job owner, before anything else.
void run_top_level(const char *sql) {
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	Oid owner = ce::catalog_owner();
	Oid save_user;
	int save_sec;
	GetUserIdAndSecContext(&save_user, &save_sec);
	SetUserIdAndSecContext(owner, save_sec | SECURITY_LOCAL_USERID_CHANGE);
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
	SetUserIdAndSecContext(save_user, save_sec);
	CommitTransactionCommand();
	debug_query_string = nullptr;
}

bool extension_present() {
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	bool present = OidIsValid(get_extension_oid("counter_ext", true));
	PopActiveSnapshot();
	CommitTransactionCommand();
	return present;
}

// The report of a scheduler worker: when each owner's enabled jobs fall due
// next (runs left by a dead process are marked failed first, jobs of a
// dropped owner disabled, in counter_internal.job_report).
void report() {
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "counter_ext worker: reporting when the jobs fall due");
	Report r;
	memset(&r, 0, sizeof r);
	r.jobs_run = ce::job_worker_jobs_run;
	r.budget_cut = ce::job_worker_budget_cut;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "counter_ext worker: SPI_connect failed");
	ce::job_report_due(&r);
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (shared->slots[args.slot].pid == MyProcPid) {
		shared->slots[args.slot].report = r;
		shared->slots[args.slot].reason = exit_done;
	}
	LWLockRelease(shared->lock);
}

void pass() {
	if (!extension_present()) {
		set_reason(exit_no_extension);
		return;
	}
	if (args.mode != ce::JobWorkerMode::survey)
		run_top_level("CALL counter_internal.owner_session_run()");
	if (scheduler_mode())
		report();
}

// Passes a scheduled worker runs at most before it exits (see linger).
constexpr int linger_passes = 60;

// After a pass of a scheduled worker: true when it should run another pass
// now, in this process, rather than exit and be started again by the
// launcher, as it would be when its owner's jobs fall due (a flush every
// second otherwise costs a process start every second: fork, connection,
// caches, plans). It waits here when the owner's next jobs, as its report
// says, fall due within one naptime, and leaves (false) when anything else
// would have changed what the launcher does: a report it could not make or
// a pass cut by its budget, the owner not in its report, another (database,
// owner) pair waiting for a slot (the launcher sets slot_wanted and wakes
// it), the database blocked by a database-level command, the worker
// disabled, nothing due within a naptime, or linger_passes passes run. A
// session's nudge for this owner (job_register, job_alter) or the
// launcher's wakes it early; it then runs a pass, which runs what is due.
bool linger(int passes) {
	if (args.mode != ce::JobWorkerMode::scheduled || passes >= linger_passes)
		return false;
	for (;;) {
		TimestampTz due = 0;
		LWLockAcquire(shared->lock, LW_SHARED);
		const Slot &s = shared->slots[args.slot];
		bool go = s.pid == MyProcPid && s.reason == exit_done && !s.report.budget_cut && !shared->slot_wanted &&
		          !is_blocked(args.dboid);
		bool listed = false;
		for (int i = 0; go && i < s.report.nowners; i++) {
			if (s.report.owners[i].owner == args.owner) {
				due = s.report.owners[i].due;
				listed = true;
			}
		}
		LWLockRelease(shared->lock);
		if (!go || !listed || due == 0 || !ce::worker_enabled)
			return false;
		TimestampTz now = GetCurrentTimestamp();
		if (due <= now)
			return true;
		long ms = TimestampDifferenceMilliseconds(now, due);
		if (ms > ce::worker_naptime_s * 1000L)
			return false;
		pgstat_report_activity(STATE_IDLE, "counter_ext worker: waiting for its owner's next due jobs");
		int rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending) {
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if ((rc & WL_LATCH_SET) != 0) {
			// woken: a nudge (a pass looks at what is due now), or the
			// launcher wanting the slot (the checks above, again)
			LWLockAcquire(shared->lock, LW_SHARED);
			bool leave = shared->slot_wanted || is_blocked(args.dboid);
			LWLockRelease(shared->lock);
			return !leave && ce::worker_enabled;
		}
	}
}

void log_failure(ErrorData *edata) {
	HOLD_INTERRUPTS();
	disable_all_timeouts(false);
	QueryCancelPending = false;
	ereport(LOG,
	        (errcode(edata->sqlerrcode), errmsg("%s: a pass failed: %s", MyBgworkerEntry->bgw_name, edata->message),
	         edata->detail != nullptr ? errdetail_internal("%s", edata->detail) : 0,
	         errhint("The launcher tries again later.")));
	if (ce::job_worker_result != nullptr) {
		ce::JobResult *res = ce::job_worker_result;
		if (!res->finished) {
			res->ok = false;
			res->sqlerrcode = edata->sqlerrcode;
			strlcpy(res->message, edata->message != nullptr ? edata->message : "", sizeof res->message);
			strlcpy(res->detail, edata->detail != nullptr ? edata->detail : "", sizeof res->detail);
		}
	}
	AbortCurrentTransaction();
	debug_query_string = nullptr;
	MemoryContextSwitchTo(TopMemoryContext);
	RESUME_INTERRUPTS();
}

void worker_main(Datum) {
	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof args);
	ce::job_worker_args = &args;
	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	dsm_segment *seg = nullptr;
	if (!scheduler_mode()) {
		// The caller's segment, mapped for the life of the process.
		seg = dsm_attach(static_cast<dsm_handle>(args.result));
		if (seg == nullptr)
			ereport(FATAL, (errmsg("counter_ext worker: the session that started it is gone")));
		dsm_pin_mapping(seg);
		ce::job_worker_result = static_cast<ce::JobResult *>(dsm_segment_address(seg));
	}

	// Attach to the slot first, unless a database-level command wants us gone.
	if (scheduler_mode()) {
		LWLockAcquire(shared->lock, LW_EXCLUSIVE);
		Slot &s = shared->slots[args.slot];
		bool go = s.dboid == args.dboid && s.owner == args.owner && s.state == slot_starting && !is_blocked(args.dboid);
		if (go) {
			s.pid = MyProcPid;
			s.latch = MyLatch;
			s.state = slot_running;
			attached = true;
		}
		LWLockRelease(shared->lock);
		if (!go)
			proc_exit(0);
		on_shmem_exit(worker_detach, 0);
	}

	// The job owner's session (the survey: the bootstrap superuser's). A role
	// without LOGIN is refused here with FATAL on PostgreSQL 15; the runner
	// never hands such a role a job (it records why instead).
	BackgroundWorkerInitializeConnectionByOid(args.dboid, args.owner, 0);
	if (ce::job_worker_result != nullptr)
		ce::job_worker_result->connected = true;

	pgstat_report_appname("counter_ext worker");
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_SESSION);
	pass_context = AllocSetContextCreate(TopMemoryContext, "counter_ext worker pass", ALLOCSET_DEFAULT_SIZES);
	if (!ce::worker_enabled && scheduler_mode()) {
		set_reason(exit_disabled);
		proc_exit(0);
	}

	ErrorData *failed = nullptr;
	MemoryContextSwitchTo(pass_context);
	try {
		ce::pg_guard([] { pass(); });
		for (int passes = 1; ce::pg_guard([passes] { return linger(passes); }); passes++) {
			ce::pg_guard([] {
				// the last pass's report is not this one's: an ERROR in this
				// pass must reach the launcher as one (it backs off)
				set_reason(exit_unknown);
				MemoryContextSwitchTo(TopMemoryContext);
				MemoryContextReset(pass_context);
				MemoryContextSwitchTo(pass_context);
				ce::job_worker_jobs_run = 0;
				ce::job_worker_budget_cut = false;
				pass();
			});
		}
	} catch (const ce::PgError &e) {
		failed = e.data();
	}
	if (failed != nullptr)
		log_failure(failed);
	MemoryContextSwitchTo(TopMemoryContext);
	proc_exit(failed != nullptr ? 1 : 0);
}

} // namespace

namespace ce {
void job_worker_set_running(int64 job_id, int64 run_id, TimestampTz deadline) {
	if (shared != nullptr) {
		// The progress entry of this run: taken when it starts, freed when it ends.
		LWLockAcquire(shared->lock, LW_EXCLUSIVE);
		for (int i = 0; i < shared->nprogress; i++) {
			worker_shm::Progress *p = worker_shm::progress_entry(i);
			if (p->pid == MyProcPid)
				memset(p, 0, sizeof *p);
		}
		for (int i = 0; job_id != 0 && i < shared->nprogress; i++) {
			worker_shm::Progress *p = worker_shm::progress_entry(i);
			if (p->pid == 0 || BackendPidGetProc(p->pid) == nullptr) {
				memset(p, 0, sizeof *p);
				p->pid = MyProcPid;
				p->job_id = job_id;
				p->run_id = run_id;
				p->started = GetCurrentTimestamp();
				p->total = -1;
				break;
			}
		}
		LWLockRelease(shared->lock);
	}
	if (job_worker_result != nullptr) {
		job_worker_result->deadline = deadline;
		return;
	}
	if (!attached)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (shared->slots[args.slot].pid == MyProcPid) {
		shared->slots[args.slot].job_id = job_id;
		shared->slots[args.slot].deadline = deadline;
	}
	LWLockRelease(shared->lock);
}
} // namespace ce

extern "C" {
PGDLLEXPORT void counter_ext_job_worker_main(Datum);
}

extern "C" void counter_ext_job_worker_main(Datum arg) {
	ce::boundary([arg] { worker_main(arg); });
}
