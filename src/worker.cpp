// The worker's settings, shared memory, launcher registration, the utility
// hook that keeps workers out of the way of database-level commands, and the
// nudges that tell the launcher at commit that a database got the extension
// (CREATE EXTENSION) or a job that falls due (counter.job_register,
// counter.job_alter).
#include "counter_ext/wall.hpp"
#include "counter_ext/worker.hpp"
#include "counter_ext/worker_shmem.hpp"

extern "C" {
#include "access/xact.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "nodes/parsenodes.h"
#include "postmaster/bgworker.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "tcop/utility.h"
#include "utils/backend_status.h"
#include "utils/guc.h"
#include "utils/wait_event.h"
}

#include <csignal>
#include <cstring>

namespace ce {
bool worker_enabled = true;
int worker_naptime_s = 10;
int worker_max_workers = 8;
int history_retention_s = 7 * 24 * 3600;
int history_runs_per_role = 10000;

namespace worker_shm {
Shared *shared = nullptr;

bool is_blocked(Oid dboid) {
	for (const Block &b : shared->blocks)
		if (b.dboid == dboid && b.count > 0)
			return true;
	return false;
}

void nudge_launcher(Oid dboid, Oid owner, TimestampTz due) {
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	bool merged = false;
	for (int i = 0; i < shared->nudge_count && !merged; i++) {
		Nudge &n = shared->nudges[i];
		if (n.dboid == dboid && n.owner == owner) {
			n.due = Min(n.due, due);
			merged = true;
		}
	}
	if (!merged) {
		if (shared->nudge_count < max_nudges)
			shared->nudges[shared->nudge_count++] = Nudge{dboid, owner, due};
		else
			shared->nudge_overflow = true;
	}
	// a worker that lingers for this owner's jobs (worker_db.cpp) looks now
	for (int i = 0; i < shared->nslots; i++) {
		Slot &s = shared->slots[i];
		if (s.dboid == dboid && OidIsValid(s.owner) && (s.owner == owner || !OidIsValid(owner)) &&
		    s.state == slot_running && s.latch != nullptr)
			SetLatch(s.latch);
	}
	Latch *latch = shared->launcher_latch;
	LWLockRelease(shared->lock);
	if (latch != nullptr)
		SetLatch(latch);
}
} // namespace worker_shm

bool start_job_worker(const JobWorkerArgs &args, const char *dbname, BackgroundWorkerHandle **handle) {
	BackgroundWorker worker;
	memset(&worker, 0, sizeof worker);
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "counter_ext");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "counter_ext_job_worker_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "counter_ext worker for database %s", dbname);
	snprintf(worker.bgw_type, BGW_MAXLEN, "counter_ext worker");
	worker.bgw_notify_pid = MyProcPid;
	memcpy(worker.bgw_extra, &args, sizeof args);
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	bool ok = RegisterDynamicBackgroundWorker(&worker, handle);
	MemoryContextSwitchTo(old);
	return ok;
}
} // namespace ce

using namespace ce::worker_shm;

