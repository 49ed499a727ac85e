// The one mechanism that runs work as an object's owner (owner.hpp), and its
// SQL face:
//
//   counter_internal.exec_as_owner(owner regrole, sql text, VARIADIC args "any")
//       RETURNS SETOF record          -- rows of a query, with a column list
//   counter_internal.exec_as_owner_cmd(owner regrole, sql text, VARIADIC args "any")
//       RETURNS bigint                -- a command; the rows it processed
//   counter_internal.exec_as_owner_listed(owner regrole, sql text, VARIADIC args "any")
//       RETURNS SETOF record          -- exec_as_owner for a view that lists
//                                        many owners' objects (below)
//
// 'sql' is text the extension's own functions build (identifiers through %I
// or regclass output, operators schema-qualified); user input only ever
// arrives as parameters ($1, $2, ...: the variadic arguments, with their own
// types). EXECUTE on both is revoked from PUBLIC: only the extension's
// functions, after checking the caller's privilege, call them.
#include "counter_ext/owner.hpp"
#include "counter_ext/compat.hpp"
#include "counter_ext/hll.hpp"
#include "counter_ext/hll_core.hpp"

extern "C" {
#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_proc.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "nodes/makefuncs.h"
#include "nodes/value.h"
#include "parser/parse_func.h"
#include "utils/builtins.h"
#include "utils/bytea.h"
#include "utils/float.h"
#include "utils/guc.h"
#include "pgtime.h"
#include "utils/lsyscache.h"
#include "utils/plancache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"
}

namespace {

void pin(const char *name, const char *value) {
	(void)set_config_option(name, value, PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
}

// The settings of the session that started the work never reach it
// (doc/security.md, "Settings"): besides search_path, every setting that
// changes how a value is parsed or turned into text (a filter's result, a
// key given as text) or what counter_ext stores (the default precision of
// a sketch) is pinned. Each is set only when the session's value differs,
// so a session with PostgreSQL's defaults pays nothing for it. Owns
// nothing C++.
void pin_settings() {
	pin("search_path", "pg_catalog, pg_temp");
	long offset = 0;
	if (!pg_get_timezone_offset(session_timezone, &offset) || offset != 0)
		pin("TimeZone", "UTC");
	if (DateStyle != USE_ISO_DATES || DateOrder != DATEORDER_MDY)
		pin("DateStyle", "ISO, MDY");
	if (IntervalStyle != INTSTYLE_POSTGRES)
		pin("IntervalStyle", "postgres");
	if (extra_float_digits != 1)
		pin("extra_float_digits", "1");
	if (bytea_output != BYTEA_OUTPUT_HEX)
		pin("bytea_output", "hex");
	if (ce::hll_default_precision != ce::hll::default_precision)
		pin("counter_ext.hll_default_precision", CppAsString2(14));
}

static_assert(ce::hll::default_precision == 14, "pin_settings pins the default precision as text");

// counter_ext.view_lock_timeout, in milliseconds (0: no bound of its own).
int view_lock_timeout_ms = 1000;

// A read one role makes of another owner's object, in a view that lists the
// objects of many owners (counter.tracked_values, rollup_state,
// partition_status: doc/security.md, "One owner's object and another
// role's read"): the owner controls its tables, so it could hold a lock on
// one for as long as it likes, or give it a FORCE'd row-level security
// policy whose code runs in every reader's statement. Neither may delay the
// reader's read of the other objects: row_security is off (a policy that
// would apply makes the read fail, 42501, instead of running), and a lock
// is waited for at most counter_ext.view_lock_timeout (or the reader's own
// lock_timeout when that is shorter; 55P03 then). The view leaves that
// object out with a WARNING (counter_internal.owner_read_failed). Set
// inside owner_enter's nest level, so they end with the owner's scope.
void pin_listed_read_settings() {
	pin("row_security", "off");
	if (view_lock_timeout_ms > 0 && (LockTimeout == 0 || LockTimeout > view_lock_timeout_ms)) {
		char value[32];
		snprintf(value, sizeof(value), "%d", view_lock_timeout_ms);
		pin("lock_timeout", value);
	}
}

} // namespace

void ce::define_owner_gucs() {
	DefineCustomIntVariable("counter_ext.view_lock_timeout",
	                        "Longest wait for a lock on another owner's table in a view listing many owners' objects.",
	                        "counter.tracked_values, rollup_state and partition_status leave out (with a WARNING) an "
	                        "object of another owner whose table stays locked longer; 0 waits as lock_timeout says.",
	                        &view_lock_timeout_ms, 1000, 0, INT_MAX, PGC_USERSET, GUC_UNIT_MS, nullptr, nullptr,
	                        nullptr);
}

ce::OwnerSwitch ce::owner_enter(Oid role) {
	OwnerSwitch s;
	GetUserIdAndSecContext(&s.saved_user, &s.saved_context);
	SetUserIdAndSecContext(role, s.saved_context | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
	s.guc_level = NewGUCNestLevel();
	pin_settings();
	return s;
}

void ce::owner_leave(const OwnerSwitch &s) noexcept {
	AtEOXact_GUC(false, s.guc_level);
	SetUserIdAndSecContext(s.saved_user, s.saved_context);
}

Oid ce::catalog_owner() {
	Oid nsp = get_namespace_oid("counter", false);
	Oid relid = get_relname_relid("tracked", nsp);
	if (!OidIsValid(relid))
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE), errmsg("counter_ext's catalog counter.tracked is missing"),
		                errhint("Is the extension installed in this database?")));
	HeapTuple tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tuple))
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE), errmsg("cache lookup failed for relation %u", relid)));
	Oid owner = reinterpret_cast<Form_pg_class>(GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	return owner;
}

