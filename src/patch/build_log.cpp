#include "patch/build_log.hpp"

#include <regex>
#include <sstream>
#include <vector>

namespace infrarsi::patch {

namespace {

std::vector<std::string> lines_of(const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string line; std::getline(in, line);) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        out.push_back(line);
    }
    return out;
}

bool compiler_error(const std::string& line) {
    static const std::regex re(
        R"((^|:\d+(:\d+)?: |^[^ :]+: )(fatal )?error(\[[A-Z]?\d+\])?: |: undefined reference to )",
        std::regex::ECMAScript | std::regex::optimize);
    return std::regex_search(line, re);
}

// make's recursion lines (`make[2]: *** [Makefile:12: x.o] Error 1`): what failed is above them.
bool make_recursion(const std::string& line) {
    static const std::regex re(R"(^g?make(\[\d+\])?: \*\*\* .*\] Error \d+)", std::regex::optimize);
    return std::regex_search(line, re);
}

bool make_complaint(const std::string& line) {
    static const std::regex re(R"(^g?make(\[\d+\])?: \*\*\* )", std::regex::optimize);
    return std::regex_search(line, re) && !make_recursion(line);
}

// GCC's and Clang's context under an error: the source line (` 12 |   code`, or indented code) and the caret
// line (`   |   ^~~`).
bool context(const std::string& line) {
    return !line.empty() && (line[0] == ' ' || line[0] == '\t') &&
           line.find_first_not_of(" \t") != std::string::npos;
}

} // namespace

std::optional<std::string> first_build_error(const std::string& log) {
    const auto lines = lines_of(log);
    for (std::size_t i = 0; i < lines.size(); ++i) {
        if (!compiler_error(lines[i])) continue;
        std::string out = lines[i];
        for (std::size_t j = i + 1; j < lines.size() && j <= i + 2 && context(lines[j]); ++j)
            out += "\n" + lines[j];
        return out;
    }
    for (const auto& line : lines)
        if (make_complaint(line)) return line;
    return std::nullopt;
}

} // namespace infrarsi::patch
