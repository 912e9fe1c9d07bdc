#pragma once
// The check a TOML text passes before toml++ parses it. toml++ builds a table per part of a dotted key and
// frees them recursively: a key of 300k parts (`a.a.a...= 1`, a few hundred KiB) crashes the process inside
// the parser. So the size, the parts of each key and the nesting of arrays and inline tables are bounded
// here, by a scan that knows TOML's strings and comments, before toml++ sees the text.
#include <cstddef>
#include <string>
#include <string_view>

namespace infrarsi {

struct TomlLimits {
    std::size_t max_bytes = 1u << 20;
    std::size_t max_key_parts = 32; // a.b.c is 3 parts; a table header counts the same way
    std::size_t max_nesting = 32;   // arrays and inline tables inside one another
};

// Throws infrarsi::Error naming `where` and the line (where:LINE) when `text` exceeds a limit.
void check_toml_limits(std::string_view text, const std::string& where, TomlLimits limits = {});

} // namespace infrarsi
