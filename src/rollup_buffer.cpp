// Buffered rollups: the transaction's folds, the shared table, the flush's
// claim and the pending read. See counter_ext/rollup_buffer.hpp for the model.
//
// Why fold into shared memory at PRE_COMMIT (before the commit record) and
// not at COMMIT as buffered counters do (src/buffer.cpp): a flush deletes the
// log rows it can see and writes what the shared table holds. A log row is
// visible only once its transaction committed, and its sums were folded before
// that, so a flush that sees the row has its sums (or a later flush has them,
// and then the row is still there for a crash to find). At COMMIT there would
// be a window where the row is visible and its sums are not yet folded.
// The price of PRE_COMMIT: a step after it may still abort the transaction
// (NOTIFY queue full, ON COMMIT actions); then the sums are taken back at
// ABORT. SERIALIZABLE transactions, whose serialization check comes after
// PRE_COMMIT, do not fold at all: their hours are marked dirty (deferred
// mode's path) and recomputed. PREPARE TRANSACTION is refused.
//
// Concurrency: writers take the rollup_hour lock of their hours shared (as in
// trigger mode), so they never wait for each other; a recompute takes it
// exclusively, and at its commit takes back from the shared table what it
// found there for those hours (its GROUP BY counted those rows already). A
// flush takes the rollup_day lock of each day it writes (as a recompute does):
// a flush and a recompute of the same day never overlap, nor do two flushes.
//
// Capacity: counter_ext.rollup_buffer_entries entries (rollup, key, hour).
// Every new key of a transaction reserves an entry when the row is folded; a
// row that finds no room (or whose key image is over max_key_bytes) has its
// hour marked dirty instead, so no row is lost. Reservations not used by the
// fold are given back when the transaction ends.
#include "counter_ext/rollup_buffer.hpp"
#include "counter_ext/rollup_pending.hpp"
#include "counter_ext/buffer.hpp"
#include "counter_ext/filter.hpp"
#include "counter_ext/locks.hpp"
#include "counter_ext/owner.hpp"
#include "counter_ext/spi.hpp"
#include "counter_ext/wall.hpp"

