// The spine of periodic work (spine.hpp): the registry of kinds, the one
// loop, and its SQL face, CALL counter.run_steps(kind, target, args).
//
// The loop is what counter.run_steps was in PL/pgSQL (1.5-1.6), in C++ so
// that it calls the step functions through fmgr: they live in
// counter_internal, where EXECUTE is revoked from PUBLIC, and the gate is
// here: the kind comes from the registry (a superuser-owned step function),
// and each step checks that its caller owns what it serves (the caller is
// noted as for an entry point, src/owner.cpp). Owner work inside a step
// runs as the owner, restricted, through the one mechanism (owner.hpp).
//
// A step that fails after the first is rolled back (a subtransaction, as
// PL/pgSQL's exception block made), handed to the step function to record
// ('error' in its state), committed, and raised again whole: the same
// ErrorData, SQLSTATE, message, detail, hint and the step's context. A
// cancel (statement timeout, pg_cancel_backend) is not a step's failure: it
// rolls back and goes on up, as PL/pgSQL's WHEN OTHERS let it.
#include "counter_ext/spine.hpp"
#include "counter_ext/owner.hpp"
#include "counter_ext/worker.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "nodes/parsenodes.h"
#include "utils/fmgrprotos.h"
#include "utils/json.h"
#include "utils/regproc.h"
#include "utils/jsonb.h"
#include "utils/resowner.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
}

#include <cstring>

namespace {

struct Loop {
	FmgrInfo flinfo; // the step function (fn_mcxt: keep)
	Datum target;
	bool target_null;
	Datum args;
	MemoryContext keep; // the states, across commits
	MemoryContext step; // one step's garbage
	ResourceOwner owner;
};

// One call of the step function; the new state, copied into keep. Owns
// nothing C++.
Datum call_step(Loop *l, Datum state, bool state_null) {
	MemoryContext old = MemoryContextSwitchTo(l->step);
	LOCAL_FCINFO(fc, 3);
	InitFunctionCallInfoData(*fc, &l->flinfo, 3, InvalidOid, nullptr, nullptr);
	fc->args[0].value = l->target;
	fc->args[0].isnull = l->target_null;
	fc->args[1].value = l->args;
	fc->args[1].isnull = false;
	fc->args[2].value = state;
	fc->args[2].isnull = state_null;
	Datum result = FunctionCallInvoke(fc);
	if (fc->isnull)
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		                errmsg("the step function %s returned NULL", format_procedure(l->flinfo.fn_oid))));
	MemoryContextSwitchTo(l->keep);
	Datum copy = PointerGetDatum(DatumGetJsonbPCopy(result));
	MemoryContextSwitchTo(old);
	MemoryContextReset(l->step);
	return copy;
}

// The value of 'key' in a state, when it has one. Owns nothing C++.
bool field(Datum state, const char *key, JsonbValue *v) {
	Jsonb *jb = DatumGetJsonbP(state);
	return getKeyJsonValueFromContainer(&jb->root, key, strlen(key), v) != nullptr;
}

bool field_int8(Datum state, const char *key, int64 *out) {
	JsonbValue v;
	if (!field(state, key, &v))
		return false;
	if (v.type == jbvNumeric) {
		*out = DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(v.val.numeric)));
		return true;
	}
	if (v.type == jbvString) {
		char *s = pnstrdup(v.val.string.val, v.val.string.len);
		*out = DatumGetInt64(DirectFunctionCall1(int8in, CStringGetDatum(s)));
		return true;
	}
	return false;
}

bool finished(Datum state) {
	JsonbValue v;
	if (!field(state, "finished", &v))
		return false;
	if (v.type == jbvBool)
		return v.val.boolean;
	return v.type == jbvString && v.val.string.len == 4 && strncmp(v.val.string.val, "true", 4) == 0;
}

// The step's progress, for counter.running_jobs and pg_stat_activity.
void progress(Datum state) {
	JsonbValue v;
	char *phase =
	    field(state, "phase", &v) && v.type == jbvString ? pnstrdup(v.val.string.val, v.val.string.len) : nullptr;
	int64 done = 0, total = -1;
	(void)field_int8(state, "done", &done);
	(void)field_int8(state, "total", &total);
	ce::job_progress(phase, done, total);
}

