// The worker's shared memory: one slot per per-database worker, the
// databases whose worker must stay stopped (during DROP DATABASE and other
// commands that need a database without connections), and the databases
// whose extension was just created (so the launcher starts their worker at
// once). Protected by one LWLock.
#pragma once

#include "counter_ext/pg.hpp"

extern "C" {
#include "storage/latch.h"
#include "storage/lwlock.h"
}

namespace ce::worker_shm {

enum SlotState : int { slot_free = 0, slot_starting, slot_running, slot_exited };

// Why a worker exited, when it chose to.
enum ExitReason : int { exit_unknown = 0, exit_no_extension, exit_disabled, exit_blocked, exit_role_changed };

struct Slot {
	Oid dboid;
	SlotState state;
	ExitReason reason;
	pid_t pid;
	Latch *latch;
};

struct Block {
	Oid dboid;
	int count;
};

inline constexpr int max_blocks = 32;
inline constexpr int max_nudges = 32;

struct Shared {
	LWLock *lock;
	pid_t launcher_pid;
	Latch *launcher_latch;
	int nudge_count;
	bool nudge_overflow;
	Oid nudges[max_nudges];
	Block blocks[max_blocks];
	int nslots;
	Slot slots[FLEXIBLE_ARRAY_MEMBER];
};

// NULL unless the library was preloaded (then set in every process).
extern Shared *shared;

// Whether the database's worker must stay stopped (caller holds the lock).
bool is_blocked(Oid dboid);

} // namespace ce::worker_shm
