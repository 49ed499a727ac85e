// counter.hll: the pure C++ core of the distinct-count sketch.
//
// Everything that decides a stored sketch's bits lives here: the pinned hash
// (XXH3-64, seed 0, little-endian), the sparse and dense representations,
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

inline constexpr uint64_t xxh_p1 = 0x9E3779B185EBCA87ULL;
inline constexpr uint64_t xxh_p2 = 0xC2B2AE3D27D4EB4FULL;
inline constexpr uint64_t xxh_p3 = 0x165667B19E3779F9ULL;

inline constexpr uint64_t rotl64(uint64_t x, int r) noexcept {
	return (x << r) | (x >> (64 - r));
}

// XXH3-64 (the 64-bit XXH3 of Yann Collet's published xxHash specification,
// as `xxhsum -H3` computes it) with seed 0 and the specification's default
// 192-byte secret; multi-byte words are read little-endian. Persisted
// sketches depend on it: never change it.
namespace xxh3 {

inline constexpr uint8_t secret[192] = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c, 0xde, 0xd4,
    0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f, 0xcb, 0x79, 0xe6, 0x4e,
    0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21, 0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43,
    0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c, 0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb,
    0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3, 0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19,
    0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8, 0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7,
    0xc7, 0x0b, 0x4f, 0x1d, 0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78,
    0x73, 0x64, 0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e, 0x2b, 0x16,
    0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce, 0x45, 0xcb, 0x3a, 0x8f,
    0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};

inline constexpr uint64_t prime_mx1 = 0x165667919E3779F9ULL;
inline constexpr uint64_t prime_mx2 = 0x9FB21C651E98DF25ULL;

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

inline uint64_t mul128_fold64(uint64_t a, uint64_t b) noexcept {
	unsigned __int128 m = static_cast<unsigned __int128>(a) * b;
	return static_cast<uint64_t>(m) ^ static_cast<uint64_t>(m >> 64);
}

inline uint64_t xxh64_avalanche(uint64_t h) noexcept {
	h ^= h >> 33;
	h *= xxh_p2;
	h ^= h >> 29;
	h *= xxh_p3;
	h ^= h >> 32;
	return h;
}

inline uint64_t avalanche(uint64_t h) noexcept {
	h ^= h >> 37;
	h *= prime_mx1;
	h ^= h >> 32;
	return h;
}

inline uint64_t rrmxmx(uint64_t h, uint64_t len) noexcept {
	h ^= rotl64(h, 49) ^ rotl64(h, 24);
	h *= prime_mx2;
	h ^= (h >> 35) + len;
	h *= prime_mx2;
	h ^= h >> 28;
	return h;
}

inline uint64_t mix16(const uint8_t *in, const uint8_t *key) noexcept {
	return mul128_fold64(read64(in) ^ read64(key), read64(in + 8) ^ read64(key + 8));
}

// Inputs of more than 240 bytes (src/hll_core.cpp).
uint64_t hash_long(const uint8_t *in, size_t len) noexcept;

