#pragma once
// A word for a POSIX shell: single-quoted, so nothing in it is expanded ($(...), `...`, $VAR, globs) and
// spaces do not split it; a single quote inside is written '\''.
#include <string>
#include <string_view>

namespace infrarsi {

inline std::string shell_quote(std::string_view s) {
    std::string out = "'";
    for (char c : s) {
        if (c == '\'')
            out += "'\\''";
        else
            out += c;
    }
    return out + "'";
}

} // namespace infrarsi