extern "C" {
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
}

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace {

using ce::rollup::hour_of;
using ce::rollup::insert_dirty;

using ce::rollup_buffer::max_sums;

constexpr int max_key_bytes = 128; // all group columns' images with their lengths

int capacity = 65536; // counter_ext.rollup_buffer_entries

struct Key {
	Oid db;
	int32 rid;
	int64 hour; // TimestampTz of the UTC hour
	uint16 len;
	char bytes[max_key_bytes]; // per group column: uint16 length, image (ce::buffer::image_of)
};

struct Sums {
	int64 count;
	int128 sums[max_sums];
};

struct Entry {
	Key key; // first: dynahash copies and compares it (zeroed beyond len)
	Sums v;
};

struct Shared {
	LWLock *lock;
	pg_atomic_uint64 reserved; // entries in the table plus reservations of open transactions
};

Shared *shared = nullptr;
HTAB *table = nullptr;
shmem_request_hook_type prev_shmem_request_hook = nullptr;
shmem_startup_hook_type prev_shmem_startup_hook = nullptr;

uint32 key_hash(const void *key, Size) {
	const auto *k = static_cast<const Key *>(key);
	return hash_bytes(reinterpret_cast<const unsigned char *>(k), static_cast<int>(offsetof(Key, bytes) + k->len));
}

Size table_size() {
	return add_size(MAXALIGN(sizeof(Shared)), hash_estimate_size(static_cast<long>(capacity), sizeof(Entry)));
}

void shmem_request() {
	if (prev_shmem_request_hook != nullptr)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(table_size());
	RequestNamedLWLockTranche("counter_ext rollup buffer", 1);
}

void shmem_startup() {
	if (prev_shmem_startup_hook != nullptr)
		prev_shmem_startup_hook();
	bool found = false;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = static_cast<Shared *>(ShmemInitStruct("counter_ext rollup buffer", sizeof(Shared), &found));
	if (!found) {
		shared->lock = &GetNamedLWLockTranche("counter_ext rollup buffer")->lock;
		pg_atomic_init_u64(&shared->reserved, 0);
	}
	HASHCTL info;
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(Key);
	info.entrysize = sizeof(Entry);
	info.hash = key_hash;
	table = ShmemInitHash("counter_ext rollup buffer table", capacity, capacity, &info,
	                      HASH_ELEM | HASH_FUNCTION | HASH_FIXED_SIZE);
	LWLockRelease(AddinShmemInitLock);
}

bool available() {
	return shared != nullptr && table != nullptr;
}

bool reserve() {
	if (pg_atomic_fetch_add_u64(&shared->reserved, 1) >= static_cast<uint64>(capacity)) {
		pg_atomic_fetch_sub_u64(&shared->reserved, 1);
		return false;
	}
	return true;
}

void unreserve(uint64 n) {
	if (n > 0)
		pg_atomic_fetch_sub_u64(&shared->reserved, n);
}

struct KeyHashF {
	size_t operator()(const Key &k) const { return key_hash(&k, sizeof(Key)); }
};
struct KeyEq {
	bool operator()(const Key &a, const Key &b) const {
		return memcmp(&a, &b, offsetof(Key, bytes) + a.len) == 0 && a.len == b.len;
	}
};

void add_into(Sums &to, const Sums &from, int sign) {
	to.count += sign * from.count;
	for (int i = 0; i < max_sums; i++)
		to.sums[i] += sign * from.sums[i];
}

bool is_zero(const Sums &s) {
	if (s.count != 0)
		return false;
	for (int i = 0; i < max_sums; i++)
		if (s.sums[i] != 0)
			return false;
	return true;
}

// What one (sub)transaction level did: its folds (each new key holds one
// reservation), the (rollup, hour) pairs it logged, and what its flushes or
// recomputes take back from the shared table at commit.
struct Layer {
	SubTransactionId sub = InvalidSubTransactionId;
	std::unordered_map<Key, Sums, KeyHashF, KeyEq> adds;
	std::unordered_set<uint64> logged;
	std::unordered_map<Key, Sums, KeyHashF, KeyEq> takes;
};

struct Local {
	std::vector<Layer> layers;
	bool folded = false;        // the adds are in the shared table (PRE_COMMIT passed)
	uint64 unused_reserved = 0; // reservations the fold did not turn into entries
};
Local *local = nullptr;

Layer &current_layer() {
	SubTransactionId sub = GetCurrentSubTransactionId();
	if (local->layers.empty() || local->layers.back().sub != sub) {
		local->layers.emplace_back();
		local->layers.back().sub = sub;
	}
	return local->layers.back();
}

uint64 reservations_of(const Layer &l) {
	return l.adds.size();
}

void merge_into(Layer &to, Layer &from) {
	for (auto &kv : from.adds) {
		auto it = to.adds.find(kv.first);
		if (it == to.adds.end()) {
			to.adds.emplace(kv.first, kv.second);
		} else {
			add_into(it->second, kv.second, 1);
			unreserve(1); // one entry, two reservations
		}
	}
	to.logged.insert(from.logged.begin(), from.logged.end());
	for (auto &kv : from.takes) {
		auto it = to.takes.find(kv.first);
		if (it == to.takes.end())
			to.takes.emplace(kv.first, kv.second);
		else
			add_into(it->second, kv.second, 1);
	}
}

// Adds (sign 1) or takes back (sign -1) amounts in the shared table under its
// lock, held by the caller exclusively. An entry that becomes zero is removed
// and its reservation returned. 'own_reservation': the caller holds one
// reservation for a new entry (a fold); false: it must reserve (an undo).
// Returns false when a new entry found no room.
bool apply_locked(const Key &k, const Sums &v, int sign, bool own_reservation) {
	bool found = false;
	auto *e = static_cast<Entry *>(hash_search(table, &k, HASH_FIND, &found));
	if (e == nullptr) {
		if (!own_reservation && !reserve())
			return false;
		e = static_cast<Entry *>(hash_search(table, &k, HASH_ENTER_NULL, &found));
		if (e == nullptr) {
			if (!own_reservation)
				unreserve(1);
			return false;
		}
		memset(&e->v, 0, sizeof(Sums));
	} else if (own_reservation) {
		local->unused_reserved++;
	}
	add_into(e->v, v, sign);
	if (is_zero(e->v)) {
		hash_search(table, &k, HASH_REMOVE, nullptr);
		unreserve(1);
	}
	return true;
}

void discard_all() {
	if (local == nullptr)
		return;
	uint64 n = local->unused_reserved;
	if (!local->folded)
		for (const Layer &l : local->layers)
			n += reservations_of(l);
	if (available())
		unreserve(n);
	local->layers.clear();
	local->folded = false;
	local->unused_reserved = 0;
}

void xact_callback(XactEvent event, void *) {
	if (local == nullptr || local->layers.empty())
		return;
	switch (event) {
		case XACT_EVENT_PRE_PREPARE: {
			for (const Layer &l : local->layers)
				if (!l.adds.empty() || !l.takes.empty())
					ereport(ERROR,
					        (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					         errmsg("cannot prepare a transaction that wrote to a buffered rollup or flushed one"),
					         errhint("Commit it, or use a rollup in deferred or trigger mode with two-phase "
					                 "commit.")));
			break;
		}
		case XACT_EVENT_PRE_COMMIT: {
			while (local->layers.size() > 1) {
				Layer top = std::move(local->layers.back());
				local->layers.pop_back();
				merge_into(local->layers.back(), top);
			}
			Layer &l = local->layers.back();
			if (l.adds.empty())
				break;
			LWLockAcquire(shared->lock, LW_EXCLUSIVE);
			bool ok = true;
			for (auto it = l.adds.begin(); it != l.adds.end(); ++it)
				if (!apply_locked(it->first, it->second, 1, true)) {
					// cannot happen (every new key holds a reservation): take
					// back what was added, and abort the transaction
					for (auto back = l.adds.begin(); back != it; ++back)
						apply_locked(back->first, back->second, -1, false);
					ok = false;
					break;
				}
			LWLockRelease(shared->lock);
			local->folded = ok;
			if (!ok)
				ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
				                errmsg("the shared table of buffered rollups has no room for this transaction's sums"),
				                errhint("Raise counter_ext.rollup_buffer_entries.")));
			break;
		}
		case XACT_EVENT_COMMIT: {
			bool any = false;
			for (const Layer &l : local->layers)
				any = any || !l.takes.empty();
			if (any && available()) {
				LWLockAcquire(shared->lock, LW_EXCLUSIVE);
				for (const Layer &l : local->layers)
					for (auto &kv : l.takes)
						apply_locked(kv.first, kv.second, -1, false); // the entry exists: nothing else removes it
				LWLockRelease(shared->lock);
			}
			discard_all();
			break;
		}
		case XACT_EVENT_ABORT: {
			if (local->folded && available()) {
				// A step after PRE_COMMIT aborted the transaction: take the sums back.
				LWLockAcquire(shared->lock, LW_EXCLUSIVE);
				for (const Layer &l : local->layers)
					for (auto &kv : l.adds)
						if (!apply_locked(kv.first, kv.second, -1, false))
							elog(WARNING,
							     "rollup %d: no room to take back the sums of an aborted transaction; "
							     "recompute hour %s",
							     kv.first.rid, timestamptz_to_str(kv.first.hour));
				LWLockRelease(shared->lock);
			}
			discard_all();
			break;
		}
		default:
			break;
	}
}

