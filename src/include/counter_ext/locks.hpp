// The one registry of advisory-lock classes. Every advisory lock counter_ext
// takes is a two-int key (class, id): the class from this table, the id what
// the class says. SQL takes the class from counter_internal.lock_class(name)
// (counter_internal.lock_classes() lists them); doc/reference/worker.md has
// the same table. The values are those of 1.1 (a runner of the old version
// and one of the new must exclude each other during an update), so they are
// not all spelt the same way.
#pragma once

#include <cstdint>
#include <cstring>

namespace ce::locks {

struct LockClass {
	const char *name;
	int32_t key;
	const char *second_key; // what the id is
};

// 0x63650004 ('c' 'e' 0 4): one tracked counter's reconciliation.
inline constexpr int32_t tracked = 1667563524;
// 0x63653435 ('c' 'e' '4' '5'): maintenance of one partitioned table.
inline constexpr int32_t partition = 1667576885;
// 0x524f4c43 ('R' 'O' 'L' 'C'): a rollup's refresh of one UTC day.
inline constexpr int32_t rollup_day = 1380928579;
// 0x524f4c48 ('R' 'O' 'L' 'H'): a rollup's refresh of one UTC hour.
inline constexpr int32_t rollup_hour = 1380928584;
// 0x63656a62 ('c' 'e' 'j' 'b'): claiming one job.
inline constexpr int32_t job = 1667590754;
// 0x6365000f ('c' 'e' 0 15): a buffered counter's flush.
inline constexpr int32_t flush = 1667563535;

static_assert(tracked == 0x63650004 && partition == 0x63653435 && rollup_day == 0x524f4c43 &&
                  rollup_hour == 0x524f4c48 && job == 0x63656a62 && flush == 0x6365000f,
              "the classes are those of 1.1: never change one");

inline constexpr LockClass classes[] = {
    {"tracked", tracked, "counter_id"},
    {"partition", partition, "the parent table's oid as int4"},
    {"rollup_day", rollup_day, "counter.rollup_lock_key(rollup_id, UTC day number)"},
    {"rollup_hour", rollup_hour, "counter.rollup_lock_key(rollup_id, UTC hour number)"},
    {"job", job, "job_id modulo 2^31"},
    {"flush", flush, "counter_id (a buffered counter's flush)"},
};

// The class named 'name', or nullptr.
inline const LockClass *find(const char *name) {
	for (const LockClass &c : classes)
		if (std::strcmp(c.name, name) == 0)
			return &c;
	return nullptr;
}

} // namespace ce::locks
