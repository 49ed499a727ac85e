// The rollup trigger of 1.1 (counter.rollup_trigger, C symbol
// counter_rollup_trigger), kept only so that an installation whose SQL is
// still 1.1 keeps counting after the library was replaced by a newer one,
// until ALTER EXTENSION counter_ext UPDATE replaces its triggers with
// counter_internal.rollup_trigger (src/rollup.cpp). It is 1.1's code as it
// was, privileges included (doc/security.md: update to get 1.2's); 1.2's SQL
// never calls it.
#include "counter_ext/rollup_pending.hpp"
#include "counter_ext/spi.hpp"
#include "counter_ext/wall.hpp"

extern "C" {
#include "commands/trigger.h"
#include "utils/builtins.h"
}

#include <string>
#include <unordered_map>

namespace {
namespace legacy {

// The statements of a rollup, in the order of the catalog's columns.
enum Kind { add_rows = 0, mark_new = 1, mark_old = 2, kinds = 3 };

using Kept = ce::rollup::KeptStatement;

// Per backend: one kept plan per (rollup id, kind).
std::unordered_map<int64, Kept> *kept = nullptr;
SPIPlanPtr lookup_plan = nullptr;
SPIPlanPtr regenerate_plan = nullptr;

// A rollup's catalog row; the texts are palloc'd in SPI's context and live
// until SPI_finish.
struct Rollup {
	bool found;
	bool trigger_mode;
	char *sql[kinds];
};

// Owns nothing C++: inside pg_guard, between SPI_connect and SPI_finish.
Rollup read_rollup(int32 rid) {
	Oid types[1] = {INT4OID};
	if (lookup_plan == nullptr)
		lookup_plan = ce::prepare_kept("SELECT c.mode OPERATOR(pg_catalog.=) 'trigger', c.add_sql, c.mark_new_sql,"
		                               " c.mark_old_sql, c.sql_for IS DISTINCT FROM"
		                               " pg_catalog.format('%s|%s', c.source, c.rollup_table)"
		                               " FROM counter.rollups c WHERE c.rollup_id OPERATOR(pg_catalog.=) $1",
		                               1, types);
	Datum args[1] = {Int32GetDatum(rid)};
	if (SPI_execute_plan(lookup_plan, args, nullptr, true, 1) != SPI_OK_SELECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading counter.rollups failed")));
	Rollup r{};
	if (SPI_processed == 0)
		return r;
	r.found = true;
	HeapTuple tuple = SPI_tuptable->vals[0];
	TupleDesc desc = SPI_tuptable->tupdesc;
	bool isnull;
	r.trigger_mode = DatumGetBool(SPI_getbinval(tuple, desc, 1, &isnull));
	bool stale = DatumGetBool(SPI_getbinval(tuple, desc, 5, &isnull));
	int first = 2;
	if (stale) {
		// A table was renamed since the SQL was stored: generate it again.
		if (regenerate_plan == nullptr)
			regenerate_plan = ce::prepare_kept(
			    "SELECT c.add_sql, c.mark_new_sql, c.mark_old_sql FROM counter.rollup_sql($1) c", 1, types);
		if (SPI_execute_plan(regenerate_plan, args, nullptr, true, 1) != SPI_OK_SELECT || SPI_processed != 1)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("counter.rollup_sql(%d) failed", rid)));
		tuple = SPI_tuptable->vals[0];
		desc = SPI_tuptable->tupdesc;
		first = 1;
	}
	for (int k = 0; k < kinds; k++) {
		r.sql[k] = SPI_getvalue(tuple, desc, first + k);
		if (r.sql[k] == nullptr)
			ereport(ERROR,
			        (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE), errmsg("rollup %d has no stored SQL", rid),
			         errhint("counter.rollup_build_sql(%d) stores it.", rid)));
	}
	return r;
}

// Runs one statement of a rollup with its kept plan, made again when the
// stored text changed.
void run(int32 rid, Kind kind, const char *sql) {
	ce::rollup::run_statement(rid, (*kept)[static_cast<int64>(rid) * kinds + kind], sql);
}

} // namespace legacy
} // namespace

using namespace legacy;

// counter.rollup_trigger() of 1.1.
CE_FUNCTION(counter_rollup_trigger) {
	if (!CALLED_AS_TRIGGER(fcinfo))
		throw ce::Error("39P01", "counter.rollup_trigger must be called as a trigger");
	auto *td = reinterpret_cast<TriggerData *>(fcinfo->context);
	if (!TRIGGER_FIRED_AFTER(td->tg_event) || !TRIGGER_FIRED_FOR_STATEMENT(td->tg_event) ||
	    TRIGGER_FIRED_BY_TRUNCATE(td->tg_event) || td->tg_trigger->tgnargs < 1)
		throw ce::Error("39P01", "counter.rollup_trigger must be an AFTER INSERT, UPDATE or DELETE statement "
		                         "trigger with the rollup id as its argument");
	const char *arg = td->tg_trigger->tgargs[0];
	int32 rid = ce::pg_guard([arg] { return pg_strtoint32(arg); });
	if (kept == nullptr)
		kept = new std::unordered_map<int64, Kept>();

	Rollup r = ce::pg_guard([td, rid] {
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		if (SPI_register_trigger_data(td) != SPI_OK_TD_REGISTER)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_register_trigger_data failed")));
		return read_rollup(rid);
	});
	if (r.found) {
		if (TRIGGER_FIRED_BY_INSERT(td->tg_event)) {
			if (r.trigger_mode)
				run(rid, add_rows, r.sql[add_rows]);
			else
				run(rid, mark_new, r.sql[mark_new]);
		} else {
			// DELETE, UPDATE: the hours of the old rows (and of the new ones)
			// are recomputed from the events.
			run(rid, mark_old, r.sql[mark_old]);
			if (TRIGGER_FIRED_BY_UPDATE(td->tg_event))
				run(rid, mark_new, r.sql[mark_new]);
		}
	}
	ce::pg_guard([] { SPI_finish(); });
	return PointerGetDatum(nullptr);
}
