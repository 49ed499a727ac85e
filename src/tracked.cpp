// Tracked counters (src/sql/30_tracked.sql): the hot paths, in C++.
//
//   counter_internal.tracked_fold()   trigger mode: the statement trigger
//   counter.add / value / values_of   application mode and reads
//
// Privileges (doc/security.md): these run as the caller. They read the
// counter's catalog row as the catalog's owner (ce::catalog_owner), check
// the caller's privilege on the source table (INSERT to add, SELECT to
// read), and do everything else (the key's conversion, the state tables) as
// the source table's owner, through ce::as_owner / ce::owner_enter: a
// security-restricted operation with search_path pg_catalog, pg_temp. Keys
// are converted by ce::keys::convert (no user-defined cast ever runs), keys
// are compared with the operators of the key type's default btree class.
#include "counter_ext/buffer.hpp"
#include "counter_ext/citus.hpp"
#include "counter_ext/compat.hpp"
#include "counter_ext/filter.hpp"
#include "counter_ext/keys.hpp"
#include "counter_ext/locks.hpp"
#include "counter_ext/owner.hpp"
#include "counter_ext/read_cache.hpp"
#include "counter_ext/source.hpp"
#include "counter_ext/spi.hpp"
#include "counter_ext/tracked_fold.hpp"
#include "counter_ext/wall.hpp"

extern "C" {
#include "access/genam.h"
#include "access/stratnum.h"
#include "access/tableam.h"
#include "access/transam.h"
#include "catalog/pg_am.h"
#include "catalog/pg_type.h"
#include "access/xact.h"
#include "common/int.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "parser/parse_coerce.h"
#include "parser/parse_func.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "nodes/makefuncs.h"
#include "nodes/parsenodes.h"
#include "optimizer/optimizer.h"
#include "parser/parse_coerce.h"
#include "parser/parse_collate.h"
#include "parser/parse_expr.h"
#include "parser/parse_node.h"
#include "parser/parse_relation.h"
#include "parser/parser.h"
#include "rewrite/rewriteManip.h"
#include "utils/datum.h"
#include "utils/fmgrprotos.h"
#include "utils/array.h"
#include "utils/inval.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
#include "utils/typcache.h"
}

#include <algorithm>
#include <string>
#include <unordered_map>

namespace {
// The delta shard this session writes: its process slot modulo the shards, so
// that sessions spread evenly (with the pid, two sessions of a pool often share
// a shard while another stays idle, and on a hot key the one waits for the
// other's row lock across its commit).
int16 shard_of(int shards) {
	return static_cast<int16>(ce::compat::my_proc_number() % (shards < 1 ? 1 : shards));
}
} // namespace

// A plan kept for the life of the backend (SPI_keepplan).
SPIPlanPtr ce::prepare_kept(const char *sql, int nargs, Oid *types, int cursor_options) {
	SPIPlanPtr plan = SPI_prepare_cursor(sql, nargs, types, cursor_options);
	if (plan == nullptr)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
		                errmsg("SPI_prepare failed: %s", SPI_result_code_string(SPI_result))));
	SPI_keepplan(plan);
	return plan;
}

// counter_internal.caller(): the role the entry point being run acts for
// (ce::effective_caller, owner.hpp): the role that called it, noted by
// counter_entry. Inside a security-restricted operation (code counter_ext
// runs for an object's owner: a filter, a trigger on the owner's table, a
// CHECK constraint), and outside an entry point, it refuses.
CE_FUNCTION(counter_tracked_caller) {
	(void)fcinfo;
	return ObjectIdGetDatum(ce::pg_guard([] { return ce::effective_caller(); }));
}

// ---------------------------------------------------------------------------
// A counter's catalog row, read as the catalog's owner with kept plans.

namespace {

struct Counter {
	int32 id;
	Oid key_type;
	bool application;
	int32 shards;
	Interval width;
	Oid source;
	Oid owner;
	char *name;
	char *key_column;
	char *time_column;
	char *filter; // canonical text, or nullptr
	char *filter_tree;
	Oid filter_relid;
	bool buffered;
	int16 key_len; // of key_type (a type's length and passing never change)
	bool key_byval;
	int64 max_future;    // microseconds: counter.add refuses event times later than now + this
	bool distributed;    // on Citus: the state tables are distributed, colocated with the source
	char *state_schema;  // on Citus since 1.8: the state tables' schema (the source's), or nullptr: counter_internal
	char *anchor_column; // on Citus since 1.8: the distribution column its state is anchored by (keyed by another)
	Oid described_by;    // on a Citus worker node: the table whose trigger described the counter (worker_counters)
};

SPIPlanPtr lookup_plans[2] = {nullptr, nullptr}; // by name, by id

char *copy_value(HeapTuple tuple, TupleDesc desc, int col, MemoryContext keep) {
	char *v = SPI_getvalue(tuple, desc, col);
	return v == nullptr ? nullptr : MemoryContextStrdup(keep, v);
}

// True on a Citus node that is not the coordinator (its group in
// pg_dist_local_group is not 0): where Citus runs a query it sent, and where
// no counter is. Inside SPI; only on the path of a counter not found.
bool citus_worker_node() {
	if (SPI_execute("SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_local_group') IS NOT NULL", true, 1) !=
	        SPI_OK_SELECT ||
	    SPI_processed != 1)
		return false;
	bool isnull;
	if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
		return false;
	if (SPI_execute("SELECT g.groupid OPERATOR(pg_catalog.<>) 0 FROM pg_catalog.pg_dist_local_group g", true, 1) !=
	        SPI_OK_SELECT ||
	    SPI_processed != 1)
		return false;
	Datum worker = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return !isnull && DatumGetBool(worker);
}

// A counter read, or added to, on a Citus worker node where it cannot be
// (0A000).
void not_on_worker(const char *name) {
	ereport(
	    ERROR,
	    (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
	     errmsg("tracked counter \"%s\" is not on this Citus worker node", name),
	     errdetail(
	         "Counters are kept on the coordinator; on a worker node counter.value and values_of reach only a "
	         "counter whose state is beside its rows (keyed by the distribution column, made by 1.8), and counter.add "
	         "only such a counter in application mode. Or Citus sent a whole query that "
	         "calls counter.value, values_of or add to a worker (a query over a distributed table that "
	         "Citus routes to one shard, or pushes down)."),
	     errhint("Read the counter in a statement of its own (or into a temporary table first), not in the same "
	             "query as a distributed table; see doc/citus.md.")));
}

// The shape of a trigger-mode counter's trigger on a distributed table
// (tracked_build: 10 arguments; buffered, 1.8, an 11th 'buffered'; keyed by
// another column than the distribution column, the column its state is
// anchored by and its anchors, 12; both, a 13th 'buffered').
bool fold_anchored(const Trigger *g) {
	return g->tgnargs == 12 || (g->tgnargs == 13 && strcmp(g->tgargs[12], "buffered") == 0);
}
bool fold_buffered(const Trigger *g) {
	return (g->tgnargs == 11 && strcmp(g->tgargs[10], "buffered") == 0) ||
	       (g->tgnargs == 13 && strcmp(g->tgargs[12], "buffered") == 0);
}

// On a Citus worker node, where counter_ext's catalog is empty: the counters
// whose state is beside their rows (the only kind counter.add, value,
// values_of and tracked_values serve there: their state is in distributed
// tables the worker's queries reach), as the arguments of their triggers on
// a distributed table describe them: an application-mode counter's inbox
// trigger (counter_internal.tracked_make_inbox), a trigger-mode counter's
// INSERT trigger on its source (tracked_build; made before 1.8 gave it the
// counter's name: not found). On the coordinator counter_citus_triggers
// lets such a trigger only onto the table of the counter it names, on a
// worker node counter_citus_trigger_creator lets only counter.track make it
// on a table's metadata copy, and Citus copies it to every node's. 'each' is
// called with every such counter (name nullptr) or with the one named
// 'name'; only what those callers need is filled, and c.described_by says
// where it came from. Inside SPI.
template <typename Each>
void worker_counters(const char *name, MemoryContext keep, Each &&each) {
	if (SPI_execute("SELECT DISTINCT t.tgrelid FROM pg_catalog.pg_trigger t"
	                " JOIN pg_catalog.pg_dist_partition p ON p.logicalrelid OPERATOR(pg_catalog.=) t.tgrelid"
	                " WHERE (t.tgfoid OPERATOR(pg_catalog.=)"
	                "   'counter_internal.tracked_shard_add()'::pg_catalog.regprocedure"
	                "   AND t.tgnargs IN (8, 9))"
	                "  OR (t.tgfoid OPERATOR(pg_catalog.=)"
	                "   'counter_internal.tracked_shard_fold()'::pg_catalog.regprocedure"
	                "   AND t.tgnargs IN (10, 11, 12, 13))"
	                " ORDER BY t.tgrelid",
	                true, 0) != SPI_OK_SELECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading pg_trigger failed")));
	// the relations first: 'each' may run SPI
	uint64 n = SPI_processed;
	Oid *relids = static_cast<Oid *>(palloc(sizeof(Oid) * (n + 1)));
	for (uint64 i = 0; i < n; i++) {
		bool isnull;
		relids[i] = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
	}
	Oid internal = get_namespace_oid("counter_internal", false);
	for (uint64 i = 0; i < n; i++) {
		Relation rel = table_open(relids[i], AccessShareLock);
		TriggerDesc *trigs = rel->trigdesc;
		Oid schema = RelationGetNamespace(rel);
		for (int j = 0; trigs != nullptr && j < trigs->numtriggers; j++) {
			const Trigger *g = &trigs->triggers[j];
			if (get_func_namespace(g->tgfoid) != internal || g->tgnargs < 8 || strcmp(g->tgargs[1], "citus") != 0)
				continue;
			const char *fn = get_func_name(g->tgfoid);
			Counter w{};
			int32 id = pg_strtoint32(g->tgargs[0]);
			if (strcmp(fn, "tracked_shard_add") == 0 &&
			    (g->tgnargs == 8 || (g->tgnargs == 9 && strcmp(g->tgargs[8], "buffered") == 0))) {
				// the inbox its counter's track made: named after the
				// counter, beside the table, owned by the table's owner (no
				// role makes another's table, nor is a trigger it made on a
				// table of its own taken for another role's counter)
				Oid source = ce::citus::relation_named(g->tgargs[2]);
				if ((name != nullptr && strcmp(g->tgargs[4], name) != 0) ||
				    strcmp(RelationGetRelationName(rel), psprintf("counter_tracked_%d_inbox", id)) != 0 ||
				    RelationGetDescr(rel)->natts < 1 || !OidIsValid(source) || get_rel_namespace(source) != schema ||
				    ce::citus::relation_owner(source) != rel->rd_rel->relowner)
					continue;
				w.key_type = TupleDescAttr(RelationGetDescr(rel), 0)->atttypid;
				w.application = true;
				w.shards = pg_strtoint32(g->tgargs[6]);
				w.width.time = pg_strtoint64(g->tgargs[5]);
				w.source = source;
				w.name = MemoryContextStrdup(keep, g->tgargs[4]);
				w.max_future = pg_strtoint64(g->tgargs[7]);
				w.buffered = g->tgnargs == 9;
			} else if (strcmp(fn, "tracked_shard_fold") == 0 &&
			           (g->tgnargs == 10 || fold_anchored(g) || fold_buffered(g))) {
				// a trigger-mode counter's INSERT trigger on its source,
				// its state beside the source under the names track gives
				// it (id, 'citus', key column, time column, width, slots,
				// filter, delta, base, name; keyed by another column than
				// the distribution column, the column its state is
				// anchored by and its anchors)
				AttrNumber key = get_attnum(RelationGetRelid(rel), g->tgargs[2]);
				const char *nsp = get_namespace_name(schema);
				if ((name != nullptr && strcmp(g->tgargs[9], name) != 0) ||
				    strcmp(g->tgname, psprintf("counter_%d_ins", id)) != 0 || key == InvalidAttrNumber ||
				    strcmp(g->tgargs[7], quote_qualified_identifier(nsp, psprintf("counter_tracked_%d_delta", id))) !=
				        0 ||
				    strcmp(g->tgargs[8], quote_qualified_identifier(nsp, psprintf("counter_tracked_%d_base", id))) != 0)
					continue;
				if (fold_anchored(g)) {
					if (get_attnum(RelationGetRelid(rel), g->tgargs[10]) == InvalidAttrNumber ||
					    strcmp(g->tgargs[11],
					           quote_qualified_identifier(nsp, psprintf("counter_tracked_%d_anchor", id))) != 0)
						continue;
					w.anchor_column = MemoryContextStrdup(keep, g->tgargs[10]);
				}
				w.key_type = get_atttype(RelationGetRelid(rel), key);
				w.application = false;
				w.shards = pg_strtoint32(g->tgargs[5]);
				w.width.time = static_cast<int64>(strtod(g->tgargs[4], nullptr) * USECS_PER_SEC);
				w.source = RelationGetRelid(rel);
				w.name = MemoryContextStrdup(keep, g->tgargs[9]);
				w.max_future = 0;
				w.buffered = fold_buffered(g);
			} else
				continue;
			w.id = id;
			w.owner = rel->rd_rel->relowner;
			w.filter_relid = InvalidOid;
			w.distributed = true;
			w.state_schema = MemoryContextStrdup(keep, get_namespace_name(schema));
			w.described_by = relids[i];
			get_typlenbyval(w.key_type, &w.key_len, &w.key_byval);
			each(w);
		}
		table_close(rel, AccessShareLock);
	}
}

// The counter named 'name' on a Citus worker node (worker_counters); false
// when no trigger there names it, 42710 when two do (never a guess).
bool worker_counter(const char *name, MemoryContext keep, Counter *c) {
	int found = 0;
	worker_counters(name, keep, [&found, c](const Counter &w) {
		found++;
		*c = w;
	});
	if (found > 1)
		ereport(ERROR, (errcode(ERRCODE_DUPLICATE_OBJECT),
		                errmsg("tracked counter \"%s\" is named by %d triggers on this Citus worker node", name, found),
		                errhint("Read it on the coordinator.")));
	return found == 1 && OidIsValid(c->source) && c->shards >= 1;
}

// Strings are copied into 'keep'. Raises 42704 when there is no such counter
// (0A000 on a Citus worker node, unless a trigger describes it there:
// worker_counter).
Counter load_counter(Datum key, bool by_id, MemoryContext keep) {
	Oid catalog = ce::pg_guard([] { return ce::catalog_owner(); });
	return ce::as_owner(catalog, [key, by_id, keep] {
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		SPIPlanPtr &plan = lookup_plans[by_id ? 1 : 0];
		if (plan == nullptr) {
			Oid types[1] = {static_cast<Oid>(by_id ? INT4OID : TEXTOID)};
			plan = ce::prepare_kept(
			    by_id ? "SELECT t.counter_id, t.key_type::oid, t.mode OPERATOR(pg_catalog.=) 'application', t.shards,"
			            " t.bucket_width, t.source::oid, t.owner::oid, t.name, t.key_column, t.time_column, t.filter,"
			            " t.filter_tree, t.filter_relid, t.buffered,"
			            " (pg_catalog.date_part('epoch', t.max_future) OPERATOR(pg_catalog.*) 1000000)::bigint,"
			            // (1.7's column: read so that 1.6's catalog, before ALTER EXTENSION UPDATE, still serves)
			            " pg_catalog.to_jsonb(t) OPERATOR(pg_catalog.->>) 'distributed' IS NOT DISTINCT FROM 'true',"
			            " pg_catalog.to_jsonb(t) OPERATOR(pg_catalog.->>) 'state_schema'," // (1.8's, likewise)
			            " pg_catalog.to_jsonb(t) OPERATOR(pg_catalog.->>) 'anchor_column'"
			            " FROM counter.tracked t"
			            " WHERE t.counter_id OPERATOR(pg_catalog.=) $1"
			          : "SELECT t.counter_id, t.key_type::oid, t.mode OPERATOR(pg_catalog.=) 'application', t.shards,"
			            " t.bucket_width, t.source::oid, t.owner::oid, t.name, t.key_column, t.time_column, t.filter,"
			            " t.filter_tree, t.filter_relid, t.buffered,"
			            " (pg_catalog.date_part('epoch', t.max_future) OPERATOR(pg_catalog.*) 1000000)::bigint,"
			            " pg_catalog.to_jsonb(t) OPERATOR(pg_catalog.->>) 'distributed' IS NOT DISTINCT FROM 'true',"
			            " pg_catalog.to_jsonb(t) OPERATOR(pg_catalog.->>) 'state_schema',"
			            " pg_catalog.to_jsonb(t) OPERATOR(pg_catalog.->>) 'anchor_column'"
			            " FROM counter.tracked t"
			            " WHERE t.name OPERATOR(pg_catalog.=) $1",
			    1, types);
		}
		Datum args[1] = {key};
		if (SPI_execute_plan(plan, args, nullptr, true, 1) != SPI_OK_SELECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading counter.tracked failed")));
		if (SPI_processed == 0) {
			if (by_id)
				ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
				                errmsg("tracked counter %d does not exist", DatumGetInt32(key)),
				                errdetail("A trigger of a counter that was dropped is left on its table, or a restore "
				                          "of part of a dump (pg_dump --schema-only, --table) brought the table's "
				                          "triggers without counter_ext's catalog."),
				                errhint("Restore the whole database from a full pg_dump to keep the counter; or DROP "
				                        "the table's counter_%d_* triggers (then counter.track registers it again; "
				                        "see doc/operations.md).",
				                        DatumGetInt32(key))));
			if (citus_worker_node()) {
				Counter w{};
				// not in a query Citus sent here (its connections name
				// themselves so): such a query calling counter.value or add
				// runs on a shard, where Citus refuses a distributed query
				const char *app = GetConfigOption("application_name", true, false);
				bool sent = app != nullptr && strncmp(app, "citus_internal gpid=", 20) == 0;
				if (!by_id && !sent && worker_counter(TextDatumGetCString(key), keep, &w)) {
					SPI_finish();
					return w;
				}
				not_on_worker(TextDatumGetCString(key));
			}
			ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
			                errmsg("tracked counter \"%s\" does not exist", TextDatumGetCString(key)),
			                errhint("See counter.tracked for the registered counters.")));
		}
		HeapTuple tuple = SPI_tuptable->vals[0];
		TupleDesc desc = SPI_tuptable->tupdesc;
		bool isnull;
		Counter c;
		c.id = DatumGetInt32(SPI_getbinval(tuple, desc, 1, &isnull));
		c.key_type = DatumGetObjectId(SPI_getbinval(tuple, desc, 2, &isnull));
		c.application = DatumGetBool(SPI_getbinval(tuple, desc, 3, &isnull));
		c.shards = DatumGetInt32(SPI_getbinval(tuple, desc, 4, &isnull));
		c.width = *DatumGetIntervalP(SPI_getbinval(tuple, desc, 5, &isnull));
		c.source = DatumGetObjectId(SPI_getbinval(tuple, desc, 6, &isnull));
		c.owner = DatumGetObjectId(SPI_getbinval(tuple, desc, 7, &isnull));
		c.name = copy_value(tuple, desc, 8, keep);
		c.key_column = copy_value(tuple, desc, 9, keep);
		c.time_column = copy_value(tuple, desc, 10, keep);
		c.filter = copy_value(tuple, desc, 11, keep);
		c.filter_tree = copy_value(tuple, desc, 12, keep);
		Datum relid = SPI_getbinval(tuple, desc, 13, &isnull);
		c.filter_relid = isnull ? InvalidOid : DatumGetObjectId(relid);
		c.buffered = DatumGetBool(SPI_getbinval(tuple, desc, 14, &isnull));
		c.max_future = DatumGetInt64(SPI_getbinval(tuple, desc, 15, &isnull));
		c.distributed = DatumGetBool(SPI_getbinval(tuple, desc, 16, &isnull));
		c.state_schema = copy_value(tuple, desc, 17, keep);
		c.anchor_column = copy_value(tuple, desc, 18, keep);
		c.described_by = InvalidOid;
		get_typlenbyval(c.key_type, &c.key_len, &c.key_byval);
		SPI_finish();
		return c;
	});
}

char *qualified_name(Oid relid) {
	char *nsp = get_namespace_name(get_rel_namespace(relid));
	char *rel = get_rel_name(relid);
	if (nsp == nullptr || rel == nullptr)
		return psprintf("%u", relid);
	return quote_qualified_identifier(nsp, rel);
}

// counter_internal.tracked_table's twin: c's state table part ("base",
// "delta"), schema-qualified.
char *state_table(const Counter &c, const char *part) {
	if (c.state_schema != nullptr)
		return quote_qualified_identifier(c.state_schema, psprintf("counter_tracked_%d_%s", c.id, part));
	return psprintf("counter_internal.%s", quote_identifier(psprintf("tracked_%d_%s", c.id, part)));
}

// The privileges require_privilege found, kept per backend: (user, source,
// mode) granted. Only grants are kept (a refusal is checked, and raised,
// every time). Any invalidation of a pg_class row (GRANT, REVOKE, ALTER
// TABLE OWNER, DROP), of a role (pg_authid: superuser, inherit) or of a role
// membership (pg_auth_members) forgets them all, through the syscache
// callbacks: the invalidations pg_class_aclcheck's own cache lookups obey,
// at the same moments (a REVOKE another session commits is seen at this
// session's next transaction start or lock, as it would be without this
// cache; one of this transaction's own is seen at once, and again at its
// abort). A fixed table: bounded, nothing allocated.
struct Grant {
	uint64 generation; // valid when equal to grant_generation
	Oid user;
	Oid source;
	AclMode mode;
};
constexpr int grant_slots = 64;
Grant grants[grant_slots];
uint64 grant_generation = 1; // 0 marks an empty slot
bool grant_callbacks = false;

void grants_invalidate(Datum, int, uint32) {
	grant_generation++;
}

Grant &grant_slot(Oid user, Oid source, AclMode mode) {
	uint32 h = (static_cast<uint32>(source) * 2654435761u) ^ (static_cast<uint32>(user) * 40503u) ^ mode;
	return grants[h % grant_slots];
}

// Raises 42501 unless the current user has 'mode' on the counter's source.
void require_privilege(const Counter &c, AclMode mode, const char *verb, const char *needs) {
	Oid user = GetUserId();
	Grant &g = grant_slot(user, c.source, mode);
	if (g.generation == grant_generation && g.user == user && g.source == c.source && g.mode == mode)
		return;
	if (!grant_callbacks) {
		ce::pg_guard([] {
			CacheRegisterSyscacheCallback(RELOID, grants_invalidate, (Datum)0);
			CacheRegisterSyscacheCallback(AUTHOID, grants_invalidate, (Datum)0);
			CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, grants_invalidate, (Datum)0);
		});
		grant_callbacks = true;
	}
	// an invalidation while checking: what was checked may be stale, not kept
	uint64 generation = grant_generation;
	ce::pg_guard([&c, user, mode, verb, needs] {
		if (pg_class_aclcheck(c.source, user, mode) != ACLCHECK_OK)
			ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			                errmsg("permission denied to %s tracked counter \"%s\"", verb, c.name),
			                errdetail("%s %s on %s.", verb[0] == 'a' ? "Adding needs" : "Reading needs", needs,
			                          qualified_name(c.source))));
	});
	if (generation == grant_generation)
		g = Grant{generation, user, c.source, mode};
}

} // namespace

// ---------------------------------------------------------------------------
// The hot path of trigger mode: counter_internal.tracked_fold(counter id), a
// statement-level AFTER trigger (INSERT, UPDATE, DELETE) with transition
// tables, and an AFTER TRUNCATE trigger. It reads the transition tables
// directly, keeps the rows that match the counter's stored filter, folds them
// into one delta per (key, bucket) with a Boost.Hash map, sorts the deltas in
// (key, bucket) order (the btree order of the key type) and upserts them on
// this backend's shard with one cached SPI plan. Everything after reading the
// catalog row runs as the counter's owner (owner_enter).

namespace {

// What a backend keeps per trigger: resolved once, rebuilt when the source
// table's relcache entry is invalidated or the trigger's argument differs.
struct FoldCache {
	bool valid;
	int32 id;
	Oid relid;
	MemoryContext context; // everything below that is palloc'd
	Oid owner;
	char *delta_table;
	char *base_table;
	AttrNumber key_att;
	AttrNumber time_att;
	Oid key_collation;
	int16 key_len;
	bool key_byval;
	TypeCacheEntry *key_type;
	Interval *width;
	int shards;
	ExprState *filter;      // nullptr: every row counts
	SPIPlanPtr upsert;      // one delta
	SPIPlanPtr upsert_many; // many, as arrays
	SPIPlanPtr truncate;
	Oid key_array_type;
	char key_align;
	TupleTableSlot *row_slot; // row triggers (replicated mode)
	ExprContext *row_econtext;
	bool buffered;
};

constexpr size_t cache_limit = 1024; // triggers (and counters) a backend keeps plans for

std::unordered_map<Oid, FoldCache> *fold_caches = nullptr;
bool fold_callback_registered = false;

void fold_invalidate(Datum, Oid relid) {
	if (fold_caches == nullptr)
		return;
	for (auto &entry : *fold_caches)
		if (relid == InvalidOid || entry.second.relid == relid)
			entry.second.valid = false;
}

AttrNumber column_number(TupleDesc desc, const char *name) {
	for (int i = 0; i < desc->natts; i++) {
		Form_pg_attribute att = TupleDescAttr(desc, i);
		if (!att->attisdropped && strcmp(NameStr(att->attname), name) == 0)
			return att->attnum;
	}
	ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN), errmsg("column \"%s\" of tracked source does not exist", name),
	                errhint("Changing a tracked column needs counter.untrack and counter.track.")));
	return InvalidAttrNumber;
}

