// counter.hll: the pure C++ core of the distinct-count sketch.
//
// Everything that decides a stored sketch's bits lives here: the pinned hash
// (xxHash64, seed 0, little-endian), the sparse and dense representations,
// their canonical serialization (doc/hll-storage.md) and the estimator
// (Ertl 2017, "New cardinality estimation algorithms for HyperLogLog
// sketches", improved raw estimator; no bias tables). No PostgreSQL headers:
// the PostgreSQL-facing file is src/hll.cpp.
#pragma once

// Pure C++ (no PostgreSQL headers), so src/hll.cpp can include it too.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the hash and the bit streams read little-endian words");

namespace ce::hll {

// ---- the pinned hash -------------------------------------------------------

inline constexpr uint64_t hash_seed = 0;

inline constexpr uint64_t xxh_p1 = 0x9E3779B185EBCA87ULL;
inline constexpr uint64_t xxh_p2 = 0xC2B2AE3D27D4EB4FULL;
inline constexpr uint64_t xxh_p3 = 0x165667B19E3779F9ULL;
inline constexpr uint64_t xxh_p4 = 0x85EBCA77C2B2AE63ULL;
inline constexpr uint64_t xxh_p5 = 0x27D4EB2F165667C5ULL;

inline constexpr uint64_t rotl64(uint64_t x, int r) noexcept {
	return (x << r) | (x >> (64 - r));
}

namespace detail {

inline uint64_t read64(const uint8_t *p) noexcept {
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

inline uint32_t read32(const uint8_t *p) noexcept {
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

inline uint64_t xxh_round(uint64_t acc, uint64_t input) noexcept {
	acc += input * xxh_p2;
	acc = rotl64(acc, 31);
	acc *= xxh_p1;
	return acc;
}

inline uint64_t xxh_merge(uint64_t acc, uint64_t val) noexcept {
	val = xxh_round(0, val);
	acc ^= val;
	acc = acc * xxh_p1 + xxh_p4;
	return acc;
}

} // namespace detail

// xxHash64 (Yann Collet's published specification, XXH64) of 'len' bytes
// with the given seed, reading multi-byte lanes little-endian. Persisted
// sketches depend on it: never change it.
inline uint64_t xxh64(const void *data, size_t len, uint64_t seed) noexcept {
	const uint8_t *p = static_cast<const uint8_t *>(data);
	const uint8_t *end = p + len;
	uint64_t h;
	if (len >= 32) {
		const uint8_t *limit = end - 32;
		uint64_t v1 = seed + xxh_p1 + xxh_p2;
		uint64_t v2 = seed + xxh_p2;
		uint64_t v3 = seed;
		uint64_t v4 = seed - xxh_p1;
		do {
			v1 = detail::xxh_round(v1, detail::read64(p));
			v2 = detail::xxh_round(v2, detail::read64(p + 8));
			v3 = detail::xxh_round(v3, detail::read64(p + 16));
			v4 = detail::xxh_round(v4, detail::read64(p + 24));
			p += 32;
		} while (p <= limit);
		h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
		h = detail::xxh_merge(h, v1);
		h = detail::xxh_merge(h, v2);
		h = detail::xxh_merge(h, v3);
		h = detail::xxh_merge(h, v4);
	} else {
		h = seed + xxh_p5;
	}
	h += static_cast<uint64_t>(len);
	while (p + 8 <= end) {
		h ^= detail::xxh_round(0, detail::read64(p));
		h = rotl64(h, 27) * xxh_p1 + xxh_p4;
		p += 8;
	}
	if (p + 4 <= end) {
		h ^= static_cast<uint64_t>(detail::read32(p)) * xxh_p1;
		h = rotl64(h, 23) * xxh_p2 + xxh_p3;
		p += 4;
	}
	while (p < end) {
		h ^= static_cast<uint64_t>(*p) * xxh_p5;
		h = rotl64(h, 11) * xxh_p1;
		p++;
	}
	h ^= h >> 33;
	h *= xxh_p2;
	h ^= h >> 29;
	h *= xxh_p3;
	h ^= h >> 32;
	return h;
}

// xxh64 of the 8 little-endian bytes of v with seed 0, without a buffer:
// every integer of every width hashes through this, by its int64 value.
inline uint64_t hash_int64(int64_t value) noexcept {
	uint64_t h = hash_seed + xxh_p5 + 8;
	uint64_t k = static_cast<uint64_t>(value);
	k *= xxh_p2;
	k = rotl64(k, 31);
	k *= xxh_p1;
	h ^= k;
	h = rotl64(h, 27) * xxh_p1 + xxh_p4;
	h ^= h >> 33;
	h *= xxh_p2;
	h ^= h >> 29;
	h *= xxh_p3;
	h ^= h >> 32;
	return h;
}

inline uint64_t hash_bytes(const void *data, size_t len) noexcept {
	return xxh64(data, len, hash_seed);
}

// ---- parameters ---------------------------------------------------------------

inline constexpr uint8_t format_version = 1;
inline constexpr int min_precision = 4;
inline constexpr int max_precision = 18;
inline constexpr int default_precision = 14;
// Sparse entries keep the top 23 bits of the hash.
inline constexpr int sparse_bits = 23;
// Registers (and sparse rho fields) are 5 bits: rho is clamped at 31, which
// is HyperLogLog over the top p + 30 bits of the hash (Ertl's q = 30).
inline constexpr int register_max = 31;
inline constexpr int q_bits = 30;

// empty; sparse (Rice-coded 23-bit entries); dense (5-bit registers, packed);
// dense_rice (the same registers Rice-coded around a base: about 3 bits each
// once n is well above the register count). The canonical form of a dense
// sketch is the smaller of the two dense encodings (packed on a tie).
enum class Repr : uint8_t { empty = 0, sparse = 1, dense = 2, dense_rice = 3 };

inline bool is_dense(Repr r) noexcept {
	return r == Repr::dense || r == Repr::dense_rice;
}

const char *repr_name(Repr r) noexcept;

inline constexpr size_t dense_payload_bytes(int p) noexcept {
	return (static_cast<size_t>(5) << p) / 8;
}
inline constexpr size_t header_bytes = 2;

// The most distinct sparse entries a sketch of precision p holds; one more
// makes it dense. Chosen so that a sparse sketch is never larger than the
// dense one (doc/hll-storage.md).
size_t sparse_limit(int p) noexcept;

// ---- entries and registers ------------------------------------------------------

inline int rho_clamped(uint64_t w) noexcept {
	// w holds the remaining hash bits left-aligned; rho = leading zeros + 1.
	if (w == 0)
		return register_max;
	int r = __builtin_clzll(w) + 1;
	return r < register_max ? r : register_max;
}

// A sparse entry: (top 23 bits of the hash) << 5 | rho field. The rho field
// (rho of the hash bits after the first 23, clamped at 31) is kept only when
// the 23 - p bits below the register index are all zero, i.e. only when the
// dense register needs it; otherwise it is 0.
inline uint32_t sparse_entry(uint64_t hash, int p) noexcept {
	uint32_t v = static_cast<uint32_t>(hash >> (64 - sparse_bits));
	uint32_t low_mask = (1U << (sparse_bits - p)) - 1;
	uint32_t r = (v & low_mask) == 0 ? static_cast<uint32_t>(rho_clamped(hash << sparse_bits)) : 0U;
	return (v << 5) | r;
}

inline uint32_t entry_value(uint32_t e) noexcept {
	return e >> 5;
}
inline uint32_t entry_rho(uint32_t e) noexcept {
	return e & 31U;
}

// The dense register index and value an entry stands for at precision p.
inline void entry_register(uint32_t e, int p, uint32_t &index, uint8_t &value) noexcept {
	uint32_t v = entry_value(e);
	int low_bits = sparse_bits - p;
	index = v >> low_bits;
	uint32_t low = v & ((1U << low_bits) - 1);
	if (low != 0) {
		// leading zeros of 'low' within low_bits, plus one
		value = static_cast<uint8_t>(__builtin_clz(low) - (32 - low_bits) + 1);
	} else {
		int r = low_bits + static_cast<int>(entry_rho(e));
		value = static_cast<uint8_t>(r < register_max ? r : register_max);
	}
}

inline void dense_add_hash(uint8_t *registers, int p, uint64_t hash) noexcept {
	uint32_t index = static_cast<uint32_t>(hash >> (64 - p));
	uint8_t value = static_cast<uint8_t>(rho_clamped(hash << p));
	if (registers[index] < value)
		registers[index] = value;
}

// Sorts entries and keeps one per value (the one with the largest rho field).
// Returns the new count.
size_t compact_entries(uint32_t *entries, size_t n) noexcept;

// Merges sorted canonical lists a and b into out (room for na + nb); returns
// the count.
size_t merge_entries(const uint32_t *a, size_t na, const uint32_t *b, size_t nb, uint32_t *out) noexcept;

// Rewrites canonical entries of precision 'from' as entries of precision
// 'to' < 'from' (rho fields the lower precision does not need are dropped).
void fold_entries(uint32_t *entries, size_t n, int from, int to) noexcept;

void dense_add_entries(uint8_t *registers, int p, const uint32_t *entries, size_t n) noexcept;

// Folds registers of precision 'from' into 'to' (to < from); 'out' has 2^to
// bytes and is overwritten.
void fold_registers(const uint8_t *in, int from, uint8_t *out, int to) noexcept;

// ---- estimation -------------------------------------------------------------------

// Sparse: linear counting over the 2^23 entry values, rounded to an integer.
double estimate_sparse(size_t distinct_values) noexcept;
// Dense: Ertl's improved raw estimator over 2^p registers of 0..31.
double estimate_dense(const uint8_t *registers, int p) noexcept;

// ---- serialization (doc/hll-storage.md) ------------------------------------------------

// Parsed header of a serialized sketch. parse() checks the length before it
// reads any byte and throws ce::Error(22P03) on anything malformed.
struct Header {
	int precision = 0;
	Repr repr = Repr::empty;
	size_t count = 0;   // sparse: number of entries
	int rice = 0;       // sparse: low-bit width; dense_rice: Rice parameter
	int base = 0;       // dense_rice: the register value coded as 0
	size_t payload = 0; // offset of the payload
};

Header parse_header(const uint8_t *data, size_t len);

// Decodes a sparse payload into 'out' (room for h.count entries), checking
// every read; when 'canonical' is set, also rejects encodings that are valid
// but not the canonical one (the Rice parameter must be the optimal one).
void decode_sparse(const uint8_t *data, size_t len, const Header &h, uint32_t *out, bool canonical);

// Decodes a sparse payload straight into dense registers of precision
// p <= h.precision (union into a dense sketch), checking every read.
void decode_sparse_to_registers(const uint8_t *data, size_t len, const Header &h, uint8_t *registers, int p);

// Decodes a dense or dense_rice payload into 2^p one-byte registers, checking
// every read; when 'canonical' is set, also rejects encodings that are valid
// but not the canonical one.
void decode_dense(const uint8_t *data, size_t len, const Header &h, uint8_t *registers, bool canonical = true);

// Fully validates a serialized sketch (every way in calls this).
void validate(const uint8_t *data, size_t len);

// Encoders: size first, then write exactly that many bytes. Entries must be
// canonical (sorted, one per value, rho fields as sparse_entry makes them)
// and at most sparse_limit(p).
size_t encoded_size_empty() noexcept;
void encode_empty(int p, uint8_t *out) noexcept;

// The low-bit width of n sparse entries (Elias-Fano): the largest l with
// n * 2^l <= 2^23.
int sparse_low_bits(size_t n) noexcept;

struct SparsePlan {
	int rice; // the low-bit width
	size_t bytes;
};
SparsePlan plan_sparse(const uint32_t *entries, size_t n, int p) noexcept;
void encode_sparse(const uint32_t *entries, size_t n, int p, const SparsePlan &plan, uint8_t *out) noexcept;

struct DensePlan {
	Repr repr; // dense or dense_rice
	int base;
	int rice;
	size_t bytes;
};
DensePlan plan_dense(const uint8_t *registers, int p) noexcept;
void encode_dense(const uint8_t *registers, int p, const DensePlan &plan, uint8_t *out) noexcept;
size_t packed_dense_bytes(int p) noexcept; // header included

// ---- a sketch as a C++ value (for the scalar functions and tests) ---------------

class Sketch {
public:
	explicit Sketch(int precision) : precision_(precision) {}

	static Sketch decode(const uint8_t *data, size_t len, bool canonical);

	int precision() const noexcept { return precision_; }
	Repr repr() const noexcept;
	bool empty() const noexcept { return !dense_ && entries_.empty(); }

	void add_hash(uint64_t hash);
	void merge(const Sketch &other); // folds to the lower precision
	void fold(int to);
	double estimate();
	std::vector<uint8_t> encode();
	void normalize(); // sorts buffered entries and goes dense past the limit

private:
	void to_dense();

	int precision_;
	bool dense_ = false;
	std::vector<uint32_t> entries_;  // canonical when sparse and not dirty
	std::vector<uint8_t> registers_; // 2^p when dense
	bool dirty_ = false;
};

// The precision an empty sketch takes when merged with another: an empty
// sketch never lowers the precision of a non-empty one.
int union_precision(int pa, bool a_empty, int pb, bool b_empty) noexcept;

} // namespace ce::hll
