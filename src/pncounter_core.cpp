// The PN-counter CRDT: state, merge, value, text and binary forms. Pure C++.
#include "counter_ext/cpp_only.hpp"
#include "counter_ext/pncounter_core.hpp"

#include <algorithm>
#include <cstring>

namespace ce::pncounter {

namespace {

const char type_name[] = "counter.pncounter";

bool node_char(unsigned char c) {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
	       c == '.';
}

Entry make_entry(std::string_view node, std::uint64_t p, std::uint64_t n) {
	Entry e;
	std::memset(&e, 0, sizeof e);
	e.p = p;
	e.n = n;
	e.id_len = static_cast<std::uint8_t>(node.size());
	std::memcpy(e.id, node.data(), node.size());
	return e;
}

bool node_less(const Entry &a, const Entry &b) {
	return a.node() < b.node();
}

Error too_many_nodes(std::size_t count) {
	return Error(sqlstate::program_limit_exceeded, "counter.pncounter has too many nodes",
	             format("A state holds at most %zu nodes; this one would hold %zu.", max_nodes, count),
	             "Each primary that writes a counter needs its own node id; reuse ids of retired nodes only if "
	             "their totals were merged first.");
}

// "expected ..." -> "Expected ...": details are sentences.
std::string sentence(std::string s) {
	if (!s.empty() && s[0] >= 'a' && s[0] <= 'z')
		s[0] = static_cast<char>(s[0] - 'a' + 'A');
	return s;
}

// --- text ---------------------------------------------------------------

class TextParser {
public:
	explicit TextParser(std::string_view text) : text_(text) {}

	State parse() {
		State out;
		skip_ws();
		expect('{', "'{'");
		skip_ws();
		if (peek() != '}') {
			for (;;) {
				out.push_back(member());
				if (out.size() > max_nodes)
					throw too_many_nodes(out.size());
				skip_ws();
				if (peek() == ',') {
					pos_++;
					skip_ws();
					continue;
				}
				break;
			}
		}
		expect('}', "',' or '}'");
		skip_ws();
		if (pos_ != text_.size())
			fail("unexpected text after '}'");
		std::sort(out.begin(), out.end(), node_less);
		for (std::size_t i = 1; i < out.size(); i++) {
			if (out[i - 1].node() == out[i].node())
				fail_at(std::string::npos,
				        format("node \"%.*s\" appears more than once", static_cast<int>(out[i].id_len), out[i].id));
		}
		// A node with no increments and no decrements is the same state
		// without it; the canonical form leaves it out.
		out.erase(std::remove_if(out.begin(), out.end(), [](const Entry &e) { return e.p == 0 && e.n == 0; }),
		          out.end());
		return out;
	}

private:
	std::string_view text_;
	std::size_t pos_ = 0;

	int peek() const { return pos_ < text_.size() ? static_cast<unsigned char>(text_[pos_]) : -1; }