// Owns nothing C++: frees what a cache entry holds and zeroes it.
void fold_release(FoldCache *c) {
	if (c->context != nullptr) {
		for (SPIPlanPtr plan : {c->upsert, c->upsert_many, c->truncate})
			if (plan != nullptr)
				SPI_freeplan(plan);
		if (c->row_econtext != nullptr)
			FreeExprContext(c->row_econtext, true);
		if (c->row_slot != nullptr)
			ExecDropSingleTupleTableSlot(c->row_slot);
		MemoryContextDelete(c->context);
	}
	memset(c, 0, sizeof(*c));
}

// Owns nothing C++: fills the cache entry of counter 'k' for the trigger's
// table, as the counter's owner (the filter is prepared as the owner).
void fold_fill(FoldCache *c, const Counter &k, Relation rel, MemoryContext context) {
	c->context = context;
	MemoryContext old = MemoryContextSwitchTo(c->context);
	TupleDesc desc = RelationGetDescr(rel);
	c->id = k.id;
	c->relid = RelationGetRelid(rel);
	c->owner = k.owner;
	c->delta_table = state_table(k, "delta");
	c->base_table = state_table(k, "base");
	c->key_att = column_number(desc, k.key_column);
	c->time_att = column_number(desc, k.time_column);
	Form_pg_attribute key = TupleDescAttr(desc, c->key_att - 1);
	if (TupleDescAttr(desc, c->time_att - 1)->atttypid != TIMESTAMPTZOID)
		ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH), errmsg("tracked time column is not timestamptz")));
	if (key->atttypid != k.key_type)
		ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH), errmsg("tracked key column changed its type"),
		                errhint("Changing a tracked column needs counter.untrack and counter.track.")));
	c->key_collation = key->attcollation;
	c->key_len = key->attlen;
	c->key_byval = key->attbyval;
	c->key_type = lookup_type_cache(key->atttypid, TYPECACHE_CMP_PROC_FINFO);
	c->key_align = key->attalign;
	c->key_array_type = get_array_type(key->atttypid);
	if (!OidIsValid(c->key_type->cmp_proc_finfo.fn_oid))
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_FUNCTION), errmsg("tracked key type has no btree comparison")));
	c->width = static_cast<Interval *>(palloc(sizeof(Interval)));
	*c->width = k.width;
	c->shards = k.shards < 1 ? 1 : k.shards;
	c->filter = k.filter != nullptr ? ce::filter::prepare(rel, k.filter_tree, k.filter_relid, k.filter) : nullptr;
	c->buffered = k.buffered;
	MemoryContextSwitchTo(old);
	c->valid = true;
}

int64 flush_counter(const Counter &c, bool wait);
void notice_unpreloaded(const char *name);
void write_direct(int32 id, const std::vector<ce::buffer::Amount> &amounts);
void write_shard_direct(int32 id, const std::vector<ce::buffer::Amount> &amounts);

// The image of a folded key (the same as ce::buffer::image_of makes).
bool fold_image(const ce::tracked::FoldKey &key, ce::buffer::Image *out) {
	if (key.byval) {
		out->len = sizeof(Datum);
		Datum d = static_cast<Datum>(key.datum);
		memcpy(out->bytes, &d, sizeof(Datum));
		return true;
	}
	if (key.len > static_cast<size_t>(ce::buffer::max_key_bytes))
		return false;
	out->len = static_cast<uint16>(key.len);
	memcpy(out->bytes, key.bytes, key.len);
	return true;
}

// A buffered counter: the folded deltas go to this transaction's buffer;
// what cannot be buffered is left in 'entries' for write_deltas.
void buffer_fold(FoldCache *c, std::vector<ce::tracked::FoldEntry> &entries) {
	if (!c->buffered || entries.empty())
		return;
	if (!ce::buffer::available()) {
		notice_unpreloaded(ce::format("%d", c->id).c_str());
		return;
	}
	ce::buffer::set_direct_writer(write_direct);
	size_t kept = 0;
	for (const ce::tracked::FoldEntry &e : entries) {
		ce::buffer::Image image;
		if (!fold_image(e.key, &image) || !ce::buffer::add(c->id, c->owner, image, e.bucket, e.delta))
			entries[kept++] = e;
	}
	entries.resize(kept);
}

// One row of a transition table, as the fold sees it.
struct Row {
	bool more;
	bool counted;
	ce::tracked::FoldKey key;
	int64 bucket;
};

Row row_of(FoldCache *c, TupleTableSlot *slot, ExprContext *econtext, MemoryContext keep);

// Owns nothing C++: called inside pg_guard, once per row. Key copies live in
// 'keep' (the trigger call's memory), filter garbage in the per-tuple memory.
Row next_row(FoldCache *c, Tuplestorestate *store, TupleTableSlot *slot, ExprContext *econtext, MemoryContext keep) {
	if (!tuplestore_gettupleslot(store, true, false, slot))
		return Row{};
	return row_of(c, slot, econtext, keep);
}

// One row in 'slot', as the fold sees it. Owns nothing C++.
Row row_of(FoldCache *c, TupleTableSlot *slot, ExprContext *econtext, MemoryContext keep) {
	Row row{};
	row.more = true;
	bool isnull;
	Datum key = slot_getattr(slot, c->key_att, &isnull);
	if (isnull)
		return row;
	Datum at = slot_getattr(slot, c->time_att, &isnull);
	if (isnull)
		return row;
	if (c->filter != nullptr) {
		ResetExprContext(econtext);
		econtext->ecxt_scantuple = slot;
		Datum pass = ExecEvalExprSwitchContext(c->filter, econtext, &isnull);
		if (isnull || !DatumGetBool(pass))
			return row;
	}
	row.counted = true;
	row.bucket = DatumGetTimestampTz(
	    DirectFunctionCall3(timestamptz_bin, IntervalPGetDatum(c->width), at, TimestampTzGetDatum(0)));
	if (c->key_byval) {
		row.key = ce::tracked::FoldKey{static_cast<uint64_t>(key), nullptr, 0, true};
	} else if (c->key_len == -1) {
		MemoryContext old = MemoryContextSwitchTo(keep);
		struct varlena *v = pg_detoast_datum_packed(reinterpret_cast<struct varlena *>(DatumGetPointer(key)));
		Datum copy = datumCopy(PointerGetDatum(v), false, -1);
		MemoryContextSwitchTo(old);
		const char *p = DatumGetPointer(copy);
		row.key = ce::tracked::FoldKey{static_cast<uint64_t>(copy), VARDATA_ANY(p),
		                               static_cast<size_t>(VARSIZE_ANY_EXHDR(p)), false};
	} else {
		MemoryContext old = MemoryContextSwitchTo(keep);
		Datum copy = datumCopy(key, false, c->key_len);
		MemoryContextSwitchTo(old);
		size_t len = c->key_len > 0 ? static_cast<size_t>(c->key_len) : strlen(DatumGetCString(copy)) + 1;
		row.key = ce::tracked::FoldKey{static_cast<uint64_t>(copy), DatumGetPointer(copy), len, false};
	}
	return row;
}

void fold_table(FoldCache *c, Relation rel, Tuplestorestate *store, int64 sign, ce::tracked::Fold &fold) {
	MemoryContext keep = CurrentMemoryContext;
	struct Scan {
		TupleTableSlot *slot;
		ExprContext *econtext;
		int pointer;
	};
	Scan scan = ce::pg_guard([c, rel, store] {
		Scan s;
		s.slot = MakeSingleTupleTableSlot(RelationGetDescr(rel), &TTSOpsMinimalTuple);
		s.econtext = c->filter != nullptr ? CreateStandaloneExprContext() : nullptr;
		s.pointer = tuplestore_alloc_read_pointer(store, EXEC_FLAG_REWIND);
		tuplestore_select_read_pointer(store, s.pointer);
		tuplestore_rescan(store);
		return s;
	});
	for (uint32 n = 1;; n++) {
		Row row = ce::pg_guard([&] { return next_row(c, store, scan.slot, scan.econtext, keep); });
		if (!row.more)
			break;
		if (row.counted)
			fold.add(row.key, row.bucket, sign);
		if ((n & 1023) == 0)
			ce::check_for_interrupts();
	}
	ce::pg_guard([&scan, store] {
		tuplestore_select_read_pointer(store, 0);
		if (scan.econtext != nullptr)
			FreeExprContext(scan.econtext, true);
		ExecDropSingleTupleTableSlot(scan.slot);
	});
}

// A row trigger's row (replicated mode: the apply worker of a subscription
// fires row triggers only). Owns nothing C++: inside pg_guard.
Row tuple_row(FoldCache *c, Relation rel, HeapTuple tuple, MemoryContext keep) {
	if (c->row_slot == nullptr) {
		MemoryContext old = MemoryContextSwitchTo(c->context);
		c->row_slot = MakeSingleTupleTableSlot(CreateTupleDescCopy(RelationGetDescr(rel)), &TTSOpsHeapTuple);
		if (c->filter != nullptr)
			c->row_econtext = CreateStandaloneExprContext();
		MemoryContextSwitchTo(old);
	}
	ExecStoreHeapTuple(tuple, c->row_slot, false);
	Row row = row_of(c, c->row_slot, c->row_econtext, keep);
	ExecClearTuple(c->row_slot);
	return row;
}

SPIPlanPtr prepare_upsert(FoldCache *c, bool many) {
	char *sql;
	Oid types[4];
	if (!many) {
		sql = psprintf("INSERT INTO %s AS d (key, bucket, shard, delta) VALUES ($1, $2, $3, $4)"
		               " ON CONFLICT (key, bucket, shard) DO UPDATE SET delta = d.delta OPERATOR(pg_catalog.+)"
		               " excluded.delta",
		               c->delta_table);
		types[0] = c->key_type->type_id;
		types[1] = TIMESTAMPTZOID;
		types[3] = INT8OID;
	} else {
		// the arrays' order (write_deltas sorted them), unnested in the
		// select list: no table function's tuplestore
		sql = psprintf("INSERT INTO %s AS d (key, bucket, shard, delta)"
		               " SELECT pg_catalog.unnest($1), pg_catalog.unnest($2), $3, pg_catalog.unnest($4)"
		               " ON CONFLICT (key, bucket, shard) DO UPDATE SET delta = d.delta OPERATOR(pg_catalog.+)"
		               " excluded.delta",
		               c->delta_table);
		types[0] = c->key_array_type;
		types[1] = TIMESTAMPTZARRAYOID;
		types[3] = INT8ARRAYOID;
	}
	types[2] = INT2OID;
	return ce::prepare_kept(sql, 4, types);
}

// Sorts rows in (key, bucket) order, the key by the key type's btree
// comparison (cmp, with collation), and merges the rows of one (key,
// bucket) into the first with merge(first, other): equal keys with
// different images (numeric 1.0 and 1.00) become one row. Returns how many
// rows are kept, at the front. Owns nothing C++: the comparison may throw
// PostgreSQL's error, inside pg_guard.
template <typename Row, typename KeyOf, typename Merge>
size_t sort_merge(Row *rows, size_t n, FmgrInfo *cmp, Oid collation, KeyOf key_of, Merge merge) {
	auto order = [cmp, collation, &key_of](const Row &a, const Row &b) {
		int32 o = DatumGetInt32(FunctionCall2Coll(cmp, collation, key_of(a), key_of(b)));
		return o != 0 ? o : (a.bucket < b.bucket ? -1 : a.bucket > b.bucket ? 1 : 0);
	};
	std::sort(rows, rows + n, [&order](const Row &a, const Row &b) { return order(a, b) < 0; });
	size_t kept = 0;
	for (size_t i = 0; i < n; i++) {
		if (kept > 0 && order(rows[kept - 1], rows[i]) == 0)
			merge(rows[kept - 1], rows[i]);
		else
			rows[kept++] = rows[i];
	}
	return kept;
}

// Owns nothing C++: inside pg_guard. Sorts the deltas in (key, bucket) order
// (the key type's btree order), merges equal keys with different images, and
// writes them on this backend's shard in that order, in one statement.
void write_deltas(FoldCache *c, ce::tracked::FoldEntry *entries, size_t n) {
	using ce::tracked::FoldEntry;
	size_t kept = sort_merge(
	    entries, n, &c->key_type->cmp_proc_finfo, c->key_collation,
	    [](const FoldEntry &e) { return static_cast<Datum>(e.key.datum); },
	    [](FoldEntry &into, const FoldEntry &e) { into.delta += e.delta; });
	n = 0;
	for (size_t i = 0; i < kept; i++)
		if (entries[i].delta != 0)
			entries[n++] = entries[i];
	if (n == 0)
		return;

	if (SPI_connect() != SPI_OK_CONNECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
	int16 shard = shard_of(c->shards);
	int rc;
	if (n == 1) {
		if (c->upsert == nullptr)
			c->upsert = prepare_upsert(c, false);
		Datum values[4] = {static_cast<Datum>(entries[0].key.datum), TimestampTzGetDatum(entries[0].bucket),
		                   Int16GetDatum(shard), Int64GetDatum(entries[0].delta)};
		rc = SPI_execute_plan(c->upsert, values, nullptr, false, 0);
	} else {
		if (!OidIsValid(c->key_array_type))
			ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("tracked key type has no array type")));
		if (c->upsert_many == nullptr)
			c->upsert_many = prepare_upsert(c, true);
		Datum *keys = static_cast<Datum *>(palloc(sizeof(Datum) * n));
		Datum *buckets = static_cast<Datum *>(palloc(sizeof(Datum) * n));
		Datum *deltas = static_cast<Datum *>(palloc(sizeof(Datum) * n));
		for (size_t i = 0; i < n; i++) {
			keys[i] = static_cast<Datum>(entries[i].key.datum);
			buckets[i] = TimestampTzGetDatum(entries[i].bucket);
			deltas[i] = Int64GetDatum(entries[i].delta);
		}
		int count = static_cast<int>(n);
		Datum values[4] = {
		    PointerGetDatum(construct_array(keys, count, c->key_type->type_id, c->key_len, c->key_byval, c->key_align)),
		    PointerGetDatum(construct_array(buckets, count, TIMESTAMPTZOID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)),
		    Int16GetDatum(shard),
		    PointerGetDatum(construct_array(deltas, count, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE))};
		rc = SPI_execute_plan(c->upsert_many, values, nullptr, false, 0);
	}
	if (rc != SPI_OK_INSERT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
		                errmsg("writing tracked deltas failed: %s", SPI_result_code_string(rc))));
	SPI_finish();
}

// Owns nothing C++: TRUNCATE of the source empties the counter (every row is
// gone, so is every count). The source's lock keeps reconciliation out until
// the truncation commits.
void truncate_state(FoldCache *c) {
	if (SPI_connect() != SPI_OK_CONNECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
	if (c->truncate == nullptr)
		c->truncate = ce::prepare_kept(
		    psprintf("WITH d AS (DELETE FROM %s RETURNING 1) DELETE FROM %s", c->delta_table, c->base_table), 0,
		    nullptr);
	if (SPI_execute_plan(c->truncate, nullptr, nullptr, false, 0) != SPI_OK_DELETE)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("emptying a tracked counter failed")));
	SPI_finish();
}

// ---------------------------------------------------------------------------
// Citus (doc/citus.md, "Trigger-mode counters on a distributed table"): a
// counter whose source is hash-distributed by its key keeps its base and
// delta tables distributed colocated with the source, and its triggers are
// copied by Citus to every shard, on every node. There no catalog of
// counter_ext is: the trigger's arguments carry what it needs (counter id,
// 'citus', key column, time column, bucket width in seconds, the counter's
// delta slots (shards), the filter as SQL printed from the stored tree with
// every name qualified, or '', and since 1.8 its delta and base tables,
// beside the source; 1.7's are counter_internal.tracked_<id>_delta, _base),
// and
// Citus's metadata (synced to every node) names the delta shard colocated
// with the shard the trigger fires on. The fold is one SQL statement over the
// transition tables, writing only that local shard, in the writer's
// transaction, as the shard's owner (the source's owner: owner_enter, as
// every other work for an owner). On the distributed table itself (the
// coordinator's, or a node's metadata copy, which never holds rows) the
// trigger does nothing (the shards count) but on TRUNCATE, which Citus does
// not copy to the shards: there it empties the state on every shard. The
// arguments are trusted as the
// catalog row is elsewhere: EXECUTE on tracked_fold is revoked from PUBLIC
// on every node, so only counter.track (or a superuser) makes such a
// trigger, and Citus copies it to the shards as the role that made it.

using ShardFold = ce::citus::ShardTrigger; // state[0]: the delta shard, state[1]: the base shard

void shard_fold_buffered(TriggerData *td, ShardFold *f, Oid owner, int32 id, int shards);
void inbox_add_buffered(TriggerData *td, ShardFold *f, Oid owner, int32 id);
void shard_buffer_fill(ShardFold *f, TriggerData *td, int32 id);

// Inside SPI, as the owner; owns nothing C++. Runs the flush of a buffered
// counter's delta table 'delta' (qualified; anchored, its anchors
// 'anchors', else nullptr) on every node (counter_internal.tracked_node_flush,
// each node in a transaction of its own); an error on any node is raised
// here.
void flush_nodes(const char *delta, const char *anchors) {
	Oid types[2] = {TEXTOID, TEXTOID};
	Datum args[2] = {CStringGetTextDatum(delta), anchors != nullptr ? CStringGetTextDatum(anchors) : (Datum)0};
	const char nulls[3] = {' ', anchors != nullptr ? ' ' : 'n', '\0'};
	if (SPI_execute_with_args("SELECT r.result FROM pg_catalog.run_command_on_all_nodes(pg_catalog.format("
	                          "'SELECT counter_internal.tracked_node_flush(%L, %L)', $1, $2)) r WHERE NOT r.success",
	                          2, types, args, nulls, false, 1) != SPI_OK_SELECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("flushing the nodes of a buffered counter failed")));
	if (SPI_processed > 0)
		ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
		                errmsg("flushing the buffered amounts of %s on a node failed: %s", delta,
		                       SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1))));
}

// The delta and base tables of counter id: named by the trigger (1.8:
// beside the source), or 1.7's in counter_internal; and its anchors when
// it is keyed by another column than the distribution column (tables[2],
// else nullptr). How many: 2 or 3.
int shard_fold_tables(TriggerData *td, int32 id, const char *tables[3]) {
	tables[2] = nullptr;
	if (fold_anchored(td->tg_trigger))
		tables[2] = td->tg_trigger->tgargs[11];
	if (td->tg_trigger->tgnargs >= 9) {
		tables[0] = td->tg_trigger->tgargs[7];
		tables[1] = td->tg_trigger->tgargs[8];
	} else {
		tables[0] = psprintf("counter_internal.tracked_%d_delta", id);
		tables[1] = psprintf("counter_internal.tracked_%d_base", id);
	}
	return tables[2] != nullptr ? 3 : 2;
}

// Owns nothing C++: as the table's owner, between SPI_connect and
// SPI_finish. Finds what trigger td's table is in Citus's metadata; false
// for a TRUNCATE trigger left on a shard by a counter that is gone.
bool shard_fold_fill(ShardFold *f, TriggerData *td, int32 id) {
	Relation rel = td->tg_relation;
	const char *tables[3];
	int n = shard_fold_tables(td, id, tables);
	ce::citus::Place place = ce::citus::shard_trigger_fill(f, rel, tables, n);
	// a TRUNCATE trigger on a shard whose counter is gone: Citus copies the
	// distributed table's TRUNCATE trigger to the shards a move or split
	// makes, and the DROP TRIGGER of untrack does not reach those copies;
	// the distributed table's own trigger empties the state (below), so
	// such a copy does nothing, and never makes a TRUNCATE fail
	if (place == ce::citus::Place::missing && TRIGGER_FIRED_BY_TRUNCATE(td->tg_event))
		return false;
	if (place == ce::citus::Place::no_citus)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
		                errmsg("the trigger %s on %s belongs to tracked counter %d on Citus, which is not installed "
		                       "in this database",
		                       td->tg_trigger->tgname, RelationGetRelationName(rel), id),
		                errhint("CREATE EXTENSION citus, or drop the trigger.")));
	if (place == ce::citus::Place::missing)
		ereport(ERROR,
		        (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
		         errmsg("the trigger %s on %s belongs to tracked counter %d, whose state has no shard on this node "
		                "colocated with %s",
		                td->tg_trigger->tgname, RelationGetRelationName(rel), id, RelationGetRelationName(rel)),
		         errdetail("A trigger-mode counter on a distributed table counts on each shard into the colocated "
		                   "shard of its delta table (%s).",
		                   tables[0]),
		         errhint("The counter was untracked, or its state was moved apart from the table: drop the trigger "
		                 "(on the coordinator, with citus.enable_unsafe_triggers on), then counter.track again.")));
	return true;
}

// The type of the column a counter keyed by another column than the
// distribution column anchors its state by (trigger argument 10). Owns
// nothing C++.
Oid anchor_type(TriggerData *td) {
	Oid relid = RelationGetRelid(td->tg_relation);
	AttrNumber att = get_attnum(relid, td->tg_trigger->tgargs[10]);
	if (att == InvalidAttrNumber)
		ereport(ERROR,
		        (errcode(ERRCODE_UNDEFINED_COLUMN),
		         errmsg("column \"%s\" of %s, which the trigger %s anchors its counter by, does not exist",
		                td->tg_trigger->tgargs[10], RelationGetRelationName(td->tg_relation), td->tg_trigger->tgname)));
	return get_atttype(relid, att);
}

// Owns nothing C++: inside SPI, as the table's owner, with the trigger's
// transition tables registered. The anchor of this shard for a counter
// keyed by another column than the distribution column (doc/citus.md,
// "Keyed by another column"): the least value of its anchors' shard
// (state[2]), kept by this backend for the shard (a value Citus placed on
// it stays on it: a split makes other shards, and this entry is made
// again). A shard without one (a split made it since the last
// reconciliation) takes the distribution column of a row this statement
// counts, which is on this shard, and adds it. False when there is none
// (the statement changed no row).
bool shard_anchor(ShardFold *f, TriggerData *td, int kind) {
	if (f->has_anchor)
		return true;
	if (SPI_execute(psprintf("SELECT a.anchor FROM %s a ORDER BY a.anchor LIMIT 1", f->state[2]), true, 1) !=
	    SPI_OK_SELECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading a tracked counter's anchors failed")));
	bool isnull = true;
	Datum anchor = (Datum)0;
	if (SPI_processed == 1)
		anchor = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (isnull) {
		const char *column = quote_identifier(td->tg_trigger->tgargs[10]);
		if (SPI_execute(psprintf("SELECT x.%s FROM %s x WHERE x.%s IS NOT NULL LIMIT 1", column,
		                         kind == 1 ? "ce_old" : "ce_new", column),
		                true, 1) != SPI_OK_SELECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading a transition table failed")));
		if (SPI_processed == 0)
			return false;
		anchor = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		Oid types[1] = {anchor_type(td)};
		Datum args[1] = {anchor};
		if (SPI_execute_with_args(psprintf("INSERT INTO %s (anchor) VALUES ($1) ON CONFLICT DO NOTHING", f->state[2]),
		                          1, types, args, nullptr, false, 0) != SPI_OK_INSERT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("adding a tracked counter's anchor failed")));
	}
	int16 len;
	bool byval;
	get_typlenbyval(anchor_type(td), &len, &byval);
	MemoryContext old = MemoryContextSwitchTo(f->context);
	f->anchor = datumCopy(anchor, byval, len);
	MemoryContextSwitchTo(old);
	f->has_anchor = true;
	return true;
}

// The statement of one event kind (0 INSERT, 1 DELETE, 2 UPDATE): the
// transition tables' rows that pass the filter, folded to one delta per
// (key, bucket), written in (key, bucket) order to this backend's slot of
// the delta shard. Owns nothing C++: inside SPI.
SPIPlanPtr shard_fold_plan(ShardFold *f, TriggerData *td, int kind) {
	if (f->plans[kind] != nullptr)
		return f->plans[kind];
	char **a = td->tg_trigger->tgargs;
	const char *key = quote_identifier(a[2]);
	const char *at = quote_identifier(a[3]);
	double width = strtod(a[4], nullptr);
	if (!(width > 0))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		                errmsg("invalid bucket width in trigger %s", td->tg_trigger->tgname)));
	const char *filter = a[6][0] == '\0' ? "true" : psprintf("(%s)", a[6]);
	auto leg = [&](const char *table, int sign) {
		return psprintf("SELECT ce_new.%s AS k, pg_catalog.date_bin(interval '1 second' OPERATOR(pg_catalog.*) %.17g,"
		                " ce_new.%s, '2000-01-01 00:00:00+00'::pg_catalog.timestamptz) AS b, %d AS s"
		                " FROM %s AS ce_new WHERE ce_new.%s IS NOT NULL AND ce_new.%s IS NOT NULL AND %s",
		                key, width, at, sign, table, key, at, filter);
	};
	char *rows;
	if (kind == 0)
		rows = leg("ce_new", 1);
	else if (kind == 1)
		rows = leg("ce_old", -1);
	else
		rows = psprintf("%s UNION ALL %s", leg("ce_new", 1), leg("ce_old", -1));
	// keyed by another column than the distribution column: every row
	// anchored to this shard's anchor ($2, shard_anchor)
	bool anchored = fold_anchored(td->tg_trigger);
	if (fold_buffered(td->tg_trigger)) {
		// buffered (shard_fold_buffered): the same folded rows, returned
		// (anchored: by the flush or a direct write, to the shard's anchor)
		f->plans[kind] = ce::prepare_kept(
		    psprintf("SELECT x.k, x.b, pg_catalog.sum(x.s)::pg_catalog.int8 FROM (%s) x GROUP BY x.k, x.b"
		             " HAVING pg_catalog.sum(x.s) OPERATOR(pg_catalog.<>) 0",
		             rows),
		    0, nullptr);
		return f->plans[kind];
	}
	char *sql =
	    psprintf("INSERT INTO %s AS d (key, bucket, shard, delta%s)"
	             " SELECT x.k, x.b, $1, pg_catalog.sum(x.s)%s FROM (%s) x GROUP BY x.k, x.b"
	             " HAVING pg_catalog.sum(x.s) OPERATOR(pg_catalog.<>) 0 ORDER BY x.k, x.b"
	             " ON CONFLICT (key, bucket, shard%s) DO UPDATE SET delta = d.delta OPERATOR(pg_catalog.+)"
	             " excluded.delta",
	             f->state[0], anchored ? ", anchor" : "", anchored ? ", $2" : "", rows, anchored ? ", anchor" : "");
	Oid types[2] = {INT2OID, anchored ? anchor_type(td) : InvalidOid};
	f->plans[kind] = ce::prepare_kept(sql, anchored ? 2 : 1, types);
	return f->plans[kind];
}

