// The one filter compiler (filter.hpp) and its SQL faces:
//
//   counter_internal.filter_compile(source regclass, filter text, owner regrole)
//       RETURNS text[]   -- {canonical text, tree}; resolved as the owner
//   counter_internal.filter_match(kind text, id integer, row anyelement)
//       RETURNS boolean  -- the stored filter of a tracked counter ('tracked')
//                           or a rollup ('rollup') applied to a source row
//   counter_internal.filter_sql(source, canonical, tree, tree_relid, owner, alias)
//       RETURNS text     -- the stored filter as an SQL expression (deparsed)
#include "counter_ext/filter.hpp"
#include "counter_ext/owner.hpp"
#include "counter_ext/spi.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xlog.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "nodes/parsenodes.h"
#include "optimizer/optimizer.h"
#include "parser/parse_coerce.h"
#include "parser/parse_collate.h"
#include "parser/parse_expr.h"
#include "parser/parse_node.h"
#include "parser/parse_relation.h"
#include "parser/parser.h"
#include "rewrite/rewriteManip.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/ruleutils.h"
}

#include <cstring>
#include <string>

namespace {

// True when 'stmt' is exactly "SELECT 1 WHERE (<expression>)".
bool is_plain_where(const SelectStmt *s) {
	return s->op == SETOP_NONE && s->distinctClause == NIL && s->intoClause == nullptr &&
	       list_length(s->targetList) == 1 && s->fromClause == NIL && s->whereClause != nullptr &&
	       s->groupClause == NIL && s->havingClause == nullptr && s->windowClause == NIL && s->valuesLists == NIL &&
	       s->sortClause == NIL && s->limitOffset == nullptr && s->limitCount == nullptr && s->lockingClause == NIL &&
	       s->withClause == nullptr;
}

[[noreturn]] void not_one_expression(const char *text) {
	ereport(ERROR, (errcode(ERRCODE_SYNTAX_ERROR), errmsg("filter must be one boolean expression"),
	                errdetail("The filter was: %s", text),
	                errhint("Write a condition on the source table's columns, such as: deleted_at IS NULL")));
	pg_unreachable();
}

// Every Var of a stored tree must name a live column of 'desc' with the type
// it had when the tree was made; a stored tree never holds a subquery.
void check_vars(Node *expr, TupleDesc desc) {
	if (checkExprHasSubLink(expr))
		ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED), errmsg("a stored filter contains a subquery")));
	ListCell *cell;
	foreach (cell, pull_var_clause(expr, 0)) {
		Var *var = static_cast<Var *>(lfirst(cell));
		bool ok = IsA(var, Var) && var->varno == 1 && var->varlevelsup == 0 && var->varattno > 0 &&
		          var->varattno <= desc->natts;
		if (ok) {
			Form_pg_attribute att = TupleDescAttr(desc, var->varattno - 1);
			ok = !att->attisdropped && att->atttypid == var->vartype;
		}
		if (!ok)
			ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			                errmsg("a stored filter refers to a column that was dropped or changed its type"),
			                errhint("Register the counter or rollup again with its filter.")));
	}
}

// Errors with a position point into the filter, shown as the internal query
// (as PL/pgSQL shows a position in a function's body), not into the
// statement that registered it.
void filter_error_position(void *arg) {
	int position = geterrposition();
	if (position > 0) {
		errposition(0);
		internalerrposition(position);
		internalerrquery(static_cast<const char *>(arg));
	}
}

} // namespace

