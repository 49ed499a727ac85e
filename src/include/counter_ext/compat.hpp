// What differs between the PostgreSQL majors counter_ext builds against, in
// one place: the feature code calls ce::compat, never #if PG_VERSION_NUM.
// Supported: 15, 16, 17, 18 (16 builds but has no Debian suite to test in).
// doc/support.md says how to add the next major.
#pragma once

#include "counter_ext/pg.hpp"

#if PG_VERSION_NUM < 150000 || PG_VERSION_NUM >= 190000
#error "counter_ext supports PostgreSQL 15, 16, 17 and 18; this server's headers are another major (see doc/support.md)"
#endif

extern "C" {
#include "access/genam.h"
#include "nodes/nodeFuncs.h"
#include "storage/proc.h"
#include "tcop/pquery.h"
#include "utils/backend_status.h"
}

namespace ce::compat {

// The status entry of the index-th backend (1-based, 1 ..
// pgstat_fetch_stat_numbackends()), as pg_stat_activity walks them. 15 and 16
// call this lookup pgstat_fetch_stat_local_beentry; 17 renamed it. (16's
// pgstat_fetch_stat_beentry takes a backend id, not an index, and 17 removed
// it: the local entry is the one lookup by index on every major.)
inline PgBackendStatus *backend_status_by_index(int index) {
#if PG_VERSION_NUM >= 170000
	LocalPgBackendStatus *entry = pgstat_get_local_beentry_by_index(index);
#else
	LocalPgBackendStatus *entry = pgstat_fetch_stat_local_beentry(index);
#endif
	return entry != nullptr ? &entry->backendStatus : nullptr;
}

// PortalRun to completion, once. 18 dropped the run_once argument (a portal is
// always run once there).
inline bool portal_run(Portal portal, long count, bool top_level, DestReceiver *dest, DestReceiver *altdest,
                       QueryCompletion *qc) {
#if PG_VERSION_NUM >= 180000
	return PortalRun(portal, count, top_level, dest, altdest, qc);
#else
	return PortalRun(portal, count, top_level, true, dest, altdest, qc);
#endif
}

// This backend's slot among the server's processes: a small number no other
// live process has (0 .. MaxBackends + auxiliaries), so n sessions spread
// evenly over n or more shards. 17 named it MyProcNumber; before, it is the
// PGPROC's pgprocno.
inline int my_proc_number() {
#if PG_VERSION_NUM >= 170000
	return MyProcNumber;
#else
	return MyProc != nullptr ? MyProc->pgprocno : MyProcPid;
#endif
}

// index_beginscan. 18 added the instrumentation argument (EXPLAIN's count of
// index searches): none here.
inline IndexScanDesc index_begin(Relation heap, Relation index, Snapshot snapshot, int nkeys) {
#if PG_VERSION_NUM >= 180000
	return index_beginscan(heap, index, snapshot, nullptr, nkeys, 0);
#else
	return index_beginscan(heap, index, snapshot, nkeys, 0);
#endif
}

// A walker over a query tree or an expression (query_tree_walker,
// expression_tree_walker). 15 declares the walker argument unprototyped,
// bool (*)(); 16 made these macros over a typed callback. (void (*)() is
// the cast GCC lets through to any function type.)
using tree_walker = bool (*)(Node *, void *);
inline bool query_walk(Query *query, tree_walker walker, void *context, int flags) {
#if PG_VERSION_NUM >= 160000
	return query_tree_walker(query, walker, context, flags);
#else
	return query_tree_walker(query, reinterpret_cast<bool (*)()>(reinterpret_cast<void (*)()>(walker)), context, flags);
#endif
}
inline bool expression_walk(Node *node, tree_walker walker, void *context) {
#if PG_VERSION_NUM >= 160000
	return expression_tree_walker(node, walker, context);
#else
	return expression_tree_walker(node, reinterpret_cast<bool (*)()>(reinterpret_cast<void (*)()>(walker)), context);
#endif
}

} // namespace ce::compat
