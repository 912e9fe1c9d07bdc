#include "util/text.hpp"

namespace infrarsi {

std::string_view trim_left(std::string_view s, std::string_view blanks) {
    const auto b = s.find_first_not_of(blanks);
    return b == std::string_view::npos ? std::string_view{} : s.substr(b);
}

std::string_view trim_right(std::string_view s, std::string_view blanks) {
    const auto e = s.find_last_not_of(blanks);
    return e == std::string_view::npos ? std::string_view{} : s.substr(0, e + 1);
}

std::string_view trim(std::string_view s, std::string_view blanks) {
    return trim_right(trim_left(s, blanks), blanks);
}

bool all_digits(std::string_view s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
}

} // namespace infrarsi
