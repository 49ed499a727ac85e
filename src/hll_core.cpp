// counter.hll core: hash, representations, serialization, estimator.
// Pure C++; the storage format is specified in doc/hll-storage.md.
#include "counter_ext/cpp_only.hpp"
#include "counter_ext/hll_core.hpp"
#include "counter_ext/error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ce::hll {

namespace {

[[noreturn]] void bad(const std::string &detail) {
	throw Error(sqlstate::invalid_binary_representation, "invalid counter.hll value", detail);
}

} // namespace

uint64_t xxh3::hash_long(const uint8_t *in, size_t len) noexcept {
	// 64-byte stripes into 8 accumulators, 16 stripes per block, the
	// accumulators scrambled after each block, then merged.
	constexpr uint64_t p32_1 = 0x9E3779B1U, p32_2 = 0x85EBCA77U, p32_3 = 0xC2B2AE3DU;
	constexpr uint64_t p64_4 = 0x85EBCA77C2B2AE63ULL, p64_5 = 0x27D4EB2F165667C5ULL;
	uint64_t acc[8] = {p32_3, xxh_p1, xxh_p2, xxh_p3, p64_4, p32_2, p64_5, p32_1};
	const uint8_t *s = secret;
	auto accumulate = [&acc](const uint8_t *stripe, const uint8_t *key) {
		for (int i = 0; i < 8; i++) {
			uint64_t v = read64(stripe + 8 * i);
			uint64_t k = v ^ read64(key + 8 * i);
			acc[i ^ 1] += v;
			acc[i] += (k & 0xFFFFFFFFULL) * (k >> 32);
		}
	};
	auto scramble = [&acc](const uint8_t *key) {
		for (int i = 0; i < 8; i++) {
			uint64_t a = acc[i];
			a ^= a >> 47;
			a ^= read64(key + 8 * i);
			a *= p32_1;
			acc[i] = a;
		}
	};
	constexpr size_t stripes_per_block = (sizeof(secret) - 64) / 8;
	constexpr size_t block_len = 64 * stripes_per_block;
	size_t blocks = (len - 1) / block_len;
	for (size_t b = 0; b < blocks; b++) {
		for (size_t n = 0; n < stripes_per_block; n++)
			accumulate(in + b * block_len + n * 64, s + n * 8);
		scramble(s + sizeof(secret) - 64);
	}
	size_t stripes = ((len - 1) - block_len * blocks) / 64;
	for (size_t n = 0; n < stripes; n++)
		accumulate(in + blocks * block_len + n * 64, s + n * 8);
	accumulate(in + len - 64, s + sizeof(secret) - 64 - 7);
	uint64_t result = len * xxh_p1;
	for (int i = 0; i < 4; i++)
		result += mul128_fold64(acc[2 * i] ^ read64(s + 11 + 16 * i), acc[2 * i + 1] ^ read64(s + 11 + 16 * i + 8));
	return avalanche(result);
}

const char *repr_name(Repr r) noexcept {
	switch (r) {
		case Repr::empty:
			return "empty";
		case Repr::sparse:
			return "sparse";
		case Repr::dense:
			return "dense";
		case Repr::dense_rice:
			return "dense_rice";
	}
	return "unknown";
}

// ---- the sparse limit ------------------------------------------------------------

