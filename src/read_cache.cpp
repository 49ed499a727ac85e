// Reads of a tracked counter without a query: the shared epochs of the
// counters' state tables and the per-backend values kept under them. The
// model, and why a kept value is what a read would find, in
// counter_ext/read_cache.hpp.
#include "counter_ext/read_cache.hpp"
#include "counter_ext/wall.hpp"

extern "C" {
#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/guc.h"
#include "utils/memutils.h"
}

#include <cstring>

namespace {

// Counters share slots by id modulo 'slots'; slot 'slots' is the global one.
constexpr int slots = 1024;

struct alignas(64) Slot {
	pg_atomic_uint64 epoch;
	pg_atomic_uint64 bound; // a FullTransactionId's value; 0 before any writer ended
	pg_atomic_uint32 inflight;
};

Slot *shared = nullptr;
bool enabled_setting = true;

shmem_request_hook_type prev_shmem_request_hook = nullptr;
shmem_startup_hook_type prev_shmem_startup_hook = nullptr;

Size shared_size() {
	return sizeof(Slot) * (slots + 1) + alignof(Slot);
}

void shmem_request() {
	if (prev_shmem_request_hook != nullptr)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(shared_size());
}

void shmem_startup() {
	if (prev_shmem_startup_hook != nullptr)
		prev_shmem_startup_hook();
	bool found = false;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	void *space = ShmemInitStruct("counter_ext read epochs", shared_size(), &found);
	shared = reinterpret_cast<Slot *>(TYPEALIGN(alignof(Slot), space));
	if (!found)
		for (int i = 0; i <= slots; i++) {
			pg_atomic_init_u64(&shared[i].epoch, 0);
			pg_atomic_init_u64(&shared[i].bound, 0);
			pg_atomic_init_u32(&shared[i].inflight, 0);
		}
	LWLockRelease(AddinShmemInitLock);
}

int slot_of(int32 counter) {
	return counter >= 0 ? counter % slots : slots;
}

// The slots this transaction noted (note_write); past 'noted_max' it notes
// the global slot instead, which every read checks.
constexpr int noted_max = 16;
int noted[noted_max + 1];
int noted_count = 0;

void note_slot(int s) {
	for (int i = 0; i < noted_count; i++)
		if (noted[i] == s)
			return;
	if (noted_count == noted_max) {
		s = slots; // the global slot: every read checks it
		for (int i = 0; i < noted_count; i++)
			if (noted[i] == s)
				return;
	}
	noted[noted_count++] = s;
	pg_atomic_fetch_add_u32(&shared[s].inflight, 1);
	pg_atomic_fetch_add_u64(&shared[s].epoch, 1);
}

// The writer's end, after it is visible (XACT_EVENT_COMMIT comes after
// ProcArrayEndTransaction) or undone: the bound first (the next xid is above
// every xid of this transaction and its subtransactions), then the epoch,
// then the count in flight, so a read that sees the count drop sees the rest.
// An aborted writer is visible to no snapshot: its bound is not needed.
void end_writes(bool committed) {
	if (noted_count == 0)
		return;
	uint64 bound = committed ? U64FromFullTransactionId(ReadNextFullTransactionId()) : 0;
	for (int i = 0; i < noted_count; i++) {
		Slot &s = shared[noted[i]];
		uint64 old = pg_atomic_read_u64(&s.bound);
		while (old < bound && !pg_atomic_compare_exchange_u64(&s.bound, &old, bound)) {
		}
		pg_atomic_fetch_add_u64(&s.epoch, 1);
		pg_atomic_fetch_sub_u32(&s.inflight, 1);
	}
	noted_count = 0;
}

// Logical replication's apply and table synchronization (and any other
// background worker: pglogical's apply, a scheduler's job) may write a
// counter's tables without firing its statement trigger: a background
// worker's transaction that wrote anything counts, before it commits, as a
// writer of every counter (the global slot). Not counter_ext's own job
// workers: they write through SQL, whose statements fire the trigger.
void note_background_writer() {
	if (MyBackendType != B_BG_WORKER || !TransactionIdIsValid(GetTopTransactionIdIfAny()))
		return;
	if (MyBgworkerEntry != nullptr && strcmp(MyBgworkerEntry->bgw_library_name, "counter_ext") == 0)
		return;
	note_slot(slots);
}

void xact_callback(XactEvent event, void *) {
	switch (event) {
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PRE_PREPARE:
			note_background_writer();
			break;
		case XACT_EVENT_COMMIT:
		// Prepared: its xids are below the bound, so until COMMIT PREPARED
		// (in any backend) every snapshot's xmin is at most its xid, and
		// nothing is kept or given (settled); after it, it is visible to
		// every snapshot whose xmin passed the bound.
		case XACT_EVENT_PREPARE:
			end_writes(true);
			break;
		case XACT_EVENT_ABORT:
			end_writes(false);
			break;
		default:
			break;
	}
}

bool enabled() {
	return shared != nullptr && enabled_setting && !RecoveryInProgress();
}

// The global bound starts at the next xid when the first read after the
// server started (or was promoted) looks: every transaction of before, a
// prepared one that wrote and is committed only now among them, is then
// below it, so nothing read under a snapshot that may not see it is kept.
void start_bound() {
	pg_atomic_uint64 *bound = &shared[slots].bound;
	uint64 zero = 0;
	if (pg_atomic_read_u64(bound) == 0)
		pg_atomic_compare_exchange_u64(bound, &zero, U64FromFullTransactionId(ReadNextFullTransactionId()));
}

// Whether every xid below 'bound' (a FullTransactionId's value) is finished
// for 'snapshot'. A bound more than 2^31 xids old compares as later than any
// xmin: a miss, never a wrong hit (a bound is never later than the next xid).
bool below_xmin(uint64 bound, Snapshot snapshot) {
	return TransactionIdPrecedesOrEquals(XidFromFullTransactionId(FullTransactionIdFromU64(bound)), snapshot->xmin);
}

// Nothing in flight, the epochs as kept, every ended writer finished for
// 'snapshot'. Reads the counts first: a writer ends by bumping the epoch
// before it drops its count.
bool settled(int32 counter, uint64 epoch, uint64 global, Snapshot snapshot) {
	const Slot &s = shared[slot_of(counter)];
	const Slot &g = shared[slots];
	if (pg_atomic_read_u32(const_cast<pg_atomic_uint32 *>(&s.inflight)) != 0 ||
	    pg_atomic_read_u32(const_cast<pg_atomic_uint32 *>(&g.inflight)) != 0)
		return false;
	pg_read_barrier();
	if (pg_atomic_read_u64(const_cast<pg_atomic_uint64 *>(&s.epoch)) != epoch ||
	    pg_atomic_read_u64(const_cast<pg_atomic_uint64 *>(&g.epoch)) != global)
		return false;
	for (const Slot *x : {&s, &g})
		if (!below_xmin(pg_atomic_read_u64(const_cast<pg_atomic_uint64 *>(&x->bound)), snapshot))
			return false;
	return true;
}

bool mvcc(Snapshot snapshot) {
	return snapshot != nullptr && snapshot->snapshot_type == SNAPSHOT_MVCC && TransactionIdIsNormal(snapshot->xmin);
}

// The values kept: direct-mapped by a hash of (counter, key image), so
// bounded with nothing to evict (a newer value takes the place).
constexpr int kept_slots = 1024;

struct Kept {
	bool used;
	int32 counter;
	uint64 epoch;
	uint64 global;
	int64 value;
	ce::buffer::Image image;
};
Kept *kept = nullptr;
ce::read_cache::Stats counts{0, 0};

Kept &kept_of(int32 counter, const ce::buffer::Image &image) {
	uint32 h = hash_bytes_extended(reinterpret_cast<const unsigned char *>(image.bytes), image.len,
	                               static_cast<uint64>(counter));
	return kept[h % kept_slots];
}

bool same(const Kept &k, int32 counter, const ce::buffer::Image &image) {
	return k.used && k.counter == counter && k.image.len == image.len &&
	       memcmp(k.image.bytes, image.bytes, image.len) == 0;
}

} // namespace