// Owns nothing C++: as the table's owner.
void shard_fold_run(ShardFold *f, TriggerData *td, int32 id, int shards) {
	if (SPI_connect() != SPI_OK_CONNECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
	if (!f->valid && !shard_fold_fill(f, td, id)) {
		SPI_finish();
		return;
	}
	if (f->shell && TRIGGER_FIRED_BY_TRUNCATE(td->tg_event)) {
		// Citus copies no TRUNCATE trigger to the shards: the distributed
		// table's own empties the state, on every shard (distributed DELETEs);
		// a buffered counter's nodes first write what they hold (each node
		// in a transaction of its own), so that it goes with the rest
		if (fold_buffered(td->tg_trigger)) {
			const char *tables[3];
			shard_fold_tables(td, id, tables);
			flush_nodes(tables[0], tables[2]);
		}
		if (f->plans[3] == nullptr) {
			const char *tables[3];
			shard_fold_tables(td, id, tables);
			f->plans[3] = ce::prepare_kept(
			    psprintf("WITH d AS (DELETE FROM %s RETURNING 1) DELETE FROM %s", tables[0], tables[1]), 0, nullptr);
		}
		if (SPI_execute_plan(f->plans[3], nullptr, nullptr, false, 0) != SPI_OK_DELETE)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("emptying a tracked counter failed")));
		SPI_finish();
		return;
	}
	if (f->shell) {
		SPI_finish();
		return;
	}
	if (TRIGGER_FIRED_BY_TRUNCATE(td->tg_event)) {
		if (f->plans[3] == nullptr)
			f->plans[3] = ce::prepare_kept(
			    psprintf("WITH d AS (DELETE FROM %s RETURNING 1) DELETE FROM %s", f->state[0], f->state[1]), 0,
			    nullptr);
		if (SPI_execute_plan(f->plans[3], nullptr, nullptr, false, 0) != SPI_OK_DELETE)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("emptying a tracked counter failed")));
		SPI_finish();
		return;
	}
	if (SPI_register_trigger_data(td) != SPI_OK_TD_REGISTER)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_register_trigger_data failed")));
	int kind = TRIGGER_FIRED_BY_INSERT(td->tg_event) ? 0 : TRIGGER_FIRED_BY_DELETE(td->tg_event) ? 1 : 2;
	if (fold_anchored(td->tg_trigger) && !shard_anchor(f, td, kind)) {
		SPI_finish(); // no row changed: nothing to count
		return;
	}
	Datum args[2] = {Int16GetDatum(shard_of(shards)), f->anchor};
	int rc = SPI_execute_plan(shard_fold_plan(f, td, kind), args, nullptr, false, 0);
	if (rc != SPI_OK_INSERT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
		                errmsg("writing tracked deltas failed: %s", SPI_result_code_string(rc))));
	SPI_finish();
}

// The shard path of counter_internal.tracked_fold: trigger arguments (id,
// 'citus', key column, time column, bucket width, slots, filter, and since
// 1.8 the delta and base tables).
void shard_fold(TriggerData *td) {
	int nargs = td->tg_trigger->tgnargs;
	if (TRIGGER_FIRED_FOR_ROW(td->tg_event) ||
	    (nargs != 7 && nargs != 9 && nargs != 10 && !fold_buffered(td->tg_trigger) && !fold_anchored(td->tg_trigger)))
		throw ce::Error("39P01",
		                "a tracked counter's trigger on a Citus shard is a statement trigger with 10 arguments, 11 "
		                "when it is buffered, 12 when its key is not the distribution column, 13 when both (7 made by "
		                "1.7, 9 by 1.8 before the counter's name)");
	int32 id = ce::pg_guard([td] { return pg_strtoint32(td->tg_trigger->tgargs[0]); });
	int32 shards = ce::pg_guard([td] { return pg_strtoint32(td->tg_trigger->tgargs[5]); });
	ShardFold *f = ce::citus::shard_trigger(td->tg_trigger->tgoid, td->tg_relation);
	// the shard's owner is the distributed table's: the counter's owner
	Oid owner = f->valid ? f->owner : td->tg_relation->rd_rel->relowner;
	if (fold_buffered(td->tg_trigger) && !TRIGGER_FIRED_BY_TRUNCATE(td->tg_event)) {
		shard_fold_buffered(td, f, owner, id, shards);
		return;
	}
	ce::as_owner(owner, [f, td, id, shards] { shard_fold_run(f, td, id, shards); });
}

// Citus (doc/citus.md, "Tracked counters in application mode"): an
// application-mode counter whose source is hash-distributed by its key
// keeps its state distributed colocated with the source, as trigger mode
// does, and counter.add writes it through the counter's inbox, a table
// colocated with the source that never holds a row: the add inserts (key,
// bucket, slot, amount) there as the caller (Citus sends the row to the
// key's shard in the caller's own connection, the one its INSERT of the
// row used: Citus refuses a write as another role to placements the
// transaction wrote), and on the shard this BEFORE INSERT row trigger checks
// that the writer may insert into the source (what counter.add asks), adds
// the amount to the colocated delta shard as the table's owner, and drops
// the row. The row and its add commit in one transaction of one node.
// Arguments: counter id, 'citus', the source, the delta table.

// The row of a buffered counter's inbox (1.8): what the trigger adds to
// the buffer of the delta shard's placement on this node instead
// (counter_tracked_shard_add), its key copied into the caller's context.
struct InboxRow {
	Datum key;
	int64 bucket;
	int16 slot;
	int64 delta;
};

// Owns nothing C++: as the table's owner. Buffered (row not nullptr): the
// row's values into *row, nothing written.
void shard_add_run(ShardFold *f, TriggerData *td, int32 id, InboxRow *row) {
	MemoryContext caller = CurrentMemoryContext;
	if (SPI_connect() != SPI_OK_CONNECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
	Relation rel = td->tg_relation;
	if (!f->valid) {
		const char *tables[1] = {td->tg_trigger->tgargs[3]};
		ce::citus::Place place = ce::citus::shard_trigger_fill(f, rel, tables, 1);
		if (place == ce::citus::Place::no_citus || place == ce::citus::Place::missing)
			ereport(ERROR,
			        (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			         errmsg("the trigger %s on %s belongs to tracked counter %d, whose delta table has no shard "
			                "on this node colocated with %s",
			                td->tg_trigger->tgname, RelationGetRelationName(rel), id, RelationGetRelationName(rel)),
			         errhint("The counter was untracked, or its state was moved apart from its inbox: "
			                 "counter.track it again.")));
	}
	if (f->shell) // Citus sends every row of a distributed table to a shard
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
		                errmsg("the inbox %s of tracked counter %d takes rows on its shards only",
		                       RelationGetRelationName(rel), id),
		                errhint("Add with counter.add on the coordinator.")));
	TupleDesc desc = RelationGetDescr(rel);
	if (f->plans[0] == nullptr) {
		Oid types[4] = {TupleDescAttr(desc, 0)->atttypid, TIMESTAMPTZOID, INT2OID, INT8OID};
		f->plans[0] = ce::prepare_kept(
		    psprintf("INSERT INTO %s AS d (key, bucket, shard, delta) VALUES ($1, $2, $3, $4)"
		             " ON CONFLICT (key, bucket, shard) DO UPDATE SET delta = d.delta OPERATOR(pg_catalog.+)"
		             " excluded.delta",
		             f->state[0]),
		    4, types);
	}
	Datum values[4];
	for (int i = 0; i < 4; i++) {
		bool isnull;
		values[i] = heap_getattr(td->tg_trigtuple, i + 1, desc, &isnull);
		if (isnull)
			ereport(ERROR, (errcode(ERRCODE_NOT_NULL_VIOLATION),
			                errmsg("a row of the inbox of tracked counter %d has a NULL", id)));
	}
	if (row != nullptr) {
		shard_buffer_fill(f, td, id);
		Form_pg_attribute key = TupleDescAttr(desc, 0);
		MemoryContext old = MemoryContextSwitchTo(caller);
		*row = InboxRow{datumCopy(values[0], key->attbyval, key->attlen), DatumGetTimestampTz(values[1]),
		                DatumGetInt16(values[2]), DatumGetInt64(values[3])};
		MemoryContextSwitchTo(old);
		SPI_finish();
		return;
	}
	if (SPI_execute_plan(f->plans[0], values, nullptr, false, 0) != SPI_OK_INSERT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("writing a tracked delta failed")));
	SPI_finish();
}

} // namespace

// counter_internal.tracked_shard_add() (1.8): the inbox's trigger (above).
// PUBLIC may execute it (Citus makes it again on a moved or split shard as
// the table's owner); only the table's owner may attach it
// (counter_internal.citus_trigger_creator); it writes as that owner what a
// writer with INSERT on the named source gives it.
CE_FUNCTION(counter_tracked_shard_add) {
	if (!CALLED_AS_TRIGGER(fcinfo))
		throw ce::Error("39P01", "counter_internal.tracked_shard_add must be called as a trigger");
	auto *td = reinterpret_cast<TriggerData *>(fcinfo->context);
	if (!TRIGGER_FIRED_BEFORE(td->tg_event) || !TRIGGER_FIRED_FOR_ROW(td->tg_event) ||
	    !TRIGGER_FIRED_BY_INSERT(td->tg_event) ||
	    (td->tg_trigger->tgnargs != 4 && td->tg_trigger->tgnargs != 8 &&
	     !(td->tg_trigger->tgnargs == 9 && strcmp(td->tg_trigger->tgargs[8], "buffered") == 0)) ||
	    strcmp(td->tg_trigger->tgargs[1], "citus") != 0)
		throw ce::Error("39P01", "counter_internal.tracked_shard_add must be a BEFORE INSERT row trigger with the 8 "
		                         "arguments counter.track gives it (9 for a buffered counter)");
	int32 id = ce::pg_guard([td] { return pg_strtoint32(td->tg_trigger->tgargs[0]); });
	Oid writer = GetUserId();
	// the right counter.add asks: INSERT on the source
	ce::pg_guard([td, writer, id] {
		const char *name = td->tg_trigger->tgargs[2];
		Oid source = ce::citus::relation_named(name);
		if (!OidIsValid(source)) // counter_citus_state refuses renaming it
			ereport(ERROR,
			        (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			         errmsg("the trigger %s on %s names the table %s of tracked counter %d, which does not exist",
			                td->tg_trigger->tgname, RelationGetRelationName(td->tg_relation), name, id),
			         errhint("Untrack the counter and track it again.")));
		if (pg_class_aclcheck(source, writer, ACL_INSERT) != ACLCHECK_OK)
			ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			                errmsg("permission denied to add to tracked counter %d", id),
			                errdetail("Adding needs INSERT on %s.", name)));
	});
	ShardFold *f = ce::citus::shard_trigger(td->tg_trigger->tgoid, td->tg_relation);
	// the inbox's owner is the counter's
	Oid owner = f->valid ? f->owner : td->tg_relation->rd_rel->relowner;
	if (td->tg_trigger->tgnargs == 9) {
		// buffered (1.8): the amount goes to the buffer of the delta shard's
		// placement on this node, as a buffered shard trigger's do
		// (shard_fold_buffered), or is written at once when it cannot be
		inbox_add_buffered(td, f, owner, id);
		return PointerGetDatum(nullptr);
	}
	ce::as_owner(owner, [f, td, id] { shard_add_run(f, td, id, nullptr); });
	return PointerGetDatum(nullptr); // the row is not kept
}

// Citus (doc/citus.md, "Keyed by another column"): a trigger-mode counter
// keyed by another column than the distribution column of its source
// keeps its state on every shard, anchored there, and reconciles a batch
// of keys on every shard at once through its run table, colocated with the
// source: the batch function (counter_internal.tracked_anchored_batch)
// inserts a row per shard (an anchor of the shard, the watermark, the
// keys), and on the shard this BEFORE INSERT row trigger compares and
// repairs those keys there, as the table's owner, and writes what it found
// into the row (found_keys, cached, truth, busy), which the insert returns
// to the batch. Arguments: counter id, 'citus', the source, its key
// column, time column, the filter as SQL over ce_new (or ''), the delta
// and base tables.
// (1.8) A counter keyed by the distribution column (its state has no
// anchor: a ninth argument, 'key') reconciles through its run table too
// (counter_internal.tracked_citus_batch): each row carries the keys of the
// batch on its shard, anchored by one of them, and the horizon from which
// delta rows are folded as well (an application-mode counter's; NULL for
// none); the trigger locks, compares and repairs them there, the truth
// put as the key's one base.

// Whether td is the run table trigger of a counter keyed by the
// distribution column (above).
bool run_keyed(const TriggerData *td) {
	return td->tg_trigger->tgnargs == 9 && strcmp(td->tg_trigger->tgargs[8], "key") == 0;
}

// Owns nothing C++: inside SPI, as the table's owner. The statements of a
// shard's part of a batch: 0 locks the delta rows of the keys ($1) before
// the watermark ($2) that no writer holds (counter_internal.row_lock_skip:
// it never waits); 1 reads the rows, base and deltas of those keys in one
// snapshot and repairs every key none of whose delta rows another holds
// (busy): its delta rows held ($3-$6) deleted when their amount is the one
// seen, and only when all of them went, the shard's truth put as its base
// at the row's anchor ($7) and every other anchor's base of the key deleted.
// 2 (for a key type shard_keys takes): the keys from $1 to $2 this shard
// has rows, a base or deltas of, in the key type's btree order. 3
// (shard_pick): the next $5 keys after $1 (NULL: from the first), in key
// order, among those with a base (only when $4), with delta rows before
// the watermark $2, and with rows whose event time is in [$3, $2) that
// pass the filter: the choice of counter_internal.tracked_keys_sql, on
// the shard.
SPIPlanPtr shard_reconcile_plan(ShardFold *f, TriggerData *td, int which, Oid key_type, Oid anchor_type) {
	if (f->plans[which] != nullptr)
		return f->plans[which];
	char **a = td->tg_trigger->tgargs;
	char *eq = ce::keys::qualified_operator(key_type, BTEqualStrategyNumber);
	char *anchor_eq = ce::keys::qualified_operator(anchor_type, BTEqualStrategyNumber);
	Oid key_array = get_array_type(key_type);
	Oid anchor_array = get_array_type(anchor_type);
	if (!OidIsValid(key_array) || !OidIsValid(anchor_array))
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("tracked key type has no array type")));
	bool keyed = run_keyed(td);
	if (which == 0 && keyed) {
		char *sql = psprintf("SELECT pg_catalog.array_agg(d.key), pg_catalog.array_agg(d.bucket),"
		                     " pg_catalog.array_agg(d.shard), NULL::%s FROM %s d"
		                     " WHERE d.key %s ANY ($1) AND (d.bucket OPERATOR(pg_catalog.<) $2"
		                     "  OR d.bucket OPERATOR(pg_catalog.>=) $3)"
		                     " AND counter_internal.row_lock_skip(d.tableoid::pg_catalog.regclass, d.ctid)",
		                     format_type_be_qualified(key_array), f->state[1], eq);
		Oid types[3] = {key_array, TIMESTAMPTZOID, TIMESTAMPTZOID};
		// planned at each call with its keys, as the batch function's
		// statements are (plan_cache_mode there: a generic plan takes an
		// array for 10 elements and joins a batch's keys in loops)
		f->plans[0] = ce::prepare_kept(sql, 3, types, CURSOR_OPT_CUSTOM_PLAN);
		return f->plans[0];
	}
	if (which == 0) {
		char *sql = psprintf("SELECT pg_catalog.array_agg(d.key), pg_catalog.array_agg(d.bucket),"
		                     " pg_catalog.array_agg(d.shard), pg_catalog.array_agg(d.anchor) FROM %s d"
		                     " WHERE d.key %s ANY ($1) AND d.bucket OPERATOR(pg_catalog.<) $2"
		                     " AND counter_internal.row_lock_skip(d.tableoid::pg_catalog.regclass, d.ctid)",
		                     f->state[1], eq);
		Oid types[2] = {key_array, TIMESTAMPTZOID};
		f->plans[0] = ce::prepare_kept(sql, 2, types);
		return f->plans[0];
	}
	if (which == 2) {
		char *ge = ce::keys::qualified_operator(key_type, BTGreaterEqualStrategyNumber);
		char *le = ce::keys::qualified_operator(key_type, BTLessEqualStrategyNumber);
		char *sql = psprintf("SELECT p.k FROM (SELECT ce_new.%4$s AS k FROM %1$s AS ce_new"
		                     " WHERE ce_new.%4$s %5$s $1 AND ce_new.%4$s %6$s $2"
		                     " UNION SELECT b.key FROM %3$s b WHERE b.key %5$s $1 AND b.key %6$s $2"
		                     " UNION SELECT d.key FROM %2$s d WHERE d.key %5$s $1 AND d.key %6$s $2) p ORDER BY 1",
		                     f->state[0], f->state[1], f->state[2], quote_identifier(a[3]), ge, le);
		Oid types[2] = {key_type, key_type};
		f->plans[2] = ce::prepare_kept(sql, 2, types);
		return f->plans[2];
	}
	const char *filter = a[5][0] == '\0' ? "true" : psprintf("(%s)", a[5]);
	if (which == 3) {
		// planned at each call with its values (a generic plan would read
		// every key for "$1 IS NULL OR key > $1")
		char *gt = ce::keys::qualified_operator(key_type, BTGreaterStrategyNumber);
		char *sql = psprintf(
		    "SELECT pg_catalog.array_agg(s.k ORDER BY s.k) FROM (SELECT DISTINCT u.k FROM ("
		    " (SELECT DISTINCT b.key AS k FROM %3$s b WHERE $4 AND ($1 IS NULL OR b.key %7$s $1) ORDER BY 1 LIMIT $5)"
		    " UNION ALL"
		    " (SELECT DISTINCT d.key FROM %2$s d WHERE ($1 IS NULL OR d.key %7$s $1)"
		    "  AND d.bucket OPERATOR(pg_catalog.<) $2 ORDER BY 1 LIMIT $5)"
		    " UNION ALL"
		    " (SELECT DISTINCT ce_new.%4$s FROM %1$s AS ce_new WHERE ce_new.%4$s IS NOT NULL"
		    "  AND ($1 IS NULL OR ce_new.%4$s %7$s $1) AND $3 OPERATOR(pg_catalog.<) $2"
		    "  AND ce_new.%5$s OPERATOR(pg_catalog.>=) $3 AND ce_new.%5$s OPERATOR(pg_catalog.<) $2 AND %6$s"
		    "  ORDER BY 1 LIMIT $5)"
		    ") u ORDER BY 1 LIMIT $5) s",
		    f->state[0], f->state[1], f->state[2], quote_identifier(a[3]), quote_identifier(a[4]), filter, gt);
		Oid types[5] = {key_type, TIMESTAMPTZOID, TIMESTAMPTZOID, BOOLOID, INT4OID};
		f->plans[3] = ce::prepare_kept(sql, 5, types, CURSOR_OPT_CUSTOM_PLAN);
		return f->plans[3];
	}
	// 1: the anchored form; keyed (run_keyed), the same without anchors
	// (the lock's fourth array is NULL: no l.a), $7 the horizon from
	// which delta rows are folded as well, and the truth put as the key's
	// one base
	char *sql = psprintf(
	    "WITH l AS MATERIALIZED ("
	    " SELECT * FROM ROWS FROM (pg_catalog.unnest($3), pg_catalog.unnest($4), pg_catalog.unnest($5),"
	    " pg_catalog.unnest($6)) AS l(k, b, h, a)"
	    "), z AS MATERIALIZED ("
	    " SELECT r.key, NULL::pg_catalog.int8 AS b, r.n, NULL::pg_catalog.timestamptz AS bucket,"
	    " NULL::pg_catalog.int2 AS shard, NULL::%6$s AS anchor, NULL::pg_catalog.int8 AS delta, false AS held"
	    " FROM (SELECT ce_new.%4$s AS key, pg_catalog.count(*) AS n FROM %1$s AS ce_new"
	    "  WHERE ce_new.%4$s %7$s ANY ($1) AND ce_new.%5$s OPERATOR(pg_catalog.<) $2 AND %8$s GROUP BY 1) r"
	    " UNION ALL"
	    " SELECT b.key, b.base, 0, NULL, NULL, %9$s, NULL, false FROM %3$s b WHERE b.key %7$s ANY ($1)"
	    " UNION ALL"
	    " SELECT d.key, NULL, 0, d.bucket, d.shard, %10$s, d.delta, l.k IS NOT NULL FROM %2$s d"
	    " LEFT JOIN l ON l.k %7$s d.key AND l.b OPERATOR(pg_catalog.=) d.bucket AND l.h OPERATOR(pg_catalog.=) d.shard"
	    "%11$s"
	    " WHERE d.key %7$s ANY ($1) AND %12$s"
	    ")%17$s, s AS MATERIALIZED ("
	    // numeric, then bounded: no sum of deltas makes the batch fail
	    " SELECT z.key, LEAST(GREATEST(coalesce(pg_catalog.sum(z.b), 0) OPERATOR(pg_catalog.+)"
	    " coalesce(pg_catalog.sum(z.delta), 0), -9223372036854775807), 9223372036854775807)::pg_catalog.int8 AS cached,"
	    " pg_catalog.sum(z.n)::pg_catalog.int8 AS truth, pg_catalog.count(*) FILTER (WHERE z.held) AS held,"
	    " coalesce(pg_catalog.bool_or(z.delta IS NOT NULL AND NOT z.held), false)%18$s AS busy"
	    " FROM z GROUP BY z.key"
	    "), absorbed AS ("
	    " DELETE FROM %2$s d USING z, s"
	    " WHERE d.key %7$s ANY ($1) AND z.held AND s.key %7$s z.key AND NOT s.busy AND d.key %7$s z.key"
	    "  AND d.bucket OPERATOR(pg_catalog.=) z.bucket AND d.shard OPERATOR(pg_catalog.=) z.shard"
	    "%13$s AND d.delta OPERATOR(pg_catalog.=) z.delta"
	    " RETURNING d.key"
	    "), ok AS MATERIALIZED ("
	    " SELECT s.key, s.truth FROM s"
	    " LEFT JOIN (SELECT a.key, pg_catalog.count(*) AS n FROM absorbed a GROUP BY 1) a ON a.key %7$s s.key"
	    " WHERE NOT s.busy AND s.held OPERATOR(pg_catalog.=) coalesce(a.n, 0)"
	    "), gone AS ("
	    " DELETE FROM %3$s b USING ok WHERE b.key %7$s ANY ($1) AND b.key %7$s ok.key"
	    "  AND (ok.truth OPERATOR(pg_catalog.=) 0%14$s)"
	    " RETURNING 1"
	    "), put AS ("
	    " INSERT INTO %3$s AS b (key%15$s, base) SELECT ok.key%16$s, ok.truth FROM ok"
	    " WHERE ok.truth OPERATOR(pg_catalog.<>) 0"
	    " ON CONFLICT (key%15$s) DO UPDATE SET base = excluded.base"
	    " WHERE b.base OPERATOR(pg_catalog.<>) excluded.base"
	    " RETURNING 1"
	    ")"
	    " SELECT pg_catalog.array_agg(s.key), pg_catalog.array_agg(s.cached), pg_catalog.array_agg(s.truth),"
	    " pg_catalog.array_agg(ok.key IS NULL) FROM s LEFT JOIN ok ON ok.key %7$s s.key",
	    f->state[0], f->state[1], f->state[2], quote_identifier(a[3]), quote_identifier(a[4]),
	    format_type_be_qualified(anchor_type), eq, filter, keyed ? "NULL" : "b.anchor", keyed ? "NULL" : "d.anchor",
	    keyed ? "" : psprintf("  AND l.a %s d.anchor", anchor_eq),
	    keyed ? "(d.bucket OPERATOR(pg_catalog.<) $2 OR d.bucket OPERATOR(pg_catalog.>=) $7)"
	          : "d.bucket OPERATOR(pg_catalog.<) $2",
	    keyed ? "" : psprintf("  AND d.anchor %s z.anchor", anchor_eq),
	    keyed ? "" : psprintf(" OR NOT b.anchor %s $7", anchor_eq), keyed ? "" : ", anchor", keyed ? "" : ", $7",
	    // a key that what this node's buffer of the delta shard holds makes
	    // busy (1.8, a buffered counter, keyed or anchored:
	    // tracked_shard_busy, with this statement's snapshot; nothing for a
	    // counter that is not buffered)
	    psprintf(", bb AS MATERIALIZED (SELECT u.k FROM pg_catalog.unnest("
	             "counter_internal.tracked_shard_busy(%s::pg_catalog.regclass, $2, $1)) AS u(k))",
	             quote_literal_cstr(f->state[1])),
	    psprintf(" OR z.key %s ANY (SELECT bb.k FROM bb)", eq));
	Oid types[7] = {key_array,
	                TIMESTAMPTZOID,
	                key_array,
	                TIMESTAMPTZARRAYOID,
	                INT2ARRAYOID,
	                keyed ? key_array : anchor_array,
	                keyed ? TIMESTAMPTZOID : anchor_type};
	f->plans[1] = ce::prepare_kept(sql, 7, types, keyed ? CURSOR_OPT_CUSTOM_PLAN : 0);
	return f->plans[1];
}

