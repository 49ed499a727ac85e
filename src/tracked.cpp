// Tracked counters (src/sql/30_tracked.sql): the two checks counter.track
// needs that SQL cannot make.
//
// counter.track runs as the extension's owner (SECURITY DEFINER) because it
// creates objects in schema counter; inside it current_user is that owner, so
// the role that called it comes from GetOuterUserId() (the session's role
// after SET ROLE, unchanged by SECURITY DEFINER functions).
//
// The filter is SQL text the caller writes; it is pasted into the functions
// that track generates (owned by the source table's owner, so it never runs
// with more rights than that owner has). It must be one boolean expression,
// nothing that could close the expression and add clauses or statements.
#include "counter_ext/wall.hpp"
#include "counter_ext/spi.hpp"
#include "counter_ext/tracked_fold.hpp"

extern "C" {
#include "access/genam.h"
#include "access/htup_details.h"
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
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
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

namespace {

// True when 'stmt' is exactly "SELECT 1 WHERE (<expression>)".
bool is_plain_where(const SelectStmt *s) {
	return s->op == SETOP_NONE && s->distinctClause == NIL && s->intoClause == nullptr &&
	       list_length(s->targetList) == 1 && s->fromClause == NIL && s->whereClause != nullptr &&
	       s->groupClause == NIL && s->havingClause == nullptr && s->windowClause == NIL && s->valuesLists == NIL &&
	       s->sortClause == NIL && s->limitOffset == nullptr && s->limitCount == nullptr && s->lockingClause == NIL &&
	       s->withClause == nullptr;
}

} // namespace

// counter.tracked_check_filter(filter text): raises 42601 unless the text is
// one SQL expression. Column references and types are checked later, by
// running the generated query as the source table's owner.
CE_FUNCTION(counter_tracked_check_filter) {
	const char *filter = text_to_cstring(PG_GETARG_TEXT_PP(0));
	std::string query = std::string("SELECT 1 WHERE (") + filter + "\n)";
	List *parsed = nullptr;
	try {
		parsed = ce::pg_guard([&query] { return raw_parser(query.c_str(), RAW_PARSE_DEFAULT); });
	} catch (const ce::PgError &e) {
		// The parser's cursor points into our wrapper query, not the caller's.
		throw ce::Error("42601", ce::format("filter does not parse: %s", e.what()),
		                ce::format("The filter was: %s", filter));
	}
	bool ok = list_length(parsed) == 1;
	if (ok) {
		Node *stmt = linitial_node(RawStmt, parsed)->stmt;
		ok = IsA(stmt, SelectStmt) && is_plain_where(castNode(SelectStmt, stmt));
	}
	if (!ok)
		throw ce::Error("42601", "filter must be one boolean expression", ce::format("The filter was: %s", filter),
		                "Write a condition on the source table's columns, such as: deleted_at IS NULL");
	return (Datum)0;
}

// ---------------------------------------------------------------------------
// The hot path of trigger mode: counter.tracked_fold(), a statement-level
// AFTER trigger (INSERT, UPDATE, DELETE) with transition tables. It reads the
// transition tables directly, keeps the rows that match the filter (compiled
// once per backend into an ExprState), folds them into one delta per (key,
// bucket) with a Boost.Hash map, sorts the deltas in (key, bucket) order (the
// btree order of the key type, the order reconciliation locks rows in) and
// upserts them on this backend's shard with one cached SPI plan. It runs as
// the counter's owner (the owner of the state tables), as the PL/pgSQL
// functions track generates do.
//
// Trigger arguments, written by counter.track (only it can attach this
// function: EXECUTE is revoked from PUBLIC):
//   0 counter id, 1 delta table (qualified), 2 owner oid (unused: the owner is
//   the delta table's), 3 key column,
//   4 time column, 5 bucket width in microseconds, 6 shards, 7 filter (optional)

namespace {

constexpr int fold_nargs_min = 7;

// What a backend keeps per trigger: resolved once, rebuilt when the source
// table's relcache entry is invalidated or the trigger's arguments differ.
struct FoldCache {
	bool valid;
	Oid relid;
	MemoryContext context; // everything below that is palloc'd
	char **args;
	int nargs;
	Oid owner;
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
	Oid key_array_type;
	char key_align;
};

std::unordered_map<Oid, FoldCache> *fold_caches = nullptr;
bool fold_callback_registered = false;

void fold_invalidate(Datum, Oid relid) {
	if (fold_caches == nullptr)
		return;
	for (auto &entry : *fold_caches)
		if (relid == InvalidOid || entry.second.relid == relid)
			entry.second.valid = false;
}

// Compiles a filter (already checked to be one expression by
// tracked_check_filter) against the relation, as the current user.
ExprState *compile_filter(Relation rel, const char *filter) {
	char *query = psprintf("SELECT 1 WHERE (%s\n)", filter);
	List *parsed = raw_parser(query, RAW_PARSE_DEFAULT);
	if (list_length(parsed) != 1)
		ereport(ERROR, (errcode(ERRCODE_SYNTAX_ERROR), errmsg("filter must be one boolean expression")));
	SelectStmt *select = castNode(SelectStmt, linitial_node(RawStmt, parsed)->stmt);
	ParseState *pstate = make_parsestate(nullptr);
	pstate->p_sourcetext = query;
	ParseNamespaceItem *item =
	    addRangeTableEntryForRelation(pstate, rel, AccessShareLock, makeAlias("ce_new", NIL), false, true);
	addNSItemToQuery(pstate, item, false, true, true);
	Node *expr = transformExpr(pstate, select->whereClause, EXPR_KIND_WHERE);
	expr = coerce_to_boolean(pstate, expr, "filter");
	assign_expr_collations(pstate, expr);
	if (checkExprHasSubLink(expr))
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED), errmsg("filter must not contain a subquery")));
	free_parsestate(pstate);
	return ExecInitExpr(expression_planner(reinterpret_cast<Expr *>(expr)), nullptr);
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

