// Hourly rollups (src/sql/50_rollup.sql): counter_internal.rollup_trigger(),
// the statement-level trigger on a rollup's source (argument: the rollup id).
//
// Privileges (doc/security.md). The trigger runs as the writer, who needs
// only INSERT (UPDATE, DELETE) on the source. It
//   1. reads the rollup's catalog row as the catalog's owner
//      (ce::catalog_owner; restricted, search_path pinned) and checks that the
//      table it fires on is the rollup's source (a trigger copied to another
//      table, or restored without the catalog row, is refused);
//   2. for a deferred insert, and for every delete and update, records the
//      UTC hours of the rows in the dirty log, as the catalog's owner: the
//      hours are computed here in C++ from the time column (timestamptz,
//      checked), so no SQL and no user code runs on the rows;
//   3. in trigger mode, as the rollup's owner (ce::owner_enter: restricted,
//      new GUC level, search_path pg_catalog, pg_temp) applies the stored
//      filter tree to the new rows (src/filter.cpp) and keeps the rows that
//      pass for the transaction's commit, which runs the stored add_sql on
//      them once, registered as new_rows, as the owner (below: "Trigger mode
//      applies a transaction's rows once, at its commit"). Its plan is made
//      and run as the owner under the pinned path, never with the writer's
//      search_path, and kept per backend; it is made again when the stored
//      text changes (a rule change, or a rename: sql_for no longer names the
//      tables, and the text is generated afresh).
// A replicated rollup (replicated => true) also has row triggers enabled for
// replicas (counter_rollup_N_rinsert, _rdelete, _rupdate): the apply worker
// of a subscription fires only those. For each row they mark the UTC hour of
// the row (old and new for an update) dirty, as the catalog's owner, once
// per (rollup, hour) and (sub)transaction; the refresh job recomputes those
// hours from the rows, as the rollup's owner, in either mode. No user code
// and no SQL on the rows runs in the apply worker.
#include "counter_ext/citus.hpp"
#include "counter_ext/filter.hpp"
#include "counter_ext/locks.hpp"
#include "counter_ext/owner.hpp"
#include "counter_ext/rollup_buffer.hpp"
#include "counter_ext/rollup_pending.hpp"
#include "counter_ext/source.hpp"
#include "counter_ext/spi.hpp"
#include "counter_ext/wall.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/queryenvironment.h"
#include "utils/resowner.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
}

#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace {

using Kept = ce::rollup::KeptStatement;

// Per backend: the kept add plan of each rollup id.
std::unordered_map<int32, Kept> *kept = nullptr;
SPIPlanPtr lookup_plan = nullptr;
SPIPlanPtr regenerate_plan = nullptr;
SPIPlanPtr mark_plan = nullptr;

} // namespace

namespace ce::rollup {

// The UTC hour of an event time, as date_bin('1 hour', ts, '2000-01-01').
// Owns nothing C++.
int64 hour_of(TimestampTz ts) {
	if (TIMESTAMP_NOT_FINITE(ts))
		ereport(ERROR, (errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE), errmsg("timestamp out of range"),
		                errdetail("A rollup counts events by UTC hour; an infinite event time has none.")));
	int64 h = ts / USECS_PER_HOUR;
	if (ts % USECS_PER_HOUR < 0)
		h--;
	return h * USECS_PER_HOUR;
}

// Appends (rid, hour) for each of 'hours' to counter.rollup_dirty. Owns
// nothing C++: runs as the catalog's owner, inside SPI.
void insert_dirty(int32 rid, const int64 *hours, int n) {
	Datum *elems = static_cast<Datum *>(palloc(sizeof(Datum) * n));
	for (int i = 0; i < n; i++)
		elems[i] = TimestampTzGetDatum(hours[i]);
	ArrayType *array = construct_array(elems, n, TIMESTAMPTZOID, sizeof(TimestampTz), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
	if (mark_plan == nullptr) {
		Oid types[2] = {INT4OID, TIMESTAMPTZARRAYOID};
		mark_plan = ce::prepare_kept("INSERT INTO counter.rollup_dirty (rollup_id, hour)"
		                             " SELECT $1, h FROM pg_catalog.unnest($2) h",
		                             2, types);
	}
	Datum args[2] = {Int32GetDatum(rid), PointerGetDatum(array)};
	if (SPI_execute_plan(mark_plan, args, nullptr, false, 0) != SPI_OK_INSERT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("rollup %d: recording dirty hours failed", rid)));
}

void run_statement(int32 rid, KeptStatement &slot, const char *sql) {
	if (slot.plan == nullptr || slot.sql != sql) {
		SPIPlanPtr old = slot.plan;
		slot.plan = nullptr;
		slot.plan = ce::pg_guard([old, sql] {
			if (old != nullptr)
				SPI_freeplan(old);
			Oid types[1] = {INT4OID};
			return ce::prepare_kept(sql, 1, types);
		});
		slot.sql = sql; // if this throws, the next call makes the plan again
	}
	SPIPlanPtr plan = slot.plan;
	ce::pg_guard([plan, rid] {
		Datum args[1] = {Int32GetDatum(rid)};
		int rc = SPI_execute_plan(plan, args, nullptr, false, 0);
		if (rc < 0)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
			                errmsg("rollup %d: its trigger statement failed: %s", rid, SPI_result_code_string(rc))));
	});
}

} // namespace ce::rollup