// ---------------------------------------------------------------------------
// Who called an entry point (owner.hpp, effective_caller, counter_entry).
//
// An entry point of schema counter that needs more rights than its caller
// (to write counter_ext's catalogs) is a C function, counter_entry, that is
// not SECURITY DEFINER: fmgr loads the library and calls it as the caller,
// so GetUserId() at its entry is the role PostgreSQL itself says is calling
// (the owner of the innermost SECURITY DEFINER function around the call, or
// the session's current role). It notes that role, then calls its
// implementation, the SECURITY DEFINER function of the same name and
// arguments in counter_internal. Nothing is guessed: the role is read where
// it is still in effect, whether or not the library was preloaded.

namespace {

constexpr int max_entry_depth = 64;
Oid entry_callers[max_entry_depth];
int entry_depth = 0;

} // namespace

ce::CallerScope::CallerScope(Oid caller) noexcept {
	entry_callers[entry_depth++] = caller;
}

ce::CallerScope::~CallerScope() {
	entry_depth--;
}

// The role an entry point called now acts for. Owns nothing C++.
Oid ce::entry_caller() {
	if (InSecurityRestrictedOperation())
		ereport(ERROR,
		        (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
		         errmsg("counter_ext's functions cannot be called from code counter_ext runs for an object's owner"),
		         errhint("A filter, trigger or constraint of a counter's or rollup's tables must not manage "
		                 "counters, rollups or partitions.")));
	if (entry_depth >= max_entry_depth)
		ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
		                errmsg("counter_ext's entry points nest more than %d deep", max_entry_depth)));
	Oid user = GetUserId();
	// An entry point's implementation runs as the catalog's owner; an entry
	// point it calls in turn acts for the same caller, never for that owner.
	if (entry_depth > 0 && user == ce::catalog_owner())
		return entry_callers[entry_depth - 1];
	return user;
}

namespace {

// The implementation of the entry point fcinfo calls: the function of
// counter_internal with its name and argument types (with "_impl" appended
// for an entry point of counter_internal itself: one a view of schema
// counter calls, which PostgreSQL runs with the reader's rights), looked up
// once per call site (kept in fn_extra). Owns nothing C++.
FmgrInfo *entry_implementation(FunctionCallInfo fcinfo) {
	FmgrInfo *outer = fcinfo->flinfo;
	if (outer->fn_extra != nullptr)
		return static_cast<FmgrInfo *>(outer->fn_extra);
	HeapTuple tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(outer->fn_oid));
	if (!HeapTupleIsValid(tuple))
		ereport(ERROR,
		        (errcode(ERRCODE_UNDEFINED_FUNCTION), errmsg("cache lookup failed for function %u", outer->fn_oid)));
	Form_pg_proc proc = reinterpret_cast<Form_pg_proc>(GETSTRUCT(tuple));
	bool internal = proc->pronamespace == get_namespace_oid("counter_internal", true);
	char *impl_name = psprintf(internal ? "%s_impl" : "%s", NameStr(proc->proname));
	List *name = list_make2(makeString(pstrdup("counter_internal")), makeString(impl_name));
	Oid impl = LookupFuncName(name, proc->pronargs, proc->proargtypes.values, true);
	ReleaseSysCache(tuple);
	if (!OidIsValid(impl))
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_FUNCTION),
		                errmsg("counter_ext entry point %s has no implementation", format_procedure(outer->fn_oid)),
		                errhint("The extension's SQL objects and library differ: run ALTER EXTENSION counter_ext "
		                        "UPDATE.")));
	auto *flinfo = static_cast<FmgrInfo *>(MemoryContextAllocZero(outer->fn_mcxt, sizeof(FmgrInfo)));
	fmgr_info_cxt(impl, flinfo, outer->fn_mcxt);
	flinfo->fn_expr = outer->fn_expr;
	outer->fn_extra = flinfo;
	return flinfo;
}

} // namespace