namespace ce::read_cache {

void init() {
	DefineCustomBoolVariable("counter_ext.read_cache",
	                         "Whether counter.value may give a key's table part kept from an earlier read.",
	                         "Only while no writer of the counter's tables started or ended since that read "
	                         "(doc/reference/tracked.md, \"How a read works\"); off reads the tables every time.",
	                         &enabled_setting, true, PGC_SUSET, 0, nullptr, nullptr, nullptr);
	if (!process_shared_preload_libraries_in_progress || IsBinaryUpgrade)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = ce::entry<shmem_request>;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = ce::entry<shmem_startup>;
	RegisterXactCallback(ce::entry<xact_callback>, nullptr);
}

void note_write(int32 counter) {
	if (shared != nullptr)
		note_slot(slot_of(counter));
}

Stamp stamp(int32 counter) {
	Stamp s{0, 0, false};
	if (!enabled())
		return s;
	start_bound();
	s.epoch = pg_atomic_read_u64(&shared[slot_of(counter)].epoch);
	s.global = pg_atomic_read_u64(&shared[slots].epoch);
	s.usable = true;
	return s;
}

bool lookup(int32 counter, const ce::buffer::Image &image, Snapshot snapshot, uint64 fence, int64 *value) {
	if (kept == nullptr || !enabled() || !mvcc(snapshot))
		return false;
	const Kept &k = kept_of(counter, image);
	if (!same(k, counter, image) || !below_xmin(fence, snapshot) || !settled(counter, k.epoch, k.global, snapshot)) {
		counts.misses++;
		return false;
	}
	counts.hits++;
	*value = k.value;
	return true;
}

void store(int32 counter, const ce::buffer::Image &image, const Stamp &before, Snapshot snapshot, uint64 fence,
           int64 value) {
	if (!before.usable || !enabled() || !mvcc(snapshot) || !below_xmin(fence, snapshot))
		return;
	pg_memory_barrier(); // the table's read before the checks
	if (!settled(counter, before.epoch, before.global, snapshot))
		return;
	if (kept == nullptr)
		kept = static_cast<Kept *>(
		    ce::pg_guard([] { return MemoryContextAllocZero(TopMemoryContext, sizeof(Kept) * kept_slots); }));
	Kept &k = kept_of(counter, image);
	k.used = true;
	k.counter = counter;
	k.epoch = before.epoch;
	k.global = before.global;
	k.value = value;
	k.image.len = image.len;
	memcpy(k.image.bytes, image.bytes, image.len);
}

void forget() {
	if (kept != nullptr)
		for (int i = 0; i < kept_slots; i++)
			kept[i].used = false;
}

Stats stats() {
	return counts;
}

} // namespace ce::read_cache