namespace {

using ce::rollup::hour_of;
using ce::rollup::insert_dirty;

// What the trigger needs of a rollup's catalog row; strings live in SPI's
// procedure context until SPI_finish.
struct Rollup {
	bool found;
	bool trigger_mode;
	Oid owner;
	int time_att; // the time column's number in the source
	char *filter; // canonical text, or nullptr
	char *filter_tree;
	Oid filter_relid;
};

int compare_int64(const void *a, const void *b) {
	int64 x = *static_cast<const int64 *>(a);
	int64 y = *static_cast<const int64 *>(b);
	return x < y ? -1 : x > y ? 1 : 0;
}

struct Hours {
	int64 *v;
	int n;
	int cap;
};

// Sorts 'hours' and moves each hour once to its front; how many there are.
// Owns nothing C++.
int sort_distinct(Hours *hours) {
	qsort(hours->v, hours->n, sizeof(int64), compare_int64);
	int distinct = 1;
	for (int i = 1; i < hours->n; i++)
		if (hours->v[i] != hours->v[distinct - 1])
			hours->v[distinct++] = hours->v[i];
	return distinct;
}

// Adds the hours of column 'att' of every row of 'store' to 'hours'. Owns
// nothing C++.
void collect_hours(Tuplestorestate *store, TupleDesc desc, int att, Hours *hours) {
	TupleTableSlot *slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
	int pointer = tuplestore_alloc_read_pointer(store, EXEC_FLAG_REWIND);
	tuplestore_select_read_pointer(store, pointer);
	tuplestore_rescan(store);
	bool have_last = false;
	int64 last = 0;
	for (uint32 n = 1; tuplestore_gettupleslot(store, true, false, slot); n++) {
		bool isnull;
		Datum at = slot_getattr(slot, att, &isnull);
		if (isnull)
			continue;
		int64 h = hour_of(DatumGetTimestampTz(at));
		if (have_last && h == last)
			continue;
		if (hours->n == hours->cap) {
			hours->cap = hours->cap == 0 ? 16 : hours->cap * 2;
			hours->v = static_cast<int64 *>(hours->v == nullptr ? palloc(sizeof(int64) * hours->cap)
			                                                    : repalloc(hours->v, sizeof(int64) * hours->cap));
		}
		hours->v[hours->n++] = h;
		last = h;
		have_last = true;
		if ((n & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	tuplestore_select_read_pointer(store, 0);
	ExecDropSingleTupleTableSlot(slot);
}

// Reads the catalog row of rollup rid into SPI_tuptable (columns: see the
// query). Owns nothing C++: inside SPI.
void read_rollup(int32 rid) {
	Oid types[1] = {INT4OID};
	if (lookup_plan == nullptr)
		lookup_plan =
		    ce::prepare_kept("SELECT c.mode OPERATOR(pg_catalog.=) 'trigger', c.add_sql, c.sql_for IS DISTINCT FROM"
		                     " pg_catalog.format('%s|%s', c.source, c.rollup_table), c.source::pg_catalog.oid,"
		                     " c.owner::pg_catalog.oid, c.time_column, c.filter, c.filter_tree, c.filter_relid"
		                     " FROM counter.rollups c WHERE c.rollup_id OPERATOR(pg_catalog.=) $1",
		                     1, types);
	Datum args[1] = {Int32GetDatum(rid)};
	if (SPI_execute_plan(lookup_plan, args, nullptr, true, 1) != SPI_OK_SELECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading counter.rollups failed")));
}

// Records the hours of the rows of this statement in counter.rollup_dirty.
// Owns nothing C++: runs as the catalog's owner, inside SPI.
void mark_dirty(TriggerData *td, int32 rid, int att, bool new_rows, bool old_rows) {
	Hours hours{nullptr, 0, 0};
	TupleDesc desc = RelationGetDescr(td->tg_relation);
	if (new_rows && td->tg_newtable != nullptr)
		collect_hours(td->tg_newtable, desc, att, &hours);
	if (old_rows && td->tg_oldtable != nullptr)
		collect_hours(td->tg_oldtable, desc, att, &hours);
	if (hours.n == 0)
		return;
	int distinct = sort_distinct(&hours);
	insert_dirty(rid, hours.v, distinct);
}

// Reads the rollup's row, checks it is this table's rollup, records dirty
// hours. Owns nothing C++: runs as the catalog's owner, inside SPI.
Rollup read_and_mark(TriggerData *td, int32 rid) {
	read_rollup(rid);
	Rollup r{};
	if (SPI_processed == 0)
		return r;
	HeapTuple tuple = SPI_tuptable->vals[0];
	TupleDesc desc = SPI_tuptable->tupdesc;
	bool isnull;
	if (DatumGetObjectId(SPI_getbinval(tuple, desc, 4, &isnull)) != RelationGetRelid(td->tg_relation))
		return r;
	r.found = true;
	r.trigger_mode = DatumGetBool(SPI_getbinval(tuple, desc, 1, &isnull));
	r.owner = DatumGetObjectId(SPI_getbinval(tuple, desc, 5, &isnull));
	char *time_column = SPI_getvalue(tuple, desc, 6);
	r.filter = SPI_getvalue(tuple, desc, 7);
	r.filter_tree = SPI_getvalue(tuple, desc, 8);
	Datum relid = SPI_getbinval(tuple, desc, 9, &isnull);
	r.filter_relid = isnull ? InvalidOid : DatumGetObjectId(relid);

	bool insert = TRIGGER_FIRED_BY_INSERT(td->tg_event);
	int att = SPI_fnumber(RelationGetDescr(td->tg_relation), time_column);
	if (att <= 0 || TupleDescAttr(RelationGetDescr(td->tg_relation), att - 1)->atttypid != TIMESTAMPTZOID)
		ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
		                errmsg("the time column \"%s\" of rollup %d is not a timestamptz column of its source",
		                       time_column, rid)));
	r.time_att = att;
	if (!insert || !r.trigger_mode)
		mark_dirty(td, rid, att, !TRIGGER_FIRED_BY_DELETE(td->tg_event), !insert);
	return r;
}

// The (rollup, hour) pairs a replicated rollup's row triggers marked dirty
// in the current subtransaction: a mark made there is rolled back with it, so
// the memory is kept for that one (transaction, subtransaction) only.
struct Marked {
	uint64 xid = 0;
	SubTransactionId subxid = InvalidSubTransactionId;
	std::unordered_set<uint64> pairs; // hash of (rollup id, hour); see mark_row
};
Marked *marked = nullptr;

// A row trigger's row: marks its hours dirty unless this (sub)transaction
// did. Owns nothing C++ but 'marked' (static): runs as the catalog's owner,
// inside SPI. Returns false when the trigger does not belong to a rollup of
// this table.
bool mark_row(TriggerData *td, int32 rid) {
	read_rollup(rid);
	if (SPI_processed == 0)
		return false;
	bool isnull;
	HeapTuple row = SPI_tuptable->vals[0];
	// The source, or a partition of it: the row triggers are cloned onto the
	// partitions the apply worker writes (counter_ext/source.hpp).
	if (!ce::source::accepts(td->tg_relation, DatumGetObjectId(SPI_getbinval(row, SPI_tuptable->tupdesc, 4, &isnull))))
		return false;
	char *time_column = SPI_getvalue(row, SPI_tuptable->tupdesc, 6);
	TupleDesc desc = RelationGetDescr(td->tg_relation);
	int att = SPI_fnumber(desc, time_column);
	if (att <= 0 || TupleDescAttr(desc, att - 1)->atttypid != TIMESTAMPTZOID)
		ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
		                errmsg("the time column \"%s\" of rollup %d is not a timestamptz column of its source",
		                       time_column, rid)));
	uint64 xid = U64FromFullTransactionId(GetTopFullTransactionId());
	SubTransactionId subxid = GetCurrentSubTransactionId();
	if (marked->xid != xid || marked->subxid != subxid) {
		marked->pairs.clear();
		marked->xid = xid;
		marked->subxid = subxid;
	}
	HeapTuple tuples[2] = {td->tg_trigtuple, TRIGGER_FIRED_BY_UPDATE(td->tg_event) ? td->tg_newtuple : nullptr};
	for (HeapTuple tuple : tuples) {
		if (tuple == nullptr)
			continue;
		Datum at = heap_getattr(tuple, att, desc, &isnull);
		if (isnull)
			continue;
		int64 h = hour_of(DatumGetTimestampTz(at));
		uint64 key = (static_cast<uint64>(static_cast<uint32>(rid)) << 32) ^ static_cast<uint64>(h / USECS_PER_HOUR);
		if (marked->pairs.count(key) != 0)
			continue;
		insert_dirty(rid, &h, 1);
		try {
			marked->pairs.insert(key);
		} catch (...) {
			marked->pairs.clear(); // no memory to remember it: later rows mark again (duplicates are harmless)
		}
	}
	return true;
}

[[noreturn]] void not_registered(TriggerData *td, int32 rid) {
	// A restore of part of a dump (pg_dump --schema-only, --table) brings the
	// triggers without the catalog row; a trigger copied to another table
	// names a rollup of another source: refuse rather than count into
	// nothing, or into another rollup.
	Relation rel = td->tg_relation;
	char *table =
	    quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)), RelationGetRelationName(rel));
	ereport(ERROR,
	        (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
	         errmsg("trigger %s on %s belongs to rollup %d, which is not a rollup of that table in this database",
	                td->tg_trigger->tgname, table, rid),
	         errdetail("A restore of part of a dump (pg_dump --schema-only, --table) brings a table's triggers without "
	                   "counter_ext's catalog."),
	         errhint("Restore the whole database from a full pg_dump to keep the rollup; or drop the table's "
	                 "counter_rollup_%d_* triggers, then create the rollup again with counter.rollup_create.",
	                 rid)));
	pg_unreachable();
}

