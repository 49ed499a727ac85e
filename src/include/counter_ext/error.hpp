// Errors raised by counter_ext's C++ code.
//
// This header is pure C++: files that never see PostgreSQL headers throw
// ce::Error with a SQLSTATE, and the wall (wall.hpp) turns it into an
// ereport with that SQLSTATE once the C++ frames have unwound.
#pragma once

#include <cstdarg>
#include <stdexcept>
#include <string>

namespace ce {

// The SQLSTATEs our C++ code raises, spelled as PostgreSQL spells them.
namespace sqlstate {
inline constexpr char invalid_parameter_value[] = "22023";
inline constexpr char invalid_text_representation[] = "22P02";
inline constexpr char invalid_binary_representation[] = "22P03";
inline constexpr char numeric_value_out_of_range[] = "22003";
inline constexpr char null_value_not_allowed[] = "22004";
inline constexpr char datatype_mismatch[] = "42804";
inline constexpr char undefined_object[] = "42704";
inline constexpr char undefined_table[] = "42P01";
inline constexpr char object_not_in_prerequisite_state[] = "55000";
inline constexpr char feature_not_supported[] = "0A000";
inline constexpr char program_limit_exceeded[] = "54000";
inline constexpr char out_of_memory[] = "53200";
inline constexpr char insufficient_privilege[] = "42501";
inline constexpr char internal_error[] = "XX000";
} // namespace sqlstate

class Error : public std::runtime_error {
public:
	Error(const char *sqlstate, const std::string &message, std::string detail = {}, std::string hint = {});

	const char *sqlstate() const noexcept { return state_; }
	const std::string &detail() const noexcept { return detail_; }
	const std::string &hint() const noexcept { return hint_; }

private:
	char state_[6];
	std::string detail_;
	std::string hint_;
};

// printf-style formatting into a std::string, for building messages.
std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string vformat(const char *fmt, va_list args) __attribute__((format(printf, 1, 0)));

} // namespace ce
