// The worker's shared memory: one slot per job worker the launcher may run at
// once (counter_ext.max_workers), what each worker reports back when it ends
// (the due times of the database's jobs, per owner), the databases whose
// workers must stay stopped (during DROP DATABASE and other commands that
// need a database without connections), and the nudges of sessions that just
// created the extension or registered a job. Protected by one LWLock.
#pragma once

#include "counter_ext/pg.hpp"

extern "C" {
#include "storage/latch.h"
#include "storage/lwlock.h"
}

namespace ce::worker_shm {

enum SlotState : int { slot_free = 0, slot_starting, slot_running, slot_exited };

// Why a worker exited, when it chose to.
enum ExitReason : int { exit_unknown = 0, exit_done, exit_no_extension, exit_disabled, exit_blocked };

// The next due time of one owner's jobs in a database.
struct OwnerDue {
	Oid owner;
	TimestampTz due;
};

inline constexpr int report_owners = 8;

// What a worker leaves in its slot when it ends: the earliest-due owners of
// its database (at most report_owners), and when the rest fall due.
struct Report {
	int nowners;
	bool more;            // more owners than fit: look again at more_due
	TimestampTz more_due; // 0 = none
	bool budget_cut;      // it stopped before running every due job of its owner
	int jobs_run;
	OwnerDue owners[report_owners];
};

struct Slot {
	Oid dboid;
	Oid owner; // InvalidOid: a survey (reads the database's jobs, runs none)
	SlotState state;
	ExitReason reason;
	pid_t pid;
	Latch *latch;
	TimestampTz deadline; // the running job must have ended by then, or the launcher stops the worker
	int64 job_id;         // the job running now (0 when none)
	Report report;
};

struct Block {
	Oid dboid;
	int count;
};

// A session's word to the launcher: database dboid has work of 'owner' due
// at 'due' (owner InvalidOid: look at the database, it just got the extension).
struct Nudge {
	Oid dboid;
	Oid owner;
	TimestampTz due;
};

// The progress of a job running now, as its code reports it with
// counter.job_progress (one entry per running job of any job worker).
struct Progress {
	pid_t pid; // 0: free
	int64 job_id;
	int64 run_id;
	TimestampTz started;       // the run's start
	char phase[64];            // what it does now
	TimestampTz phase_started; // when that phase began
	int64 done;
	int64 total; // -1 when unknown
	TimestampTz updated;
};

inline constexpr int max_blocks = 32;
inline constexpr int max_nudges = 64;

struct Shared {
	LWLock *lock;
	pid_t launcher_pid;
	Latch *launcher_latch;
	int nudge_count;
	bool nudge_overflow;
	Nudge nudges[max_nudges];
	Block blocks[max_blocks];
	bool slot_wanted;     // a due (database, owner) pair found no free slot: lingering workers leave (worker_db.cpp)
	int nprogress;        // 2 x nslots: the scheduler's workers and as many started by sessions
	Size progress_offset; // from the start of Shared
	int nslots;
	Slot slots[FLEXIBLE_ARRAY_MEMBER];
};

// NULL unless the library was preloaded (then set in every process).
extern Shared *shared;

inline Progress *progress_entry(int i) {
	return reinterpret_cast<Progress *>(reinterpret_cast<char *>(shared) + shared->progress_offset) + i;
}

// Whether the database's workers must stay stopped (caller holds the lock).
bool is_blocked(Oid dboid);

// Queues a nudge and wakes the launcher (takes the lock).
void nudge_launcher(Oid dboid, Oid owner, TimestampTz due);

} // namespace ce::worker_shm

namespace ce {
// Fills r with when each owner's enabled jobs of this database fall due next
// (the runner's bookkeeping, in worker_jobs.cpp; inside a transaction with
// SPI connected).
void job_report_due(worker_shm::Report *r);
} // namespace ce