// Owns nothing C++ (palloc'd; the comparison may throw PostgreSQL's
// error): inside SPI. The keys of a batch (keys, an array of key_type)
// that this shard has rows, a base or deltas of, NULL when none: the batch
// sorted in the key type's btree order, then merged with the keys each
// table of the shard has from the batch's least key to its greatest, read
// in that order (shard_reconcile_plan, 2). A shard holds a few of a batch's
// keys: looking for every key of the batch in each of its tables made a
// batch cost its keys times the shards (doc/bench/citus.md, "(i) Keyed by
// another column"). For a key type with no collation (its order is the same
// on every node and in every index: the integers, numeric, uuid) whose
// default btree operator family has <= and >=; keys is returned whole for
// any other.
Datum shard_keys(ShardFold *f, TriggerData *td, Datum keys, Oid key_type, Oid anchor_type, bool *none) {
	*none = false;
	TypeCacheEntry *type = lookup_type_cache(key_type, TYPECACHE_CMP_PROC_FINFO | TYPECACHE_BTREE_OPFAMILY);
	if (type_is_collatable(key_type) || !OidIsValid(type->cmp_proc_finfo.fn_oid) || !OidIsValid(type->btree_opf) ||
	    !OidIsValid(get_opfamily_member(type->btree_opf, key_type, key_type, BTGreaterEqualStrategyNumber)) ||
	    !OidIsValid(get_opfamily_member(type->btree_opf, key_type, key_type, BTLessEqualStrategyNumber)))
		return keys;
	Datum *batch;
	bool *nulls;
	int n;
	deconstruct_array(DatumGetArrayTypeP(keys), key_type, type->typlen, type->typbyval, type->typalign, &batch, &nulls,
	                  &n);
	int m = 0;
	for (int i = 0; i < n; i++)
		if (!nulls[i])
			batch[m++] = batch[i];
	if (m == 0) {
		*none = true;
		return keys;
	}
	FmgrInfo *cmp = &type->cmp_proc_finfo;
	auto order = [cmp](Datum x, Datum y) { return DatumGetInt32(FunctionCall2Coll(cmp, InvalidOid, x, y)); };
	std::sort(batch, batch + m, [&order](Datum x, Datum y) { return order(x, y) < 0; });
	Datum range[2] = {batch[0], batch[m - 1]};
	if (SPI_execute_plan(shard_reconcile_plan(f, td, 2, key_type, anchor_type), range, nullptr, true, 0) !=
	    SPI_OK_SELECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading a shard's keys of a batch failed")));
	// (no key of the shard's is NULL: the range excludes it)
	uint64 have = SPI_processed;
	auto *mine = static_cast<Datum *>(palloc(sizeof(Datum) * std::max<uint64>(1, std::min<uint64>(have, m))));
	int k = 0;
	uint64 j = 0;
	for (int i = 0; i < m && j < have;) {
		bool isnull;
		int32 o = order(batch[i], SPI_getbinval(SPI_tuptable->vals[j], SPI_tuptable->tupdesc, 1, &isnull));
		if (o == 0)
			mine[k++] = batch[i];
		i += o <= 0;
		j += o >= 0;
	}
	if (k == 0) {
		*none = true;
		return keys;
	}
	return PointerGetDatum(construct_array(mine, k, key_type, type->typlen, type->typbyval, type->typalign));
}

// Owns nothing C++: inside SPI, as the table's owner. A row of the run
// table that asks for the shard's next keys (pick: how many; past, w_from,
// every: where from, the range of event times, and whether every key with
// a base counts: shard_reconcile_plan, 3): their array, in key order,
// copied out of SPI (0 when there is none).
Datum shard_pick(ShardFold *f, TriggerData *td, Datum pick, Datum w, const int *att, Oid key_type, Oid anchor_type) {
	TupleDesc desc = RelationGetDescr(td->tg_relation);
	bool isnull[3];
	Datum args[5] = {heap_getattr(td->tg_trigtuple, att[8], desc, &isnull[0]), w,
	                 heap_getattr(td->tg_trigtuple, att[9], desc, &isnull[1]),
	                 heap_getattr(td->tg_trigtuple, att[10], desc, &isnull[2]), pick};
	if (isnull[1] || isnull[2])
		ereport(ERROR, (errcode(ERRCODE_NOT_NULL_VIOLATION),
		                errmsg("a row of the run table %s that picks keys needs w_from and every",
		                       RelationGetRelationName(td->tg_relation))));
	if (DatumGetInt32(pick) <= 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		                errmsg("a row of the run table %s picks %d keys", RelationGetRelationName(td->tg_relation),
		                       DatumGetInt32(pick)),
		                errhint("pick is the number of keys the shard returns, at least 1.")));
	char nulls[5] = {isnull[0] ? 'n' : ' ', ' ', ' ', ' ', ' '};
	if (SPI_execute_plan(shard_reconcile_plan(f, td, 3, key_type, anchor_type), args, nulls, true, 0) !=
	        SPI_OK_SELECT ||
	    SPI_processed != 1)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("choosing a shard's keys of a batch failed")));
	bool none;
	Datum found = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &none);
	return none ? (Datum)0 : SPI_datumTransfer(found, false, -1);
}

// Owns nothing C++: as the table's owner. The row 'row' of the run table,
// with what this shard's part of the batch found.
HeapTuple shard_reconcile_run(ShardFold *f, TriggerData *td, int32 id) {
	Relation rel = td->tg_relation;
	TupleDesc desc = RelationGetDescr(rel);
	static const char *const names[12] = {"anchor", "w",    "keys", "found_keys", "cached", "truth",
	                                      "busy",   "pick", "past", "w_from",     "every",  "horizon"};
	bool keyed = run_keyed(td);
	int att[12];
	for (int i = 0; i < (keyed ? 12 : 11); i++) {
		att[i] = SPI_fnumber(desc, names[i]);
		if (att[i] <= 0)
			ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
			                errmsg("the run table %s of tracked counter %d has no column \"%s\"",
			                       RelationGetRelationName(rel), id, names[i])));
	}
	bool isnull[3];
	Datum anchor = heap_getattr(td->tg_trigtuple, att[0], desc, &isnull[0]);
	Datum w = heap_getattr(td->tg_trigtuple, att[1], desc, &isnull[1]);
	Datum keys = heap_getattr(td->tg_trigtuple, att[2], desc, &isnull[2]);
	if (isnull[0] || isnull[1] || isnull[2])
		ereport(ERROR,
		        (errcode(ERRCODE_NOT_NULL_VIOLATION),
		         errmsg("a row of the run table of tracked counter %d needs its anchor, watermark and keys", id)));
	Oid anchor_type = TupleDescAttr(desc, att[0] - 1)->atttypid;
	Oid key_type = get_element_type(TupleDescAttr(desc, att[2] - 1)->atttypid);
	if (SPI_connect() != SPI_OK_CONNECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
	if (!f->valid) {
		const char *tables[3] = {td->tg_trigger->tgargs[2], td->tg_trigger->tgargs[6], td->tg_trigger->tgargs[7]};
		ce::citus::Place place = ce::citus::shard_trigger_fill(f, rel, tables, 3);
		if (place == ce::citus::Place::no_citus || place == ce::citus::Place::missing)
			ereport(ERROR,
			        (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			         errmsg("the trigger %s on %s belongs to tracked counter %d, whose table or state has no "
			                "shard on this node colocated with %s",
			                td->tg_trigger->tgname, RelationGetRelationName(rel), id, RelationGetRelationName(rel)),
			         errhint("The counter was untracked, or its state was moved apart from its table: untrack "
			                 "it and track it again.")));
	}
	if (f->shell)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
		                errmsg("the run table %s of tracked counter %d is written on its shards only",
		                       RelationGetRelationName(rel), id),
		                errdetail("Its reconciliation inserts a row for each shard through Citus.")));
	bool pick_null;
	Datum pick = heap_getattr(td->tg_trigtuple, att[7], desc, &pick_null);
	if (!pick_null) { // the batch's keys are chosen: this shard's next ones
		Datum found = shard_pick(f, td, pick, w, att, key_type, anchor_type);
		bool found_null = found == (Datum)0;
		int col = att[3];
		SPI_finish();
		return heap_modify_tuple_by_cols(td->tg_trigtuple, desc, 1, &col, &found, &found_null);
	}
	// keyed by the distribution column, the row holds this shard's keys;
	// else those of the batch this shard has anything of
	bool none = false;
	if (!keyed)
		keys = shard_keys(f, td, keys, key_type, anchor_type, &none);
	if (none) { // none of the batch's keys is on this shard: nothing found, nothing to repair
		SPI_finish();
		return td->tg_trigtuple;
	}
	bool no_horizon = true;
	Datum horizon = keyed ? heap_getattr(td->tg_trigtuple, att[11], desc, &no_horizon) : (Datum)0;
	Datum lock_args[3] = {keys, w, horizon};
	char lock_nulls[3] = {' ', ' ', no_horizon ? 'n' : ' '};
	if (SPI_execute_plan(shard_reconcile_plan(f, td, 0, key_type, anchor_type), lock_args, lock_nulls, false, 1) !=
	        SPI_OK_SELECT ||
	    SPI_processed != 1)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("locking a tracked counter's deltas failed")));
	Datum args[7] = {keys, w, 0, 0, 0, 0, keyed ? horizon : anchor};
	char nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', keyed && no_horizon ? 'n' : ' '};
	for (int i = 0; i < 4; i++) {
		bool n;
		args[2 + i] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, i + 1, &n);
		nulls[2 + i] = n ? 'n' : ' ';
	}
	if (SPI_execute_plan(shard_reconcile_plan(f, td, 1, key_type, anchor_type), args, nulls, false, 0) !=
	        SPI_OK_SELECT ||
	    SPI_processed != 1)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reconciling a tracked counter's shard failed")));
	int cols[4] = {att[3], att[4], att[5], att[6]};
	Datum values[4];
	bool found_null[4];
	for (int i = 0; i < 4; i++) {
		Datum v = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, i + 1, &found_null[i]);
		values[i] = found_null[i] ? (Datum)0 : SPI_datumTransfer(v, false, -1);
	}
	SPI_finish();
	return heap_modify_tuple_by_cols(td->tg_trigtuple, desc, 4, cols, values, found_null);
}

// counter_internal.tracked_shard_reconcile() (1.8): see above. PUBLIC may
// execute it (Citus makes it again on a moved or split shard as the table's
// owner); it runs as the table's owner for a caller with that owner's
// rights only (the batch function, as the owner), and
// counter_internal.citus_trigger_creator refuses it to anyone but the
// table's owner.
CE_FUNCTION(counter_tracked_shard_reconcile) {
	if (!CALLED_AS_TRIGGER(fcinfo))
		throw ce::Error("39P01", "counter_internal.tracked_shard_reconcile must be called as a trigger");
	auto *td = reinterpret_cast<TriggerData *>(fcinfo->context);
	if (!TRIGGER_FIRED_BEFORE(td->tg_event) || !TRIGGER_FIRED_FOR_ROW(td->tg_event) ||
	    !TRIGGER_FIRED_BY_INSERT(td->tg_event) || (td->tg_trigger->tgnargs != 8 && !run_keyed(td)) ||
	    strcmp(td->tg_trigger->tgargs[1], "citus") != 0)
		throw ce::Error("39P01", "counter_internal.tracked_shard_reconcile must be a BEFORE INSERT row trigger with "
		                         "the arguments counter.track gives it");
	int32 id = ce::pg_guard([td] { return pg_strtoint32(td->tg_trigger->tgargs[0]); });
	if (!ce::citus::caller_has_owner_rights(RelationGetRelid(td->tg_relation)))
		throw ce::Error("42501", ce::format("only the owner of tracked counter %d reconciles it", id), "",
		                "counter.reconcile runs it, as the counter's owner.");
	ShardFold *f = ce::citus::shard_trigger(td->tg_trigger->tgoid, td->tg_relation);
	Oid owner = f->valid ? f->owner : td->tg_relation->rd_rel->relowner;
	HeapTuple row = ce::as_owner(owner, [f, td, id] { return shard_reconcile_run(f, td, id); });
	return PointerGetDatum(row);
}

// counter_internal.tracked_fold(counter id): see above.
// counter_internal.tracked_shard_fold() (1.8): the trigger of a counter on
// a table Citus distributes (the shard path above, alone). PUBLIC may
// execute it: Citus makes it again on a moved or split shard as the table's
// owner. It does only what that owner could: it writes, as the owner, the
// delta table its arguments name, from the statement's rows; and
// counter_internal.citus_trigger_creator refuses it to anyone but the
// table's owner (a role with TRIGGER on the table would make the owner's
// writes otherwise).
CE_FUNCTION(counter_tracked_shard_fold) {
	if (!CALLED_AS_TRIGGER(fcinfo))
		throw ce::Error("39P01", "counter_internal.tracked_shard_fold must be called as a trigger");
	auto *td = reinterpret_cast<TriggerData *>(fcinfo->context);
	if (!TRIGGER_FIRED_AFTER(td->tg_event) || (td->tg_trigger->tgnargs < 9 || td->tg_trigger->tgnargs > 13) ||
	    strcmp(td->tg_trigger->tgargs[1], "citus") != 0)
		throw ce::Error("39P01", "counter_internal.tracked_shard_fold must be an AFTER trigger with the arguments "
		                         "counter.track gives it");
	shard_fold(td);
	return PointerGetDatum(nullptr);
}

CE_FUNCTION(counter_tracked_fold) {
	if (!CALLED_AS_TRIGGER(fcinfo))
		throw ce::Error("39P01", "counter_internal.tracked_fold must be called as a trigger");
	auto *td = reinterpret_cast<TriggerData *>(fcinfo->context);
	if (!TRIGGER_FIRED_AFTER(td->tg_event))
		throw ce::Error("39P01", "counter_internal.tracked_fold must be an AFTER trigger");
	bool for_row = TRIGGER_FIRED_FOR_ROW(td->tg_event);
	if (for_row && ce::source::moving_rows()) // a move between partitions (replica mode) changes no row
		return PointerGetDatum(nullptr);
	if (td->tg_trigger->tgnargs >= 2 && strcmp(td->tg_trigger->tgargs[1], "citus") == 0) {
		shard_fold(td); // a counter on a table Citus distributes (above)
		return PointerGetDatum(nullptr);
	}
	if (td->tg_trigger->tgnargs != 1) // a trigger made by 1.0 or 1.1
		throw ce::Error("55000", "this tracked counter's trigger was made by an older version of counter_ext",
		                ce::format("The library is version %s.", COUNTER_EXT_VERSION),
		                "Run ALTER EXTENSION counter_ext UPDATE in this database.");
	if (fold_caches == nullptr)
		fold_caches = new std::unordered_map<Oid, FoldCache>();
	if (!fold_callback_registered) {
		ce::pg_guard([] { CacheRegisterRelcacheCallback(fold_invalidate, (Datum)0); });
		fold_callback_registered = true;
	}
	int32 id = ce::pg_guard([td] { return pg_strtoint32(td->tg_trigger->tgargs[0]); });
	Relation rel = td->tg_relation;
	Oid tgoid = td->tg_trigger->tgoid;
	if (fold_caches->size() >= cache_limit && fold_caches->find(tgoid) == fold_caches->end()) {
		for (auto &entry : *fold_caches)
			ce::pg_guard([&entry] { fold_release(&entry.second); });
		fold_caches->clear();
	}
	FoldCache *c = &(*fold_caches)[tgoid]; // a new entry is zeroed
	if (!c->valid || c->id != id) {
		ce::pg_guard([c] { fold_release(c); });
		MemoryContext context = ce::pg_guard(
		    [] { return AllocSetContextCreate(CacheMemoryContext, "counter_ext tracked fold", ALLOCSET_SMALL_SIZES); });
		Counter k = load_counter(Int32GetDatum(id), true, context);
		// The source, or a partition of it (a replicated counter's row
		// triggers are cloned onto the partitions the apply worker writes).
		if (!ce::pg_guard([&k, rel] { return ce::source::accepts(rel, k.source); }))
			ce::pg_guard([&k, rel, td] {
				ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				                errmsg("the trigger on %s names tracked counter \"%s\", whose source is %s",
				                       RelationGetRelationName(rel), k.name, qualified_name(k.source)),
				                errdetail("A tracked counter's triggers count the rows of its source table and of "
				                          "its partitions only."),
				                errhint("Drop the trigger %s from %s.", td->tg_trigger->tgname,
				                        RelationGetRelationName(rel))));
			});
		ce::as_owner(k.owner, [c, &k, rel, context] { fold_fill(c, k, rel, context); });
	}

	ce::OwnerSwitch as = ce::pg_guard([c] { return ce::owner_enter(c->owner); });
	try {
		if (TRIGGER_FIRED_BY_TRUNCATE(td->tg_event)) {
			if (c->buffered) { // what is published goes to the delta table first, and goes with it
				Counter k = load_counter(Int32GetDatum(c->id), true, CurrentMemoryContext);
				flush_counter(k, true);
				ce::buffer::drop_local(c->id);
			}
			ce::pg_guard([c] { truncate_state(c); });
		} else if (for_row) {
			ce::tracked::Fold fold;
			MemoryContext keep = CurrentMemoryContext;
			HeapTuple added = TRIGGER_FIRED_BY_INSERT(td->tg_event)   ? td->tg_trigtuple
			                  : TRIGGER_FIRED_BY_UPDATE(td->tg_event) ? td->tg_newtuple
			                                                          : nullptr;
			HeapTuple removed = TRIGGER_FIRED_BY_INSERT(td->tg_event) ? nullptr : td->tg_trigtuple;
			for (auto [tuple, sign] : {std::pair<HeapTuple, int64>{added, 1}, {removed, -1}}) {
				if (tuple == nullptr)
					continue;
				Row row = ce::pg_guard([c, rel, tuple, keep] { return tuple_row(c, rel, tuple, keep); });
				if (row.counted)
					fold.add(row.key, row.bucket, sign);
			}
			std::vector<ce::tracked::FoldEntry> entries = fold.nonzero();
			buffer_fold(c, entries);
			if (!entries.empty())
				ce::pg_guard([c, &entries] { write_deltas(c, entries.data(), entries.size()); });
		} else {
			ce::tracked::Fold fold;
			if (!TRIGGER_FIRED_BY_DELETE(td->tg_event) && td->tg_newtable != nullptr)
				fold_table(c, rel, td->tg_newtable, 1, fold);
			if (!TRIGGER_FIRED_BY_INSERT(td->tg_event) && td->tg_oldtable != nullptr)
				fold_table(c, rel, td->tg_oldtable, -1, fold);
			std::vector<ce::tracked::FoldEntry> entries = fold.nonzero();
			buffer_fold(c, entries);
			if (!entries.empty())
				ce::pg_guard([c, &entries] { write_deltas(c, entries.data(), entries.size()); });
		}
	} catch (...) {
		ce::owner_leave(as);
		throw;
	}
	ce::owner_leave(as);
	return PointerGetDatum(nullptr);
}

// ---------------------------------------------------------------------------
// counter.add(name, key, delta, at), counter.value(name, key) and
// counter.values_of(name, keys): plans kept per counter and backend.

namespace {

// What counter.value needs to read a key's rows without a query
// (read_direct): looked up once per counter, forgotten with the catalog rows
// (catalog_invalidate). The state tables' OIDs are checked at every read
// (dropped, or made again, they are looked up by name again).
struct DirectRead {
	bool checked = false; // filled since the last invalidation
	bool usable = false;  // the key type is compared by built-in code only
	Oid nsp = InvalidOid; // counter_internal
	Oid base = InvalidOid;
	Oid delta = InvalidOid;
	AttrNumber base_att = InvalidAttrNumber;
	AttrNumber delta_att = InvalidAttrNumber;
	Oid opfamily = InvalidOid; // the key type's default btree family
	RegProcedure eq = InvalidOid;
	// counter_internal.tracked_state_written, whose triggers on both tables a
	// kept value needs (counter_ext/read_cache.hpp); InvalidOid before 1.7
	Oid written_fn = InvalidOid;
	// both tables had the trigger, enabled, when read last; forgotten with a
	// relcache invalidation of either (catalog_invalidate)
	bool verified = false;
	// The next xid when 'verified' last became true: a writer that wrote with
	// the trigger missing or disabled ended before the DDL that made it (or
	// enabled it again) committed (CREATE and ENABLE TRIGGER wait for the
	// table's writers), so below this. A kept value is kept and given only
	// to snapshots whose xmin is past it (read_cache::lookup, store).
	uint64 fence = 0;
};

struct KeptPlans {
	SPIPlanPtr add = nullptr;
	SPIPlanPtr value = nullptr;
	SPIPlanPtr values = nullptr;
	SPIPlanPtr flush = nullptr;
	DirectRead direct;
};
std::unordered_map<int32, KeptPlans> *kept_plans = nullptr;

KeptPlans *plans_of(int32 id) {
	if (kept_plans == nullptr)
		kept_plans = new std::unordered_map<int32, KeptPlans>();
	if (kept_plans->size() >= cache_limit && kept_plans->find(id) == kept_plans->end()) {
		for (auto &entry : *kept_plans)
			ce::pg_guard([&entry] {
				for (SPIPlanPtr plan : {entry.second.add, entry.second.value, entry.second.values, entry.second.flush})
					if (plan != nullptr)
						SPI_freeplan(plan);
			});
		kept_plans->clear();
	}
	return &(*kept_plans)[id];
}

// The catalog rows counter.add, value and values_of need, kept per backend
// by name. counter.track, untrack and the other writers of the rows an entry
// holds send a relcache invalidation of counter.tracked
// (counter_internal.tracked_invalidate); the callback marks the cache stale
// and the next lookup empties it. Bounded by cache_limit.
struct NameCache {
	std::unordered_map<std::string, Counter> rows;
	std::pair<const std::string, Counter> *last = nullptr; // the row found last (in rows)
	MemoryContext context = nullptr;
	bool stale = false;
	bool worker_rows = false; // a row found by worker_counter is kept
};
NameCache *name_cache = nullptr;
Oid catalog_relid = InvalidOid;

void catalog_invalidate(Datum, Oid relid) {
	if (kept_plans != nullptr)
		for (auto &entry : *kept_plans) {
			DirectRead &d = entry.second.direct;
			if (relid == InvalidOid || relid == d.base || relid == d.delta)
				d.verified = false;
		}
	if (name_cache != nullptr && name_cache->worker_rows && relid != InvalidOid)
		for (auto &entry : name_cache->rows)
			if (entry.second.described_by ==
			    relid) // a worker node's counter: the table of its trigger changed (untrack drops it)
				name_cache->stale = true;
	if (relid == InvalidOid || relid == catalog_relid) {
		ce::read_cache::forget();
		if (name_cache != nullptr)
			name_cache->stale = true;
		if (kept_plans != nullptr)
			for (auto &entry : *kept_plans)
				entry.second.direct.checked = false;
		catalog_relid = InvalidOid;
		fold_invalidate((Datum)0, InvalidOid);
	}
}

Counter find_counter(FunctionCallInfo fcinfo) {
	if (PG_ARGISNULL(0))
		throw ce::Error(ce::sqlstate::null_value_not_allowed, "counter name must not be NULL");
	if (name_cache == nullptr) {
		name_cache = new NameCache();
		name_cache->context = ce::pg_guard([] {
			return AllocSetContextCreate(CacheMemoryContext, "counter_ext tracked catalog", ALLOCSET_SMALL_SIZES);
		});
		ce::pg_guard([] { CacheRegisterRelcacheCallback(catalog_invalidate, (Datum)0); });
	}
	if (catalog_relid == InvalidOid)
		catalog_relid = ce::pg_guard([] {
			Oid nsp = get_namespace_oid("counter", false);
			return get_relname_relid("tracked", nsp);
		});
	// the name first: detoasting it may take a lock, and with it invalidations
	const text *arg = ce::pg_guard([fcinfo] { return PG_GETARG_TEXT_PP(0); });
	const char *bytes = VARDATA_ANY(arg);
	size_t len = VARSIZE_ANY_EXHDR(arg);
	if (name_cache->stale || name_cache->rows.size() >= cache_limit) {
		name_cache->last = nullptr;
		name_cache->worker_rows = false;
		name_cache->rows.clear();
		ce::pg_guard([] { MemoryContextReset(name_cache->context); });
		name_cache->stale = false;
	}
	// the hot path: the same counter as the last call, found without hashing
	auto *last = name_cache->last;
	if (last != nullptr && last->first.size() == len && memcmp(last->first.data(), bytes, len) == 0)
		return last->second;
	std::string name(bytes, len);
	auto found = name_cache->rows.find(name);
	if (found != name_cache->rows.end()) {
		name_cache->last = &*found;
		return found->second;
	}
	Counter c = load_counter(PG_GETARG_DATUM(0), false, name_cache->context);
	if (!name_cache->stale) { // an invalidation while reading: do not keep what was read
		name_cache->last = &*name_cache->rows.emplace(name, c).first;
		name_cache->worker_rows = name_cache->worker_rows || OidIsValid(c.described_by);
	}
	return c;
}

} // namespace

