// Tracked counters (src/sql/30_tracked.sql): the hot paths, in C++.
//
//   counter_internal.tracked_fold()   trigger mode: the statement trigger
//   counter.add / value / values_of   application mode and reads
//
// Privileges (doc/security.md): these run as the caller. They read the
// counter's catalog row as the catalog's owner (ce::catalog_owner), check
// the caller's privilege on the source table (INSERT to add, SELECT to
// read), and do everything else (the key's conversion, the state tables) as
// the source table's owner, through ce::as_owner / ce::owner_enter: a
// security-restricted operation with search_path pg_catalog, pg_temp. Keys
// are converted by ce::keys::convert (no user-defined cast ever runs), keys
// are compared with the operators of the key type's default btree class.
#include "counter_ext/filter.hpp"
#include "counter_ext/keys.hpp"
#include "counter_ext/owner.hpp"
#include "counter_ext/spi.hpp"
#include "counter_ext/tracked_fold.hpp"
#include "counter_ext/wall.hpp"

extern "C" {
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "parser/parse_coerce.h"
#include "utils/acl.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "nodes/makefuncs.h"
#include "nodes/parsenodes.h"
#include "optimizer/optimizer.h"
#include "parser/parse_coerce.h"
#include "parser/parse_collate.h"
#include "parser/parse_expr.h"
#include "parser/parse_node.h"
#include "parser/parse_relation.h"
#include "parser/parser.h"
#include "rewrite/rewriteManip.h"
#include "utils/datum.h"
#include "utils/fmgrprotos.h"
#include "utils/array.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
#include "utils/typcache.h"
}

#include <algorithm>
#include <string>
#include <unordered_map>

// A plan kept for the life of the backend (SPI_keepplan).
SPIPlanPtr ce::prepare_kept(const char *sql, int nargs, Oid *types) {
	SPIPlanPtr plan = SPI_prepare(sql, nargs, types);
	if (plan == nullptr)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
		                errmsg("SPI_prepare failed: %s", SPI_result_code_string(SPI_result))));
	SPI_keepplan(plan);
	return plan;
}

// counter.tracked_caller(): the role that called the outermost function.
CE_FUNCTION(counter_tracked_caller) {
	(void)fcinfo;
	return ObjectIdGetDatum(GetOuterUserId());
}

// ---------------------------------------------------------------------------
// A counter's catalog row, read as the catalog's owner with kept plans.

namespace {

struct Counter {
	int32 id;
	Oid key_type;
	bool application;
	int32 shards;
	Interval width;
	Oid source;
	Oid owner;
	char *name;
	char *key_column;
	char *time_column;
	char *filter; // canonical text, or nullptr
	char *filter_tree;
	Oid filter_relid;
};

SPIPlanPtr lookup_plans[2] = {nullptr, nullptr}; // by name, by id

char *copy_value(HeapTuple tuple, TupleDesc desc, int col, MemoryContext keep) {
	char *v = SPI_getvalue(tuple, desc, col);
	return v == nullptr ? nullptr : MemoryContextStrdup(keep, v);
}

// Strings are copied into 'keep'. Raises 42704 when there is no such counter.
Counter load_counter(Datum key, bool by_id, MemoryContext keep) {
	Oid catalog = ce::pg_guard([] { return ce::catalog_owner(); });
	return ce::as_owner(catalog, [key, by_id, keep] {
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		SPIPlanPtr &plan = lookup_plans[by_id ? 1 : 0];
		if (plan == nullptr) {
			Oid types[1] = {static_cast<Oid>(by_id ? INT4OID : TEXTOID)};
			plan = ce::prepare_kept(
			    by_id ? "SELECT t.counter_id, t.key_type::oid, t.mode OPERATOR(pg_catalog.=) 'application', t.shards,"
			            " t.bucket_width, t.source::oid, t.owner::oid, t.name, t.key_column, t.time_column, t.filter,"
			            " t.filter_tree, t.filter_relid FROM counter.tracked t"
			            " WHERE t.counter_id OPERATOR(pg_catalog.=) $1"
			          : "SELECT t.counter_id, t.key_type::oid, t.mode OPERATOR(pg_catalog.=) 'application', t.shards,"
			            " t.bucket_width, t.source::oid, t.owner::oid, t.name, t.key_column, t.time_column, t.filter,"
			            " t.filter_tree, t.filter_relid FROM counter.tracked t WHERE t.name OPERATOR(pg_catalog.=) $1",
			    1, types);
		}
		Datum args[1] = {key};
		if (SPI_execute_plan(plan, args, nullptr, true, 1) != SPI_OK_SELECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading counter.tracked failed")));
		if (SPI_processed == 0) {
			if (by_id)
				ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
				                errmsg("tracked counter %d does not exist", DatumGetInt32(key)),
				                errhint("A trigger of a counter that was dropped is left on its table: DROP it.")));
			ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
			                errmsg("tracked counter \"%s\" does not exist", TextDatumGetCString(key)),
			                errhint("See counter.tracked for the registered counters.")));
		}
		HeapTuple tuple = SPI_tuptable->vals[0];
		TupleDesc desc = SPI_tuptable->tupdesc;
		bool isnull;
		Counter c;
		c.id = DatumGetInt32(SPI_getbinval(tuple, desc, 1, &isnull));
		c.key_type = DatumGetObjectId(SPI_getbinval(tuple, desc, 2, &isnull));
		c.application = DatumGetBool(SPI_getbinval(tuple, desc, 3, &isnull));
		c.shards = DatumGetInt32(SPI_getbinval(tuple, desc, 4, &isnull));
		c.width = *DatumGetIntervalP(SPI_getbinval(tuple, desc, 5, &isnull));
		c.source = DatumGetObjectId(SPI_getbinval(tuple, desc, 6, &isnull));
		c.owner = DatumGetObjectId(SPI_getbinval(tuple, desc, 7, &isnull));
		c.name = copy_value(tuple, desc, 8, keep);
		c.key_column = copy_value(tuple, desc, 9, keep);
		c.time_column = copy_value(tuple, desc, 10, keep);
		c.filter = copy_value(tuple, desc, 11, keep);
		c.filter_tree = copy_value(tuple, desc, 12, keep);
		Datum relid = SPI_getbinval(tuple, desc, 13, &isnull);
		c.filter_relid = isnull ? InvalidOid : DatumGetObjectId(relid);
		SPI_finish();
		return c;
	});
}