namespace {

constexpr size_t varint_len(size_t v) noexcept {
	size_t n = 1;
	while (v >= 128) {
		v >>= 7;
		n++;
	}
	return n;
}

// The low-bit width of d sparse entries of width w: the largest l with
// d * 2^l <= 2^w.
constexpr int low_bits_for(size_t d, int w) noexcept {
	int l = 0;
	while (l < w && (d << (l + 1)) <= (size_t{1} << w))
		l++;
	return l;
}

// An upper bound of a sparse sketch's size with d entries of width w: d
// low-bit fields, a high-bit bitmap of at most (2^w - 1 >> l) + d bits, and
// the rho fields expected on d / 2^(w - p) entries.
constexpr size_t sparse_bound_bytes(size_t d, int p, int w) noexcept {
	int l = low_bits_for(d, w);
	size_t bits = d * static_cast<size_t>(l) + (((size_t{1} << w) - 1) >> l) + d;
	bits += (d * 5) >> (w - p);
	return header_bytes + varint_len(d) + (bits + 7) / 8;
}

constexpr size_t compute_sparse_limit(int p, int w) noexcept {
	size_t dense = header_bytes + dense_payload_bytes(p); // packed: the largest dense form
	size_t lo = 0, hi = size_t{1} << (p + 2);
	while (lo < hi) { // largest d with bound(d) <= dense
		size_t mid = (lo + hi + 1) / 2;
		if (sparse_bound_bytes(mid, p, w) <= dense)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

struct LimitTable {
	size_t v1[max_precision + 1]; // width 23
	size_t v2[max_precision + 1]; // width 26
};

constexpr LimitTable make_limits() noexcept {
	LimitTable t{};
	for (int p = 0; p <= max_precision; p++) {
		t.v1[p] = p >= min_precision ? compute_sparse_limit(p, sparse_bits_v1) : 0;
		t.v2[p] = p >= min_precision ? compute_sparse_limit(p, sparse_bits) : 0;
	}
	return t;
}

constexpr LimitTable limits = make_limits();

} // namespace

size_t sparse_limit(int p, int w) noexcept {
	return w == sparse_bits_v1 ? limits.v1[p] : limits.v2[p];
}

// ---- entries and registers ------------------------------------------------------

namespace {

// Sorts up to 'small_sort_max' entries in O(n) expected time: a counting
// scatter into 2^k >= n buckets by the top bits (hash bits are uniform), then
// an insertion sort that only has to fix order inside buckets. Aggregates
// sort one small buffer per group, so this beats std::sort's mispredictions.
constexpr size_t small_sort_max = 512;

// Sorts and keeps one entry per value (the largest rho field, which sorts
// last among equal values); returns how many are kept.
size_t small_sort_unique(uint32_t *entries, size_t n, int w) noexcept {
	uint32_t tmp[small_sort_max];
	uint16_t start[small_sort_max + 1];
	int k = 1;
	while ((size_t{1} << k) < n)
		k++;
	size_t buckets = size_t{1} << k;
	int shift = w + 5 - k; // entries are below 2^(w + 5)
	memset(start, 0, (buckets + 1) * sizeof(uint16_t));
	for (size_t i = 0; i < n; i++)
		start[(entries[i] >> shift) + 1]++;
	for (size_t b = 0; b < buckets; b++)
		start[b + 1] = static_cast<uint16_t>(start[b + 1] + start[b]);
	for (size_t i = 0; i < n; i++)
		tmp[start[entries[i] >> shift]++] = entries[i];
	for (size_t i = 1; i < n; i++) {
		uint32_t x = tmp[i];
		size_t j = i;
		while (j > 0 && tmp[j - 1] > x) {
			tmp[j] = tmp[j - 1];
			j--;
		}
		tmp[j] = x;
	}
	// Copied back without a branch: an entry is overwritten by the next one
	// of the same value.
	size_t out = 0;
	for (size_t i = 0; i + 1 < n; i++) {
		entries[out] = tmp[i];
		out += entry_value(tmp[i + 1]) != entry_value(tmp[i]);
	}
	entries[out++] = tmp[n - 1];
	return out;
}

} // namespace

size_t compact_entries(uint32_t *entries, size_t n, int w) noexcept {
	if (n == 0)
		return 0;
	if (n <= small_sort_max)
		return small_sort_unique(entries, n, w);
	std::sort(entries, entries + n);
	size_t out = 0;
	for (size_t i = 0; i < n; i++) {
		// equal values are adjacent, the largest rho field last
		if (i + 1 < n && entry_value(entries[i + 1]) == entry_value(entries[i]))
			continue;
		entries[out++] = entries[i];
	}
	return out;
}

size_t merge_entries(const uint32_t *a, size_t na, const uint32_t *b, size_t nb, uint32_t *out) noexcept {
	size_t i = 0, j = 0, k = 0;
	while (i < na && j < nb) {
		uint32_t va = entry_value(a[i]), vb = entry_value(b[j]);
		if (va < vb) {
			out[k++] = a[i++];
		} else if (vb < va) {
			out[k++] = b[j++];
		} else {
			out[k++] = std::max(a[i], b[j]);
			i++;
			j++;
		}
	}
	while (i < na)
		out[k++] = a[i++];
	while (j < nb)
		out[k++] = b[j++];
	return k;
}

void fold_entries(uint32_t *entries, size_t n, int from, int to, int w) noexcept {
	(void)from;
	uint32_t low_mask = (1U << (w - to)) - 1;
	for (size_t i = 0; i < n; i++)
		if ((entry_value(entries[i]) & low_mask) != 0)
			entries[i] &= ~31U;
}

void narrow_entries(uint32_t *entries, size_t n, int p, int from_w, int to_w) noexcept {
	int drop = from_w - to_w;
	uint32_t drop_mask = (1U << drop) - 1;
	uint32_t low_mask = (1U << (to_w - p)) - 1;
	for (size_t i = 0; i < n; i++) {
		uint32_t v = entry_value(entries[i]);
		uint32_t narrow = v >> drop;
		uint32_t r = 0;
		if ((narrow & low_mask) == 0) {
			// rho of the hash bits after the first to_w: from the dropped
			// bits, or past them from the wide entry's own rho field (which
			// it has, as its w - p low bits are zero too).
			uint32_t dropped = v & drop_mask;
			if (dropped != 0)
				r = static_cast<uint32_t>(__builtin_clz(dropped) - (32 - drop) + 1);
			else
				r = std::min<uint32_t>(register_max, static_cast<uint32_t>(drop) + entry_rho(entries[i]));
		}
		entries[i] = (narrow << 5) | r;
	}
}

void dense_add_entries(uint8_t *registers, int p, int w, const uint32_t *entries, size_t n) noexcept {
	for (size_t i = 0; i < n; i++) {
		uint32_t index;
		uint8_t value;
		entry_register(entries[i], p, w, index, value);
		if (registers[index] < value)
			registers[index] = value;
	}
}

void fold_registers(const uint8_t *in, int from, uint8_t *out, int to) noexcept {
	int shift = from - to;
	uint32_t low_mask = (1U << shift) - 1;
	memset(out, 0, size_t{1} << to);
	for (uint32_t i = 0; i < (1U << from); i++) {
		uint8_t r = in[i];
		if (r == 0)
			continue;
		uint32_t j = i >> shift;
		uint32_t low = i & low_mask;
		int v;
		if (low != 0)
			v = __builtin_clz(low) - (32 - shift) + 1;
		else
			v = std::min(register_max, static_cast<int>(r) + shift);
		if (out[j] < v)
			out[j] = static_cast<uint8_t>(v);
	}
}

// ---- estimation -------------------------------------------------------------------

double estimate_sparse(size_t distinct_values, int w) noexcept {
	if (distinct_values == 0)
		return 0.0;
	double m = static_cast<double>(size_t{1} << w);
	double d = static_cast<double>(distinct_values);
	return std::round(-m * std::log1p(-d / m));
}

namespace {

double ertl_sigma(double x) noexcept {
	if (x == 1.0)
		return std::numeric_limits<double>::infinity();
	double y = 1.0, z = x, previous;
	do {
		x *= x;
		previous = z;
		z += x * y;
		y += y;
	} while (z != previous);
	return z;
}

double ertl_tau(double x) noexcept {
	if (x == 0.0 || x == 1.0)
		return 0.0;
	double y = 1.0, z = 1.0 - x, previous;
	do {
		x = std::sqrt(x);
		previous = z;
		y *= 0.5;
		z -= (1.0 - x) * (1.0 - x) * y;
	} while (z != previous);
	return z / 3.0;
}

} // namespace

double estimate_dense(const uint8_t *registers, int p) noexcept {
	size_t m = size_t{1} << p;
	uint32_t counts[register_max + 1] = {};
	for (size_t i = 0; i < m; i++)
		counts[registers[i]]++;
	double md = static_cast<double>(m);
	if (counts[0] == m)
		return 0.0;
	double z = md * ertl_tau(1.0 - counts[q_bits + 1] / md);
	for (int k = q_bits; k >= 1; k--)
		z = 0.5 * (z + counts[k]);
	z += md * ertl_sigma(counts[0] / md);
	const double alpha_inf = 0.5 / std::log(2.0);
	return alpha_inf * md * md / z;
}

// ---- bit streams ------------------------------------------------------------------

namespace {

// Bits are gathered in a 64-bit word and stored 32 at a time (little-endian,
// so the bytes are those of a byte-at-a-time writer); flush() writes the
// last partial word's bytes. It never writes past the bits it was given.
class BitWriter {
public:
	explicit BitWriter(uint8_t *out) noexcept : out_(out) {}
	void put(uint64_t bits, int n) noexcept { // n <= 32
		acc_ |= (bits & ((uint64_t{1} << n) - 1)) << used_;
		used_ += n;
		if (used_ >= 32) {
			uint32_t word = static_cast<uint32_t>(acc_);
			memcpy(out_, &word, 4);
			out_ += 4;
			acc_ >>= 32;
			used_ -= 32;
		}
	}
	void unary(uint64_t q) noexcept { // q ones, then a zero
		while (q >= 32) {
			put(0xFFFFFFFFu, 32);
			q -= 32;
		}
		put((uint64_t{1} << q) - 1, static_cast<int>(q) + 1);
	}
	void zeros_then_one(uint64_t q) noexcept { // q zeros, then a one
		while (q >= 32) {
			put(0, 32);
			q -= 32;
		}
		put(uint64_t{1} << q, static_cast<int>(q) + 1);
	}
	void flush() noexcept {
		while (used_ > 0) {
			*out_++ = static_cast<uint8_t>(acc_);
			acc_ >>= 8;
			used_ -= 8;
		}
		acc_ = 0;
		used_ = 0;
	}

private:
	uint8_t *out_;
	uint64_t acc_ = 0;
	int used_ = 0;
};

class BitReader {
public:
	BitReader(const uint8_t *data, size_t bytes) noexcept : data_(data), bytes_(bytes), bits_(bytes * 8) {}

	// 57 valid bits from the position, when 8 whole bytes remain from it.
	bool window(uint64_t &w) const noexcept {
		size_t byte = pos_ >> 3;
		if (byte + 8 > bytes_)
			return false;
		memcpy(&w, data_ + byte, 8);
		w >>= (pos_ & 7);
		return true;
	}
	void advance(size_t n) noexcept { pos_ += n; }

	size_t remaining() const noexcept { return bits_ - pos_; }
	size_t position() const noexcept { return pos_; }

	// Reads n <= 32 bits; false when fewer remain.
	bool get(int n, uint32_t &out) noexcept {
		if (static_cast<size_t>(n) > remaining())
			return false;
		out = static_cast<uint32_t>(peek() & ((uint64_t{1} << n) - 1));
		pos_ += static_cast<size_t>(n);
		return true;
	}

	// Reads a unary number (ones ended by a zero); false when the stream ends
	// first or the number exceeds 'max'.
	bool unary(uint64_t max, uint64_t &out) noexcept {
		uint64_t q = 0;
		for (;;) {
			size_t avail = std::min<size_t>(56, remaining());
			if (avail == 0)
				return false;
			uint64_t zeros = ~peek() & ((uint64_t{1} << avail) - 1);
			if (zeros == 0) {
				q += avail;
				pos_ += avail;
			} else {
				int t = __builtin_ctzll(zeros);
				q += static_cast<uint64_t>(t);
				pos_ += static_cast<size_t>(t) + 1;
				out = q;
				return q <= max;
			}
			if (q > max)
				return false;
		}
	}

private:
	// At least 57 bits from pos_ (zeros past the end).
	uint64_t peek() const noexcept {
		size_t byte = pos_ >> 3;
		uint64_t w = 0;
		if (likely_full(byte))
			memcpy(&w, data_ + byte, 8);
		else
			memcpy(&w, data_ + byte, bytes_ - byte);
		return w >> (pos_ & 7);
	}

	bool likely_full(size_t byte) const noexcept { return __builtin_expect(byte + 8 <= bytes_, 1); }

	const uint8_t *data_;
	size_t bytes_;
	size_t bits_;
	size_t pos_ = 0;
};

size_t write_varint(uint8_t *out, size_t v) noexcept {
	size_t n = 0;
	while (v >= 128) {
		out[n++] = static_cast<uint8_t>(v | 128);
		v >>= 7;
	}
	out[n++] = static_cast<uint8_t>(v);
	return n;
}

} // namespace

// ---- serialization -------------------------------------------------------------------

size_t encoded_size_empty() noexcept {
	return header_bytes;
}

void encode_empty(int p, uint8_t *out) noexcept {
	out[0] = format_v1;
	out[1] = static_cast<uint8_t>((static_cast<int>(Repr::empty) << 5) | p);
}

int sparse_low_bits(size_t n, int w) noexcept {
	return low_bits_for(n, w);
}

SparsePlan plan_sparse(const uint32_t *entries, size_t n, int p, int w) noexcept {
	int l = low_bits_for(n, w);
	uint64_t bits = static_cast<uint64_t>(n) * static_cast<uint64_t>(l) + n;
	if (n > 0)
		bits += entry_value(entries[n - 1]) >> l;
	uint32_t low_mask = (1U << (w - p)) - 1;
	for (size_t i = 0; i < n; i++)
		if ((entry_value(entries[i]) & low_mask) == 0)
			bits += 5;
	return SparsePlan{l, header_bytes + varint_len(n) + static_cast<size_t>((bits + 7) / 8)};
}

void encode_sparse(const uint32_t *entries, size_t n, int p, int w, const SparsePlan &plan, uint8_t *out) noexcept {
	out[0] = sparse_version_of(w);
	out[1] = static_cast<uint8_t>((static_cast<int>(Repr::sparse) << 5) | p);
	size_t off = header_bytes + write_varint(out + header_bytes, n);
	BitWriter bw(out + off);
	int l = plan.rice;
	for (size_t i = 0; i < n; i++)
		bw.put(entry_value(entries[i]), l);
	uint32_t prev_high = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t high = entry_value(entries[i]) >> l;
		bw.zeros_then_one(high - prev_high);
		prev_high = high;
	}
	uint32_t low_mask = (1U << (w - p)) - 1;
	for (size_t i = 0; i < n; i++)
		if ((entry_value(entries[i]) & low_mask) == 0)
			bw.put(entry_rho(entries[i]), 5);
	bw.flush();
}

size_t packed_dense_bytes(int p) noexcept {
	return header_bytes + dense_payload_bytes(p);
}

namespace {

inline uint32_t zigzag(int d) noexcept {
	return d >= 0 ? static_cast<uint32_t>(2 * d) : static_cast<uint32_t>(-2 * d - 1);
}

inline int unzigzag(uint32_t z) noexcept {
	// branch-free: the parity of z is random in a register stream
	return static_cast<int>(z >> 1) ^ -static_cast<int>(z & 1);
}

constexpr int dense_rice_max = 3;
constexpr size_t dense_rice_header = header_bytes + 2;

// Table-driven Rice decoding: for each 12-bit window, the codes (with
// parameter k) that lie wholly inside it, up to 8: the differences from the
// base they stand for (0 in unused lanes) and the bits they take. Registers
// sit within a few values of the base, so a window holds about four codes.
constexpr int rice_table_bits = 12;
constexpr int rice_table_codes = 8;

struct RiceStep {
	uint8_t codes; // 0: the first code is longer than the window
	uint8_t bits;
	int8_t d[rice_table_codes];
};

struct RiceTable {
	RiceStep step[size_t{1} << rice_table_bits];
};

RiceTable make_rice_table(int k) noexcept {
	RiceTable t{};
	for (uint32_t x = 0; x < (1U << rice_table_bits); x++) {
		RiceStep &st = t.step[x];
		int pos = 0;
		while (st.codes < rice_table_codes) {
			int q = 0;
			while (pos + q < rice_table_bits && ((x >> (pos + q)) & 1U) != 0)
				q++;
			if (pos + q + 1 + k > rice_table_bits)
				break;
			uint32_t low = (x >> (pos + q + 1)) & ((1U << k) - 1);
			st.d[st.codes++] = static_cast<int8_t>(unzigzag((static_cast<uint32_t>(q) << k) | low));
			pos += q + 1 + k;
		}
		st.bits = static_cast<uint8_t>(pos);
	}
	return t;
}

const RiceTable &rice_table(int k) noexcept {
	static const RiceTable tables[dense_rice_max + 1] = {make_rice_table(0), make_rice_table(1), make_rice_table(2),
	                                                     make_rice_table(3)};
	return tables[k];
}

} // namespace

DensePlan plan_dense(const uint8_t *registers, int p) noexcept {
	size_t m = size_t{1} << p;
	uint64_t hist[register_max + 1] = {};
	for (size_t i = 0; i < m; i++)
		hist[registers[i]]++;
	// The cheapest (base, rice) pair; ties go to the smaller base, then the
	// smaller parameter.
	uint64_t best_bits = std::numeric_limits<uint64_t>::max();
	int best_base = 0, best_rice = 0;
	for (int base = 0; base <= register_max; base++) {
		for (int k = 0; k <= dense_rice_max; k++) {
			uint64_t bits = 0;
			for (int v = 0; v <= register_max; v++)
				if (hist[v] != 0)
					bits += hist[v] * ((zigzag(v - base) >> k) + 1 + static_cast<uint64_t>(k));
			if (bits < best_bits) {
				best_bits = bits;
				best_base = base;
				best_rice = k;
			}
		}
	}
	size_t rice_bytes = dense_rice_header + static_cast<size_t>((best_bits + 7) / 8);
	if (rice_bytes < packed_dense_bytes(p))
		return DensePlan{Repr::dense_rice, best_base, best_rice, rice_bytes};
	return DensePlan{Repr::dense, 0, 0, packed_dense_bytes(p)};
}

void encode_dense(const uint8_t *registers, int p, const DensePlan &plan, uint8_t *out) noexcept {
	out[0] = format_v1;
	out[1] = static_cast<uint8_t>((static_cast<int>(plan.repr) << 5) | p);
	size_t m = size_t{1} << p;
	if (plan.repr == Repr::dense) {
		BitWriter w(out + header_bytes);
		for (size_t i = 0; i < m; i++)
			w.put(registers[i], 5);
		w.flush();
		return;
	}
	out[2] = static_cast<uint8_t>(plan.base);
	out[3] = static_cast<uint8_t>(plan.rice);
	BitWriter w(out + dense_rice_header);
	int k = plan.rice;
	for (size_t i = 0; i < m; i++) {
		uint32_t z = zigzag(static_cast<int>(registers[i]) - plan.base);
		w.unary(z >> k);
		if (k > 0)
			w.put(z, k);
	}
	w.flush();
}

Header parse_header(const uint8_t *data, size_t len) {
	if (len < header_bytes)
		bad(format("%zu bytes is shorter than the %zu-byte header", len, header_bytes));
	if (data[0] != format_v1 && data[0] != format_v2)
		bad(format("unknown format version %u (this library reads versions %u and %u)", data[0], format_v1, format_v2));
	Header h;
	h.version = data[0];
	h.width = sparse_width_of(data[0]);
	h.precision = data[1] & 31;
	int repr = data[1] >> 5;
	if (h.precision < min_precision || h.precision > max_precision)
		bad(format("precision %d is outside %d..%d", h.precision, min_precision, max_precision));
	if (repr > static_cast<int>(Repr::dense_rice))
		bad(format("unknown representation %d", repr));
	h.repr = static_cast<Repr>(repr);
	if (h.version == format_v2 && h.repr != Repr::sparse)
		bad(format("format version %u holds sparse sketches only (this one is %s)", format_v2, repr_name(h.repr)));
	switch (h.repr) {
		case Repr::empty:
			if (len != header_bytes)
				bad(format("an empty sketch is %zu bytes, not %zu", header_bytes, len));
			h.payload = header_bytes;
			break;
		case Repr::dense:
			if (len != packed_dense_bytes(h.precision))
				bad(format("a dense sketch of precision %d is %zu bytes, not %zu", h.precision,
				           packed_dense_bytes(h.precision), len));
			h.payload = header_bytes;
			break;
		case Repr::dense_rice:
			if (len <= dense_rice_header)
				bad("a dense_rice sketch is truncated before its registers");
			h.base = data[2];
			h.rice = data[3];
			if (h.base > register_max)
				bad(format("base %d is outside 0..%d", h.base, register_max));
			if (h.rice > dense_rice_max)
				bad(format("Rice parameter %d is outside 0..%d", h.rice, dense_rice_max));
			if (len >= packed_dense_bytes(h.precision))
				bad(format("a dense_rice sketch of %zu bytes is not smaller than the packed %zu", len,
				           packed_dense_bytes(h.precision)));
			h.payload = dense_rice_header;
			break;
		case Repr::sparse: {
			if (len < header_bytes + 1)
				bad("a sparse sketch is truncated before its entry count");
			size_t off = header_bytes, count = 0;
			int shift = 0;
			for (;;) {
				if (off >= len)
					bad("a sparse sketch is truncated inside its entry count");
				uint8_t byte = data[off++];
				if (shift > 21)
					bad("the entry count is too long");
				count |= static_cast<size_t>(byte & 127) << shift;
				shift += 7;
				if ((byte & 128) == 0) {
					if (byte == 0 && shift > 7)
						bad("the entry count is not minimally encoded");
					break;
				}
			}
			if (count == 0)
				bad("a sparse sketch has no entries (an empty sketch has its own form)");
			if (count > sparse_limit(h.precision, h.width))
				bad(format("%zu sparse entries exceed the %zu a sketch of precision %d and version %d holds", count,
				           sparse_limit(h.precision, h.width), h.precision, h.version));
			h.count = count;
			h.rice = low_bits_for(count, h.width);
			h.payload = off;
			break;
		}
	}
	return h;
}

namespace {

// n bits (n <= 57) at bit position pos of a buffer of 'bytes' bytes; the
// caller has checked that pos + n is within the buffer.
inline uint64_t bits_at(const uint8_t *d, size_t bytes, size_t pos, int n) noexcept {
	size_t byte = pos >> 3;
	uint64_t w = 0;
	if (byte + 8 <= bytes)
		memcpy(&w, d + byte, 8);
	else
		memcpy(&w, d + byte, bytes - byte);
	return (w >> (pos & 7)) & ((uint64_t{1} << n) - 1);
}

// Decodes the entries of a sparse payload (Elias-Fano: n low-bit fields, a
// bitmap of the high parts, the rho fields), checking every read, and hands
// each to 'emit' in increasing order.
template <typename Emit>
void for_each_sparse_entry(const uint8_t *data, size_t len, const Header &h, Emit &&emit) {
	const uint8_t *d = data + h.payload;
	size_t bytes = len - h.payload;
	size_t total = bytes * 8;
	size_t n = h.count;
	int l = h.rice;
	size_t high_start = n * static_cast<size_t>(l);
	if (high_start > total)
		bad("truncated inside the low bits");
	// The bitmap ends just after its n-th one bit; the rho fields follow.
	size_t pos = high_start, ones = 0, high_end = 0;
	for (;;) {
		if (pos >= total)
			bad("truncated inside the high bits");
		int chunk = static_cast<int>(std::min<size_t>(57, total - pos));
		uint64_t w = bits_at(d, bytes, pos, chunk);
		size_t c = static_cast<size_t>(__builtin_popcountll(w));
		if (ones + c >= n) {
			for (size_t k = ones + 1; k < n; k++)
				w &= w - 1;
			high_end = pos + static_cast<size_t>(__builtin_ctzll(w)) + 1;
			break;
		}
		ones += c;
		pos += static_cast<size_t>(chunk);
	}
	const uint64_t high_limit = uint64_t{1} << (h.width - l);
	uint32_t low_mask = (1U << (h.width - h.precision)) - 1;
	size_t rho_pos = high_end;
	int64_t prev = -1;
	size_t i = 0;
	pos = high_start;
	while (i < n) {
		int chunk = static_cast<int>(std::min<size_t>(57, high_end - pos));
		uint64_t w = bits_at(d, bytes, pos, chunk);
		while (w != 0) {
			uint64_t high = pos + static_cast<uint64_t>(__builtin_ctzll(w)) - high_start - i;
			w &= w - 1;
			if (high >= high_limit)
				bad(format("entry %zu: value out of range", i));
			uint64_t low = l > 0 ? bits_at(d, bytes, i * static_cast<size_t>(l), l) : 0;
			int64_t v = static_cast<int64_t>((high << l) | low);
			if (v <= prev)
				bad(format("entry %zu: values not increasing", i));
			uint32_t rho = 0;
			if ((static_cast<uint32_t>(v) & low_mask) == 0) {
				if (rho_pos + 5 > total)
					bad(format("entry %zu: truncated rho field", i));
				rho = static_cast<uint32_t>(bits_at(d, bytes, rho_pos, 5));
				rho_pos += 5;
				if (rho == 0)
					bad(format("entry %zu: rho field 0", i));
			}
			emit(i, (static_cast<uint32_t>(v) << 5) | rho);
			prev = v;
			i++;
		}
		pos += static_cast<size_t>(chunk);
	}
	// What is left is padding to the byte boundary: fewer than 8 bits, zero.
	size_t rest = total - rho_pos;
	if (rest >= 8)
		bad(format("%zu trailing bytes after the last entry", rest / 8));
	if (rest > 0 && bits_at(d, bytes, rho_pos, static_cast<int>(rest)) != 0)
		bad("nonzero padding bits");
}

} // namespace

void decode_sparse(const uint8_t *data, size_t len, const Header &h, uint32_t *out, bool canonical) {
	for_each_sparse_entry(data, len, h, [out](size_t i, uint32_t e) { out[i] = e; });
	if (canonical) {
		SparsePlan plan = plan_sparse(out, h.count, h.precision, h.width);
		if (plan.bytes != len)
			bad(format("not the canonical encoding (%zu bytes, canonical %zu)", len, plan.bytes));
	}
}

void decode_sparse_to_registers(const uint8_t *data, size_t len, const Header &h, uint8_t *registers, int p) {
	// An entry carries its rho field whenever precision p <= h.precision needs it.
	for_each_sparse_entry(data, len, h, [registers, p, w = h.width](size_t, uint32_t e) {
		uint32_t index;
		uint8_t value;
		entry_register(e, p, w, index, value);
		if (registers[index] < value)
			registers[index] = value;
	});
}

void decode_dense(const uint8_t *data, size_t len, const Header &h, uint8_t *registers, bool canonical) {
	size_t m = size_t{1} << h.precision;
	if (h.repr == Repr::dense) {
		// parse_header checked the exact length: 8 registers in every 5 bytes
		const uint8_t *p = data + h.payload;
		for (size_t i = 0; i < m; i += 8, p += 5) {
			uint64_t w = 0;
			memcpy(&w, p, 5);
			for (size_t k = 0; k < 8; k++) {
				registers[i + k] = static_cast<uint8_t>((w >> (5 * k)) & 31);
			}
		}
	} else {
		BitReader r(data + h.payload, len - h.payload);
		int k = h.rice;
		uint64_t max_q = 63U >> k;
		uint64_t low_mask = (uint64_t{1} << k) - 1;
		size_t i = 0;
		// Fast paths, while 8 whole bytes remain: the codes of a 12-bit
		// window from a table; or, for a code longer than that, one 57-bit
		// window, in which a code (unary part, zero-bit, k low bits) fits
		// whenever the window holds a zero-bit. Else the checked path below.
		// One register from a 57-bit window; false when its code does not fit.
		auto windowed = [&](uint64_t w) {
			uint64_t zeros = ~w & ((uint64_t{1} << 57) - 1);
			if (zeros == 0)
				return false;
			uint64_t q = static_cast<uint64_t>(__builtin_ctzll(zeros));
			if (q > max_q || q + 1 + static_cast<uint64_t>(k) > 57)
				return false;
			uint32_t low = static_cast<uint32_t>((w >> (q + 1)) & low_mask);
			int v = h.base + unzigzag(static_cast<uint32_t>((q << k) | low));
			if (v < 0 || v > register_max)
				bad(format("register %zu: value %d is outside 0..%d", i, v, register_max));
			registers[i] = static_cast<uint8_t>(v);
			r.advance(static_cast<size_t>(q) + 1 + static_cast<size_t>(k));
			return true;
		};
		const RiceTable &table = rice_table(k);
		for (uint64_t w; i + rice_table_codes <= m && r.window(w);) {
			const RiceStep &st = table.step[w & ((1U << rice_table_bits) - 1)];
			if (st.codes == 0) {
				if (!windowed(w))
					break;
				i++;
				continue;
			}
			// All 8 lanes (unused ones hold the base, in range, and are
			// overwritten by the next step): a fixed-width loop the compiler
			// vectorizes.
			uint32_t out_of_range = 0;
			for (int j = 0; j < rice_table_codes; j++) {
				int v = h.base + st.d[j];
				out_of_range |= static_cast<uint32_t>(v) > static_cast<uint32_t>(register_max);
				registers[i + static_cast<size_t>(j)] = static_cast<uint8_t>(v);
			}
			if (out_of_range != 0)
				for (int j = 0; j < st.codes; j++)
					if (h.base + st.d[j] < 0 || h.base + st.d[j] > register_max)
						bad(format("register %zu: value %d is outside 0..%d", i + static_cast<size_t>(j),
						           h.base + st.d[j], register_max));
			i += st.codes;
			r.advance(st.bits);
		}
		for (uint64_t w; i < m && r.window(w) && windowed(w);)
			i++;
		for (; i < m; i++) {
			uint64_t q;
			if (!r.unary(max_q, q))
				bad(format("register %zu: truncated or out of range", i));
			uint32_t low = 0;
			if (k > 0 && !r.get(k, low))
				bad(format("register %zu: truncated", i));
			int v = h.base + unzigzag(static_cast<uint32_t>((q << k) | low));
			if (v < 0 || v > register_max)
				bad(format("register %zu: value %d is outside 0..%d", i, v, register_max));
			registers[i] = static_cast<uint8_t>(v);
		}
		size_t rest = r.remaining();
		if (rest >= 8)
			bad(format("%zu trailing bytes after the last register", rest / 8));
		uint32_t pad = 0;
		if (rest > 0 && (!r.get(static_cast<int>(rest), pad) || pad != 0))
			bad("nonzero padding bits");
	}
	uint8_t any = 0;
	for (size_t i = 0; i < m; i++)
		any |= registers[i];
	if (any == 0)
		bad("a dense sketch has no register set (an empty sketch has its own form)");
	if (canonical) {
		DensePlan plan = plan_dense(registers, h.precision);
		if (plan.repr != h.repr || plan.bytes != len ||
		    (h.repr == Repr::dense_rice && (plan.base != h.base || plan.rice != h.rice)))
			bad(format("not the canonical encoding (canonical: %s, %zu bytes)", repr_name(plan.repr), plan.bytes));
	}
}

void validate(const uint8_t *data, size_t len) {
	Header h = parse_header(data, len);
	if (h.repr == Repr::sparse) {
		std::vector<uint32_t> entries(h.count);
		decode_sparse(data, len, h, entries.data(), true);
	} else if (is_dense(h.repr)) {
		std::vector<uint8_t> registers(size_t{1} << h.precision);
		decode_dense(data, len, h, registers.data(), true);
	}
}

int union_precision(int pa, bool a_empty, int pb, bool b_empty) noexcept {
	if (a_empty && !b_empty)
		return pb;
	if (b_empty && !a_empty)
		return pa;
	return std::min(pa, pb);
}

} // namespace ce::hll
