// The PN-counter CRDT (the Riak counter), as pure C++: no PostgreSQL here.
//
// A state holds, per node id, the total of its increments (P) and of its
// decrements (N). Merge takes the per-node maximum of each; the value is
// sum(P) - sum(N). Merge is commutative, associative and idempotent, so
// replicas that exchange states in any order, any number of times, converge.
//
// A state is kept sorted by node id with no all-zero node, so that equal
// states have equal bytes (the canonical form, doc/reference/pncounter.md).
//
// Errors are ce::Error with a SQLSTATE: malformed text 22P02, malformed bytes
// 22P03, a total or value out of range 22003, too many nodes 54000, a bad
// node id or amount 22023.
#pragma once

#include "counter_ext/error.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace ce::pncounter {

// Bounds, documented in doc/reference/pncounter.md.
inline constexpr std::size_t max_nodes = 1024;
inline constexpr std::size_t max_node_id_bytes = 63;
inline constexpr std::uint64_t max_total = 9223372036854775807ULL; // a bigint, so SQL can show it
inline constexpr std::uint8_t format_version = 1;

// One node's totals. Plain bytes (trivially copyable) so arrays of entries can
// live in palloc'd memory (the aggregate state).
struct Entry {
	std::uint64_t p;
	std::uint64_t n;
	std::uint8_t id_len;
	char id[max_node_id_bytes];

	std::string_view node() const { return std::string_view(id, id_len); }
};
static_assert(std::is_trivially_copyable_v<Entry>, "entries are copied as bytes");

using State = std::vector<Entry>;

// Empty when 'id' is a valid node id (1..63 bytes of [A-Za-z0-9_.-]),
// otherwise the reason it is not.
std::string node_id_problem(std::string_view id);

// Adds 'amount' (1..max_total) to the increments (or the decrements) of
// 'node', which must be a valid node id.
void add(State &state, std::string_view node, std::uint64_t amount, bool decrement);

// sum(P) - sum(N); out of the bigint range is a 22003 error.
std::int64_t value(const Entry *entries, std::size_t count);
inline std::int64_t value(const State &s) {
	return value(s.data(), s.size());
}

// The per-node maximum of two canonical states.
State merge(const Entry *a, std::size_t a_count, const Entry *b, std::size_t b_count);
inline State merge(const State &a, const State &b) {
	return merge(a.data(), a.size(), b.data(), b.size());
}

// Merges 'src' into 'dst' in place when every node of 'src' is already in
// 'dst' and returns true; otherwise changes nothing and returns false.
bool merge_in_place(Entry *dst, std::size_t dst_count, const Entry *src, std::size_t src_count);

// Text form: {"a":[5,1],"b":[3,0]} (valid JSON). Parsing accepts any order
// and whitespace, drops all-zero nodes and rejects duplicates.
State parse_text(std::string_view text);
std::string to_text(const Entry *entries, std::size_t count);

// Binary form (send/recv and storage): version byte, node count, then per
// node id length, id, P and N (unsigned LEB128). Decoding is strict: only the
// canonical encoding of a state is accepted (22P03 otherwise).
std::size_t encoded_size(const Entry *entries, std::size_t count);
void encode(const Entry *entries, std::size_t count, unsigned char *out); // writes encoded_size() bytes
State decode(const unsigned char *data, std::size_t len);
inline std::size_t encoded_size(const State &s) {
	return encoded_size(s.data(), s.size());
}

} // namespace ce::pncounter
