// Keys (keys.hpp), and counter_internal.key_operators(regtype).
#include "counter_ext/keys.hpp"
#include "counter_ext/wall.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/transam.h"
#include "catalog/pg_cast.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "parser/parse_coerce.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/typcache.h"
}

Datum ce::keys::convert(Oid given, Datum value, Oid key_type, const char *object_name) {
	if (given == key_type)
		return value;
	Oid base = getBaseType(key_type);
	Datum converted;
	if (given == TEXTOID || given == UNKNOWNOID) {
		char *image = given == TEXTOID ? TextDatumGetCString(value) : DatumGetCString(value);
		Oid input;
		Oid ioparam;
		getTypeInputInfo(key_type, &input, &ioparam);
		return OidInputFunctionCall(input, image, ioparam, -1); // domain_in checks a domain's constraints
	}
	Oid cast = InvalidOid;
	CoercionPathType path = find_coercion_pathway(base, given, COERCION_IMPLICIT, &cast);
	if (path == COERCION_PATH_RELABELTYPE) {
		converted = value;
	} else if (path == COERCION_PATH_FUNC && OidIsValid(cast) && cast < FirstNormalObjectId) {
		converted = OidFunctionCall1(cast, value);
	} else {
		ereport(
		    ERROR,
		    (errcode(ERRCODE_DATATYPE_MISMATCH),
		     errmsg("\"%s\" has keys of type %s, not %s", object_name, format_type_be(key_type), format_type_be(given)),
		     errhint("Give the key as %s%s.", format_type_be(key_type), key_type == TEXTOID ? "" : ", or as text")));
	}
	if (base != key_type)
		domain_check(converted, false, key_type, nullptr, nullptr);
	return converted;
}

char *ce::keys::qualified_operator(Oid type, int strategy) {
	int flag = strategy == BTEqualStrategyNumber     ? TYPECACHE_EQ_OPR
	           : strategy == BTLessStrategyNumber    ? TYPECACHE_LT_OPR
	           : strategy == BTGreaterStrategyNumber ? TYPECACHE_GT_OPR
	                                                 : TYPECACHE_BTREE_OPFAMILY; // <= and >=: the family's
	TypeCacheEntry *entry = lookup_type_cache(type, flag);
	Oid opr = strategy == BTEqualStrategyNumber     ? entry->eq_opr
	          : strategy == BTLessStrategyNumber    ? entry->lt_opr
	          : strategy == BTGreaterStrategyNumber ? entry->gt_opr
	          : OidIsValid(entry->btree_opf)        ? get_opfamily_member(entry->btree_opf, type, type, strategy)
	                                                : InvalidOid;
	if (!OidIsValid(opr))
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_FUNCTION),
		                errmsg("type %s has no default btree operator class", format_type_be(type)),
		                errhint("Keys are compared and sorted with the type's default btree operator class.")));
	HeapTuple tuple = SearchSysCache1(OPEROID, ObjectIdGetDatum(opr));
	if (!HeapTupleIsValid(tuple))
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_FUNCTION), errmsg("cache lookup failed for operator %u", opr)));
	auto *form = reinterpret_cast<Form_pg_operator>(GETSTRUCT(tuple));
	char *result =
	    psprintf("OPERATOR(%s.%s)", quote_identifier(get_namespace_name(form->oprnamespace)), NameStr(form->oprname));
	ReleaseSysCache(tuple);
	return result;
}

// counter_internal.key_operators(regtype): {=, <, >}.
CE_FUNCTION(counter_key_operators) {
	Oid type = PG_GETARG_OID(0);
	Datum result = ce::pg_guard([type] {
		Datum ops[3] = {CStringGetTextDatum(ce::keys::qualified_operator(type, BTEqualStrategyNumber)),
		                CStringGetTextDatum(ce::keys::qualified_operator(type, BTLessStrategyNumber)),
		                CStringGetTextDatum(ce::keys::qualified_operator(type, BTGreaterStrategyNumber))};
		return PointerGetDatum(construct_array(ops, 3, TEXTOID, -1, false, TYPALIGN_INT));
	});
	PG_RETURN_DATUM(result);
}
