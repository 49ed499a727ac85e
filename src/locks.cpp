// The locks of counter_ext/locks.hpp: ce::locks::take for C++, and for SQL
// counter_internal.lock_take(class, id, at, wait) and
// counter_internal.lock_classes(); counter_internal.lock_class(name) only
// for 1.4's SQL until the update.
#include "counter_ext/wall.hpp"
#include "counter_ext/citus.hpp"
#include "counter_ext/locks.hpp"
#include "counter_ext/rollup_pending.hpp"

extern "C" {
#include "access/heapam.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

namespace ce::locks {

unsigned int space() {
	Oid ns = get_namespace_oid("counter_internal", true);
	return OidIsValid(ns) ? get_relname_relid("lock_space", ns) : InvalidOid;
}

bool take(uint16_t cls, uint32_t id, bool shared, bool wait) {
	Oid classid = space();
	if (!OidIsValid(classid))
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		                errmsg("counter_ext's lock space counter_internal.lock_space does not exist"),
		                errhint("Run ALTER EXTENSION counter_ext UPDATE.")));
	LOCKTAG tag;
	SET_LOCKTAG_OBJECT(tag, MyDatabaseId, classid, id, cls);
	return LockAcquire(&tag, shared ? ShareLock : ExclusiveLock, false, !wait) != LOCKACQUIRE_NOT_AVAIL;
}

bool take_in(unsigned int table, uint16_t cls, uint32_t id, bool shared, bool wait) {
	LOCKTAG tag;
	SET_LOCKTAG_OBJECT(tag, MyDatabaseId, table, id, cls);
	return LockAcquire(&tag, shared ? ShareLock : ExclusiveLock, false, !wait) != LOCKACQUIRE_NOT_AVAIL;
}

} // namespace ce::locks

namespace {

// The day or hour number (since 1970-01-01 00:00 UTC) of an instant.
int64 unit_number(TimestampTz at, int64 unit) {
	int64 since_1970 = at + (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;
	int64 n = since_1970 / unit;
	return since_1970 % unit < 0 ? n - 1 : n;
}

} // namespace

// counter_internal.lock_take(class text, id bigint, at timestamptz DEFAULT
// NULL, wait boolean DEFAULT true) -> boolean: takes lock (class, id) of the
// registry exclusively for this transaction (for rollup_day and rollup_hour,
// id is the rollup id and 'at' the instant whose UTC day or hour is locked);
// false, without waiting, when 'wait' is false and another transaction holds it.
CE_FUNCTION(counter_lock_take) {
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(3))
		throw ce::Error(ce::sqlstate::null_value_not_allowed, "class, id and wait of lock_take must not be NULL");
	const char *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	const ce::locks::LockClass *c = ce::locks::find(name);
	if (c == nullptr)
		throw ce::Error(ce::sqlstate::invalid_parameter_value, ce::format("unknown lock class \"%s\"", name), "",
		                "The classes are listed by counter_internal.lock_classes().");
	int64 id = PG_GETARG_INT64(1);
	bool wait = PG_GETARG_BOOL(3);
	uint32 object;
	if (c->number == ce::locks::rollup_day || c->number == ce::locks::rollup_hour) {
		if (PG_ARGISNULL(2) || TIMESTAMP_NOT_FINITE(PG_GETARG_TIMESTAMPTZ(2)) || id < 0 || id > PG_INT32_MAX)
			throw ce::Error(ce::sqlstate::invalid_parameter_value,
			                ce::format("lock class \"%s\" needs a rollup id and a finite instant", name));
		int64 unit = c->number == ce::locks::rollup_day ? USECS_PER_DAY : USECS_PER_HOUR;
		object = ce::locks::rollup_id(static_cast<int32>(id), unit_number(PG_GETARG_TIMESTAMPTZ(2), unit));
	} else {
		if (id < 0)
			throw ce::Error(ce::sqlstate::invalid_parameter_value,
			                ce::format("lock class \"%s\" needs an id of at least 0", name));
		object = static_cast<uint32>(static_cast<uint64>(id) & 0xffffffffu);
	}
	if (c->number == ce::locks::rollup_node_hour || c->number == ce::locks::rollup_node_commit)
		throw ce::Error(
		    ce::sqlstate::invalid_parameter_value,
		    ce::format("lock class \"%s\" is taken by a trigger-mode rollup on Citus, in its own lock space", name));
	uint16_t cls = c->number;
	// A recompute takes its hours alone: first write the rows this transaction
	// added to the rollup (trigger mode writes them at commit), or it would
	// count them from the events and then again at the commit.
	if (cls == ce::locks::rollup_hour)
		ce::rollup::apply_pending(static_cast<int32>(id));
	bool taken = ce::pg_guard([cls, object, wait] { return ce::locks::take(cls, object, false, wait); });
	return BoolGetDatum(taken);
}

// counter_internal.lock_classes() -> setof (class, number, id)
CE_FUNCTION(counter_lock_classes) {
	ReturnSetInfo *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
	ce::pg_guard([fcinfo] { InitMaterializedSRF(fcinfo, 0); });
	for (const ce::locks::LockClass &c : ce::locks::classes) {
		Datum values[3] = {CStringGetTextDatum(c.name), Int16GetDatum(static_cast<int16>(c.number)),
		                   CStringGetTextDatum(c.id)};
		bool nulls[3] = {false, false, false};
		ce::pg_guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls); });
	}
	return static_cast<Datum>(0);
}