// Trigger mode applies a transaction's rows once, at its commit.
//
// Each statement's rows that pass the filter are copied into a store of the
// transaction (a tuplestore: spills to a temporary file past work_mem), one
// per (rollup, subtransaction that added them); at XACT_EVENT_PRE_COMMIT (or
// PRE_PREPARE) the stores of each rollup, in rollup id order, are registered
// as new_rows and the stored add_sql runs once on them, as the rollup's owner:
// one upsert per (key, hour) in (key, hour) order. So the rows of the rollup
// table are locked only from the start of the commit to its end (not from the
// first statement), and a transaction of many statements writes each row
// once. What another session sees does not change: it saw the increment only
// at the writer's commit before too. The hour locks (lock_hours) are still
// taken at each statement, so a recompute still waits for every writer that
// has rows in its hours. A rolled-back subtransaction drops the stores it
// made; a recompute in the writing transaction applies its rows first
// (apply_pending). An error of the upsert fails the COMMIT, which rolls back.
struct Store {
	int32 rid;
	Oid source;               // the relation the trigger fired on: the rows' format
	SubTransactionId added;   // the subtransaction the rows belong to
	SubTransactionId applied; // the subtransaction that wrote them; Invalid: not yet
	Tuplestorestate *rows;    // TopTransactionContext, TopTransactionResourceOwner
	// Citus (shard_add, below): the shard trigger whose rows these are, the
	// owner and the upsert into the rollup's colocated shard (TopTransactionContext);
	// InvalidOid and nullptr for a rollup of this node's catalog
	Oid tgoid = InvalidOid;
	Oid owner = InvalidOid;
	const char *sql = nullptr;
	const char *mark = nullptr; // the rows' hours into the dirty log's shard instead
	Oid space = InvalidOid;     // the rollup table on this node: its lock space
};
std::vector<Store> *stores = nullptr;
bool pending_callbacks = false;

// The store that this statement's rows of rollup 'rid' go to: the current
// subtransaction's, made if needed. Owns nothing C++ but 'stores' (static).
Tuplestorestate *store_for(int32 rid, Oid source) {
	SubTransactionId sub = GetCurrentSubTransactionId();
	for (auto it = stores->rbegin(); it != stores->rend(); ++it)
		if (it->rid == rid && it->source == source && it->added == sub && it->applied == InvalidSubTransactionId &&
		    it->tgoid == InvalidOid)
			return it->rows;
	stores->reserve(stores->size() + 1); // may throw: before anything is made
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	Tuplestorestate *rows = tuplestore_begin_heap(false, false, work_mem);
	MemoryContextSwitchTo(old);
	stores->push_back(Store{rid, source, sub, InvalidSubTransactionId, rows});
	return rows;
}

// Copies the rows of this statement that pass the rollup's filter into
// 'into' and adds their hours to 'hours'; with 'only' (sorted hours, n_only
// of them), only the rows of those hours. Owns nothing C++: runs as the
// rollup's owner (the filter is the owner's code).
void copy_passing_rows(TriggerData *td, const Rollup &r, Tuplestorestate *into, Hours *hours,
                       const int64 *only = nullptr, int n_only = 0) {
	Tuplestorestate *store = td->tg_newtable;
	Relation rel = td->tg_relation;
	ExprState *filter =
	    r.filter == nullptr ? nullptr : ce::filter::prepare(rel, r.filter_tree, r.filter_relid, r.filter);
	ExprContext *econtext = filter == nullptr ? nullptr : CreateStandaloneExprContext();
	TupleTableSlot *slot = MakeSingleTupleTableSlot(RelationGetDescr(rel), &TTSOpsMinimalTuple);
	int pointer = tuplestore_alloc_read_pointer(store, EXEC_FLAG_REWIND);
	tuplestore_select_read_pointer(store, pointer);
	tuplestore_rescan(store);
	bool have_last = false;
	int64 last = 0;
	for (uint32 n = 1; tuplestore_gettupleslot(store, true, false, slot); n++) {
		if (filter != nullptr) {
			ResetExprContext(econtext);
			econtext->ecxt_scantuple = slot;
			bool isnull;
			Datum pass = ExecEvalExprSwitchContext(filter, econtext, &isnull);
			if (isnull || !DatumGetBool(pass))
				continue;
		}
		bool isnull;
		Datum at = slot_getattr(slot, r.time_att, &isnull);
		if (only != nullptr && (isnull || !std::binary_search(only, only + n_only, hour_of(DatumGetTimestampTz(at)))))
			continue;
		if (!isnull) {
			int64 h = hour_of(DatumGetTimestampTz(at));
			if (!have_last || h != last) {
				if (hours->n == hours->cap) {
					hours->cap = hours->cap == 0 ? 16 : hours->cap * 2;
					hours->v =
					    static_cast<int64 *>(hours->v == nullptr ? palloc(sizeof(int64) * hours->cap)
					                                             : repalloc(hours->v, sizeof(int64) * hours->cap));
				}
				hours->v[hours->n++] = h;
				last = h;
				have_last = true;
			}
		}
		// The store outlives this statement: a temporary file it makes
		// belongs to the transaction, not to the statement's portal.
		ResourceOwner owner = CurrentResourceOwner;
		CurrentResourceOwner = TopTransactionResourceOwner;
		tuplestore_puttupleslot(into, slot);
		CurrentResourceOwner = owner;
		if ((n & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	tuplestore_select_read_pointer(store, 0);
	ExecDropSingleTupleTableSlot(slot);
	if (econtext != nullptr)
		FreeExprContext(econtext, true);
}

// Takes the shared lock of each UTC hour in 'hours' (ce::locks::rollup_hour,
// in hour order) for this transaction: a recompute of an hour takes it alone,
// so it never overwrites an increment it could not see. The lock space is
// counter_ext's own: only a recompute of this rollup, by its owner, can hold
// these locks, never another role. (No lock space: the SQL is still 1.4's,
// whose add statement takes 1.4's advisory lock itself.) Owns nothing C++.
void lock_hours(int32 rid, Hours *hours) {
	if (hours->n == 0 || ce::locks::space() == InvalidOid)
		return;
	qsort(hours->v, hours->n, sizeof(int64), compare_int64);
	// hour numbers since 1970-01-01 00:00 UTC (hours->v: since 2000-01-01)
	const int64 since_1970 = (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * HOURS_PER_DAY;
	for (int i = 0; i < hours->n; i++)
		if (i == 0 || hours->v[i] != hours->v[i - 1])
			ce::locks::take(ce::locks::rollup_hour,
			                ce::locks::rollup_id(rid, hours->v[i] / USECS_PER_HOUR + since_1970), true, true);
}

// Registers 'rows' (of relation 'source') as new_rows. Owns nothing C++.
void register_new_rows(Oid source, Tuplestorestate *rows) {
	auto *enr = static_cast<EphemeralNamedRelation>(palloc(sizeof(EphemeralNamedRelationData)));
	enr->md.name = pstrdup("new_rows");
	enr->md.reliddesc = source;
	enr->md.tupdesc = nullptr;
	enr->md.enrtype = ENR_NAMED_TUPLESTORE;
	enr->md.enrtuples = tuplestore_tuple_count(rows);
	enr->reldata = rows;
	if (SPI_register_relation(enr) != SPI_OK_REL_REGISTER)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_register_relation failed")));
}

// Trigger mode, per statement: the hour locks, and this statement's passing
// rows kept for the commit; as the owner.
void add_rows(TriggerData *td, int32 rid, const Rollup &r) {
	if (td->tg_newtable == nullptr || tuplestore_tuple_count(td->tg_newtable) == 0)
		return;
	Oid source = RelationGetRelid(td->tg_relation);
	Tuplestorestate *into = store_for(rid, source);
	ce::OwnerSwitch as = ce::pg_guard([&r] { return ce::owner_enter(r.owner); });
	try {
		ce::pg_guard([td, rid, &r, into] {
			Hours hours{nullptr, 0, 0};
			copy_passing_rows(td, r, into, &hours);
			lock_hours(rid, &hours);
			if (hours.v != nullptr)
				pfree(hours.v);
		});
	} catch (...) {
		ce::owner_leave(as);
		throw;
	}
	ce::owner_leave(as);
}

// What applying a rollup's stores needs of its catalog row, read as the
// catalog's owner: false when the rollup (of that source, in trigger mode) is
// gone, as when it was dropped in this transaction. Owns nothing C++: inside SPI.
bool read_for_apply(int32 rid, Oid source, Oid *owner, char **add_sql) {
	read_rollup(rid);
	if (SPI_processed == 0)
		return false;
	HeapTuple tuple = SPI_tuptable->vals[0];
	TupleDesc desc = SPI_tuptable->tupdesc;
	bool isnull;
	if (!DatumGetBool(SPI_getbinval(tuple, desc, 1, &isnull)) ||
	    DatumGetObjectId(SPI_getbinval(tuple, desc, 4, &isnull)) != source)
		return false;
	bool stale = DatumGetBool(SPI_getbinval(tuple, desc, 3, &isnull));
	*owner = DatumGetObjectId(SPI_getbinval(tuple, desc, 5, &isnull));
	*add_sql = SPI_getvalue(tuple, desc, 2);
	if (stale) {
		Oid types[1] = {INT4OID};
		Datum args[1] = {Int32GetDatum(rid)};
		if (regenerate_plan == nullptr)
			regenerate_plan = ce::prepare_kept("SELECT c.add_sql FROM counter_internal.rollup_sql($1) c", 1, types);
		if (SPI_execute_plan(regenerate_plan, args, nullptr, true, 1) != SPI_OK_SELECT || SPI_processed != 1)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("counter_internal.rollup_sql(%d) failed", rid)));
		*add_sql = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	}
	if (*add_sql == nullptr)
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE), errmsg("rollup %d has no stored SQL", rid)));
	return true;
}

