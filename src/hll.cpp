// counter.hll: the PostgreSQL-facing side of the distinct-count sketch.
//
// Type I/O (text, binary, bytea), typmod, the scalar functions, aggregate
// support (transition, combine, serialize, deserialize, final) and the
// comparison functions. The sketch's bits are decided by the pure C++ core
// (hll_core.cpp); this file owns no C++ objects with destructors, so its
// PostgreSQL calls need no guard, and everything PostgreSQL keeps is palloc'd
// (aggregate state in the aggregate context).
#include "counter_ext/wall.hpp"
#include "counter_ext/hll.hpp"
#include "counter_ext/hll_core.hpp"

extern "C" {
#include "access/hash.h"
#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "libpq/pqformat.h"
#include "mb/pg_wchar.h"
#include "nodes/primnodes.h"
#include "utils/array.h"
#include "utils/expandeddatum.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"
#include "utils/uuid.h"
}

#include <cmath>
#include <cstring>

namespace hll = ce::hll;

namespace ce {
int hll_default_precision = hll::default_precision;

void init_hll() {
	DefineCustomIntVariable("counter_ext.hll_default_precision",
	                        "Precision (log2 of the register count) of counter.hll sketches made without one.",
	                        "4 to 18; 14 gives 16384 registers, about 0.8% standard error once dense.",
	                        &hll_default_precision, hll::default_precision, hll::min_precision, hll::max_precision,
	                        PGC_USERSET, 0, nullptr, nullptr, nullptr);
}
} // namespace ce