// SQL objects older than the library (between installing 1.5's library and
// ALTER EXTENSION counter_ext UPDATE) have SECURITY DEFINER entry points that
// ask for their caller without counter_entry around them. For them alone,
// and only when the library was preloaded (so it has seen every call of the
// backend), a hook on fmgr's SECURITY DEFINER calls gives the owner of the
// innermost such function that is not counter_ext's own, as 1.4 did. Loaded
// later it could have missed frames begun before the load, so such a call is
// refused instead.
namespace {

struct DefinerFrame {
	Oid function;
	Oid user; // the role the call switched to
};
constexpr int max_definer_frames = 256;
DefinerFrame definer_frames[max_definer_frames];
int definer_depth = 0; // may exceed max_definer_frames: the deeper ones are not kept
bool definer_hook_installed = false;
fmgr_hook_type prev_fmgr_hook = nullptr;

// fmgr calls it for every function it runs through fmgr_security_definer,
// after switching to the owner at FHET_START, and at FHET_END or FHET_ABORT.
// Plain C, allocates nothing.
void definer_hook(FmgrHookEventType event, FmgrInfo *flinfo, Datum *arg) {
	if (prev_fmgr_hook != nullptr)
		prev_fmgr_hook(event, flinfo, arg);
	if (event == FHET_START) {
		if (definer_depth < max_definer_frames)
			definer_frames[definer_depth] = DefinerFrame{flinfo->fn_oid, GetUserId()};
		definer_depth++;
	} else if (definer_depth > 0) {
		definer_depth--;
	}
}

// A SECURITY DEFINER function that is not counter_ext's own (one that is
// gone counts as one: its recorded role is the safe answer).
bool foreign_definer(Oid function) {
	HeapTuple tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(function));
	if (!HeapTupleIsValid(tuple))
		return true;
	Form_pg_proc proc = reinterpret_cast<Form_pg_proc>(GETSTRUCT(tuple));
	bool definer = proc->prosecdef;
	Oid nsp = proc->pronamespace;
	ReleaseSysCache(tuple);
	if (!definer)
		return false;
	return nsp != get_namespace_oid("counter", true) && nsp != get_namespace_oid("counter_internal", true);
}

// The caller of an entry point of older SQL objects. Owns nothing C++.
Oid older_sql_caller() {
	if (!definer_hook_installed)
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		                errmsg("counter_ext's SQL objects are older than its library, so the role calling them "
		                       "cannot be known for certain"),
		                errhint("Run ALTER EXTENSION counter_ext UPDATE in this database.")));
	if (definer_depth > max_definer_frames)
		ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
		                errmsg("SECURITY DEFINER functions nest more than %d deep around a counter_ext call",
		                       max_definer_frames)));
	for (int i = definer_depth - 1; i >= 0; i--)
		if (foreign_definer(definer_frames[i].function))
			return definer_frames[i].user;
	return GetOuterUserId();
}

} // namespace

void ce::install_older_sql_hook() {
	prev_fmgr_hook = fmgr_hook;
	fmgr_hook = definer_hook;
	definer_hook_installed = true;
}

Oid ce::effective_caller() {
	if (InSecurityRestrictedOperation())
		(void)ce::entry_caller(); // refuses, as at an entry point
	if (entry_depth == 0)
		return older_sql_caller();
	return entry_callers[entry_depth - 1];
}