// One store of all the rows in 'parts' (each a tuplestore of the same
// relation), in this memory context and resource owner. Owns nothing C++.
Tuplestorestate *merge(Tuplestorestate **parts, int n, Oid source) {
	Relation rel = relation_open(source, NoLock);
	TupleTableSlot *slot = MakeSingleTupleTableSlot(RelationGetDescr(rel), &TTSOpsMinimalTuple);
	relation_close(rel, NoLock);
	Tuplestorestate *out = tuplestore_begin_heap(false, false, work_mem);
	for (int i = 0; i < n; i++) {
		tuplestore_rescan(parts[i]);
		while (tuplestore_gettupleslot(parts[i], true, false, slot))
			tuplestore_puttupleslot(out, slot);
	}
	ExecDropSingleTupleTableSlot(slot);
	return out;
}

// Runs 'sql' (the rollup's add_sql) on 'rows' as new_rows, with the kept plan
// of rollup rid; the caller has switched to the owner. Inside SPI.
void run_add(int32 rid, Kept &slot, const char *sql, Oid source, Tuplestorestate *rows) {
	ce::pg_guard([source, rows] { register_new_rows(source, rows); });
	ce::rollup::run_statement(rid, slot, sql);
}

// At the commit no statement's snapshot is left: the writes take one (an
// error aborts the transaction, which pops it). True when it pushed one.
// Owns nothing C++.
bool snapshot_if_none() {
	if (ActiveSnapshotSet())
		return false;
	PushActiveSnapshot(GetTransactionSnapshot());
	return true;
}

// Citus: runs one shard store group's upsert (Store::sql) on its rows as
// new_rows. Owns nothing C++: as the owner, inside SPI.
void shard_upsert(int32 rid, Oid source, const char *sql, Tuplestorestate *rows) {
	register_new_rows(source, rows);
	int rc = SPI_execute(sql, false, 0);
	if (rc != SPI_OK_INSERT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
		                errmsg("rollup %d: its write into a shard failed: %s", rid, SPI_result_code_string(rc))));
}

// Citus: writes the unwritten stores of the shard triggers of trigger-mode
// rollups (shard_add, below), one upsert per (rollup, shard) into the
// rollup's colocated shard, in (rollup id, shard) order, each as the owner,
// holding the shard's commit lock (rollup_node_commit; per source shard: the
// connections Citus opens for one transaction write different shards) to the
// end of the transaction: one writer at a time, so that no writer's upsert
// waits for another's row locks. It waits for that lock only when 'wait'
// (the local COMMIT: a transaction of this node alone, or the one Citus
// started here, before it sends PREPARE to the others): at a PREPARE (Citus's
// two-phase commit) a wait could close a cycle across nodes that no deadlock
// detector sees (a transaction prepared on one node holds its rows there
// while its PREPARE on another waits for a transaction that waits for those
// rows: seen, every writer hung). Without the lock the rows are not
// written: their hours are marked in the dirty log's shard, for the refresh.
// Marks the stores written by the current subtransaction.
void apply_shards(bool wait) {
	std::vector<size_t> todo;
	for (size_t i = 0; i < stores->size(); i++)
		if ((*stores)[i].applied == InvalidSubTransactionId && (*stores)[i].tgoid != InvalidOid)
			todo.push_back(i);
	if (todo.empty())
		return;
	std::sort(todo.begin(), todo.end(), [](size_t a, size_t b) {
		const Store &x = (*stores)[a], &y = (*stores)[b];
		return x.rid != y.rid ? x.rid < y.rid : x.source < y.source;
	});
	SubTransactionId sub = ce::pg_guard([] { return GetCurrentSubTransactionId(); });
	bool pushed = ce::pg_guard(snapshot_if_none);
	for (size_t i = 0; i < todo.size();) {
		size_t j = i;
		std::vector<Tuplestorestate *> parts;
		const Store &first = (*stores)[todo[i]];
		for (; j < todo.size() && (*stores)[todo[j]].rid == first.rid && (*stores)[todo[j]].source == first.source; j++)
			parts.push_back((*stores)[todo[j]].rows);
		Tuplestorestate **array = parts.data();
		int n = static_cast<int>(parts.size());
		int32 rid = first.rid;
		Oid source = first.source;
		Oid space = first.space;
		bool got = ce::pg_guard([space, source, wait] {
			return ce::locks::take_in(space, ce::locks::rollup_node_commit, source, false, wait);
		});
		const char *sql = got ? first.sql : first.mark;
		Tuplestorestate *rows =
		    n == 1 ? parts[0] : ce::pg_guard([array, n, source] { return merge(array, n, source); });
		ce::pg_guard([] {
			if (SPI_connect() != SPI_OK_CONNECT)
				ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		});
		ce::as_owner(first.owner, [rid, source, sql, rows] { shard_upsert(rid, source, sql, rows); });
		ce::pg_guard([] { SPI_finish(); });
		if (n > 1)
			ce::pg_guard([rows] { tuplestore_end(rows); });
		for (size_t k = i; k < j; k++)
			(*stores)[todo[k]].applied = sub;
		i = j;
	}
	if (pushed)
		ce::pg_guard([] { PopActiveSnapshot(); });
}