// state || extra (extra: JSON text), in keep.
Datum with(Loop *l, Datum state, const char *extra) {
	MemoryContext old = MemoryContextSwitchTo(l->keep);
	Datum add = DirectFunctionCall1(jsonb_in, CStringGetDatum(extra));
	Datum result = DirectFunctionCall2(jsonb_concat, state, add);
	MemoryContextSwitchTo(old);
	return result;
}

void json_member(StringInfo buf, const char *key, const char *value, bool comma) {
	if (comma)
		appendStringInfoString(buf, ", ");
	escape_json(buf, key);
	appendStringInfoString(buf, ": ");
	if (value == nullptr || value[0] == '\0')
		appendStringInfoString(buf, "null");
	else
		escape_json(buf, value);
}

// {"error": {sqlstate, message, detail, hint, context}}: what the step
// function records of a failed step.
char *error_json(const ErrorData *e) {
	StringInfoData buf;
	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"error\": {");
	json_member(&buf, "sqlstate", unpack_sql_state(e->sqlerrcode), false);
	json_member(&buf, "message", e->message, true);
	json_member(&buf, "detail", e->detail, true);
	json_member(&buf, "hint", e->hint, true);
	json_member(&buf, "context", e->context, true);
	appendStringInfoString(&buf, "}}");
	return buf.data;
}

// The text of key in an object value, or nullptr. Owns nothing C++.
char *object_text(JsonbValue *object, const char *key) {
	JsonbValue v;
	if (object->type != jbvBinary ||
	    getKeyJsonValueFromContainer(object->val.binary.data, key, strlen(key), &v) == nullptr || v.type != jbvString)
		return nullptr;
	return pnstrdup(v.val.string.val, v.val.string.len);
}

// A run's last state may hand the loop an error to raise once its outcome is
// committed ('raise': {sqlstate, message, detail}): a job whose run ended
// without success backs off. Owns nothing C++.
void raise_if_asked(Datum state) {
	JsonbValue v;
	if (!field(state, "raise", &v) || v.type != jbvBinary)
		return;
	char *state_text = object_text(&v, "sqlstate");
	char *message = object_text(&v, "message");
	char *detail = object_text(&v, "detail");
	int code = ERRCODE_INTERNAL_ERROR;
	if (state_text != nullptr && strlen(state_text) == 5)
		code = MAKE_SQLSTATE(state_text[0], state_text[1], state_text[2], state_text[3], state_text[4]);
	ereport(ERROR, (errcode(code), errmsg_internal("%s", message != nullptr ? message : "the run did not succeed"),
	                detail != nullptr ? errdetail_internal("%s", detail) : 0));
}

// When the running statement's timeout would cancel it (0: none armed).
TimestampTz deadline() {
	return get_timeout_active(STATEMENT_TIMEOUT) ? get_timeout_finish_time(STATEMENT_TIMEOUT) : 0;
}

void commit(Loop *l) {
	SPI_commit();
	MemoryContextSwitchTo(l->keep);
}

// A step in a subtransaction of its own (PL/pgSQL's exception block).
void sub_begin(Loop *l) {
	l->owner = CurrentResourceOwner;
	BeginInternalSubTransaction(nullptr);
	MemoryContextSwitchTo(l->keep);
}

void sub_end(Loop *l, bool ok) {
	if (ok)
		ReleaseCurrentSubTransaction();
	else
		RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(l->keep);
	CurrentResourceOwner = l->owner;
}

Loop *loop_begin(Oid step, Datum target, bool target_null, Datum args, MemoryContext keep) {
	MemoryContextSwitchTo(keep);
	Loop *l = static_cast<Loop *>(palloc0(sizeof(Loop)));
	fmgr_info_cxt(step, &l->flinfo, keep);
	l->target = target_null ? 0 : PointerGetDatum(DatumGetTextPCopy(target));
	l->target_null = target_null;
	l->args = PointerGetDatum(DatumGetJsonbPCopy(args));
	l->keep = keep;
	l->step = AllocSetContextCreate(keep, "counter_ext step", ALLOCSET_DEFAULT_SIZES);
	return l;
}