// counter.<name>(...) for every entry point that needs more rights than its
// caller: notes the caller, then runs counter_internal.<name>(...) with the
// same arguments, result and set-returning context.
CE_FUNCTION(counter_entry) {
	Oid caller = ce::pg_guard([] { return ce::entry_caller(); });
	FmgrInfo *impl = ce::pg_guard([fcinfo] { return entry_implementation(fcinfo); });
	ce::CallerScope scope(caller);
	FmgrInfo *outer = fcinfo->flinfo;
	fcinfo->flinfo = impl;
	try {
		Datum result = ce::pg_guard([fcinfo] { return FunctionCallInvoke(fcinfo); });
		fcinfo->flinfo = outer;
		return result;
	} catch (...) {
		fcinfo->flinfo = outer;
		throw;
	}
}

namespace {

struct Call {
	Oid owner;
	const char *sql;
	int nargs;
	Oid *types;
	Datum *values;
	char *nulls;
};

// The arguments of exec_as_owner*: owner, sql, then the parameters. Owns
// nothing C++.
Call read_call(FunctionCallInfo fcinfo) {
	if (get_fn_expr_variadic(fcinfo->flinfo))
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
		                errmsg("counter_internal.exec_as_owner takes its parameters one by one, not as an array")));
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("owner and sql must not be NULL")));
	Call c;
	c.owner = PG_GETARG_OID(0);
	c.sql = text_to_cstring(PG_GETARG_TEXT_PP(1));
	c.nargs = PG_NARGS() - 2;
	c.types = static_cast<Oid *>(palloc0(sizeof(Oid) * (c.nargs + 1)));
	c.values = static_cast<Datum *>(palloc0(sizeof(Datum) * (c.nargs + 1)));
	c.nulls = static_cast<char *>(palloc0(c.nargs + 1));
	for (int i = 0; i < c.nargs; i++) {
		c.types[i] = get_fn_expr_argtype(fcinfo->flinfo, i + 2);
		if (!OidIsValid(c.types[i]))
			ereport(ERROR, (errcode(ERRCODE_INDETERMINATE_DATATYPE),
			                errmsg("could not determine the type of parameter $%d", i + 1)));
		if (c.types[i] == UNKNOWNOID)
			c.types[i] = TEXTOID; // an untyped literal: its text
		c.nulls[i] = PG_ARGISNULL(i + 2) ? 'n' : ' ';
		c.values[i] = PG_ARGISNULL(i + 2) ? (Datum)0 : PG_GETARG_DATUM(i + 2);
	}
	return c;
}

// A query_tree_walker over a query as rewritten: every relation it reads,
// its views expanded, is a table (plain or partitioned). On PostgreSQL 15
// an owner can still turn its own empty table into a view (CREATE RULE
// "_RETURN"), whose query, calling the owner's functions, would then run in
// another role's read of a listing view: refused instead (42809). PostgreSQL
// 15 keeps a view's entry, relkind 'v', in its expansion's range table;
// later majors keep relkind on the subquery entry. Owns nothing C++.
bool reads_tables_only(Node *node, void *context) {
	if (node == nullptr)
		return false;
	if (IsA(node, RangeTblEntry)) {
		auto *rte = reinterpret_cast<RangeTblEntry *>(node);
		if ((rte->rtekind == RTE_RELATION || rte->relkind == RELKIND_VIEW) && rte->relkind != RELKIND_RELATION &&
		    rte->relkind != RELKIND_PARTITIONED_TABLE) {
			const char *rel = OidIsValid(rte->relid) ? get_rel_name(rte->relid) : nullptr;
			ereport(ERROR,
			        (errcode(ERRCODE_WRONG_OBJECT_TYPE), errmsg("\"%s\" is not a table", rel != nullptr ? rel : "?"),
			         errdetail("A listing view reads only tables of another owner's object, never a view "
			                   "or anything else whose reading runs that owner's code.")));
		}
		return false;
	}
	if (IsA(node, Query))
		return ce::compat::query_walk(reinterpret_cast<Query *>(node), reads_tables_only, context,
		                              QTW_EXAMINE_RTES_BEFORE);
	return ce::compat::expression_walk(node, reads_tables_only, context);
}

