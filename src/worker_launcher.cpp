// The launcher: connected to no database, it shares counter_ext.max_workers
// slots by time among the databases that have due jobs, as autovacuum's
// launcher shares autovacuum_max_workers.
//
// For each database it keeps the next due time of each job owner's jobs,
// learned from the database's own workers: a worker reports, when it ends,
// when every owner's jobs fall due next. A database it knows nothing about
// (at start, after CREATE EXTENSION) gets a survey: a short worker that reads
// counter.jobs, runs nothing and reports; a database without the extension
// ends its survey at once and is left alone until CREATE EXTENSION
// counter_ext commits there (the utility hook nudges the launcher) or the
// server restarts. counter.job_register and counter.job_alter nudge the
// launcher at commit with the owner and due time of the job they changed.
// A change made behind their back (an UPDATE of counter.jobs) is seen at the
// next survey, at most resurvey_naptimes naptimes later.
//
// When an owner's jobs are due, the launcher starts a worker for that
// database connected as that owner; it runs the due jobs (starting none
// after one naptime), reports and exits, or stays for the owner's next jobs
// when they fall due within one naptime and no other pair waits for a slot
// (worker_db.cpp, linger: slot_wanted tells it to go). The due (database, owner) pairs are
// served oldest due first; a worker that stopped on its time budget puts its
// owner back in the queue as due now, behind everything already waiting. So
// idle databases hold no slot, and a due job starts within
//     naptime + ceil(due pairs / max_workers) x (naptime + longest job timeout + grace)
// (doc/reference/worker.md). A job that outlives its timeout by
// deadline_grace_s (its statement timeout is the first line of defence) gets
// its worker terminated.
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

constexpr int resurvey_naptimes = 30;
constexpr int deadline_grace_s = 5;
constexpr int max_backoff_s = 300;
constexpr int max_pairs = 32;

enum Extension : int { ext_unknown = 0, ext_present, ext_absent };

struct Pair {
	Oid owner;
	TimestampTz due;
	TimestampTz not_before; // after a failed worker
	int failures;
};

struct Database {
	Oid dboid; // hash key
	bool seen;
	Extension extension;
	NameData name;
	TimestampTz survey_at; // 0: as soon as possible
	TimestampTz not_before;
	int failures;
	int npairs;
	Pair pairs[max_pairs];
	uint64 nudges; // how many nudges it had
};

HTAB *databases = nullptr;
BackgroundWorkerHandle **handles = nullptr; // per slot
uint64 *started_at_nudge = nullptr;         // per slot: the database's nudge count when its worker started
TimestampTz last_scan = 0;

TimestampTz later(TimestampTz t, long ms) {
	return TimestampTzPlusMilliseconds(t, ms);
}

long backoff_ms(int failures) {
	long s = static_cast<long>(ce::worker_naptime_s) << (failures < 8 ? failures : 8);
	return (s > max_backoff_s ? max_backoff_s : s) * 1000L;
}

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

Pair *find_pair(Database *db, Oid owner, bool add) {
	for (int i = 0; i < db->npairs; i++)
		if (db->pairs[i].owner == owner)
			return &db->pairs[i];
	if (!add)
		return nullptr;
	if (db->npairs == max_pairs) {
		db->survey_at = 0; // no room to remember: a survey will tell
		return nullptr;
	}
	Pair *p = &db->pairs[db->npairs++];
	memset(p, 0, sizeof *p);
	p->owner = owner;
	p->due = DT_NOEND;
	return p;
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
			db->survey_at = 0;
			db->not_before = 0;
			db->failures = 0;
			db->npairs = 0;
			db->nudges = 0;
		}
		db->seen = true;
		db->name = form->datname;
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();

	hash_seq_init(&seq, databases);
	while ((db = static_cast<Database *>(hash_seq_search(&seq))) != nullptr) {
		bool busy = false;
		for (int i = 0; i < shared->nslots && !busy; i++)
			busy = handles[i] != nullptr && shared->slots[i].dboid == db->dboid;
		if (!db->seen && !busy)
			(void)hash_search(databases, &db->dboid, HASH_REMOVE, nullptr);
	}
}

