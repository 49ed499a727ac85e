// The background worker: a launcher that starts one worker per database
// where counter_ext is installed, and the job runner those workers (and
// counter.run_jobs()) share. See doc/reference/worker.md.
#pragma once

#include "counter_ext/pg.hpp"

namespace ce {

// Defines the counter_ext.* worker settings; when loaded by
// shared_preload_libraries (and not under pg_upgrade), also requests the
// shared memory, installs the utility hook and registers the launcher.
void init_worker();

// Settings (see init_worker for their contexts).
extern bool worker_enabled;
extern int worker_naptime_s;
extern int worker_max_workers;
extern char *worker_role;
extern int history_retention_s;

// True in a per-database worker process: the job runner then reports each
// job in pg_stat_activity and records its runs as runner 'worker'.
extern bool in_database_worker;

// The first key of the two-int advisory locks on jobs ('cejb'); the second
// is the job id modulo 2^31.
inline constexpr int32 job_lock_class = 0x63656a62;

} // namespace ce