namespace {

[[noreturn]] void bad_argument(const std::string &message, const std::string &detail = {}) {
	throw ce::Error(ce::sqlstate::invalid_parameter_value, message, detail);
}

int checked_precision(int32 p) {
	if (p < hll::min_precision || p > hll::max_precision)
		bad_argument(ce::format("hll precision %d is out of range", p),
		             ce::format("The precision is between %d and %d.", hll::min_precision, hll::max_precision));
	return p;
}

// ---- state: a sketch being built, palloc'd in one memory context -----------------

// One cache line: the header and the newest few entries. A GROUP BY into many
// groups touches a different state on every row; appending to the slots in
// the header's own line, and moving them to the buffer 7 at a time, costs one
// cache miss per row instead of two.
constexpr int state_slots = 7;

struct State {
	MemoryContext context;
	uint32 *entries;  // sparse entries buffered (not necessarily sorted)
	uint8 *registers; // 2^precision bytes when dense
	uint32 n;         // entries in 'entries'
	uint32 cap;       // room in 'entries'
	uint8 precision;
	bool dense;
	uint8 pending; // entries in 'slots' (only while sparse)
	uint8 width;   // sparse entry width (hll::sparse_bits, or 23 after a version 1 input)
	uint32 slots[state_slots];
};
static_assert(sizeof(State) == 64, "a state header is one cache line");

// Sets up a zeroed State.
void state_init(State *st, MemoryContext context, int precision) {
	st->context = context;
	st->precision = static_cast<uint8>(precision);
	st->width = hll::sparse_bits;
}

State *state_new(MemoryContext context, int precision) {
	char *raw = static_cast<char *>(MemoryContextAllocZero(context, sizeof(State) + 63));
	State *st = reinterpret_cast<State *>(TYPEALIGN(64, raw));
	state_init(st, context, precision);
	return st;
}

bool state_empty(const State *st) {
	return !st->dense && st->n == 0 && st->pending == 0;
}

// Makes 'entries' hold at least 'need' entries (no compaction).
void state_grow(State *st, uint64 need) {
	if (need <= st->cap)
		return;
	// The first buffer takes 16 entries (two slot loads): a group of a few
	// dozen values grows it twice, not four times (each growth copies, and
	// in a GROUP BY over many groups leaves the old chunk unused).
	uint64 cap = st->cap > 0 ? st->cap : 16;
	while (cap < need)
		cap *= 2;
	size_t bytes = static_cast<size_t>(cap) * sizeof(uint32);
	if (st->entries == nullptr)
		st->entries = static_cast<uint32 *>(MemoryContextAlloc(st->context, bytes));
	else
		st->entries = static_cast<uint32 *>(repalloc(st->entries, bytes));
	st->cap = static_cast<uint32>(cap);
}

// Moves the slots into the buffer (no compaction).
void state_absorb_slots(State *st) {
	if (st->pending == 0)
		return;
	state_grow(st, static_cast<uint64>(st->n) + st->pending);
	memcpy(st->entries + st->n, st->slots, st->pending * sizeof(uint32));
	st->n += st->pending;
	st->pending = 0;
}

void state_to_dense(State *st) {
	st->registers = static_cast<uint8 *>(MemoryContextAllocZero(st->context, size_t{1} << st->precision));
	hll::dense_add_entries(st->registers, st->precision, st->width, st->entries, st->n);
	hll::dense_add_entries(st->registers, st->precision, st->width, st->slots, st->pending);
	if (st->entries != nullptr)
		pfree(st->entries);
	st->entries = nullptr;
	st->n = st->cap = 0;
	st->pending = 0;
	st->dense = true;
}

// Sorts and deduplicates the buffer; past the sparse limit the state goes dense.
void state_compact(State *st) {
	if (st->dense)
		return;
	state_absorb_slots(st);
	st->n = static_cast<uint32>(hll::compact_entries(st->entries, st->n, st->width));
	if (st->n > hll::sparse_limit(st->precision, st->width))
		state_to_dense(st);
}

constexpr uint64 small_buffer = 256;

// Moves the slots into the buffer and makes room there for 'extra' more
// entries; a large buffer that is full is compacted first, and the state may
// go dense (the caller checks).
void state_make_room(State *st, uint32 extra) {
	uint64 need = static_cast<uint64>(st->n) + st->pending + extra;
	if (need > st->cap && need > small_buffer) {
		// Small buffers grow without sorting (the final function sorts once);
		// larger ones are compacted first (the buffer itself, so that it does
		// not grow for the slots), so repeated values cost no memory and a set
		// past the sparse limit goes dense.
		st->n = static_cast<uint32>(hll::compact_entries(st->entries, st->n, st->width));
		if (st->n > hll::sparse_limit(st->precision, st->width)) {
			state_to_dense(st); // takes the slots too
			return;
		}
		need = static_cast<uint64>(st->n) + st->pending + extra;
		if (need > st->cap / 2)
			state_grow(st, 2 * need);
	} else {
		state_grow(st, need);
	}
	state_absorb_slots(st);
}

inline void state_add_hash(State *st, uint64 hash) {
	if (likely(!st->dense)) {
		uint32 e = hll::sparse_entry(hash, st->precision, st->width);
		if (unlikely(st->pending == state_slots)) {
			state_make_room(st, 0);
			if (st->dense) {
				hll::dense_add_hash(st->registers, st->precision, hash);
				return;
			}
		}
		st->slots[st->pending++] = e;
		return;
	}
	hll::dense_add_hash(st->registers, st->precision, hash);
}

void state_add_entries(State *st, const uint32 *entries, uint32 count) {
	if (!st->dense)
		state_make_room(st, count);
	if (st->dense) {
		hll::dense_add_entries(st->registers, st->precision, st->width, entries, count);
		return;
	}
	memcpy(st->entries + st->n, entries, count * sizeof(uint32));
	st->n += count;
}

void state_max_registers(State *st, const uint8 *registers) {
	if (!st->dense)
		state_to_dense(st);
	size_t m = size_t{1} << st->precision;
	for (size_t i = 0; i < m; i++)
		if (st->registers[i] < registers[i])
			st->registers[i] = registers[i];
}

// Lowers the state's precision to 'to' (folding, as union does).
void state_fold(State *st, int to) {
	if (to >= st->precision)
		return;
	if (state_empty(st)) {
		st->precision = static_cast<uint8>(to);
		return;
	}
	if (st->dense) {
		uint8 *folded = static_cast<uint8 *>(MemoryContextAlloc(st->context, size_t{1} << to));
		hll::fold_registers(st->registers, st->precision, folded, to);
		pfree(st->registers);
		st->registers = folded;
		st->precision = static_cast<uint8>(to);
		return;
	}
	state_absorb_slots(st);
	hll::fold_entries(st->entries, st->n, st->precision, to, st->width);
	st->precision = static_cast<uint8>(to);
	state_compact(st);
}

// Lowers the state's sparse entry width to 'to' (a union with a version 1
// sparse sketch, whose entries are narrower).
void state_narrow(State *st, int to) {
	if (to >= st->width)
		return;
	if (!st->dense) {
		state_absorb_slots(st);
		hll::narrow_entries(st->entries, st->n, st->precision, st->width, to);
		st->width = static_cast<uint8>(to);
		state_compact(st);
		return;
	}
	st->width = static_cast<uint8>(to);
}

// Gives the state the precision of a union: an empty state simply takes it
// (raised or lowered), a non-empty one folds down.
void state_set_precision(State *st, int p) {
	if (state_empty(st))
		st->precision = static_cast<uint8>(p);
	else
		state_fold(st, p);
}

// Merges a serialized sketch into the state (union, deserialize+combine,
// hll_add). 'canonical' additionally rejects non-canonical encodings.
void state_merge_bytes(State *st, const uint8 *data, size_t len, bool canonical) {
	hll::Header h = hll::parse_header(data, len);
	bool input_empty = h.repr == hll::Repr::empty;
	int p = hll::union_precision(st->precision, state_empty(st), h.precision, input_empty);
	state_set_precision(st, p);
	if (input_empty) {
		if (canonical)
			hll::validate(data, len);
		return;
	}
	if (h.repr == hll::Repr::sparse && st->dense && !canonical) {
		hll::decode_sparse_to_registers(data, len, h, st->registers, st->precision);
		return;
	}
	if (h.repr == hll::Repr::sparse) {
		// The union has the narrower entry width of the two (the state's
		// compaction merges entries that narrowing made equal).
		state_narrow(st, h.width);
		if (h.precision == p && h.width == st->width && !st->dense) {
			// Nothing to fold or narrow: decoded straight into the buffer.
			state_make_room(st, static_cast<uint32>(h.count));
			if (!st->dense) {
				hll::decode_sparse(data, len, h, st->entries + st->n, canonical);
				st->n += static_cast<uint32>(h.count);
				return;
			}
		}
		uint32 *entries = static_cast<uint32 *>(palloc(h.count * sizeof(uint32)));
		hll::decode_sparse(data, len, h, entries, canonical);
		if (h.precision > p)
			hll::fold_entries(entries, h.count, h.precision, p, h.width);
		if (h.width > st->width)
			hll::narrow_entries(entries, h.count, p, h.width, st->width);
		state_add_entries(st, entries, static_cast<uint32>(h.count));
		pfree(entries);
		return;
	}
	uint8 *registers = static_cast<uint8 *>(palloc(size_t{1} << h.precision));
	hll::decode_dense(data, len, h, registers, canonical);
	if (h.precision > p) {
		uint8 *folded = static_cast<uint8 *>(palloc(size_t{1} << p));
		hll::fold_registers(registers, h.precision, folded, p);
		pfree(registers);
		registers = folded;
	}
	state_max_registers(st, registers);
	pfree(registers);
}

void state_merge_state(State *st, State *other) {
	state_absorb_slots(other);
	int p = hll::union_precision(st->precision, state_empty(st), other->precision, state_empty(other));
	state_set_precision(st, p);
	if (state_empty(other))
		return;
	if (!other->dense) {
		state_narrow(st, other->width);
		state_narrow(other, st->width);
	}
	if (other->dense) {
		if (other->precision == p) {
			state_max_registers(st, other->registers);
		} else {
			uint8 *folded = static_cast<uint8 *>(palloc(size_t{1} << p));
			hll::fold_registers(other->registers, other->precision, folded, p);
			state_max_registers(st, folded);
			pfree(folded);
		}
		return;
	}
	if (other->precision == p) {
		state_add_entries(st, other->entries, other->n);
		return;
	}
	uint32 *copy = static_cast<uint32 *>(palloc(other->n * sizeof(uint32)));
	memcpy(copy, other->entries, other->n * sizeof(uint32));
	hll::fold_entries(copy, other->n, other->precision, p, other->width);
	state_add_entries(st, copy, other->n);
	pfree(copy);
}

// The canonical serialization of the state as a varlena (counter.hll or
// bytea: the same bytes), palloc'd in the current memory context.
bytea *state_to_varlena(State *st) {
	state_compact(st);
	bytea *out;
	if (st->dense) {
		hll::DensePlan plan = hll::plan_dense(st->registers, st->precision);
		out = static_cast<bytea *>(palloc(VARHDRSZ + plan.bytes));
		SET_VARSIZE(out, VARHDRSZ + plan.bytes);
		hll::encode_dense(st->registers, st->precision, plan, reinterpret_cast<uint8 *>(VARDATA(out)));
	} else if (st->n == 0) {
		size_t size = hll::encoded_size_empty();
		out = static_cast<bytea *>(palloc(VARHDRSZ + size));
		SET_VARSIZE(out, VARHDRSZ + size);
		hll::encode_empty(st->precision, reinterpret_cast<uint8 *>(VARDATA(out)));
	} else {
		hll::SparsePlan plan = hll::plan_sparse(st->entries, st->n, st->precision, st->width);
		out = static_cast<bytea *>(palloc(VARHDRSZ + plan.bytes));
		SET_VARSIZE(out, VARHDRSZ + plan.bytes);
		hll::encode_sparse(st->entries, st->n, st->precision, st->width, plan, reinterpret_cast<uint8 *>(VARDATA(out)));
	}
	return out;
}

double state_estimate(State *st) {
	state_compact(st);
	if (st->dense)
		return hll::estimate_dense(st->registers, st->precision);
	return hll::estimate_sparse(st->n, st->width);
}

// ---- values ---------------------------------------------------------------------------

struct Bytes {
	const uint8 *data;
	size_t len;
};

Bytes arg_bytes(FunctionCallInfo fcinfo, int argno) {
	bytea *v = PG_GETARG_BYTEA_PP(argno);
	return Bytes{reinterpret_cast<const uint8 *>(VARDATA_ANY(v)), VARSIZE_ANY_EXHDR(v)};
}

// A new state holding the sketch in argument 'argno' (in the current context).
State *state_from_arg(FunctionCallInfo fcinfo, int argno) {
	Bytes b = arg_bytes(fcinfo, argno);
	hll::Header h = hll::parse_header(b.data, b.len);
	State *st = state_new(CurrentMemoryContext, h.precision);
	state_merge_bytes(st, b.data, b.len, false);
	return st;
}

// Applies a typmod: a sketch of higher precision folds down to it; one of
// lower precision cannot be raised.
bytea *apply_typmod(bytea *value, int32 typmod) {
	if (typmod < 0)
		return value;
	const uint8 *data = reinterpret_cast<const uint8 *>(VARDATA_ANY(value));
	size_t len = VARSIZE_ANY_EXHDR(value);
	hll::Header h = hll::parse_header(data, len);
	if (h.precision == typmod)
		return value;
	if (h.precision < typmod)
		throw ce::Error(
		    ce::sqlstate::datatype_mismatch,
		    ce::format("a counter.hll of precision %d cannot be stored as counter.hll(%d)", h.precision, typmod),
		    "Precision can only be lowered (folded), never raised.");
	State *st = state_new(CurrentMemoryContext, h.precision);
	state_merge_bytes(st, data, len, false);
	if (state_empty(st))
		st->precision = static_cast<uint8>(typmod);
	else
		state_fold(st, typmod);
	return state_to_varlena(st);
}

bytea *validated_copy(const uint8 *data, size_t len) {
	hll::validate(data, len);
	bytea *out = static_cast<bytea *>(palloc(VARHDRSZ + len));
	SET_VARSIZE(out, VARHDRSZ + len);
	memcpy(VARDATA(out), data, len);
	return out;
}

// ---- hashing values of any type -------------------------------------------------------

enum class Kind {
	integer2,
	integer4,
	integer8,
	oid,
	bytes,
	bpchar,
	name,
	uuid,
	numeric,
	float4,
	float8,
	int64_be,
	int32_be,
	send
};

struct Hasher {
	Oid type;
	Kind kind;
	FmgrInfo send;
};

// The hasher of values of 'type', kept in the call site's fn_extra (a call
// site's argument types never change: the first call decides).
Hasher *hasher_for_type(FmgrInfo *flinfo, Oid type) {
	Hasher *hs = static_cast<Hasher *>(flinfo->fn_extra);
	if (likely(hs != nullptr && hs->type == type))
		return hs;
	if (!OidIsValid(type))
		throw ce::Error(ce::sqlstate::datatype_mismatch, "could not determine the type of the value to hash");
	hs = static_cast<Hasher *>(MemoryContextAllocZero(flinfo->fn_mcxt, sizeof(Hasher)));
	hs->type = type;
	Oid base = getBaseType(type);
	switch (base) {
		case INT2OID:
			hs->kind = Kind::integer2;
			break;
		case INT4OID:
			hs->kind = Kind::integer4;
			break;
		case INT8OID:
			hs->kind = Kind::integer8;
			break;
		case OIDOID:
			hs->kind = Kind::oid;
			break;
		case TEXTOID:
		case VARCHAROID:
		case BYTEAOID:
		case JSONOID:
		case XMLOID:
			hs->kind = Kind::bytes;
			break;
		case BPCHAROID:
			hs->kind = Kind::bpchar;
			break;
		case NAMEOID:
			hs->kind = Kind::name;
			break;
		case UUIDOID:
			hs->kind = Kind::uuid;
			break;
		case NUMERICOID:
			hs->kind = Kind::numeric;
			break;
		case FLOAT4OID:
			hs->kind = Kind::float4;
			break;
		case FLOAT8OID:
			hs->kind = Kind::float8;
			break;
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
		case TIMEOID:
			hs->kind = Kind::int64_be; // their send form: the int64 big-endian
			break;
		case DATEOID:
			hs->kind = Kind::int32_be;
			break;
		default: {
			Oid send_fn;
			bool varlena;
			getTypeBinaryOutputInfo(base, &send_fn, &varlena);
			fmgr_info_cxt(send_fn, &hs->send, flinfo->fn_mcxt);
			hs->kind = Kind::send;
			break;
		}
	}
	flinfo->fn_extra = hs;
	return hs;
}

Hasher *hasher_for(FunctionCallInfo fcinfo, int argno) {
	Hasher *hs = static_cast<Hasher *>(fcinfo->flinfo->fn_extra);
	if (likely(hs != nullptr))
		return hs;
	return hasher_for_type(fcinfo->flinfo, get_fn_expr_argtype(fcinfo->flinfo, argno));
}

uint64 hash_be(uint64 v, int bytes) {
	uint8 buf[8];
	for (int i = 0; i < bytes; i++)
		buf[i] = static_cast<uint8>(v >> (8 * (bytes - 1 - i)));
	return hll::hash_bytes(buf, static_cast<size_t>(bytes));
}

uint64 hash_float8(double v) {
	if (v == 0.0)
		v = 0.0; // -0 hashes as 0
	uint64 bits;
	if (std::isnan(v))
		bits = UINT64CONST(0x7FF8000000000000);
	else
		memcpy(&bits, &v, 8);
	return hash_be(bits, 8);
}

uint64 hash_numeric(Datum d) {
	// Integral values within int64 hash as integers; others hash the
	// normalized text (no trailing zeros), so 1.50 and 1.5 agree.
	char *text = numeric_normalize(DatumGetNumeric(d));
	const char *s = text;
	bool integral = *s != '\0';
	size_t digits = 0;
	if (*s == '-')
		s++;
	for (const char *c = s; *c != '\0'; c++, digits++)
		if (*c < '0' || *c > '9')
			integral = false;
	if (integral && digits > 0 && digits <= 19) {
		bool negative = text[0] == '-';
		uint64 mag = 0;
		for (const char *c = s; *c != '\0'; c++)
			mag = mag * 10 + static_cast<uint64>(*c - '0'); // at most 19 digits: no overflow of uint64
		uint64 limit = negative ? UINT64CONST(0x8000000000000000) : UINT64CONST(0x7FFFFFFFFFFFFFFF);
		if (mag <= limit) {
			int64 v = negative ? static_cast<int64>(~mag + 1) : static_cast<int64>(mag);
			pfree(text);
			return hll::hash_int64(v);
		}
	}
	uint64 h = hll::hash_bytes(text, strlen(text));
	pfree(text);
	return h;
}

// A type's binary send form, as a client using the database's encoding
// would receive it: send functions turn text into the session's
// client_encoding (pq_sendtext), and a sketch must not depend on the
// session that built it (doc/reference/hll.md, "Settings"). Only a session
// whose client_encoding differs pays for the switch. Owns nothing C++.
bytea *send_unconverted(FmgrInfo *send, Datum d) {
	int client = pg_get_client_encoding();
	int database = GetDatabaseEncoding();
	if (client == database)
		return SendFunctionCall(send, d);
	bytea *volatile b = nullptr;
	(void)SetClientEncoding(database); // the same encoding: never fails
	PG_TRY();
	{ b = SendFunctionCall(send, d); }
	PG_FINALLY();
	{ (void)SetClientEncoding(client); } // prepared when the session chose it
	PG_END_TRY();
	return b;
}

uint64 hash_value(Hasher *hs, Datum d) {
	switch (hs->kind) {
		case Kind::integer2:
			return hll::hash_int64(DatumGetInt16(d));
		case Kind::integer4:
			return hll::hash_int64(DatumGetInt32(d));
		case Kind::integer8:
			return hll::hash_int64(DatumGetInt64(d));
		case Kind::oid:
			return hll::hash_int64(static_cast<int64>(DatumGetObjectId(d)));
		case Kind::bytes: {
			struct varlena *v = PG_DETOAST_DATUM_PACKED(d);
			uint64 h = hll::hash_bytes(VARDATA_ANY(v), VARSIZE_ANY_EXHDR(v));
			if (reinterpret_cast<Pointer>(v) != DatumGetPointer(d))
				pfree(v);
			return h;
		}
		case Kind::bpchar: {
			struct varlena *v = PG_DETOAST_DATUM_PACKED(d);
			const char *s = VARDATA_ANY(v);
			size_t len = VARSIZE_ANY_EXHDR(v);
			while (len > 0 && s[len - 1] == ' ')
				len--;
			uint64 h = hll::hash_bytes(s, len);
			if (reinterpret_cast<Pointer>(v) != DatumGetPointer(d))
				pfree(v);
			return h;
		}
		case Kind::name: {
			const char *s = NameStr(*DatumGetName(d));
			return hll::hash_bytes(s, strnlen(s, NAMEDATALEN));
		}
		case Kind::uuid:
			return hll::hash_bytes(DatumGetUUIDP(d)->data, UUID_LEN);
		case Kind::numeric:
			return hash_numeric(d);
		case Kind::float4:
			return hash_float8(static_cast<double>(DatumGetFloat4(d)));
		case Kind::float8:
			return hash_float8(DatumGetFloat8(d));
		case Kind::int64_be:
			return hash_be(static_cast<uint64>(DatumGetInt64(d)), 8);
		case Kind::int32_be:
			return hash_be(static_cast<uint32>(DatumGetInt32(d)), 4);
		case Kind::send: {
			bytea *b = send_unconverted(&hs->send, d);
			uint64 h = hll::hash_bytes(VARDATA(b), VARSIZE(b) - VARHDRSZ);
			pfree(b);
			return h;
		}
	}
	return 0;
}

int default_precision() {
	return checked_precision(ce::hll_default_precision);
}

MemoryContext agg_context(FunctionCallInfo fcinfo, const char *name) {
	MemoryContext context;
	if (!AggCheckCallContext(fcinfo, &context))
		throw ce::Error(ce::sqlstate::feature_not_supported, ce::format("%s called in a non-aggregate context", name));
	return context;
}

} // namespace