// Takes the nudges of CREATE EXTENSION and of job changes.
void take_nudges() {
	Nudge nudged[max_nudges];
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	int n = shared->nudge_count;
	bool all = shared->nudge_overflow;
	memcpy(nudged, shared->nudges, sizeof(Nudge) * static_cast<size_t>(n));
	shared->nudge_count = 0;
	shared->nudge_overflow = false;
	LWLockRelease(shared->lock);

	for (int i = 0; i < n; i++) {
		bool found = false;
		Database *db = static_cast<Database *>(hash_search(databases, &nudged[i].dboid, HASH_FIND, &found));
		if (db == nullptr)
			continue; // a new database: the next scan adds it, unknown, so it is surveyed
		db->nudges++;
		if (!OidIsValid(nudged[i].owner)) {
			db->extension = ext_unknown;
			db->survey_at = 0;
			db->not_before = 0;
			continue;
		}
		if (db->extension == ext_absent)
			db->extension = ext_unknown;
		Pair *p = find_pair(db, nudged[i].owner, true);
		if (p != nullptr)
			p->due = Min(p->due, nudged[i].due);
	}
	if (all) {
		HASH_SEQ_STATUS seq;
		Database *db;
		hash_seq_init(&seq, databases);
		while ((db = static_cast<Database *>(hash_seq_search(&seq))) != nullptr) {
			if (db->extension == ext_absent)
				db->extension = ext_unknown;
			db->survey_at = 0;
			db->nudges++;
		}
	}
}

// What a worker that ended reported about its database.
void take_report(Database *db, const Slot &s, TimestampTz now) {
	const Report &r = s.report;
	db->extension = ext_present;
	db->failures = 0;
	db->not_before = 0;
	// The report is the whole truth about the owners it lists and those it
	// does not (they have no enabled job), except owners whose worker runs now.
	Pair kept[max_pairs];
	int nkept = 0;
	for (int i = 0; i < db->npairs; i++) {
		bool running = false;
		for (int k = 0; k < shared->nslots && !running; k++)
			running = handles[k] != nullptr && shared->slots[k].dboid == db->dboid &&
			          shared->slots[k].owner == db->pairs[i].owner;
		if (running)
			kept[nkept++] = db->pairs[i];
	}
	db->npairs = 0;
	for (int i = 0; i < nkept; i++)
		db->pairs[db->npairs++] = kept[i];
	for (int i = 0; i < r.nowners; i++) {
		Pair *p = find_pair(db, r.owners[i].owner, true);
		if (p != nullptr) {
			p->due = r.owners[i].due;
			if (r.owners[i].owner == s.owner) {
				p->failures = 0;
				p->not_before = 0;
			}
		}
	}
	if (OidIsValid(s.owner) && r.budget_cut) {
		// Its turn is over: back in the queue behind what already waits.
		Pair *p = find_pair(db, s.owner, true);
		if (p != nullptr)
			p->due = Min(p->due, now);
	}
	TimestampTz next_survey = later(now, static_cast<long>(resurvey_naptimes) * ce::worker_naptime_s * 1000L);
	db->survey_at = r.more && r.more_due != 0 ? Min(r.more_due, next_survey) : next_survey;
}

// Notices workers that ended, frees their slots and takes their reports.
void reap_workers() {
	TimestampTz now = GetCurrentTimestamp();
	for (int i = 0; i < shared->nslots; i++) {
		if (handles[i] == nullptr)
			continue;
		pid_t pid;
		if (GetBackgroundWorkerPid(handles[i], &pid) != BGWH_STOPPED)
			continue;
		LWLockAcquire(shared->lock, LW_EXCLUSIVE);
		Slot s = shared->slots[i];
		memset(&shared->slots[i], 0, sizeof(Slot));
		LWLockRelease(shared->lock);
		pfree(handles[i]);
		handles[i] = nullptr;

		bool found = false;
		Database *db = static_cast<Database *>(hash_search(databases, &s.dboid, HASH_FIND, &found));
		if (db == nullptr)
			continue;
		// A nudge that came while the worker ran may be newer than what it
		// saw (CREATE EXTENSION, a job registered after its report was read):
		// the database is surveyed again at once.
		bool nudged_since = db->nudges != started_at_nudge[i];
		switch (s.reason) {
			case exit_done:
				take_report(db, s, now);
				break;
			case exit_no_extension:
				if (!nudged_since) {
					db->extension = ext_absent;
					db->npairs = 0;
				}
				break;
			case exit_disabled:
			case exit_blocked:
				break;
			default: { // an error, a crash, a termination, a role that cannot connect: try later
				if (!OidIsValid(s.owner)) {
					db->failures++;
					db->not_before = later(now, backoff_ms(db->failures));
				} else {
					Pair *p = find_pair(db, s.owner, true);
					if (p != nullptr) {
						p->failures++;
						p->not_before = later(now, backoff_ms(p->failures));
					}
				}
				break;
			}
		}
		if (nudged_since) {
			if (db->extension == ext_absent)
				db->extension = ext_unknown;
			db->survey_at = 0;
		}
	}
}