// Writes the unwritten stores of rollup 'only' (all rollups: 0), in rollup id
// order, each rollup's rows in one upsert as its owner; marks them written by
// the current subtransaction.
void apply(int32 only, bool at_commit) {
	if (stores == nullptr)
		return;
	if (only == 0)
		apply_shards(at_commit);
	std::vector<int32> rids;
	for (const Store &s : *stores)
		if (s.applied == InvalidSubTransactionId && s.tgoid == InvalidOid && (only == 0 || s.rid == only))
			rids.push_back(s.rid);
	if (rids.empty())
		return;
	std::sort(rids.begin(), rids.end());
	rids.erase(std::unique(rids.begin(), rids.end()), rids.end());
	if (kept == nullptr)
		kept = new std::unordered_map<int32, Kept>();
	SubTransactionId sub = ce::pg_guard([] { return GetCurrentSubTransactionId(); });
	bool pushed = ce::pg_guard(snapshot_if_none);
	for (int32 rid : rids) {
		// A rollup's statement trigger fires on its source only (read_and_mark),
		// so all its stores hold rows of one relation.
		std::vector<Tuplestorestate *> parts;
		Oid source = InvalidOid;
		for (const Store &s : *stores)
			if (s.applied == InvalidSubTransactionId && s.rid == rid && s.tgoid == InvalidOid) {
				source = s.source;
				parts.push_back(s.rows);
			}
		Kept &slot = (*kept)[rid];
		Oid catalog = ce::pg_guard([] {
			if (SPI_connect() != SPI_OK_CONNECT)
				ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
			return ce::catalog_owner();
		});
		Oid owner = InvalidOid;
		char *sql = nullptr;
		bool found =
		    ce::as_owner(catalog, [rid, source, &owner, &sql] { return read_for_apply(rid, source, &owner, &sql); });
		if (found) {
			Tuplestorestate **array = parts.data();
			int n = static_cast<int>(parts.size());
			Tuplestorestate *rows =
			    n == 1 ? parts[0] : ce::pg_guard([array, n, source] { return merge(array, n, source); });
			// Writers of a rollup upsert one at a time, each holding the lock
			// through its commit: the next one then finds the rows it shares
			// with it committed, instead of a chain of writers each waiting on
			// the row locks of another (8 writers got less done than one).
			// Only at COMMIT: a prepared transaction would keep it until COMMIT
			// PREPARED, and a recompute's earlier write would keep it for the
			// rest of its transaction (their row locks alone keep them exact).
			ce::pg_guard([rid, at_commit] {
				if (at_commit && ce::locks::space() != InvalidOid)
					ce::locks::take(ce::locks::rollup_commit, static_cast<uint32>(rid), false, true);
			});
			ce::OwnerSwitch as = ce::pg_guard([owner] { return ce::owner_enter(owner); });
			try {
				run_add(rid, slot, sql, source, rows);
			} catch (...) {
				ce::owner_leave(as);
				throw;
			}
			ce::owner_leave(as);
			if (n > 1)
				ce::pg_guard([rows] { tuplestore_end(rows); });
		}
		ce::pg_guard([] { SPI_finish(); });
		for (Store &s : *stores)
			if (s.applied == InvalidSubTransactionId && s.rid == rid && s.tgoid == InvalidOid)
				s.applied = sub;
	}
	if (pushed)
		ce::pg_guard([] { PopActiveSnapshot(); });
}

// The end of the transaction: write what is left (commit, prepare), then
// forget the stores. On abort their memory and files go with the transaction.
void pending_xact(XactEvent event, void *) {
	if (stores == nullptr || stores->empty())
		return;
	switch (event) {
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PRE_PREPARE:
			apply(0, event == XACT_EVENT_PRE_COMMIT);
			for (Store &s : *stores) {
				Tuplestorestate *rows = s.rows;
				s.rows = nullptr;
				ce::pg_guard([rows] { tuplestore_end(rows); });
			}
			stores->clear();
			break;
		case XACT_EVENT_PARALLEL_PRE_COMMIT:
			break;
		default: // the end itself, or an abort
			stores->clear();
			break;
	}
}

// A subtransaction's end: committed, its stores (and what it wrote) become
// its parent's; aborted, the stores it added are dropped and those it wrote
// are unwritten again (the upsert rolled back with it).
void pending_subxact(SubXactEvent event, SubTransactionId my, SubTransactionId parent, void *) {
	if (stores == nullptr || stores->empty())
		return;
	if (event == SUBXACT_EVENT_COMMIT_SUB) {
		for (Store &s : *stores) {
			if (s.added == my)
				s.added = parent;
			if (s.applied == my)
				s.applied = parent;
		}
	} else if (event == SUBXACT_EVENT_ABORT_SUB) {
		// Aborting a subtransaction aborts those inside it, whose ids are greater.
		for (Store &s : *stores) {
			if (s.added >= my && s.rows != nullptr) {
				Tuplestorestate *rows = s.rows;
				s.rows = nullptr;
				ce::pg_guard([rows] { tuplestore_end(rows); });
			} else if (s.applied >= my)
				s.applied = InvalidSubTransactionId;
		}
		stores->erase(std::remove_if(stores->begin(), stores->end(), [](const Store &s) { return s.rows == nullptr; }),
		              stores->end());
	}
}

// Makes the stores and registers their transaction callbacks, once per backend.
void keep_stores() {
	if (stores == nullptr)
		stores = new std::vector<Store>();
	if (!pending_callbacks) {
		ce::pg_guard([] {
			RegisterXactCallback(ce::entry<pending_xact>, nullptr);
			RegisterSubXactCallback(ce::entry<pending_subxact>, nullptr);
		});
		pending_callbacks = true;
	}
}

// ---------------------------------------------------------------------------
// Citus (doc/citus.md, "Rollups on a distributed table"): a deferred rollup
// whose source is hash-distributed, grouped by its distribution column. Its
// triggers are made on the distributed table and copied by Citus to every
// shard, on every node, where no catalog of counter_ext is: the arguments
// carry what the shard's trigger needs (rollup id, 'citus', time column,
// distribution column, the dirty log's name). On a shard it records the UTC
// hours of the statement's rows (one row per hour, with one value of the
// distribution column of that hour's rows, so that the mark lands here) in
// the shard of the rollup's dirty log (beside the source, or 1.7's
// counter_internal.rollup_<id>_dirty) colocated with
// it, found in Citus's metadata (the one lookup, ce::citus::colocated_shards,
// as a tracked counter's shard trigger): a local write, in the writer's
// transaction, as the shard's owner (the rollup's owner). The refresh, on the
// coordinator, moves the marks into counter.rollup_dirty and recomputes those
// hours with statements Citus pushes down. On the distributed table itself
// (which holds no rows) the trigger does nothing. EXECUTE on rollup_trigger is
// revoked from PUBLIC on every node: only counter.rollup_create (or a
// superuser) makes such a trigger.
using ShardMark = ce::citus::ShardTrigger; // state[0]: the dirty log's shard

