#pragma once
// Small text helpers several parts need: trimming blanks and telling a run of decimal digits. One of each
// here, so every part trims the same way and reads the same text as a number.
#include <string_view>

namespace infrarsi {

// What trim removes unless told otherwise: space, tab, carriage return, newline.
inline constexpr std::string_view kBlanks = " \t\r\n";

// `s` without the leading (trim_left), trailing (trim_right) or both (trim) characters of `blanks`. A view
// into `s`: keep what it views alive.
std::string_view trim_left(std::string_view s, std::string_view blanks = kBlanks);
std::string_view trim_right(std::string_view s, std::string_view blanks = kBlanks);
std::string_view trim(std::string_view s, std::string_view blanks = kBlanks);

// True for one or more ASCII digits 0-9 and nothing else (no sign, no blank): the text of a job id, a file's
// number. Not a range check: parse_integer (util/number.hpp) reads the value.
bool all_digits(std::string_view s);

} // namespace infrarsi