// A job that outlived its deadline: its worker is stopped (the run is marked
// failed by the database's next worker).
void enforce_deadlines() {
	TimestampTz now = GetCurrentTimestamp();
	for (int i = 0; i < shared->nslots; i++) {
		if (handles[i] == nullptr)
			continue;
		LWLockAcquire(shared->lock, LW_SHARED);
		TimestampTz deadline = shared->slots[i].deadline;
		int64 job_id = shared->slots[i].job_id;
		pid_t pid = shared->slots[i].pid;
		LWLockRelease(shared->lock);
		if (deadline == 0 || now < later(deadline, deadline_grace_s * 1000L))
			continue;
		ereport(LOG, (errmsg("counter_ext launcher: job %lld outlived its timeout by %d s; its worker (pid %d) is "
		                     "stopped",
		                     static_cast<long long>(job_id), deadline_grace_s, static_cast<int>(pid))));
		TerminateBackgroundWorker(handles[i]);
		LWLockAcquire(shared->lock, LW_EXCLUSIVE);
		shared->slots[i].deadline = 0;
		LWLockRelease(shared->lock);
	}
}

void stop_all_workers() {
	for (int i = 0; i < shared->nslots; i++)
		if (handles[i] != nullptr)
			TerminateBackgroundWorker(handles[i]);
}

struct Candidate {
	Database *db;
	Oid owner; // InvalidOid: a survey
	TimestampTz due;
};

int by_due(const void *a, const void *b) {
	const Candidate *x = static_cast<const Candidate *>(a);
	const Candidate *y = static_cast<const Candidate *>(b);
	if (x->due != y->due)
		return x->due < y->due ? -1 : 1;
	if (x->db->dboid != y->db->dboid)
		return x->db->dboid < y->db->dboid ? -1 : 1;
	return x->owner < y->owner ? -1 : (x->owner > y->owner ? 1 : 0);
}

bool worker_running(Oid dboid, Oid owner, bool any_owner) {
	for (int i = 0; i < shared->nslots; i++)
		if (handles[i] != nullptr && shared->slots[i].dboid == dboid && (any_owner || shared->slots[i].owner == owner))
			return true;
	return false;
}

enum Started { started, blocked, no_room };

