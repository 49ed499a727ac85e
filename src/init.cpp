// Library entry: _PG_init and the functions that describe the build.
#include "counter_ext/wall.hpp"
#include "counter_ext/buffer.hpp"
#include "counter_ext/citus.hpp"
#include "counter_ext/guc.hpp"
#include "counter_ext/hll.hpp"
#include "counter_ext/owner.hpp"
#include "counter_ext/read_cache.hpp"
#include "counter_ext/rollup_buffer.hpp"
#include "counter_ext/worker.hpp"

extern "C" {
#include "utils/guc.h"
}

#ifndef COUNTER_EXT_VERSION
#error "COUNTER_EXT_VERSION must be defined by the build"
#endif

extern "C" {
PG_MODULE_MAGIC;
void _PG_init(void);
}

namespace ce {
bool loaded_at_startup = false;
char *node_id_setting = nullptr;
} // namespace ce

// A node id names this server in merged counter states: 1 to 63 bytes of
// letters, digits, '_', '-' and '.', or empty for "not set".
static bool check_node_id(char **newval, void **, GucSource) {
	const char *s = *newval;
	size_t n = s != nullptr ? strlen(s) : 0;
	if (n > ce::max_node_id_bytes) {
		GUC_check_errdetail("counter_ext.node_id is at most %d bytes.", ce::max_node_id_bytes);
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
		          c == '.';
		if (!ok) {
			GUC_check_errdetail("counter_ext.node_id may hold only letters, digits, '_', '-' and '.'.");
			return false;
		}
	}
	return true;
}

static void define_core_gucs() {
	DefineCustomStringVariable("counter_ext.node_id", "Names this server in merged counter states (pncounter).",
	                           "Each primary that merges counter states needs its own id. Empty means not set.",
	                           &ce::node_id_setting, "", PGC_SUSET, 0, check_node_id, nullptr, nullptr);
}

static void init_cpp() {
	ce::loaded_at_startup = process_shared_preload_libraries_in_progress;
	define_core_gucs();
	ce::define_owner_gucs();
	ce::init_hll();
	ce::init_worker();
	ce::buffer::init();
	ce::read_cache::init();
	ce::rollup_buffer::init();
	if (process_shared_preload_libraries_in_progress)
		ce::install_older_sql_hook();
	ce::install_citus_hook();
	MarkGUCPrefixReserved("counter_ext");
}

extern "C" void _PG_init(void) {
	ce::boundary(init_cpp);
}

// counter.version(): the version of the loaded library.
CE_FUNCTION(counter_version) {
	(void)fcinfo;
	return CStringGetTextDatum(COUNTER_EXT_VERSION);
}

// counter.preloaded(): whether shared_preload_libraries loaded the library,
// which the background worker and shared memory need.
CE_FUNCTION(counter_preloaded) {
	(void)fcinfo;
	return BoolGetDatum(ce::loaded_at_startup);
}