Node *ce::filter::compile(Relation rel, const char *text) {
	char *query = psprintf("SELECT 1 WHERE (%s\n)", text);
	List *parsed = nullptr;
	MemoryContext context = CurrentMemoryContext;
	PG_TRY();
	{ parsed = raw_parser(query, RAW_PARSE_DEFAULT); }
	PG_CATCH();
	{
		// The parser's cursor points into our wrapper query, not the owner's text.
		MemoryContextSwitchTo(context);
		ErrorData *e = CopyErrorData();
		FlushErrorState();
		ereport(ERROR, (errcode(ERRCODE_SYNTAX_ERROR), errmsg("filter does not parse: %s", e->message),
		                errdetail("The filter was: %s", text)));
	}
	PG_END_TRY();
	if (list_length(parsed) != 1)
		not_one_expression(text);
	Node *stmt = linitial_node(RawStmt, parsed)->stmt;
	if (!IsA(stmt, SelectStmt) || !is_plain_where(castNode(SelectStmt, stmt)))
		not_one_expression(text);
	SelectStmt *select = castNode(SelectStmt, stmt);
	ErrorContextCallback callback;
	callback.callback = filter_error_position;
	callback.arg = query;
	callback.previous = error_context_stack;
	error_context_stack = &callback;
	ParseState *pstate = make_parsestate(nullptr);
	pstate->p_sourcetext = query;
	ParseNamespaceItem *item = addRangeTableEntryForRelation(pstate, rel, AccessShareLock,
	                                                         makeAlias(RelationGetRelationName(rel), NIL), false, true);
	addNSItemToQuery(pstate, item, false, true, true);
	Node *expr = transformExpr(pstate, select->whereClause, EXPR_KIND_WHERE);
	expr = coerce_to_boolean(pstate, expr, "filter");
	assign_expr_collations(pstate, expr);
	if (checkExprHasSubLink(expr))
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED), errmsg("filter must not contain a subquery")));
	free_parsestate(pstate);
	error_context_stack = callback.previous;
	return expr;
}

namespace {

// A stored tree is "CE1 <system identifier> <nodeToString>": the format's
// version, then the cluster it was resolved in. The oids of functions,
// operators and collations in a tree name them only in that cluster:
// pg_upgrade keeps the oids of tables and types, not of routines, and gives
// the new cluster another system identifier.
constexpr const char tree_format[] = "CE1 ";

// The stored form of 'tree' (palloc'd).
char *stamp(const char *tree) {
	return psprintf("%s" UINT64_FORMAT " %s", tree_format, GetSystemIdentifier(), tree);
}

// The node text of a stored tree made in this cluster, or nullptr (another
// cluster's, or not of this format: resolved again from the canonical text).
const char *tree_of_this_cluster(const char *stored) {
	char here[sizeof(tree_format) + 24];
	snprintf(here, sizeof(here), "%s" UINT64_FORMAT " ", tree_format, GetSystemIdentifier());
	const size_t n = strlen(here);
	return strncmp(stored, here, n) == 0 ? stored + n : nullptr;
}

} // namespace

Node *ce::filter::resolve(Relation rel, const char *tree, Oid tree_relid, const char *canonical) {
	const char *nodes = tree != nullptr && tree_relid == RelationGetRelid(rel) ? tree_of_this_cluster(tree) : nullptr;
	if (nodes != nullptr) {
		Node *expr = static_cast<Node *>(stringToNode(nodes));
		check_vars(expr, RelationGetDescr(rel));
		return expr;
	}
	return compile(rel, canonical);
}

ExprState *ce::filter::prepare(Relation rel, const char *tree, Oid tree_relid, const char *canonical) {
	Node *expr = resolve(rel, tree, tree_relid, canonical);
	return ExecInitExpr(expression_planner(reinterpret_cast<Expr *>(expr)), nullptr);
}

// counter_internal.filter_compile(source, filter, owner): {canonical, tree}.
CE_FUNCTION(counter_filter_compile) {
	Oid relid = PG_GETARG_OID(0);
	const char *source_text = text_to_cstring(PG_GETARG_TEXT_PP(1));
	Oid owner = PG_GETARG_OID(2);
	Datum result = ce::as_owner(owner, [relid, source_text] {
		Relation rel = table_open(relid, AccessShareLock);
		Node *expr = ce::filter::compile(rel, source_text);
		List *context = deparse_context_for(RelationGetRelationName(rel), relid);
		Datum parts[2] = {CStringGetTextDatum(deparse_expression(expr, context, false, false)),
		                  CStringGetTextDatum(stamp(nodeToString(expr)))};
		table_close(rel, NoLock);
		return PointerGetDatum(construct_array(parts, 2, TEXTOID, -1, false, TYPALIGN_INT));
	});
	PG_RETURN_DATUM(result);
}

