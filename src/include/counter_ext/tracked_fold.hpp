// The fold of a statement's transition table into one delta per (key,
// bucket): pure C++ (src/tracked_fold.cpp), keyed with Boost.Hash. Keys are
// compared by their binary image: a by-value datum, or the bytes of a
// by-reference one. Two equal keys with different images (numeric 1.0 and
// 1.00) make two entries, which only costs one more write of the same row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ce::tracked {

struct FoldKey {
	std::uint64_t datum; // the datum itself: the value, or a pointer to the bytes
	const char *bytes;   // by-reference keys: the image compared and hashed
	std::size_t len;
	bool byval;
};

struct FoldEntry {
	FoldKey key;
	std::int64_t bucket;
	std::int64_t delta;
};

class Fold {
public:
	Fold();
	~Fold();
	Fold(const Fold &) = delete;
	Fold &operator=(const Fold &) = delete;

	void add(const FoldKey &key, std::int64_t bucket, std::int64_t delta);
	std::size_t size() const;
	// The entries whose deltas do not sum to 0, in no particular order.
	std::vector<FoldEntry> nonzero() const;

private:
	struct Impl;
	std::unique_ptr<Impl> impl_;
};

} // namespace ce::tracked
