// The locks of counter_ext/locks.hpp: ce::locks::take for C++, and for SQL
// counter_internal.lock_take(class, id, at, wait) and
// counter_internal.lock_classes(); counter_internal.lock_class(name) only
// for 1.4's SQL until the update.
#include "counter_ext/wall.hpp"
#include "counter_ext/locks.hpp"
#include "counter_ext/rollup_pending.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
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
