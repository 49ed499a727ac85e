// The launcher: connected to no database, it reads pg_database every
// naptime and keeps one worker per database that has counter_ext.
//
// It cannot see pg_extension of other databases, so it learns where the
// extension is from the workers themselves: every new database gets a worker,
// which exits at once (saying so in its slot) when the extension is absent;
// the launcher then leaves that database alone until CREATE EXTENSION
// counter_ext commits there (the utility hook nudges the launcher) or the
// server restarts. Template databases and those that refuse connections are
// never visited. A worker that dies for another reason is started again after
// restart_delay_s.
//
// This file owns no C++ objects: its state lives in a dynahash in
// TopMemoryContext, so PostgreSQL errors unwind it as they would C code, and
// an ERROR ends the launcher (the postmaster starts it again after
// bgw_restart_time).
#include "counter_ext/wall.hpp"
#include "counter_ext/worker.hpp"
#include "counter_ext/worker_shmem.hpp"

extern "C" {
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

#include <csignal>
#include <cstring>

using namespace ce::worker_shm;

namespace {

constexpr int restart_delay_s = 5;

enum Extension : int { ext_unknown = 0, ext_present, ext_absent };

struct Database {
	Oid dboid; // hash key
	bool seen;
	Extension extension;
	int slot; // -1 when no worker
	BackgroundWorkerHandle *handle;
	TimestampTz not_before;
	NameData name;
};

HTAB *databases = nullptr;

void launcher_detach(int, Datum) {
	if (shared == nullptr)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (shared->launcher_pid == MyProcPid) {
		shared->launcher_pid = 0;
		shared->launcher_latch = nullptr;
	}
	LWLockRelease(shared->lock);
}

// Marks every database of pg_database as seen (adding new ones) and forgets
// those that are gone.
void scan_databases() {
	HASH_SEQ_STATUS seq;
	Database *db;
	hash_seq_init(&seq, databases);
	while ((db = static_cast<Database *>(hash_seq_search(&seq))) != nullptr)
		db->seen = false;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	(void)GetTransactionSnapshot();
	Relation rel = table_open(DatabaseRelationId, AccessShareLock);
	TableScanDesc scan = table_beginscan_catalog(rel, 0, nullptr);
	HeapTuple tup;
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != nullptr) {
		Form_pg_database form = reinterpret_cast<Form_pg_database>(GETSTRUCT(tup));
		if (form->datistemplate || !form->datallowconn || form->datconnlimit == DATCONNLIMIT_INVALID_DB)
			continue;
		bool found = false;
		db = static_cast<Database *>(hash_search(databases, &form->oid, HASH_ENTER, &found));
		if (!found) {
			db->extension = ext_unknown;
			db->slot = -1;
			db->handle = nullptr;
			db->not_before = 0;
		}
		db->seen = true;
		db->name = form->datname;
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();

	hash_seq_init(&seq, databases);
	while ((db = static_cast<Database *>(hash_seq_search(&seq))) != nullptr) {
		if (!db->seen && db->handle == nullptr)
			(void)hash_search(databases, &db->dboid, HASH_REMOVE, nullptr);
	}
}

// Takes the nudges of CREATE EXTENSION: those databases get a worker again.
void take_nudges() {
	Oid nudged[max_nudges];
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	int n = shared->nudge_count;
	bool all = shared->nudge_overflow;
	memcpy(nudged, shared->nudges, sizeof(Oid) * static_cast<size_t>(n));
	shared->nudge_count = 0;
	shared->nudge_overflow = false;
	LWLockRelease(shared->lock);

	HASH_SEQ_STATUS seq;
	Database *db;
	hash_seq_init(&seq, databases);
	while ((db = static_cast<Database *>(hash_seq_search(&seq))) != nullptr) {
		bool hit = all;
		for (int i = 0; i < n && !hit; i++)
			hit = nudged[i] == db->dboid;
		if (hit) {
			if (db->extension == ext_absent)
				db->extension = ext_unknown;
			db->not_before = 0;
		}
	}
}

// Notices workers that ended and frees their slots.
void reap_workers() {
	HASH_SEQ_STATUS seq;
	Database *db;
	TimestampTz now = GetCurrentTimestamp();
	hash_seq_init(&seq, databases);
	while ((db = static_cast<Database *>(hash_seq_search(&seq))) != nullptr) {
		if (db->handle == nullptr)
			continue;
		pid_t pid;
		if (GetBackgroundWorkerPid(db->handle, &pid) != BGWH_STOPPED)
			continue;
		LWLockAcquire(shared->lock, LW_EXCLUSIVE);
		Slot &s = shared->slots[db->slot];
		ExitReason reason = s.reason;
		memset(&s, 0, sizeof s);
		LWLockRelease(shared->lock);
		pfree(db->handle);
		db->handle = nullptr;
		db->slot = -1;
		switch (reason) {
			case exit_no_extension:
				db->extension = ext_absent;
				break;
			case exit_disabled:
			case exit_blocked:
			case exit_role_changed:
				db->not_before = 0;
				break;
			default: // an error, a crash or a termination: start again later
				db->not_before = TimestampTzPlusMilliseconds(now, restart_delay_s * 1000);
				break;
		}
	}
}

void stop_all_workers() {
	HASH_SEQ_STATUS seq;
	Database *db;
	hash_seq_init(&seq, databases);
	while ((db = static_cast<Database *>(hash_seq_search(&seq))) != nullptr)
		if (db->handle != nullptr)
			TerminateBackgroundWorker(db->handle);
}

enum Started { started, blocked, no_room };

Started start_worker(Database *db) {
	int slot = -1;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	bool is_blocked_now = is_blocked(db->dboid);
	if (!is_blocked_now) {
		for (int i = 0; i < shared->nslots; i++) {
			if (shared->slots[i].state == slot_free) {
				slot = i;
				Slot &s = shared->slots[i];
				memset(&s, 0, sizeof s);
				s.dboid = db->dboid;
				s.state = slot_starting;
				break;
			}
		}
	}
	LWLockRelease(shared->lock);
	if (is_blocked_now)
		return blocked;
	if (slot < 0)
		return no_room;

	BackgroundWorker worker;
	memset(&worker, 0, sizeof worker);
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "counter_ext");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "counter_ext_worker_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "counter_ext worker for database %s", NameStr(db->name));
	snprintf(worker.bgw_type, BGW_MAXLEN, "counter_ext worker");
	worker.bgw_main_arg = Int32GetDatum(slot);
	worker.bgw_notify_pid = MyProcPid;
	// bgw_extra: the database name, then the role name (NAMEDATALEN each).
	static_assert(2 * NAMEDATALEN <= BGW_EXTRALEN, "names fit in bgw_extra");
	strlcpy(worker.bgw_extra, NameStr(db->name), NAMEDATALEN);
	strlcpy(worker.bgw_extra + NAMEDATALEN, ce::worker_role != nullptr ? ce::worker_role : "", NAMEDATALEN);

	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	BackgroundWorkerHandle *handle = nullptr;
	bool ok = RegisterDynamicBackgroundWorker(&worker, &handle);
	MemoryContextSwitchTo(old);
	if (!ok) {
		LWLockAcquire(shared->lock, LW_EXCLUSIVE);
		memset(&shared->slots[slot], 0, sizeof(Slot));
		LWLockRelease(shared->lock);
		return no_room;
	}
	db->handle = handle;
	db->slot = slot;
	return started;
}

void start_workers() {
	HASH_SEQ_STATUS seq;
	Database *db;
	TimestampTz now = GetCurrentTimestamp();
	bool out_of_slots = false;
	hash_seq_init(&seq, databases);
	while ((db = static_cast<Database *>(hash_seq_search(&seq))) != nullptr) {
		if (db->handle != nullptr || db->extension == ext_absent || !db->seen || now < db->not_before)
			continue;
		if (!out_of_slots && start_worker(db) == no_room)
			out_of_slots = true;
	}
	// Said once until there is room again, not every naptime.
	static bool said = false;
	if (out_of_slots && !said)
		ereport(LOG,
		        (errmsg("counter_ext launcher: more databases need a worker than there are free slots"),
		         errhint("Raise counter_ext.max_workers (now %d) or max_worker_processes.", ce::worker_max_workers)));
	said = out_of_slots;
}

void launcher_main() {
	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(nullptr, nullptr, 0);
	pgstat_report_appname("counter_ext launcher");

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	shared->launcher_pid = MyProcPid;
	shared->launcher_latch = MyLatch;
	LWLockRelease(shared->lock);
	on_shmem_exit(launcher_detach, 0);

	HASHCTL ctl;
	memset(&ctl, 0, sizeof ctl);
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(Database);
	ctl.hcxt = TopMemoryContext;
	databases = hash_create("counter_ext launcher databases", 64, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	for (;;) {
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending) {
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		reap_workers();
		if (ce::worker_enabled) {
			pgstat_report_activity(STATE_RUNNING, "counter_ext launcher: looking for databases");
			scan_databases();
			take_nudges();
			start_workers();
		} else {
			stop_all_workers();
		}
		pgstat_report_activity(STATE_IDLE,
		                       ce::worker_enabled ? "counter_ext launcher: waiting" : "counter_ext launcher: disabled");
		(void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ce::worker_naptime_s * 1000L,
		                PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

} // namespace

extern "C" {
PGDLLEXPORT void counter_ext_launcher_main(Datum);
}

extern "C" void counter_ext_launcher_main(Datum) {
	ce::boundary(launcher_main);
}
