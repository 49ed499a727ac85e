// Citus (doc/citus.md): create_distributed_table and create_reference_table
// are functions, not DDL, so no event trigger sees them. On the table itself
// Citus makes its TRUNCATE trigger (the function citus_truncate_trigger)
// through CreateTrigger, just after it records the table in
// pg_dist_partition, and CreateTrigger calls the object access hook: there
// counter_ext asks counter_internal.citus_distribution_check(table), which
// refuses a table whose counter_ext configuration does not work on Citus;
// the error rolls the whole call back.
#include "counter_ext/wall.hpp"
#include "counter_ext/citus.hpp"

#include <unordered_map>

extern "C" {
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "parser/parse_func.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
}

namespace {

object_access_hook_type prev_object_access_hook = nullptr;

// The table of trigger trigoid when it is Citus's TRUNCATE trigger (just
// made, so read with SnapshotSelf); InvalidOid otherwise. Owns nothing C++.
Oid citus_truncate_trigger_table(Oid trigoid) {
	Oid table = InvalidOid;
	Oid function = InvalidOid;
	Relation rel = table_open(TriggerRelationId, AccessShareLock);
	ScanKeyData key;
	ScanKeyInit(&key, Anum_pg_trigger_oid, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(trigoid));
	SysScanDesc scan = systable_beginscan(rel, TriggerOidIndexId, true, SnapshotSelf, 1, &key);
	HeapTuple tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple)) {
		auto *trig = reinterpret_cast<Form_pg_trigger>(GETSTRUCT(tuple));
		table = trig->tgrelid;
		function = trig->tgfoid;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	if (!OidIsValid(function) || get_func_namespace(function) != PG_CATALOG_NAMESPACE)
		return InvalidOid;
	char *name = get_func_name(function);
	return name != nullptr && strcmp(name, "citus_truncate_trigger") == 0 ? table : InvalidOid;
}

// Owns nothing C++: an ERROR of the check passes through as through C code.
void object_access(ObjectAccessType access, Oid class_id, Oid object_id, int sub_id, void *arg) {
	if (prev_object_access_hook != nullptr)
		prev_object_access_hook(access, class_id, object_id, sub_id, arg);
	if (access != OAT_POST_CREATE || class_id != TriggerRelationId || !IsTransactionState())
		return;
	Oid table = citus_truncate_trigger_table(object_id);
	if (!OidIsValid(table))
		return;
	Oid argtypes[1] = {REGCLASSOID};
	List *name = list_make2(makeString(pstrdup("counter_internal")), makeString(pstrdup("citus_distribution_check")));
	Oid check = LookupFuncName(name, 1, argtypes, true);
	if (OidIsValid(check)) // counter_ext (1.6 or later) is in this database
		OidFunctionCall1(check, ObjectIdGetDatum(table));
}

} // namespace

