// Partition maintenance: the bounds of a range-partitioned table's partitions,
// read from the partition descriptor PostgreSQL keeps in its relcache. The
// SQL side of the feature is src/sql/40_partition.sql.
//
// The descriptor holds the bounds already parsed and sorted, so listing 2,000
// partitions costs a walk over an array instead of deparsing 2,000 catalog
// expressions (pg_get_expr) and parsing their text back into timestamps.
#include "counter_ext/wall.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/relation.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "partitioning/partbounds.h"
#include "partitioning/partdesc.h"
#include "utils/datetime.h"
#include "utils/acl.h"
#include "utils/partcache.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
}

namespace {

Datum bound_datum(PartitionBoundInfo bi, int i) {
	switch (bi->kind[i][0]) {
		case PARTITION_RANGE_DATUM_MINVALUE:
			return TimestampTzGetDatum(DT_NOBEGIN);
		case PARTITION_RANGE_DATUM_MAXVALUE:
			return TimestampTzGetDatum(DT_NOEND);
		default:
			return bi->datums[i][0];
	}
}

} // namespace

// counter.partition_bounds(parent regclass) RETURNS TABLE (partition regclass,
// lo timestamptz, hi timestamptz, is_default boolean): every partition of a
// table partitioned by range over one timestamptz column, ordered by lower
// bound, then the default partition (NULL bounds). No rows for a table that
// is not partitioned or no longer exists; an error for another partitioning.
// The caller must be a member of the table's owner or have SELECT on it,
// checked before the table is locked (42501). Owns no C++ objects, so it
// calls PostgreSQL directly.
CE_FUNCTION(counter_partition_bounds) {
	Oid parent = PG_GETARG_OID(0);
	InitMaterializedSRF(fcinfo, 0);
	ReturnSetInfo *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);

	HeapTuple tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(parent));
	if (!HeapTupleIsValid(tuple))
		return (Datum)0;
	Oid owner = reinterpret_cast<Form_pg_class>(GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	bool missing = false;
	if (!has_privs_of_role(GetUserId(), owner) &&
	    pg_class_aclcheck_ext(parent, GetUserId(), ACL_SELECT, &missing) != ACLCHECK_OK) {
		if (missing)
			return (Datum)0;
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
		                errmsg("permission denied for table %s", get_rel_name(parent)),
		                errdetail("counter.partition_bounds lists the partitions of tables the caller owns or may "
		                          "read.")));
	}

	Relation rel = try_relation_open(parent, AccessShareLock);
	if (rel == nullptr)
		return (Datum)0;
	if (rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE) {
		relation_close(rel, AccessShareLock);
		return (Datum)0;
	}
	PartitionKey key = RelationGetPartitionKey(rel);
	if (key->strategy != PARTITION_STRATEGY_RANGE || key->partnatts != 1 || key->parttypid[0] != TIMESTAMPTZOID) {
		ereport(ERROR, (errcode(ERRCODE_WRONG_OBJECT_TYPE),
		                errmsg("table \"%s\" is not partitioned by range over one timestamptz column",
		                       RelationGetRelationName(rel))));
	}
	PartitionDesc pd = RelationGetPartitionDesc(rel, true);
	PartitionBoundInfo bi = pd->boundinfo;
	if (bi != nullptr) {
		// Range bounds: datums[i] .. datums[i + 1] belongs to partition
		// indexes[i + 1] (-1 where no partition covers it).
		for (int i = 0; i + 1 < bi->ndatums; i++) {
			int p = bi->indexes[i + 1];
			if (p < 0)
				continue;
			Datum values[4] = {ObjectIdGetDatum(pd->oids[p]), bound_datum(bi, i), bound_datum(bi, i + 1),
			                   BoolGetDatum(false)};
			bool nulls[4] = {false, false, false, false};
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
		if (bi->default_index >= 0) {
			Datum values[4] = {ObjectIdGetDatum(pd->oids[bi->default_index]), (Datum)0, (Datum)0, BoolGetDatum(true)};
			bool nulls[4] = {false, true, true, false};
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	// The lock stays until the end of the transaction, as for any table read.
	relation_close(rel, NoLock);
	return (Datum)0;
}
