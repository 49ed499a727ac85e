// counter.hll, the PostgreSQL side (src/hll.cpp): the GUC and its set-up.
#pragma once

namespace ce {

// counter_ext.hll_default_precision: the precision of sketches made without
// an explicit one. A real GUC, so parallel workers see the session's value.
extern int hll_default_precision;

// Defines the hll GUCs; _PG_init calls it before reserving the prefix.
void init_hll();

} // namespace ce