inline uint64_t hash(const void *data, size_t len) noexcept {
	const uint8_t *in = static_cast<const uint8_t *>(data);
	const uint8_t *s = secret;
	if (len <= 16) {
		if (len > 8) {
			uint64_t lo = read64(in) ^ (read64(s + 24) ^ read64(s + 32));
			uint64_t hi = read64(in + len - 8) ^ (read64(s + 40) ^ read64(s + 48));
			return avalanche(len + __builtin_bswap64(lo) + hi + mul128_fold64(lo, hi));
		}
		if (len >= 4) {
			uint64_t first = read32(in), last = read32(in + len - 4);
			return rrmxmx((last + (first << 32)) ^ (read64(s + 8) ^ read64(s + 16)), len);
		}
		if (len > 0) {
			uint32_t c1 = in[0], c2 = in[len >> 1], c3 = in[len - 1];
			uint32_t combined = (c1 << 16) | (c2 << 24) | c3 | (static_cast<uint32_t>(len) << 8);
			return xxh64_avalanche(static_cast<uint64_t>(combined) ^ static_cast<uint64_t>(read32(s) ^ read32(s + 4)));
		}
		return xxh64_avalanche(read64(s + 56) ^ read64(s + 64));
	}
	if (len <= 128) {
		uint64_t acc = len * xxh_p1;
		if (len > 32) {
			if (len > 64) {
				if (len > 96) {
					acc += mix16(in + 48, s + 96);
					acc += mix16(in + len - 64, s + 112);
				}
				acc += mix16(in + 32, s + 64);
				acc += mix16(in + len - 48, s + 80);
			}
			acc += mix16(in + 16, s + 32);
			acc += mix16(in + len - 32, s + 48);
		}
		acc += mix16(in, s);
		acc += mix16(in + len - 16, s + 16);
		return avalanche(acc);
	}
	if (len <= 240) {
		uint64_t acc = len * xxh_p1;
		for (size_t i = 0; i < 8; i++)
			acc += mix16(in + 16 * i, s + 16 * i);
		acc = avalanche(acc);
		for (size_t i = 8; i < len / 16; i++)
			acc += mix16(in + 16 * i, s + 16 * (i - 8) + 3);
		acc += mix16(in + len - 16, s + 136 - 17);
		return avalanche(acc);
	}
	return hash_long(in, len);
}

} // namespace xxh3

// XXH3-64 of the 8 little-endian bytes of the value, without a buffer: every
// integer of every width hashes through this, by its int64 value.
inline uint64_t hash_int64(int64_t value) noexcept {
	uint64_t v = static_cast<uint64_t>(value);
	uint64_t keyed = rotl64(v, 32) ^ (xxh3::read64(xxh3::secret + 8) ^ xxh3::read64(xxh3::secret + 16));
	return xxh3::rrmxmx(keyed, 8);
}

inline uint64_t hash_bytes(const void *data, size_t len) noexcept {
	return xxh3::hash(data, len);
}

// ---- parameters ---------------------------------------------------------------

// Format versions 1 and 2 differ only in the width of sparse entries: 23
// bits in version 1 (counter_ext 1.0), 26 bits in version 2. Empty and dense
// sketches have the same bytes in both and are always written as version 1,
// so their bytes never depend on the release that wrote them.
inline constexpr uint8_t format_v1 = 1;
inline constexpr uint8_t format_v2 = 2;
inline constexpr int min_precision = 4;
inline constexpr int max_precision = 18;
inline constexpr int default_precision = 14;
// Sparse entries keep the top w bits of the hash: w = 26 for new sketches
// (exact up to about 1,000 values in 99% of sets), 23 for version 1 ones.
inline constexpr int sparse_bits_v1 = 23;
inline constexpr int sparse_bits = 26;

inline constexpr int sparse_width_of(uint8_t version) noexcept {
	return version == format_v1 ? sparse_bits_v1 : sparse_bits;
}
inline constexpr uint8_t sparse_version_of(int width) noexcept {
	return width == sparse_bits_v1 ? format_v1 : format_v2;
}
// Registers (and sparse rho fields) are 5 bits: rho is clamped at 31, which
// is HyperLogLog over the top p + 30 bits of the hash (Ertl's q = 30).
inline constexpr int register_max = 31;
inline constexpr int q_bits = 30;

// empty; sparse (w-bit entries, Elias-Fano coded); dense (5-bit registers, packed);
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

// The most distinct sparse entries of width w a sketch of precision p holds;
// one more makes it dense. Chosen so that a sparse sketch is never larger
// than the dense one (doc/hll-storage.md).
size_t sparse_limit(int p, int w) noexcept;

// ---- entries and registers ------------------------------------------------------

inline int rho_clamped(uint64_t w) noexcept {
	// w holds the remaining hash bits left-aligned; rho = leading zeros + 1.
	if (w == 0)
		return register_max;
	int r = __builtin_clzll(w) + 1;
	return r < register_max ? r : register_max;
}

// A sparse entry of width w: (top w bits of the hash) << 5 | rho field (below
// 2^31). The rho field (rho of the hash bits after the first w, clamped at
// 31) is kept only when the w - p bits below the register index are all zero,
// i.e. only when the dense register needs it; otherwise it is 0.
inline uint32_t sparse_entry(uint64_t hash, int p, int w) noexcept {
	uint32_t v = static_cast<uint32_t>(hash >> (64 - w));
	uint32_t low_mask = (1U << (w - p)) - 1;
	uint32_t r = (v & low_mask) == 0 ? static_cast<uint32_t>(rho_clamped(hash << w)) : 0U;
	return (v << 5) | r;
}

