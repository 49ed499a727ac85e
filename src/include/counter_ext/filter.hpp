// The one filter compiler, for tracked counters and rollups.
//
// A filter is a boolean expression over the columns of a source table,
// written by the object's owner at registration. It is parsed and resolved
// once, as the owner, with search_path pinned to pg_catalog, pg_temp (so a
// function or operator outside pg_catalog is named with its schema), and
// stored twice in the object's catalog row:
//   filter        the canonical text: the resolved tree printed back with every
//                 name qualified as needed (what pg_get_expr shows; what a dump
//                 carries);
//   filter_tree   the tree itself ("CE1 <system identifier> " and nodeToString),
//                 with filter_relid, the source table's oid it was resolved
//                 against.
// Evaluation uses the stored tree. Only when filter_relid is not the source
// table's oid any more (a dump restored into another database), or the tree
// was made in another cluster (pg_upgrade keeps the oids of tables, not of
// the functions and operators a tree names), is the canonical text resolved
// again, the same way, as the owner. The owner's
// text is never pasted into SQL. SQL that needs the filter either calls
// counter_internal.filter_match(kind, id, row), which evaluates the stored
// tree against a row of the source table (rollups), or carries the stored
// tree printed back as an expression by counter_internal.filter_sql (a
// tracked counter's batch function: deparsed once when that function is
// made, under search_path pg_catalog, pg_temp, so every name outside
// pg_catalog is schema-qualified; Citus pushes it down to the shards, where
// no catalog of counter_ext is).
#pragma once

#include "counter_ext/pg.hpp"

extern "C" {
#include "nodes/execnodes.h"
#include "utils/rel.h"
}

namespace ce::filter {

// Parses and resolves 'text' against 'rel' as the current user, under the
// current search_path; raises 42601 unless it is one boolean expression
// without subqueries. Owns nothing C++.
Node *compile(Relation rel, const char *text);

// The stored filter's tree for 'rel': 'tree' when 'tree_relid' is rel's oid
// and it was made in this cluster (each column it refers to is checked to
// still be there with its type), else the canonical text compiled again. Owns nothing C++.
Node *resolve(Relation rel, const char *tree, Oid tree_relid, const char *canonical);

// The ExprState to evaluate a stored filter against rows of 'rel' (scan
// tuple), in CurrentMemoryContext: from 'tree' when 'tree_relid' is rel's oid
// (each column it refers to is checked to still be there with its type), else
// from the canonical text. Run as the object's owner. Owns nothing C++.
ExprState *prepare(Relation rel, const char *tree, Oid tree_relid, const char *canonical);

} // namespace ce::filter