// The next step, in a subtransaction; a failure is recorded by the step
// function and committed, then thrown (a cancel only rolls back).
Datum guarded_step(Loop *l, Datum state) {
	ErrorData *failed = nullptr;
	ce::pg_guard([l] { sub_begin(l); });
	Datum next = 0;
	try {
		next = ce::pg_guard([l, state] { return call_step(l, state, false); });
	} catch (const ce::PgError &e) {
		failed = e.data();
	}
	ce::pg_guard([l, failed] { sub_end(l, failed == nullptr); });
	if (failed == nullptr)
		return next;
	if (failed->sqlerrcode != ERRCODE_QUERY_CANCELED && failed->sqlerrcode != ERRCODE_ASSERT_FAILURE)
		ce::pg_guard([l, state, failed] {
			(void)call_step(l, with(l, state, error_json(failed)), false);
			commit(l);
		});
	throw ce::PgError(failed);
}

} // namespace

ce::spine::Kind ce::spine::resolve(const char *kind, Oid caller) {
	Kind k{false, InvalidOid};
	OwnerSwitch s = owner_enter(catalog_owner());
	Oid types[2] = {TEXTOID, OIDOID};
	Datum values[2] = {CStringGetTextDatum(kind), ObjectIdGetDatum(caller)};
	int rc = SPI_execute_with_args(
	    "SELECT p.oid, p.prokind OPERATOR(pg_catalog.=) 'f' AND NOT p.proretset"
	    "  AND p.prorettype OPERATOR(pg_catalog.=) 'pg_catalog.jsonb'::pg_catalog.regtype"
	    "  AND p.pronargs OPERATOR(pg_catalog.=) 3"
	    "  AND p.proargtypes[0] OPERATOR(pg_catalog.=) 'pg_catalog.text'::pg_catalog.regtype"
	    "  AND p.proargtypes[1] OPERATOR(pg_catalog.=) 'pg_catalog.jsonb'::pg_catalog.regtype"
	    "  AND p.proargtypes[2] OPERATOR(pg_catalog.=) 'pg_catalog.jsonb'::pg_catalog.regtype,"
	    " coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) p.proowner), "
	    "false),"
	    " p.pronamespace OPERATOR(pg_catalog.=) 'counter_internal'::pg_catalog.regnamespace"
	    "  OR pg_catalog.has_function_privilege($2, p.oid, 'EXECUTE'),"
	    " p.oid::pg_catalog.regprocedure::pg_catalog.text"
	    " FROM counter_internal.job_kinds k"
	    " LEFT JOIN pg_catalog.pg_proc p"
	    "  ON p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(k.procedure::pg_catalog.text)"
	    " WHERE k.kind OPERATOR(pg_catalog.=) $1",
	    2, types, values, nullptr, true, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "counter_ext: reading the kinds of periodic work failed: %s", SPI_result_code_string(rc));
	owner_leave(s);
	if (SPI_processed == 0)
		return k;
	k.known = true;
	HeapTuple row = SPI_tuptable->vals[0];
	TupleDesc desc = SPI_tuptable->tupdesc;
	bool isnull;
	Datum is_step = SPI_getbinval(row, desc, 2, &isnull);
	if (isnull || !DatumGetBool(is_step))
		return k; // a procedure: the job runner's to CALL
	char *name = SPI_getvalue(row, desc, 5);
	if (!DatumGetBool(SPI_getbinval(row, desc, 3, &isnull)))
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
		                errmsg("the step function %s of kind \"%s\" is not owned by a superuser", name, kind)));
	if (!DatumGetBool(SPI_getbinval(row, desc, 4, &isnull)))
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
		                errmsg("permission denied for function %s, the step function of kind \"%s\"", name, kind)));
	k.step = DatumGetObjectId(SPI_getbinval(row, desc, 1, &isnull));
	return k;
}