char *qualified_name(Oid relid) {
	char *nsp = get_namespace_name(get_rel_namespace(relid));
	char *rel = get_rel_name(relid);
	if (nsp == nullptr || rel == nullptr)
		return psprintf("%u", relid);
	return quote_qualified_identifier(nsp, rel);
}

char *state_table(int32 id, const char *part) {
	return psprintf("counter_internal.%s", quote_identifier(psprintf("tracked_%d_%s", id, part)));
}

// Raises 42501 unless the current user has 'mode' on the counter's source.
void require_privilege(const Counter &c, AclMode mode, const char *verb, const char *needs) {
	ce::pg_guard([&c, mode, verb, needs] {
		if (pg_class_aclcheck(c.source, GetUserId(), mode) != ACLCHECK_OK)
			ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			                errmsg("permission denied to %s tracked counter \"%s\"", verb, c.name),
			                errdetail("%s %s on %s.", verb[0] == 'a' ? "Adding needs" : "Reading needs", needs,
			                          qualified_name(c.source))));
	});
}

} // namespace

// ---------------------------------------------------------------------------
// The hot path of trigger mode: counter_internal.tracked_fold(counter id), a
// statement-level AFTER trigger (INSERT, UPDATE, DELETE) with transition
// tables, and an AFTER TRUNCATE trigger. It reads the transition tables
// directly, keeps the rows that match the counter's stored filter, folds them
// into one delta per (key, bucket) with a Boost.Hash map, sorts the deltas in
// (key, bucket) order (the btree order of the key type) and upserts them on
// this backend's shard with one cached SPI plan. Everything after reading the
// catalog row runs as the counter's owner (owner_enter).

namespace {

// What a backend keeps per trigger: resolved once, rebuilt when the source
// table's relcache entry is invalidated or the trigger's argument differs.
struct FoldCache {
	bool valid;
	int32 id;
	Oid relid;
	MemoryContext context; // everything below that is palloc'd
	Oid owner;
	char *delta_table;
	char *base_table;
	AttrNumber key_att;
	AttrNumber time_att;
	Oid key_collation;
	int16 key_len;
	bool key_byval;
	TypeCacheEntry *key_type;
	Interval *width;
	int shards;
	ExprState *filter;      // nullptr: every row counts
	SPIPlanPtr upsert;      // one delta
	SPIPlanPtr upsert_many; // many, as arrays
	SPIPlanPtr truncate;
	Oid key_array_type;
	char key_align;
	TupleTableSlot *row_slot; // row triggers (replicated mode)
	ExprContext *row_econtext;
};

constexpr size_t cache_limit = 1024; // triggers (and counters) a backend keeps plans for

std::unordered_map<Oid, FoldCache> *fold_caches = nullptr;
bool fold_callback_registered = false;

void fold_invalidate(Datum, Oid relid) {
	if (fold_caches == nullptr)
		return;
	for (auto &entry : *fold_caches)
		if (relid == InvalidOid || entry.second.relid == relid)
			entry.second.valid = false;
}

AttrNumber column_number(TupleDesc desc, const char *name) {
	for (int i = 0; i < desc->natts; i++) {
		Form_pg_attribute att = TupleDescAttr(desc, i);
		if (!att->attisdropped && strcmp(NameStr(att->attname), name) == 0)
			return att->attnum;
	}
	ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN), errmsg("column \"%s\" of tracked source does not exist", name),
	                errhint("Changing a tracked column needs counter.untrack and counter.track.")));
	return InvalidAttrNumber;
}

// Owns nothing C++: frees what a cache entry holds and zeroes it.
void fold_release(FoldCache *c) {
	if (c->context != nullptr) {
		for (SPIPlanPtr plan : {c->upsert, c->upsert_many, c->truncate})
			if (plan != nullptr)
				SPI_freeplan(plan);
		if (c->row_econtext != nullptr)
			FreeExprContext(c->row_econtext, true);
		if (c->row_slot != nullptr)
			ExecDropSingleTupleTableSlot(c->row_slot);
		MemoryContextDelete(c->context);
	}
	memset(c, 0, sizeof(*c));
}