bool same_args(const FoldCache &c, const Trigger *trigger) {
	if (c.nargs != trigger->tgnargs)
		return false;
	for (int i = 0; i < c.nargs; i++)
		if (strcmp(c.args[i], trigger->tgargs[i]) != 0)
			return false;
	return true;
}

// Raises unless counter 'id' is registered in counter.tracked, in trigger
// mode, for this table. A restore of part of a dump (pg_dump --schema-only,
// --table) brings the table's triggers without the catalog rows: counting
// into state nobody reads, or into another counter that has the same id,
// would be silently wrong. The catalog is read directly (a small table, a
// heap scan), not through SQL: the writer may have no right to read it, and
// no user code runs here. Owns nothing C++: inside pg_guard.
void require_registered(const char *id, Relation rel, const Trigger *trigger) {
	int32 counter_id = pg_strtoint32(id);
	Oid catalog = get_relname_relid("tracked", get_namespace_oid("counter", false));
	bool found = false;
	if (OidIsValid(catalog)) {
		Relation cat = table_open(catalog, AccessShareLock);
		AttrNumber source_att = get_attnum(catalog, "source");
		AttrNumber mode_att = get_attnum(catalog, "mode");
		ScanKeyData key;
		ScanKeyInit(&key, get_attnum(catalog, "counter_id"), BTEqualStrategyNumber, F_INT4EQ,
		            Int32GetDatum(counter_id));
		SysScanDesc scan = systable_beginscan(cat, InvalidOid, false, GetActiveSnapshot(), 1, &key);
		HeapTuple tuple = systable_getnext(scan);
		if (HeapTupleIsValid(tuple)) {
			bool source_null, mode_null;
			Datum source = heap_getattr(tuple, source_att, RelationGetDescr(cat), &source_null);
			Datum mode = heap_getattr(tuple, mode_att, RelationGetDescr(cat), &mode_null);
			found = !source_null && !mode_null && DatumGetObjectId(source) == RelationGetRelid(rel) &&
			        strcmp(TextDatumGetCString(mode), "trigger") == 0;
		}
		systable_endscan(scan);
		table_close(cat, AccessShareLock);
	}
	if (!found) {
		char *table =
		    quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)), RelationGetRelationName(rel));
		ereport(ERROR,
		        (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		         errmsg("trigger %s on %s belongs to tracked counter %d, which is not registered in this database",
		                trigger->tgname, table, counter_id),
		         errdetail("A restore of part of a dump (pg_dump --schema-only, --table) brings a table's triggers "
		                   "without counter_ext's catalog."),
		         errhint("Restore the whole database from a full pg_dump to keep the counter; or drop the "
		                 "table's counter_%d_* triggers and the counter.tracked_%d_* objects, then register it again "
		                 "with counter.track (see doc/operations.md).",
		                 counter_id, counter_id)));
	}
}