void subxact_callback(SubXactEvent event, SubTransactionId my, SubTransactionId parent, void *) {
	if (local == nullptr || local->layers.empty() || local->layers.back().sub != my)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB) {
		unreserve(reservations_of(local->layers.back()));
		local->layers.pop_back();
	} else if (event == SUBXACT_EVENT_COMMIT_SUB) {
		if (local->layers.size() >= 2 && local->layers[local->layers.size() - 2].sub == parent) {
			Layer top = std::move(local->layers.back());
			local->layers.pop_back();
			merge_into(local->layers.back(), top);
		} else {
			local->layers.back().sub = parent;
		}
	}
}

// ---- the trigger

// What the trigger needs of a buffered rollup's catalog row.
// Kept per backend (configs below) until a relcache invalidation of the
// source: rollup_build (creation, a change of owner) makes its triggers
// again, rollup_set_filter invalidates the source (rollup_buffer_invalidate),
// ALTER TABLE invalidates it. So a statement reads no catalog row.
struct Config {
	bool found = false;
	bool buffered = false;
	Oid source = InvalidOid;
	Oid owner = InvalidOid;
	int time_att = 0;
	std::vector<int> key_atts;
	std::vector<int> sum_atts;
	bool has_filter = false;
	std::string filter;
	std::string filter_tree;
	Oid filter_relid = InvalidOid;
};

SPIPlanPtr config_plan = nullptr;
std::unordered_map<int32, Config> *configs = nullptr;
bool callback_registered = false;

// A relcache invalidation: forget the configs of that source (of every one
// for InvalidOid). Plain C++, allocates nothing.
void relcache_callback(Datum, Oid relid) {
	if (configs == nullptr)
		return;
	for (auto it = configs->begin(); it != configs->end();)
		if (relid == InvalidOid || it->second.source == relid)
			it = configs->erase(it);
		else
			++it;
}
std::unordered_map<int32, bool> *modes = nullptr; // rollup id -> buffered (a rollup's mode never changes)
Oid log_relid = InvalidOid;
Oid log_nsp = InvalidOid;