// ---- type I/O ---------------------------------------------------------------------------

// counter.hll_in(cstring, oid, int4): '\x' followed by the hex of the storage format.
CE_FUNCTION(counter_hll_in) {
	const char *s = PG_GETARG_CSTRING(0);
	int32 typmod = PG_NARGS() > 2 ? PG_GETARG_INT32(2) : -1;
	size_t slen = strlen(s);
	if (slen < 2 || s[0] != '\\' || s[1] != 'x')
		throw ce::Error(ce::sqlstate::invalid_text_representation, "invalid input syntax for type counter.hll",
		                "A counter.hll literal is \\x followed by hexadecimal digits.");
	size_t hex = slen - 2;
	if (hex % 2 != 0)
		throw ce::Error(ce::sqlstate::invalid_text_representation, "invalid input syntax for type counter.hll",
		                "Odd number of hexadecimal digits.");
	size_t len = hex / 2;
	uint8 *bytes = static_cast<uint8 *>(palloc(len + 1));
	for (size_t i = 0; i < len; i++) {
		int v = 0;
		for (int k = 0; k < 2; k++) {
			char c = s[2 + 2 * i + k];
			int d = (c >= '0' && c <= '9')   ? c - '0'
			        : (c >= 'a' && c <= 'f') ? c - 'a' + 10
			        : (c >= 'A' && c <= 'F') ? c - 'A' + 10
			                                 : -1;
			if (d < 0)
				throw ce::Error(ce::sqlstate::invalid_text_representation, "invalid input syntax for type counter.hll",
				                ce::format("Invalid hexadecimal digit at position %zu.", 2 + 2 * i + k + 1));
			v = v * 16 + d;
		}
		bytes[i] = static_cast<uint8>(v);
	}
	bytea *out = validated_copy(bytes, len);
	pfree(bytes);
	PG_RETURN_BYTEA_P(apply_typmod(out, typmod));
}

