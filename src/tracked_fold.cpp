// Pure C++: the per-statement fold of tracked counters (tracked_fold.hpp).
#include "counter_ext/cpp_only.hpp"
#include "counter_ext/tracked_fold.hpp"

#include <boost/container_hash/hash.hpp>

#include <cstring>
#include <unordered_map>

namespace ce::tracked {

namespace {

struct Slot {
	FoldKey key;
	std::int64_t bucket;
};

struct SlotHash {
	std::size_t operator()(const Slot &s) const noexcept {
		std::size_t seed =
		    s.key.byval ? boost::hash_value(s.key.datum) : boost::hash_range(s.key.bytes, s.key.bytes + s.key.len);
		boost::hash_combine(seed, s.bucket);
		return seed;
	}
};

struct SlotEqual {
	bool operator()(const Slot &a, const Slot &b) const noexcept {
		if (a.bucket != b.bucket || a.key.byval != b.key.byval)
			return false;
		if (a.key.byval)
			return a.key.datum == b.key.datum;
		return a.key.len == b.key.len && std::memcmp(a.key.bytes, b.key.bytes, a.key.len) == 0;
	}
};

} // namespace

struct Fold::Impl {
	std::unordered_map<Slot, std::int64_t, SlotHash, SlotEqual> sums;
};

Fold::Fold() : impl_(std::make_unique<Impl>()) {}
Fold::~Fold() = default;

void Fold::add(const FoldKey &key, std::int64_t bucket, std::int64_t delta) {
	impl_->sums[Slot{key, bucket}] += delta;
}

std::size_t Fold::size() const {
	return impl_->sums.size();
}

std::vector<FoldEntry> Fold::nonzero() const {
	std::vector<FoldEntry> out;
	out.reserve(impl_->sums.size());
	for (const auto &[slot, delta] : impl_->sums)
		if (delta != 0)
			out.push_back(FoldEntry{slot.key, slot.bucket, delta});
	return out;
}

} // namespace ce::tracked