// Reads rollup rid's row into SPI_tuptable. Owns nothing C++: inside SPI, as
// the catalog's owner.
void read_config_row(int32 rid) {
	if (config_plan == nullptr) {
		Oid types[1] = {INT4OID};
		config_plan = ce::prepare_kept(
		    "SELECT c.mode OPERATOR(pg_catalog.=) 'buffered', c.source::pg_catalog.oid, c.owner::pg_catalog.oid,"
		    " (SELECT a.attnum FROM pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) c.source"
		    "   AND a.attname OPERATOR(pg_catalog.=) c.time_column),"
		    " ARRAY(SELECT a.attnum FROM pg_catalog.unnest(c.group_by) WITH ORDINALITY g(n, o)"
		    "   JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.source"
		    "   AND a.attname OPERATOR(pg_catalog.=) g.n ORDER BY g.o)::pg_catalog.text,"
		    " ARRAY(SELECT a.attnum FROM pg_catalog.unnest(c.sums) WITH ORDINALITY g(n, o)"
		    "   JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.source"
		    "   AND a.attname OPERATOR(pg_catalog.=) g.n ORDER BY g.o)::pg_catalog.text,"
		    " c.filter, c.filter_tree, c.filter_relid"
		    " FROM counter.rollups c WHERE c.rollup_id OPERATOR(pg_catalog.=) $1",
		    1, types);
	}
	Datum args[1] = {Int32GetDatum(rid)};
	if (SPI_execute_plan(config_plan, args, nullptr, true, 1) != SPI_OK_SELECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading counter.rollups failed")));
}

std::vector<int> parse_attnums(const char *text) {
	std::vector<int> out;
	if (text == nullptr)
		return out;
	const char *p = text;
	while (*p != '\0') {
		if (*p >= '0' && *p <= '9') {
			int n = 0;
			while (*p >= '0' && *p <= '9')
				n = n * 10 + (*p++ - '0');
			out.push_back(n);
		} else {
			p++;
		}
	}
	return out;
}

Config read_config(TriggerData *td, int32 rid) {
	Oid catalog = ce::pg_guard([] { return ce::catalog_owner(); });
	ce::as_owner(catalog, [rid] { read_config_row(rid); });
	Config c;
	if (SPI_processed == 0)
		return c;
	HeapTuple row = SPI_tuptable->vals[0];
	TupleDesc desc = SPI_tuptable->tupdesc;
	bool isnull;
	c.source = DatumGetObjectId(SPI_getbinval(row, desc, 2, &isnull));
	if (c.source != RelationGetRelid(td->tg_relation))
		return c;
	c.found = true;
	c.buffered = DatumGetBool(SPI_getbinval(row, desc, 1, &isnull));
	if (!c.buffered)
		return c;
	c.owner = DatumGetObjectId(SPI_getbinval(row, desc, 3, &isnull));
	Datum att = SPI_getbinval(row, desc, 4, &isnull);
	c.time_att = isnull ? 0 : DatumGetInt16(att);
	c.key_atts = parse_attnums(SPI_getvalue(row, desc, 5));
	c.sum_atts = parse_attnums(SPI_getvalue(row, desc, 6));
	char *filter = SPI_getvalue(row, desc, 7);
	char *tree = SPI_getvalue(row, desc, 8);
	c.has_filter = filter != nullptr && tree != nullptr;
	if (c.has_filter) {
		c.filter = filter;
		c.filter_tree = tree;
	}
	Datum relid = SPI_getbinval(row, desc, 9, &isnull);
	c.filter_relid = isnull ? InvalidOid : DatumGetObjectId(relid);
	return c;
}

struct ColumnType {
	int16 typlen;
	bool byval;
};

// One row's key; false when its image is too long. Owns nothing C++ (may
// detoast).
bool make_key(Key *k, int32 rid, int64 hour, TupleTableSlot *slot, const std::vector<int> &atts,
              const std::vector<ColumnType> &types) {
	memset(k, 0, sizeof(Key));
	k->db = MyDatabaseId;
	k->rid = rid;
	k->hour = hour;
	int pos = 0;
	for (size_t i = 0; i < atts.size(); i++) {
		bool isnull;
		Datum d = slot_getattr(slot, atts[i], &isnull);
		ce::buffer::Image img;
		if (isnull) {
			img.len = 0; // group columns are NOT NULL; an empty image stands for NULL
		} else if (!ce::buffer::image_of(d, types[i].typlen, types[i].byval, &img)) {
			return false;
		}
		if (pos + 2 + img.len > max_key_bytes)
			return false;
		memcpy(k->bytes + pos, &img.len, 2);
		memcpy(k->bytes + pos + 2, img.bytes, img.len);
		pos += 2 + img.len;
	}
	k->len = static_cast<uint16>(pos);
	return true;
}

int128 sum_value(Datum d, Oid type) {
	switch (type) {
		case INT2OID:
			return DatumGetInt16(d);
		case INT4OID:
			return DatumGetInt32(d);
		default:
			return DatumGetInt64(d);
	}
}

// Appends one row per (rollup, hour) to counter_internal.rollup_buffer_log
// (no index: writers never wait on each other). Written directly into the
// heap: the log belongs to counter_ext; no role writes it through SQL. Owns
// nothing C++.
void insert_log(int32 rid, const int64 *hours, int n) {
	// the oid is kept per backend; a table made again (the extension
	// dropped and created) is looked up again
	Relation rel = log_relid == InvalidOid ? nullptr : try_table_open(log_relid, RowExclusiveLock);
	if (rel != nullptr &&
	    (RelationGetNamespace(rel) != log_nsp || strcmp(RelationGetRelationName(rel), "rollup_buffer_log") != 0)) {
		table_close(rel, RowExclusiveLock);
		rel = nullptr;
	}
	if (rel == nullptr) {
		log_nsp = get_namespace_oid("counter_internal", false);
		log_relid = get_relname_relid("rollup_buffer_log", log_nsp);
		if (log_relid == InvalidOid)
			ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			                errmsg("counter_internal.rollup_buffer_log does not exist"),
			                errhint("ALTER EXTENSION counter_ext UPDATE.")));
		rel = table_open(log_relid, RowExclusiveLock);
	}
	Datum values[3];
	bool nulls[3] = {false, false, false};
	values[0] = Int32GetDatum(rid);
	values[2] = TimestampTzGetDatum(ce::buffer::epoch());
	for (int i = 0; i < n; i++) {
		values[1] = TimestampTzGetDatum(hours[i]);
		HeapTuple tuple = heap_form_tuple(RelationGetDescr(rel), values, nulls);
		simple_heap_insert(rel, tuple);
		heap_freetuple(tuple);
	}
	table_close(rel, RowExclusiveLock);
}