// counter_internal.tracked_worker_counters(): on a Citus node, the
// application-mode counters an inbox describes there (worker_counters):
// what counter.tracked_values reads on a worker node, whose copy of
// counter.tracked is empty. No rows without Citus.
CE_FUNCTION(counter_tracked_worker_counters) {
	ce::pg_guard([fcinfo] {
		InitMaterializedSRF(fcinfo, 0);
		auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		if (SPI_execute("SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL", true, 1) !=
		        SPI_OK_SELECT ||
		    SPI_processed != 1)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading pg_class failed")));
		bool isnull;
		if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
			worker_counters(nullptr, CurrentMemoryContext, [rsinfo](const Counter &w) {
				NameData schema;
				namestrcpy(&schema, w.state_schema);
				Datum values[8] = {CStringGetTextDatum(w.name), Int32GetDatum(w.id),
				                   ObjectIdGetDatum(w.source),  ObjectIdGetDatum(w.owner),
				                   NameGetDatum(&schema),       BoolGetDatum(w.anchor_column != nullptr),
				                   BoolGetDatum(w.buffered),    ObjectIdGetDatum(w.key_type)};
				bool nulls[8] = {false, false, false, false, false, false, false, false};
				tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
			});
		SPI_finish();
	});
	return (Datum)0;
}

// counter_internal.tracked_invalidate(): every backend forgets the catalog
// rows it keeps (sent when the transaction commits).
CE_FUNCTION(counter_tracked_invalidate) {
	(void)fcinfo;
	ce::read_cache::note_write(ce::read_cache::global);
	ce::pg_guard([] {
		Oid nsp = get_namespace_oid("counter", false);
		CacheInvalidateRelcacheByRelid(get_relname_relid("tracked", nsp));
	});
	PG_RETURN_VOID();
}

// counter_internal.tracked_state_written(counter id): the trigger on a
// counter's base and delta tables that counts their writers
// (counter_ext/read_cache.hpp): BEFORE, for each statement, ENABLE ALWAYS.
CE_FUNCTION(counter_tracked_state_written) {
	if (!CALLED_AS_TRIGGER(fcinfo))
		throw ce::Error("39P01", "counter_internal.tracked_state_written must be called as a trigger");
	const TriggerData *td = reinterpret_cast<TriggerData *>(fcinfo->context);
	if (td->tg_trigger->tgnargs != 1)
		throw ce::Error("39P01", "counter_internal.tracked_state_written takes the counter id as its one argument");
	if (TRIGGER_FIRED_FOR_ROW(td->tg_event))
		throw ce::Error("39P01", "counter_internal.tracked_state_written must be a statement trigger");
	ce::read_cache::note_write(static_cast<int32>(strtol(td->tg_trigger->tgargs[0], nullptr, 10)));
	return PointerGetDatum(nullptr);
}

// counter_internal.tracked_read_cache(): this session's reads of a kept
// value (hits) and lookups that found none usable (misses).
CE_FUNCTION(counter_tracked_read_cache) {
	ce::read_cache::Stats st = ce::read_cache::stats();
	return ce::pg_guard([fcinfo, st] {
		TupleDesc desc;
		if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
			ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED), errmsg("a row type is needed")));
		desc = BlessTupleDesc(desc);
		Datum values[2] = {Int64GetDatum(static_cast<int64>(st.hits)), Int64GetDatum(static_cast<int64>(st.misses))};
		bool nulls[2] = {false, false};
		return HeapTupleGetDatum(heap_form_tuple(desc, values, nulls));
	});
}

namespace {

// A key's value is read as the numeric sum of its base and deltas, held
// within [-INT64_MAX, INT64_MAX] (ce::buffer::saturating_add): no sum, however
// large the deltas a writer added, makes a read fail.
constexpr const char *bounded_open = "LEAST(GREATEST("; // syntax, not functions: never qualified
constexpr const char *bounded_close = ", -9223372036854775807), 9223372036854775807)::pg_catalog.int8";

// Owns nothing C++: runs as the owner, between SPI_connect and SPI_finish.
SPIPlanPtr value_plan(const Counter &c, SPIPlanPtr *slot, bool many) {
	if (*slot != nullptr)
		return *slot;
	char *eq = ce::keys::qualified_operator(c.key_type, BTEqualStrategyNumber);
	char *base = state_table(c, "base");
	char *delta = state_table(c, "delta");
	Oid types[1] = {c.key_type};
	char *sql;
	if (c.distributed) {
		// Citus: base and delta are distributed colocated with the source,
		// so one statement reads each key's base and deltas on its shard, in
		// one snapshot there (a router query for one key; for many, the
		// union is pushed down to the shards and grouped there)
		if (many) {
			types[0] = get_array_type(c.key_type);
			if (!OidIsValid(types[0]))
				ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("tracked key type has no array type")));
		}
		char *cond = many ? psprintf("%s ANY ($1)", eq) : psprintf("%s $1", eq);
		// (anchored by the distribution column, keyed by another: the
		// union names the anchor, so that Citus pushes it down whole to
		// every shard, where each key has a base and deltas)
		bool anchored = c.anchor_column != nullptr;
		// buffered and anchored (1.8): each shard's buffered amount of the
		// key, one more part of the union, read on each shard's node at its
		// least anchor (tracked_anchor_pending)
		char *anchors = anchored ? state_table(c, "anchor") : nullptr;
		char *pending =
		    anchored && c.buffered && !many
		        ? psprintf(
		              " UNION ALL SELECT $1, a.anchor, counter_internal.tracked_anchor_pending(%s::pg_catalog.regclass,"
		              " %s::pg_catalog.regclass, a.anchor, $1)::pg_catalog.numeric FROM %s a",
		              quote_literal_cstr(delta), quote_literal_cstr(anchors), anchors)
		        : pstrdup("");
		char *state =
		    psprintf("SELECT b.key, %s b.base::pg_catalog.numeric AS v FROM %s b WHERE b.key %s"
		             " UNION ALL SELECT d.key, %s d.delta::pg_catalog.numeric FROM %s d WHERE d.key %s%s",
		             anchored ? "b.anchor," : "", base, cond, anchored ? "d.anchor," : "", delta, cond, pending);
		// buffered (1.8), keyed by the distribution column: what the node
		// that holds the key's shard has in its buffer, added there
		// (tracked_shard_pending runs where Citus routes the query;
		// values_of reads such a counter key by key)
		if (!many)
			sql = psprintf("SELECT %scoalesce(pg_catalog.sum(z.v), 0)%s%s FROM (%s) z", bounded_open,
			               c.buffered && !anchored
			                   ? psprintf(" OPERATOR(pg_catalog.+) counter_internal.tracked_shard_pending(%s::"
			                              "pg_catalog.regclass, $1)",
			                              quote_literal_cstr(delta))
			                   : "",
			               bounded_close, state);
		else
			sql = psprintf("WITH x AS MATERIALIZED (SELECT z.key, pg_catalog.sum(z.v) AS s FROM (%s) z GROUP BY z.key)"
			               " SELECT u.o, %scoalesce(x.s, 0)%s FROM pg_catalog.unnest($1) WITH ORDINALITY AS u(k, o)"
			               " LEFT JOIN x ON x.key %s u.k",
			               state, bounded_open, bounded_close, eq);
		*slot = ce::prepare_kept(sql, 1, types);
		return *slot;
	}
	if (!many) {
		sql =
		    psprintf("SELECT %scoalesce((SELECT b.base FROM %s b WHERE b.key %s $1), 0)::pg_catalog.numeric"
		             " OPERATOR(pg_catalog.+) coalesce((SELECT pg_catalog.sum(d.delta) FROM %s d WHERE d.key %s $1), 0)"
		             "%s",
		             bounded_open, base, eq, delta, eq, bounded_close);
	} else {
		types[0] = get_array_type(c.key_type);
		if (!OidIsValid(types[0]))
			ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("tracked key type has no array type")));
		sql = psprintf(
		    "SELECT u.o, %scoalesce((SELECT b.base FROM %s b WHERE b.key %s u.k), 0)::pg_catalog.numeric"
		    " OPERATOR(pg_catalog.+) coalesce((SELECT pg_catalog.sum(d.delta) FROM %s d WHERE d.key %s u.k), 0)"
		    "%s FROM pg_catalog.unnest($1) WITH ORDINALITY AS u(k, o)",
		    bounded_open, base, eq, delta, eq, bounded_close);
	}
	*slot = ce::prepare_kept(sql, 1, types);
	return *slot;
}

// A read without a query: counter.value reads the key's base row and delta
// rows through the primary keys of the state tables, as an index scan of the
// plan above would, under the active snapshot (SPI's read-only execution
// used the same), with AccessShareLock on each table and index held to the
// end of the transaction. No code of the owner's or anyone's runs: only a
// key type of initdb's whose default btree class is initdb's is read so (its
// equality and comparison are built-in functions; a container type, an enum,
// a type of an extension may call other code and are read by the plan).

// Owns nothing C++. Fills d for counter c.
void direct_fill(const Counter &c, DirectRead *d) {
	*d = DirectRead{};
	Oid type = getBaseType(c.key_type); // a domain's rows compare as its base type
	if (type < FirstNormalObjectId && get_typtype(type) == TYPTYPE_BASE && !OidIsValid(get_element_type(type))) {
		TypeCacheEntry *t = lookup_type_cache(type, TYPECACHE_EQ_OPR | TYPECACHE_CMP_PROC | TYPECACHE_BTREE_OPFAMILY);
		RegProcedure eq = OidIsValid(t->eq_opr) ? get_opcode(t->eq_opr) : InvalidOid;
		d->usable = OidIsValid(eq) && eq < FirstNormalObjectId && OidIsValid(t->cmp_proc) &&
		            t->cmp_proc < FirstNormalObjectId && OidIsValid(t->btree_opf) && t->btree_opf < FirstNormalObjectId;
		d->eq = eq;
		d->opfamily = t->btree_opf;
	}
	d->nsp = get_namespace_oid("counter_internal", false);
	d->written_fn = LookupFuncName(
	    list_make2(makeString(pstrdup("counter_internal")), makeString(pstrdup("tracked_state_written"))), 0, nullptr,
	    true);
	d->checked = true;
}

// Whether 'rel' has the trigger that counts its writers for counter id
// (src/sql/31_tracked_code.sql, tracked_state_triggers): BEFORE, for each
// statement, on INSERT, UPDATE, DELETE and TRUNCATE, enabled ALWAYS, calling
// tracked_state_written(id), with no WHEN and no column list.
bool counts_writers(Relation rel, int32 id, Oid fn) {
	const TriggerDesc *td = rel->trigdesc;
	if (td == nullptr || !OidIsValid(fn))
		return false;
	for (int i = 0; i < td->numtriggers; i++) {
		const Trigger &t = td->triggers[i];
		if (t.tgfoid == fn && t.tgnargs == 1 && t.tgqual == nullptr && t.tgnattr == 0 &&
		    strtol(t.tgargs[0], nullptr, 10) == id && t.tgenabled == TRIGGER_FIRES_ALWAYS &&
		    TRIGGER_FOR_BEFORE(t.tgtype) && !TRIGGER_FOR_ROW(t.tgtype) && TRIGGER_FOR_INSERT(t.tgtype) &&
		    TRIGGER_FOR_UPDATE(t.tgtype) && TRIGGER_FOR_DELETE(t.tgtype) && TRIGGER_FOR_TRUNCATE(t.tgtype))
			return true;
	}
	return false;
}

// Owns nothing C++. Opens counter_internal.tracked_<id>_<part> with
// AccessShareLock: by the OID kept in *relid while it names that table,
// else by its name (keeping the new OID). Raises 42P01 when there is none
// (the counter was untracked meanwhile), as the plan's read did.
Relation open_state(int32 id, const char *part, const DirectRead *d, Oid *relid) {
	char *name = psprintf("tracked_%d_%s", id, part);
	if (OidIsValid(*relid)) {
		Relation rel = try_table_open(*relid, AccessShareLock);
		if (rel != nullptr && RelationGetNamespace(rel) == d->nsp && strcmp(RelationGetRelationName(rel), name) == 0)
			return rel;
		if (rel != nullptr)
			table_close(rel, AccessShareLock);
	}
	*relid = RangeVarGetRelid(makeRangeVar(pstrdup("counter_internal"), name, -1), AccessShareLock, true);
	if (!OidIsValid(*relid))
		ereport(ERROR,
		        (errcode(ERRCODE_UNDEFINED_TABLE), errmsg("relation \"counter_internal.%s\" does not exist", name),
		         errdetail("The tracked counter was untracked while it was read."),
		         errhint("Read it again: it is gone, or tracked anew.")));
	return table_open(*relid, NoLock);
}

// Owns nothing C++. Adds to *sum column 'att' (bigint, NOT NULL) of the rows
// of 'heap' whose key equals 'key', found through its primary key (whose
// first column is the key). False, with nothing read, when that index is not
// the btree of the key type's default family (then the plan reads).
bool sum_rows(Relation heap, AttrNumber att, Datum key, const DirectRead *d, Snapshot snapshot, __int128 *sum) {
	list_free(RelationGetIndexList(heap)); // fills rd_pkindex
	Oid pk = heap->rd_pkindex;
	if (!OidIsValid(pk))
		return false;
	Relation index = index_open(pk, AccessShareLock);
	if (index->rd_rel->relam != BTREE_AM_OID || index->rd_index->indkey.values[0] != 1 ||
	    index->rd_opfamily[0] != d->opfamily) {
		index_close(index, NoLock);
		return false;
	}
	ScanKeyData skey;
	ScanKeyEntryInitialize(&skey, 0, 1, BTEqualStrategyNumber, InvalidOid, index->rd_indcollation[0], d->eq, key);
	IndexScanDesc scan = ce::compat::index_begin(heap, index, snapshot, 1);
	index_rescan(scan, &skey, 1, nullptr, 0);
	TupleTableSlot *slot = table_slot_create(heap, nullptr);
	while (index_getnext_slot(scan, ForwardScanDirection, slot)) {
		bool isnull;
		Datum v = slot_getattr(slot, att, &isnull);
		if (!isnull)
			*sum += DatumGetInt64(v);
		CHECK_FOR_INTERRUPTS();
	}
	ExecDropSingleTupleTableSlot(slot);
	index_endscan(scan);
	index_close(index, NoLock);
	return true;
}

// Owns nothing C++. The value of 'key' (of c's key type) in c's state
// tables into *result, as the plan computes it: the numeric sum of base and
// deltas held within [-INT64_MAX, INT64_MAX] (bounded_open/close). False
// when the key type is not read directly.
bool read_direct(const Counter &c, DirectRead *d, Datum key, int64 *result) {
	if (c.distributed) // the coordinator's tables hold no rows: the shards do
		return false;
	if (!d->checked)
		direct_fill(c, d);
	if (!d->usable)
		return false;
	Snapshot snapshot = GetActiveSnapshot();
	__int128 sum = 0; // exact: no run of bigint rows overflows it
	Relation base = open_state(c.id, "base", d, &d->base);
	if (d->base_att == InvalidAttrNumber)
		d->base_att = get_attnum(d->base, "base");
	bool read = d->base_att != InvalidAttrNumber && sum_rows(base, d->base_att, key, d, snapshot, &sum);
	if (!read) {
		table_close(base, NoLock);
		return false;
	}
	Relation delta = open_state(c.id, "delta", d, &d->delta);
	if (d->delta_att == InvalidAttrNumber)
		d->delta_att = get_attnum(d->delta, "delta");
	read = d->delta_att != InvalidAttrNumber && sum_rows(delta, d->delta_att, key, d, snapshot, &sum);
	// after the last lock taken here: an open relation is rebuilt in place by
	// the invalidations a lock takes in, so both descriptors are current, and
	// one that arrives later clears 'verified' (catalog_invalidate)
	bool was = d->verified;
	d->verified = read && counts_writers(base, c.id, d->written_fn) && counts_writers(delta, c.id, d->written_fn);
	if (d->verified && !was)
		d->fence = U64FromFullTransactionId(ReadNextFullTransactionId());
	table_close(delta, NoLock);
	table_close(base, NoLock);
	if (!read)
		return false;
	*result = sum > PG_INT64_MAX ? PG_INT64_MAX : sum < -PG_INT64_MAX ? -PG_INT64_MAX : static_cast<int64>(sum);
	return true;
}

// ---------------------------------------------------------------------------
// Buffered counters (counter_ext/buffer.hpp): the adds of counter.add and of
// the trigger go to the transaction's memory and, at commit, to the shared
// table; a flush writes them to the delta table as the counter's owner.

// The second key of the flush lock is the counter id; the first spells
// 'c' 'e' 0 15 (issue 15). Transaction level: a flush holds it until its
// writes commit or abort, so two flushes of one counter never overlap.

// Most entries one flush statement writes.
constexpr size_t flush_batch = 10000;

bool unpreloaded_noticed = false;

void notice_unpreloaded(const char *name) {
	if (unpreloaded_noticed)
		return;
	unpreloaded_noticed = true;
	ce::pg_guard([name] {
		ereport(NOTICE, (errmsg("counter_ext is not loaded by shared_preload_libraries: the adds of buffered counter "
		                        "\"%s\" are written directly",
		                        name),
		                 errdetail("This is said once per session. counter.buffered shows preloaded = false."),
		                 errhint("Add counter_ext to shared_preload_libraries and restart the server.")));
	});
}

// One row a flush writes: a key (in the key type's btree order and
// equality), its bucket, and the sum of its amounts.
struct FlushRow {
	Datum key;
	int64 bucket;
	int128 sum;
};

// Where a flush writes: a delta table (or, on Citus, a delta shard), its
// key type, its owner, the value of its shard column, and the plan kept for
// it (by the buffer's counter id).
struct DeltaTarget {
	const char *table; // qualified
	Oid key_type;
	Oid owner;
	int16 shard;
	int32 id;
	// (Citus, keyed by another column than the distribution column) the
	// type of the delta shard's anchor column and the anchor every row is
	// written at; InvalidOid for a delta table without anchors
	Oid anchor_type = InvalidOid;
	Datum anchor = (Datum)0;
};

// Owns nothing C++: as the target's owner, writes rows to its delta table
// in one statement, one row per (key, bucket) in (key, bucket) order.
// The rows are sorted and merged here (equal keys with different images,
// numeric 1.0 and 1.00 say, are one key: the key type's btree comparison), so
// that the statement only unnests its arrays: no table function's tuplestore,
// no sort, no GROUP BY, and no numeric (the sums are bounded here, the row's
// new delta by integer comparisons). Bounded, not refused: a flush never
// fails on what adds summed to (reconciliation repairs a key that reached a
// bound). rows: palloc'd, in a context that outlives the call.
void write_rows(const DeltaTarget &t, FlushRow *rows, size_t n) {
	if (n == 0)
		return;
	KeptPlans *plans = plans_of(t.id);
	ce::as_owner(t.owner, [&t, plans, rows, n] {
		int16 len;
		bool byval;
		char align;
		get_typlenbyvalalign(t.key_type, &len, &byval, &align);
		Oid array_type = get_array_type(t.key_type);
		if (!OidIsValid(array_type))
			ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("tracked key type has no array type")));
		TypeCacheEntry *type = lookup_type_cache(t.key_type, TYPECACHE_CMP_PROC_FINFO);
		if (!OidIsValid(type->cmp_proc))
			ereport(ERROR, (errcode(ERRCODE_UNDEFINED_FUNCTION),
			                errmsg("tracked key type %s has no btree comparison", format_type_be(t.key_type))));
		if (SPI_connect() != SPI_OK_CONNECT) // what is palloc'd below goes with SPI_finish
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		size_t kept = sort_merge(
		    rows, n, &type->cmp_proc_finfo, type->typcollation, [](const FlushRow &r) { return r.key; },
		    [](FlushRow &into, const FlushRow &r) { into.sum += r.sum; }); // 128 bits: no overflow from int64 amounts
		Datum *keys = static_cast<Datum *>(palloc(sizeof(Datum) * kept));
		Datum *buckets = static_cast<Datum *>(palloc(sizeof(Datum) * kept));
		Datum *deltas = static_cast<Datum *>(palloc(sizeof(Datum) * kept));
		constexpr int128 bound = PG_INT64_MAX;
		for (size_t i = 0; i < kept; i++) {
			keys[i] = rows[i].key;
			buckets[i] = TimestampTzGetDatum(rows[i].bucket);
			deltas[i] = Int64GetDatum(static_cast<int64>(std::max(-bound, std::min(bound, rows[i].sum))));
		}
		bool anchored = OidIsValid(t.anchor_type);
		if (plans->flush == nullptr) {
			// the row's delta plus the amount, bounded to +-(2^63 - 1)
			// without leaving bigint: the amount is inside the bounds
			char *sql =
			    psprintf("INSERT INTO %s AS d (key, bucket, shard, delta%s)"
			             " SELECT pg_catalog.unnest($1), pg_catalog.unnest($2), $3, pg_catalog.unnest($4)%s"
			             " ON CONFLICT (key, bucket, shard%s) DO UPDATE SET delta = CASE"
			             " WHEN excluded.delta OPERATOR(pg_catalog.>) 0 AND d.delta OPERATOR(pg_catalog.>)"
			             " (9223372036854775807 OPERATOR(pg_catalog.-) excluded.delta) THEN 9223372036854775807"
			             " WHEN excluded.delta OPERATOR(pg_catalog.<) 0 AND d.delta OPERATOR(pg_catalog.<)"
			             " ((-9223372036854775807) OPERATOR(pg_catalog.-) excluded.delta) THEN -9223372036854775807"
			             " ELSE d.delta OPERATOR(pg_catalog.+) excluded.delta END",
			             t.table, anchored ? ", anchor" : "", anchored ? ", $5" : "", anchored ? ", anchor" : "");
			Oid types[5] = {array_type, TIMESTAMPTZARRAYOID, INT2OID, INT8ARRAYOID, t.anchor_type};
			plans->flush = ce::prepare_kept(sql, anchored ? 5 : 4, types);
		}
		int count = static_cast<int>(kept);
		Datum values[5] = {
		    PointerGetDatum(construct_array(keys, count, t.key_type, len, byval, align)),
		    PointerGetDatum(construct_array(buckets, count, TIMESTAMPTZOID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)),
		    Int16GetDatum(t.shard),
		    PointerGetDatum(construct_array(deltas, count, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)), t.anchor};
		int rc = SPI_execute_plan(plans->flush, values, nullptr, false, 0);
		if (rc != SPI_OK_INSERT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
			                errmsg("flushing a buffered counter failed: %s", SPI_result_code_string(rc))));
		SPI_finish();
	});
}

// The rows of amounts (images of keys of type key_type), palloc'd in the
// current context. Owns nothing C++.
FlushRow *rows_of(Oid key_type, const ce::buffer::Amount *a, size_t n) {
	int16 len;
	bool byval;
	get_typlenbyval(key_type, &len, &byval);
	FlushRow *rows = static_cast<FlushRow *>(palloc(sizeof(FlushRow) * n));
	for (size_t i = 0; i < n; i++)
		rows[i] = FlushRow{ce::buffer::datum_of(a[i].key, len, byval), a[i].bucket, a[i].amount};
	return rows;
}

// As the counter's owner, writes amounts to its delta table (write_rows).
void write_amounts(const Counter &c, const ce::buffer::Amount *a, size_t n) {
	if (n == 0)
		return;
	FlushRow *rows = ce::pg_guard([&c, a, n] { return rows_of(c.key_type, a, n); });
	DeltaTarget t{state_table(c, "delta"), c.key_type, c.owner, shard_of(c.shards), c.id};
	write_rows(t, rows, n);
}

