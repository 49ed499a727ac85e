// ce::source (counter_ext/source.hpp): is the trigger's table the counter's
// source or one of its partitions; is counter_ext moving rows between them.
//
//   counter_internal.rows_moving(on boolean) RETURNS void
#include "counter_ext/source.hpp"
#include "counter_ext/wall.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/partition.h"
#include "nodes/pg_list.h"
#include "utils/inval.h"
}

namespace {

// The answers for partitions, by (partition, source); any relcache
// invalidation forgets them all (a refill is one pg_inherits look-up per
// level). Plain data: no allocation, nothing to free.
struct Answer {
	Oid relid;
	Oid source;
	bool accepted;
};
constexpr int answer_slots = 64;
Answer answers[answer_slots];
uint64 generation = 0; // bumped by every invalidation
bool registered = false;

void forget(Datum, Oid) {
	ce::boundary([] {
		memset(answers, 0, sizeof(answers));
		generation++;
	});
}

} // namespace

bool ce::source::accepts(Relation rel, Oid source) {
	Oid relid = RelationGetRelid(rel);
	if (relid == source)
		return true;
	if (!rel->rd_rel->relispartition || !OidIsValid(source))
		return false;
	if (!registered) {
		CacheRegisterRelcacheCallback(forget, (Datum)0);
		registered = true;
	}
	Answer &slot = answers[(relid * 31u + source) % answer_slots];
	if (slot.relid == relid && slot.source == source)
		return slot.accepted;
	uint64 before = generation;
	List *ancestors = get_partition_ancestors(relid);
	bool accepted = list_member_oid(ancestors, source);
	list_free(ancestors);
	if (generation == before) // no invalidation arrived while we looked
		slot = Answer{relid, source, accepted};
	return accepted;
}

namespace {

// The subtransaction that set the flag (InvalidSubTransactionId: not set).
SubTransactionId moving_since = InvalidSubTransactionId;
bool moving_callbacks = false;

void moving_xact_end(XactEvent, void *) {
	ce::boundary([] { moving_since = InvalidSubTransactionId; });
}

// Aborting a subtransaction aborts those inside it, whose ids are greater.
void moving_subxact_end(SubXactEvent event, SubTransactionId my, SubTransactionId, void *) {
	ce::boundary([event, my] {
		if (event == SUBXACT_EVENT_ABORT_SUB && moving_since != InvalidSubTransactionId && moving_since >= my)
			moving_since = InvalidSubTransactionId;
	});
}

} // namespace

bool ce::source::moving_rows() {
	return moving_since != InvalidSubTransactionId;
}

// counter_internal.rows_moving(on boolean): see moving_rows.
CE_FUNCTION(counter_rows_moving) {
	ce::require_arg(fcinfo, 0, "on");
	bool on = PG_GETARG_BOOL(0);
	if (!moving_callbacks) {
		ce::pg_guard([] {
			RegisterXactCallback(moving_xact_end, nullptr);
			RegisterSubXactCallback(moving_subxact_end, nullptr);
		});
		moving_callbacks = true;
	}
	moving_since = on ? ce::pg_guard([] { return GetCurrentSubTransactionId(); }) : InvalidSubTransactionId;
	PG_RETURN_VOID();
}