// Owns nothing C++: fills the cache entry of counter 'k' for the trigger's
// table, as the counter's owner (the filter is prepared as the owner).
void fold_fill(FoldCache *c, const Counter &k, Relation rel, MemoryContext context) {
	c->context = context;
	MemoryContext old = MemoryContextSwitchTo(c->context);
	TupleDesc desc = RelationGetDescr(rel);
	c->id = k.id;
	c->relid = RelationGetRelid(rel);
	c->owner = k.owner;
	c->delta_table = state_table(k.id, "delta");
	c->base_table = state_table(k.id, "base");
	c->key_att = column_number(desc, k.key_column);
	c->time_att = column_number(desc, k.time_column);
	Form_pg_attribute key = TupleDescAttr(desc, c->key_att - 1);
	if (TupleDescAttr(desc, c->time_att - 1)->atttypid != TIMESTAMPTZOID)
		ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH), errmsg("tracked time column is not timestamptz")));
	if (key->atttypid != k.key_type)
		ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH), errmsg("tracked key column changed its type"),
		                errhint("Changing a tracked column needs counter.untrack and counter.track.")));
	c->key_collation = key->attcollation;
	c->key_len = key->attlen;
	c->key_byval = key->attbyval;
	c->key_type = lookup_type_cache(key->atttypid, TYPECACHE_CMP_PROC_FINFO);
	c->key_align = key->attalign;
	c->key_array_type = get_array_type(key->atttypid);
	if (!OidIsValid(c->key_type->cmp_proc_finfo.fn_oid))
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_FUNCTION), errmsg("tracked key type has no btree comparison")));
	c->width = static_cast<Interval *>(palloc(sizeof(Interval)));
	*c->width = k.width;
	c->shards = k.shards < 1 ? 1 : k.shards;
	c->filter = k.filter != nullptr ? ce::filter::prepare(rel, k.filter_tree, k.filter_relid, k.filter) : nullptr;
	MemoryContextSwitchTo(old);
	c->valid = true;
}

// One row of a transition table, as the fold sees it.
struct Row {
	bool more;
	bool counted;
	ce::tracked::FoldKey key;
	int64 bucket;
};

Row row_of(FoldCache *c, TupleTableSlot *slot, ExprContext *econtext, MemoryContext keep);

// Owns nothing C++: called inside pg_guard, once per row. Key copies live in
// 'keep' (the trigger call's memory), filter garbage in the per-tuple memory.
Row next_row(FoldCache *c, Tuplestorestate *store, TupleTableSlot *slot, ExprContext *econtext, MemoryContext keep) {
	if (!tuplestore_gettupleslot(store, true, false, slot))
		return Row{};
	return row_of(c, slot, econtext, keep);
}

// One row in 'slot', as the fold sees it. Owns nothing C++.
Row row_of(FoldCache *c, TupleTableSlot *slot, ExprContext *econtext, MemoryContext keep) {
	Row row{};
	row.more = true;
	bool isnull;
	Datum key = slot_getattr(slot, c->key_att, &isnull);
	if (isnull)
		return row;
	Datum at = slot_getattr(slot, c->time_att, &isnull);
	if (isnull)
		return row;
	if (c->filter != nullptr) {
		ResetExprContext(econtext);
		econtext->ecxt_scantuple = slot;
		Datum pass = ExecEvalExprSwitchContext(c->filter, econtext, &isnull);
		if (isnull || !DatumGetBool(pass))
			return row;
	}
	row.counted = true;
	row.bucket = DatumGetTimestampTz(
	    DirectFunctionCall3(timestamptz_bin, IntervalPGetDatum(c->width), at, TimestampTzGetDatum(0)));
	if (c->key_byval) {
		row.key = ce::tracked::FoldKey{static_cast<uint64_t>(key), nullptr, 0, true};
	} else if (c->key_len == -1) {
		MemoryContext old = MemoryContextSwitchTo(keep);
		struct varlena *v = pg_detoast_datum_packed(reinterpret_cast<struct varlena *>(DatumGetPointer(key)));
		Datum copy = datumCopy(PointerGetDatum(v), false, -1);
		MemoryContextSwitchTo(old);
		const char *p = DatumGetPointer(copy);
		row.key = ce::tracked::FoldKey{static_cast<uint64_t>(copy), VARDATA_ANY(p),
		                               static_cast<size_t>(VARSIZE_ANY_EXHDR(p)), false};
	} else {
		MemoryContext old = MemoryContextSwitchTo(keep);
		Datum copy = datumCopy(key, false, c->key_len);
		MemoryContextSwitchTo(old);
		size_t len = c->key_len > 0 ? static_cast<size_t>(c->key_len) : strlen(DatumGetCString(copy)) + 1;
		row.key = ce::tracked::FoldKey{static_cast<uint64_t>(copy), DatumGetPointer(copy), len, false};
	}
	return row;
}