	void skip_ws() {
		while (pos_ < text_.size() &&
		       (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
			pos_++;
	}

	[[noreturn]] void fail_at(std::size_t at, const std::string &why) const {
		std::string shown(text_.substr(0, 200));
		if (text_.size() > 200)
			shown += "...";
		std::string detail =
		    sentence(at == std::string::npos ? why + "." : format("%s at character %zu.", why.c_str(), at + 1));
		throw Error(sqlstate::invalid_text_representation,
		            format("invalid input syntax for type %s: \"%s\"", type_name, shown.c_str()), detail,
		            "The text form is {\"node\":[increments,decrements],...}, for example {\"a\":[5,1],\"b\":[3,0]}.");
	}
	[[noreturn]] void fail(const std::string &why) const { fail_at(pos_, why); }

	void expect(char c, const char *what) {
		if (peek() != static_cast<unsigned char>(c))
			fail(peek() < 0 ? format("expected %s, found the end", what) : format("expected %s", what));
		pos_++;
	}

	Entry member() {
		expect('"', "a node id in double quotes");
		std::size_t start = pos_;
		while (pos_ < text_.size() && text_[pos_] != '"') {
			if (!node_char(static_cast<unsigned char>(text_[pos_])))
				fail("a node id holds only letters, digits, '_', '-' and '.'");
			pos_++;
		}
		std::string_view node = text_.substr(start, pos_ - start);
		expect('"', "'\"' closing the node id");
		if (node.empty())
			fail_at(start, "a node id is never empty");
		if (node.size() > max_node_id_bytes)
			fail_at(start, format("a node id is at most %zu bytes", max_node_id_bytes));
		skip_ws();
		expect(':', "':'");
		skip_ws();
		expect('[', "'['");
		skip_ws();
		std::uint64_t p = total(node, "increments");
		skip_ws();
		expect(',', "','");
		skip_ws();
		std::uint64_t n = total(node, "decrements");
		skip_ws();
		expect(']', "']'");
		return make_entry(node, p, n);
	}

	std::uint64_t total(std::string_view node, const char *what) {
		if (peek() == '-')
			fail(format("totals are never negative (the %s of node \"%.*s\")", what, static_cast<int>(node.size()),
			            node.data()));
		if (peek() < '0' || peek() > '9')
			fail("expected a number");
		std::size_t start = pos_;
		std::uint64_t v = 0;
		bool too_big = false;
		while (peek() >= '0' && peek() <= '9') {
			unsigned d = static_cast<unsigned>(peek() - '0');
			if (v > (max_total - d) / 10)
				too_big = true;
			else
				v = v * 10 + d;
			pos_++;
		}
		if (text_[start] == '0' && pos_ - start > 1)
			fail_at(start, "a number has no leading zeros");
		if (peek() == '.' || peek() == 'e' || peek() == 'E')
			fail("totals are whole numbers");
		if (too_big)
			throw Error(sqlstate::numeric_value_out_of_range, format("%s total out of range", type_name),
			            format("The %s of node \"%.*s\" exceed %llu.", what, static_cast<int>(node.size()), node.data(),
			                   static_cast<unsigned long long>(max_total)));
		return v;
	}
};

// --- binary -------------------------------------------------------------

std::size_t varint_size(std::uint64_t v) {
	std::size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

unsigned char *put_varint(unsigned char *out, std::uint64_t v) {
	while (v >= 0x80) {
		*out++ = static_cast<unsigned char>(v | 0x80);
		v >>= 7;
	}
	*out++ = static_cast<unsigned char>(v);
	return out;
}

class Reader {
public:
	Reader(const unsigned char *data, std::size_t len) : data_(data), len_(len) {}

	[[noreturn]] void fail(const std::string &why) const {
		throw Error(sqlstate::invalid_binary_representation, format("invalid binary data for type %s", type_name),
		            sentence(format("%s at byte %zu of %zu.", why.c_str(), pos_, len_)));
	}

	bool at_end() const { return pos_ == len_; }

	unsigned char byte(const char *what) {
		if (pos_ >= len_)
			fail(format("the data ends before the %s", what));
		return data_[pos_++];
	}

	// Unsigned LEB128 of at most max_total, in its shortest form.
	std::uint64_t varint(const char *what) {
		std::uint64_t v = 0;
		for (unsigned shift = 0;; shift += 7) {
			unsigned char b = byte(what);
			if (shift == 63 && b > 0)
				fail(format("the %s is out of range", what));
			v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
			if ((b & 0x80) == 0) {
				if (b == 0 && shift > 0)
					fail(format("the %s is not in its shortest encoding", what));
				return v;
			}
		}
	}

	std::string_view bytes(std::size_t n, const char *what) {
		if (len_ - pos_ < n)
			fail(format("the data ends inside the %s", what));
		std::string_view out(reinterpret_cast<const char *>(data_ + pos_), n);
		pos_ += n;
		return out;
	}

private:
	const unsigned char *data_;
	std::size_t len_;
	std::size_t pos_ = 0;
};

} // namespace

std::string node_id_problem(std::string_view id) {
	if (id.empty())
		return "a node id is never empty";
	if (id.size() > max_node_id_bytes)
		return format("a node id is at most %zu bytes", max_node_id_bytes);
	for (char c : id)
		if (!node_char(static_cast<unsigned char>(c)))
			return "a node id holds only letters, digits, '_', '-' and '.'";
	return {};
}

void add(State &state, std::string_view node, std::uint64_t amount, bool decrement) {
	std::string problem = node_id_problem(node);
	if (!problem.empty())
		throw Error(
		    sqlstate::invalid_parameter_value,
		    format("invalid node id \"%.*s\"", static_cast<int>(std::min<std::size_t>(node.size(), 100)), node.data()),
		    sentence(problem + "."));
	if (amount == 0 || amount > max_total)
		throw Error(sqlstate::invalid_parameter_value, "the amount must be positive");
	Entry key = make_entry(node, 0, 0);
	auto it = std::lower_bound(state.begin(), state.end(), key, node_less);
	if (it == state.end() || it->node() != node) {
		if (state.size() + 1 > max_nodes)
			throw too_many_nodes(state.size() + 1);
		it = state.insert(it, key);
	}
	std::uint64_t &total = decrement ? it->n : it->p;
	if (total > max_total - amount)
		throw Error(sqlstate::numeric_value_out_of_range, format("%s total out of range", type_name),
		            format("The %s of node \"%.*s\" would exceed %llu.", decrement ? "decrements" : "increments",
		                   static_cast<int>(node.size()), node.data(), static_cast<unsigned long long>(max_total)));
	total += amount;
}

std::int64_t value(const Entry *entries, std::size_t count) {
	__int128 sum = 0; // at most 1024 * 2^63 in either direction: no overflow
	for (std::size_t i = 0; i < count; i++)
		sum += static_cast<__int128>(entries[i].p) - static_cast<__int128>(entries[i].n);
	if (sum > static_cast<__int128>(INT64_MAX) || sum < static_cast<__int128>(INT64_MIN))
		throw Error(sqlstate::numeric_value_out_of_range, format("%s value out of range", type_name),
		            "The sum of increments minus decrements does not fit in a bigint.");
	return static_cast<std::int64_t>(sum);
}

State merge(const Entry *a, std::size_t a_count, const Entry *b, std::size_t b_count) {
	State out;
	out.reserve(std::max(a_count, b_count));
	std::size_t i = 0, j = 0;
	while (i < a_count || j < b_count) {
		if (j == b_count || (i < a_count && a[i].node() < b[j].node())) {
			out.push_back(a[i++]);
		} else if (i == a_count || b[j].node() < a[i].node()) {
			out.push_back(b[j++]);
		} else {
			Entry e = a[i++];
			e.p = std::max(e.p, b[j].p);
			e.n = std::max(e.n, b[j].n);
			j++;
			out.push_back(e);
		}
		if (out.size() > max_nodes)
			throw too_many_nodes(out.size() + (a_count - i) + (b_count - j));
	}
	return out;
}

bool merge_in_place(Entry *dst, std::size_t dst_count, const Entry *src, std::size_t src_count) {
	// Both sorted: one pass finds every src node's place, a second applies.
	std::size_t i = 0;
	for (std::size_t j = 0; j < src_count; j++) {
		while (i < dst_count && dst[i].node() < src[j].node())
			i++;
		if (i == dst_count || dst[i].node() != src[j].node())
			return false;
	}
	i = 0;
	for (std::size_t j = 0; j < src_count; j++) {
		while (dst[i].node() != src[j].node())
			i++;
		dst[i].p = std::max(dst[i].p, src[j].p);
		dst[i].n = std::max(dst[i].n, src[j].n);
	}
	return true;
}

State parse_text(std::string_view text) {
	return TextParser(text).parse();
}

std::string to_text(const Entry *entries, std::size_t count) {
	std::string out = "{";
	for (std::size_t i = 0; i < count; i++) {
		if (i > 0)
			out += ',';
		out += '"';
		out.append(entries[i].id, entries[i].id_len);
		out += "\":[";
		out += std::to_string(entries[i].p);
		out += ',';
		out += std::to_string(entries[i].n);
		out += ']';
	}
	out += '}';
	return out;
}

std::size_t encoded_size(const Entry *entries, std::size_t count) {
	std::size_t n = 1 + varint_size(count);
	for (std::size_t i = 0; i < count; i++)
		n += 1 + entries[i].id_len + varint_size(entries[i].p) + varint_size(entries[i].n);
	return n;
}

void encode(const Entry *entries, std::size_t count, unsigned char *out) {
	*out++ = format_version;
	out = put_varint(out, count);
	for (std::size_t i = 0; i < count; i++) {
		*out++ = entries[i].id_len;
		std::memcpy(out, entries[i].id, entries[i].id_len);
		out += entries[i].id_len;
		out = put_varint(out, entries[i].p);
		out = put_varint(out, entries[i].n);
	}
}

State decode(const unsigned char *data, std::size_t len) {
	Reader r(data, len);
	if (len == 0)
		r.fail("the data is empty");
	unsigned char version = r.byte("version");
	if (version != format_version)
		r.fail(format("unknown format version %u (this library reads version %u)", version, format_version));
	std::uint64_t count = r.varint("node count");
	if (count > max_nodes)
		throw too_many_nodes(static_cast<std::size_t>(count));
	// Each node takes at least 4 bytes: no allocation larger than the input.
	if (count > len / 4)
		r.fail(format("%llu nodes cannot fit in %zu bytes", static_cast<unsigned long long>(count), len));
	State out;
	out.reserve(static_cast<std::size_t>(count));
	for (std::uint64_t i = 0; i < count; i++) {
		unsigned char id_len = r.byte("node id length");
		std::string_view node = r.bytes(id_len, "node id");
		std::string problem = node_id_problem(node);
		if (!problem.empty())
			r.fail("invalid node id: " + problem);
		std::uint64_t p = r.varint("increments total");
		std::uint64_t n = r.varint("decrements total");
		if (p > max_total || n > max_total)
			r.fail(format("a total of node \"%.*s\" exceeds %llu", static_cast<int>(node.size()), node.data(),
			              static_cast<unsigned long long>(max_total)));
		if (p == 0 && n == 0)
			r.fail(format("node \"%.*s\" has no increments and no decrements (not canonical)",
			              static_cast<int>(node.size()), node.data()));
		if (!out.empty() && !(out.back().node() < node))
			r.fail(out.back().node() == node
			           ? format("node \"%.*s\" appears more than once", static_cast<int>(node.size()), node.data())
			           : std::string("nodes are not sorted by id (not canonical)"));
		out.push_back(make_entry(node, p, n));
	}
	if (!r.at_end())
		r.fail("unexpected bytes after the last node");
	return out;
}

} // namespace ce::pncounter