ce::citus::Place ce::citus::colocated_shards(Relation rel, const char *const *tables, int n, char **out) {
	if (SPI_execute("SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL", true, 1) !=
	        SPI_OK_SELECT ||
	    SPI_processed != 1)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading the Citus metadata failed")));
	bool isnull;
	if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
		return Place::no_citus;
	Oid types[3] = {OIDOID, TEXTOID, INT8OID};
	Datum args[3] = {ObjectIdGetDatum(RelationGetRelid(rel)), (Datum)0, Int64GetDatum(0)};
	if (SPI_execute_with_args("SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition p"
	                          " WHERE p.logicalrelid OPERATOR(pg_catalog.=) $1::pg_catalog.regclass)",
	                          1, types, args, nullptr, true, 1) != SPI_OK_SELECT ||
	    SPI_processed != 1)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading the Citus metadata failed")));
	if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
		return Place::shell;
	// a shard is named <table>_<shard id> (Citus's shard_name)
	const char *name = RelationGetRelationName(rel);
	const char *us = strrchr(name, '_');
	int64 shardid = 0;
	if (us != nullptr && us[1] != '\0' && strspn(us + 1, "0123456789") == strlen(us + 1) && strlen(us + 1) < 19)
		shardid = strtoll(us + 1, nullptr, 10);
	args[2] = Int64GetDatum(shardid);
	for (int i = 0; i < n; i++) {
		args[1] = CStringGetTextDatum(tables[i]);
		int rc = SPI_execute_with_args(
		    "SELECT pg_catalog.shard_name(pd.logicalrelid, d.shardid, false)"
		    " FROM pg_catalog.pg_dist_shard s"
		    " JOIN pg_catalog.pg_dist_partition ps ON ps.logicalrelid OPERATOR(pg_catalog.=) s.logicalrelid"
		    " JOIN pg_catalog.pg_dist_partition pd ON pd.logicalrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($2)"
		    "  AND pd.colocationid OPERATOR(pg_catalog.=) ps.colocationid"
		    " JOIN pg_catalog.pg_dist_shard d ON d.logicalrelid OPERATOR(pg_catalog.=) pd.logicalrelid"
		    "  AND d.shardminvalue OPERATOR(pg_catalog.=) s.shardminvalue"
		    " WHERE s.shardid OPERATOR(pg_catalog.=) $3 AND ps.partmethod OPERATOR(pg_catalog.=) 'h'"
		    "  AND pg_catalog.to_regclass(pg_catalog.shard_name(s.logicalrelid, s.shardid, false))"
		    "      OPERATOR(pg_catalog.=) $1::pg_catalog.regclass"
		    "  AND pg_catalog.to_regclass(pg_catalog.shard_name(pd.logicalrelid, d.shardid, false)) IS NOT NULL",
		    3, types, args, nullptr, true, 2);
		if (rc != SPI_OK_SELECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading the Citus metadata failed")));
		if (SPI_processed != 1)
			return Place::missing;
		out[i] = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	}
	return Place::shard;
}

namespace {

std::unordered_map<Oid, ce::citus::ShardTrigger> *shard_triggers = nullptr;
constexpr size_t shard_trigger_limit = 1024; // shard triggers a backend keeps plans for

void shard_trigger_invalidate(Datum, Oid relid) {
	if (shard_triggers == nullptr)
		return;
	for (auto &entry : *shard_triggers)
		if (relid == InvalidOid || entry.second.relid == relid)
			entry.second.valid = false;
}

// Owns nothing C++.
void shard_trigger_release(ce::citus::ShardTrigger *t) {
	if (t->context != nullptr) {
		for (SPIPlanPtr plan : t->plans)
			if (plan != nullptr)
				SPI_freeplan(plan);
		MemoryContextDelete(t->context);
	}
	memset(t, 0, sizeof(*t));
}

} // namespace

ce::citus::ShardTrigger *ce::citus::shard_trigger(Oid tgoid, Relation rel) {
	if (shard_triggers == nullptr) {
		shard_triggers = new std::unordered_map<Oid, ShardTrigger>();
		ce::pg_guard([] { CacheRegisterRelcacheCallback(shard_trigger_invalidate, (Datum)0); });
	}
	if (shard_triggers->size() >= shard_trigger_limit && shard_triggers->find(tgoid) == shard_triggers->end()) {
		for (auto &entry : *shard_triggers)
			ce::pg_guard([&entry] { shard_trigger_release(&entry.second); });
		shard_triggers->clear();
	}
	ShardTrigger *t = &(*shard_triggers)[tgoid]; // a new entry is zeroed
	if (t->valid && t->relid != RelationGetRelid(rel))
		t->valid = false;
	return t;
}

ce::citus::Place ce::citus::shard_trigger_fill(ShardTrigger *t, Relation rel, const char *const *tables, int n) {
	shard_trigger_release(t);
	t->context = AllocSetContextCreate(CacheMemoryContext, "counter_ext shard trigger", ALLOCSET_SMALL_SIZES);
	t->relid = RelationGetRelid(rel);
	t->owner = rel->rd_rel->relowner;
	char *shards[3] = {nullptr, nullptr, nullptr};
	if (n > 3)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("a shard trigger finds at most 3 colocated shards")));
	Place place = colocated_shards(rel, tables, n, shards);
	t->shell = place == Place::shell;
	if (place == Place::shard)
		for (int i = 0; i < n; i++)
			t->state[i] = MemoryContextStrdup(t->context, shards[i]);
	t->valid = place == Place::shard || place == Place::shell;
	return place;
}

Oid ce::citus::relation_named(const char *name) {
	LOCAL_FCINFO(fc, 1);
	InitFunctionCallInfoData(*fc, nullptr, 1, InvalidOid, nullptr, nullptr);
	fc->args[0].value = CStringGetTextDatum(name);
	fc->args[0].isnull = false;
	Datum result = to_regclass(fc);
	return fc->isnull ? InvalidOid : DatumGetObjectId(result);
}

Oid ce::citus::relation_owner(Oid rel) {
	HeapTuple tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(rel));
	if (!HeapTupleIsValid(tuple))
		return InvalidOid;
	Oid owner = reinterpret_cast<Form_pg_class>(GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	return owner;
}

bool ce::citus::caller_has_owner_rights(Oid rel) {
	return ce::pg_guard([rel] {
		Oid owner = relation_owner(rel);
		return OidIsValid(owner) && has_privs_of_role(GetUserId(), owner);
	});
}

void ce::install_citus_hook() {
	prev_object_access_hook = object_access_hook;
	object_access_hook = ce::entry<object_access>;
}