// Owns nothing C++: called inside pg_guard, with the map's entry for this
// trigger (zeroed when new). Runs as the counter's owner.
FoldCache *fold_cache(TriggerData *td, FoldCache *c) {
	const Trigger *trigger = td->tg_trigger;
	if (trigger->tgnargs < fold_nargs_min)
		ereport(ERROR, (errcode(ERRCODE_TRIGGERED_ACTION_EXCEPTION), errmsg("counter.tracked_fold: bad arguments")));
	if (!fold_callback_registered) {
		CacheRegisterRelcacheCallback(fold_invalidate, (Datum)0);
		fold_callback_registered = true;
	}
	if (c->valid && same_args(*c, trigger))
		return c;
	require_registered(trigger->tgargs[0], td->tg_relation, trigger);
	if (c->context != nullptr) {
		if (c->upsert != nullptr)
			SPI_freeplan(c->upsert);
		if (c->upsert_many != nullptr)
			SPI_freeplan(c->upsert_many);
		MemoryContextDelete(c->context);
	}
	memset(c, 0, sizeof(*c));
	c->context = AllocSetContextCreate(CacheMemoryContext, "counter_ext tracked fold", ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(c->context);
	c->nargs = trigger->tgnargs;
	c->args = static_cast<char **>(palloc(sizeof(char *) * c->nargs));
	for (int i = 0; i < c->nargs; i++)
		c->args[i] = pstrdup(trigger->tgargs[i]);
	Relation rel = td->tg_relation;
	TupleDesc desc = RelationGetDescr(rel);
	c->relid = RelationGetRelid(rel);
	// The owner is read from the delta table, never from argument 2: a role's
	// OID is local to a cluster, and a dump restored elsewhere keeps the
	// trigger's text (the OID would then name another role, or none).
	Oid delta = DatumGetObjectId(DirectFunctionCall1(regclassin, CStringGetDatum(c->args[1])));
	HeapTuple delta_tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(delta));
	if (!HeapTupleIsValid(delta_tuple))
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE), errmsg("delta table %s does not exist", c->args[1])));
	c->owner = reinterpret_cast<Form_pg_class>(GETSTRUCT(delta_tuple))->relowner;
	ReleaseSysCache(delta_tuple);
	c->key_att = column_number(desc, c->args[3]);
	c->time_att = column_number(desc, c->args[4]);
	Form_pg_attribute key = TupleDescAttr(desc, c->key_att - 1);
	if (TupleDescAttr(desc, c->time_att - 1)->atttypid != TIMESTAMPTZOID)
		ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH), errmsg("tracked time column is not timestamptz")));
	c->key_collation = key->attcollation;
	c->key_len = key->attlen;
	c->key_byval = key->attbyval;
	c->key_type = lookup_type_cache(key->atttypid, TYPECACHE_CMP_PROC_FINFO);
	c->key_align = key->attalign;
	c->key_array_type = get_array_type(key->atttypid);
	if (!OidIsValid(c->key_type->cmp_proc_finfo.fn_oid))
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_FUNCTION), errmsg("tracked key type has no btree comparison")));
	c->width = static_cast<Interval *>(palloc0(sizeof(Interval)));
	c->width->time = pg_strtoint64(c->args[5]); // microseconds
	c->shards = pg_strtoint32(c->args[6]);
	if (c->shards < 1)
		c->shards = 1;
	c->filter = c->nargs > fold_nargs_min ? compile_filter(rel, c->args[7]) : nullptr;
	MemoryContextSwitchTo(old);
	c->valid = true;
	return c;
}

