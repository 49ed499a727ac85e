// counter.pncounter: the SQL face of the PN-counter (pncounter_core.cpp).
//
// A stored value is a varlena whose payload is the canonical binary form, so
// equal states are equal bytes: equality and hashing work on the bytes, and
// send/recv move them unchanged (recv validates them first).
#include "counter_ext/wall.hpp"
#include "counter_ext/guc.hpp"
#include "counter_ext/pncounter_core.hpp"

extern "C" {
#include "common/hashfn.h"
#include "lib/stringinfo.h"
#include "utils/expandeddatum.h"
#include "utils/tuplestore.h"
}

#include <algorithm>
#include <cstring>
#include <string>

namespace pn = ce::pncounter;

namespace {

// "object not in prerequisite state": the server has no node id yet.
constexpr char node_id_not_set[] = "55000";

const varlena *varlena_arg(FunctionCallInfo fcinfo, int argno) {
	return ce::pg_guard([fcinfo, argno] { return PG_GETARG_VARLENA_PP(argno); });
}

pn::State state_arg(FunctionCallInfo fcinfo, int argno) {
	const varlena *v = varlena_arg(fcinfo, argno);
	return pn::decode(reinterpret_cast<const unsigned char *>(VARDATA_ANY(v)), VARSIZE_ANY_EXHDR(v));
}

// A palloc'd varlena holding 'count' entries in canonical form.
varlena *encode_varlena(const pn::Entry *entries, std::size_t count) {
	std::size_t size = VARHDRSZ + pn::encoded_size(entries, count);
	varlena *out = ce::pg_guard([size] { return static_cast<varlena *>(palloc(size)); });
	SET_VARSIZE(out, size);
	pn::encode(entries, count, reinterpret_cast<unsigned char *>(VARDATA(out)));
	return out;
}

Datum state_datum(const pn::State &s) {
	return PointerGetDatum(encode_varlena(s.data(), s.size()));
}

// The node an increment counts for: the argument, else counter_ext.node_id.
std::string node_arg(FunctionCallInfo fcinfo, int argno) {
	if (!PG_ARGISNULL(argno)) {
		const varlena *t = varlena_arg(fcinfo, argno);
		return std::string(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
	}
	const char *setting = ce::node_id_setting;
	if (setting == nullptr || setting[0] == '\0')
		throw ce::Error(node_id_not_set, "counter_ext.node_id is not set",
		                "Without a node argument, an increment or decrement counts for the node named by "
		                "counter_ext.node_id.",
		                "Give this server its own node id (as a superuser: ALTER SYSTEM SET counter_ext.node_id = "
		                "'site_a'; SELECT pg_reload_conf();) or pass node => 'site_a'.");
	return setting;
}

// The argument positions of an increment: (c, amount, node) for the STABLE
// forms, (c, node, amount) for the IMMUTABLE _at forms.
struct StepArgs {
	int amount;
	int node;
};

Datum add_step(FunctionCallInfo fcinfo, bool decrement, StepArgs args = {1, 2}) {
	ce::require_arg(fcinfo, args.amount, "amount");
	int64 amount = PG_GETARG_INT64(args.amount);
	if (amount <= 0)
		throw ce::Error(ce::sqlstate::invalid_parameter_value, "the amount must be positive",
		                ce::format("The amount was %lld.", static_cast<long long>(amount)),
		                decrement ? "To add, use counter.pncounter_increment."
		                          : "To subtract, use counter.pncounter_decrement.");
	std::string node = node_arg(fcinfo, args.node);
	// A NULL state is the empty counter, so a new row's column may start NULL.
	pn::State s = PG_ARGISNULL(0) ? pn::State() : state_arg(fcinfo, 0);
	pn::add(s, node, static_cast<std::uint64_t>(amount), decrement);
	return state_datum(s);
}

// --- aggregate state: entries palloc'd in the aggregate context ------------

struct MergeState {
	pn::Entry *entries;
	std::size_t count;
	std::size_t capacity;
};

MemoryContext agg_context(FunctionCallInfo fcinfo, const char *function) {
	MemoryContext context = nullptr;
	if (!AggCheckCallContext(fcinfo, &context))
		throw ce::Error(ce::sqlstate::internal_error, ce::format("%s called in non-aggregate context", function));
	return context;
}

MergeState *agg_new(MemoryContext context, std::size_t capacity) {
	return ce::pg_guard([context, capacity] {
		MergeState *st = static_cast<MergeState *>(MemoryContextAlloc(context, sizeof(MergeState)));
		st->entries = nullptr;
		st->count = 0;
		st->capacity = 0;
		if (capacity > 0) {
			st->entries = static_cast<pn::Entry *>(MemoryContextAlloc(context, capacity * sizeof(pn::Entry)));
			st->capacity = capacity;
		}
		return st;
	});
}

// Merges 'count' entries into the state, growing its array when new nodes come.
void agg_absorb(MemoryContext context, MergeState *st, const pn::Entry *src, std::size_t count) {
	if (pn::merge_in_place(st->entries, st->count, src, count))
		return;
	pn::State merged = pn::merge(st->entries, st->count, src, count);
	if (merged.size() > st->capacity) {
		std::size_t capacity = std::min(std::max(merged.size(), 2 * st->capacity), pn::max_nodes);
		pn::Entry *old = st->entries;
		st->entries = ce::pg_guard([context, capacity] {
			return static_cast<pn::Entry *>(MemoryContextAlloc(context, capacity * sizeof(pn::Entry)));
		});
		st->capacity = capacity;
		if (old != nullptr)
			ce::pg_guard([old] { pfree(old); });
	}
	std::memcpy(static_cast<void *>(st->entries), merged.data(), merged.size() * sizeof(pn::Entry));
	st->count = merged.size();
}

MergeState *agg_arg(FunctionCallInfo fcinfo, int argno) {
	return PG_ARGISNULL(argno) ? nullptr : reinterpret_cast<MergeState *>(PG_GETARG_POINTER(argno));
}

// --- pncounter_merge_agg's state: an expanded counter.pncounter -------------
//
// A real type with text I/O and a combine function, so Citus pushes the
// aggregate down for any grouping (doc/citus.md). Row by row it is an
// expanded object around a MergeState (in ce::aggregate_state_context),
// merged in place; its bytes are the canonical encoding,
// written only when PostgreSQL or Citus needs them.

struct PnObject {
	ExpandedObjectHeader hdr;
	MergeState st;
};

// Called by PostgreSQL (no C++ objects, no PostgreSQL calls).
Size pn_object_flat_size(ExpandedObjectHeader *eoh) {
	const PnObject *e = reinterpret_cast<const PnObject *>(eoh);
	return VARHDRSZ + pn::encoded_size(e->st.entries, e->st.count);
}

void pn_object_flatten(ExpandedObjectHeader *eoh, void *result, Size allocated_size) {
	const PnObject *e = reinterpret_cast<const PnObject *>(eoh);
	SET_VARSIZE(result, allocated_size);
	pn::encode(e->st.entries, e->st.count, reinterpret_cast<unsigned char *>(VARDATA(result)));
}

const ExpandedObjectMethods pn_object_methods = {pn_object_flat_size, pn_object_flatten};

// Ours, read-write or read-only (a final function gets it read-only).
inline PnObject *pn_object_of(Datum d) {
	if (!VARATT_IS_EXTERNAL_EXPANDED(DatumGetPointer(d)))
		return nullptr;
	ExpandedObjectHeader *eoh = DatumGetEOHP(d);
	return eoh->eoh_methods == &pn_object_methods ? reinterpret_cast<PnObject *>(eoh) : nullptr;
}

// Adds argument 'argno' (a state, ours or flat) into e.
void pn_object_absorb(FunctionCallInfo fcinfo, PnObject *e, int argno) {
	const PnObject *other = pn_object_of(PG_GETARG_DATUM(argno));
	if (other != nullptr) {
		agg_absorb(e->hdr.eoh_context, &e->st, other->st.entries, other->st.count);
	} else {
		pn::State in = state_arg(fcinfo, argno);
		agg_absorb(e->hdr.eoh_context, &e->st, in.data(), in.size());
	}
}

// The object to merge into: the read-write one the aggregate passes back,
// else a new one holding argument 'argno' (NULL: empty).
PnObject *pn_object_arg(FunctionCallInfo fcinfo, int argno) {
	if (likely(!PG_ARGISNULL(argno) && VARATT_IS_EXTERNAL_EXPANDED_RW(DatumGetPointer(PG_GETARG_DATUM(argno))))) {
		PnObject *e = pn_object_of(PG_GETARG_DATUM(argno));
		if (likely(e != nullptr))
			return e;
	}
	MemoryContext cxt = ce::aggregate_state_context(fcinfo, "counter.pncounter_merge_trans");
	PnObject *e = ce::pg_guard([cxt] {
		PnObject *obj = static_cast<PnObject *>(MemoryContextAllocZero(cxt, sizeof(PnObject)));
		EOH_init_header(&obj->hdr, &pn_object_methods, cxt);
		return obj;
	});
	if (!PG_ARGISNULL(argno))
		pn_object_absorb(fcinfo, e, argno);
	return e;
}

} // namespace

// --- type I/O ---------------------------------------------------------------

// counter.pncounter_in(cstring)
CE_FUNCTION(counter_pncounter_in) {
	const char *text = PG_GETARG_CSTRING(0);
	return state_datum(pn::parse_text(text));
}

// counter.pncounter_out(counter.pncounter)
CE_FUNCTION(counter_pncounter_out) {
	pn::State s = state_arg(fcinfo, 0);
	std::string text = pn::to_text(s.data(), s.size());
	const char *p = text.c_str();
	return CStringGetDatum(ce::pg_guard([p] { return pstrdup(p); }));
}

// counter.pncounter_recv(internal): validates the canonical binary form.
CE_FUNCTION(counter_pncounter_recv) {
	StringInfo buf = reinterpret_cast<StringInfo>(PG_GETARG_POINTER(0));
	const unsigned char *data = reinterpret_cast<const unsigned char *>(buf->data) + buf->cursor;
	std::size_t len = static_cast<std::size_t>(buf->len - buf->cursor);
	pn::State s = pn::decode(data, len);
	buf->cursor = buf->len;
	return state_datum(s);
}

// counter.pncounter_send(counter.pncounter): the stored bytes, as they are.
CE_FUNCTION(counter_pncounter_send) {
	const varlena *v = PG_GETARG_VARLENA_PP(0);
	std::size_t len = VARSIZE_ANY_EXHDR(v);
	bytea *out = static_cast<bytea *>(palloc(VARHDRSZ + len));
	SET_VARSIZE(out, VARHDRSZ + len);
	std::memcpy(VARDATA(out), VARDATA_ANY(v), len);
	PG_RETURN_BYTEA_P(out);
}

// counter.pncounter_from_bytea(bytea): the cast from bytea, validated like recv.
CE_FUNCTION(counter_pncounter_from_bytea) {
	return state_datum(state_arg(fcinfo, 0));
}

// --- operations -------------------------------------------------------------

// counter.pncounter_increment(c, amount, node)
CE_FUNCTION(counter_pncounter_increment) {
	return add_step(fcinfo, false);
}

// counter.pncounter_decrement(c, amount, node)
CE_FUNCTION(counter_pncounter_decrement) {
	return add_step(fcinfo, true);
}

// counter.pncounter_increment_at(c, node, amount) and _decrement_at: the node
// is an argument, never the setting, so the result depends on the arguments
// only (IMMUTABLE: usable in a distributed UPDATE or upsert).
namespace {
Datum add_step_at(FunctionCallInfo fcinfo, bool decrement) {
	if (PG_ARGISNULL(1))
		throw ce::Error(ce::sqlstate::null_value_not_allowed, "the node must not be NULL",
		                decrement ? "counter.pncounter_decrement_at counts for the node it is given."
		                          : "counter.pncounter_increment_at counts for the node it is given.",
		                "Pass the node id, e.g. 'site_a'; the forms without _at default to counter_ext.node_id.");
	return add_step(fcinfo, decrement, {2, 1});
}
} // namespace

CE_FUNCTION(counter_pncounter_increment_at) {
	return add_step_at(fcinfo, false);
}

CE_FUNCTION(counter_pncounter_decrement_at) {
	return add_step_at(fcinfo, true);
}

// counter.pncounter_value(c): sum of increments minus sum of decrements.
CE_FUNCTION(counter_pncounter_value) {
	pn::State s = state_arg(fcinfo, 0);
	return Int64GetDatum(pn::value(s));
}

// counter.pncounter_merge(a, b): the per-node maximum.
CE_FUNCTION(counter_pncounter_merge) {
	pn::State a = state_arg(fcinfo, 0);
	pn::State b = state_arg(fcinfo, 1);
	return state_datum(pn::merge(a, b));
}

// counter.pncounter_nodes(c): one row per node.
CE_FUNCTION(counter_pncounter_nodes) {
	pn::State s = state_arg(fcinfo, 0);
	const pn::State *state = &s;
	ce::pg_guard([fcinfo, state] {
		InitMaterializedSRF(fcinfo, 0);
		ReturnSetInfo *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
		for (std::size_t i = 0; i < state->size(); i++) {
			const pn::Entry &e = (*state)[i];
			Datum values[3];
			bool nulls[3] = {false, false, false};
			values[0] = PointerGetDatum(cstring_to_text_with_len(e.id, e.id_len));
			values[1] = Int64GetDatum(static_cast<int64>(e.p));
			values[2] = Int64GetDatum(static_cast<int64>(e.n));
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	});
	return static_cast<Datum>(0);
}

// --- equality and hashing: canonical bytes ----------------------------------

static bool same_bytes(FunctionCallInfo fcinfo) {
	const varlena *a = PG_GETARG_VARLENA_PP(0);
	const varlena *b = PG_GETARG_VARLENA_PP(1);
	std::size_t len = VARSIZE_ANY_EXHDR(a);
	return len == VARSIZE_ANY_EXHDR(b) && std::memcmp(VARDATA_ANY(a), VARDATA_ANY(b), len) == 0;
}

// counter.pncounter_eq(a, b)
CE_FUNCTION(counter_pncounter_eq) {
	return BoolGetDatum(same_bytes(fcinfo));
}

// counter.pncounter_ne(a, b)
CE_FUNCTION(counter_pncounter_ne) {
	return BoolGetDatum(!same_bytes(fcinfo));
}

// counter.pncounter_hash(c)
CE_FUNCTION(counter_pncounter_hash) {
	const varlena *v = PG_GETARG_VARLENA_PP(0);
	return hash_any(reinterpret_cast<const unsigned char *>(VARDATA_ANY(v)), static_cast<int>(VARSIZE_ANY_EXHDR(v)));
}

// counter.pncounter_hash_extended(c, seed)
CE_FUNCTION(counter_pncounter_hash_extended) {
	const varlena *v = PG_GETARG_VARLENA_PP(0);
	return hash_any_extended(reinterpret_cast<const unsigned char *>(VARDATA_ANY(v)),
	                         static_cast<int>(VARSIZE_ANY_EXHDR(v)), static_cast<uint64>(PG_GETARG_INT64(1)));
}

// --- the merge aggregate ----------------------------------------------------

// counter.pncounter_agg_trans(internal, counter.pncounter)
CE_FUNCTION(counter_pncounter_agg_trans) {
	MemoryContext context = agg_context(fcinfo, "counter.pncounter_agg_trans");
	MergeState *st = agg_arg(fcinfo, 0);
	if (!PG_ARGISNULL(1)) {
		pn::State in = state_arg(fcinfo, 1);
		if (st == nullptr)
			st = agg_new(context, in.size());
		agg_absorb(context, st, in.data(), in.size());
	}
	if (st == nullptr)
		PG_RETURN_NULL();
	return PointerGetDatum(st);
}

// counter.pncounter_agg_combine(internal, internal)
CE_FUNCTION(counter_pncounter_agg_combine) {
	MemoryContext context = agg_context(fcinfo, "counter.pncounter_agg_combine");
	MergeState *a = agg_arg(fcinfo, 0);
	MergeState *b = agg_arg(fcinfo, 1);
	if (b != nullptr) {
		if (a == nullptr) // a copy in the aggregate context, never b itself
			a = agg_new(context, b->count);
		agg_absorb(context, a, b->entries, b->count);
	}
	if (a == nullptr)
		PG_RETURN_NULL();
	return PointerGetDatum(a);
}

// counter.pncounter_agg_serialize(internal): the canonical bytes.
CE_FUNCTION(counter_pncounter_agg_serialize) {
	const MergeState *st = reinterpret_cast<const MergeState *>(PG_GETARG_POINTER(0));
	return PointerGetDatum(encode_varlena(st->entries, st->count));
}

// counter.pncounter_agg_deserialize(bytea, internal): validated like recv.
CE_FUNCTION(counter_pncounter_agg_deserialize) {
	const varlena *v = varlena_arg(fcinfo, 0);
	pn::State s = pn::decode(reinterpret_cast<const unsigned char *>(VARDATA_ANY(v)), VARSIZE_ANY_EXHDR(v));
	MergeState *st = agg_new(CurrentMemoryContext, s.size());
	if (!s.empty())
		std::memcpy(static_cast<void *>(st->entries), s.data(), s.size() * sizeof(pn::Entry));
	st->count = s.size();
	return PointerGetDatum(st);
}

// counter.pncounter_agg_final(internal): reads the state, never changes it.
CE_FUNCTION(counter_pncounter_agg_final) {
	const MergeState *st = reinterpret_cast<const MergeState *>(PG_GETARG_POINTER(0));
	return PointerGetDatum(encode_varlena(st->entries, st->count));
}

// counter.pncounter_merge_trans(counter.pncounter, counter.pncounter): the
// transition and combine function of pncounter_merge_agg: b merged into a,
// NULLs skipped (NULL until the first state).
CE_FUNCTION(counter_pncounter_merge_trans) {
	if (PG_ARGISNULL(1)) {
		if (PG_ARGISNULL(0))
			PG_RETURN_NULL();
		return PG_GETARG_DATUM(0);
	}
	PnObject *e = pn_object_arg(fcinfo, 0);
	pn_object_absorb(fcinfo, e, 1);
	return EOHPGetRWDatum(&e->hdr);
}

// counter.pncounter_merge_final(counter.pncounter): the state as plain bytes.
CE_FUNCTION(counter_pncounter_merge_final) {
	const PnObject *e = pn_object_of(PG_GETARG_DATUM(0));
	if (e == nullptr)
		return PG_GETARG_DATUM(0);
	return PointerGetDatum(encode_varlena(e->st.entries, e->st.count));
}

// --- test-only entry points (the suite creates them in schema counter_test) --

// counter_test.pncounter_recv(bytea): runs the type's receive function on
// arbitrary bytes, as a binary COPY or a binary bind parameter would.
CE_FUNCTION(counter_test_pncounter_recv) {
	const varlena *v = PG_GETARG_VARLENA_PP(0);
	StringInfoData buf;
	initStringInfo(&buf);
	appendBinaryStringInfo(&buf, VARDATA_ANY(v), static_cast<int>(VARSIZE_ANY_EXHDR(v)));
	return DirectFunctionCall1(counter_pncounter_recv, PointerGetDatum(&buf));
}

// counter_test.pncounter_deserialize(bytea): the aggregate's deserialize then
// final function on arbitrary bytes, as a parallel worker's partial state.
CE_FUNCTION(counter_test_pncounter_deserialize) {
	Datum state = DirectFunctionCall2(counter_pncounter_agg_deserialize, PG_GETARG_DATUM(0), PointerGetDatum(nullptr));
	return DirectFunctionCall1(counter_pncounter_agg_final, state);
}