Started start_worker(Database *db, Oid owner) {
	int slot = -1;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	bool is_blocked_now = is_blocked(db->dboid);
	if (!is_blocked_now) {
		for (int i = 0; i < shared->nslots; i++) {
			if (shared->slots[i].state == slot_free && handles[i] == nullptr) {
				slot = i;
				Slot &s = shared->slots[i];
				memset(&s, 0, sizeof s);
				s.dboid = db->dboid;
				s.owner = owner;
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

	ce::JobWorkerArgs args;
	memset(&args, 0, sizeof args);
	args.dboid = db->dboid;
	args.owner = owner;
	args.mode = OidIsValid(owner) ? ce::JobWorkerMode::scheduled : ce::JobWorkerMode::survey;
	args.slot = slot;
	BackgroundWorkerHandle *handle = nullptr;
	if (!ce::start_job_worker(args, NameStr(db->name), &handle)) {
		LWLockAcquire(shared->lock, LW_EXCLUSIVE);
		memset(&shared->slots[slot], 0, sizeof(Slot));
		LWLockRelease(shared->lock);
		return no_room;
	}
	handles[slot] = handle;
	started_at_nudge[slot] = db->nudges;
	return started;
}

// Starts workers for the oldest due work while slots are free; returns when
// the launcher should look again (at the latest one naptime from now).
TimestampTz start_workers() {
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz wake = later(now, ce::worker_naptime_s * 1000L);
	int capacity = 64;
	int n = 0;
	Candidate *c = static_cast<Candidate *>(palloc(sizeof(Candidate) * capacity));
	HASH_SEQ_STATUS seq;
	Database *db;
	hash_seq_init(&seq, databases);
	while ((db = static_cast<Database *>(hash_seq_search(&seq))) != nullptr) {
		if (!db->seen || db->extension == ext_absent)
			continue;
		if (now < db->not_before) {
			wake = Min(wake, db->not_before);
			continue;
		}
		bool busy = worker_running(db->dboid, InvalidOid, true);
		for (int i = -1; i < db->npairs; i++) {
			Candidate cand{db, InvalidOid, 0};
			if (i < 0) {
				// A survey: for an unknown database, or when one is due and no
				// worker of the database runs (its report would tell as much).
				if (busy || (db->extension != ext_unknown && db->survey_at > now)) {
					if (!busy)
						wake = Min(wake, db->survey_at);
					continue;
				}
				cand.due = db->survey_at;
			} else {
				Pair &p = db->pairs[i];
				if (db->extension == ext_unknown || worker_running(db->dboid, p.owner, false))
					continue;
				TimestampTz at = Max(p.due, p.not_before);
				if (at > now) {
					wake = Min(wake, at);
					continue;
				}
				cand.owner = p.owner;
				cand.due = p.due;
			}
			if (n == capacity) {
				capacity *= 2;
				c = static_cast<Candidate *>(repalloc(c, sizeof(Candidate) * capacity));
			}
			c[n++] = cand;
		}
	}
	qsort(c, static_cast<size_t>(n), sizeof(Candidate), by_due);
	bool out_of_slots = false;
	for (int i = 0; i < n; i++) {
		// One survey or owner worker per database at a time for surveys.
		if (!OidIsValid(c[i].owner) && worker_running(c[i].db->dboid, InvalidOid, true))
			continue;
		Started got = start_worker(c[i].db, c[i].owner);
		if (got == no_room) {
			out_of_slots = true;
			break;
		}
	}
	pfree(c);
	// A pair left waiting: the workers that linger for their owner's next
	// jobs leave, and their slots go to the oldest due.
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	shared->slot_wanted = out_of_slots;
	if (out_of_slots)
		for (int i = 0; i < shared->nslots; i++)
			if (shared->slots[i].state == slot_running && shared->slots[i].latch != nullptr)
				SetLatch(shared->slots[i].latch);
	LWLockRelease(shared->lock);
	// Said once until every due database had a slot again, not every pass.
	static bool said = false;
	if (out_of_slots && !said)
		ereport(LOG,
		        (errmsg("counter_ext launcher: more databases have due jobs than there are slots; they take turns"),
		         errhint("counter_ext.max_workers is %d.", ce::worker_max_workers)));
	said = out_of_slots;
	return wake;
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
	// Slots of a launcher that died are stale: their workers are gone with
	// it (a job worker whose launcher dies keeps running, but is not ours).
	for (int i = 0; i < shared->nslots; i++)
		memset(&shared->slots[i], 0, sizeof(Slot));
	LWLockRelease(shared->lock);
	on_shmem_exit(launcher_detach, 0);

	HASHCTL ctl;
	memset(&ctl, 0, sizeof ctl);
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(Database);
	ctl.hcxt = TopMemoryContext;
	databases = hash_create("counter_ext launcher databases", 64, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	handles = static_cast<BackgroundWorkerHandle **>(
	    MemoryContextAllocZero(TopMemoryContext, sizeof(BackgroundWorkerHandle *) * shared->nslots));
	started_at_nudge = static_cast<uint64 *>(MemoryContextAllocZero(TopMemoryContext, sizeof(uint64) * shared->nslots));
	MemoryContext pass = AllocSetContextCreate(TopMemoryContext, "counter_ext launcher pass", ALLOCSET_SMALL_SIZES);

	for (;;) {
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending) {
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		MemoryContext old = MemoryContextSwitchTo(pass);
		reap_workers();
		TimestampTz now = GetCurrentTimestamp();
		TimestampTz wake = later(now, ce::worker_naptime_s * 1000L);
		if (ce::worker_enabled) {
			if (last_scan == 0 || now >= later(last_scan, ce::worker_naptime_s * 1000L)) {
				pgstat_report_activity(STATE_RUNNING, "counter_ext launcher: looking for databases");
				scan_databases();
				last_scan = now;
			}
			take_nudges();
			enforce_deadlines();
			wake = start_workers();
		} else {
			stop_all_workers();
		}
		MemoryContextSwitchTo(old);
		MemoryContextReset(pass);
		pgstat_report_activity(STATE_IDLE,
		                       ce::worker_enabled ? "counter_ext launcher: waiting" : "counter_ext launcher: disabled");
		long sleep_ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), wake);
		// Deadlines are checked at least once a second while workers run.
		bool any = false;
		for (int i = 0; i < shared->nslots && !any; i++)
			any = handles[i] != nullptr;
		if (any && sleep_ms > 1000)
			sleep_ms = 1000;
		if (sleep_ms < 1)
			sleep_ms = 1;
		(void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, sleep_ms, PG_WAIT_EXTENSION);
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
