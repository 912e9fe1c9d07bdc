#include "util/toml_limits.hpp"

#include "util/error.hpp"

namespace infrarsi {

void check_toml_limits(std::string_view text, const std::string& where, TomlLimits limits) {
    if (text.size() > limits.max_bytes)
        throw Error("is " + std::to_string(text.size()) + " bytes", where,
                    "a TOML file of at most " + std::to_string(limits.max_bytes) + " bytes");
    std::size_t line = 1, parts = 1, nesting = 0;
    const auto at = [&] { return where + ":" + std::to_string(line); };
    // Skips a string that starts at text[i] (its opening quote); returns the index after it. Newlines inside
    // a multi-line string still count as lines. An unterminated string ends the scan: toml++ reports it.
    const auto skip_string = [&](std::size_t i) {
        const char q = text[i];
        const bool multi = text.substr(i, 3) == std::string_view(q == '"' ? "\"\"\"" : "'''");
        i += multi ? 3 : 1;
        while (i < text.size()) {
            const char c = text[i];
            if (c == '\\' && q == '"') {
                if (i + 1 < text.size() && text[i + 1] == '\n') ++line;
                i += 2;
                continue;
            }
            if (c == '\n') {
                if (!multi) return i; // toml++ reports the unterminated string
                ++line;
            }
            if (c == q && (!multi || text.substr(i, 3) == std::string_view(q == '"' ? "\"\"\"" : "'''"))) {
                i += multi ? 3 : 1;
                // A multi-line string may end with up to two more quotes (`""""` is a quote then the end).
                while (multi && i < text.size() && text[i] == q)
                    ++i;
                return i;
            }
            ++i;
        }
        return i;
    };
    for (std::size_t i = 0; i < text.size();) {
        const char c = text[i];
        switch (c) {
        case '"':
        case '\'':
            i = skip_string(i);
            continue;
        case '#':
            while (i < text.size() && text[i] != '\n')
                ++i;
            continue;
        case '.':
            // Dots between two separators are a dotted key's (a number or a date has at most one).
            if (++parts > limits.max_key_parts)
                throw Error("a key of more than " + std::to_string(limits.max_key_parts) + " dotted parts",
                            at(), "keys of at most " + std::to_string(limits.max_key_parts) + " parts");
            break;
        case '[':
        case '{':
            if (++nesting > limits.max_nesting)
                throw Error("arrays or tables nested more than " + std::to_string(limits.max_nesting) +
                                " levels deep",
                            at(), "at most " + std::to_string(limits.max_nesting) + " levels");
            parts = 1;
            break;
        case ']':
        case '}':
            if (nesting > 0) --nesting;
            parts = 1;
            break;
        case '\n':
            ++line;
            parts = 1;
            break;
        case '=':
        case ',':
            parts = 1;
            break;
        default:
            break;
        }
        ++i;
    }
}

} // namespace infrarsi