CE_FUNCTION(counter_hll_out) {
	Bytes b = arg_bytes(fcinfo, 0);
	static const char digits[] = "0123456789abcdef";
	char *out = static_cast<char *>(palloc(3 + 2 * b.len));
	out[0] = '\\';
	out[1] = 'x';
	for (size_t i = 0; i < b.len; i++) {
		out[2 + 2 * i] = digits[b.data[i] >> 4];
		out[3 + 2 * i] = digits[b.data[i] & 15];
	}
	out[2 + 2 * b.len] = '\0';
	PG_RETURN_CSTRING(out);
}

// counter.hll_recv(internal, oid, int4): the storage format, validated.
CE_FUNCTION(counter_hll_recv) {
	StringInfo buf = reinterpret_cast<StringInfo>(PG_GETARG_POINTER(0));
	int32 typmod = PG_NARGS() > 2 ? PG_GETARG_INT32(2) : -1;
	size_t len = static_cast<size_t>(buf->len - buf->cursor);
	bytea *out = validated_copy(reinterpret_cast<const uint8 *>(buf->data + buf->cursor), len);
	buf->cursor = buf->len;
	PG_RETURN_BYTEA_P(apply_typmod(out, typmod));
}

CE_FUNCTION(counter_hll_send) {
	Bytes b = arg_bytes(fcinfo, 0);
	bytea *out = static_cast<bytea *>(palloc(VARHDRSZ + b.len));
	SET_VARSIZE(out, VARHDRSZ + b.len);
	memcpy(VARDATA(out), b.data, b.len);
	PG_RETURN_BYTEA_P(out);
}

