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

extern "C" {
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_trigger.h"
#include "parser/parse_func.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
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

void ce::install_citus_hook() {
	prev_object_access_hook = object_access_hook;
	object_access_hook = ce::entry<object_access>;
}