void sort_unique(std::vector<int64> &v) {
	std::sort(v.begin(), v.end());
	v.erase(std::unique(v.begin(), v.end()), v.end());
}

// Folds the statement's rows (those passing the filter, as the owner) into
// this (sub)transaction's layer. 'dirty' gets the hours of rows that could
// not be buffered, 'hours' every hour of a folded row.
void fold_rows(TriggerData *td, int32 rid, const Config &c, std::vector<int64> &hours, std::vector<int64> &dirty) {
	Relation rel = td->tg_relation;
	TupleDesc desc = RelationGetDescr(rel);
	Tuplestorestate *store = td->tg_newtable;
	if (store == nullptr)
		return;
	std::vector<ColumnType> key_types;
	for (int att : c.key_atts) {
		Form_pg_attribute a = TupleDescAttr(desc, att - 1);
		key_types.push_back(ColumnType{a->attlen, a->attbyval});
	}
	std::vector<Oid> sum_types;
	for (int att : c.sum_atts)
		sum_types.push_back(TupleDescAttr(desc, att - 1)->atttypid);
	bool serializable = IsolationIsSerializable();
	Layer &layer = current_layer();
	ExprState *filter = nullptr;
	ExprContext *econtext = nullptr;
	if (c.has_filter)
		ce::pg_guard([&] {
			filter = ce::filter::prepare(rel, c.filter_tree.c_str(), c.filter_relid, c.filter.c_str());
			econtext = CreateStandaloneExprContext();
		});
	TupleTableSlot *slot = ce::pg_guard([desc, store] {
		TupleTableSlot *s = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
		int pointer = tuplestore_alloc_read_pointer(store, EXEC_FLAG_REWIND);
		tuplestore_select_read_pointer(store, pointer);
		tuplestore_rescan(store);
		return s;
	});
	int64 last_hour = PG_INT64_MIN;
	Key k;
	for (uint32 n = 1;; n++) {
		bool got = ce::pg_guard([store, slot] { return tuplestore_gettupleslot(store, true, false, slot); });
		if (!got)
			break;
		if (filter != nullptr) {
			bool pass = ce::pg_guard([filter, econtext, slot] {
				ResetExprContext(econtext);
				econtext->ecxt_scantuple = slot;
				bool isnull;
				Datum d = ExecEvalExprSwitchContext(filter, econtext, &isnull);
				return !isnull && DatumGetBool(d);
			});
			if (!pass)
				continue;
		}
		int att = c.time_att;
		int64 hour = ce::pg_guard([slot, att] {
			bool isnull;
			Datum at = slot_getattr(slot, att, &isnull);
			return isnull ? PG_INT64_MIN : hour_of(DatumGetTimestampTz(at));
		});
		if (hour == PG_INT64_MIN)
			continue;
		bool keyed =
		    !serializable && ce::pg_guard([&] { return make_key(&k, rid, hour, slot, c.key_atts, key_types); });
		Sums *target = nullptr;
		if (keyed) {
			auto it = layer.adds.find(k);
			if (it != layer.adds.end()) {
				target = &it->second;
			} else if (reserve()) {
				try {
					Sums zero;
					memset(&zero, 0, sizeof(zero));
					target = &layer.adds.emplace(k, zero).first->second;
				} catch (...) {
					unreserve(1);
					throw;
				}
			}
		}
		if (target == nullptr) {
			if (dirty.empty() || dirty.back() != hour)
				dirty.push_back(hour);
			continue;
		}
		target->count++;
		for (size_t i = 0; i < c.sum_atts.size(); i++) {
			int sa = c.sum_atts[i];
			Oid st = sum_types[i];
			target->sums[i] += ce::pg_guard([slot, sa, st] {
				bool isnull;
				Datum d = slot_getattr(slot, sa, &isnull);
				return isnull ? static_cast<int128>(0) : sum_value(d, st);
			});
		}
		if (hour != last_hour) {
			hours.push_back(hour);
			last_hour = hour;
		}
		if ((n & 1023) == 0)
			ce::check_for_interrupts();
	}
	ce::pg_guard([store, slot, econtext] {
		tuplestore_select_read_pointer(store, 0);
		ExecDropSingleTupleTableSlot(slot);
		if (econtext != nullptr)
			FreeExprContext(econtext, true);
	});
}

// ---- reading and claiming the shared table