// counter.hll_from_bytea(bytea): the cast from bytea, validated.
CE_FUNCTION(counter_hll_from_bytea) {
	Bytes b = arg_bytes(fcinfo, 0);
	PG_RETURN_BYTEA_P(validated_copy(b.data, b.len));
}

CE_FUNCTION(counter_hll_typmod_in) {
	ArrayType *arr = PG_GETARG_ARRAYTYPE_P(0);
	int n;
	int32 *mods = ArrayGetIntegerTypmods(arr, &n);
	if (n != 1)
		bad_argument("counter.hll takes exactly one type modifier, the precision");
	PG_RETURN_INT32(checked_precision(mods[0]));
}

CE_FUNCTION(counter_hll_typmod_out) {
	int32 typmod = PG_GETARG_INT32(0);
	char *out = static_cast<char *>(palloc(16));
	if (typmod >= 0)
		snprintf(out, 16, "(%d)", typmod);
	else
		out[0] = '\0';
	PG_RETURN_CSTRING(out);
}

// counter.hll(counter.hll, int4, bool): the length-coercion cast of the typmod.
CE_FUNCTION(counter_hll_enforce_typmod) {
	bytea *value = PG_GETARG_BYTEA_PP(0);
	PG_RETURN_BYTEA_P(apply_typmod(value, PG_GETARG_INT32(1)));
}

// ---- scalar functions -----------------------------------------------------------------------

// counter.hll_empty(precision int DEFAULT NULL): NULL means the default.
CE_FUNCTION(counter_hll_empty) {
	int p = PG_ARGISNULL(0) ? default_precision() : checked_precision(PG_GETARG_INT32(0));
	State *st = state_new(CurrentMemoryContext, p);
	PG_RETURN_BYTEA_P(state_to_varlena(st));
}

// counter.hll_add(counter.hll, anyelement): NULL sketch gives NULL; a NULL
// value leaves the sketch as it is.
CE_FUNCTION(counter_hll_add) {
	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	if (PG_ARGISNULL(1))
		PG_RETURN_DATUM(PG_GETARG_DATUM(0));
	Hasher *hs = hasher_for(fcinfo, 1);
	uint64 h = hash_value(hs, PG_GETARG_DATUM(1));
	State *st = state_from_arg(fcinfo, 0);
	state_add_hash(st, h);
	PG_RETURN_BYTEA_P(state_to_varlena(st));
}

// counter.hll_add_array(counter.hll, anyarray): every non-NULL element added
// (any number of dimensions); a NULL array leaves the sketch as it is.
CE_FUNCTION(counter_hll_add_array) {
	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	if (PG_ARGISNULL(1))
		PG_RETURN_DATUM(PG_GETARG_DATUM(0));
	ArrayType *array = PG_GETARG_ARRAYTYPE_P(1);
	Hasher *hs = hasher_for_type(fcinfo->flinfo, ARR_ELEMTYPE(array));
	State *st = state_from_arg(fcinfo, 0);
	ArrayIterator it = array_create_iterator(array, 0, nullptr);
	Datum value;
	bool isnull;
	uint32 seen = 0;
	while (array_iterate(it, &value, &isnull)) {
		if (!isnull)
			state_add_hash(st, hash_value(hs, value));
		if ((++seen & 0xFFFF) == 0)
			ce::check_for_interrupts();
	}
	array_free_iterator(it);
	PG_RETURN_BYTEA_P(state_to_varlena(st));
}

// counter.hll_union(counter.hll, counter.hll): folds to the lower precision.
CE_FUNCTION(counter_hll_union) {
	State *st = state_from_arg(fcinfo, 0);
	Bytes b = arg_bytes(fcinfo, 1);
	state_merge_bytes(st, b.data, b.len, false);
	PG_RETURN_BYTEA_P(state_to_varlena(st));
}