// PREPARE TRANSACTION: the transaction's adds of counter 'id', written now.
void write_direct(int32 id, const std::vector<ce::buffer::Amount> &amounts) {
	if (id < 0) { // a delta shard's buffer on this Citus node (below)
		write_shard_direct(id, amounts);
		return;
	}
	Counter c = load_counter(Int32GetDatum(id), true, CurrentMemoryContext);
	write_amounts(c, amounts.data(), amounts.size());
}

// ---------------------------------------------------------------------------
// Citus (doc/citus.md, "Buffered"; 1.8): a buffered
// trigger-mode counter of a hash-distributed table. Each shard's trigger adds what its statement counts to the shared
// table of the node it fires on, under the buffer id of the placement of the
// colocated delta shard on that node, -(placement id): the same entries,
// shares, lanes and publication at commit as on one node (ids of counters
// are positive). The flush (tracked_node_flush, run on every node by the
// coordinator's: counter_internal.tracked_citus_flush) writes each of the
// node's placements' amounts into its delta shard there, in a transaction of
// that node alone (Citus prepares a transaction that writes two nodes, and a
// flush's claim is not prepared); a read of a key adds what the node that
// holds the key's shard has (tracked_shard_pending, in the query Citus
// routes there); a shard's reconciliation leaves alone the keys busy in that
// node's buffer (tracked_shard_busy, in its statement). Keyed by another
// column than the distribution column (anchored), the same per delta shard:
// the trigger gives its shard an anchor before it buffers, the flush writes
// a shard's amounts at its least anchor, and a read adds each shard's
// amount on its node, once, at the shard's least anchor
// (tracked_anchor_pending, tracked_anchor_pending_rows, in a union Citus
// pushes down to every shard). A split makes new
// placements; a move makes one on the coordinator, while the other nodes'
// metadata keeps the placement id with the new node's group (Citus's
// update_placement_metadata): either way what the old node holds for a
// placement no longer its own is never read nor flushed (its next flush
// drops it: drop_stranded), and the coordinator's flush, finding the shard
// on a new placement or on a node with another shared table (a move, or a
// restart), schedules the reconciliation of every key, which counts those
// rows again.

// Where the buffer of a delta shard's placement on this node writes.
struct ShardBuffer {
	Oid owner;
	Oid key_type;
	int16 shard;     // the value of the delta's shard column its direct writes use
	char *table;     // the delta shard, qualified (in TopMemoryContext)
	Oid anchor_type; // anchored: the anchor's type, and the anchor (in TopMemoryContext); else InvalidOid
	Datum anchor;
};
std::unordered_map<int32, ShardBuffer> *shard_buffers = nullptr; // by buffer id, bounded

// Owns nothing C++: frees what entry b keeps in TopMemoryContext.
void shard_buffer_free(ShardBuffer &b) {
	if (b.table != nullptr)
		pfree(b.table);
	b.table = nullptr;
	if (OidIsValid(b.anchor_type) && !get_typbyval(b.anchor_type))
		pfree(DatumGetPointer(b.anchor));
	b.anchor_type = InvalidOid;
}

// Owns nothing C++: whether entry b writes where t does.
bool shard_buffer_same(const ShardBuffer &b, const DeltaTarget &t) {
	if (b.owner != t.owner || b.key_type != t.key_type || strcmp(b.table, t.table) != 0 ||
	    b.anchor_type != t.anchor_type)
		return false;
	if (!OidIsValid(t.anchor_type))
		return true;
	int16 len;
	bool byval;
	get_typlenbyval(t.anchor_type, &len, &byval);
	return datumIsEqual(b.anchor, t.anchor, byval, len);
}

// Owns nothing C++ but the map: remembers where buffer 'id' writes, t (for
// the writer of PREPARE TRANSACTION, which has only the id).
void shard_buffer_remember(int32 id, const DeltaTarget &t) {
	if (shard_buffers == nullptr)
		shard_buffers = new std::unordered_map<int32, ShardBuffer>();
	auto found = shard_buffers->find(id);
	if (found != shard_buffers->end() && ce::pg_guard([&found, &t] { return shard_buffer_same(found->second, t); }))
		return;
	if (shard_buffers->size() >= cache_limit) {
		for (auto &entry : *shard_buffers)
			ce::pg_guard([&entry] { shard_buffer_free(entry.second); });
		shard_buffers->clear();
	}
	ShardBuffer kept = ce::pg_guard([&t] {
		ShardBuffer k{t.owner,       t.key_type, t.shard, MemoryContextStrdup(TopMemoryContext, t.table),
		              t.anchor_type, (Datum)0};
		if (OidIsValid(t.anchor_type)) {
			int16 len;
			bool byval;
			get_typlenbyval(t.anchor_type, &len, &byval);
			MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
			k.anchor = datumCopy(t.anchor, byval, len);
			MemoryContextSwitchTo(old);
		}
		return k;
	});
	ShardBuffer &b = (*shard_buffers)[id];
	if (b.table != nullptr)
		ce::pg_guard([&b] { shard_buffer_free(b); });
	b = kept;
}

// The shard id a shard's table name ends with (<table>_<shard id>), 0 when none.
int64 shard_id_of_name(const char *name) {
	const char *us = strrchr(name, '_');
	if (us == nullptr || us[1] == '\0' || strspn(us + 1, "0123456789") != strlen(us + 1) || strlen(us + 1) >= 19)
		return 0;
	return strtoll(us + 1, nullptr, 10);
}

// Inside SPI; owns nothing C++. The buffer of the placement on this node of
// shard 'shardid' of the table 'rel' names: that shard itself (is_shard), or
// the distributed table. 0 when the shard has no placement on this node (or
// a placement id past what a buffer id holds: its adds are written
// directly); its qualified name into *name (palloc'd) when asked.
int32 placement_buffer(int64 shardid, Oid rel, bool is_shard, char **name) {
	Oid types[3] = {INT8OID, OIDOID, BOOLOID};
	Datum args[3] = {Int64GetDatum(shardid), ObjectIdGetDatum(rel), BoolGetDatum(is_shard)};
	int rc =
	    SPI_execute_with_args("SELECT p.placementid, pg_catalog.shard_name(s.logicalrelid, s.shardid, false)"
	                          " FROM pg_catalog.pg_dist_shard s"
	                          " JOIN pg_catalog.pg_dist_placement p ON p.shardid OPERATOR(pg_catalog.=) s.shardid"
	                          " JOIN pg_catalog.pg_dist_local_group g ON g.groupid OPERATOR(pg_catalog.=) p.groupid"
	                          " WHERE s.shardid OPERATOR(pg_catalog.=) $1 AND CASE WHEN $3"
	                          "  THEN pg_catalog.to_regclass(pg_catalog.shard_name(s.logicalrelid, s.shardid, false))"
	                          "       OPERATOR(pg_catalog.=) $2::pg_catalog.regclass"
	                          "  ELSE s.logicalrelid OPERATOR(pg_catalog.=) $2::pg_catalog.regclass END",
	                          3, types, args, nullptr, true, 2);
	if (rc != SPI_OK_SELECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading the Citus metadata failed")));
	if (SPI_processed != 1)
		return 0;
	bool isnull;
	int64 placement = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (placement <= 0 || placement > PG_INT32_MAX)
		return 0;
	if (name != nullptr)
		*name = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	return static_cast<int32>(-placement);
}

// Inside SPI; owns nothing C++. The buffer of the shard of the distributed
// table rel that holds 'key' (of key_type), on this node (0: not here).
int32 key_buffer(Oid rel, Oid key_type, Datum key) {
	Oid types[2] = {REGCLASSOID, key_type};
	Datum args[2] = {ObjectIdGetDatum(rel), key};
	if (SPI_execute_with_args("SELECT pg_catalog.get_shard_id_for_distribution_column($1, $2)", 2, types, args, nullptr,
	                          true, 1) != SPI_OK_SELECT ||
	    SPI_processed != 1)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading the Citus metadata failed")));
	bool isnull;
	Datum shard = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? 0 : placement_buffer(DatumGetInt64(shard), rel, false, nullptr);
}

// The key type of a delta table (its column 'key'). Owns nothing C++.
Oid delta_key_type(Oid rel) {
	AttrNumber att = get_attnum(rel, "key");
	if (att == InvalidAttrNumber)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
		                errmsg("%s is not the delta table of a tracked counter", get_rel_name(rel))));
	return get_atttype(rel, att);
}

// The functions PUBLIC may execute on every node (99_internal.sql) act on a
// table whose owner's rights their caller has, and nothing else.
void require_table_owner_rights(Oid rel, const char *what) {
	if (!ce::citus::caller_has_owner_rights(rel))
		throw ce::Error(ce::sqlstate::insufficient_privilege,
		                ce::format("permission denied to %s the buffered amounts of this table", what),
		                "Only a role with the rights of the table's owner may.");
}

// PREPARE TRANSACTION on a node (Citus prepares every transaction that
// writes two nodes): the transaction's adds to buffer 'id', written now to
// the delta shard its trigger named.
void write_shard_direct(int32 id, const std::vector<ce::buffer::Amount> &amounts) {
	auto found = shard_buffers == nullptr ? decltype(shard_buffers->end()){} : shard_buffers->find(id);
	if (shard_buffers == nullptr || found == shard_buffers->end())
		throw ce::Error(ce::sqlstate::internal_error, "buffered adds of a Citus shard have no writer here");
	ShardBuffer b = found->second;
	FlushRow *rows = ce::pg_guard([&b, &amounts] { return rows_of(b.key_type, amounts.data(), amounts.size()); });
	write_rows(DeltaTarget{b.table, b.key_type, b.owner, b.shard, id, b.anchor_type, b.anchor}, rows, amounts.size());
}

// Rows a buffered shard trigger's statement counted, folded per (key,
// bucket), copied out of SPI.
struct ShardFolded {
	FlushRow *rows;
	size_t n;
	bool done; // nothing to buffer (a TRUNCATE, the distributed table itself, a trigger left behind)
};

// Inside SPI, as the table's owner; owns nothing C++. The buffer of the
// delta shard (state[0]) a buffered shard trigger (a trigger-mode counter's,
// an application-mode counter's inbox's) adds to, and its key type, into f
// once: the placement of that shard on this node, which must be the
// trigger's table's owner's.
void shard_buffer_fill(ShardFold *f, TriggerData *td, int32 id) {
	if (f->buffer != 0)
		return;
	Oid delta = ce::citus::relation_named(f->state[0]);
	int32 buffer =
	    OidIsValid(delta) ? placement_buffer(shard_id_of_name(get_rel_name(delta)), delta, true, nullptr) : 0;
	if (buffer == 0)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
		                errmsg("the delta shard %s of buffered tracked counter %d has no placement on this node "
		                       "that a buffer can name",
		                       f->state[0], id)));
	// the buffer's amounts are written by its flush as the delta's
	// owner: only a trigger on a table of that owner adds to them
	// (what the unbuffered path's write as the table's owner asks)
	if (ce::citus::relation_owner(delta) != f->owner)
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
		                errmsg("the trigger %s on %s names the delta table %s of another owner", td->tg_trigger->tgname,
		                       RelationGetRelationName(td->tg_relation), f->state[0])));
	f->key_type = delta_key_type(delta);
	f->buffer = buffer;
}

// Owns nothing C++: as the table's owner. The rows the statement of a
// buffered shard trigger counted (shard_fold_plan), folded per (key,
// bucket), in the caller's memory context; done when there is nothing to
// buffer (the distributed table itself, a TRUNCATE trigger left behind).
ShardFolded shard_fold_rows(ShardFold *f, TriggerData *td, int32 id) {
	ShardFolded out{nullptr, 0, true};
	MemoryContext caller = CurrentMemoryContext;
	if (SPI_connect() != SPI_OK_CONNECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
	if ((!f->valid && !shard_fold_fill(f, td, id)) || f->shell) {
		SPI_finish();
		return out;
	}
	shard_buffer_fill(f, td, id);
	if (SPI_register_trigger_data(td) != SPI_OK_TD_REGISTER)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_register_trigger_data failed")));
	int kind = TRIGGER_FIRED_BY_INSERT(td->tg_event) ? 0 : TRIGGER_FIRED_BY_DELETE(td->tg_event) ? 1 : 2;
	// anchored: this shard's anchor first (shard_anchor: the flush writes
	// what is buffered here at the least anchor of the shard, which is
	// there from now on); none when the statement changed no row
	if (fold_anchored(td->tg_trigger) && !shard_anchor(f, td, kind)) {
		SPI_finish();
		return out;
	}
	int rc = SPI_execute_plan(shard_fold_plan(f, td, kind), nullptr, nullptr, true, 0);
	if (rc != SPI_OK_SELECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
		                errmsg("folding tracked deltas failed: %s", SPI_result_code_string(rc))));
	int16 len;
	bool byval;
	get_typlenbyval(f->key_type, &len, &byval);
	out.done = false;
	out.n = SPI_processed;
	out.rows = static_cast<FlushRow *>(MemoryContextAlloc(caller, sizeof(FlushRow) * (out.n + 1)));
	MemoryContext old = MemoryContextSwitchTo(caller);
	for (uint64 i = 0; i < SPI_processed; i++) {
		bool isnull;
		HeapTuple t = SPI_tuptable->vals[i];
		TupleDesc d = SPI_tuptable->tupdesc;
		out.rows[i].key = datumCopy(SPI_getbinval(t, d, 1, &isnull), byval, len);
		out.rows[i].bucket = DatumGetTimestampTz(SPI_getbinval(t, d, 2, &isnull));
		out.rows[i].sum = DatumGetInt64(SPI_getbinval(t, d, 3, &isnull));
	}
	MemoryContextSwitchTo(old);
	SPI_finish();
	return out;
}

// The buffered path of a shard trigger (above): as the table's owner, the
// statement's rows folded, each (key, bucket) added to the placement's
// buffer, and what cannot be buffered written to the delta shard at once.
void shard_fold_buffered(TriggerData *td, ShardFold *f, Oid owner, int32 id, int shards) {
	ce::OwnerSwitch as = ce::pg_guard([owner] { return ce::owner_enter(owner); });
	try {
		ShardFolded got = ce::pg_guard([f, td, id] { return shard_fold_rows(f, td, id); });
		if (!got.done && got.n > 0) {
			int16 shard = shard_of(shards);
			// (anchored: what cannot be buffered is written at the shard's
			// anchor, as the unbuffered trigger writes it)
			DeltaTarget target{f->state[0], f->key_type, f->owner, shard, f->buffer};
			if (fold_anchored(td->tg_trigger)) {
				target.anchor_type = ce::pg_guard([td] { return anchor_type(td); });
				target.anchor = f->anchor;
			}
			shard_buffer_remember(f->buffer, target);
			ce::buffer::set_direct_writer(write_direct);
			int16 len;
			bool byval;
			Oid key_type = f->key_type;
			ce::pg_guard([key_type, &len, &byval] { get_typlenbyval(key_type, &len, &byval); });
			size_t direct = 0;
			for (size_t i = 0; i < got.n; i++) {
				FlushRow r = got.rows[i];
				ce::buffer::Image image;
				ce::buffer::Image *ip = &image;
				bool ok = ce::buffer::available() &&
				          ce::pg_guard([&r, len, byval, ip] { return ce::buffer::image_of(r.key, len, byval, ip); }) &&
				          ce::buffer::add(f->buffer, f->owner, image, r.bucket, static_cast<int64>(r.sum));
				if (!ok)
					got.rows[direct++] = r;
			}
			if (direct > 0)
				write_rows(target, got.rows, direct);
		}
	} catch (...) {
		ce::owner_leave(as);
		throw;
	}
	ce::owner_leave(as);
}

// The buffered path of an application-mode counter's inbox trigger
// (counter_tracked_shard_add): as the table's owner, the row's amount added
// to the placement's buffer, or written to the delta shard at once when it
// cannot be buffered.
void inbox_add_buffered(TriggerData *td, ShardFold *f, Oid owner, int32 id) {
	ce::OwnerSwitch as = ce::pg_guard([owner] { return ce::owner_enter(owner); });
	try {
		InboxRow row{};
		InboxRow *rp = &row;
		ce::pg_guard([f, td, id, rp] { shard_add_run(f, td, id, rp); });
		shard_buffer_remember(f->buffer, DeltaTarget{f->state[0], f->key_type, f->owner, row.slot, f->buffer});
		ce::buffer::set_direct_writer(write_direct);
		ce::buffer::Image image;
		ce::buffer::Image *ip = &image;
		Oid key_type = f->key_type;
		bool ok = ce::buffer::available() && ce::pg_guard([key_type, &row, ip] {
			          int16 len;
			          bool byval;
			          get_typlenbyval(key_type, &len, &byval);
			          return ce::buffer::image_of(row.key, len, byval, ip);
		          }) &&
		          ce::buffer::add(f->buffer, f->owner, image, row.bucket, row.delta);
		if (!ok) {
			FlushRow *rows = ce::pg_guard([&row] {
				auto *r = static_cast<FlushRow *>(palloc(sizeof(FlushRow)));
				*r = FlushRow{row.key, row.bucket, row.delta};
				return r;
			});
			write_rows(DeltaTarget{f->state[0], f->key_type, f->owner, row.slot, f->buffer}, rows, 1);
		}
	} catch (...) {
		ce::owner_leave(as);
		throw;
	}
	ce::owner_leave(as);
}

SPIPlanPtr flush_plans[3] = {nullptr, nullptr, nullptr}; // epoch, repair, record

// Owns nothing C++: as the catalog's owner, between SPI_connect and
// SPI_finish. Whether the shared table was made again (a restart, after a
// crash or not) since the last flush of any buffered counter of this
// database: then what was published and not flushed is gone. For each such
// counter, schedules the repair: its next reconciliation checks every key
// (full_pending) and its reconcile job is due now. Every flush looks (one
// small query), so a counter whose own jobs are far apart is repaired as
// soon as any buffered counter of the database is flushed.
void check_epoch() {
	if (flush_plans[0] == nullptr) {
		Oid types[1] = {TIMESTAMPTZOID};
		flush_plans[0] = ce::prepare_kept(
		    "SELECT pg_catalog.array_agg(t.counter_id), pg_catalog.string_agg(t.name, ', ' ORDER BY t.name)"
		    " FROM counter.tracked t LEFT JOIN counter_internal.tracked_flushes f"
		    " ON f.counter_id OPERATOR(pg_catalog.=) t.counter_id"
		    " WHERE t.buffered AND NOT t.distributed AND f.epoch IS DISTINCT FROM $1",
		    1, types);
	}
	Datum args[2] = {TimestampTzGetDatum(ce::buffer::epoch()), (Datum)0};
	if (SPI_execute_plan(flush_plans[0], args, nullptr, true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading counter_internal.tracked_flushes failed")));
	bool isnull;
	Datum ids = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (isnull)
		return;
	char *names = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	args[1] = ids;
	if (flush_plans[1] == nullptr) {
		Oid types[2] = {TIMESTAMPTZOID, INT4ARRAYOID};
		flush_plans[1] = ce::prepare_kept(
		    "WITH r AS (UPDATE counter.tracked t SET full_pending = true"
		    "           WHERE t.counter_id OPERATOR(pg_catalog.=) ANY ($2) RETURNING t.counter_id, t.name),"
		    " j AS (UPDATE counter.jobs j SET next_run = pg_catalog.now() FROM r"
		    "       WHERE j.kind OPERATOR(pg_catalog.=) 'reconcile' AND j.target OPERATOR(pg_catalog.=) r.name"
		    "         AND j.next_run OPERATOR(pg_catalog.>) pg_catalog.now() RETURNING 1)"
		    " INSERT INTO counter_internal.tracked_flushes AS f (counter_id, epoch, repairs, repair_requested_at)"
		    " SELECT r.counter_id, $1, 1, pg_catalog.now() FROM r"
		    " ON CONFLICT (counter_id) DO UPDATE SET epoch = excluded.epoch,"
		    " repairs = f.repairs OPERATOR(pg_catalog.+) 1, repair_requested_at = excluded.repair_requested_at"
		    " WHERE f.epoch IS DISTINCT FROM excluded.epoch",
		    2, types);
	}
	if (SPI_execute_plan(flush_plans[1], args, nullptr, false, 0) != SPI_OK_INSERT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("scheduling the repair of buffered counters failed")));
	ereport(LOG, (errmsg("counter_ext: the shared table of buffered counters was made again (a server restart) since "
	                     "buffered counters %s were last flushed",
	                     names),
	              errdetail("Adds published and not yet flushed may be lost; a reconciliation of every key is "
	                        "scheduled to repair them.")));
}

// Owns nothing C++: as the catalog's owner, between SPI_connect/SPI_finish.
void record_flush(const Counter &c, int64 entries) {
	if (flush_plans[2] == nullptr) {
		Oid types[3] = {INT4OID, TIMESTAMPTZOID, INT8OID};
		flush_plans[2] =
		    ce::prepare_kept("INSERT INTO counter_internal.tracked_flushes AS f (counter_id, epoch, flushed_at, "
		                     "flushes, entries_flushed)"
		                     " VALUES ($1, $2, pg_catalog.now(), 1, $3)"
		                     " ON CONFLICT (counter_id) DO UPDATE SET flushed_at = excluded.flushed_at,"
		                     " flushes = f.flushes OPERATOR(pg_catalog.+) 1,"
		                     " entries_flushed = f.entries_flushed OPERATOR(pg_catalog.+) excluded.entries_flushed",
		                     3, types);
	}
	Datum args[3] = {Int32GetDatum(c.id), TimestampTzGetDatum(ce::buffer::epoch()), Int64GetDatum(entries)};
	if (SPI_execute_plan(flush_plans[2], args, nullptr, false, 0) != SPI_OK_INSERT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("recording a flush failed")));
}

// Flushes counter c (its adds published in this database) in the current
// transaction: claims, writes as the owner, and records the flush; the
// shared table lets go of the amounts when this transaction commits. With
// 'wait' false, returns -1 at once when another transaction is flushing the
// counter. Returns the entries written.
int64 flush_counter(const Counter &c, bool wait) {
	if (!ce::buffer::available() && !c.distributed) // (on Citus the nodes' buffers are flushed)
		return 0;
	ce::buffer::set_direct_writer(write_direct);
	int32 id = c.id;
	bool locked =
	    ce::pg_guard([id, wait] { return ce::locks::take(ce::locks::flush, static_cast<uint32>(id), false, wait); });
	if (!locked)
		return -1;
	Oid catalog = ce::pg_guard([] { return ce::catalog_owner(); });
	ce::as_owner(catalog, [] {
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		check_epoch();
		SPI_finish();
	});
	if (c.distributed) {
		// Citus (1.8): every node writes what its buffers hold for the
		// counter's shards there, each in a transaction of its own
		// (tracked_node_flush, as the owner); what they answer is recorded,
		// and a shard found on a new placement or a node whose shared table
		// was made again schedules the repair (tracked_citus_flushed)
		int32 cid = c.id;
		return ce::as_owner(catalog, [cid] {
			if (SPI_connect() != SPI_OK_CONNECT)
				ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
			Oid types[1] = {INT4OID};
			Datum args[1] = {Int32GetDatum(cid)};
			if (SPI_execute_with_args("SELECT counter_internal.tracked_citus_flush(t, false) FROM counter.tracked t"
			                          " WHERE t.counter_id OPERATOR(pg_catalog.=) $1",
			                          1, types, args, nullptr, false, 1) != SPI_OK_SELECT ||
			    SPI_processed != 1)
				ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("flushing a buffered counter failed")));
			bool isnull;
			int64 n = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
			SPI_finish();
			return isnull ? int64{0} : n;
		});
	}
	int64 total = 0;
	for (;;) {
		std::vector<ce::buffer::Amount> batch = ce::buffer::claim(c.id, flush_batch);
		if (batch.empty())
			break;
		write_amounts(c, batch.data(), batch.size());
		total += static_cast<int64>(batch.size());
		if (batch.size() < flush_batch)
			break;
		ce::check_for_interrupts();
	}
	if (total > 0)
		ce::as_owner(catalog, [&c, total] {
			if (SPI_connect() != SPI_OK_CONNECT)
				ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
			record_flush(c, total);
			SPI_finish();
		});
	return total;
}

// The key of counter c as given (type 'given'), as its image, and the
// bucket of 'at'. Owns nothing C++; run as the owner when the key is
// converted (a domain's check may call the owner's functions).
struct Placed {
	bool ok;
	ce::buffer::Image image;
	int64 bucket;
};

void place(const Counter &c, Oid given, Datum key, TimestampTz at, Placed *p) {
	Datum value = ce::keys::convert(given, key, c.key_type, c.name);
	p->ok = ce::buffer::image_of(value, c.key_len, c.key_byval, &p->image);
	p->bucket = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_bin, IntervalPGetDatum(&c.width),
	                                                    TimestampTzGetDatum(at), TimestampTzGetDatum(0)));
}