// One row of a transition table, as the fold sees it.
struct Row {
	bool more;
	bool counted;
	ce::tracked::FoldKey key;
	int64 bucket;
};

// Owns nothing C++: called inside pg_guard, once per row. Key copies live in
// 'keep' (the trigger call's memory), filter garbage in the per-tuple memory.
Row next_row(FoldCache *c, Tuplestorestate *store, TupleTableSlot *slot, ExprContext *econtext, MemoryContext keep) {
	Row row{};
	if (!tuplestore_gettupleslot(store, true, false, slot))
		return row;
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

SPIPlanPtr prepare_upsert(FoldCache *c, bool many) {
	char *sql;
	Oid types[4];
	if (!many) {
		sql = psprintf("INSERT INTO %s AS d (key, bucket, shard, delta) VALUES ($1, $2, $3, $4)"
		               " ON CONFLICT (key, bucket, shard) DO UPDATE SET delta = d.delta + excluded.delta",
		               c->args[1]);
		types[0] = c->key_type->type_id;
		types[1] = TIMESTAMPTZOID;
		types[3] = INT8OID;
	} else {
		sql = psprintf("INSERT INTO %s AS d (key, bucket, shard, delta) SELECT u.k, u.b, $3, u.v"
		               " FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($4))"
		               " WITH ORDINALITY AS u(k, b, v, o) ORDER BY u.o"
		               " ON CONFLICT (key, bucket, shard) DO UPDATE SET delta = d.delta + excluded.delta",
		               c->args[1]);
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

} // namespace

// counter.tracked_fold(): see above.
CE_FUNCTION(counter_tracked_fold) {
	if (!CALLED_AS_TRIGGER(fcinfo))
		throw ce::Error("39P01", "counter.tracked_fold must be called as a trigger");
	auto *td = reinterpret_cast<TriggerData *>(fcinfo->context);
	if (!TRIGGER_FIRED_AFTER(td->tg_event) || !TRIGGER_FIRED_FOR_STATEMENT(td->tg_event) ||
	    TRIGGER_FIRED_BY_TRUNCATE(td->tg_event))
		throw ce::Error("39P01", "counter.tracked_fold must be an AFTER INSERT, UPDATE or DELETE statement trigger");
	if (fold_caches == nullptr)
		fold_caches = new std::unordered_map<Oid, FoldCache>();

	Oid saved_user;
	int saved_context;
	GetUserIdAndSecContext(&saved_user, &saved_context);
	FoldCache *slot = &(*fold_caches)[td->tg_trigger->tgoid]; // a new entry is zeroed
	FoldCache *c = ce::pg_guard([td, slot, saved_context] {
		FoldCache *found = fold_cache(td, slot);
		SetUserIdAndSecContext(found->owner, saved_context | SECURITY_LOCAL_USERID_CHANGE);
		return found;
	});
	// If anything below fails, the (sub)transaction's abort restores the user.
	ce::tracked::Fold fold;
	Relation rel = td->tg_relation;
	if (!TRIGGER_FIRED_BY_DELETE(td->tg_event) && td->tg_newtable != nullptr)
		fold_table(c, rel, td->tg_newtable, 1, fold);
	if (!TRIGGER_FIRED_BY_INSERT(td->tg_event) && td->tg_oldtable != nullptr)
		fold_table(c, rel, td->tg_oldtable, -1, fold);
	std::vector<ce::tracked::FoldEntry> entries = fold.nonzero();
	if (!entries.empty())
		ce::pg_guard([c, &entries] { write_deltas(c, entries.data(), entries.size()); });
	SetUserIdAndSecContext(saved_user, saved_context);
	return PointerGetDatum(nullptr);
}

// counter.tracked_compile_filter(source regclass, filter text, as_role regrole):
// raises unless the filter compiles against the source as a WHERE condition
// without subqueries, compiled as as_role (constant folding may run functions).
CE_FUNCTION(counter_tracked_compile_filter) {
	Oid relid = PG_GETARG_OID(0);
	const char *filter = text_to_cstring(PG_GETARG_TEXT_PP(1));
	Oid role = PG_GETARG_OID(2);
	Oid saved_user;
	int saved_context;
	GetUserIdAndSecContext(&saved_user, &saved_context);
	SetUserIdAndSecContext(role, saved_context | SECURITY_LOCAL_USERID_CHANGE);
	Relation rel = table_open(relid, AccessShareLock);
	(void)compile_filter(rel, filter);
	table_close(rel, AccessShareLock);
	SetUserIdAndSecContext(saved_user, saved_context);
	return (Datum)0;
}

// ---------------------------------------------------------------------------
// counter.add(name text, key anyelement, delta bigint, at timestamptz):
// application mode's hot path. SECURITY DEFINER (it reads counter.tracked
// and writes the state tables); privileges are checked for the calling role.
// The counter's row is read and its delta written with plans kept per backend.

namespace {

SPIPlanPtr add_lookup_plan = nullptr;

struct AddPlan {
	Oid key_type;
	SPIPlanPtr plan;
};
std::unordered_map<int32, AddPlan> *add_plans = nullptr;

struct Counter {
	int32 id;
	Oid key_type;
	bool application;
	int32 shards;
	Interval width;
	Oid source;
};

char *qualified_name(Oid relid) {
	char *nsp = get_namespace_name(get_rel_namespace(relid));
	char *rel = get_rel_name(relid);
	if (nsp == nullptr || rel == nullptr)
		return psprintf("%u", relid);
	return quote_qualified_identifier(nsp, rel);
}

// Owns nothing C++: inside pg_guard, between SPI_connect and SPI_finish.
Counter add_find_counter(text *name) {
	if (add_lookup_plan == nullptr) {
		Oid types[1] = {TEXTOID};
		add_lookup_plan =
		    ce::prepare_kept("SELECT t.counter_id, t.key_type::oid, t.mode OPERATOR(pg_catalog.=) 'application',"
		                     " t.shards, t.bucket_width, t.source::oid FROM counter.tracked t"
		                     " WHERE t.name OPERATOR(pg_catalog.=) $1",
		                     1, types);
	}
	Datum args[1] = {PointerGetDatum(name)};
	int rc = SPI_execute_plan(add_lookup_plan, args, nullptr, true, 1);
	if (rc != SPI_OK_SELECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading counter.tracked failed")));
	if (SPI_processed == 0)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
		                errmsg("tracked counter \"%s\" does not exist", text_to_cstring(name)),
		                errhint("See counter.tracked for the registered counters.")));
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
	return c;
}

SPIPlanPtr add_prepare(const Counter &c) {
	char *sql = psprintf("INSERT INTO counter.%s AS d (key, bucket, shard, delta) VALUES ($1, $2, $3, $4)"
	                     " ON CONFLICT (key, bucket, shard) DO UPDATE SET delta = d.delta + excluded.delta",
	                     quote_identifier(psprintf("tracked_%d_delta", c.id)));
	Oid types[4] = {c.key_type, TIMESTAMPTZOID, INT2OID, INT8OID};
	return ce::prepare_kept(sql, 4, types);
}

} // namespace

CE_FUNCTION(counter_tracked_add) {
	if (PG_ARGISNULL(0))
		throw ce::Error(ce::sqlstate::null_value_not_allowed, "counter name must not be NULL");
	if (add_plans == nullptr)
		add_plans = new std::unordered_map<int32, AddPlan>();
	text *name = PG_GETARG_TEXT_PP(0);
	Oid given = get_fn_expr_argtype(fcinfo->flinfo, 1);
	if (ce::pg_guard([] { return SPI_connect(); }) != SPI_OK_CONNECT)
		throw ce::Error(ce::sqlstate::internal_error, "SPI_connect failed");
	Counter c = ce::pg_guard([name] { return add_find_counter(name); });
	if (PG_ARGISNULL(1))
		ce::pg_guard([name] {
			ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			                errmsg("key of tracked counter \"%s\" must not be NULL", text_to_cstring(name))));
		});
	Datum key = PG_GETARG_DATUM(1);
	if (given != c.key_type) {
		Oid cast = InvalidOid;
		CoercionPathType path = ce::pg_guard(
		    [given, &c, &cast] { return find_coercion_pathway(c.key_type, given, COERCION_IMPLICIT, &cast); });
		if (path == COERCION_PATH_FUNC && OidIsValid(cast))
			key = ce::pg_guard([cast, key] { return OidFunctionCall1(cast, key); });
		else if (path != COERCION_PATH_RELABELTYPE)
			ce::pg_guard([name, &c, given] {
				ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
				                errmsg("tracked counter \"%s\" has keys of type %s, not %s", text_to_cstring(name),
				                       format_type_be(c.key_type), format_type_be(given)),
				                errhint("Cast the key: ...::%s", format_type_be(c.key_type))));
			});
	}
	if (PG_ARGISNULL(2) || PG_ARGISNULL(3))
		throw ce::Error(ce::sqlstate::null_value_not_allowed, "delta and at must not be NULL");
	int64 delta = PG_GETARG_INT64(2);
	TimestampTz at = PG_GETARG_TIMESTAMPTZ(3);
	if (!c.application)
		ce::pg_guard([name, &c] {
			ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			                errmsg("tracked counter \"%s\" is counted by triggers on %s", text_to_cstring(name),
			                       qualified_name(c.source)),
			                errhint("counter.add is for counters registered with mode => 'application'.")));
		});
	if (pg_class_aclcheck(c.source, GetOuterUserId(), ACL_INSERT) != ACLCHECK_OK)
		ce::pg_guard([name, &c] {
			ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			                errmsg("permission denied to add to tracked counter \"%s\"", text_to_cstring(name)),
			                errdetail("Adding needs INSERT on %s.", qualified_name(c.source))));
		});
	if (delta != 0) {
		AddPlan &slot = (*add_plans)[c.id];
		ce::pg_guard([&slot, &c, key, delta, at] {
			if (slot.plan != nullptr && slot.key_type != c.key_type) {
				SPI_freeplan(slot.plan);
				slot.plan = nullptr;
			}
			if (slot.plan == nullptr) {
				slot.plan = add_prepare(c);
				slot.key_type = c.key_type;
			}
			Datum bucket = DirectFunctionCall3(timestamptz_bin, IntervalPGetDatum(&c.width), TimestampTzGetDatum(at),
			                                   TimestampTzGetDatum(0));
			Datum values[4] = {key, bucket, Int16GetDatum(static_cast<int16>(MyProcPid % c.shards)),
			                   Int64GetDatum(delta)};
			if (SPI_execute_plan(slot.plan, values, nullptr, false, 0) != SPI_OK_INSERT)
				ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("writing a tracked delta failed")));
		});
	}
	ce::pg_guard([] { SPI_finish(); });
	PG_RETURN_VOID();
}