// counter_internal.filter_sql(source, canonical, tree, tree_relid, owner,
// alias): the stored filter as an SQL expression over the source's columns,
// each written alias.column (by its name now, so a renamed column is
// followed), printed from the stored tree the way a view is dumped: under the
// function's search_path (pg_catalog, pg_temp) every function, operator and
// type outside pg_catalog is named with its schema, so the text means the
// same in any session with that search_path, on any node. Resolved as the
// owner (the canonical text is compiled again when the tree is not of this
// table). NULL when there is no filter.
CE_FUNCTION(counter_filter_sql) {
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(4) || PG_ARGISNULL(5))
		PG_RETURN_NULL();
	Oid relid = PG_GETARG_OID(0);
	Oid owner = PG_GETARG_OID(4);
	const char *canonical = ce::pg_guard([fcinfo] { return text_to_cstring(PG_GETARG_TEXT_PP(1)); });
	const char *tree =
	    PG_ARGISNULL(2) ? nullptr : ce::pg_guard([fcinfo] { return text_to_cstring(PG_GETARG_TEXT_PP(2)); });
	Oid tree_relid = PG_ARGISNULL(3) ? InvalidOid : PG_GETARG_OID(3);
	const char *alias = ce::pg_guard([fcinfo] { return pstrdup(NameStr(*PG_GETARG_NAME(5))); });
	Datum result = ce::as_owner(owner, [relid, canonical, tree, tree_relid, alias] {
		Relation rel = table_open(relid, AccessShareLock);
		Node *expr = ce::filter::resolve(rel, tree, tree_relid, canonical);
		List *context = deparse_context_for(alias, relid);
		Datum sql = CStringGetTextDatum(deparse_expression(expr, context, true, false));
		table_close(rel, NoLock);
		return sql;
	});
	PG_RETURN_DATUM(result);
}

namespace {

// What one call site of filter_match keeps (in fn_mcxt).
struct Match {
	char kind[16];
	int32 id;
	Oid relid;
	Oid rowtype;
	Oid owner;
	Oid user;         // the current user it was checked for
	ExprState *state; // nullptr: the object has no filter
	ExprContext *econtext;
	TupleTableSlot *slot;
};

SPIPlanPtr lookup_plans[2] = {nullptr, nullptr};

// Owns nothing C++: reads the object's row as the catalog owner, then makes
// the ExprState as the object's owner.
void match_load(Match *m, FmgrInfo *flinfo) {
	int which = strcmp(m->kind, "tracked") == 0 ? 0 : strcmp(m->kind, "rollup") == 0 ? 1 : -1;
	if (which < 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("unknown filter kind \"%s\"", m->kind)));
	struct Row {
		bool found;
		Oid relid, owner, tree_relid;
		char *canonical, *tree;
	};
	Row row = ce::as_owner(ce::catalog_owner(), [which, m, flinfo] {
		Row r{};
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		if (lookup_plans[which] == nullptr) {
			Oid types[1] = {INT4OID};
			lookup_plans[which] = ce::prepare_kept(
			    which == 0 ? "SELECT t.source::oid, t.owner::oid, t.filter, t.filter_tree, t.filter_relid"
			                 " FROM counter.tracked t WHERE t.counter_id OPERATOR(pg_catalog.=) $1"
			               : "SELECT t.source::oid, t.owner::oid, t.filter, t.filter_tree, t.filter_relid"
			                 " FROM counter.rollups t WHERE t.rollup_id OPERATOR(pg_catalog.=) $1",
			    1, types);
		}
		Datum args[1] = {Int32GetDatum(m->id)};
		if (SPI_execute_plan(lookup_plans[which], args, nullptr, true, 1) != SPI_OK_SELECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading a filter failed")));
		if (SPI_processed == 1) {
			HeapTuple t = SPI_tuptable->vals[0];
			TupleDesc d = SPI_tuptable->tupdesc;
			bool isnull;
			MemoryContext old = MemoryContextSwitchTo(flinfo->fn_mcxt);
			r.found = true;
			r.relid = DatumGetObjectId(SPI_getbinval(t, d, 1, &isnull));
			r.owner = DatumGetObjectId(SPI_getbinval(t, d, 2, &isnull));
			r.canonical = SPI_getvalue(t, d, 3);
			r.tree = SPI_getvalue(t, d, 4);
			Datum tr = SPI_getbinval(t, d, 5, &isnull);
			r.tree_relid = isnull ? InvalidOid : DatumGetObjectId(tr);
			MemoryContextSwitchTo(old);
		}
		SPI_finish();
		return r;
	});
	if (!row.found)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("no %s with id %d", m->kind, m->id)));
	if (!has_privs_of_role(GetUserId(), row.owner))
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
		                errmsg("only the owner of a %s evaluates its filter", m->kind)));
	m->relid = row.relid;
	m->owner = row.owner;
	m->user = GetUserId();
	m->rowtype = get_rel_type_id(row.relid);
	MemoryContext old = MemoryContextSwitchTo(flinfo->fn_mcxt);
	if (row.canonical != nullptr) {
		Relation rel = table_open(row.relid, AccessShareLock);
		m->state = ce::filter::prepare(rel, row.tree, row.tree_relid, row.canonical);
		m->slot = MakeSingleTupleTableSlot(CreateTupleDescCopy(RelationGetDescr(rel)), &TTSOpsHeapTuple);
		table_close(rel, NoLock);
		m->econtext = CreateStandaloneExprContext();
	}
	MemoryContextSwitchTo(old);
}

