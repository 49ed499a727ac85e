// The background worker: a launcher that shares counter_ext.max_workers
// slots by time among the databases (and owners) that have due jobs, the
// short-lived job workers it starts (each connected as one job owner), and
// the job runner those workers run, also for counter.run_jobs() and
// counter.run_job() called from a session. See doc/reference/worker.md.
#pragma once

#include "counter_ext/pg.hpp"
#include "counter_ext/locks.hpp"

extern "C" {
#include "postmaster/bgworker.h"
}

namespace ce {

// Defines the counter_ext.* worker settings; when loaded by
// shared_preload_libraries (and not under pg_upgrade), also requests the
// shared memory, installs the utility hook and registers the launcher.
void init_worker();

// Settings (see init_worker for their contexts).
extern bool worker_enabled;
extern int worker_naptime_s;
extern int worker_max_workers;
extern int history_retention_s;
extern int history_runs_per_role;

// What a job worker is started to do.
enum class JobWorkerMode : int32 {
	survey = 1,      // scheduler: read the database's jobs and report when each owner's fall due; run none
	scheduled = 2,   // scheduler: run the owner's due jobs for at most one naptime, then report
	session_due = 3, // counter.run_jobs(): run every due job of the owner, report to the caller
	session_one = 4, // counter.run_job(id): run that job now, due or not, report to the caller
};

// The arguments of a job worker, in bgw_extra.
struct JobWorkerArgs {
	Oid dboid;
	Oid owner; // InvalidOid only for a survey
	JobWorkerMode mode;
	int32 slot;    // scheduler modes: the shared-memory slot; else -1
	uint32 result; // session modes: the dsm handle of the JobResult
	int64 job_id;  // session_one
	Oid caller;    // session modes: the role that called run_jobs/run_job (for pg_stat_activity)
};
static_assert(sizeof(JobWorkerArgs) <= BGW_EXTRALEN, "job worker arguments fit in bgw_extra");

// What a job worker started by a session tells it (in a dsm segment).
struct JobResult {
	bool connected; // the worker got as far as its database and role
	bool finished;  // it ran to the end (or to a recorded failure)
	int claim;      // session_one: 0 ran, 1 busy elsewhere, 2 no such job, 3 not this owner's, 5 held (message)
	int busy_pid;
	int jobs_run;
	bool ok;
	bool rows_null;
	int64 rows;
	TimestampTz deadline; // the running job must have ended by then
	int sqlerrcode;
	char message[1024];
	char detail[1024];
	char hint[512];
	char context[1024];
};

// Starts a job worker as described (bgw_notify_pid is the caller); false when
// no background-worker slot is free.
bool start_job_worker(const JobWorkerArgs &args, const char *dbname, BackgroundWorkerHandle **handle);

// Set in a job worker process: its arguments, and where it reports.
extern const JobWorkerArgs *job_worker_args;
extern JobResult *job_worker_result; // session modes
// Scheduler modes: what the runner did (copied into the slot's report).
extern int job_worker_jobs_run;
extern bool job_worker_budget_cut;
// Publishes the deadline, job and run of the run starting now (0, 0, 0 when
// it ends).
void job_worker_set_running(int64 job_id, int64 run_id, TimestampTz deadline);

// What pg_stat_activity says of the running job, without its progress.
extern char job_worker_activity[256];

// The running job says what it does and how far it is (phase NULL:
// "working"; total -1: unknown): shown in pg_stat_activity and
// counter.running_jobs. Nothing outside a job. Owns nothing C++.
void job_progress(const char *phase, int64 done, int64 total);

// The result of a procedure with one INOUT parameter: a row of 'value',
// made in 'cxt' (the procedure's memory context at its entry).
Datum one_column_result(FunctionCallInfo fcinfo, MemoryContext cxt, Datum value, bool isnull);

} // namespace ce
