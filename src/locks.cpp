// counter_internal.lock_class(name) and counter_internal.lock_classes(): the
// advisory-lock registry of counter_ext/locks.hpp, for SQL.
#include "counter_ext/wall.hpp"
#include "counter_ext/locks.hpp"

extern "C" {
#include "funcapi.h"
#include "utils/builtins.h"
}

// counter_internal.lock_class(class text) -> integer
CE_FUNCTION(counter_lock_class) {
	const char *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	const ce::locks::LockClass *c = ce::locks::find(name);
	if (c == nullptr)
		throw ce::Error(ce::sqlstate::invalid_parameter_value, ce::format("unknown advisory-lock class \"%s\"", name),
		                "", "The classes are listed by counter_internal.lock_classes().");
	return Int32GetDatum(c->key);
}

// counter_internal.lock_classes() -> setof (class, key, second_key)
CE_FUNCTION(counter_lock_classes) {
	ReturnSetInfo *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
	ce::pg_guard([fcinfo] { InitMaterializedSRF(fcinfo, 0); });
	for (const ce::locks::LockClass &c : ce::locks::classes) {
		Datum values[3] = {CStringGetTextDatum(c.name), Int32GetDatum(c.key), CStringGetTextDatum(c.second_key)};
		bool nulls[3] = {false, false, false};
		ce::pg_guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls); });
	}
	return static_cast<Datum>(0);
}
