// The wall between C++ and PostgreSQL, in both directions.
//
// Out of PostgreSQL into C++: every function PostgreSQL calls (SQL functions,
// hooks, callbacks, the worker's main) runs inside ce::boundary, usually
// through CE_FUNCTION. No C++ exception leaves it: each one is turned into an
// ereport(ERROR) with a SQLSTATE, raised after every catch block has ended and
// every C++ object of the call has been destroyed.
//
// Out of C++ into PostgreSQL: a PostgreSQL call that may ereport(ERROR), made
// from a scope that owns C++ objects with destructors, runs inside
// ce::pg_guard. The guard catches the longjmp right there and rethrows it as
// ce::PgError, so the C++ objects between the guard and the boundary are
// destroyed normally; the boundary re-raises the original error unchanged.
//
// The rule that makes both work: a lambda given to pg_guard owns nothing (only
// PostgreSQL calls and trivially destructible values), because a longjmp out
// of it skips its frame. A function that owns nothing may call PostgreSQL
// directly.
#pragma once

#include "counter_ext/pg.hpp"
#include "counter_ext/error.hpp"

#include <csetjmp>
#include <exception>
#include <new>
#include <type_traits>

namespace ce {

// A PostgreSQL error caught by pg_guard. The ErrorData is palloc'd in the
// memory context that was current when the guard was entered.
class PgError : public std::exception {
public:
	explicit PgError(ErrorData *data) noexcept : data_(data) {}
	const char *what() const noexcept override;
	ErrorData *data() const noexcept { return data_; }
	int sqlerrcode() const noexcept { return data_->sqlerrcode; }

private:
	ErrorData *data_;
};

namespace detail {

// What a boundary caught, in plain storage so that raising it skips nothing.
struct Caught {
	ErrorData *pg_error;
	int sqlerrcode;
	char message[1024];
	char detail[1024];
	char hint[256];

	void set(int code, const char *message, const char *detail, const char *hint) noexcept;
	void set(const std::exception_ptr &what) noexcept;
	[[noreturn]] void raise() const;
};

// The one Caught of the backend. A boundary fills it only after its call has
// ended and raises it at once, so nested boundaries never overlap on it; it
// lives outside the stack to keep the entry point cheap.
extern Caught caught;

// Copies the error PostgreSQL is handling into 'context' and flushes it.
ErrorData *take_error(MemoryContext context);

} // namespace detail

// Runs f(); if it throws, raises the exception as a PostgreSQL ERROR once the
// C++ frames are gone. Use for every entry point PostgreSQL calls.
template <typename F>
auto boundary(F &&f) noexcept -> decltype(f()) {
	try {
		return f();
	} catch (...) {
		detail::caught.set(std::current_exception());
	}
	detail::caught.raise();
}

// entry<f>: a hook or callback PostgreSQL calls from C (shmem hooks,
// transaction callbacks, ProcessUtility, object access), that runs the C++
// function f with its arguments inside the boundary. Register ce::entry<f>
// itself: shmem_startup_hook = ce::entry<shmem_startup>;
template <auto Body>
struct entry_of;

template <typename R, typename... Args, R (*Body)(Args...)>
struct entry_of<Body> {
	static R call(Args... args) noexcept {
		return boundary([&]() -> R { return Body(args...); });
	}
};

template <auto Body>
constexpr auto entry = &entry_of<Body>::call;

// Runs f(), a lambda that calls PostgreSQL and owns nothing; a PostgreSQL
// ERROR raised inside it comes out as a ce::PgError exception.
template <typename F>
auto pg_guard(F &&f) -> decltype(f()) {
	MemoryContext context = CurrentMemoryContext;
	sigjmp_buf *saved_stack = PG_exception_stack;
	ErrorContextCallback *saved_context_stack = error_context_stack;
	sigjmp_buf local;

	if (sigsetjmp(local, 0) == 0) {
		PG_exception_stack = &local;
		if constexpr (std::is_void_v<decltype(f())>) {
			f();
			PG_exception_stack = saved_stack;
			error_context_stack = saved_context_stack;
			return;
		} else {
			static_assert(std::is_trivially_destructible_v<decltype(f())>, "pg_guard lambdas return plain values");
			decltype(f()) result = f();
			PG_exception_stack = saved_stack;
			error_context_stack = saved_context_stack;
			return result;
		}
	}
	PG_exception_stack = saved_stack;
	error_context_stack = saved_context_stack;
	throw PgError(detail::take_error(context));
}

// CHECK_FOR_INTERRUPTS for C++ loops: almost free when nothing is pending;
// a cancel or statement_timeout comes out as a ce::PgError.
inline void check_for_interrupts() {
	if (unlikely(InterruptPending))
		pg_guard([] { CHECK_FOR_INTERRUPTS(); });
}

// Throws ce::Error unless the argument is non-NULL (for non-STRICT functions).
void require_arg(FunctionCallInfo fcinfo, int argno, const char *what);

// The memory context for a new expanded-object transition state (aggregates
// whose state is a real type changed in place: hll.cpp, pncounter.cpp). One
// child of the aggregate context holds every such state of that context:
// PostgreSQL and Citus adopt an expanded state only when its context is a
// child of the aggregate context, and a child per group would make hash
// aggregation's memory accounting (which walks the children) quadratic. The
// states go with the aggregate context, never one by one. Throws 0A000
// outside an aggregate.
MemoryContext aggregate_state_context(FunctionCallInfo fcinfo, const char *function);

} // namespace ce

// Defines the SQL-callable C function 'name'. The body is C++ and runs inside
// ce::boundary:
//
//     CE_FUNCTION(counter_version) {
//         return CStringGetTextDatum("1.0");
//     }
#define CE_FUNCTION(name)                                                                                              \
	static Datum name##_cpp(FunctionCallInfo fcinfo);                                                                  \
	extern "C" {                                                                                                       \
	PG_FUNCTION_INFO_V1(name);                                                                                         \
	}                                                                                                                  \
	extern "C" Datum name(PG_FUNCTION_ARGS) {                                                                          \
		return ::ce::boundary([fcinfo]() -> Datum { return name##_cpp(fcinfo); });                                     \
	}                                                                                                                  \
	static Datum name##_cpp(FunctionCallInfo fcinfo)