// Owns nothing C++: runs inside as_owner. tables_only: the query, as
// rewritten, reads tables only (reads_tables_only) or is refused before it
// runs (its relations' locks, taken by the rewrite, are held to the end of
// the transaction: none of them can change in between).
int run(const Call &c, bool read_only, bool tables_only = false) {
	if (SPI_connect() != SPI_OK_CONNECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
	int rc;
	if (tables_only) {
		SPIPlanPtr plan = SPI_prepare(c.sql, c.nargs, c.types);
		if (plan == nullptr)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
			                errmsg("counter_ext: SPI_prepare failed: %s", SPI_result_code_string(SPI_result)),
			                errdetail("The statement was: %s", c.sql)));
		ListCell *lc;
		foreach (lc, SPI_plan_get_plan_sources(plan)) {
			auto *source = static_cast<CachedPlanSource *>(lfirst(lc));
			ListCell *q;
			foreach (q, source->query_list)
				(void)reads_tables_only(static_cast<Node *>(lfirst(q)), nullptr);
		}
		rc = SPI_execute_plan(plan, c.values, c.nulls, read_only, 0);
	} else
		rc = SPI_execute_with_args(c.sql, c.nargs, c.types, c.values, c.nulls, read_only, 0);
	if (rc < 0)
		ereport(ERROR,
		        (errcode(ERRCODE_INTERNAL_ERROR), errmsg("counter_ext: SPI failed: %s", SPI_result_code_string(rc)),
		         errdetail("The statement was: %s", c.sql)));
	return rc;
}

// Copies the rows SPI returned into the caller's tuplestore, as the caller's
// column list says (types must match exactly). Owns nothing C++.
void materialize(FunctionCallInfo fcinfo, MemoryContext call_context) {
	auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
	if (rsinfo == nullptr || !IsA(rsinfo, ReturnSetInfo) || (rsinfo->allowedModes & SFRM_Materialize) == 0 ||
	    rsinfo->expectedDesc == nullptr)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
		                errmsg("counter_internal.exec_as_owner must be called in FROM with a column list")));
	TupleDesc want = rsinfo->expectedDesc;
	TupleDesc got = SPI_tuptable != nullptr ? SPI_tuptable->tupdesc : nullptr;
	if (got != nullptr) {
		bool same = got->natts == want->natts;
		for (int i = 0; same && i < want->natts; i++)
			same = TupleDescAttr(got, i)->atttypid == TupleDescAttr(want, i)->atttypid;
		if (!same)
			ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
			                errmsg("counter_internal.exec_as_owner: the query's columns differ from the column list")));
	}
	MemoryContext old = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	TupleDesc desc = CreateTupleDescCopy(want);
	Tuplestorestate *store = tuplestore_begin_heap(true, false, work_mem);
	if (got != nullptr)
		for (uint64 i = 0; i < SPI_processed; i++)
			tuplestore_puttuple(store, SPI_tuptable->vals[i]);
	MemoryContextSwitchTo(old);
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setResult = store;
	rsinfo->setDesc = desc;
	(void)call_context;
}

} // namespace

// The rows of a query run as its owner (exec_as_owner); listed: for a view
// listing many owners' objects, the read of a role other than the owner runs
// with the settings of pin_listed_read_settings (above). Owns nothing C++.
static Datum owner_rows(FunctionCallInfo fcinfo, bool listed) {
	MemoryContext call_context = CurrentMemoryContext;
	Call c = ce::pg_guard([fcinfo] { return read_call(fcinfo); });
	bool other = listed && ce::pg_guard([] { return ce::effective_caller(); }) != c.owner;
	ce::as_owner(c.owner, [&c, fcinfo, call_context, other] {
		if (other)
			pin_listed_read_settings();
		(void)run(c, false, other);
		materialize(fcinfo, call_context);
		SPI_finish();
	});
	return (Datum)0;
}

CE_FUNCTION(counter_exec_as_owner) {
	return owner_rows(fcinfo, false);
}

CE_FUNCTION(counter_exec_as_owner_listed) {
	return owner_rows(fcinfo, true);
}

CE_FUNCTION(counter_exec_as_owner_cmd) {
	Call c = ce::pg_guard([fcinfo] { return read_call(fcinfo); });
	int64 processed = ce::as_owner(c.owner, [&c] {
		(void)run(c, false);
		int64 n = static_cast<int64>(SPI_processed);
		SPI_finish();
		return n;
	});
	PG_RETURN_INT64(processed);
}