ce::spine::Outcome ce::spine::run(Oid step, Oid caller, Datum target, bool target_null, Datum args, bool commits,
                                  MemoryContext keep) {
	Loop *l = pg_guard([=] { return loop_begin(step, target, target_null, args, keep); });
	CallerScope scope(caller);
	Datum state = pg_guard([l] { return call_step(l, 0, true); });
	TimestampTz longest = 0;
	while (!pg_guard([state] { return finished(state); })) {
		pg_guard([l, state, commits] {
			progress(state);
			if (commits)
				commit(l);
		});
		// A step that would likely not end before the deadline is not
		// started (twice the longest so far must fit): the run ends as
		// partial instead of being cancelled, and the next run goes on from
		// there. (In the caller's transaction a statement asked for the whole
		// work: a timeout cancels it, as it would cancel any statement.)
		TimestampTz now = GetCurrentTimestamp();
		TimestampTz at = commits ? pg_guard([] { return deadline(); }) : 0;
		if (at != 0 && now + 2 * longest >= at) {
			state = pg_guard([l, state] { return call_step(l, with(l, state, "{\"stop\": \"timeout\"}"), false); });
			break;
		}
		state = commits ? guarded_step(l, state) : pg_guard([l, state] { return call_step(l, state, false); });
		longest = Max(longest, GetCurrentTimestamp() - now);
	}
	Outcome out{state, true, 0};
	pg_guard([l, &out, commits] {
		out.rows_null = !field_int8(out.state, "rows", &out.rows);
		if (commits)
			commit(l);
		raise_if_asked(out.state);
	});
	return out;
}

// CALL counter.run_steps(kind, target, args, INOUT result): the periodic work
// of kind on target, to its end, one transaction per step (where the caller
// may commit; else SPI_commit refuses with 2D000, as COMMIT did).
CE_FUNCTION(counter_run_steps) {
	if (PG_ARGISNULL(0) || PG_ARGISNULL(2))
		throw ce::Error("22004", "kind and args of counter.run_steps must not be NULL");
	bool nonatomic = fcinfo->context != nullptr && IsA(fcinfo->context, CallContext) &&
	                 !castNode(CallContext, fcinfo->context)->atomic;
	MemoryContext entry = CurrentMemoryContext;
	MemoryContext keep =
	    ce::pg_guard([entry] { return AllocSetContextCreate(entry, "counter_ext run_steps", ALLOCSET_DEFAULT_SIZES); });
	Oid caller = ce::pg_guard([] { return ce::entry_caller(); });
	char *kind = ce::pg_guard([fcinfo] { return text_to_cstring(PG_GETARG_TEXT_PP(0)); });
	ce::spine::Kind k = ce::pg_guard([nonatomic, kind, caller] {
		if (SPI_connect_ext(nonatomic ? SPI_OPT_NONATOMIC : 0) != SPI_OK_CONNECT)
			elog(ERROR, "counter_ext: SPI_connect failed");
		return ce::spine::resolve(kind, caller);
	});
	if (!OidIsValid(k.step))
		throw ce::Error("22023", std::string("counter_ext has no periodic work of kind \"") + kind + "\"");
	ce::spine::Outcome out =
	    ce::spine::run(k.step, caller, PG_GETARG_DATUM(1), PG_ARGISNULL(1), PG_GETARG_DATUM(2), true, keep);
	return ce::pg_guard([fcinfo, entry, &out] {
		SPI_finish();
		return ce::one_column_result(fcinfo, entry, out.state, false);
	});
}

// counter_internal.run_steps_here(kind, target, args) -> jsonb: the same
// loop in the caller's transaction, without commits (the functions that
// refresh or maintain inside a transaction: counter.rollup_recompute); the
// last state. For the role the entry point around it acts for.
CE_FUNCTION(counter_run_steps_here) {
	if (PG_ARGISNULL(0) || PG_ARGISNULL(2))
		throw ce::Error("22004", "kind and args must not be NULL");
	MemoryContext entry = CurrentMemoryContext;
	Oid caller = ce::pg_guard([] { return ce::entry_caller(); });
	char *kind = ce::pg_guard([fcinfo] { return text_to_cstring(PG_GETARG_TEXT_PP(0)); });
	ce::spine::Kind k = ce::pg_guard([kind, caller] {
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "counter_ext: SPI_connect failed");
		ce::spine::Kind found = ce::spine::resolve(kind, caller);
		SPI_finish();
		return found;
	});
	if (!OidIsValid(k.step))
		throw ce::Error("22023", std::string("counter_ext has no periodic work of kind \"") + kind + "\"");
	ce::spine::Outcome out =
	    ce::spine::run(k.step, caller, PG_GETARG_DATUM(1), PG_ARGISNULL(1), PG_GETARG_DATUM(2), false, entry);
	PG_RETURN_DATUM(out.state);
}