// Owns nothing C++: as the table's owner, inside SPI.
void shard_mark_fill(ShardMark *m, TriggerData *td, int32 rid) {
	Relation rel = td->tg_relation;
	// 1.8 names the dirty log (beside the source); 1.7's is in counter_internal
	const char *tables[1] = {td->tg_trigger->tgnargs >= 5 ? td->tg_trigger->tgargs[4]
	                                                      : psprintf("counter_internal.rollup_%d_dirty", rid)};
	ce::citus::Place place = ce::citus::shard_trigger_fill(m, rel, tables, 1);
	if (place == ce::citus::Place::no_citus)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
		                errmsg("the trigger %s on %s belongs to rollup %d on Citus, which is not installed in this "
		                       "database",
		                       td->tg_trigger->tgname, RelationGetRelationName(rel), rid),
		                errhint("CREATE EXTENSION citus, or drop the trigger.")));
	if (place == ce::citus::Place::missing)
		ereport(ERROR,
		        (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
		         errmsg("the trigger %s on %s belongs to rollup %d, whose dirty log has no shard on this node "
		                "colocated with %s",
		                td->tg_trigger->tgname, RelationGetRelationName(rel), rid, RelationGetRelationName(rel)),
		         errdetail("A rollup on a distributed table marks the hours of each shard's rows in the colocated "
		                   "shard of its dirty log (%s).",
		                   tables[0]),
		         errhint("The rollup was dropped, or its dirty log was moved apart from the table: drop the trigger "
		                 "(on the coordinator, with citus.enable_unsafe_triggers on), then counter.rollup_create "
		                 "again.")));
}

// The (k, h) rows of transition table 'table': its distribution column
// ('key') and the UTC hour of its time column ('at'). Owns nothing C++.
char *mark_leg(const char *table, const char *key, const char *at) {
	return psprintf("SELECT %s.%s AS k, pg_catalog.date_bin('01:00:00'::pg_catalog.interval, %s.%s,"
	                " '2000-01-01 00:00:00+00'::pg_catalog.timestamptz) AS h FROM %s WHERE %s.%s IS NOT NULL",
	                table, key, table, at, table, table, at);
}

// The INSERT of one mark per UTC hour of 'rows' (mark_leg) into the dirty
// log's shard 'dirty' (with only_hours: only the hours in $1, a
// timestamptz[]). Owns nothing C++.
char *mark_sql(const char *dirty, const char *rows, bool only_hours) {
	return psprintf("INSERT INTO %s (key, hour) SELECT DISTINCT ON (x.h) x.k, x.h FROM (%s) x%s ORDER BY x.h", dirty,
	                rows, only_hours ? " WHERE x.h OPERATOR(pg_catalog.=) ANY ($1)" : "");
}

// The statement of one event kind (0 INSERT, 1 DELETE, 2 UPDATE): one mark
// per UTC hour of the transition tables' rows. Owns nothing C++: inside SPI.
SPIPlanPtr shard_mark_plan(ShardMark *m, TriggerData *td, int kind) {
	if (m->plans[kind] != nullptr)
		return m->plans[kind];
	char **a = td->tg_trigger->tgargs;
	const char *at = quote_identifier(a[2]);
	const char *key = quote_identifier(a[3]);
	char *rows = kind == 0 ? mark_leg("new_rows", key, at)
	             : kind == 1
	                 ? mark_leg("old_rows", key, at)
	                 : psprintf("%s UNION ALL %s", mark_leg("new_rows", key, at), mark_leg("old_rows", key, at));
	m->plans[kind] = ce::prepare_kept(mark_sql(m->state[0], rows, false), 0, nullptr);
	return m->plans[kind];
}

// Owns nothing C++: as the table's owner.
void shard_mark_run(ShardMark *m, TriggerData *td, int32 rid) {
	if (SPI_connect() != SPI_OK_CONNECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
	if (!m->valid)
		shard_mark_fill(m, td, rid);
	if (!m->shell) {
		if (SPI_register_trigger_data(td) != SPI_OK_TD_REGISTER)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_register_trigger_data failed")));
		int kind = TRIGGER_FIRED_BY_INSERT(td->tg_event) ? 0 : TRIGGER_FIRED_BY_DELETE(td->tg_event) ? 1 : 2;
		int rc = SPI_execute_plan(shard_mark_plan(m, td, kind), nullptr, nullptr, false, 0);
		if (rc != SPI_OK_INSERT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
			                errmsg("rollup %d: recording dirty hours failed: %s", rid, SPI_result_code_string(rc))));
	}
	SPI_finish();
}

// Trigger mode (1.8; doc/citus.md, "Trigger mode"): the INSERT trigger of a
// trigger-mode rollup grouped by the distribution column has two more
// arguments, the rollup table (colocated with the source) and the upsert's
// text after its target (counter_internal.rollup_citus_add_sql: the GROUP BY of
// new_rows with the filter printed from its stored tree, and ON CONFLICT DO
// UPDATE adding to the row). On a shard, as the table's owner, it takes the
// shared lock of each UTC hour of the statement's rows in the rollup's lock
// space on this node (ce::locks::take_in: the rollup table's OID here, which
// must be the owner's) and keeps the rows for the transaction's commit (or
// PREPARE, in Citus's two-phase commit), where apply_shards writes them into
// the rollup's colocated shard in one upsert, as one node's trigger mode does.
// A recompute, on the coordinator, first takes those hours alone on every
// node (counter_internal.rollup_node_hold, in a statement Citus sends to each
// shard in the recompute's distributed transaction).
// Owns nothing C++: as the table's owner, inside SPI. Returns false on the
// distributed table itself.
bool shard_add_fill(ShardMark *m, TriggerData *td, int32 rid) {
	char **a = td->tg_trigger->tgargs;
	if (!m->valid) {
		const char *tables[2] = {a[4], a[5]};
		ce::citus::Place place = ce::citus::shard_trigger_fill(m, td->tg_relation, tables, 2);
		if (place == ce::citus::Place::no_citus || place == ce::citus::Place::missing)
			ereport(ERROR,
			        (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			         errmsg("the trigger %s on %s belongs to rollup %d, whose table or dirty log has no shard on "
			                "this node colocated with it",
			                td->tg_trigger->tgname, RelationGetRelationName(td->tg_relation), rid),
			         errhint("The rollup was dropped, or its tables were moved apart from its source: drop the "
			                 "trigger (on the coordinator, with citus.enable_unsafe_triggers on), then "
			                 "counter.rollup_create again.")));
		if (m->shell)
			return false;
		Oid table = ce::citus::relation_named(a[5]);
		if (!OidIsValid(table) || !has_privs_of_role(m->owner, ce::citus::relation_owner(table)))
			ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			                errmsg("the trigger %s on %s names the rollup table %s, which its owner does not own",
			                       td->tg_trigger->tgname, RelationGetRelationName(td->tg_relation), a[5])));
		m->space = table;
		m->sql = MemoryContextStrdup(m->context, psprintf("INSERT INTO %s AS r %s", m->state[1], a[6]));
		m->mark = MemoryContextStrdup(
		    m->context,
		    mark_sql(m->state[0], mark_leg("new_rows", quote_identifier(a[3]), quote_identifier(a[2])), false));
	}
	return !m->shell;
}