std::vector<Entry> copy_entries(int32 rid, const std::vector<int64> *days) {
	std::vector<Entry> out;
	LWLockAcquire(shared->lock, LW_SHARED);
	try {
		HASH_SEQ_STATUS seq;
		hash_seq_init(&seq, table);
		for (auto *e = static_cast<Entry *>(hash_seq_search(&seq)); e != nullptr;
		     e = static_cast<Entry *>(hash_seq_search(&seq))) {
			if (e->key.db != MyDatabaseId || e->key.rid != rid)
				continue;
			if (days != nullptr) {
				int64 day = e->key.hour - (((e->key.hour % USECS_PER_DAY) + USECS_PER_DAY) % USECS_PER_DAY);
				if (!std::binary_search(days->begin(), days->end(), day))
					continue;
			}
			try {
				Entry copy = *e;
				if (local != nullptr)
					for (const Layer &l : local->layers) {
						auto it = l.takes.find(copy.key);
						if (it != l.takes.end())
							add_into(copy.v, it->second, -1);
					}
				if (!is_zero(copy.v))
					out.push_back(copy);
			} catch (...) {
				hash_seq_term(&seq);
				throw;
			}
		}
	} catch (...) {
		LWLockRelease(shared->lock);
		throw;
	}
	LWLockRelease(shared->lock);
	return out;
}

// Adds entries (what the shared table holds beyond what this transaction
// already takes: copy_entries) to what this (sub)transaction takes at commit.
void take_into(Layer &layer, const std::vector<Entry> &entries) {
	for (const Entry &e : entries) {
		auto it = layer.takes.find(e.key);
		if (it == layer.takes.end())
			layer.takes.emplace(e.key, e.v);
		else
			add_into(it->second, e.v, 1);
	}
}

// int128 as a numeric datum. Owns nothing C++.
Datum numeric_of(int128 v) {
	char buf[48];
	char *p = buf + sizeof(buf) - 1;
	*p = '\0';
	bool neg = v < 0;
	unsigned __int128 u = neg ? static_cast<unsigned __int128>(-(v + 1)) + 1 : static_cast<unsigned __int128>(v);
	do {
		*--p = static_cast<char>('0' + static_cast<int>(u % 10));
		u /= 10;
	} while (u != 0);
	if (neg)
		*--p = '-';
	return DirectFunctionCall3(numeric_in, CStringGetDatum(p), ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
}

// Checks that the calling role may read rollup rid's pending sums (a member
// of its owner) and that the rollup is buffered. Owns nothing C++: inside SPI.
void require_owner(int32 rid) {
	Oid user = GetUserId();
	Oid catalog = ce::catalog_owner();
	Oid owner = InvalidOid;
	bool buffered = false;
	{
		Oid saved;
		int context;
		GetUserIdAndSecContext(&saved, &context);
		SetUserIdAndSecContext(catalog, context | SECURITY_RESTRICTED_OPERATION);
		PG_TRY();
		{
			Oid types[1] = {INT4OID};
			Datum args[1] = {Int32GetDatum(rid)};
			if (SPI_execute_with_args("SELECT c.owner::pg_catalog.oid, c.mode OPERATOR(pg_catalog.=) 'buffered'"
			                          " FROM counter.rollups c WHERE c.rollup_id OPERATOR(pg_catalog.=) $1",
			                          1, types, args, nullptr, true, 1) == SPI_OK_SELECT &&
			    SPI_processed == 1) {
				bool isnull;
				owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
				buffered = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
			}
		}
		PG_FINALLY();
		{ SetUserIdAndSecContext(saved, context); }
		PG_END_TRY();
	}
	if (owner == InvalidOid || !buffered || !has_privs_of_role(user, owner))
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
		                errmsg("buffered rollup %d does not exist or you do not own it", rid),
		                errhint("Read a rollup's pending sums with counter.rollup_totals or counter.rollup_pending.")));
}

} // namespace