void fold_table(FoldCache *c, Relation rel, Tuplestorestate *store, int64 sign, ce::tracked::Fold &fold) {
	MemoryContext keep = CurrentMemoryContext;
	struct Scan {
		TupleTableSlot *slot;
		ExprContext *econtext;
		int pointer;
	};
	Scan scan = ce::pg_guard([c, rel, store] {
		Scan s;
		s.slot = MakeSingleTupleTableSlot(RelationGetDescr(rel), &TTSOpsMinimalTuple);
		s.econtext = c->filter != nullptr ? CreateStandaloneExprContext() : nullptr;
		s.pointer = tuplestore_alloc_read_pointer(store, EXEC_FLAG_REWIND);
		tuplestore_select_read_pointer(store, s.pointer);
		tuplestore_rescan(store);
		return s;
	});
	for (uint32 n = 1;; n++) {
		Row row = ce::pg_guard([&] { return next_row(c, store, scan.slot, scan.econtext, keep); });
		if (!row.more)
			break;
		if (row.counted)
			fold.add(row.key, row.bucket, sign);
		if ((n & 1023) == 0)
			ce::check_for_interrupts();
	}
	ce::pg_guard([&scan, store] {
		tuplestore_select_read_pointer(store, 0);
		if (scan.econtext != nullptr)
			FreeExprContext(scan.econtext, true);
		ExecDropSingleTupleTableSlot(scan.slot);
	});
}

// A row trigger's row (replicated mode: the apply worker of a subscription
// fires row triggers only). Owns nothing C++: inside pg_guard.
Row tuple_row(FoldCache *c, Relation rel, HeapTuple tuple, MemoryContext keep) {
	if (c->row_slot == nullptr) {
		MemoryContext old = MemoryContextSwitchTo(c->context);
		c->row_slot = MakeSingleTupleTableSlot(CreateTupleDescCopy(RelationGetDescr(rel)), &TTSOpsHeapTuple);
		if (c->filter != nullptr)
			c->row_econtext = CreateStandaloneExprContext();
		MemoryContextSwitchTo(old);
	}
	ExecStoreHeapTuple(tuple, c->row_slot, false);
	Row row = row_of(c, c->row_slot, c->row_econtext, keep);
	ExecClearTuple(c->row_slot);
	return row;
}

SPIPlanPtr prepare_upsert(FoldCache *c, bool many) {
	char *sql;
	Oid types[4];
	if (!many) {
		sql = psprintf("INSERT INTO %s AS d (key, bucket, shard, delta) VALUES ($1, $2, $3, $4)"
		               " ON CONFLICT (key, bucket, shard) DO UPDATE SET delta = d.delta OPERATOR(pg_catalog.+)"
		               " excluded.delta",
		               c->delta_table);
		types[0] = c->key_type->type_id;
		types[1] = TIMESTAMPTZOID;
		types[3] = INT8OID;
	} else {
		sql = psprintf("INSERT INTO %s AS d (key, bucket, shard, delta) SELECT u.k, u.b, $3, u.v"
		               " FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($4))"
		               " WITH ORDINALITY AS u(k, b, v, o) ORDER BY u.o"
		               " ON CONFLICT (key, bucket, shard) DO UPDATE SET delta = d.delta OPERATOR(pg_catalog.+)"
		               " excluded.delta",
		               c->delta_table);
		types[0] = c->key_array_type;
		types[1] = TIMESTAMPTZARRAYOID;
		types[3] = INT8ARRAYOID;
	}
	types[2] = INT2OID;
	return ce::prepare_kept(sql, 4, types);
}