// counter_internal.lock_class(class text) -> integer: 1.4's SQL only, until
// ALTER EXTENSION counter_ext UPDATE (the advisory class ids of 1.1 to 1.4).
CE_FUNCTION(counter_lock_class) {
	const char *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	for (const ce::locks::LegacyClass &c : ce::locks::legacy_advisory)
		if (std::strcmp(c.name, name) == 0)
			return Int32GetDatum(c.key);
	throw ce::Error(ce::sqlstate::invalid_parameter_value, ce::format("unknown advisory-lock class \"%s\"", name), "",
	                "Run ALTER EXTENSION counter_ext UPDATE: 1.5 takes no advisory lock.");
}

namespace {

// Whether block lies in table rel, which this call holds RowShareLock on. A
// table holding that lock cannot shrink (VACUUM's truncation and TRUNCATE take
// AccessExclusiveLock), so its length, once read, is a lower bound until the
// end of the (sub)transaction that took the lock. It is kept for one table, one
// file (a TRUNCATE by this transaction makes a new one), one subtransaction of
// one transaction, and read again for anything else and for a block past it.
// Reading it on every call (an lseek) was a third of row_lock_skip's time.
bool block_exists(Relation rel, BlockNumber block) {
	struct Known {
		Oid relid;
		Oid file;
		LocalTransactionId lxid;
		SubTransactionId sub;
		BlockNumber blocks;
	};
	static Known known = {InvalidOid, InvalidOid, InvalidLocalTransactionId, InvalidSubTransactionId, 0};
#if PG_VERSION_NUM >= 170000
	LocalTransactionId lxid = MyProc->vxid.lxid;
#else
	LocalTransactionId lxid = MyProc->lxid;
#endif
	Known now = {RelationGetRelid(rel), rel->rd_rel->relfilenode, lxid, GetCurrentSubTransactionId(), 0};
	if (lxid != InvalidLocalTransactionId && known.relid == now.relid && known.file == now.file &&
	    known.lxid == now.lxid && known.sub == now.sub && block < known.blocks)
		return true;
	known.relid = InvalidOid; // unset until read (an error leaves it so)
	now.blocks = RelationGetNumberOfBlocks(rel);
	known = now;
	return block < now.blocks;
}

} // namespace

// counter_internal.row_lock_skip(rel regclass, row_id tid) -> boolean (1.8):
// locks the newest version of row row_id of table rel for update, for this
// transaction, as SELECT ... FOR UPDATE SKIP LOCKED does, but never waits:
// false when another transaction holds or is changing it, or when it is gone.
// SKIP LOCKED itself can wait: when the transaction that was updating the
// version it read ends just before it locks, heap_lock_tuple follows the
// update chain (heap_lock_updated_tuple, asked for by
// TUPLE_LOCK_FLAG_LOCK_UPDATE_IN_PROGRESS, which SELECT ... FOR UPDATE
// always sets) and waits, whatever the wait policy, for whoever changes the
// next version. A reconciliation holding a batch's other rows then closed a
// cycle with that writer (tracked_no_deadlock.sh, once, on PostgreSQL 18).
// Here the newest version is found by heapam_tuple_lock's own walk
// (TUPLE_LOCK_FLAG_FIND_LAST_VERSION), whose waits all follow the policy.
// PUBLIC may execute it: the reconciliation's statement runs it as the
// counter's owner on every node (Citus: on each shard), where counter_ext has
// no catalog; the caller must have the rights of the table's owner (42501),
// so a role locks only rows it could lock with SELECT ... FOR UPDATE. A row_id
// that names no row of the table (past its end, an unused line pointer) is
// false: the row is read first (SnapshotAny, which checks the line pointer)
// and its buffer stays pinned while it is locked, so no pruning frees it.
CE_FUNCTION(counter_row_lock_skip) {
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		throw ce::Error(ce::sqlstate::null_value_not_allowed, "rel and row_id of row_lock_skip must not be NULL");
	Oid relid = PG_GETARG_OID(0);
	ItemPointerData tid = *reinterpret_cast<ItemPointer>(PG_GETARG_POINTER(1));
	if (!ce::citus::caller_has_owner_rights(relid))
		throw ce::Error(ce::sqlstate::insufficient_privilege, "only the owner of a table may lock its rows here", "",
		                "A tracked counter's reconciliation calls it as the counter's owner.");
	bool locked = ce::pg_guard([relid, &tid] {
		Relation rel = table_open(relid, RowShareLock);
		if (rel->rd_rel->relkind != RELKIND_RELATION || rel->rd_tableam != GetHeapamTableAmRoutine())
			ereport(ERROR, (errcode(ERRCODE_WRONG_OBJECT_TYPE),
			                errmsg("\"%s\" is not a heap table", RelationGetRelationName(rel))));
		bool ok = false;
		if (ItemPointerIsValid(&tid) && block_exists(rel, ItemPointerGetBlockNumber(&tid))) {
			TupleTableSlot *seen = table_slot_create(rel, nullptr);
			if (table_tuple_fetch_row_version(rel, &tid, SnapshotAny, seen)) {
				TupleTableSlot *slot = table_slot_create(rel, nullptr);
				TM_FailureData tmfd;
				TM_Result r =
				    table_tuple_lock(rel, &tid, GetActiveSnapshot(), slot, GetCurrentCommandId(true),
				                     LockTupleExclusive, LockWaitSkip, TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &tmfd);
				ok = r == TM_Ok;
				ExecDropSingleTupleTableSlot(slot);
			}
			ExecDropSingleTupleTableSlot(seen);
		}
		table_close(rel, NoLock);
		return ok;
	});
	PG_RETURN_BOOL(locked);
}
