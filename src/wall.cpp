// The wall between C++ and PostgreSQL: how a caught exception becomes an
// ereport. See wall.hpp for the rules.
#include "counter_ext/wall.hpp"

#include <cstdio>
#include <cstring>

namespace ce {

Error::Error(const char *sqlstate, const std::string &message, std::string detail, std::string hint)
    : std::runtime_error(message), detail_(std::move(detail)), hint_(std::move(hint)) {
	if (sqlstate == nullptr || std::strlen(sqlstate) != 5)
		sqlstate = sqlstate::internal_error;
	std::memcpy(state_, sqlstate, 6);
}

std::string vformat(const char *fmt, va_list args) {
	va_list copy;
	va_copy(copy, args);
	int n = std::vsnprintf(nullptr, 0, fmt, copy);
	va_end(copy);
	if (n < 0)
		return fmt;
	std::string out(static_cast<size_t>(n), '\0');
	std::vsnprintf(out.data(), out.size() + 1, fmt, args);
	return out;
}

std::string format(const char *fmt, ...) {
	va_list args;
	va_start(args, fmt);
	std::string out = vformat(fmt, args);
	va_end(args);
	return out;
}

const char *PgError::what() const noexcept {
	return data_ != nullptr && data_->message != nullptr ? data_->message : "PostgreSQL error";
}

void require_arg(FunctionCallInfo fcinfo, int argno, const char *what) {
	if (PG_ARGISNULL(argno))
		throw Error(sqlstate::null_value_not_allowed, format("%s must not be NULL", what));
}

namespace {
const char aggregate_states_name[] = "counter_ext aggregate states";
}

MemoryContext aggregate_state_context(FunctionCallInfo fcinfo, const char *function) {
	MemoryContext agg = nullptr;
	if (!AggCheckCallContext(fcinfo, &agg))
		throw Error(sqlstate::feature_not_supported, format("%s called in a non-aggregate context", function),
		            "It is a support function of an aggregate.", "Call the aggregate instead.");
	for (MemoryContext c = agg->firstchild; c != nullptr; c = c->nextchild)
		if (c->name == aggregate_states_name)
			return c;
	return pg_guard(
	    [agg] { return AllocSetContextCreateInternal(agg, aggregate_states_name, ALLOCSET_DEFAULT_SIZES); });
}

namespace detail {

Caught caught;

static void copy_text(char *to, size_t size, const char *from) noexcept {
	std::snprintf(to, size, "%s", from != nullptr ? from : "");
}

void Caught::set(int code, const char *message_text, const char *detail_text, const char *hint_text) noexcept {
	sqlerrcode = code;
	copy_text(message, sizeof message, message_text);
	copy_text(detail, sizeof detail, detail_text);
	copy_text(hint, sizeof hint, hint_text);
}

void Caught::set(const std::exception_ptr &what) noexcept {
	pg_error = nullptr;
	try {
		std::rethrow_exception(what);
	} catch (const PgError &e) {
		pg_error = e.data();
	} catch (const Error &e) {
		const char *s = e.sqlstate();
		set(MAKE_SQLSTATE(s[0], s[1], s[2], s[3], s[4]), e.what(), e.detail().c_str(), e.hint().c_str());
	} catch (const std::bad_alloc &) {
		set(ERRCODE_OUT_OF_MEMORY, "out of memory in counter_ext", nullptr, nullptr);
	} catch (const std::exception &e) {
		set(ERRCODE_INTERNAL_ERROR, "counter_ext internal error", e.what(), nullptr);
	} catch (...) {
		set(ERRCODE_INTERNAL_ERROR, "counter_ext internal error", "an unknown C++ exception was thrown", nullptr);
	}
}

void Caught::raise() const {
	if (pg_error != nullptr)
		ReThrowError(pg_error);
	ereport(ERROR,
	        (errcode(sqlerrcode), errmsg_internal("%s", message),
	         detail[0] != '\0' ? errdetail_internal("%s", detail) : 0, hint[0] != '\0' ? errhint("%s", hint) : 0));
	pg_unreachable();
}

ErrorData *take_error(MemoryContext context) {
	MemoryContextSwitchTo(context);
	ErrorData *data = CopyErrorData();
	FlushErrorState();
	return data;
}

} // namespace detail
} // namespace ce
