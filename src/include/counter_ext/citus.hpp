// Citus (doc/citus.md): the hook that refuses create_distributed_table and
// create_reference_table of a table whose counter_ext configuration does not
// work on Citus (src/citus.cpp).
#pragma once

namespace ce {

// Installs the object access hook; _PG_init calls it.
void install_citus_hook();

} // namespace ce