// counter.hll_cardinality(counter.hll): the estimate (exact-rounded while sparse).
CE_FUNCTION(counter_hll_cardinality) {
	Bytes b = arg_bytes(fcinfo, 0);
	hll::Header h = hll::parse_header(b.data, b.len);
	switch (h.repr) {
		case hll::Repr::empty:
			PG_RETURN_FLOAT8(0.0);
		case hll::Repr::sparse:
			PG_RETURN_FLOAT8(hll::estimate_sparse(h.count, h.width));
		case hll::Repr::dense:
		case hll::Repr::dense_rice:
			break;
	}
	uint8 *registers = static_cast<uint8 *>(palloc(size_t{1} << h.precision));
	hll::decode_dense(b.data, b.len, h, registers, false);
	double e = hll::estimate_dense(registers, h.precision);
	pfree(registers);
	PG_RETURN_FLOAT8(e);
}

// counter.hll_info(counter.hll): precision, representation, bytes, version, entries.
CE_FUNCTION(counter_hll_info) {
	Bytes b = arg_bytes(fcinfo, 0);
	hll::Header h = hll::parse_header(b.data, b.len);
	int64 entries = static_cast<int64>(h.count);
	if (hll::is_dense(h.repr)) {
		uint8 *registers = static_cast<uint8 *>(palloc(size_t{1} << h.precision));
		hll::decode_dense(b.data, b.len, h, registers, false);
		entries = 0;
		for (size_t i = 0; i < (size_t{1} << h.precision); i++)
			entries += registers[i] != 0;
		pfree(registers);
	}
	TupleDesc desc;
	if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
		throw ce::Error(ce::sqlstate::feature_not_supported, "hll_info must be called in a context with a row type");
	desc = BlessTupleDesc(desc);
	Datum values[5];
	bool nulls[5] = {false, false, false, false, false};
	values[0] = Int32GetDatum(h.precision);
	values[1] = CStringGetTextDatum(hll::repr_name(h.repr));
	values[2] = Int32GetDatum(static_cast<int32>(b.len));
	values[3] = Int32GetDatum(b.data[0]);
	values[4] = Int64GetDatum(entries);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

// ---- comparison (bytewise over the canonical form) --------------------------------------------

namespace {
int compare_args(FunctionCallInfo fcinfo) {
	Bytes a = arg_bytes(fcinfo, 0);
	Bytes b = arg_bytes(fcinfo, 1);
	int c = memcmp(a.data, b.data, std::min(a.len, b.len));
	if (c != 0)
		return c < 0 ? -1 : 1;
	return a.len < b.len ? -1 : (a.len > b.len ? 1 : 0);
}
} // namespace

CE_FUNCTION(counter_hll_eq) {
	PG_RETURN_BOOL(compare_args(fcinfo) == 0);
}
CE_FUNCTION(counter_hll_ne) {
	PG_RETURN_BOOL(compare_args(fcinfo) != 0);
}
CE_FUNCTION(counter_hll_lt) {
	PG_RETURN_BOOL(compare_args(fcinfo) < 0);
}
CE_FUNCTION(counter_hll_le) {
	PG_RETURN_BOOL(compare_args(fcinfo) <= 0);
}
CE_FUNCTION(counter_hll_gt) {
	PG_RETURN_BOOL(compare_args(fcinfo) > 0);
}
CE_FUNCTION(counter_hll_ge) {
	PG_RETURN_BOOL(compare_args(fcinfo) >= 0);
}
CE_FUNCTION(counter_hll_cmp) {
	PG_RETURN_INT32(compare_args(fcinfo));
}
CE_FUNCTION(counter_hll_hash) {
	Bytes a = arg_bytes(fcinfo, 0);
	return hash_any(a.data, static_cast<int>(a.len));
}
CE_FUNCTION(counter_hll_hash_extended) {
	Bytes a = arg_bytes(fcinfo, 0);
	return hash_any_extended(a.data, static_cast<int>(a.len), static_cast<uint64>(PG_GETARG_INT64(1)));
}

// ---- aggregates -------------------------------------------------------------------------------

namespace {
// An inline varlena (not compressed, not toasted): its bytes can be read in place.
inline bool plain_varlena(Datum d) {
	const struct varlena *v = reinterpret_cast<const struct varlena *>(DatumGetPointer(d));
	return !VARATT_IS_COMPRESSED(v) && !VARATT_IS_EXTERNAL(v);
}

// The first row of a group: the state, in the aggregate context.
State *add_state_new(FunctionCallInfo fcinfo) {
	MemoryContext context = agg_context(fcinfo, "hll_add_trans");
	int p = (PG_NARGS() > 2 && !PG_ARGISNULL(2)) ? checked_precision(PG_GETARG_INT32(2)) : default_precision();
	return state_new(context, p);
}
} // namespace

// counter.hll_add_trans(internal, anyelement [, precision int]). The per-row
// path: the aggregate context is checked when the state is made (an internal
// state can only come from the aggregate machinery), integers hash inline.
CE_FUNCTION(counter_hll_add_trans) {
	State *st = unlikely(PG_ARGISNULL(0)) ? add_state_new(fcinfo) : reinterpret_cast<State *>(PG_GETARG_POINTER(0));
	if (likely(!PG_ARGISNULL(1))) {
		Hasher *hs = static_cast<Hasher *>(fcinfo->flinfo->fn_extra);
		if (unlikely(hs == nullptr))
			hs = hasher_for(fcinfo, 1);
		Datum d = PG_GETARG_DATUM(1);
		uint64 h;
		if (hs->kind == Kind::integer8)
			h = hll::hash_int64(DatumGetInt64(d));
		else if (hs->kind == Kind::integer4)
			h = hll::hash_int64(DatumGetInt32(d));
		else if (hs->kind == Kind::bytes && plain_varlena(d))
			h = hll::hash_bytes(VARDATA_ANY(DatumGetPointer(d)), VARSIZE_ANY_EXHDR(DatumGetPointer(d)));
		else
			h = hash_value(hs, d);
		state_add_hash(st, h);
	}
	PG_RETURN_POINTER(st);
}

// counter.hll_union_trans(internal, counter.hll)
CE_FUNCTION(counter_hll_union_trans) {
	MemoryContext context = agg_context(fcinfo, "hll_union_trans");
	State *st = PG_ARGISNULL(0) ? nullptr : reinterpret_cast<State *>(PG_GETARG_POINTER(0));
	if (PG_ARGISNULL(1)) {
		if (st == nullptr)
			PG_RETURN_NULL(); // no state until the first sketch
		PG_RETURN_POINTER(st);
	}
	Bytes b = arg_bytes(fcinfo, 1);
	if (st == nullptr) {
		hll::Header h = hll::parse_header(b.data, b.len);
		st = state_new(context, h.precision);
	}
	state_merge_bytes(st, b.data, b.len, false);
	PG_RETURN_POINTER(st);
}

// A state that hll_deserialize made in the aggregate context 'context' (the
// only states there that reach a combine function as its second argument: a
// partial aggregate's own states live in its node's context). The combine
// function takes it over as the group's first state, or frees it once merged.
namespace {
bool deserialized_here(const State *st, MemoryContext context) {
	return st->context == context;
}

void deserialized_free(State *st) {
	if (st->entries != nullptr)
		pfree(st->entries);
	if (st->registers != nullptr)
		pfree(st->registers);
	pfree(st);
}
} // namespace

CE_FUNCTION(counter_hll_combine) {
	MemoryContext context = agg_context(fcinfo, "hll_combine");
	State *a = PG_ARGISNULL(0) ? nullptr : reinterpret_cast<State *>(PG_GETARG_POINTER(0));
	State *b = PG_ARGISNULL(1) ? nullptr : reinterpret_cast<State *>(PG_GETARG_POINTER(1));
	if (b == nullptr) {
		if (a == nullptr)
			PG_RETURN_NULL();
		PG_RETURN_POINTER(a);
	}
	bool ours = deserialized_here(b, context);
	if (a == nullptr) {
		if (ours)
			PG_RETURN_POINTER(b); // no copy: it becomes the group's state
		a = state_new(context, b->precision);
	}
	state_merge_state(a, b);
	if (ours)
		deserialized_free(b);
	PG_RETURN_POINTER(a);
}

CE_FUNCTION(counter_hll_serialize) {
	(void)agg_context(fcinfo, "hll_serialize");
	State *st = reinterpret_cast<State *>(PG_GETARG_POINTER(0));
	PG_RETURN_BYTEA_P(state_to_varlena(st));
}

// In the aggregate context, a plain chunk (no cache-line alignment: the state
// is only merged, never added to row by row), so that hll_combine can take
// it over or free it (deserialized_here).
CE_FUNCTION(counter_hll_deserialize) {
	MemoryContext context = agg_context(fcinfo, "hll_deserialize");
	Bytes b = arg_bytes(fcinfo, 0);
	hll::Header h = hll::parse_header(b.data, b.len);
	State *st = static_cast<State *>(MemoryContextAllocZero(context, sizeof(State)));
	state_init(st, context, h.precision);
	state_merge_bytes(st, b.data, b.len, true);
	PG_RETURN_POINTER(st);
}

// Final functions: an aggregate over no rows (or only NULLs) gives the empty
// sketch, never NULL.
// The precision of an aggregate over no rows (no transition call saw its
// precision argument): the argument when it is a constant, as in
// hll_add_agg(x, 12), else the default.
int empty_aggregate_precision(FunctionCallInfo fcinfo) {
	Aggref *ref = AggGetAggref(fcinfo);
	if (ref != nullptr && list_length(ref->args) == 2) {
		Expr *arg = static_cast<TargetEntry *>(lsecond(ref->args))->expr;
		if (IsA(arg, Const) && !castNode(Const, arg)->constisnull)
			return checked_precision(DatumGetInt32(castNode(Const, arg)->constvalue));
	}
	return default_precision();
}

CE_FUNCTION(counter_hll_final) {
	if (PG_ARGISNULL(0))
		PG_RETURN_BYTEA_P(state_to_varlena(state_new(CurrentMemoryContext, empty_aggregate_precision(fcinfo))));
	PG_RETURN_BYTEA_P(state_to_varlena(reinterpret_cast<State *>(PG_GETARG_POINTER(0))));
}

CE_FUNCTION(counter_hll_count_final) {
	if (PG_ARGISNULL(0))
		PG_RETURN_INT64(0);
	double e = state_estimate(reinterpret_cast<State *>(PG_GETARG_POINTER(0)));
	PG_RETURN_INT64(static_cast<int64>(std::llround(e)));
}

// ---- hll_count_distinct over the usual key types: a counter.hll state ---------------------
//
// counter.hll_count_distinct(smallint | integer | bigint | text | uuid) keep a
// counter.hll as their transition state: a real type with text I/O and a
// combine function, so Citus pushes them down for any grouping
// (worker_partial_agg ships the partial sketch as text, coord_combine_agg
// combines; doc/citus.md). Row by row the state is an expanded object around
// the same State as the internal aggregates (in ce::aggregate_state_context),
// changed in place; its bytes (state_to_varlena) are made only when
// PostgreSQL or Citus needs them.

namespace {
// One allocation, the state on the cache line after the header.
struct alignas(64) HllObject {
	ExpandedObjectHeader hdr;
	bytea *flat; // the bytes of st, made on demand; nullptr once st changes
	State st;
};

Size hll_object_flat_size(ExpandedObjectHeader *eoh) {
	HllObject *e = reinterpret_cast<HllObject *>(eoh);
	if (e->flat == nullptr) {
		MemoryContext old = MemoryContextSwitchTo(e->hdr.eoh_context);
		e->flat = state_to_varlena(&e->st);
		MemoryContextSwitchTo(old);
	}
	return VARSIZE(e->flat);
}

void hll_object_flatten(ExpandedObjectHeader *eoh, void *result, Size allocated_size) {
	HllObject *e = reinterpret_cast<HllObject *>(eoh);
	Size size = hll_object_flat_size(eoh);
	Assert(allocated_size == size);
	memcpy(result, e->flat, Min(size, allocated_size));
}

const ExpandedObjectMethods hll_object_methods = {hll_object_flat_size, hll_object_flatten};

// Ours, read-write or read-only (a final function gets it read-only).
inline HllObject *hll_object_of(Datum d) {
	if (!VARATT_IS_EXTERNAL_EXPANDED(DatumGetPointer(d)))
		return nullptr;
	ExpandedObjectHeader *eoh = DatumGetEOHP(d);
	return eoh->eoh_methods == &hll_object_methods ? reinterpret_cast<HllObject *>(eoh) : nullptr;
}

HllObject *hll_object_new(FunctionCallInfo fcinfo, int precision, const char *function) {
	MemoryContext cxt = ce::aggregate_state_context(fcinfo, function);
	// 128-aligned: the header line and the state line are one aligned pair,
	// which the processor fetches together (one miss per row in a GROUP BY
	// over many groups, not two).
	char *raw = static_cast<char *>(MemoryContextAllocZero(cxt, sizeof(HllObject) + 127));
	HllObject *e = reinterpret_cast<HllObject *>(TYPEALIGN(128, raw));
	EOH_init_header(&e->hdr, &hll_object_methods, cxt);
	state_init(&e->st, cxt, precision);
	return e;
}

// The object to change in place: the read-write one the aggregate passes
// back, else a new one holding argument 'argno' (NULL: empty, at the
// default precision).
HllObject *hll_object_arg(FunctionCallInfo fcinfo, int argno, const char *function) {
	if (likely(!PG_ARGISNULL(argno))) {
		Datum d = PG_GETARG_DATUM(argno);
		if (likely(VARATT_IS_EXTERNAL_EXPANDED_RW(DatumGetPointer(d)))) {
			HllObject *e = hll_object_of(d);
			if (likely(e != nullptr)) {
				if (unlikely(e->flat != nullptr)) {
					pfree(e->flat);
					e->flat = nullptr;
				}
				return e;
			}
		}
	}
	if (PG_ARGISNULL(argno))
		return hll_object_new(fcinfo, default_precision(), function);
	HllObject *other = hll_object_of(PG_GETARG_DATUM(argno));
	if (other != nullptr) {
		HllObject *e = hll_object_new(fcinfo, other->st.precision, function);
		state_merge_state(&e->st, &other->st);
		return e;
	}
	Bytes b = arg_bytes(fcinfo, argno);
	hll::Header h = hll::parse_header(b.data, b.len);
	HllObject *e = hll_object_new(fcinfo, h.precision, function);
	state_merge_bytes(&e->st, b.data, b.len, false);
	return e;
}

template <Kind K>
Datum count_trans(FunctionCallInfo fcinfo) {
	HllObject *e = hll_object_arg(fcinfo, 0, "counter.hll_count_trans");
	if (likely(!PG_ARGISNULL(1))) {
		Datum d = PG_GETARG_DATUM(1);
		uint64 h;
		if constexpr (K == Kind::integer2)
			h = hll::hash_int64(DatumGetInt16(d));
		else if constexpr (K == Kind::integer4)
			h = hll::hash_int64(DatumGetInt32(d));
		else if constexpr (K == Kind::integer8)
			h = hll::hash_int64(DatumGetInt64(d));
		else if constexpr (K == Kind::uuid)
			h = hll::hash_bytes(DatumGetUUIDP(d)->data, UUID_LEN);
		else {
			static_assert(K == Kind::bytes, "text hashes its bytes");
			if (plain_varlena(d)) {
				h = hll::hash_bytes(VARDATA_ANY(DatumGetPointer(d)), VARSIZE_ANY_EXHDR(DatumGetPointer(d)));
			} else {
				Hasher hs{};
				hs.kind = Kind::bytes;
				h = hash_value(&hs, d);
			}
		}
		state_add_hash(&e->st, h);
	}
	return EOHPGetRWDatum(&e->hdr);
}
} // namespace

// counter.hll_count_trans(counter.hll, <type>): one entry point per key type.
CE_FUNCTION(counter_hll_count_trans_int2) {
	return count_trans<Kind::integer2>(fcinfo);
}
CE_FUNCTION(counter_hll_count_trans_int4) {
	return count_trans<Kind::integer4>(fcinfo);
}
CE_FUNCTION(counter_hll_count_trans_int8) {
	return count_trans<Kind::integer8>(fcinfo);
}
CE_FUNCTION(counter_hll_count_trans_text) {
	return count_trans<Kind::bytes>(fcinfo);
}
CE_FUNCTION(counter_hll_count_trans_uuid) {
	return count_trans<Kind::uuid>(fcinfo);
}

// counter.hll_count_combine(counter.hll, counter.hll): the union, into the
// first state (made in the aggregate context when it is not ours).
CE_FUNCTION(counter_hll_count_combine) {
	if (PG_ARGISNULL(1)) {
		if (PG_ARGISNULL(0))
			PG_RETURN_NULL();
		return EOHPGetRWDatum(&hll_object_arg(fcinfo, 0, "counter.hll_count_combine")->hdr);
	}
	HllObject *a = nullptr;
	if (!PG_ARGISNULL(0)) {
		a = hll_object_arg(fcinfo, 0, "counter.hll_count_combine");
	} else {
		HllObject *other = hll_object_of(PG_GETARG_DATUM(1));
		int p;
		if (other != nullptr) {
			p = other->st.precision;
		} else {
			Bytes bytes = arg_bytes(fcinfo, 1);
			p = hll::parse_header(bytes.data, bytes.len).precision;
		}
		a = hll_object_new(fcinfo, p, "counter.hll_count_combine");
	}
	HllObject *b = hll_object_of(PG_GETARG_DATUM(1));
	if (b != nullptr) {
		state_merge_state(&a->st, &b->st);
	} else {
		Bytes bytes = arg_bytes(fcinfo, 1);
		state_merge_bytes(&a->st, bytes.data, bytes.len, false);
	}
	return EOHPGetRWDatum(&a->hdr);
}

// counter.hll_count_final(counter.hll): the rounded estimate (0 over no rows).
CE_FUNCTION(counter_hll_count_final_sketch) {
	if (PG_ARGISNULL(0))
		PG_RETURN_INT64(0);
	HllObject *e = hll_object_of(PG_GETARG_DATUM(0));
	State *st = e != nullptr ? &e->st : state_from_arg(fcinfo, 0);
	PG_RETURN_INT64(static_cast<int64>(std::llround(state_estimate(st))));
}

// ---- the hash itself, for golden-value tests --------------------------------------------------

// counter.hll_hash(anyelement): the pinned 64-bit hash of a value, as a
// bigint (the bits of the unsigned hash).
CE_FUNCTION(counter_hll_hash_value) {
	Hasher *hs = hasher_for(fcinfo, 0);
	PG_RETURN_INT64(static_cast<int64>(hash_value(hs, PG_GETARG_DATUM(0))));
}
