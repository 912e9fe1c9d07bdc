#pragma once
// A string from a job, a user or a file that we pass on or record: no control characters (newline, tab, ESC,
// NUL, DEL), so it cannot split a record line or carry a terminal escape.
#include <string_view>

namespace infrarsi {

inline bool printable(std::string_view s) {
    for (unsigned char c : s)
        if (c < 0x20 || c == 0x7f) return false;
    return true;
}

} // namespace infrarsi
