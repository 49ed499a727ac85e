// Buffered counters: the shared table, the transaction's own adds, publish
// at commit, claims of a flush. See counter_ext/buffer.hpp for the model.
//
// Why publish at XACT_EVENT_COMMIT (after the commit record is flushed and
// the transaction is visible) and not at PRE_COMMIT: an amount must reach
// the shared table only if the transaction commits, and PRE_COMMIT comes
// before steps that can still abort it (serialization failures of
// SERIALIZABLE, NOTIFY queue full, deferred work of other modules). The
// price is a window between the moment the rows are visible and the moment
// the amount is published: a reader in that window misses the amount for a
// moment, a crash in that window loses it (as it loses anything published
// and not yet flushed: the restart is detected and repaired, see
// counter.flush), and reconciliation treats a key whose adds are pinned
// (added, not yet published) as busy, so it never installs a truth that
// counts rows whose amounts are still on their way.
#include "counter_ext/buffer.hpp"
#include "counter_ext/compat.hpp"
#include "counter_ext/wall.hpp"
#include "counter_ext/worker_shmem.hpp"

extern "C" {
#include "access/parallel.h"
#include "access/transam.h"
#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <unordered_map>

namespace ce::buffer {
int flush_interval_ms = 1000;
int buffer_entries = 16384;
} // namespace ce::buffer

namespace {

using ce::buffer::Amount;
using ce::buffer::bucket_slots;
using ce::buffer::Image;
using ce::buffer::max_key_bytes;

constexpr int partitions = 64;    // a power of 2 (dynahash partitions)
constexpr uint32 list_count = 64; // a power of 2 (lists of changed entries)

// Shares of the table (doc/reference/tracked.md, "Shares of the shared
// table"). Every entry counts against the (database, owner of its counter)
// that made it, in one of owner_slots shares. A quarter of the table is
// reserved: each share has reserve() entries nobody else can take. The
// rest is common room, of which one share takes at most a quarter (cap()).
// An owner at its cap, or whose entries are not flushed, falls back to the
// direct path alone; others keep their reserve and the common room.
constexpr int owner_slots = 128;

struct EntryKey {
	Oid db;
	int32 counter;
	uint16 len;
	char image[max_key_bytes];
};

// The hash of an entry key: its bytes up to the end of the image (make_key
// zeroes the rest, so equal keys, equal over all their bytes as dynahash
// compares them, hash alike). A bigint key hashes 18 bytes, not 76.
uint32 entry_hash(const void *key, Size) {
	const auto *k = static_cast<const EntryKey *>(key);
	return hash_bytes(reinterpret_cast<const unsigned char *>(k), static_cast<int>(offsetof(EntryKey, image) + k->len));
}

// Amounts are kept with a mark of their own, because amounts cancel: a +1
// and a -1 of two transactions sum to 0, and "0 pending" must not read as
// "nothing pending" to reconciliation (one of the two may be visible to its
// snapshot and the other not).
struct Written {
	bool active;
	int64 amount;
	TransactionId xid;
};

// A hot key (doc/reference/tracked.md, "A hot key"): what adders write to
// an entry is spread over 'stripes' lanes, one cache line each, and a
// backend writes only the lane of its stripe (its process number modulo
// stripes), so backends adding to one key meet on one line only when they
// share a stripe. A lane holds, for each bucket slot of the entry:
//   pending    published amounts no flush has claimed (int64, two's
//              complement, saturating);
//   pins       transactions of this stripe that added to the slot and have
//              not ended;
//   publishes  publications in 'pending' (see Written), held at UINT32_MAX
//              rather than wrapping to 0.
// A slot's pending amount, pins and publications are the sums over lanes.
constexpr int stripes = 8; // a power of 2
constexpr size_t line_bytes = 64;

struct Lane {
	pg_atomic_uint64 pending[bucket_slots];
	pg_atomic_uint32 pins[bucket_slots];
	pg_atomic_uint32 publishes[bucket_slots];
};
static_assert(sizeof(Lane) <= line_bytes, "a lane is one cache line");

// The bucket of a slot no add may take: set when a flush frees the slot.
constexpr int64 no_bucket = PG_INT64_MIN;

struct Slot {
	bool used;
	int64 bucket; // no_bucket when not used
	bool inflight_active;
	int64 inflight;
	uint64 inflight_publishes;
	TransactionId inflight_xid;
	Written written[2]; // [0] older, [1] newer
};

struct Entry {
	EntryKey key; // first: dynahash copies and compares it
	int share;    // the share this entry counts against
	// Which life of this memory the entry is (unique, never 0; 0 once it is
	// removed): a backend's cached pointer to it is good while it matches.
	pg_atomic_uint64 gen;
	// On its counter's list of changed entries (see "Lists of changed
	// entries" below): 1 while it is on a list or taken from one by a claim,
	// and an entry is removed only while 0. next_listed is the list's link,
	// written by whoever set 'listed'.
	pg_atomic_uint32 listed;
	Entry *next_listed;
	Slot slots[bucket_slots];
	char lane_space[(stripes + 1) * line_bytes]; // stripes lanes, line-aligned
};

Lane *lanes(Entry *e) {
	return reinterpret_cast<Lane *>(TYPEALIGN(line_bytes, e->lane_space));
}

// A (database, owner) share. Assigned under the share lock (exclusive);
// 'entries' moves by atomics, and a share is given to another owner only
// when it has no entries, so a reservation (entries > 0) keeps it.
struct Share {
	Oid db;
	Oid owner;
	pg_atomic_uint32 entries;
	pg_atomic_uint64 overflows;
	pg_atomic_uint32 flush_asked;   // 1 from a pressed commit's nudge until the owner's job worker takes it
	pg_atomic_uint64 early_flushes; // asks its owner's job worker took (take_flush_ask)
};

struct Shared {
	TimestampTz epoch;
	pg_atomic_uint64 overflows; // adds that found no share at all
	pg_atomic_uint32 common_used;
	pg_atomic_uint64 next_gen;   // the next entry's gen
	pg_atomic_uint64 last_sweep; // when a claim last swept (a TimestampTz)
	uint32 reserve;              // entries each share has for itself
	uint32 common;               // entries beyond the reserves
	uint32 cap;                  // entries one share may hold
	LWLockPadded *locks;
	LWLockPadded *share_locks;
	LWLockPadded *stripe_locks;
	Share shares[owner_slots];
	pg_atomic_uint64 lists[list_count]; // heads of the lists of changed entries (an Entry *)
};

Shared *shared = nullptr;
HTAB *table = nullptr;
ce::buffer::DirectWriter direct_writer = nullptr;

shmem_request_hook_type prev_shmem_request_hook = nullptr;
shmem_startup_hook_type prev_shmem_startup_hook = nullptr;

Size table_size() {
	return add_size(MAXALIGN(sizeof(Shared)),
	                hash_estimate_size(static_cast<long>(ce::buffer::buffer_entries), sizeof(Entry)));
}

void shmem_request() {
	if (prev_shmem_request_hook != nullptr)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(table_size());
	// the partitions, the share lock, the stripe locks
	RequestNamedLWLockTranche("counter_ext buffer", partitions);
	RequestNamedLWLockTranche("counter_ext buffer shares", 1);
	RequestNamedLWLockTranche("counter_ext buffer stripes", stripes);
}

void shmem_startup() {
	if (prev_shmem_startup_hook != nullptr)
		prev_shmem_startup_hook();
	bool found = false;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = static_cast<Shared *>(ShmemInitStruct("counter_ext buffer", sizeof(Shared), &found));
	if (!found) {
		shared->epoch = GetCurrentTimestamp();
		pg_atomic_init_u64(&shared->overflows, 0);
		pg_atomic_init_u32(&shared->common_used, 0);
		pg_atomic_init_u64(&shared->next_gen, 1);
		pg_atomic_init_u64(&shared->last_sweep, 0);
		for (pg_atomic_uint64 &head : shared->lists)
			pg_atomic_init_u64(&head, 0);
		auto n = static_cast<uint32>(ce::buffer::buffer_entries);
		shared->reserve = n / (4 * owner_slots);
		shared->common = n - shared->reserve * owner_slots;
		shared->cap = shared->reserve + shared->common / 4;
		if (shared->cap == 0)
			shared->cap = 1;
		for (Share &sh : shared->shares) {
			sh.db = InvalidOid;
			sh.owner = InvalidOid;
			pg_atomic_init_u32(&sh.entries, 0);
			pg_atomic_init_u64(&sh.overflows, 0);
			pg_atomic_init_u32(&sh.flush_asked, 0);
			pg_atomic_init_u64(&sh.early_flushes, 0);
		}
		shared->locks = GetNamedLWLockTranche("counter_ext buffer");
		shared->share_locks = GetNamedLWLockTranche("counter_ext buffer shares");
		shared->stripe_locks = GetNamedLWLockTranche("counter_ext buffer stripes");
	}
	HASHCTL info;
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(EntryKey);
	info.entrysize = sizeof(Entry);
	info.hash = entry_hash;
	info.num_partitions = partitions;
	long n = ce::buffer::buffer_entries;
	table = ShmemInitHash("counter_ext buffer table", n, n, &info,
	                      HASH_ELEM | HASH_FUNCTION | HASH_PARTITION | HASH_FIXED_SIZE);
	LWLockRelease(AddinShmemInitLock);
}

LWLock *lock_of(uint32 hash) {
	return &shared->locks[hash % partitions].lock;
}

LWLock *share_lock() {
	return &shared->share_locks[0].lock;
}

// The lock of a stripe: an adder of the stripe holds it shared to use an
// entry it found before without a partition lock; removing an entry or
// giving a used slot to another bucket holds every stripe lock exclusive
// (after the partition locks).
LWLock *stripe_lock(int stripe) {
	return &shared->stripe_locks[stripe].lock;
}

int my_stripe() {
	return static_cast<int>(static_cast<unsigned>(ce::compat::my_proc_number()) % stripes);
}

void lock_stripes() {
	for (int i = 0; i < stripes; i++)
		LWLockAcquire(stripe_lock(i), LW_EXCLUSIVE);
}

void unlock_stripes() {
	for (int i = stripes - 1; i >= 0; i--)
		LWLockRelease(stripe_lock(i));
}

// Lists of changed entries (doc/reference/tracked.md, "Lists of changed
// entries"). A flush visits the entries that changed since the one before,
// not the whole table: each counter's entries are on one of list_count lists
// (by the counter's hash), from the moment an add publishes to one (or
// makes it) until a claim has taken what it holds and its written marks
// are old. Lock-free: a push is a compare-and-swap of the head; a claim
// takes a whole list by one exchange. 'listed' says an entry is on a list
// or in the hands of the claim that took it, so that it is pushed once, and
// is never removed meanwhile. An adder publishes (a full barrier) and then
// reads 'listed'; a claim clears it (a full barrier) and then reads the
// amounts: whichever comes second sees the other's write, so no amount is
// left on an entry that no list holds.
uint32 list_of(Oid db, int32 counter) {
	return (hash_bytes_uint32(static_cast<uint32>(counter)) ^ db) & (list_count - 1);
}

// Puts e on its list; this backend set e->listed (or took e from a list).
void push(Entry *e) noexcept {
	pg_atomic_uint64 *head = &shared->lists[list_of(e->key.db, e->key.counter)];
	uint64 old = pg_atomic_read_u64(head);
	do {
		e->next_listed = reinterpret_cast<Entry *>(old);
	} while (!pg_atomic_compare_exchange_u64(head, &old, reinterpret_cast<uint64>(e)));
}

// Lists e unless it is listed (or taken by a claim). Never raises.
void list(Entry *e) noexcept {
	if (pg_atomic_read_u32(&e->listed) != 0)
		return;
	uint32 clear = 0;
	if (pg_atomic_compare_exchange_u32(&e->listed, &clear, 1))
		push(e);
}

// One more entry for share i, within its reserve, or within its cap and
// the common room. Never raises.
bool share_take(int i) {
	Share &sh = shared->shares[i];
	for (;;) {
		uint32 old = pg_atomic_read_u32(&sh.entries);
		if (old >= shared->cap)
			return false;
		bool common = old >= shared->reserve;
		if (common) {
			uint32 used = pg_atomic_read_u32(&shared->common_used);
			do {
				if (used >= shared->common)
					return false;
			} while (!pg_atomic_compare_exchange_u32(&shared->common_used, &used, used + 1));
		}
		if (pg_atomic_compare_exchange_u32(&sh.entries, &old, old + 1))
			return true;
		if (common)
			pg_atomic_fetch_sub_u32(&shared->common_used, 1);
	}
}

// Gives back an entry of share i (no lock needed). Never raises.
void share_give_back(int i) {
	uint32 old = pg_atomic_fetch_sub_u32(&shared->shares[i].entries, 1);
	if (old > shared->reserve)
		pg_atomic_fetch_sub_u32(&shared->common_used, 1);
}

// A share is pressed from half its cap on: a transaction that took an
// entry there (or found it full) asks, when it commits, for the owner's
// flush jobs to run now (ask_flush), so that many distinct keys between two
// flushes free their entries before the share overflows to the direct path.
uint32 pressure_mark() {
	return std::max<uint32>(1, shared->cap / 2);
}

// The share this transaction found pressed, or -1. Backend-local.
int pressed_share = -1;

// share_take, counting a miss as an overflow of share i and noting the
// share as pressed when it is full or past its mark. Never raises.
bool share_take_noting(int i) {
	bool ok = share_take(i);
	if (!ok)
		pg_atomic_fetch_add_u64(&shared->shares[i].overflows, 1);
	if (!ok || pg_atomic_read_u32(&shared->shares[i].entries) >= pressure_mark())
		pressed_share = i;
	return ok;
}

int share_find(Oid owner) {
	for (int i = 0; i < owner_slots; i++)
		if (shared->shares[i].db == MyDatabaseId && shared->shares[i].owner == owner)
			return i;
	return -1;
}

// Takes an entry from the share of (this database, owner), giving the
// owner a share if it has none: returns the share, or -1 (counted as an
// overflow of that share, or of the table when no share is free). Takes
// the share lock; called with no partition lock held. Never raises.
int share_reserve(Oid owner) {
	LWLockAcquire(share_lock(), LW_SHARED);
	int i = share_find(owner);
	if (i >= 0) {
		bool ok = share_take_noting(i);
		LWLockRelease(share_lock());
		return ok ? i : -1;
	}
	LWLockRelease(share_lock());
	LWLockAcquire(share_lock(), LW_EXCLUSIVE);
	i = share_find(owner);
	if (i < 0) { // a share never used first, else one with no entries
		for (int j = 0; j < owner_slots && i < 0; j++)
			if (shared->shares[j].db == InvalidOid)
				i = j;
		for (int j = 0; j < owner_slots && i < 0; j++)
			if (pg_atomic_read_u32(&shared->shares[j].entries) == 0)
				i = j;
		if (i < 0) {
			LWLockRelease(share_lock());
			pg_atomic_fetch_add_u64(&shared->overflows, 1);
			return -1;
		}
		shared->shares[i].db = MyDatabaseId;
		shared->shares[i].owner = owner;
		pg_atomic_write_u64(&shared->shares[i].overflows, 0);
		pg_atomic_write_u32(&shared->shares[i].flush_asked, 0);
		pg_atomic_write_u64(&shared->shares[i].early_flushes, 0);
	}
	bool ok = share_take_noting(i);
	LWLockRelease(share_lock());
	return ok ? i : -1;
}

void lock_all(LWLockMode mode) {
	for (int i = 0; i < partitions; i++)
		LWLockAcquire(&shared->locks[i].lock, mode);
}

void unlock_all() {
	for (int i = partitions - 1; i >= 0; i--)
		LWLockRelease(&shared->locks[i].lock);
}

void make_key(EntryKey *k, int32 counter, const Image &image) {
	memset(k, 0, sizeof(*k));
	k->db = MyDatabaseId;
	k->counter = counter;
	k->len = image.len;
	memcpy(k->image, image.bytes, image.len);
}

// A slot's sums over the lanes.
int64 pending_of(Entry *e, int slot) {
	Lane *l = lanes(e);
	int64 sum = 0;
	for (int i = 0; i < stripes; i++)
		sum = ce::buffer::saturating_add(sum, static_cast<int64>(pg_atomic_read_u64(&l[i].pending[slot])));
	return sum;
}

uint32 pins_of(Entry *e, int slot) {
	Lane *l = lanes(e);
	uint32 sum = 0;
	for (int i = 0; i < stripes; i++)
		sum += pg_atomic_read_u32(&l[i].pins[slot]);
	return sum;
}

uint64 publishes_of(Entry *e, int slot) {
	Lane *l = lanes(e);
	uint64 sum = 0;
	for (int i = 0; i < stripes; i++)
		sum += pg_atomic_read_u32(&l[i].publishes[slot]);
	return sum;
}

// One more publication in a lane, held at UINT32_MAX (only "not 0" is read).
void add_publishes(pg_atomic_uint32 *p, uint64 n) noexcept {
	uint32 old = pg_atomic_read_u32(p);
	for (;;) {
		uint64 next = static_cast<uint64>(old) + n;
		if (next > PG_UINT32_MAX)
			next = PG_UINT32_MAX;
		if (next == old || pg_atomic_compare_exchange_u32(p, &old, static_cast<uint32>(next)))
			return;
	}
}

// Whether a slot holds anything but pins: published amounts, a claim in
// flight, written marks. Read its pins before (and a read barrier).
bool slot_holds(Entry *e, int slot) {
	Slot &s = e->slots[slot];
	return publishes_of(e, slot) != 0 || pending_of(e, slot) != 0 || s.inflight_active || s.written[0].active ||
	       s.written[1].active;
}

// pins first: an add that has unpinned has published
bool slot_empty(Entry *e, int slot) {
	if (pins_of(e, slot) != 0)
		return false;
	pg_read_barrier();
	return !slot_holds(e, slot);
}

// Whether a table read with 'snapshot' sees what transaction xid wrote.
bool sees(TransactionId xid, Snapshot snapshot) {
	if (!TransactionIdIsValid(xid))
		return true;
	if (TransactionIdIsCurrentTransactionId(xid))
		return true;
	if (snapshot == nullptr)
		return TransactionIdDidCommit(xid);
	if (XidInMVCCSnapshot(xid, snapshot))
		return false;
	return TransactionIdDidCommit(xid);
}

// Adds v to a slot's pending amount, saturating (ce::buffer::saturating_add):
// lock-free, as publishing is.
void add_pending(pg_atomic_uint64 *pending, int64 v) noexcept {
	uint64 old = pg_atomic_read_u64(pending);
	while (!pg_atomic_compare_exchange_u64(
	    pending, &old, static_cast<uint64>(ce::buffer::saturating_add(static_cast<int64>(old), v)))) {
	}
}

// What a read with 'snapshot' adds from one slot (its partition is locked).
int64 slot_amount(Entry *e, int slot, Snapshot snapshot) {
	Slot &s = e->slots[slot];
	int64 sum = pending_of(e, slot);
	if (s.inflight_active && !sees(s.inflight_xid, snapshot))
		sum = ce::buffer::saturating_add(sum, s.inflight);
	for (Written &w : s.written)
		if (w.active && !sees(w.xid, snapshot))
			sum = ce::buffer::saturating_add(sum, w.amount);
	return sum;
}

// Forgets 'written' amounts every snapshot sees (the partition is locked
// exclusively).
void trim_written(Slot &s, TransactionId horizon) {
	for (Written &w : s.written)
		if (w.active && TransactionIdIsValid(w.xid) && TransactionIdPrecedes(w.xid, horizon))
			w = Written{false, 0, InvalidTransactionId};
	if (!s.written[0].active && s.written[1].active) {
		s.written[0] = s.written[1];
		s.written[1] = Written{false, 0, InvalidTransactionId};
	}
}

// ---------------------------------------------------------------------------
// This transaction's adds and claims.

struct LocalAdd {
	Entry *entry = nullptr; // pinned while set (in the lane of stripe)
	int slot = 0;
	int stripe = 0;
	int32 counter = 0;
	int64 bucket = 0;
	Image key{};
	std::vector<std::pair<int, int64>> levels; // (nest level, amount), ascending levels
};

struct Claim {
	Entry *entry;
	int slot;
	uint32 hash;
	int level;
};

std::string local_key(int32 counter, const Image &key, int64 bucket) {
	std::string s;
	s.reserve(sizeof(counter) + sizeof(bucket) + key.len);
	s.append(reinterpret_cast<const char *>(&counter), sizeof(counter));
	s.append(reinterpret_cast<const char *>(&bucket), sizeof(bucket));
	s.append(key.bytes, key.len);
	return s;
}

// This transaction's adds, one per (counter, key, bucket). The hot path is a
// transaction with one add or a few: its elements are reused from one
// transaction to the next (their 'levels' keep their room), so it allocates
// nothing once warm, and a few are found by a plain scan. Past index_from
// adds a hash index finds them; a transaction that grew past keep_at_most
// gives everything back when it ends, so what stays is bounded.
class LocalAdds {
public:
	static constexpr size_t index_from = 8;
	static constexpr size_t keep_at_most = 64;

	LocalAdd *begin() noexcept { return elements_.data(); }
	LocalAdd *end() noexcept { return elements_.data() + used_; }
	size_t size() const noexcept { return used_; }
	bool empty() const noexcept { return used_ == 0; }

	LocalAdd *find(int32 counter, const Image &key, int64 bucket) {
		if (index_.empty()) { // also when building the index failed: the scan is right, only slower
			for (size_t i = 0; i < used_; i++) {
				LocalAdd &a = elements_[i];
				if (a.counter == counter && a.bucket == bucket && a.key.len == key.len &&
				    memcmp(a.key.bytes, key.bytes, key.len) == 0)
					return &a;
			}
			return nullptr;
		}
		auto found = index_.find(local_key(counter, key, bucket));
		return found == index_.end() ? nullptr : &elements_[found->second];
	}

	// A new add (not yet pinned) with its first amount. May throw
	// std::bad_alloc; nothing is changed then.
	LocalAdd &push(int32 counter, const Image &key, int64 bucket, int level, int64 delta) {
		if (used_ == elements_.size())
			elements_.emplace_back();
		LocalAdd &a = elements_[used_];
		a.levels.clear();
		a.levels.emplace_back(level, delta);
		if (used_ + 1 > index_from) {
			try {
				if (index_.empty())
					for (size_t i = 0; i < used_; i++)
						index_.emplace(local_key(elements_[i].counter, elements_[i].key, elements_[i].bucket), i);
				index_.emplace(local_key(counter, key, bucket), used_);
			} catch (...) {
				index_.clear();
				throw;
			}
		}
		a.entry = nullptr;
		a.slot = 0;
		a.stripe = 0;
		a.counter = counter;
		a.bucket = bucket;
		a.key = key;
		used_++;
		return a;
	}

	// Undoes the last push (its pin failed).
	void pop() noexcept {
		LocalAdd &a = elements_[used_ - 1];
		if (!index_.empty()) {
			try {
				index_.erase(local_key(a.counter, a.key, a.bucket));
			} catch (...) {
				index_.clear();
			}
		}
		a.levels.clear();
		a.entry = nullptr;
		used_--;
	}

	// The end of the transaction (every add unpinned).
	void clear() noexcept {
		if (used_ == 0 && index_.empty() && elements_.size() <= keep_at_most)
			return; // most transactions: nothing was added
		for (size_t i = 0; i < used_; i++)
			elements_[i].levels.clear();
		used_ = 0;
		if (elements_.size() > keep_at_most) {
			std::vector<LocalAdd>().swap(elements_);
			std::unordered_map<std::string, size_t>().swap(index_);
		} else if (!index_.empty()) {
			index_.clear();
		}
	}

private:
	std::vector<LocalAdd> elements_; // [0, used_) are this transaction's
	size_t used_ = 0;
	std::unordered_map<std::string, size_t> index_; // empty below index_from
};

LocalAdds *local_adds = nullptr;
std::vector<Claim> *claims = nullptr;

void unpin(LocalAdd &a) noexcept {
	if (a.entry != nullptr)
		pg_atomic_fetch_sub_u32(&lanes(a.entry)[a.stripe].pins[a.slot], 1);
	a.entry = nullptr;
}

// At commit: every amount goes to pending, then the pin goes (in that order:
// whoever sees no pin sees the amount).
void publish_all() noexcept {
	if (local_adds == nullptr)
		return;
	for (LocalAdd &a : *local_adds) {
		int64 sum = 0;
		for (auto &l : a.levels)
			sum = ce::buffer::saturating_add(sum, l.second);
		if (a.entry != nullptr && sum != 0) {
			Lane &l = lanes(a.entry)[a.stripe];
			add_pending(&l.pending[a.slot], sum);
			add_publishes(&l.publishes[a.slot], 1);
			list(a.entry);
		}
		unpin(a);
	}
	local_adds->clear();
}

void unpin_all() noexcept {
	if (local_adds == nullptr)
		return;
	for (LocalAdd &a : *local_adds)
		unpin(a);
	local_adds->clear();
}

// A claim whose transaction committed: its amount is written.
void claim_committed(const Claim &c) noexcept {
	LWLock *lock = lock_of(c.hash);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	Slot &s = c.entry->slots[c.slot];
	Written w{true, s.inflight, s.inflight_xid};
	if (!s.written[0].active) {
		s.written[0] = w;
	} else if (!s.written[1].active) {
		s.written[1] = w;
	} else { // older snapshots than two flushes: keep the newest xid
		s.written[0].amount = ce::buffer::saturating_add(s.written[0].amount, s.written[1].amount);
		s.written[0].xid = s.written[1].xid;
		s.written[1] = w;
	}
	s.inflight_active = false;
	s.inflight = 0;
	s.inflight_publishes = 0;
	s.inflight_xid = InvalidTransactionId;
	list(c.entry); // its marks are trimmed by a later claim
	LWLockRelease(lock);
}

// A claim whose (sub)transaction aborted: its amount is pending again.
void claim_aborted(const Claim &c) noexcept {
	LWLock *lock = lock_of(c.hash);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	Slot &s = c.entry->slots[c.slot];
	Lane &l = lanes(c.entry)[0];
	add_pending(&l.pending[c.slot], s.inflight);
	add_publishes(&l.publishes[c.slot], s.inflight_publishes > 0 ? s.inflight_publishes : 1);
	s.inflight_active = false;
	s.inflight = 0;
	s.inflight_publishes = 0;
	s.inflight_xid = InvalidTransactionId;
	list(c.entry);
	LWLockRelease(lock);
}

void end_claims(bool committed) noexcept {
	if (claims == nullptr || claims->empty())
		return;
	for (const Claim &c : *claims) {
		if (committed)
			claim_committed(c);
		else
			claim_aborted(c);
	}
	claims->clear();
}

// PREPARE TRANSACTION cannot carry backend memory: the adds are written to
// the delta tables now, in the transaction being prepared.
void write_before_prepare() {
	if (claims != nullptr && !claims->empty())
		throw ce::Error(ce::sqlstate::feature_not_supported,
		                "cannot PREPARE a transaction that flushed buffered counters",
		                "counter.flush (or a reconciliation, which flushes) ran in this transaction.");
	if (local_adds == nullptr || local_adds->empty())
		return;
	std::unordered_map<int32, std::vector<Amount>> by_counter;
	for (LocalAdd &a : *local_adds) {
		int64 sum = 0;
		for (auto &l : a.levels)
			sum = ce::buffer::saturating_add(sum, l.second);
		if (sum != 0)
			by_counter[a.counter].push_back(Amount{a.key, a.bucket, sum});
	}
	if (direct_writer == nullptr)
		throw ce::Error(ce::sqlstate::internal_error, "buffered adds have no writer for PREPARE TRANSACTION");
	// an abort pops the snapshot if a write fails
	ce::pg_guard([] { PushActiveSnapshot(GetTransactionSnapshot()); });
	for (auto &item : by_counter)
		direct_writer(item.first, item.second);
	ce::pg_guard([] { PopActiveSnapshot(); });
	for (LocalAdd &a : *local_adds) // written: nothing to publish at commit
		a.levels.clear();
}

// At commit, after publishing: the owner of a share this transaction found
// pressed gets one nudge of the launcher for its flush jobs in this database
// (flush_asked: one until its job worker takes it, ce::buffer::take_flush_ask),
// with the background worker preloaded. Never raises.
void ask_flush() noexcept {
	int i = pressed_share;
	pressed_share = -1;
	if (i < 0 || ce::worker_shm::shared == nullptr)
		return;
	Share &sh = shared->shares[i];
	LWLockAcquire(share_lock(), LW_SHARED);
	Oid db = sh.db;
	Oid owner = sh.owner;
	uint32 clear = 0;
	bool ask = db == MyDatabaseId && OidIsValid(owner) && pg_atomic_read_u32(&sh.flush_asked) == 0 &&
	           pg_atomic_compare_exchange_u32(&sh.flush_asked, &clear, 1);
	LWLockRelease(share_lock());
	if (ask)
		ce::worker_shm::nudge_launcher(db, owner, GetCurrentTimestamp());
}

void xact_callback(XactEvent event, void *) {
	switch (event) {
		case XACT_EVENT_COMMIT:
			publish_all();
			end_claims(true);
			ask_flush();
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			unpin_all();
			end_claims(false);
			pressed_share = -1;
			break;
		case XACT_EVENT_PRE_PREPARE:
			write_before_prepare();
			break;
		case XACT_EVENT_PREPARE:
			unpin_all();
			end_claims(false);
			pressed_share = -1;
			break;
		default:
			break;
	}
}

void subxact_callback(SubXactEvent event, SubTransactionId, SubTransactionId, void *) {
	if (event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB)
		return;
	int level = GetCurrentTransactionNestLevel();
	bool abort = event == SUBXACT_EVENT_ABORT_SUB;
	if (local_adds != nullptr) {
		for (LocalAdd &a : *local_adds) {
			auto &levels = a.levels;
			if (abort) {
				while (!levels.empty() && levels.back().first >= level)
					levels.pop_back();
			} else if (!levels.empty() && levels.back().first == level) {
				if (levels.size() >= 2 && levels[levels.size() - 2].first == level - 1) {
					levels[levels.size() - 2].second =
					    ce::buffer::saturating_add(levels[levels.size() - 2].second, levels.back().second);
					levels.pop_back();
				} else {
					levels.back().first = level - 1;
				}
			}
		}
	}
	if (claims != nullptr) {
		size_t kept = 0;
		for (size_t i = 0; i < claims->size(); i++) {
			Claim c = (*claims)[i];
			if (c.level >= level) {
				if (abort) {
					claim_aborted(c);
					continue;
				}
				c.level = level - 1;
			}
			(*claims)[kept++] = c;
		}
		claims->resize(kept);
	}
}

// Where this backend found each (counter, key, bucket) lately: the entry,
// its gen then, the slot. An add of a key found here pins its slot holding
// only its stripe's lock, shared (no partition lock, no table lookup): while
// it is held no entry is removed and no used slot changes bucket, so an
// entry whose gen still matches is the entry of that key, and a slot whose
// bucket still matches is the slot of that bucket. A miss, or an entry gone
// since, takes the partition lock as the first add does.
struct Cached {
	Entry *entry;
	uint64 gen;
	uint32 hash;
	int32 counter;
	int slot;
	int64 bucket;
	uint16 len;
	char image[max_key_bytes];
};
constexpr uint32 cache_size = 256; // a power of 2; 256 recent keys
Cached *cache = nullptr;

Cached *cached(uint32 hash, int64 bucket) {
	if (cache == nullptr)
		return nullptr;
	Cached &c = cache[(hash ^ static_cast<uint32>(bucket >> 20)) & (cache_size - 1)];
	return &c;
}

void remember(const EntryKey &k, uint32 hash, int64 bucket, Entry *e, int slot) noexcept {
	if (cache == nullptr) {
		cache = new (std::nothrow) Cached[cache_size];
		if (cache == nullptr)
			return;
		for (uint32 i = 0; i < cache_size; i++)
			cache[i].entry = nullptr;
	}
	Cached *c = cached(hash, bucket);
	c->entry = e;
	c->gen = pg_atomic_read_u64(&e->gen);
	c->hash = hash;
	c->counter = k.counter;
	c->slot = slot;
	c->bucket = bucket;
	c->len = k.len;
	memcpy(c->image, k.image, k.len);
}

// The hot path: pins the slot of a (counter, key, bucket) this backend
// found before, in this backend's lane. False when it is not cached or has
// gone since (nothing pinned then). Never raises.
bool pin_cached(const EntryKey &k, uint32 hash, int64 bucket, int stripe, Entry **entry_out, int *slot_out) {
	Cached *c = cached(hash, bucket);
	if (c == nullptr || c->entry == nullptr || c->hash != hash || c->counter != k.counter || c->bucket != bucket ||
	    c->len != k.len || memcmp(c->image, k.image, k.len) != 0)
		return false;
	LWLock *lock = stripe_lock(stripe);
	LWLockAcquire(lock, LW_SHARED);
	Entry *e = c->entry;
	bool ok =
	    pg_atomic_read_u64(&e->gen) == c->gen && *static_cast<volatile int64 *>(&e->slots[c->slot].bucket) == bucket;
	if (ok)
		pg_atomic_fetch_add_u32(&lanes(e)[stripe].pins[c->slot], 1);
	LWLockRelease(lock);
	if (!ok) {
		c->entry = nullptr;
		return false;
	}
	*entry_out = e;
	*slot_out = c->slot;
	return true;
}

// Finds (or makes, taking an entry from the owner's share) the entry and a
// slot for 'bucket' and pins it in the lane of 'stripe'. Owns nothing;
// never raises.
bool pin_slot(const EntryKey &k, Oid owner, int64 bucket, int stripe, Entry **entry_out, int *slot_out) {
	uint32 hash = get_hash_value(table, &k);
	if (pin_cached(k, hash, bucket, stripe, entry_out, slot_out))
		return true;
	LWLock *lock = lock_of(hash);
	LWLockAcquire(lock, LW_SHARED);
	auto *e = static_cast<Entry *>(hash_search_with_hash_value(table, &k, hash, HASH_FIND, nullptr));
	if (e != nullptr) {
		for (int i = 0; i < bucket_slots; i++) {
			if (e->slots[i].used && e->slots[i].bucket == bucket) {
				pg_atomic_fetch_add_u32(&lanes(e)[stripe].pins[i], 1);
				remember(k, hash, bucket, e, i);
				LWLockRelease(lock);
				*entry_out = e;
				*slot_out = i;
				return true;
			}
		}
	}
	LWLockRelease(lock);

	// a new entry counts against the owner's share, taken before the
	// partition lock (nothing else is taken while one is held)
	int share = -1;
	bool found = false;
	for (;;) {
		if (e == nullptr) {
			share = share_reserve(owner);
			if (share < 0)
				return false;
		}
		LWLockAcquire(lock, LW_EXCLUSIVE);
		e = static_cast<Entry *>(
		    hash_search_with_hash_value(table, &k, hash, share >= 0 ? HASH_ENTER_NULL : HASH_FIND, &found));
		if (e != nullptr || share >= 0)
			break;
		LWLockRelease(lock); // the entry went since: make it again
	}
	if (e == nullptr) { // the table is full (the shares keep it from happening)
		LWLockRelease(lock);
		share_give_back(share);
		pg_atomic_fetch_add_u64(&shared->shares[share].overflows, 1);
		pressed_share = share;
		return false;
	}
	if (share >= 0 && found) // made by another backend meanwhile
		share_give_back(share);
	if (share >= 0 && !found) {
		// No backend uses this memory now: a pointer cached from an earlier
		// life sees its gen differ (0 since the removal) and touches nothing.
		e->share = share;
		pg_atomic_init_u32(&e->listed, 1); // listed when made: its adder may abort
		for (Slot &s : e->slots) {
			s.used = false;
			s.bucket = no_bucket;
			s.inflight_active = false;
			s.inflight = 0;
			s.inflight_publishes = 0;
			s.inflight_xid = InvalidTransactionId;
			s.written[0] = s.written[1] = Written{false, 0, InvalidTransactionId};
		}
		Lane *l = lanes(e);
		for (int i = 0; i < stripes; i++)
			for (int j = 0; j < bucket_slots; j++) {
				pg_atomic_init_u64(&l[i].pending[j], 0);
				pg_atomic_init_u32(&l[i].pins[j], 0);
				pg_atomic_init_u32(&l[i].publishes[j], 0);
			}
		pg_write_barrier();
		pg_atomic_write_u64(&e->gen, pg_atomic_fetch_add_u64(&shared->next_gen, 1));
		push(e);
	}
	int chosen = -1;
	for (int i = 0; i < bucket_slots && chosen < 0; i++)
		if (e->slots[i].used && e->slots[i].bucket == bucket)
			chosen = i;
	for (int i = 0; i < bucket_slots && chosen < 0; i++) {
		Slot &s = e->slots[i];
		if (!s.used) {
			s.used = true;
			*static_cast<volatile int64 *>(&s.bucket) = bucket;
			chosen = i;
		}
	}
	if (chosen < 0) {
		// a used slot with nothing left in it: giving it another bucket
		// holds the stripe locks, so that no adder pins it for the old one
		lock_stripes();
		for (int i = 0; i < bucket_slots && chosen < 0; i++) {
			Slot &s = e->slots[i];
			if (slot_empty(e, i)) {
				*static_cast<volatile int64 *>(&s.bucket) = bucket;
				chosen = i;
			}
		}
		if (chosen >= 0)
			pg_atomic_fetch_add_u32(&lanes(e)[stripe].pins[chosen], 1);
		unlock_stripes();
		if (chosen >= 0) {
			remember(k, hash, bucket, e, chosen);
			LWLockRelease(lock);
			*entry_out = e;
			*slot_out = chosen;
			return true;
		}
	}
	if (chosen < 0) {
		pg_atomic_fetch_add_u64(&shared->shares[e->share].overflows, 1);
		LWLockRelease(lock);
		return false;
	}
	pg_atomic_fetch_add_u32(&lanes(e)[stripe].pins[chosen], 1);
	remember(k, hash, bucket, e, chosen);
	LWLockRelease(lock);
	*entry_out = e;
	*slot_out = chosen;
	return true;
}

// The entry of (counter, key) with its partition locked shared (*lock, to
// release), or nullptr (locked all the same).
Entry *find_shared(int32 counter, const Image &key, LWLock **lock) {
	EntryKey k;
	make_key(&k, counter, key);
	uint32 hash = get_hash_value(table, &k);
	*lock = lock_of(hash);
	LWLockAcquire(*lock, LW_SHARED);
	return static_cast<Entry *>(hash_search_with_hash_value(table, &k, hash, HASH_FIND, nullptr));
}

// What this transaction added to (counter, key) and has not published:
// its own reads see it, as they see its own rows.
int64 local_amount(int32 counter, const Image &key) {
	int64 sum = 0;
	if (local_adds == nullptr || local_adds->empty())
		return 0;
	for (LocalAdd &a : *local_adds) {
		if (a.counter != counter || a.key.len != key.len || memcmp(a.key.bytes, key.bytes, key.len) != 0)
			continue;
		for (auto &l : a.levels)
			sum = ce::buffer::saturating_add(sum, l.second);
	}
	return sum;
}

// Calls f(entry) for each entry of the counter in this database, every
// partition locked shared. f must neither throw nor raise.
template <typename F>
void scan_counter(int32 counter, F &&f) {
	lock_all(LW_SHARED);
	HASH_SEQ_STATUS scan;
	hash_seq_init(&scan, table);
	Entry *e;
	while ((e = static_cast<Entry *>(hash_seq_search(&scan))) != nullptr)
		if (e->key.db == MyDatabaseId && e->key.counter == counter)
			f(e);
	unlock_all();
}

} // namespace

namespace ce::buffer {

bool image_of(Datum key, int16 typlen, bool byval, Image *out) {
	if (byval) {
		out->len = sizeof(Datum);
		memcpy(out->bytes, &key, sizeof(Datum));
		return true;
	}
	const char *p;
	size_t len;
	if (typlen == -1) {
		struct varlena *v = pg_detoast_datum_packed(reinterpret_cast<struct varlena *>(DatumGetPointer(key)));
		p = VARDATA_ANY(v);
		len = VARSIZE_ANY_EXHDR(v);
	} else if (typlen == -2) {
		p = DatumGetCString(key);
		len = strlen(p) + 1;
	} else {
		p = DatumGetPointer(key);
		len = static_cast<size_t>(typlen);
	}
	if (len > static_cast<size_t>(max_key_bytes))
		return false;
	out->len = static_cast<uint16>(len);
	memcpy(out->bytes, p, len);
	return true;
}

Datum datum_of(const Image &image, int16 typlen, bool byval) {
	if (byval) {
		Datum d;
		memcpy(&d, image.bytes, sizeof(Datum));
		return d;
	}
	if (typlen == -1) {
		auto *v = static_cast<struct varlena *>(palloc(VARHDRSZ + image.len));
		SET_VARSIZE(v, VARHDRSZ + image.len);
		memcpy(VARDATA(v), image.bytes, image.len);
		return PointerGetDatum(v);
	}
	char *p = static_cast<char *>(palloc(image.len));
	memcpy(p, image.bytes, image.len);
	return PointerGetDatum(p);
}

void set_direct_writer(DirectWriter writer) {
	direct_writer = writer;
}

void init() {
	DefineCustomIntVariable("counter_ext.flush_interval",
	                        "How often the flush job of a buffered counter runs (run_every of new flush jobs).",
	                        "Read when a buffered counter is registered; counter.job_alter changes an existing job.",
	                        &flush_interval_ms, 1000, 10, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS, nullptr, nullptr,
	                        nullptr);
	if (!process_shared_preload_libraries_in_progress || IsBinaryUpgrade)
		return;
	DefineCustomIntVariable("counter_ext.buffer_entries", "Keys the shared table of buffered counters holds.",
	                        "Each entry is one key of one buffered counter with up to 4 event-time buckets. Each "
	                        "(database, owner) has a share: a reserve of 1/512 of the table and at most a quarter "
	                        "of the rest; an add that finds its share full is written directly.",
	                        &buffer_entries, 16384, 128, 64 * 1024 * 1024, PGC_POSTMASTER, 0, nullptr, nullptr,
	                        nullptr);
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = ce::entry<shmem_request>;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = ce::entry<shmem_startup>;
	RegisterXactCallback(ce::entry<xact_callback>, nullptr);
	RegisterSubXactCallback(ce::entry<subxact_callback>, nullptr);
}

bool available() {
	return shared != nullptr && table != nullptr;
}

TimestampTz epoch() {
	return available() ? shared->epoch : 0;
}

bool take_flush_ask(Oid owner) {
	if (!available())
		return false;
	LWLockAcquire(share_lock(), LW_SHARED);
	int i = share_find(owner);
	bool asked = i >= 0 && pg_atomic_exchange_u32(&shared->shares[i].flush_asked, 0) != 0;
	if (asked)
		pg_atomic_fetch_add_u64(&shared->shares[i].early_flushes, 1);
	LWLockRelease(share_lock());
	return asked;
}

std::vector<ShareStats> shares() {
	std::vector<ShareStats> out;
	if (!available())
		return out;
	out.reserve(owner_slots); // before the lock: nothing below allocates
	LWLockAcquire(share_lock(), LW_SHARED);
	for (Share &sh : shared->shares)
		if (sh.db == MyDatabaseId && OidIsValid(sh.owner))
			out.push_back(ShareStats{sh.owner, static_cast<int64>(pg_atomic_read_u32(&sh.entries)),
			                         static_cast<int64>(pg_atomic_read_u64(&sh.overflows)),
			                         static_cast<int64>(pg_atomic_read_u64(&sh.early_flushes))});
	LWLockRelease(share_lock());
	return out;
}

ShareLimits share_limits() {
	if (!available())
		return ShareLimits{0, 0, 0};
	return ShareLimits{shared->reserve, shared->cap, pressure_mark()};
}

bool add(int32 counter, Oid owner, const Image &key, int64 bucket, int64 delta) {
	if (!available() || IsInParallelMode() || IsParallelWorker())
		return false;
	if (local_adds == nullptr)
		local_adds = new LocalAdds();
	// Large amounts are written directly (max_buffered_amount): what this
	// transaction publishes for a slot stays within the bound.
	if (delta > max_buffered_amount || delta < -max_buffered_amount)
		return false;
	int level = GetCurrentTransactionNestLevel();
	LocalAdd *found = local_adds->find(counter, key, bucket);
	if (found != nullptr) {
		auto &levels = found->levels;
		int64 total = delta;
		for (auto &l : levels)
			total = saturating_add(total, l.second);
		if (total > max_buffered_amount || total < -max_buffered_amount)
			return false;
		if (!levels.empty() && levels.back().first == level)
			levels.back().second = saturating_add(levels.back().second, delta);
		else
			levels.emplace_back(level, delta);
		return true;
	}
	// Everything that may throw happens before the pin.
	LocalAdd &a = local_adds->push(counter, key, bucket, level, delta);
	EntryKey k;
	make_key(&k, counter, key);
	Entry *e = nullptr;
	int slot = 0;
	int stripe = my_stripe();
	if (!pin_slot(k, owner, bucket, stripe, &e, &slot)) {
		local_adds->pop();
		return false;
	}
	a.entry = e;
	a.slot = slot;
	a.stripe = stripe;
	return true;
}

int64 amount(int32 counter, const Image &key, Snapshot snapshot) {
	if (!available())
		return 0;
	int64 sum = local_amount(counter, key);
	LWLock *lock;
	Entry *e = find_shared(counter, key, &lock);
	if (e != nullptr)
		for (int i = 0; i < bucket_slots; i++)
			if (e->slots[i].used)
				sum = ce::buffer::saturating_add(sum, slot_amount(e, i, snapshot));
	LWLockRelease(lock);
	return sum;
}

std::vector<Amount> amounts(int32 counter, Snapshot snapshot) {
	std::vector<Amount> out;
	if (!available())
		return out;
	size_t mine = local_adds != nullptr ? local_adds->size() : 0;
	// The table can grow between the estimate and the scan (the scan only
	// holds the partitions shared once it starts): a scan that finds more
	// than fits goes again with room for more, so no amount is left out.
	size_t entries = static_cast<size_t>(hash_get_num_entries(table));
	for (;;) {
		out.clear();
		out.reserve(entries * bucket_slots + 16 + mine);
		if (mine > 0)
			for (LocalAdd &a : *local_adds) {
				int64 sum = 0;
				for (auto &l : a.levels)
					sum = ce::buffer::saturating_add(sum, l.second);
				if (a.counter == counter && sum != 0)
					out.push_back(Amount{a.key, a.bucket, sum});
			}
		bool full = false;
		scan_counter(counter, [&out, &full, snapshot](Entry *e) {
			for (int i = 0; i < bucket_slots; i++) {
				Slot &s = e->slots[i];
				if (!s.used)
					continue;
				int64 v = slot_amount(e, i, snapshot);
				if (v == 0)
					continue;
				if (out.size() == out.capacity()) {
					full = true;
					continue;
				}
				Amount a;
				a.key.len = e->key.len;
				memcpy(a.key.bytes, e->key.image, e->key.len);
				a.bucket = s.bucket;
				a.amount = v;
				out.push_back(a); // never reallocates: capacity checked
			}
		});
		if (!full)
			return out;
		entries = 2 * static_cast<size_t>(hash_get_num_entries(table)) + 1;
	}
}

bool busy(int32 counter, const Image &key, int64 before, Snapshot snapshot) {
	if (!available())
		return false;
	LWLock *lock;
	Entry *e = find_shared(counter, key, &lock);
	bool result = false;
	if (e != nullptr) {
		for (int i = 0; i < bucket_slots; i++) {
			Slot &s = e->slots[i];
			if (!s.used || s.bucket >= before)
				continue;
			// pins first: an add that has unpinned has published
			if (pins_of(e, i) != 0)
				result = true;
			pg_read_barrier();
			if (publishes_of(e, i) != 0 || pending_of(e, i) != 0 ||
			    (s.inflight_active && !sees(s.inflight_xid, snapshot)))
				result = true;
			for (Written &w : s.written)
				if (w.active && !sees(w.xid, snapshot))
					result = true;
		}
	}
	LWLockRelease(lock);
	return result;
}

// Whether entry e could be let go now (read with its partition locked, in
// any mode): no slot holds anything but written marks every snapshot sees.
bool may_let_go(Entry *e, TransactionId horizon) {
	for (int i = 0; i < bucket_slots; i++) {
		Slot &s = e->slots[i];
		if (!s.used)
			continue;
		if (pins_of(e, i) != 0 || publishes_of(e, i) != 0 || pending_of(e, i) != 0 || s.inflight_active)
			return false;
		for (Written &w : s.written)
			if (w.active && !(TransactionIdIsValid(w.xid) && TransactionIdPrecedes(w.xid, horizon)))
				return false;
	}
	return true;
}

// Whether this claim sweeps: takes every list, not its counter's only, and
// walks the table for entries on no list that may be let go (the entries
// of a counter dropped since, an entry pinned again while a claim let go of
// it and whose adder then aborted). One claim of the cluster sweeps every
// sweep_flushes intervals (counter_ext.flush_interval).
constexpr int sweep_flushes = 8;

bool sweep_due(TimestampTz now) {
	uint64 last = pg_atomic_read_u64(&shared->last_sweep);
	if (now - static_cast<TimestampTz>(last) < int64{sweep_flushes} * ce::buffer::flush_interval_ms * 1000)
		return false;
	return pg_atomic_compare_exchange_u64(&shared->last_sweep, &last, static_cast<uint64>(now));
}

// An entry a claim visits: taken from a list (it holds e->listed), or found
// by a sweep on no list (then with its gen).
struct Found {
	Entry *entry;
	uint64 gen;
	uint32 hash;
	bool taken;
	bool go; // to let go
};

// Claims slot i of entry e for transaction xid (its partition locked
// exclusive): its amount goes to 'out' (room reserved), the claim to
// 'claims' (room reserved). Never raises.
void claim_slot(Entry *e, int i, uint32 hash, TransactionId xid, int level, std::vector<Amount> *out) noexcept {
	Slot &s = e->slots[i];
	// amount first, publications second: a publisher adds in that order, so
	// a claim never takes a publication without its amount (the reverse only
	// leaves a mark with 0)
	Lane *l = lanes(e);
	int64 v = 0;
	for (int j = 0; j < stripes; j++)
		v = ce::buffer::saturating_add(v, static_cast<int64>(pg_atomic_exchange_u64(&l[j].pending[i], 0)));
	uint64 published = 0;
	for (int j = 0; j < stripes; j++)
		published += pg_atomic_exchange_u32(&l[j].publishes[i], 0);
	if (v == 0 && published == 0)
		return;
	s.inflight_active = true;
	s.inflight = v;
	s.inflight_publishes = published;
	s.inflight_xid = xid;
	claims->push_back(Claim{e, i, hash, level});
	if (v != 0) { // amounts that cancel have nothing to write
		Amount a;
		a.key.len = e->key.len;
		memcpy(a.key.bytes, e->key.image, e->key.len);
		a.bucket = s.bucket;
		a.amount = v;
		out->push_back(a);
	}
}

// Frees the empty slots of the entries of [from, to) marked 'go' (their
// partition locked exclusive, on no list) and removes those left with
// none, under every stripe lock: no adder of a remembered entry pins
// meanwhile, and emptiness is checked again under them (an entry pinned
// since stays: its adder lists it when it publishes). Never raises.
void let_go(Found *from, Found *to) noexcept {
	lock_stripes();
	for (Found *f = from; f < to; f++) {
		Entry *e = f->entry;
		if (e == nullptr || !f->go)
			continue;
		bool in_use = false;
		for (int i = 0; i < bucket_slots; i++) {
			Slot &s = e->slots[i];
			if (!s.used)
				continue;
			if (slot_empty(e, i)) {
				s.used = false;
				*static_cast<volatile int64 *>(&s.bucket) = no_bucket;
			} else {
				in_use = true;
			}
		}
		if (!in_use) {
			pg_atomic_write_u64(&e->gen, 0);
			share_give_back(e->share);
			hash_search_with_hash_value(table, &e->key, f->hash, HASH_REMOVE, nullptr);
		}
	}
	unlock_stripes();
}

// Takes list i whole into 'found' (what finds no room goes back on its
// list, for the next claim). Never raises.
void take_list(uint32 i, std::vector<Found> *found) noexcept {
	auto *e = reinterpret_cast<Entry *>(pg_atomic_exchange_u64(&shared->lists[i], 0));
	while (e != nullptr) {
		Entry *next = e->next_listed;
		if (found->size() < found->capacity())
			found->push_back(Found{e, 0, get_hash_value(table, &e->key), true, false});
		else
			push(e);
		e = next;
	}
}

// Claims the amounts of counter's changed entries for the current
// transaction and lets go of entries that hold nothing:
//   1. takes the counter's list (a sweep: every list, and walks the table
//      with the partition locks shared for entries on no list that may be
//      let go, with their gen);
//   2. one partition at a time, locked exclusive: each entry taken is put
//      off the list (before its amounts are read), its old written marks
//      forgotten and, if it is the counter's, its amounts claimed; then an
//      entry that still holds something is listed again and an empty one
//      let go, with the stripe locks held too (adders of cached entries pin
//      under them). An entry a sweep found is let go if its gen is
//      unchanged (the same life) and it is still on no list.
// Adds published after an entry was put off its list list it again: the
// next flush claims them.
std::vector<Amount> claim(int32 counter, size_t limit) {
	std::vector<Amount> out;
	if (!available())
		return out;
	// room for every entry before any is taken (the count is read without a
	// lock: what finds no room stays on its list for the next claim)
	std::vector<Found> found;
	found.reserve(static_cast<size_t>(hash_get_num_entries(table)) + 1024);
	TransactionId horizon = pg_guard([] { return GetOldestNonRemovableTransactionId(nullptr); });
	bool sweep = sweep_due(GetCurrentTimestamp());
	// Nothing may throw or raise from here while an entry is taken and not
	// put back, or while a lock is held (below: no allocation, every claim is
	// recorded), but in the try block, which puts every entry back.
	if (sweep) {
		for (uint32 i = 0; i < list_count; i++)
			take_list(i, &found);
		lock_all(LW_SHARED);
		HASH_SEQ_STATUS scan;
		hash_seq_init(&scan, table);
		Entry *e;
		while ((e = static_cast<Entry *>(hash_seq_search(&scan))) != nullptr)
			if (pg_atomic_read_u32(&e->listed) == 0 && may_let_go(e, horizon) && found.size() < found.capacity())
				found.push_back(Found{e, pg_atomic_read_u64(&e->gen), get_hash_value(table, &e->key), false, false});
		unlock_all();
	} else {
		take_list(list_of(MyDatabaseId, counter), &found);
	}
	if (found.empty())
		return out;
	auto is_mine = [counter](const Entry *e) { return e->key.db == MyDatabaseId && e->key.counter == counter; };
	size_t mine = 0;
	for (const Found &f : found)
		if (f.taken && is_mine(f.entry))
			mine++;
	// an idle counter (no entry) costs no transaction id, so no commit record
	TransactionId xid = InvalidTransactionId;
	size_t n = 0;
	if (mine > 0) {
		try {
			if (claims == nullptr)
				claims = new std::vector<Claim>();
			n = mine * bucket_slots;
			if (n > limit)
				n = limit;
			out.reserve(n);
			claims->reserve(claims->size() + n);
			xid = pg_guard([] { return GetTopTransactionId(); });
		} catch (...) {
			for (const Found &f : found)
				if (f.taken)
					push(f.entry); // still listed: back on its list
			throw;
		}
	}
	int level = GetCurrentTransactionNestLevel();
	std::sort(found.begin(), found.end(),
	          [](const Found &a, const Found &b) { return a.hash % partitions < b.hash % partitions; });
	for (size_t from = 0; from < found.size();) {
		uint32 partition = found[from].hash % partitions;
		size_t to = from;
		while (to < found.size() && found[to].hash % partitions == partition)
			to++;
		LWLock *lock = &shared->locks[partition].lock;
		LWLockAcquire(lock, LW_EXCLUSIVE);
		bool any_go = false;
		for (size_t f = from; f < to; f++) {
			Entry *e = found[f].entry;
			if (found[f].taken) {
				pg_atomic_exchange_u32(&e->listed, 0); // a full barrier, before the amounts are read
			} else if (pg_atomic_read_u64(&e->gen) != found[f].gen || pg_atomic_read_u32(&e->listed) != 0) {
				found[f].entry = nullptr; // let go (and made again) or listed since
				continue;
			}
			bool claimable = found[f].taken && is_mine(e);
			bool pinned = false;
			bool holds = false;
			for (int i = 0; i < bucket_slots; i++) {
				Slot &s = e->slots[i];
				if (!s.used)
					continue;
				trim_written(s, horizon);
				if (claimable && !s.inflight_active && out.size() < n && claims->size() < claims->capacity())
					claim_slot(e, i, found[f].hash, xid, level, &out);
				// pins first: an add that has unpinned has published
				pinned = pinned || pins_of(e, i) != 0;
				pg_read_barrier();
				holds = holds || slot_holds(e, i);
			}
			// An entry that holds amounts (not claimed, or claimed: its marks
			// to trim) is visited again. One only pinned is listed by its adder
			// when it publishes (or swept, if the adder aborts). An empty one
			// goes.
			if (holds)
				list(e);
			else if (!pinned)
				found[f].go = any_go = true;
		}
		if (any_go)
			let_go(found.data() + from, found.data() + to);
		LWLockRelease(lock);
		from = to;
	}
	return out;
}

void drop_local(int32 counter) {
	if (local_adds == nullptr)
		return;
	for (LocalAdd &a : *local_adds)
		if (a.counter == counter)
			a.levels.clear();
}

Stats stats(int32 counter) {
	Stats st{0, 0, 0, 0};
	if (!available())
		return st;
	scan_counter(counter, [&st](Entry *e) {
		st.entries++;
		for (int i = 0; i < bucket_slots; i++) {
			Slot &s = e->slots[i];
			if (!s.used)
				continue;
			st.pending = ce::buffer::saturating_add(st.pending, pending_of(e, i));
			st.in_flight = ce::buffer::saturating_add(st.in_flight, s.inflight_active ? s.inflight : 0);
			st.pinned += pins_of(e, i);
		}
	});
	return st;
}

std::vector<int32> negative_ids(Oid owner) {
	std::vector<int32> out;
	if (!available())
		return out;
	// room for every entry first (counted without a lock): nothing may
	// throw while the partitions are locked and the table scanned
	out.reserve(static_cast<size_t>(hash_get_num_entries(table)) + 1024);
	lock_all(LW_SHARED);
	HASH_SEQ_STATUS scan;
	hash_seq_init(&scan, table);
	Entry *e;
	while ((e = static_cast<Entry *>(hash_seq_search(&scan))) != nullptr)
		if (e->key.db == MyDatabaseId && e->key.counter < 0 && shared->shares[e->share].owner == owner &&
		    out.size() < out.capacity())
			out.push_back(e->key.counter);
	unlock_all();
	std::sort(out.begin(), out.end());
	out.erase(std::unique(out.begin(), out.end()), out.end());
	return out;
}

// Buffered counters: the shared table, the transaction's own adds, publish
// at commit, claims of a flush. See counter_ext/buffer.hpp for the model.
//
// Why publish at XACT_EVENT_COMMIT (after the commit record is flushed and
// the transaction is visible) and not at PRE_COMMIT: an amount must reach
// the shared table only if the transaction commits, and PRE_COMMIT comes
// before steps that can still abort it (serialization failures of
// SERIALIZABLE, NOTIFY queue full, deferred work of other modules). The
// price is a window between the moment the rows are visible and the moment
// the amount is published: a reader in that window misses the amount for a
// moment, a crash in that window loses it (as it loses anything published
// and not yet flushed: the restart is detected and repaired, see
// counter.flush), and reconciliation treats a key whose adds are pinned
// (added, not yet published) as busy, so it never installs a truth that
// counts rows whose amounts are still on their way.

} // namespace ce::buffer
