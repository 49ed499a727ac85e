// counter_ext's configuration parameters (GUCs), all under "counter_ext.".
// Each feature defines its own in a define_*_gucs() function that _PG_init
// calls before the prefix is reserved.
#pragma once

#include "counter_ext/pg.hpp"

namespace ce {

// True when the library was loaded by shared_preload_libraries.
extern bool loaded_at_startup;

// counter_ext.node_id: this server's name in merged counter states.
inline constexpr int max_node_id_bytes = 63;
extern char *node_id_setting;

} // namespace ce