// Owns nothing C++: inside pg_guard. Sorts the deltas in (key, bucket) order
// (the key type's btree order), merges equal keys with different images, and
// writes them on this backend's shard in that order, in one statement.
void write_deltas(FoldCache *c, ce::tracked::FoldEntry *entries, size_t n) {
	FmgrInfo *cmp = &c->key_type->cmp_proc_finfo;
	Oid collation = c->key_collation;
	auto order = [cmp, collation](const ce::tracked::FoldEntry &a, const ce::tracked::FoldEntry &b) {
		int32 o = DatumGetInt32(
		    FunctionCall2Coll(cmp, collation, static_cast<Datum>(a.key.datum), static_cast<Datum>(b.key.datum)));
		return o != 0 ? o : (a.bucket < b.bucket ? -1 : a.bucket > b.bucket ? 1 : 0);
	};
	std::sort(entries, entries + n,
	          [&order](const ce::tracked::FoldEntry &a, const ce::tracked::FoldEntry &b) { return order(a, b) < 0; });
	size_t kept = 0;
	for (size_t i = 0; i < n; i++) {
		if (kept > 0 && order(entries[kept - 1], entries[i]) == 0)
			entries[kept - 1].delta += entries[i].delta;
		else
			entries[kept++] = entries[i];
	}
	n = 0;
	for (size_t i = 0; i < kept; i++)
		if (entries[i].delta != 0)
			entries[n++] = entries[i];
	if (n == 0)
		return;

	if (SPI_connect() != SPI_OK_CONNECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
	int16 shard = static_cast<int16>(MyProcPid % c->shards);
	int rc;
	if (n == 1) {
		if (c->upsert == nullptr)
			c->upsert = prepare_upsert(c, false);
		Datum values[4] = {static_cast<Datum>(entries[0].key.datum), TimestampTzGetDatum(entries[0].bucket),
		                   Int16GetDatum(shard), Int64GetDatum(entries[0].delta)};
		rc = SPI_execute_plan(c->upsert, values, nullptr, false, 0);
	} else {
		if (!OidIsValid(c->key_array_type))
			ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("tracked key type has no array type")));
		if (c->upsert_many == nullptr)
			c->upsert_many = prepare_upsert(c, true);
		Datum *keys = static_cast<Datum *>(palloc(sizeof(Datum) * n));
		Datum *buckets = static_cast<Datum *>(palloc(sizeof(Datum) * n));
		Datum *deltas = static_cast<Datum *>(palloc(sizeof(Datum) * n));
		for (size_t i = 0; i < n; i++) {
			keys[i] = static_cast<Datum>(entries[i].key.datum);
			buckets[i] = TimestampTzGetDatum(entries[i].bucket);
			deltas[i] = Int64GetDatum(entries[i].delta);
		}
		int count = static_cast<int>(n);
		Datum values[4] = {
		    PointerGetDatum(construct_array(keys, count, c->key_type->type_id, c->key_len, c->key_byval, c->key_align)),
		    PointerGetDatum(construct_array(buckets, count, TIMESTAMPTZOID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)),
		    Int16GetDatum(shard),
		    PointerGetDatum(construct_array(deltas, count, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE))};
		rc = SPI_execute_plan(c->upsert_many, values, nullptr, false, 0);
	}
	if (rc != SPI_OK_INSERT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
		                errmsg("writing tracked deltas failed: %s", SPI_result_code_string(rc))));
	SPI_finish();
}

// Owns nothing C++: TRUNCATE of the source empties the counter (every row is
// gone, so is every count). The source's lock keeps reconciliation out until
// the truncation commits.
void truncate_state(FoldCache *c) {
	if (SPI_connect() != SPI_OK_CONNECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
	if (c->truncate == nullptr)
		c->truncate = ce::prepare_kept(
		    psprintf("WITH d AS (DELETE FROM %s RETURNING 1) DELETE FROM %s", c->delta_table, c->base_table), 0,
		    nullptr);
	if (SPI_execute_plan(c->truncate, nullptr, nullptr, false, 0) != SPI_OK_DELETE)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("emptying a tracked counter failed")));
	SPI_finish();
}

} // namespace

// counter_internal.tracked_fold(counter id): see above.
CE_FUNCTION(counter_tracked_fold) {
	if (!CALLED_AS_TRIGGER(fcinfo))
		throw ce::Error("39P01", "counter_internal.tracked_fold must be called as a trigger");
	auto *td = reinterpret_cast<TriggerData *>(fcinfo->context);
	if (!TRIGGER_FIRED_AFTER(td->tg_event))
		throw ce::Error("39P01", "counter_internal.tracked_fold must be an AFTER trigger");
	bool for_row = TRIGGER_FIRED_FOR_ROW(td->tg_event);
	if (td->tg_trigger->tgnargs != 1) // a trigger made by 1.0 or 1.1
		throw ce::Error("55000", "this tracked counter's trigger was made by an older version of counter_ext",
		                ce::format("The library is version %s.", COUNTER_EXT_VERSION),
		                "Run ALTER EXTENSION counter_ext UPDATE in this database.");
	if (fold_caches == nullptr)
		fold_caches = new std::unordered_map<Oid, FoldCache>();
	if (!fold_callback_registered) {
		ce::pg_guard([] { CacheRegisterRelcacheCallback(fold_invalidate, (Datum)0); });
		fold_callback_registered = true;
	}
	int32 id = ce::pg_guard([td] { return pg_strtoint32(td->tg_trigger->tgargs[0]); });
	Relation rel = td->tg_relation;
	Oid tgoid = td->tg_trigger->tgoid;
	if (fold_caches->size() >= cache_limit && fold_caches->find(tgoid) == fold_caches->end()) {
		for (auto &entry : *fold_caches)
			ce::pg_guard([&entry] { fold_release(&entry.second); });
		fold_caches->clear();
	}
	FoldCache *c = &(*fold_caches)[tgoid]; // a new entry is zeroed
	if (!c->valid || c->id != id) {
		ce::pg_guard([c] { fold_release(c); });
		MemoryContext context = ce::pg_guard(
		    [] { return AllocSetContextCreate(CacheMemoryContext, "counter_ext tracked fold", ALLOCSET_SMALL_SIZES); });
		Counter k = load_counter(Int32GetDatum(id), true, context);
		if (k.source != RelationGetRelid(rel))
			ce::pg_guard([&k, rel] {
				ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				                errmsg("the trigger on %s names tracked counter \"%s\", whose source is %s",
				                       RelationGetRelationName(rel), k.name, qualified_name(k.source))));
			});
		ce::as_owner(k.owner, [c, &k, rel, context] { fold_fill(c, k, rel, context); });
	}

	ce::OwnerSwitch as = ce::pg_guard([c] { return ce::owner_enter(c->owner); });
	try {
		if (TRIGGER_FIRED_BY_TRUNCATE(td->tg_event)) {
			ce::pg_guard([c] { truncate_state(c); });
		} else if (for_row) {
			ce::tracked::Fold fold;
			MemoryContext keep = CurrentMemoryContext;
			HeapTuple added = TRIGGER_FIRED_BY_INSERT(td->tg_event) ? td->tg_trigtuple
			                  : TRIGGER_FIRED_BY_UPDATE(td->tg_event) ? td->tg_newtuple
			                                                          : nullptr;
			HeapTuple removed = TRIGGER_FIRED_BY_INSERT(td->tg_event) ? nullptr : td->tg_trigtuple;
			for (auto [tuple, sign] : {std::pair<HeapTuple, int64>{added, 1}, {removed, -1}}) {
				if (tuple == nullptr)
					continue;
				Row row = ce::pg_guard([c, rel, tuple, keep] { return tuple_row(c, rel, tuple, keep); });
				if (row.counted)
					fold.add(row.key, row.bucket, sign);
			}
			std::vector<ce::tracked::FoldEntry> entries = fold.nonzero();
			if (!entries.empty())
				ce::pg_guard([c, &entries] { write_deltas(c, entries.data(), entries.size()); });
		} else {
			ce::tracked::Fold fold;
			if (!TRIGGER_FIRED_BY_DELETE(td->tg_event) && td->tg_newtable != nullptr)
				fold_table(c, rel, td->tg_newtable, 1, fold);
			if (!TRIGGER_FIRED_BY_INSERT(td->tg_event) && td->tg_oldtable != nullptr)
				fold_table(c, rel, td->tg_oldtable, -1, fold);
			std::vector<ce::tracked::FoldEntry> entries = fold.nonzero();
			if (!entries.empty())
				ce::pg_guard([c, &entries] { write_deltas(c, entries.data(), entries.size()); });
		}
	} catch (...) {
		ce::owner_leave(as);
		throw;
	}
	ce::owner_leave(as);
	return PointerGetDatum(nullptr);
}