namespace ce::rollup_buffer {

void init() {
	if (!process_shared_preload_libraries_in_progress || IsBinaryUpgrade)
		return;
	DefineCustomIntVariable("counter_ext.rollup_buffer_entries",
	                        "(rollup, key, hour) entries the shared table of buffered rollups holds.",
	                        "Each entry takes about 300 bytes of shared memory. A row that finds no room has its "
	                        "hour marked dirty and recomputed by the rollup's job.",
	                        &capacity, 65536, 128, 64 * 1024 * 1024, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = ce::entry<shmem_request>;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = ce::entry<shmem_startup>;
	RegisterXactCallback(ce::entry<xact_callback>, nullptr);
	RegisterSubXactCallback(ce::entry<subxact_callback>, nullptr);
}

bool fire(TriggerData *td, int32 rid) {
	if (modes == nullptr)
		modes = new std::unordered_map<int32, bool>();
	auto known = modes->find(rid);
	if (known != modes->end() && !known->second)
		return false;
	if (configs == nullptr)
		configs = new std::unordered_map<int32, Config>();
	if (!callback_registered) {
		ce::pg_guard([] { CacheRegisterRelcacheCallback(relcache_callback, 0); });
		callback_registered = true;
	}
	auto cached = configs->find(rid);
	if (cached == configs->end()) {
		ce::pg_guard([] {
			if (SPI_connect() != SPI_OK_CONNECT)
				ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		});
		Config read = read_config(td, rid);
		ce::pg_guard([] { SPI_finish(); });
		if (read.found)
			(*modes)[rid] = read.buffered;
		if (!read.found || !read.buffered)
			return false;
		cached = configs->emplace(rid, std::move(read)).first;
	}
	const Config c = cached->second; // a copy: an invalidation during the statement may drop the entry
	if (c.source != RelationGetRelid(td->tg_relation))
		return false;
	// Without shared memory (the library not preloaded) the caller's path
	// marks the statement's hours dirty, as in deferred mode: nothing lost.
	if (!available())
		return false;
	if (c.time_att <= 0 || c.sum_atts.size() > static_cast<size_t>(max_sums))
		throw ce::Error("55000", "rollup has no valid time column or too many sums for buffered mode");
	if (local == nullptr)
		local = new Local();
	std::vector<int64> hours;
	std::vector<int64> dirty;
	if (c.has_filter) {
		// the filter is the owner's code: run as the owner
		ce::OwnerSwitch as = ce::pg_guard([&c] { return ce::owner_enter(c.owner); });
		try {
			fold_rows(td, rid, c, hours, dirty);
		} catch (...) {
			ce::owner_leave(as);
			throw;
		}
		ce::owner_leave(as);
	} else {
		// no user code runs: key images are bytes, sums integers
		fold_rows(td, rid, c, hours, dirty);
	}
	sort_unique(hours);
	sort_unique(dirty);
	// Shared hour locks, in hour order: only a recompute of the hour waits.
	const int64 since_1970 = (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * HOURS_PER_DAY;
	std::vector<int64> to_log;
	Layer &layer = current_layer();
	for (int64 h : hours) {
		ce::pg_guard([rid, h, since_1970] {
			ce::locks::take(ce::locks::rollup_hour, ce::locks::rollup_id(rid, h / USECS_PER_HOUR + since_1970), true,
			                true);
		});
		uint64 pair = (static_cast<uint64>(static_cast<uint32>(rid)) << 32) ^ static_cast<uint64>(h / USECS_PER_HOUR);
		bool seen = false;
		for (const Layer &l : local->layers)
			seen = seen || l.logged.count(pair) != 0;
		if (!seen)
			to_log.push_back(h);
	}
	if (!to_log.empty()) {
		const int64 *v = to_log.data();
		int n = static_cast<int>(to_log.size());
		ce::pg_guard([rid, v, n] { insert_log(rid, v, n); });
		for (int64 h : to_log)
			layer.logged.insert((static_cast<uint64>(static_cast<uint32>(rid)) << 32) ^
			                    static_cast<uint64>(h / USECS_PER_HOUR));
	}
	if (!dirty.empty()) {
		Oid catalog = ce::pg_guard([] { return ce::catalog_owner(); });
		const int64 *v = dirty.data();
		int n = static_cast<int>(dirty.size());
		ce::pg_guard([] {
			if (SPI_connect() != SPI_OK_CONNECT)
				ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		});
		ce::as_owner(catalog, [rid, v, n] { insert_dirty(rid, v, n); });
		ce::pg_guard([] { SPI_finish(); });
	}
	return true;
}

} // namespace ce::rollup_buffer

// counter_internal.rollup_buffer_epoch(): the epoch of the shared table
// (NULL when the library was not preloaded).
CE_FUNCTION(counter_rollup_buffer_epoch) {
	(void)fcinfo;
	TimestampTz e = ce::buffer::epoch();
	if (e == 0)
		PG_RETURN_NULL();
	return TimestampTzGetDatum(e);
}

// counter_internal.rollup_buffer_rows(rid, claim) RETURNS SETOF record: the
// pending (key..., hour, count, sum...) of buffered rollup rid, typed by the
// caller's column definition list (group columns, hour timestamptz, count
// bigint, one numeric per sum). The caller must be a member of the rollup's
// owner (it runs as the owner: counter_internal.exec_as_owner). claim: for
// the flush; takes the rollup_day lock of each day (waiting for a recompute
// or another flush of it), returns only what it then finds, and takes those
// amounts out of the shared table when the transaction commits.
CE_FUNCTION(counter_rollup_buffer_rows) {
	ce::require_arg(fcinfo, 0, "rollup id");
	ce::require_arg(fcinfo, 1, "claim");
	int32 rid = PG_GETARG_INT32(0);
	bool claim = PG_GETARG_BOOL(1);
	ce::pg_guard([fcinfo, rid] {
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		require_owner(rid);
		SPI_finish();
		InitMaterializedSRF(fcinfo, 0);
	});
	if (!available())
		return static_cast<Datum>(0);
	auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
	TupleDesc desc = rsinfo->setDesc;
	std::vector<Entry> entries;
	if (claim) {
		entries = copy_entries(rid, nullptr);
		std::vector<int64> days;
		for (const Entry &e : entries)
			days.push_back(e.key.hour - (((e.key.hour % USECS_PER_DAY) + USECS_PER_DAY) % USECS_PER_DAY));
		sort_unique(days);
		const int64 since_1970_days = POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE;
		for (int64 d : days)
			ce::pg_guard([rid, d, since_1970_days] {
				ce::locks::take(ce::locks::rollup_day, ce::locks::rollup_id(rid, d / USECS_PER_DAY + since_1970_days),
				                false, true);
			});
		entries = copy_entries(rid, &days);
		if (local == nullptr)
			local = new Local();
		take_into(current_layer(), entries);
	} else {
		entries = copy_entries(rid, nullptr);
	}
	int natts = desc->natts;
	std::vector<Datum> values(static_cast<size_t>(natts));
	bool *isnull = ce::pg_guard([natts] { return static_cast<bool *>(palloc0(sizeof(bool) * (natts + 1))); });
	for (const Entry &e : entries) {
		Datum *v = values.data();
		const Entry *ep = &e;
		ce::pg_guard([rsinfo, desc, ep, v, natts, isnull] {
			int nkeys = 0;
			int pos = 0;
			// the key columns: every column before 'hour'
			while (nkeys < natts && pos < ep->key.len) {
				Form_pg_attribute a = TupleDescAttr(desc, nkeys);
				ce::buffer::Image img;
				memcpy(&img.len, ep->key.bytes + pos, 2);
				memcpy(img.bytes, ep->key.bytes + pos + 2, img.len);
				pos += 2 + img.len;
				v[nkeys] = ce::buffer::datum_of(img, a->attlen, a->attbyval);
				isnull[nkeys] = false;
				nkeys++;
			}
			if (natts < nkeys + 2)
				ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
				                errmsg("the column list of rollup_buffer_rows does not fit the rollup")));
			v[nkeys] = TimestampTzGetDatum(ep->key.hour);
			isnull[nkeys] = false;
			v[nkeys + 1] = Int64GetDatum(ep->v.count);
			isnull[nkeys + 1] = false;
			for (int i = nkeys + 2; i < natts; i++) {
				int s = i - nkeys - 2;
				v[i] = s < max_sums ? numeric_of(ep->v.sums[s]) : static_cast<Datum>(0);
				isnull[i] = s >= max_sums;
			}
			tuplestore_putvalues(rsinfo->setResult, desc, v, isnull);
		});
	}
	return static_cast<Datum>(0);
}

