// The one mechanism that runs work as an object's owner (owner.hpp), and its
// SQL face:
//
//   counter_internal.exec_as_owner(owner regrole, sql text, VARIADIC args "any")
//       RETURNS SETOF record          -- rows of a query, with a column list
//   counter_internal.exec_as_owner_cmd(owner regrole, sql text, VARIADIC args "any")
//       RETURNS bigint                -- a command; the rows it processed
//
// 'sql' is text the extension's own functions build (identifiers through %I
// or regclass output, operators schema-qualified); user input only ever
// arrives as parameters ($1, $2, ...: the variadic arguments, with their own
// types). EXECUTE on both is revoked from PUBLIC: only the extension's
// functions, after checking the caller's privilege, call them.
#include "counter_ext/owner.hpp"

extern "C" {
#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"
}

ce::OwnerSwitch ce::owner_enter(Oid role) {
	OwnerSwitch s;
	GetUserIdAndSecContext(&s.saved_user, &s.saved_context);
	SetUserIdAndSecContext(role, s.saved_context | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
	s.guc_level = NewGUCNestLevel();
	(void)set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0,
	                        false);
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

// Owns nothing C++: runs inside as_owner.
int run(const Call &c, bool read_only) {
	if (SPI_connect() != SPI_OK_CONNECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
	int rc = SPI_execute_with_args(c.sql, c.nargs, c.types, c.values, c.nulls, read_only, 0);
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

CE_FUNCTION(counter_exec_as_owner) {
	MemoryContext call_context = CurrentMemoryContext;
	Call c = ce::pg_guard([fcinfo] { return read_call(fcinfo); });
	ce::as_owner(c.owner, [&c, fcinfo, call_context] {
		(void)run(c, false);
		materialize(fcinfo, call_context);
		SPI_finish();
	});
	return (Datum)0;
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