// ---------------------------------------------------------------------------
// counter.add(name, key, delta, at), counter.value(name, key) and
// counter.values_of(name, keys): plans kept per counter and backend.

namespace {

struct KeptPlans {
	SPIPlanPtr add = nullptr;
	SPIPlanPtr value = nullptr;
	SPIPlanPtr values = nullptr;
};
std::unordered_map<int32, KeptPlans> *kept_plans = nullptr;

KeptPlans *plans_of(int32 id) {
	if (kept_plans == nullptr)
		kept_plans = new std::unordered_map<int32, KeptPlans>();
	if (kept_plans->size() >= cache_limit && kept_plans->find(id) == kept_plans->end()) {
		for (auto &entry : *kept_plans)
			ce::pg_guard([&entry] {
				for (SPIPlanPtr plan : {entry.second.add, entry.second.value, entry.second.values})
					if (plan != nullptr)
						SPI_freeplan(plan);
			});
		kept_plans->clear();
	}
	return &(*kept_plans)[id];
}

// The catalog rows counter.add, value and values_of need, kept per backend
// by name. counter.track, untrack and the other writers of the rows an entry
// holds send a relcache invalidation of counter.tracked
// (counter_internal.tracked_invalidate); the callback marks the cache stale
// and the next lookup empties it. Bounded by cache_limit.
struct NameCache {
	std::unordered_map<std::string, Counter> rows;
	MemoryContext context = nullptr;
	bool stale = false;
};
NameCache *name_cache = nullptr;
Oid catalog_relid = InvalidOid;

void catalog_invalidate(Datum, Oid relid) {
	if (relid == InvalidOid || relid == catalog_relid) {
		if (name_cache != nullptr)
			name_cache->stale = true;
		catalog_relid = InvalidOid;
		fold_invalidate((Datum)0, InvalidOid);
	}
}

Counter find_counter(FunctionCallInfo fcinfo) {
	if (PG_ARGISNULL(0))
		throw ce::Error(ce::sqlstate::null_value_not_allowed, "counter name must not be NULL");
	if (name_cache == nullptr) {
		name_cache = new NameCache();
		name_cache->context = ce::pg_guard([] {
			return AllocSetContextCreate(CacheMemoryContext, "counter_ext tracked catalog", ALLOCSET_SMALL_SIZES);
		});
		ce::pg_guard([] { CacheRegisterRelcacheCallback(catalog_invalidate, (Datum)0); });
	}
	if (catalog_relid == InvalidOid)
		catalog_relid = ce::pg_guard([] {
			Oid nsp = get_namespace_oid("counter", false);
			return get_relname_relid("tracked", nsp);
		});
	if (name_cache->stale || name_cache->rows.size() >= cache_limit) {
		name_cache->rows.clear();
		ce::pg_guard([] { MemoryContextReset(name_cache->context); });
		name_cache->stale = false;
	}
	std::string name = ce::pg_guard([fcinfo] { return text_to_cstring(PG_GETARG_TEXT_PP(0)); });
	auto found = name_cache->rows.find(name);
	if (found != name_cache->rows.end())
		return found->second;
	Counter c = load_counter(PG_GETARG_DATUM(0), false, name_cache->context);
	if (!name_cache->stale) // an invalidation while reading: do not keep what was read
		name_cache->rows.emplace(name, c);
	return c;
}

} // namespace

