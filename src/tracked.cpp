// Tracked counters (src/sql/30_tracked.sql): the two checks counter.track
// needs that SQL cannot make.
//
// counter.track runs as the extension's owner (SECURITY DEFINER) because it
// creates objects in schema counter; inside it current_user is that owner, so
// the role that called it comes from GetOuterUserId() (the session's role
// after SET ROLE, unchanged by SECURITY DEFINER functions).
//
// The filter is SQL text the caller writes; it is pasted into the functions
// that track generates (owned by the source table's owner, so it never runs
// with more rights than that owner has). It must be one boolean expression,
// nothing that could close the expression and add clauses or statements.
#include "counter_ext/wall.hpp"

extern "C" {
#include "nodes/parsenodes.h"
#include "parser/parser.h"
}

#include <string>

// counter.tracked_caller(): the role that called the outermost function.
CE_FUNCTION(counter_tracked_caller) {
	(void)fcinfo;
	return ObjectIdGetDatum(GetOuterUserId());
}

namespace {

// True when 'stmt' is exactly "SELECT 1 WHERE (<expression>)".
bool is_plain_where(const SelectStmt *s) {
	return s->op == SETOP_NONE && s->distinctClause == NIL && s->intoClause == nullptr &&
	       list_length(s->targetList) == 1 && s->fromClause == NIL && s->whereClause != nullptr &&
	       s->groupClause == NIL && s->havingClause == nullptr && s->windowClause == NIL && s->valuesLists == NIL &&
	       s->sortClause == NIL && s->limitOffset == nullptr && s->limitCount == nullptr && s->lockingClause == NIL &&
	       s->withClause == nullptr;
}

} // namespace

// counter.tracked_check_filter(filter text): raises 42601 unless the text is
// one SQL expression. Column references and types are checked later, by
// running the generated query as the source table's owner.
CE_FUNCTION(counter_tracked_check_filter) {
	const char *filter = text_to_cstring(PG_GETARG_TEXT_PP(0));
	std::string query = std::string("SELECT 1 WHERE (") + filter + "\n)";
	List *parsed = nullptr;
	try {
		parsed = ce::pg_guard([&query] { return raw_parser(query.c_str(), RAW_PARSE_DEFAULT); });
	} catch (const ce::PgError &e) {
		// The parser's cursor points into our wrapper query, not the caller's.
		throw ce::Error("42601", ce::format("filter does not parse: %s", e.what()),
		                ce::format("The filter was: %s", filter));
	}
	bool ok = list_length(parsed) == 1;
	if (ok) {
		Node *stmt = linitial_node(RawStmt, parsed)->stmt;
		ok = IsA(stmt, SelectStmt) && is_plain_where(castNode(SelectStmt, stmt));
	}
	if (!ok)
		throw ce::Error("42601", "filter must be one boolean expression", ce::format("The filter was: %s", filter),
		                "Write a condition on the source table's columns, such as: deleted_at IS NULL");
	return (Datum)0;
}
