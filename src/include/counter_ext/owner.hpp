// Running work as the owner of the object it serves: the one mechanism.
//
// Everything counter_ext does for an object (a counter's deltas, a
// reconciliation, a rollup's refresh, a partition drain) runs as the role
// that owns the object, in a security-restricted operation, with a new GUC
// nest level and search_path pinned to pg_catalog, pg_temp: PostgreSQL's
// own pattern for REFRESH MATERIALIZED VIEW, CREATE INDEX and autovacuum
// (matview.c ExecRefreshMatView). Inside, SET ROLE, RESET ROLE, SET SESSION
// AUTHORIZATION and temporary objects are refused, so code the owner
// controls (a filter's function, a trigger on a state table, a CHECK
// constraint) cannot leave the owner's rights, whoever the session user is.
//
// C++ code uses ce::as_owner; SQL code uses counter_internal.exec_as_owner
// (src/owner.cpp), which is a thin SQL face of the same functions.
// doc/security.md says which role runs what.
#pragma once

#include "counter_ext/wall.hpp"

#include <type_traits>

namespace ce {

// What owner_enter changed, for owner_leave to restore.
struct OwnerSwitch {
	Oid saved_user;
	int saved_context;
	int guc_level;
};

// Becomes 'role' (restricted, new GUC level, pinned search_path). Owns
// nothing C++: may be called inside pg_guard, or from code that owns
// nothing. If an ERROR ends the (sub)transaction before owner_leave, the
// abort restores the user, the security context and the GUC level.
OwnerSwitch owner_enter(Oid role);

// Undoes owner_enter (GUC level first, then the user).
void owner_leave(const OwnerSwitch &s) noexcept;

// Runs f(), a lambda that calls PostgreSQL and owns nothing (as for
// pg_guard), as 'role'. A PostgreSQL ERROR inside comes out as ce::PgError
// with the caller's user, context and GUC level already restored.
template <typename F>
auto as_owner(Oid role, F &&f) -> decltype(f()) {
	OwnerSwitch s = pg_guard([role] { return owner_enter(role); });
	try {
		if constexpr (std::is_void_v<decltype(f())>) {
			pg_guard(f);
			owner_leave(s);
			return;
		} else {
			auto result = pg_guard(f);
			owner_leave(s);
			return result;
		}
	} catch (...) {
		owner_leave(s);
		throw;
	}
}

// The role the entry point being run acts for: the role in effect when it
// was called (GetUserId() at the entry of counter_entry, src/owner.cpp,
// which runs the SECURITY DEFINER implementation in counter_internal). An
// entry point called by another's implementation acts for the same caller.
// Raises 42501 inside a security-restricted operation (code counter_ext
// runs for an owner). Outside an entry point (only SQL objects older than
// the library call it so) see install_older_sql_hook. Owns nothing C++.
Oid effective_caller();

// The role an entry point called now acts for: GetUserId(), or, when an
// entry point's implementation (running as the catalog's owner) calls
// another entry point, the caller noted for the outer one. Raises 42501
// inside a security-restricted operation. Owns nothing C++.
Oid entry_caller();

// Notes 'caller' as the role the entry points and step functions called in
// its scope act for (counter_entry, and the commit loop of src/spine.cpp,
// which calls step functions through fmgr).
class CallerScope {
public:
	explicit CallerScope(Oid caller) noexcept;
	~CallerScope();
	CallerScope(const CallerScope &) = delete;
	CallerScope &operator=(const CallerScope &) = delete;
};

// From _PG_init when preloaded: the caller of an older SQL object's entry
// point is then found as 1.4 found it (src/owner.cpp); otherwise such a call
// is refused (55000, with a hint to ALTER EXTENSION counter_ext UPDATE).
void install_older_sql_hook();

// The owner of counter_ext's catalog tables (the role that ran CREATE
// EXTENSION). Reading the catalogs as that role (restricted, like any other
// owner) is how C code finds a registration without giving the caller any
// right on the catalogs. Owns nothing C++.
Oid catalog_owner();

// Defines counter_ext.view_lock_timeout (src/owner.cpp, exec_as_owner_listed).
void define_owner_gucs();

} // namespace ce