// counter_internal.tracked_invalidate(): every backend forgets the catalog
// rows it keeps (sent when the transaction commits).
CE_FUNCTION(counter_tracked_invalidate) {
	(void)fcinfo;
	ce::pg_guard([] {
		Oid nsp = get_namespace_oid("counter", false);
		CacheInvalidateRelcacheByRelid(get_relname_relid("tracked", nsp));
	});
	PG_RETURN_VOID();
}

namespace {

// Owns nothing C++: runs as the owner, between SPI_connect and SPI_finish.
SPIPlanPtr value_plan(const Counter &c, SPIPlanPtr *slot, bool many) {
	if (*slot != nullptr)
		return *slot;
	char *eq = ce::keys::qualified_operator(c.key_type, BTEqualStrategyNumber);
	char *base = state_table(c.id, "base");
	char *delta = state_table(c.id, "delta");
	Oid types[1] = {c.key_type};
	char *sql;
	if (!many) {
		sql = psprintf("SELECT (coalesce((SELECT b.base FROM %s b WHERE b.key %s $1), 0) OPERATOR(pg_catalog.+)"
		               " coalesce((SELECT pg_catalog.sum(d.delta) FROM %s d WHERE d.key %s $1), 0))::bigint",
		               base, eq, delta, eq);
	} else {
		types[0] = get_array_type(c.key_type);
		if (!OidIsValid(types[0]))
			ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("tracked key type has no array type")));
		sql = psprintf("SELECT u.o, (coalesce((SELECT b.base FROM %s b WHERE b.key %s u.k), 0) OPERATOR(pg_catalog.+)"
		               " coalesce((SELECT pg_catalog.sum(d.delta) FROM %s d WHERE d.key %s u.k), 0))::bigint"
		               " FROM pg_catalog.unnest($1) WITH ORDINALITY AS u(k, o)",
		               base, eq, delta, eq);
	}
	*slot = ce::prepare_kept(sql, 1, types);
	return *slot;
}

} // namespace

CE_FUNCTION(counter_tracked_add) {
	Counter c = find_counter(fcinfo);
	if (PG_ARGISNULL(1))
		throw ce::Error(ce::sqlstate::null_value_not_allowed,
		                ce::format("key of tracked counter \"%s\" must not be NULL", c.name));
	if (PG_ARGISNULL(2) || PG_ARGISNULL(3))
		throw ce::Error(ce::sqlstate::null_value_not_allowed, "delta and at must not be NULL");
	if (!c.application)
		ce::pg_guard([&c] {
			ereport(ERROR,
			        (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			         errmsg("tracked counter \"%s\" is counted by triggers on %s", c.name, qualified_name(c.source)),
			         errhint("counter.add is for counters registered with mode => 'application'.")));
		});
	require_privilege(c, ACL_INSERT, "add to", "INSERT");
	Oid given = get_fn_expr_argtype(fcinfo->flinfo, 1);
	Datum key = PG_GETARG_DATUM(1);
	int64 delta = PG_GETARG_INT64(2);
	TimestampTz at = PG_GETARG_TIMESTAMPTZ(3);
	if (delta == 0)
		PG_RETURN_VOID();
	KeptPlans *plans = plans_of(c.id);
	ce::as_owner(c.owner, [&c, plans, given, key, delta, at] {
		Datum value = ce::keys::convert(given, key, c.key_type, c.name);
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		if (plans->add == nullptr) {
			char *sql = psprintf("INSERT INTO %s AS d (key, bucket, shard, delta) VALUES ($1, $2, $3, $4)"
			                     " ON CONFLICT (key, bucket, shard) DO UPDATE SET delta = d.delta"
			                     " OPERATOR(pg_catalog.+) excluded.delta",
			                     state_table(c.id, "delta"));
			Oid types[4] = {c.key_type, TIMESTAMPTZOID, INT2OID, INT8OID};
			plans->add = ce::prepare_kept(sql, 4, types);
		}
		Datum bucket = DirectFunctionCall3(timestamptz_bin, IntervalPGetDatum(&c.width), TimestampTzGetDatum(at),
		                                   TimestampTzGetDatum(0));
		Datum values[4] = {value, bucket, Int16GetDatum(static_cast<int16>(MyProcPid % (c.shards < 1 ? 1 : c.shards))),
		                   Int64GetDatum(delta)};
		if (SPI_execute_plan(plans->add, values, nullptr, false, 0) != SPI_OK_INSERT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("writing a tracked delta failed")));
		SPI_finish();
	});
	PG_RETURN_VOID();
}