namespace {

shmem_request_hook_type prev_shmem_request_hook = nullptr;
shmem_startup_hook_type prev_shmem_startup_hook = nullptr;
ProcessUtility_hook_type prev_process_utility_hook = nullptr;

// Set by the utility hook and counter_internal.job_nudge, acted on when the
// transaction commits.
bool nudge_at_commit = false;
bool wake_at_commit = false;
constexpr int max_pending = 8;
int npending = 0;
Nudge pending[max_pending];

// How long a database-level command waits for the database's worker to go.
constexpr long stop_wait_ms = 10000;

Size slots_size() {
	return add_size(offsetof(Shared, slots), mul_size(sizeof(Slot), static_cast<Size>(ce::worker_max_workers)));
}

int progress_entries() {
	return 2 * ce::worker_max_workers;
}

Size shared_size() {
	return add_size(MAXALIGN(slots_size()), mul_size(sizeof(Progress), static_cast<Size>(progress_entries())));
}

void shmem_request() {
	if (prev_shmem_request_hook != nullptr)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(shared_size());
	RequestNamedLWLockTranche("counter_ext", 1);
}

void shmem_startup() {
	if (prev_shmem_startup_hook != nullptr)
		prev_shmem_startup_hook();
	bool found = false;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = static_cast<Shared *>(ShmemInitStruct("counter_ext worker", shared_size(), &found));
	if (!found) {
		memset(shared, 0, shared_size());
		shared->lock = &(GetNamedLWLockTranche("counter_ext"))->lock;
		shared->nslots = ce::worker_max_workers;
		shared->nprogress = progress_entries();
		shared->progress_offset = MAXALIGN(slots_size());
	}
	LWLockRelease(AddinShmemInitLock);
}

// The database's workers wake up and see the extension gone.
void wake_worker(Oid dboid) {
	LWLockAcquire(shared->lock, LW_SHARED);
	for (int i = 0; i < shared->nslots; i++) {
		Slot &s = shared->slots[i];
		if (s.dboid == dboid && s.state == slot_running && s.latch != nullptr)
			SetLatch(s.latch);
	}
	LWLockRelease(shared->lock);
}

void add_pending(Oid owner, TimestampTz due) {
	for (int i = 0; i < npending; i++) {
		if (pending[i].owner == owner) {
			pending[i].due = Min(pending[i].due, due);
			return;
		}
	}
	if (npending < max_pending) {
		pending[npending++] = Nudge{MyDatabaseId, owner, due};
		return;
	}
	// Too many owners in one transaction: the launcher looks at the database.
	npending = 1;
	pending[0] = Nudge{MyDatabaseId, InvalidOid, due};
}

void xact_callback(XactEvent event, void *) {
	switch (event) {
		case XACT_EVENT_COMMIT:
			if (shared != nullptr && nudge_at_commit)
				nudge_launcher(MyDatabaseId, InvalidOid, 0);
			if (shared != nullptr && wake_at_commit)
				wake_worker(MyDatabaseId);
			for (int i = 0; shared != nullptr && i < npending; i++)
				nudge_launcher(pending[i].dboid, pending[i].owner, pending[i].due);
			nudge_at_commit = wake_at_commit = false;
			npending = 0;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			nudge_at_commit = wake_at_commit = false;
			npending = 0;
			break;
		default:
			break;
	}
}

void block_database(Oid dboid) {
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	Block *free_entry = nullptr;
	for (Block &b : shared->blocks) {
		if (b.dboid == dboid && b.count > 0) {
			b.count++;
			LWLockRelease(shared->lock);
			return;
		}
		if (b.count == 0 && free_entry == nullptr)
			free_entry = &b;
	}
	if (free_entry != nullptr) {
		free_entry->dboid = dboid;
		free_entry->count = 1;
	}
	LWLockRelease(shared->lock);
	if (free_entry == nullptr)
		ereport(WARNING, (errmsg("counter_ext: too many concurrent database commands to keep workers stopped")));
}

void unblock_database(Oid dboid) {
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (Block &b : shared->blocks) {
		if (b.dboid == dboid && b.count > 0) {
			if (--b.count == 0)
				b.dboid = InvalidOid;
			break;
		}
	}
	Latch *latch = shared->launcher_latch;
	LWLockRelease(shared->lock);
	if (latch != nullptr)
		SetLatch(latch);
}

// Stops the database's worker (it is blocked already, so none starts again)
// and waits until no worker process is connected to it, at most stop_wait_ms.
void stop_database_worker(Oid dboid) {
	TimestampTz give_up = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), stop_wait_ms);
	for (;;) {
		bool busy = false;
		pid_t pids[8];
		int npids = 0;
		LWLockAcquire(shared->lock, LW_SHARED);
		for (int i = 0; i < shared->nslots; i++) {
			Slot &s = shared->slots[i];
			if (s.dboid != dboid)
				continue;
			if (s.state == slot_starting || s.state == slot_running)
				busy = true;
			if (s.pid != 0 && npids < 8)
				pids[npids++] = s.pid;
		}
		LWLockRelease(shared->lock);
		for (int i = 0; i < npids; i++) {
			if (BackendPidGetProc(pids[i]) != nullptr) {
				busy = true;
				kill(pids[i], SIGTERM);
			}
		}
		// Job workers that sessions started (run_jobs, run_job) hold no slot.
		pgstat_clear_backend_activity_snapshot();
		int n = pgstat_fetch_stat_numbackends();
		for (int i = 1; i <= n; i++) {
			PgBackendStatus *be = ce::compat::backend_status_by_index(i);
			if (be == nullptr || be->st_databaseid != dboid || be->st_backendType != B_BG_WORKER ||
			    be->st_procpid == MyProcPid)
				continue;
			const char *type = GetBackgroundWorkerTypeByPid(be->st_procpid);
			if (type != nullptr && strcmp(type, "counter_ext worker") == 0) {
				busy = true;
				kill(be->st_procpid, SIGTERM);
			}
		}
		if (!busy || GetCurrentTimestamp() >= give_up)
			return;
		(void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

bool names_counter_ext(List *objects) {
	ListCell *lc;
	foreach (lc, objects) {
		Node *n = static_cast<Node *>(lfirst(lc));
		if (IsA(n, String) && strcmp(strVal(n), "counter_ext") == 0)
			return true;
	}
	return false;
}

// The database a command needs without other connections, if any.
Oid database_needing_no_connections(Node *stmt) {
	switch (nodeTag(stmt)) {
		case T_DropdbStmt:
			return get_database_oid(castNode(DropdbStmt, stmt)->dbname, true);
		case T_RenameStmt: {
			RenameStmt *r = castNode(RenameStmt, stmt);
			return r->renameType == OBJECT_DATABASE ? get_database_oid(r->subname, true) : InvalidOid;
		}
		case T_AlterDatabaseStmt: {
			AlterDatabaseStmt *a = castNode(AlterDatabaseStmt, stmt);
			ListCell *lc;
			foreach (lc, a->options) {
				DefElem *d = lfirst_node(DefElem, lc);
				if (strcmp(d->defname, "tablespace") == 0)
					return get_database_oid(a->dbname, true);
			}
			return InvalidOid;
		}
		case T_CreatedbStmt: {
			CreatedbStmt *c = castNode(CreatedbStmt, stmt);
			ListCell *lc;
			foreach (lc, c->options) {
				DefElem *d = lfirst_node(DefElem, lc);
				if (strcmp(d->defname, "template") == 0 && d->arg != nullptr)
					return get_database_oid(defGetString(d), true);
			}
			return InvalidOid;
		}
		default:
			return InvalidOid;
	}
}

void run_utility(PlannedStmt *pstmt, const char *query, bool read_only_tree, ProcessUtilityContext context,
                 ParamListInfo params, QueryEnvironment *env, DestReceiver *dest, QueryCompletion *qc) {
	if (prev_process_utility_hook != nullptr)
		prev_process_utility_hook(pstmt, query, read_only_tree, context, params, env, dest, qc);
	else
		standard_ProcessUtility(pstmt, query, read_only_tree, context, params, env, dest, qc);
}

// Owns no C++ objects: PostgreSQL errors pass through it as they would
// through C code, and PG_FINALLY unblocks the database.
void process_utility(PlannedStmt *pstmt, const char *query, bool read_only_tree, ProcessUtilityContext context,
                     ParamListInfo params, QueryEnvironment *env, DestReceiver *dest, QueryCompletion *qc) {
	Node *stmt = pstmt->utilityStmt;
	Oid dboid = shared != nullptr ? database_needing_no_connections(stmt) : InvalidOid;

	if (OidIsValid(dboid)) {
		block_database(dboid);
		PG_TRY();
		{
			stop_database_worker(dboid);
			run_utility(pstmt, query, read_only_tree, context, params, env, dest, qc);
		}
		PG_FINALLY();
		{ unblock_database(dboid); }
		PG_END_TRY();
		return;
	}

	run_utility(pstmt, query, read_only_tree, context, params, env, dest, qc);

	if (IsA(stmt, CreateExtensionStmt) && strcmp(castNode(CreateExtensionStmt, stmt)->extname, "counter_ext") == 0)
		nudge_at_commit = true;
	if (IsA(stmt, DropStmt) && castNode(DropStmt, stmt)->removeType == OBJECT_EXTENSION &&
	    names_counter_ext(castNode(DropStmt, stmt)->objects))
		wake_at_commit = true;
}

void define_worker_gucs() {
	DefineCustomBoolVariable("counter_ext.enabled", "Runs counter_ext jobs in background workers.",
	                         "Off stops every worker; counter.run_jobs() still works.", &ce::worker_enabled, true,
	                         PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
	DefineCustomIntVariable("counter_ext.naptime", "Longest sleep of the launcher and of each worker between looks.",
	                        "A worker wakes earlier when a job falls due.", &ce::worker_naptime_s, 10, 1, 3600,
	                        PGC_SIGHUP, GUC_UNIT_S, nullptr, nullptr, nullptr);
	DefineCustomIntVariable("counter_ext.history_retention", "How long finished job runs stay in counter.job_runs.",
	                        nullptr, &ce::history_retention_s, 7 * 24 * 3600, 60, INT_MAX, PGC_SIGHUP, GUC_UNIT_S,
	                        nullptr, nullptr, nullptr);
	DefineCustomIntVariable("counter_ext.history_runs_per_role",
	                        "Most runs of one role (the role that ran them) kept in counter.job_runs.",
	                        "Each new run of a role deletes that role's oldest finished runs beyond this many; other "
	                        "roles' runs are never touched.",
	                        &ce::history_runs_per_role, 10000, 10, INT_MAX, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
}

// Sizes shared memory, so it exists only when the library is preloaded
// (PostgreSQL refuses postmaster-context settings from a later LOAD).
void define_postmaster_gucs() {
	DefineCustomIntVariable("counter_ext.max_workers", "Most job workers the launcher runs at once.",
	                        "The databases with due jobs share them by turns; each takes a max_worker_processes "
	                        "slot while it runs, and the launcher one more.",
	                        &ce::worker_max_workers, 8, 1, 128, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
}

void register_launcher() {
	BackgroundWorker worker;
	memset(&worker, 0, sizeof worker);
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "counter_ext");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "counter_ext_launcher_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "counter_ext launcher");
	snprintf(worker.bgw_type, BGW_MAXLEN, "counter_ext launcher");
	RegisterBackgroundWorker(&worker);
}

} // namespace

// counter_internal.job_nudge(owner oid, due timestamptz): at commit, the
// launcher learns that this database has a job of 'owner' due at 'due'.
CE_FUNCTION(counter_job_nudge) {
	if (shared != nullptr)
		add_pending(PG_GETARG_OID(0), PG_GETARG_TIMESTAMPTZ(1));
	PG_RETURN_VOID();
}

namespace ce {

void init_worker() {
	define_worker_gucs();
	if (!process_shared_preload_libraries_in_progress)
		return;
	define_postmaster_gucs();
	if (IsBinaryUpgrade)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = ce::entry<shmem_request>;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = ce::entry<shmem_startup>;
	prev_process_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = ce::entry<process_utility>;
	RegisterXactCallback(ce::entry<xact_callback>, nullptr);
	register_launcher();
}

} // namespace ce