// counter.add's bound on event times (doc/reference/tracked.md, "Bounds on
// what a writer passes"): finite, and no later than the statement's start
// plus the counter's max_future, so that every bucket an add writes is
// folded by reconciliation within max_future + watermark_lag + bucket_width.
void check_event_time(const Counter &c, TimestampTz at) {
	TimestampTz limit;
	if (!TIMESTAMP_NOT_FINITE(at) && !pg_add_s64_overflow(GetCurrentStatementStartTimestamp(), c.max_future, &limit) &&
	    at <= limit)
		return;
	ce::pg_guard([&c, at] {
		ereport(ERROR, (errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
		                errmsg("event time %s is too far in the future for tracked counter \"%s\"",
		                       timestamptz_to_str(at), c.name),
		                errdetail("counter.add accepts event times up to now + max_future (%s seconds) of the counter.",
		                          psprintf(INT64_FORMAT, c.max_future / USECS_PER_SEC)),
		                errhint("Pass the time the event happened; the owner sets max_future with counter.track.")));
	});
}

// counter.add of a buffered counter: true when the add went to the buffer.
bool buffer_add(const Counter &c, Oid given, Datum key, int64 delta, TimestampTz at) {
	if (!ce::buffer::available()) {
		notice_unpreloaded(c.name);
		return false;
	}
	ce::buffer::set_direct_writer(write_direct);
	Placed p{};
	Placed *pp = &p;
	if (given == c.key_type)
		ce::pg_guard([&c, given, key, at, pp] { place(c, given, key, at, pp); });
	else
		ce::as_owner(c.owner, [&c, given, key, at, pp] { place(c, given, key, at, pp); });
	if (!p.ok)
		return false;
	return ce::buffer::add(c.id, c.owner, p.image, p.bucket, delta);
}

// What the buffer adds to the table's value of a key (its image).
int64 buffered_amount(const Counter &c, bool ok, const ce::buffer::Image &image) {
	if (!c.buffered || c.distributed || !ok || !ce::buffer::available())
		return 0;
	return ce::pg_guard([&c, &image] { return ce::buffer::amount(c.id, image, GetActiveSnapshot()); });
}
// counter.add's write of delta to key value at event time at, in this
// backend's slot, with the counter's kept plan: the upsert into its delta
// table, or on Citus (c.distributed) the insert into its inbox, whose shard
// trigger adds it to the delta shard (shard_add). Owns nothing C++: as the
// role the caller chose.
void add_write(const Counter &c, KeptPlans *plans, Datum value, int64 delta, TimestampTz at) {
	if (SPI_connect() != SPI_OK_CONNECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
	if (plans->add == nullptr) {
		char *sql = c.distributed ? psprintf("INSERT INTO %s (key, bucket, shard, delta) VALUES ($1, $2, $3, $4)",
		                                     state_table(c, "inbox"))
		                          : psprintf("INSERT INTO %s AS d (key, bucket, shard, delta) VALUES ($1, $2, $3, $4)"
		                                     " ON CONFLICT (key, bucket, shard) DO UPDATE SET delta = d.delta"
		                                     " OPERATOR(pg_catalog.+) excluded.delta",
		                                     state_table(c, "delta"));
		Oid types[4] = {c.key_type, TIMESTAMPTZOID, INT2OID, INT8OID};
		plans->add = ce::prepare_kept(sql, 4, types);
	}
	Datum bucket = DirectFunctionCall3(timestamptz_bin, IntervalPGetDatum(&c.width), TimestampTzGetDatum(at),
	                                   TimestampTzGetDatum(0));
	Datum values[4] = {value, bucket, Int16GetDatum(shard_of(c.shards)), Int64GetDatum(delta)};
	if (SPI_execute_plan(plans->add, values, nullptr, false, 0) != SPI_OK_INSERT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("writing a tracked delta failed")));
	SPI_finish();
}
} // namespace

CE_FUNCTION(counter_tracked_add) {
	Counter c = find_counter(fcinfo);
	if (PG_ARGISNULL(1))
		throw ce::Error(ce::sqlstate::null_value_not_allowed,
		                ce::format("key of tracked counter \"%s\" must not be NULL", c.name));
	if (PG_ARGISNULL(2) || PG_ARGISNULL(3))
		throw ce::Error(ce::sqlstate::null_value_not_allowed, "delta and at must not be NULL");
	if (!c.application)
		ce::pg_guard([&c] {
			ereport(ERROR,
			        (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			         errmsg("tracked counter \"%s\" is counted by triggers on %s", c.name, qualified_name(c.source)),
			         errhint("counter.add is for counters registered with mode => 'application'.")));
		});
	require_privilege(c, ACL_INSERT, "add to", "INSERT");
	Oid given = get_fn_expr_argtype(fcinfo->flinfo, 1);
	Datum key = PG_GETARG_DATUM(1);
	int64 delta = PG_GETARG_INT64(2);
	TimestampTz at = PG_GETARG_TIMESTAMPTZ(3);
	check_event_time(c, at);
	if (delta == 0)
		PG_RETURN_VOID();
	// (on Citus, 1.8: through the inbox, buffered on the node of the key's shard)
	if (c.buffered && !c.distributed && buffer_add(c, given, key, delta, at))
		PG_RETURN_VOID();
	KeptPlans *plans = plans_of(c.id);
	if (c.distributed) {
		// Citus: into the counter's inbox, as the caller (shard_add above);
		// as the owner only to convert the key (a domain's check may call
		// the owner's functions)
		Datum value = given == c.key_type ? key : ce::as_owner(c.owner, [&c, given, key] {
			return ce::keys::convert(given, key, c.key_type, c.name);
		});
		ce::pg_guard([&c, plans, value, delta, at] { add_write(c, plans, value, delta, at); });
	} else {
		ce::as_owner(c.owner, [&c, plans, given, key, delta, at] {
			add_write(c, plans, ce::keys::convert(given, key, c.key_type, c.name), delta, at);
		});
	}
	PG_RETURN_VOID();
}

CE_FUNCTION(counter_tracked_value) {
	Counter c = find_counter(fcinfo);
	if (PG_ARGISNULL(1))
		throw ce::Error(ce::sqlstate::null_value_not_allowed,
		                ce::format("key of tracked counter \"%s\" must not be NULL", c.name));
	require_privilege(c, ACL_SELECT, "read", "SELECT");
	Oid given = get_fn_expr_argtype(fcinfo->flinfo, 1);
	Datum key = PG_GETARG_DATUM(1);
	KeptPlans *plans = plans_of(c.id);
	// as the owner only when converted (a domain's check may call the owner's functions)
	Datum value = given == c.key_type ? key : ce::as_owner(c.owner, [&c, given, key] {
		return ce::keys::convert(given, key, c.key_type, c.name);
	});
	ce::buffer::Image image{};
	ce::buffer::Image *image_p = &image;
	bool imaged =
	    ce::pg_guard([&c, value, image_p] { return ce::buffer::image_of(value, c.key_len, c.key_byval, image_p); });
	int64 result = 0;
	int64 *result_p = &result;
	DirectRead *direct = &plans->direct;
	// the table part kept from an earlier read (counter_ext/read_cache.hpp),
	// once the invalidations that arrived are taken in: a disabled trigger
	// clears 'verified'
	Snapshot snapshot = GetActiveSnapshot();
	ce::pg_guard([] { AcceptInvalidationMessages(); });
	bool hit = imaged && direct->checked && direct->usable && direct->verified &&
	           ce::read_cache::lookup(c.id, image, snapshot, direct->fence, &result);
	ce::read_cache::Stamp before = hit ? ce::read_cache::Stamp{} : ce::read_cache::stamp(c.id);
	if (!hit && ce::pg_guard([&c, direct, value, result_p] { return read_direct(c, direct, value, result_p); })) {
		if (imaged && direct->verified)
			ce::read_cache::store(c.id, image, before, snapshot, direct->fence, result);
	} else if (!hit) {
		result = ce::as_owner(c.owner, [&c, plans, value] {
			if (SPI_connect() != SPI_OK_CONNECT)
				ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
			Datum values[1] = {value};
			if (SPI_execute_plan(value_plan(c, &plans->value, false), values, nullptr, true, 1) != SPI_OK_SELECT ||
			    SPI_processed != 1)
				ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading a tracked counter failed")));
			bool isnull;
			int64 v = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
			SPI_finish();
			return v;
		});
	}
	// after the table's read: its snapshot is older than what the buffer shows
	result = ce::buffer::saturating_add(result, buffered_amount(c, imaged, image));
	PG_RETURN_INT64(result);
}

namespace {

// The elements of an array. Owns nothing C++.
struct Elements {
	Datum *values;
	bool *nulls;
	int n;
	int16 len;
	bool byval;
	char align;
};

Elements elements_of(ArrayType *array, Oid elem) {
	Elements e;
	get_typlenbyvalalign(elem, &e.len, &e.byval, &e.align);
	deconstruct_array(array, elem, e.len, e.byval, e.align, &e.values, &e.nulls, &e.n);
	return e;
}

// One distinct key of values_of: the key as given, as the key type, and
// where it stands in the query's answer.
struct Given {
	Datum given;
	Datum key;
	int position;
};

} // namespace

CE_FUNCTION(counter_tracked_values_of) {
	Counter c = find_counter(fcinfo);
	if (PG_ARGISNULL(1))
		throw ce::Error(ce::sqlstate::null_value_not_allowed, "keys must not be NULL");
	require_privilege(c, ACL_SELECT, "read", "SELECT");
	ArrayType *array = PG_GETARG_ARRAYTYPE_P(1);
	Oid elem = ARR_ELEMTYPE(array);
	KeptPlans *plans = plans_of(c.id);
	ce::pg_guard([fcinfo] { InitMaterializedSRF(fcinfo, 0); });
	auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
	ce::as_owner(c.owner, [&c, plans, array, elem, rsinfo] {
		Elements in = elements_of(array, elem);
		Datum *elems = in.values;
		bool *nulls = in.nulls;
		int n = in.n;
		Given *keys = static_cast<Given *>(palloc(sizeof(Given) * (n + 1)));
		for (int i = 0; i < n; i++) {
			if (nulls[i])
				ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				                errmsg("key of tracked counter \"%s\" must not be NULL", c.name)));
			keys[i] = Given{elems[i], ce::keys::convert(elem, elems[i], c.key_type, c.name), 0};
		}
		TypeCacheEntry *type = lookup_type_cache(c.key_type, TYPECACHE_CMP_PROC_FINFO);
		if (!OidIsValid(type->cmp_proc_finfo.fn_oid))
			ereport(ERROR, (errcode(ERRCODE_UNDEFINED_FUNCTION), errmsg("tracked key type has no btree comparison")));
		Oid collation = type->typcollation;
		auto cmp = [type, collation](const Given &a, const Given &b) {
			return DatumGetInt32(FunctionCall2Coll(&type->cmp_proc_finfo, collation, a.key, b.key));
		};
		std::sort(keys, keys + n, [&cmp](const Given &a, const Given &b) { return cmp(a, b) < 0; });
		int distinct = 0;
		for (int i = 0; i < n; i++)
			if (distinct == 0 || cmp(keys[distinct - 1], keys[i]) != 0)
				keys[distinct++] = keys[i];
		Datum *converted = static_cast<Datum *>(palloc(sizeof(Datum) * (distinct + 1)));
		for (int i = 0; i < distinct; i++)
			converted[i] = keys[i].key;
		int16 klen;
		bool kbyval;
		char kalign;
		get_typlenbyvalalign(c.key_type, &klen, &kbyval, &kalign);
		Datum arg[1] = {PointerGetDatum(construct_array(converted, distinct, c.key_type, klen, kbyval, kalign))};
		// before SPI_connect: SPI_finish frees what is palloc'd after it
		int64 *value = static_cast<int64 *>(palloc(sizeof(int64) * (distinct + 1)));
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		if (c.distributed && c.buffered) {
			// Citus, buffered: key by key, each read where its shard is
			// (value_plan: the buffer of that node is added there)
			for (int i = 0; i < distinct; i++) {
				Datum one[1] = {converted[i]};
				if (SPI_execute_plan(value_plan(c, &plans->value, false), one, nullptr, true, 1) != SPI_OK_SELECT ||
				    SPI_processed != 1)
					ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading a tracked counter failed")));
				bool isnull;
				value[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
			}
		} else {
			if (SPI_execute_plan(value_plan(c, &plans->values, true), arg, nullptr, true, 0) != SPI_OK_SELECT ||
			    SPI_processed != static_cast<uint64>(distinct))
				ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading a tracked counter failed")));
			for (uint64 i = 0; i < SPI_processed; i++) {
				bool isnull;
				int64 o = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
				value[o - 1] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
			}
		}
		SPI_finish();
		if (c.buffered && !c.distributed && ce::buffer::available()) {
			Snapshot snapshot = GetActiveSnapshot();
			for (int i = 0; i < distinct; i++) {
				ce::buffer::Image image;
				if (ce::buffer::image_of(keys[i].key, klen, kbyval, &image))
					value[i] = ce::buffer::saturating_add(value[i], ce::buffer::amount(c.id, image, snapshot));
			}
		}
		for (int i = 0; i < distinct; i++) {
			Datum out[2] = {keys[i].given, Int64GetDatum(value[i])};
			bool outnull[2] = {false, false};
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnull);
		}
	});
	return (Datum)0;
}

// ---------------------------------------------------------------------------
// Buffered counters: counter.flush, counter.buffer_status and the helpers
// reconciliation and counter.tracked_values use.

namespace {

// Raises 42501 unless the current user has the privileges of the counter's
// owner (a superuser has).
void require_owner_rights(const Counter &c, const char *verb) {
	ce::pg_guard([&c, verb] {
		if (!has_privs_of_role(GetUserId(), c.owner))
			ereport(ERROR,
			        (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			         errmsg("permission denied to %s buffered counter \"%s\"", verb, c.name),
			         errdetail("Only the owner of %s (or a member of that role) may.", qualified_name(c.source))));
	});
}

// One buffered counter as the catalog lists it.
struct Listed {
	int32 id;
	Oid owner;
	char *name;
	TimestampTz flushed_at;
	bool flushed_null;
	int64 flushes;
	int64 repairs;
	TimestampTz repair_at;
	bool repair_null;
};

SPIPlanPtr list_plan = nullptr;

// The buffered counters of this database (read as the catalog's owner),
// in the caller's memory.
std::vector<Listed> list_buffered() {
	std::vector<Listed> out;
	MemoryContext keep = CurrentMemoryContext;
	Oid catalog = ce::pg_guard([] { return ce::catalog_owner(); });
	struct Rows {
		Listed *rows;
		uint64 n;
	};
	Rows rows = ce::as_owner(catalog, [keep] {
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		if (list_plan == nullptr)
			list_plan = ce::prepare_kept(
			    "SELECT t.counter_id, t.owner::oid, t.name, f.flushed_at, coalesce(f.flushes, 0),"
			    " coalesce(f.repairs, 0), f.repair_requested_at"
			    " FROM counter.tracked t LEFT JOIN counter_internal.tracked_flushes f"
			    " ON f.counter_id OPERATOR(pg_catalog.=) t.counter_id WHERE t.buffered ORDER BY t.name",
			    0, nullptr);
		if (SPI_execute_plan(list_plan, nullptr, nullptr, true, 0) != SPI_OK_SELECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading counter.tracked failed")));
		Rows r{static_cast<Listed *>(MemoryContextAlloc(keep, sizeof(Listed) * (SPI_processed + 1))), SPI_processed};
		for (uint64 i = 0; i < SPI_processed; i++) {
			HeapTuple t = SPI_tuptable->vals[i];
			TupleDesc d = SPI_tuptable->tupdesc;
			bool isnull;
			Listed &l = r.rows[i];
			l.id = DatumGetInt32(SPI_getbinval(t, d, 1, &isnull));
			l.owner = DatumGetObjectId(SPI_getbinval(t, d, 2, &isnull));
			l.name = MemoryContextStrdup(keep, SPI_getvalue(t, d, 3));
			l.flushed_at = DatumGetTimestampTz(SPI_getbinval(t, d, 4, &l.flushed_null));
			l.flushes = DatumGetInt64(SPI_getbinval(t, d, 5, &isnull));
			l.repairs = DatumGetInt64(SPI_getbinval(t, d, 6, &isnull));
			l.repair_at = DatumGetTimestampTz(SPI_getbinval(t, d, 7, &l.repair_null));
		}
		SPI_finish();
		return r;
	});
	out.assign(rows.rows, rows.rows + rows.n);
	return out;
}

// The overflows of the share of 'owner' among 'shares' (ce::buffer::shares),
// 0 when it has none.
int64 overflows_of(const std::vector<ce::buffer::ShareStats> &shares, Oid owner) {
	for (const ce::buffer::ShareStats &sh : shares)
		if (sh.owner == owner)
			return sh.overflows;
	return 0;
}

bool may_act_for(Oid owner) {
	return ce::pg_guard([owner] { return has_privs_of_role(GetUserId(), owner); });
}

} // namespace

namespace {

// flush_counter without waiting; a counter another transaction is flushing is
// recorded as a skipped run (counter_internal.run_skipped, in the one run
// record, as the catalog's owner) and counts 0 (quietly, as in 1.4: a
// reconciliation flushes first, and goes on).
int64 flush_or_skip(const Counter &c) {
	int64 n = flush_counter(c, false);
	if (n >= 0)
		return n;
	const char *name = c.name;
	int32 id = c.id;
	Oid catalog = ce::pg_guard([] { return ce::catalog_owner(); });
	ce::as_owner(catalog, [name, id] {
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		Oid types[2] = {TEXTOID, INT8OID};
		Datum args[2] = {CStringGetTextDatum(name), Int64GetDatum(id)};
		if (SPI_execute_with_args("SELECT counter_internal.run_skipped('flush', $1, $2,"
		                          " 'another session is flushing the counter')",
		                          2, types, args, nullptr, false, 1) != SPI_OK_SELECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("recording a skipped flush failed")));
		SPI_finish();
	});
	return 0;
}

} // namespace

// counter.flush(name text DEFAULT NULL) -> bigint: writes what is published
// for the named buffered counter (or every buffered counter of this
// database whose owner's privileges the caller has) to its delta table, in
// the caller's transaction; the entries written. 0 when another transaction
// is flushing the counter at this moment (recorded as a skipped run).
CE_FUNCTION(counter_flush) {
	if (!ce::buffer::available()) {
		notice_unpreloaded(PG_ARGISNULL(0) ? "(any)" : text_to_cstring(PG_GETARG_TEXT_PP(0)));
		if (!PG_ARGISNULL(0))
			find_counter(fcinfo); // an unknown name is still an error
		PG_RETURN_INT64(0);
	}
	int64 total = 0;
	if (!PG_ARGISNULL(0)) {
		Counter c = find_counter(fcinfo);
		require_owner_rights(c, "flush");
		if (OidIsValid(c.described_by))
			throw ce::Error(ce::sqlstate::feature_not_supported,
			                ce::format("tracked counter \"%s\" is flushed on the coordinator", c.name),
			                "Its catalog is the coordinator's: call counter.flush there (its flush job runs there).");
		if (c.buffered)
			total = flush_or_skip(c);
		PG_RETURN_INT64(total);
	}
	for (const Listed &l : list_buffered()) {
		if (!may_act_for(l.owner))
			continue;
		Counter c = load_counter(Int32GetDatum(l.id), true, CurrentMemoryContext);
		total += flush_or_skip(c);
	}
	PG_RETURN_INT64(total);
}

// counter_internal.tracked_buffer_busy(counter_id, w, keys) -> the keys that
// reconciliation up to w must leave alone because of buffered amounts (see
// ce::buffer::busy), judged with the statement's snapshot.
CE_FUNCTION(counter_tracked_buffer_busy) {
	Counter c = load_counter(PG_GETARG_DATUM(0), true, CurrentMemoryContext);
	require_owner_rights(c, "reconcile");
	TimestampTz w = PG_GETARG_TIMESTAMPTZ(1);
	ArrayType *keys = PG_GETARG_ARRAYTYPE_P(2);
	Oid elem = ARR_ELEMTYPE(keys);
	if (elem != c.key_type)
		throw ce::Error(ce::sqlstate::datatype_mismatch, "keys are not of the counter's key type");
	return ce::pg_guard([&c, keys, elem, w] {
		Elements in = elements_of(keys, elem);
		Datum *out = static_cast<Datum *>(palloc(sizeof(Datum) * (in.n + 1)));
		int busy = 0;
		Snapshot snapshot = GetActiveSnapshot();
		for (int i = 0; i < in.n; i++) {
			ce::buffer::Image image;
			if (!in.nulls[i] && ce::buffer::image_of(in.values[i], in.len, in.byval, &image) &&
			    ce::buffer::busy(c.id, image, w, snapshot))
				out[busy++] = in.values[i];
		}
		return PointerGetDatum(construct_array(out, busy, elem, in.len, in.byval, in.align));
	});
}

// counter_internal.tracked_buffered(counter_id, sample anyelement) -> every
// key of the counter with what the buffer adds to the table's value.
CE_FUNCTION(counter_tracked_buffered) {
	Counter c = load_counter(PG_GETARG_DATUM(0), true, CurrentMemoryContext);
	require_owner_rights(c, "read");
	if (get_fn_expr_argtype(fcinfo->flinfo, 1) != c.key_type)
		throw ce::Error(ce::sqlstate::datatype_mismatch, "the sample is not of the counter's key type");
	Snapshot snapshot = ActiveSnapshotSet() ? GetActiveSnapshot() : nullptr;
	std::vector<ce::buffer::Amount> all = ce::buffer::amounts(c.id, snapshot);
	std::unordered_map<std::string, std::pair<size_t, int64>> sums;
	for (size_t i = 0; i < all.size(); i++) {
		auto &slot = sums[std::string(all[i].key.bytes, all[i].key.len)];
		if (slot.second == 0 && slot.first == 0)
			slot.first = i + 1;
		slot.second += all[i].amount;
	}
	ce::pg_guard([fcinfo] { InitMaterializedSRF(fcinfo, 0); });
	auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
	for (auto &item : sums) {
		if (item.second.second == 0)
			continue;
		const ce::buffer::Image *image = &all[item.second.first - 1].key;
		int64 amount = item.second.second;
		Oid type = c.key_type;
		ce::pg_guard([rsinfo, image, amount, type] {
			int16 len;
			bool byval;
			get_typlenbyval(type, &len, &byval);
			Datum out[2] = {ce::buffer::datum_of(*image, len, byval), Int64GetDatum(amount)};
			bool outnull[2] = {false, false};
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnull);
		});
	}
	return (Datum)0;
}

// counter_internal.tracked_buffer_forget(counter_id): the counter goes
// (counter.untrack): what is published for it is dropped when this commits.
CE_FUNCTION(counter_tracked_buffer_forget) {
	Counter c = load_counter(PG_GETARG_DATUM(0), true, CurrentMemoryContext);
	require_owner_rights(c, "untrack");
	int64 n = 0;
	for (;;) {
		std::vector<ce::buffer::Amount> batch = ce::buffer::claim(c.id, flush_batch);
		n += static_cast<int64>(batch.size());
		if (batch.size() < flush_batch)
			break;
	}
	ce::buffer::drop_local(c.id);
	PG_RETURN_INT64(n);
}

// A node's placement buffers that 'owner' no longer has here: the buffer
// ids below 0 with entries in the owner's share whose placement is not this
// node's in its metadata (a moved shard's: the nodes' metadata keeps its
// placement id with the new node's group; a split shard's: gone). What they
// hold is never flushed nor read (the repair the move schedules counts those
// rows from the table): it is dropped, so the entries go back to the share
// instead of staying until the node restarts, and a shard moved back later
// does not find them again. The placements are looked up after their
// entries were seen, in one statement of their own (a new snapshot): adds
// reach a placement's buffer only once the metadata that put it here is
// committed. 'kept': the ids of the placements this flush wrote (n of
// them). Returns the entries dropped.
namespace {

struct NodePlacement {
	int64 shard;
	int32 id;
	char *table;
};

int64 drop_stranded(Oid owner, const NodePlacement *kept, int n) {
	if (!ce::buffer::available())
		return 0;
	std::vector<Datum> ids;
	for (int32 id : ce::buffer::negative_ids(owner)) {
		bool mine = false;
		for (int i = 0; i < n && !mine; i++)
			mine = kept[i].id == id;
		if (!mine)
			ids.push_back(Int64GetDatum(-int64{id}));
	}
	if (ids.empty())
		return 0;
	// the placement ids among them that are not this node's (palloc'd in
	// the caller's context: the guarded lambda owns nothing)
	int64 *gone = nullptr;
	uint64 ngone = 0;
	int64 **gp = &gone;
	uint64 *np = &ngone;
	Datum *idp = ids.data();
	int count = static_cast<int>(ids.size());
	ce::pg_guard([idp, count, gp, np] {
		MemoryContext caller = CurrentMemoryContext;
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		Oid types[1] = {INT8ARRAYOID};
		Datum args[1] = {PointerGetDatum(construct_array(idp, count, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE))};
		if (SPI_execute_with_args(
		        "SELECT u FROM pg_catalog.unnest($1) u WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_dist_placement p"
		        " JOIN pg_catalog.pg_dist_local_group g ON g.groupid OPERATOR(pg_catalog.=) p.groupid"
		        " WHERE p.placementid OPERATOR(pg_catalog.=) u)",
		        1, types, args, nullptr, false, 0) != SPI_OK_SELECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading the Citus metadata failed")));
		*gp = static_cast<int64 *>(MemoryContextAlloc(caller, sizeof(int64) * (SPI_processed + 1)));
		for (uint64 r = 0; r < SPI_processed; r++) {
			bool isnull = false;
			(*gp)[r] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull));
		}
		*np = SPI_processed;
		SPI_finish();
	});
	int64 dropped = 0;
	for (uint64 g = 0; g < ngone; g++) {
		int32 id = static_cast<int32>(-gone[g]);
		uint32 lock = static_cast<uint32>(id);
		ce::pg_guard([lock] { ce::locks::take(ce::locks::flush, lock, false, true); });
		for (;;) {
			std::vector<ce::buffer::Amount> batch = ce::buffer::claim(id, flush_batch);
			dropped += static_cast<int64>(batch.size());
			if (batch.size() < flush_batch)
				break;
			ce::check_for_interrupts();
		}
	}
	return dropped;
}

