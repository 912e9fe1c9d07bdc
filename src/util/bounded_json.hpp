#pragma once
// The one reader of JSON that crosses in from outside: a file a job, a user or another host wrote (batch
// manifests, result.json, trial evidence, tune requests, bank exports, the local scheduler's state,
// allocation records, a workload's JSON step lines). nlohmann parses deep input iteratively, but dump(),
// copies and the destructor of a deep value recurse: a million nested arrays crash the process (root
// slurmstepd included). So the size is checked before parsing and the depth during it, rejecting input before
// any deep value is built. JSON we wrote ourselves into memory a moment ago needs none of this.
#include "util/fd.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace infrarsi {

// Deeper than anything infrarsi writes (a manifest's candidate, a bank export: under 8 levels), shallow
// enough that the recursion in dump(), copies and destruction is harmless.
inline constexpr std::size_t kMaxJsonDepth = 64;

struct JsonLimits {
    std::size_t max_bytes = 4u << 20;
    std::size_t max_depth = kMaxJsonDepth; // nesting of arrays and objects: `[]` is 1, `[[]]` is 2
};

// Parses `text` within `limits`. Throws infrarsi::Error naming `where` (a file, "line 3 of ...") when the
// text is larger than limits.max_bytes, nested deeper than limits.max_depth, or not JSON; `expected` says
// what the input should have been ("a manifest written by the orchestrator").
nlohmann::json parse_bounded_json(std::string_view text, const std::string& where,
                                  const std::string& expected, JsonLimits limits = {});

// read_regular_file (non-blocking, a regular file of at most limits.max_bytes) then parse_bounded_json.
nlohmann::json read_bounded_json(const std::string& path, const std::string& expected, JsonLimits limits = {},
                                 bool follow_symlink = true);

} // namespace infrarsi
