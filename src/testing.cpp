// Entry points that prove the C++/PostgreSQL wall works. The extension script
// does not create SQL functions for them; the test suite creates them in its
// own schema (counter_test) with CREATE FUNCTION ... AS 'MODULE_PATHNAME'.
#include "counter_ext/wall.hpp"

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// Destructors of Probe objects that ran since the last reset.
int probes_destroyed = 0;

struct Probe {
	std::string payload = std::string(64, 'x'); // owns heap memory, like real code
	~Probe() { probes_destroyed++; }
};

const char *text_arg(FunctionCallInfo fcinfo, int argno) {
	return text_to_cstring(PG_GETARG_TEXT_PP(argno));
}

} // namespace

// counter_test.throw_cpp(kind text): throws a C++ exception of the given kind.
CE_FUNCTION(counter_test_throw_cpp) {
	std::string kind = text_arg(fcinfo, 0);
	if (kind == "error")
		throw ce::Error(ce::sqlstate::invalid_parameter_value, "a ce::Error thrown from C++", "detail text",
		                "hint text");
	if (kind == "bad_alloc")
		throw std::bad_alloc();
	if (kind == "std")
		throw std::runtime_error("a std::runtime_error thrown from C++");
	if (kind == "unknown")
		throw 42;
	if (kind == "none")
		return Int32GetDatum(0);
	throw ce::Error(ce::sqlstate::invalid_parameter_value, ce::format("unknown kind \"%s\"", kind.c_str()),
	                "kind is one of error, bad_alloc, std, unknown, none.");
}

// counter_test.raise_in_guard(sqlstate text, probes int): creates 'probes'
// objects with destructors, then raises a PostgreSQL ERROR with the given
// SQLSTATE from inside pg_guard.
CE_FUNCTION(counter_test_raise_in_guard) {
	const char *state = text_arg(fcinfo, 0);
	int probes = PG_GETARG_INT32(1);
	if (strlen(state) != 5)
		throw ce::Error(ce::sqlstate::invalid_parameter_value, "sqlstate must be 5 characters");
	if (probes < 0 || probes > 1000)
		throw ce::Error(ce::sqlstate::invalid_parameter_value, "probes must be between 0 and 1000");
	int code = MAKE_SQLSTATE(state[0], state[1], state[2], state[3], state[4]);

	std::vector<Probe> owned(static_cast<size_t>(probes));
	Probe last;
	(void)last;
	// The vector's elements and 'last' are destroyed when the guard's
	// exception unwinds this frame; 'probes + 1' destructors in all.
	ce::pg_guard([code] { ereport(ERROR, (errcode(code), errmsg("raised inside a guarded C++ scope"))); });
	return Int32GetDatum(0);
}

// counter_test.probes_destroyed(reset boolean): the count, then reset it.
CE_FUNCTION(counter_test_probes_destroyed) {
	int n = probes_destroyed;
	if (PG_GETARG_BOOL(0))
		probes_destroyed = 0;
	return Int32GetDatum(n);
}

// counter_test.spin(seconds float8): a busy C++ loop over "data" that only
// stops early through check_for_interrupts (cancel, statement_timeout).
CE_FUNCTION(counter_test_spin) {
	double seconds = PG_GETARG_FLOAT8(0);
	std::vector<uint64_t> data(4096, 1);
	auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
	uint64_t sum = 0;
	while (std::chrono::steady_clock::now() < until) {
		for (uint64_t v : data)
			sum += v;
		ce::check_for_interrupts();
	}
	return Int64GetDatum(static_cast<int64>(sum));
}