// Owns nothing C++: SPI inside. The least anchor, in the caller's memory
// context, of the shard of the anchors table 'anchors' (of type
// anchor_type) colocated with the delta shard 'delta_shard' (both on this
// node), into *out; false when it has none.
bool shard_least_anchor(int64 delta_shard, Oid anchors, Oid anchor_type, Datum *out) {
	MemoryContext caller = CurrentMemoryContext;
	if (SPI_connect() != SPI_OK_CONNECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
	Oid types[2] = {INT8OID, OIDOID};
	Datum args[2] = {Int64GetDatum(delta_shard), ObjectIdGetDatum(anchors)};
	if (SPI_execute_with_args("SELECT pg_catalog.shard_name(a.logicalrelid, a.shardid, false)"
	                          " FROM pg_catalog.pg_dist_shard d JOIN pg_catalog.pg_dist_shard a"
	                          " ON a.shardminvalue OPERATOR(pg_catalog.=) d.shardminvalue"
	                          " AND a.shardmaxvalue OPERATOR(pg_catalog.=) d.shardmaxvalue"
	                          " WHERE d.shardid OPERATOR(pg_catalog.=) $1"
	                          " AND a.logicalrelid OPERATOR(pg_catalog.=) $2::pg_catalog.regclass",
	                          2, types, args, nullptr, true, 2) != SPI_OK_SELECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading the Citus metadata failed")));
	bool found = false;
	if (SPI_processed == 1) {
		char *shard = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		// with a snapshot of its own (not read-only: the statement's is
		// older than what the flush claimed, and the anchor came in the
		// transaction of those amounts, committed before they were
		// published)
		if (SPI_execute(psprintf("SELECT a.anchor FROM %s a ORDER BY a.anchor LIMIT 1", shard), false, 1) !=
		    SPI_OK_SELECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading a tracked counter's anchors failed")));
		bool isnull = true;
		Datum anchor = (Datum)0;
		if (SPI_processed == 1)
			anchor = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		if (!isnull) {
			int16 len;
			bool byval;
			get_typlenbyval(anchor_type, &len, &byval);
			MemoryContext old = MemoryContextSwitchTo(caller);
			*out = datumCopy(anchor, byval, len);
			MemoryContextSwitchTo(old);
			found = true;
		}
	}
	SPI_finish();
	return found;
}

} // namespace

// counter_internal.tracked_node_flush(delta text, anchors text) -> text (1.8; Citus,
// doc/citus.md "Buffered"): writes what this node's
// buffers hold for the placements here of the shards of a buffered
// counter's distributed delta table into those shards, as the table's
// owner, in the caller's transaction (one of this node alone: the
// coordinator's flush runs it on every node, src/tracked.cpp flush_nodes).
// Returns {"epoch": when this node's shared table was made (microseconds,
// null without the preload), "shards": [[shard id, placement id, entries
// written], ...], "dropped": entries of the owner's placements gone from
// here let go (drop_stranded)}; no shards when 'delta' is no table here
// (counter.track asks each node's epoch before its tables are committed).
// Anchored (keyed by another column than the distribution column), a
// shard's rows are written at the least anchor of its colocated shard of
// 'anchors' (the counter's anchors; NULL for none). PUBLIC may execute it
// (99_internal.sql): it acts only on tables whose owner's rights its caller
// has.
CE_FUNCTION(counter_tracked_node_flush) {
	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	char *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char *anchors_name = PG_ARGISNULL(1) ? nullptr : text_to_cstring(PG_GETARG_TEXT_PP(1));
	Oid rel = ce::pg_guard([name] { return ce::citus::relation_named(name); });
	if (OidIsValid(rel))
		require_table_owner_rights(rel, "flush");
	Oid anchors = InvalidOid;
	Oid anchor_type = InvalidOid;
	if (OidIsValid(rel) && anchors_name != nullptr) {
		anchors = ce::pg_guard([anchors_name] { return ce::citus::relation_named(anchors_name); });
		if (!OidIsValid(anchors))
			throw ce::Error(ce::sqlstate::undefined_table,
			                ce::format("the anchors table %s of the buffered counter whose delta table is %s does not "
			                           "exist",
			                           anchors_name, name));
		require_table_owner_rights(anchors, "flush");
		anchor_type = ce::pg_guard([anchors] {
			AttrNumber att = get_attnum(anchors, "anchor");
			if (att == InvalidAttrNumber)
				ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
				                errmsg("%s is not the anchors table of a tracked counter", get_rel_name(anchors))));
			return get_atttype(anchors, att);
		});
	}
	using Local = NodePlacement;
	int n = 0;
	int *np = &n;
	Oid key_type = InvalidOid;
	Oid *kp = &key_type;
	Oid owner = ce::pg_guard([rel] { return ce::citus::relation_owner(rel); });
	Local *local = !OidIsValid(rel) ? nullptr : ce::pg_guard([rel, np, kp] {
		*kp = delta_key_type(rel);
		MemoryContext caller = CurrentMemoryContext;
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		Oid types[1] = {OIDOID};
		Datum args[1] = {ObjectIdGetDatum(rel)};
		if (SPI_execute_with_args("SELECT s.shardid FROM pg_catalog.pg_dist_shard s"
		                          " JOIN pg_catalog.pg_dist_placement p ON p.shardid OPERATOR(pg_catalog.=) s.shardid"
		                          " JOIN pg_catalog.pg_dist_local_group g ON g.groupid OPERATOR(pg_catalog.=) p.groupid"
		                          " WHERE s.logicalrelid OPERATOR(pg_catalog.=) $1::pg_catalog.regclass ORDER BY 1",
		                          1, types, args, nullptr, true, 0) != SPI_OK_SELECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading the Citus metadata failed")));
		uint64 m = SPI_processed;
		auto *shards = static_cast<int64 *>(palloc(sizeof(int64) * (m + 1)));
		for (uint64 i = 0; i < m; i++) {
			bool isnull;
			shards[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		}
		auto *out = static_cast<Local *>(MemoryContextAlloc(caller, sizeof(Local) * (m + 1)));
		for (uint64 i = 0; i < m; i++) {
			char *shard = nullptr;
			int32 id = placement_buffer(shards[i], rel, false, &shard);
			if (id == 0)
				continue;
			out[*np] = Local{shards[i], id, MemoryContextStrdup(caller, shard)};
			(*np)++;
		}
		SPI_finish();
		return out;
	});
	std::string json = "{\"epoch\": ";
	// (microseconds since 1970, as extract(epoch ...) * 1000000 gives them)
	json += ce::buffer::available()
	            ? std::to_string(ce::buffer::epoch() +
	                             int64{POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE} * SECS_PER_DAY * USECS_PER_SEC)
	            : std::string("null");
	json += ", \"shards\": [";
	for (int i = 0; i < n; i++) {
		int64 entries = 0;
		if (ce::buffer::available()) {
			uint32 lock = static_cast<uint32>(local[i].id);
			ce::pg_guard([lock] { ce::locks::take(ce::locks::flush, lock, false, true); });
			for (;;) {
				std::vector<ce::buffer::Amount> batch = ce::buffer::claim(local[i].id, flush_batch);
				if (batch.empty())
					break;
				FlushRow *rows =
				    ce::pg_guard([key_type, &batch] { return rows_of(key_type, batch.data(), batch.size()); });
				DeltaTarget target{local[i].table, key_type, owner, 0, local[i].id};
				if (OidIsValid(anchors)) {
					// anchored: at the shard's least anchor, which the
					// trigger that buffered these amounts made sure of
					// (shard_anchor), and which stays on the shard
					int64 shard = local[i].shard;
					Datum *ap = &target.anchor;
					if (!ce::pg_guard([shard, anchors, anchor_type, ap] {
						    return shard_least_anchor(shard, anchors, anchor_type, ap);
					    }))
						throw ce::Error(
						    ce::sqlstate::object_not_in_prerequisite_state,
						    ce::format("the shard of %s colocated with shard %lld of %s has no anchor: its "
						               "buffered amounts are not written",
						               anchors_name, static_cast<long long>(shard), name),
						    "A buffered counter's trigger gives a shard an anchor before it buffers what the "
						    "shard counts; a row of the anchors table was deleted.",
						    "counter.untrack and counter.track the counter again.");
					target.anchor_type = anchor_type;
				}
				write_rows(target, rows, batch.size());
				entries += static_cast<int64>(batch.size());
				if (batch.size() < flush_batch)
					break;
				ce::check_for_interrupts();
			}
		}
		json += (i > 0 ? ", [" : "[") + std::to_string(local[i].shard) + ", " + std::to_string(-int64{local[i].id}) +
		        ", " + std::to_string(entries) + "]";
	}
	json += "], \"dropped\": " + std::to_string(OidIsValid(rel) ? drop_stranded(owner, local, n) : 0) + "}";
	PG_RETURN_TEXT_P(
	    ce::pg_guard([&json] { return cstring_to_text_with_len(json.data(), static_cast<int>(json.size())); }));
}

// counter_internal.tracked_shard_pending(delta regclass, key anyelement) ->
// bigint (1.8; Citus): what the buffer of this node adds to the value of
// 'key' of a buffered counter whose distributed delta table is 'delta' (0
// when the key's shard is not here), as a read with the statement's
// snapshot sees it: counter.value's query, routed by Citus to the node that
// holds the key's shard, adds it there. PUBLIC may execute it
// (99_internal.sql): it reads only for a table whose owner's rights its
// caller has.
CE_FUNCTION(counter_tracked_shard_pending) {
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		PG_RETURN_INT64(0);
	Oid rel = PG_GETARG_OID(0);
	require_table_owner_rights(rel, "read");
	Oid type = get_fn_expr_argtype(fcinfo->flinfo, 1);
	Datum key = PG_GETARG_DATUM(1);
	if (ce::pg_guard([rel] { return delta_key_type(rel); }) != type)
		throw ce::Error(ce::sqlstate::datatype_mismatch, "the key is not of the counter's key type");
	if (!ce::buffer::available())
		PG_RETURN_INT64(0);
	ce::buffer::Image image;
	ce::buffer::Image *ip = &image;
	int32 id = ce::pg_guard([rel, type, key, ip] {
		int16 len;
		bool byval;
		get_typlenbyval(type, &len, &byval);
		if (!ce::buffer::image_of(key, len, byval, ip))
			return 0;
		if (SPI_connect() != SPI_OK_CONNECT)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
		int32 found = key_buffer(rel, type, key);
		SPI_finish();
		return found;
	});
	if (id == 0)
		PG_RETURN_INT64(0);
	PG_RETURN_INT64(ce::pg_guard([id, &image] { return ce::buffer::amount(id, image, GetActiveSnapshot()); }));
}

namespace {

// Owns nothing C++: SPI inside. The buffer of the placement on this node of
// the shard of the distributed delta table 'delta' that holds 'anchor' (of
// anchor_type; the delta table is distributed by its anchors), when
// 'anchor' is the least anchor of the shard of 'anchors' colocated with it
// (every anchor of a shard then names its buffer once); 0 otherwise, and
// when that shard has no placement here.
int32 anchor_buffer(Oid delta, Oid anchors, Oid anchor_type, Datum anchor) {
	if (SPI_connect() != SPI_OK_CONNECT)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
	Oid types[3] = {REGCLASSOID, REGCLASSOID, anchor_type};
	Datum args[3] = {ObjectIdGetDatum(delta), ObjectIdGetDatum(anchors), anchor};
	if (SPI_execute_with_args(
	        "SELECT pg_catalog.get_shard_id_for_distribution_column($1, $3),"
	        " pg_catalog.shard_name($2, pg_catalog.get_shard_id_for_distribution_column($2, $3), false)",
	        3, types, args, nullptr, true, 1) != SPI_OK_SELECT ||
	    SPI_processed != 1)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading the Citus metadata failed")));
	bool isnull;
	Datum shard = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	char *anchors_shard = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	int32 id = isnull || anchors_shard == nullptr ? 0 : placement_buffer(DatumGetInt64(shard), delta, false, nullptr);
	if (id != 0) {
		char *lt = ce::keys::qualified_operator(anchor_type, BTLessStrategyNumber);
		Oid type[1] = {anchor_type};
		Datum arg[1] = {anchor};
		if (SPI_execute_with_args(
		        psprintf("SELECT NOT EXISTS (SELECT FROM %s a WHERE a.anchor %s $1)", anchors_shard, lt), 1, type, arg,
		        nullptr, true, 1) != SPI_OK_SELECT ||
		    SPI_processed != 1)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("reading a tracked counter's anchors failed")));
		if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
			id = 0;
	}
	SPI_finish();
	return id;
}

// The checks of the anchored reads below (arguments delta, anchors,
// anchor, and a key or a value of the key type), and the buffer they
// read (0: none here, or not this anchor's to read).
int32 anchored_read(FunctionCallInfo fcinfo) {
	Oid delta = PG_GETARG_OID(0);
	Oid anchors = PG_GETARG_OID(1);
	require_table_owner_rights(delta, "read");
	require_table_owner_rights(anchors, "read");
	Oid anchor_type = get_fn_expr_argtype(fcinfo->flinfo, 2);
	Oid type = get_fn_expr_argtype(fcinfo->flinfo, 3);
	if (ce::pg_guard([delta] { return delta_key_type(delta); }) != type)
		throw ce::Error(ce::sqlstate::datatype_mismatch, "the key is not of the counter's key type");
	if (ce::pg_guard([anchors] { return get_atttype(anchors, get_attnum(anchors, "anchor")); }) != anchor_type)
		throw ce::Error(ce::sqlstate::datatype_mismatch, "the anchor is not of the counter's anchor type");
	if (!ce::buffer::available())
		return 0;
	Datum anchor = PG_GETARG_DATUM(2);
	return ce::pg_guard(
	    [delta, anchors, anchor_type, anchor] { return anchor_buffer(delta, anchors, anchor_type, anchor); });
}

} // namespace

// counter_internal.tracked_anchor_pending(delta regclass, anchors regclass,
// anchor "any", key anyelement) -> bigint (1.8; Citus, doc/citus.md
// "Buffered"): for a buffered counter keyed by another column than the
// distribution column, what this node's buffer of the delta shard that
// holds 'anchor' adds to the value of 'key', as a read with the
// statement's snapshot sees it, when 'anchor' is the least anchor of its
// shard (else 0): counter.value's query reads it for every anchor, on each
// shard's node (the query Citus pushes down), and so adds each shard's
// amount once. PUBLIC may execute it (99_internal.sql): it reads only for
// tables whose owner's rights its caller has.
CE_FUNCTION(counter_tracked_anchor_pending) {
	for (int i = 0; i < 4; i++)
		if (PG_ARGISNULL(i))
			PG_RETURN_INT64(0);
	int32 id = anchored_read(fcinfo);
	if (id == 0)
		PG_RETURN_INT64(0);
	Oid type = get_fn_expr_argtype(fcinfo->flinfo, 3);
	Datum key = PG_GETARG_DATUM(3);
	ce::buffer::Image image;
	ce::buffer::Image *ip = &image;
	bool imaged = ce::pg_guard([type, key, ip] {
		int16 len;
		bool byval;
		get_typlenbyval(type, &len, &byval);
		return ce::buffer::image_of(key, len, byval, ip);
	});
	if (!imaged)
		PG_RETURN_INT64(0);
	PG_RETURN_INT64(ce::pg_guard([id, &image] { return ce::buffer::amount(id, image, GetActiveSnapshot()); }));
}

// counter_internal.tracked_anchor_pending_rows(delta regclass, anchors
// regclass, anchor "any", key_type anyelement) -> table (key anyelement,
// amount bigint) (1.8; Citus): the same for every key: one row per (key,
// bucket) the buffer holds, as a read with the statement's snapshot sees
// it (counter.tracked_values sums them with the shards' rows).
CE_FUNCTION(counter_tracked_anchor_pending_rows) {
	ce::pg_guard([fcinfo] { InitMaterializedSRF(fcinfo, 0); });
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		return (Datum)0;
	int32 id = anchored_read(fcinfo);
	if (id == 0)
		return (Datum)0;
	Oid type = get_fn_expr_argtype(fcinfo->flinfo, 3);
	Snapshot snapshot = ActiveSnapshotSet() ? GetActiveSnapshot() : nullptr;
	std::vector<ce::buffer::Amount> got = ce::buffer::amounts(id, snapshot);
	ce::pg_guard([fcinfo, type, &got] {
		auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
		int16 len;
		bool byval;
		get_typlenbyval(type, &len, &byval);
		for (const ce::buffer::Amount &a : got) {
			Datum values[2] = {ce::buffer::datum_of(a.key, len, byval), Int64GetDatum(a.amount)};
			bool nulls[2] = {false, false};
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	});
	return (Datum)0;
}

// counter_internal.tracked_shard_busy(shard regclass, w timestamptz, keys
// anyarray) -> anyarray (1.8; Citus): the keys among 'keys' that a
// reconciliation up to w of the delta shard 'shard' (on this node) must
// leave alone because of what this node's buffer holds for them (see
// ce::buffer::busy), judged with the statement's snapshot: the shard's
// compare-and-repair statement calls it (shard_reconcile_plan). PUBLIC may
// execute it (99_internal.sql): it reads only for a table whose owner's
// rights its caller has.
CE_FUNCTION(counter_tracked_shard_busy) {
	Oid rel = PG_GETARG_OID(0);
	require_table_owner_rights(rel, "reconcile");
	TimestampTz w = PG_GETARG_TIMESTAMPTZ(1);
	ArrayType *keys = PG_GETARG_ARRAYTYPE_P(2);
	Oid elem = ARR_ELEMTYPE(keys);
	bool buffered = ce::buffer::available();
	return ce::pg_guard([rel, keys, elem, w, buffered] {
		Elements in = elements_of(keys, elem);
		Datum *out = static_cast<Datum *>(palloc(sizeof(Datum) * (in.n + 1)));
		int busy = 0;
		int32 id = 0;
		if (buffered && in.n > 0) {
			if (SPI_connect() != SPI_OK_CONNECT)
				ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("SPI_connect failed")));
			id = placement_buffer(shard_id_of_name(get_rel_name(rel)), rel, true, nullptr);
			SPI_finish();
		}
		Snapshot snapshot = GetActiveSnapshot();
		for (int i = 0; id != 0 && i < in.n; i++) {
			ce::buffer::Image image;
			if (!in.nulls[i] && ce::buffer::image_of(in.values[i], in.len, in.byval, &image) &&
			    ce::buffer::busy(id, image, w, snapshot))
				out[busy++] = in.values[i];
		}
		return PointerGetDatum(construct_array(out, busy, elem, in.len, in.byval, in.align));
	});
}

// counter_internal.tracked_buffer_epoch(): when the shared table was made,
// NULL when the library is not preloaded.
CE_FUNCTION(counter_tracked_buffer_epoch) {
	(void)fcinfo;
	if (!ce::buffer::available())
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(ce::buffer::epoch());
}

// counter.buffer_status(): one row per buffered counter the caller may act
// for: whether the library is preloaded, what the shared table holds for it,
// its flushes and repairs.
CE_FUNCTION(counter_buffer_status) {
	std::vector<Listed> listed = list_buffered();
	std::vector<ce::buffer::ShareStats> shares = ce::buffer::shares();
	ce::pg_guard([fcinfo] { InitMaterializedSRF(fcinfo, 0); });
	auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
	bool preloaded = ce::buffer::available();
	for (const Listed &l : listed) {
		if (!may_act_for(l.owner))
			continue;
		ce::buffer::Stats st = ce::buffer::stats(l.id);
		// the figure of this owner's share in this database, not the cluster's
		int64 overflows = overflows_of(shares, l.owner);
		const Listed *lp = &l;
		ce::pg_guard([rsinfo, lp, st, preloaded, overflows] {
			Datum out[11] = {
			    CStringGetTextDatum(lp->name),       BoolGetDatum(preloaded),     Int64GetDatum(st.entries),
			    Int64GetDatum(st.pending),           Int64GetDatum(st.in_flight), Int64GetDatum(st.pinned),
			    TimestampTzGetDatum(lp->flushed_at), Int64GetDatum(lp->flushes),  Int64GetDatum(lp->repairs),
			    TimestampTzGetDatum(lp->repair_at),  Int64GetDatum(overflows)};
			bool nulls[11] = {false, false, false,           false, false, false, lp->flushed_null,
			                  false, false, lp->repair_null, false};
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
		});
	}
	return (Datum)0;
}

// counter.buffer_shares(): one row per share of the shared table in this
// database whose owner's privileges the caller has (every share to a member
// of pg_monitor): what it holds and the limits it has, its adds written
// directly and its early flushes. Nothing when the library is not preloaded.
CE_FUNCTION(counter_buffer_shares) {
	std::vector<ce::buffer::ShareStats> all = ce::buffer::shares();
	ce::buffer::ShareLimits limits = ce::buffer::share_limits();
	ce::pg_guard([fcinfo] { InitMaterializedSRF(fcinfo, 0); });
	auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
	bool monitor = ce::pg_guard([] { return has_privs_of_role(GetUserId(), ROLE_PG_MONITOR); });
	for (const ce::buffer::ShareStats &sh : all) {
		if (!monitor && !may_act_for(sh.owner))
			continue;
		const ce::buffer::ShareStats *shp = &sh;
		const ce::buffer::ShareLimits *lp = &limits;
		ce::pg_guard([rsinfo, shp, lp] {
			Datum out[7] = {ObjectIdGetDatum(shp->owner),     Int64GetDatum(shp->entries),
			                Int64GetDatum(lp->reserve),       Int64GetDatum(lp->cap),
			                Int64GetDatum(lp->mark),          Int64GetDatum(shp->overflows),
			                Int64GetDatum(shp->early_flushes)};
			bool nulls[7] = {false, false, false, false, false, false, false};
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
		});
	}
	return (Datum)0;
}

// counter.buffer_totals(): for a member of pg_monitor, one row per owner of
// buffered counters whose privileges the caller does not have, with the sums
// of what buffer_status shows for them (the counters named by neither); for
// other callers nothing. counter.metrics folds these into the series of
// object '*' (doc/monitoring.md).
CE_FUNCTION(counter_buffer_totals) {
	struct Total {
		Oid owner;
		int64 counters;
		int64 entries;
		int64 pending;
		int64 in_flight;
		int64 overflows;
	};
	std::vector<Listed> listed = list_buffered();
	std::vector<ce::buffer::ShareStats> shares = ce::buffer::shares();
	ce::pg_guard([fcinfo] { InitMaterializedSRF(fcinfo, 0); });
	auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
	bool monitor = ce::pg_guard([] { return has_privs_of_role(GetUserId(), ROLE_PG_MONITOR); });
	if (!monitor)
		return (Datum)0;
	std::vector<Total> totals;
	for (const Listed &l : listed) {
		if (may_act_for(l.owner))
			continue;
		ce::buffer::Stats st = ce::buffer::stats(l.id);
		Total *t = nullptr;
		for (Total &x : totals)
			if (x.owner == l.owner)
				t = &x;
		if (t == nullptr) {
			totals.push_back(Total{l.owner, 0, 0, 0, 0, overflows_of(shares, l.owner)});
			t = &totals.back();
		}
		t->counters++;
		t->entries += st.entries;
		t->pending += st.pending;
		t->in_flight += st.in_flight;
	}
	for (const Total &t : totals) {
		const Total *tp = &t;
		ce::pg_guard([rsinfo, tp] {
			Datum out[6] = {ObjectIdGetDatum(tp->owner), Int64GetDatum(tp->counters),  Int64GetDatum(tp->entries),
			                Int64GetDatum(tp->pending),  Int64GetDatum(tp->in_flight), Int64GetDatum(tp->overflows)};
			bool nulls[6] = {false, false, false, false, false, false};
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
		});
	}
	return (Datum)0;
}

// ---------------------------------------------------------------------------
// C symbols of 1.0 and 1.1 that 1.2 no longer calls. They stay, so that the
// SQL of an installation not yet updated still loads (CREATE EXTENSION
// counter_ext VERSION '1.1' works, ALTER EXTENSION ... UPDATE can run);
// called, they say what to do.

namespace {

[[noreturn]] void needs_update() {
	throw ce::Error("55000", "this counter_ext function belongs to an older version of the extension's SQL",
	                ce::format("The library is version %s.", COUNTER_EXT_VERSION),
	                "Run ALTER EXTENSION counter_ext UPDATE in this database.");
}

} // namespace

CE_FUNCTION(counter_tracked_check_filter) {
	(void)fcinfo;
	needs_update();
}

CE_FUNCTION(counter_tracked_compile_filter) {
	(void)fcinfo;
	needs_update();
}