CE_FUNCTION(counter_tracked_value) {
	Counter c = find_counter(fcinfo);
	if (PG_ARGISNULL(1))
		throw ce::Error(ce::sqlstate::null_value_not_allowed,
		                ce::format("key of tracked counter \"%s\" must not be NULL", c.name));
	require_privilege(c, ACL_SELECT, "read", "SELECT");
	Oid given = get_fn_expr_argtype(fcinfo->flinfo, 1);
	Datum key = PG_GETARG_DATUM(1);
	KeptPlans *plans = plans_of(c.id);
	int64 result = ce::as_owner(c.owner, [&c, plans, given, key] {
		Datum value = ce::keys::convert(given, key, c.key_type, c.name);
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		Datum values[1] = {value};
		if (SPI_execute_plan(value_plan(c, &plans->value, false), values, nullptr, true, 1) != SPI_OK_SELECT ||
		    SPI_processed != 1)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading a tracked counter failed")));
		bool isnull;
		int64 v = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		SPI_finish();
		return v;
	});
	PG_RETURN_INT64(result);
}

namespace {

// One distinct key of values_of: the key as given, as the key type, and
// where it stands in the query's answer.
struct Given {
	Datum given;
	Datum key;
	int position;
};

} // namespace

CE_FUNCTION(counter_tracked_values_of) {
	Counter c = find_counter(fcinfo);
	if (PG_ARGISNULL(1))
		throw ce::Error(ce::sqlstate::null_value_not_allowed, "keys must not be NULL");
	require_privilege(c, ACL_SELECT, "read", "SELECT");
	ArrayType *array = PG_GETARG_ARRAYTYPE_P(1);
	Oid elem = ARR_ELEMTYPE(array);
	KeptPlans *plans = plans_of(c.id);
	ce::pg_guard([fcinfo] { InitMaterializedSRF(fcinfo, 0); });
	auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
	ce::as_owner(c.owner, [&c, plans, array, elem, rsinfo] {
		int16 len;
		bool byval;
		char align;
		get_typlenbyvalalign(elem, &len, &byval, &align);
		Datum *elems;
		bool *nulls;
		int n;
		deconstruct_array(array, elem, len, byval, align, &elems, &nulls, &n);
		Given *keys = static_cast<Given *>(palloc(sizeof(Given) * (n + 1)));
		for (int i = 0; i < n; i++) {
			if (nulls[i])
				ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				                errmsg("key of tracked counter \"%s\" must not be NULL", c.name)));
			keys[i] = Given{elems[i], ce::keys::convert(elem, elems[i], c.key_type, c.name), 0};
		}
		TypeCacheEntry *type = lookup_type_cache(c.key_type, TYPECACHE_CMP_PROC_FINFO);
		if (!OidIsValid(type->cmp_proc_finfo.fn_oid))
			ereport(ERROR, (errcode(ERRCODE_UNDEFINED_FUNCTION), errmsg("tracked key type has no btree comparison")));
		Oid collation = type->typcollation;
		auto cmp = [type, collation](const Given &a, const Given &b) {
			return DatumGetInt32(FunctionCall2Coll(&type->cmp_proc_finfo, collation, a.key, b.key));
		};
		std::sort(keys, keys + n, [&cmp](const Given &a, const Given &b) { return cmp(a, b) < 0; });
		int distinct = 0;
		for (int i = 0; i < n; i++)
			if (distinct == 0 || cmp(keys[distinct - 1], keys[i]) != 0)
				keys[distinct++] = keys[i];
		Datum *converted = static_cast<Datum *>(palloc(sizeof(Datum) * (distinct + 1)));
		for (int i = 0; i < distinct; i++)
			converted[i] = keys[i].key;
		int16 klen;
		bool kbyval;
		char kalign;
		get_typlenbyvalalign(c.key_type, &klen, &kbyval, &kalign);
		Datum arg[1] = {PointerGetDatum(construct_array(converted, distinct, c.key_type, klen, kbyval, kalign))};
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		if (SPI_execute_plan(value_plan(c, &plans->values, true), arg, nullptr, true, 0) != SPI_OK_SELECT ||
		    SPI_processed != static_cast<uint64>(distinct))
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading a tracked counter failed")));
		int64 *value = static_cast<int64 *>(palloc(sizeof(int64) * (distinct + 1)));
		for (uint64 i = 0; i < SPI_processed; i++) {
			bool isnull;
			int64 o = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
			value[o - 1] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
		}
		SPI_finish();
		for (int i = 0; i < distinct; i++) {
			Datum out[2] = {keys[i].given, Int64GetDatum(value[i])};
			bool outnull[2] = {false, false};
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnull);
		}
	});
	return (Datum)0;
}

// ---------------------------------------------------------------------------
// C symbols of 1.0 and 1.1 that 1.2 no longer calls. They stay, so that the
// SQL of an installation not yet updated still loads (CREATE EXTENSION
// counter_ext VERSION '1.1' works, ALTER EXTENSION ... UPDATE can run);
// called, they say what to do.

namespace {

[[noreturn]] void needs_update() {
	throw ce::Error("55000", "this counter_ext function belongs to an older version of the extension's SQL",
	                ce::format("The library is version %s.", COUNTER_EXT_VERSION),
	                "Run ALTER EXTENSION counter_ext UPDATE in this database.");
}

} // namespace

CE_FUNCTION(counter_tracked_check_filter) {
	(void)fcinfo;
	needs_update();
}

CE_FUNCTION(counter_tracked_compile_filter) {
	(void)fcinfo;
	needs_update();
}