// The statement's part, as the table's owner: the shared lock of each UTC
// hour of its rows, and those rows into 'into'. A writer never waits for a
// recompute: an hour whose lock it cannot take at once (a recompute holds
// it, or waits for it) is marked in the dirty log's shard instead, in the
// writer's transaction, and its rows are not kept; the refresh after the
// commit recomputes that hour from the rows. (Waiting would deadlock across
// nodes: the writer's statement holds hours on one node while it waits on
// another, where the recompute, which holds that one, waits for it.)
// Owns nothing C++: inside SPI.
void shard_add_rows(ShardMark *m, TriggerData *td, Tuplestorestate *into) {
	Relation rel = td->tg_relation;
	int att = SPI_fnumber(RelationGetDescr(rel), td->tg_trigger->tgargs[2]);
	if (att <= 0 || TupleDescAttr(RelationGetDescr(rel), att - 1)->atttypid != TIMESTAMPTZOID)
		ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
		                errmsg("the time column \"%s\" of a rollup's trigger is not a timestamptz column of %s",
		                       td->tg_trigger->tgargs[2], RelationGetRelationName(rel))));
	Hours hours{nullptr, 0, 0};
	collect_hours(td->tg_newtable, RelationGetDescr(rel), att, &hours);
	if (hours.n == 0)
		return;
	int distinct = sort_distinct(&hours);
	const int64 since_1970 = (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * HOURS_PER_DAY;
	bool *held = static_cast<bool *>(palloc(sizeof(bool) * distinct));
	int denied = 0;
	for (int i = 0; i < distinct; i++) {
		held[i] = ce::locks::take_in(m->space, ce::locks::rollup_node_hour,
		                             static_cast<uint32>(hours.v[i] / USECS_PER_HOUR + since_1970), true, false);
		denied += held[i] ? 0 : 1;
	}
	if (denied > 0) {
		Datum *elems = static_cast<Datum *>(palloc(sizeof(Datum) * denied));
		for (int i = 0, j = 0; i < distinct; i++)
			if (!held[i])
				elems[j++] = TimestampTzGetDatum(hours.v[i]);
		ArrayType *array =
		    construct_array(elems, denied, TIMESTAMPTZOID, sizeof(TimestampTz), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
		if (SPI_register_trigger_data(td) != SPI_OK_TD_REGISTER)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_register_trigger_data failed")));
		if (m->plans[0] == nullptr) {
			char **a = td->tg_trigger->tgargs;
			Oid types[1] = {TIMESTAMPTZARRAYOID};
			m->plans[0] = ce::prepare_kept(
			    mark_sql(m->state[0], mark_leg("new_rows", quote_identifier(a[3]), quote_identifier(a[2])), true), 1,
			    types);
		}
		Datum args[1] = {PointerGetDatum(array)};
		if (SPI_execute_plan(m->plans[0], args, nullptr, false, 0) != SPI_OK_INSERT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("recording dirty hours failed")));
	}
	// the rows of the hours it holds
	int n_held = 0;
	for (int i = 0; i < distinct; i++)
		if (held[i])
			hours.v[n_held++] = hours.v[i];
	Rollup r{};
	r.time_att = att;
	Hours seen{nullptr, 0, 0};
	if (n_held > 0)
		copy_passing_rows(td, r, into, &seen, hours.v, n_held);
	if (seen.v != nullptr)
		pfree(seen.v);
	pfree(held);
	pfree(hours.v);
}

void shard_add(TriggerData *td, int32 rid) {
	ShardMark *m = ce::citus::shard_trigger(td->tg_trigger->tgoid, td->tg_relation);
	// filled once per backend (until an invalidation): then the statement
	// switches to the owner once, below
	bool shard = m->valid ? !m->shell : ce::as_owner(td->tg_relation->rd_rel->relowner, [m, td, rid] {
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		bool here = shard_add_fill(m, td, rid);
		SPI_finish();
		return here;
	});
	if (!shard || td->tg_newtable == nullptr || tuplestore_tuple_count(td->tg_newtable) == 0)
		return;
	keep_stores();
	// this statement's rows go to the current subtransaction's store of this shard trigger
	Oid source = RelationGetRelid(td->tg_relation);
	SubTransactionId sub = ce::pg_guard([] { return GetCurrentSubTransactionId(); });
	Store *store = nullptr;
	for (auto it = stores->rbegin(); it != stores->rend() && store == nullptr; ++it)
		if (it->tgoid == td->tg_trigger->tgoid && it->source == source && it->added == sub &&
		    it->applied == InvalidSubTransactionId)
			store = &*it;
	if (store == nullptr) {
		stores->reserve(stores->size() + 1);
		Store fresh{rid, source, sub, InvalidSubTransactionId, nullptr};
		fresh.tgoid = td->tg_trigger->tgoid;
		fresh.owner = m->owner;
		fresh.space = m->space;
		const char *sql = m->sql;
		const char *mark = m->mark;
		ce::pg_guard([&fresh, sql, mark] {
			MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
			fresh.rows = tuplestore_begin_heap(false, false, work_mem);
			fresh.sql = pstrdup(sql);
			fresh.mark = pstrdup(mark);
			MemoryContextSwitchTo(old);
		});
		stores->push_back(fresh);
		store = &stores->back();
	}
	Tuplestorestate *into = store->rows;
	ce::as_owner(m->owner, [m, td, into] {
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		shard_add_rows(m, td, into);
		SPI_finish();
	});
}

// The shard path of counter_internal.rollup_trigger: arguments (rollup id,
// 'citus', time column, distribution column, and since 1.8 the dirty log;
// trigger mode's INSERT trigger two more: shard_add).
void shard_mark(TriggerData *td) {
	int nargs = td->tg_trigger->tgnargs;
	if (TRIGGER_FIRED_FOR_ROW(td->tg_event) || (nargs != 4 && nargs != 5 && nargs != 7) ||
	    (nargs == 7 && !TRIGGER_FIRED_BY_INSERT(td->tg_event)))
		throw ce::Error("39P01", "a rollup's trigger on a Citus shard is a statement trigger with 5 arguments (4 made "
		                         "by 1.7; 7 for a trigger-mode rollup's INSERT)");
	int32 rid = ce::pg_guard([td] { return pg_strtoint32(td->tg_trigger->tgargs[0]); });
	if (nargs == 7) {
		shard_add(td, rid);
		return;
	}
	ShardMark *m = ce::citus::shard_trigger(td->tg_trigger->tgoid, td->tg_relation);
	// the shard's owner is the distributed table's: the rollup's owner
	Oid owner = m->valid ? m->owner : td->tg_relation->rd_rel->relowner;
	ce::as_owner(owner, [m, td, rid] { shard_mark_run(m, td, rid); });
}

} // namespace