// Owns nothing C++.
bool match_row(Match *m, HeapTupleHeader row) {
	if (m->state == nullptr)
		return true;
	if (HeapTupleHeaderGetTypeId(row) != m->rowtype)
		ereport(ERROR,
		        (errcode(ERRCODE_DATATYPE_MISMATCH), errmsg("filter_match: the row is not of the source table")));
	HeapTupleData tuple;
	tuple.t_len = HeapTupleHeaderGetDatumLength(row);
	ItemPointerSetInvalid(&tuple.t_self);
	tuple.t_tableOid = m->relid;
	tuple.t_data = row;
	ExecStoreHeapTuple(&tuple, m->slot, false);
	ResetExprContext(m->econtext);
	m->econtext->ecxt_scantuple = m->slot;
	bool isnull;
	Datum pass = ExecEvalExprSwitchContext(m->state, m->econtext, &isnull);
	ExecClearTuple(m->slot);
	return !isnull && DatumGetBool(pass);
}

} // namespace

CE_FUNCTION(counter_filter_match) {
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		throw ce::Error(ce::sqlstate::null_value_not_allowed, "filter_match: kind and id must not be NULL");
	if (PG_ARGISNULL(2))
		PG_RETURN_BOOL(false);
	auto *m = static_cast<Match *>(fcinfo->flinfo->fn_extra);
	int32 id = PG_GETARG_INT32(1);
	char *kind = ce::pg_guard([fcinfo] { return text_to_cstring(PG_GETARG_TEXT_PP(0)); });
	if (m == nullptr || m->id != id || strcmp(m->kind, kind) != 0 || m->user != GetUserId()) {
		m = ce::pg_guard(
		    [fcinfo] { return static_cast<Match *>(MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(Match))); });
		strlcpy(m->kind, kind, sizeof(m->kind));
		m->id = id;
		match_load(m, fcinfo->flinfo); // owns nothing; raises directly
		fcinfo->flinfo->fn_extra = m;
	}
	bool ok = ce::pg_guard([fcinfo, m] { return match_row(m, PG_GETARG_HEAPTUPLEHEADER(2)); });
	PG_RETURN_BOOL(ok);
}