inline uint32_t entry_value(uint32_t e) noexcept {
	return e >> 5;
}
inline uint32_t entry_rho(uint32_t e) noexcept {
	return e & 31U;
}

// The dense register index and value an entry of width w stands for at
// precision p.
inline void entry_register(uint32_t e, int p, int w, uint32_t &index, uint8_t &value) noexcept {
	uint32_t v = entry_value(e);
	int low_bits = w - p;
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
// Returns the new count. Entries are of width w.
size_t compact_entries(uint32_t *entries, size_t n, int w) noexcept;

// Merges sorted canonical lists a and b into out (room for na + nb); returns
// the count.
size_t merge_entries(const uint32_t *a, size_t na, const uint32_t *b, size_t nb, uint32_t *out) noexcept;

// Rewrites canonical entries of width w and precision 'from' as entries of
// precision 'to' < 'from' (rho fields the lower precision does not need are
// dropped).
void fold_entries(uint32_t *entries, size_t n, int from, int to, int w) noexcept;

// Rewrites entries of width 'from_w' as entries of the smaller width 'to_w'
// (at precision p); the result needs compact_entries (values may coincide).
void narrow_entries(uint32_t *entries, size_t n, int p, int from_w, int to_w) noexcept;

void dense_add_entries(uint8_t *registers, int p, int w, const uint32_t *entries, size_t n) noexcept;

// Folds registers of precision 'from' into 'to' (to < from); 'out' has 2^to
// bytes and is overwritten.
void fold_registers(const uint8_t *in, int from, uint8_t *out, int to) noexcept;

// ---- estimation -------------------------------------------------------------------

// Sparse: linear counting over the 2^w entry values, rounded to an integer.
double estimate_sparse(size_t distinct_values, int w) noexcept;
// Dense: Ertl's improved raw estimator over 2^p registers of 0..31.
double estimate_dense(const uint8_t *registers, int p) noexcept;

// ---- serialization (doc/hll-storage.md) ------------------------------------------------

// Parsed header of a serialized sketch. parse() checks the length before it
// reads any byte and throws ce::Error(22P03) on anything malformed.
struct Header {
	int precision = 0;
	Repr repr = Repr::empty;
	int version = 0;    // the version byte
	int width = 0;      // sparse: entry width (23 in version 1, 26 in 2)
	size_t count = 0;   // sparse: number of entries
	int rice = 0;       // sparse: low-bit width; dense_rice: Rice parameter
	int base = 0;       // dense_rice: the register value coded as 0
	size_t payload = 0; // offset of the payload
};

Header parse_header(const uint8_t *data, size_t len);

// Decodes a sparse payload into 'out' (room for h.count entries), checking
// every read; when 'canonical' is set, also rejects encodings that are valid
// but not the canonical one.
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

// The low-bit width of n sparse entries of width w (Elias-Fano): the largest
// l with n * 2^l <= 2^w.
int sparse_low_bits(size_t n, int w) noexcept;

struct SparsePlan {
	int rice; // the low-bit width
	size_t bytes;
};
SparsePlan plan_sparse(const uint32_t *entries, size_t n, int p, int w) noexcept;
void encode_sparse(const uint32_t *entries, size_t n, int p, int w, const SparsePlan &plan, uint8_t *out) noexcept;

struct DensePlan {
	Repr repr; // dense or dense_rice
	int base;
	int rice;
	size_t bytes;
};
DensePlan plan_dense(const uint8_t *registers, int p) noexcept;
void encode_dense(const uint8_t *registers, int p, const DensePlan &plan, uint8_t *out) noexcept;
size_t packed_dense_bytes(int p) noexcept; // header included

// The precision an empty sketch takes when merged with another: an empty
// sketch never lowers the precision of a non-empty one.
int union_precision(int pa, bool a_empty, int pb, bool b_empty) noexcept;

} // namespace ce::hll