// counter_internal.rollup_buffer_take(rid, from_h, to_h, hours) RETURNS
// bigint: what the shared table holds for rollup rid's hours in [from_h,
// to_h) (and in 'hours', unless NULL) is taken out of it when the
// transaction commits; returns the number of entries. For a recompute of
// those hours, under their locks (its GROUP BY counted those rows), and for
// rollup_drop. EXECUTE revoked from PUBLIC: called by counter_ext's refresh
// and drop functions only.
CE_FUNCTION(counter_rollup_buffer_take) {
	ce::require_arg(fcinfo, 0, "rollup id");
	ce::require_arg(fcinfo, 1, "from_h");
	ce::require_arg(fcinfo, 2, "to_h");
	int32 rid = PG_GETARG_INT32(0);
	TimestampTz from = PG_GETARG_TIMESTAMPTZ(1);
	TimestampTz to = PG_GETARG_TIMESTAMPTZ(2);
	std::vector<int64> only;
	if (!PG_ARGISNULL(3)) {
		ArrayType *array = PG_GETARG_ARRAYTYPE_P(3);
		Datum *elems = nullptr;
		bool *nulls = nullptr;
		int n = 0;
		ce::pg_guard([array, &elems, &nulls, &n] {
			deconstruct_array(array, TIMESTAMPTZOID, sizeof(TimestampTz), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elems,
			                  &nulls, &n);
		});
		for (int i = 0; i < n; i++)
			if (!nulls[i])
				only.push_back(DatumGetTimestampTz(elems[i]));
		sort_unique(only);
	}
	if (!available())
		PG_RETURN_INT64(0);
	std::vector<Entry> entries = copy_entries(rid, nullptr);
	if (local == nullptr)
		local = new Local();
	std::vector<Entry> chosen;
	for (const Entry &e : entries) {
		if (e.key.hour < from || e.key.hour >= to)
			continue;
		if (!PG_ARGISNULL(3) && !std::binary_search(only.begin(), only.end(), e.key.hour))
			continue;
		chosen.push_back(e);
	}
	take_into(current_layer(), chosen);
	PG_RETURN_INT64(static_cast<int64>(chosen.size()));
}

// counter_internal.rollup_buffer_invalidate(source regclass): makes every
// backend read the rollups of 'source' from the catalog again (after this
// transaction commits): rollup_set_filter calls it.
CE_FUNCTION(counter_rollup_buffer_invalidate) {
	ce::require_arg(fcinfo, 0, "source");
	Oid source = PG_GETARG_OID(0);
	ce::pg_guard([source] { CacheInvalidateRelcacheByRelid(source); });
	PG_RETURN_VOID();
}