// counter_internal.rollup_trigger(): see above.
// counter_internal.rollup_shard_mark() (1.8): the trigger of a rollup of a
// table Citus distributes (the shard path above, alone). PUBLIC may execute
// it, for the reasons counter_internal.tracked_shard_fold gives
// (src/tracked.cpp): it writes, as the table's owner, marks into the dirty
// log its arguments name; only the table's owner may attach it.
CE_FUNCTION(counter_rollup_shard_mark) {
	if (!CALLED_AS_TRIGGER(fcinfo))
		throw ce::Error("39P01", "counter_internal.rollup_shard_mark must be called as a trigger");
	auto *td = reinterpret_cast<TriggerData *>(fcinfo->context);
	if (!TRIGGER_FIRED_AFTER(td->tg_event) || TRIGGER_FIRED_BY_TRUNCATE(td->tg_event) ||
	    (td->tg_trigger->tgnargs != 5 && td->tg_trigger->tgnargs != 7) ||
	    strcmp(td->tg_trigger->tgargs[1], "citus") != 0)
		throw ce::Error("39P01",
		                "counter_internal.rollup_shard_mark must be an AFTER INSERT, UPDATE or DELETE "
		                "trigger with the 5 arguments (7: a trigger-mode INSERT) counter.rollup_create gives it");
	shard_mark(td);
	return PointerGetDatum(nullptr);
}

// counter_internal.rollup_node_hold(rollup regclass, from_h timestamptz, to_h
// timestamptz, hours timestamptz[]) -> boolean (1.8; Citus): takes alone, for
// this transaction, the UTC hours of [from_h, to_h) (only those in 'hours'
// when it is not NULL; at most a day) of the trigger-mode rollup whose table
// is 'rollup' on this node (its lock space: shard_add above), in hour order,
// after writing what this transaction's shard triggers keep for their commit
// (as one node's lock_take does). True. PUBLIC may execute it: the recompute
// runs it as the rollup's owner on every node, where counter_ext has no
// catalog; the caller must have the rights of the table's owner (42501), so a
// role can hold only its own rollups' hours. STABLE, so that in the statement
// the recompute sends to each shard (SELECT ... WHERE NOT rollup_node_hold(...))
// it is a one-time condition, evaluated once per shard, even on an empty one.
CE_FUNCTION(counter_rollup_node_hold) {
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		throw ce::Error(ce::sqlstate::null_value_not_allowed, "rollup, from_h and to_h must not be NULL");
	Oid table = PG_GETARG_OID(0);
	TimestampTz from = PG_GETARG_TIMESTAMPTZ(1);
	TimestampTz to = PG_GETARG_TIMESTAMPTZ(2);
	if (!ce::citus::caller_has_owner_rights(table))
		throw ce::Error(ce::sqlstate::insufficient_privilege, "only the owner of a rollup's table may hold its hours",
		                "", "counter.rollup_recompute and the refresh job call it as the rollup's owner.");
	if (TIMESTAMP_NOT_FINITE(from) || TIMESTAMP_NOT_FINITE(to) || to <= from || to - from > USECS_PER_DAY)
		throw ce::Error(ce::sqlstate::invalid_parameter_value,
		                "the hours a rollup's recompute holds are a finite range of at most one day");
	std::vector<int64> wanted;
	if (!PG_ARGISNULL(3)) {
		ArrayType *array = PG_GETARG_ARRAYTYPE_P(3);
		ce::pg_guard([array, &wanted] {
			Datum *elems;
			bool *nulls;
			int n;
			deconstruct_array(array, TIMESTAMPTZOID, sizeof(TimestampTz), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elems,
			                  &nulls, &n);
			for (int i = 0; i < n; i++)
				if (!nulls[i] && !TIMESTAMP_NOT_FINITE(DatumGetTimestampTz(elems[i])))
					wanted.push_back(hour_of(DatumGetTimestampTz(elems[i])));
		});
	}
	std::sort(wanted.begin(), wanted.end());
	if (stores != nullptr)
		apply_shards(false);
	const int64 since_1970 = (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * HOURS_PER_DAY;
	for (int64 h = ce::pg_guard([from] { return hour_of(from); }); h < to; h += USECS_PER_HOUR)
		if (PG_ARGISNULL(3) || std::binary_search(wanted.begin(), wanted.end(), h))
			ce::pg_guard([table, h, since_1970] {
				ce::locks::take_in(table, ce::locks::rollup_node_hour,
				                   static_cast<uint32>(h / USECS_PER_HOUR + since_1970), false, true);
			});
	PG_RETURN_BOOL(true);
}

CE_FUNCTION(counter_rollup_fire) {
	if (!CALLED_AS_TRIGGER(fcinfo))
		throw ce::Error("39P01", "counter_internal.rollup_trigger must be called as a trigger");
	auto *td = reinterpret_cast<TriggerData *>(fcinfo->context);
	if (!TRIGGER_FIRED_AFTER(td->tg_event) || TRIGGER_FIRED_BY_TRUNCATE(td->tg_event) || td->tg_trigger->tgnargs < 1)
		throw ce::Error("39P01", "counter_internal.rollup_trigger must be an AFTER INSERT, UPDATE or DELETE trigger "
		                         "with the rollup id as its argument");
	if (td->tg_trigger->tgnargs >= 2 && strcmp(td->tg_trigger->tgargs[1], "citus") == 0) {
		shard_mark(td); // a rollup of a table Citus distributes (above)
		return PointerGetDatum(nullptr);
	}
	const char *arg = td->tg_trigger->tgargs[0];
	int32 rid = ce::pg_guard([arg] { return pg_strtoint32(arg); });
	if (kept == nullptr)
		kept = new std::unordered_map<int32, Kept>();
	if (TRIGGER_FIRED_FOR_ROW(td->tg_event)) {
		// A replicated rollup's row trigger (the apply worker): mark the hours;
		// a move between partitions (replica mode too) changes no row.
		if (ce::source::moving_rows())
			return PointerGetDatum(nullptr);
		if (marked == nullptr)
			marked = new Marked();
		Oid catalog = ce::pg_guard([] {
			if (SPI_connect() != SPI_OK_CONNECT)
				ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
			return ce::catalog_owner();
		});
		bool found = ce::as_owner(catalog, [td, rid] { return mark_row(td, rid); });
		if (!found)
			ce::pg_guard([td, rid] { not_registered(td, rid); });
		ce::pg_guard([] { SPI_finish(); });
		return PointerGetDatum(nullptr);
	}

	// A buffered rollup's INSERT: folded in C++ (src/rollup_buffer.cpp).
	if (TRIGGER_FIRED_BY_INSERT(td->tg_event) && ce::rollup_buffer::fire(td, rid))
		return PointerGetDatum(nullptr);
	Oid catalog = ce::pg_guard([] {
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		return ce::catalog_owner();
	});
	Rollup r = ce::as_owner(catalog, [td, rid] { return read_and_mark(td, rid); });
	if (!r.found)
		ce::pg_guard([td, rid] { not_registered(td, rid); });
	if (TRIGGER_FIRED_BY_INSERT(td->tg_event) && r.trigger_mode) {
		keep_stores();
		add_rows(td, rid, r);
	}
	ce::pg_guard([] { SPI_finish(); });
	return PointerGetDatum(nullptr);
}

void ce::rollup::apply_pending(int32 rid) {
	apply(rid, false);
}
