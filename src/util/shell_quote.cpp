#include "util/shell_quote.hpp"

#include <algorithm>
#include <string_view>

namespace infrarsi {

std::string shell_quote(const std::string& word) {
    const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               std::string_view("_-.,/:=+@%").find(c) != std::string_view::npos;
    });
    if (plain) return word;
    std::string out = "'";
    for (char c : word)
        out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::string shell_join(const std::vector<std::string>& words) {
    std::string out;
    for (const auto& w : words)
        out += (out.empty() ? "" : " ") + shell_quote(w);
    return out;
}

} // namespace infrarsi
