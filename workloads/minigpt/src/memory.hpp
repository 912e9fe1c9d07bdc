#pragma once
// The analytic peak-memory model (README.md, "Memory model"), the orchestrator's memory prior, and the
// measured resident-set peak it is compared with.
#include "config.hpp"

#include <nlohmann/json.hpp>

namespace minigpt {

struct MemoryEstimate {
    nlohmann::json breakdown;  // bytes per rank, by component
    double per_rank_bytes = 0; // peak of one rank
    double per_node_bytes = 0; // ranks_per_node ranks on one node
};

// dp_size = nodes * ranks_per_node for a planned run.
MemoryEstimate estimate_memory(const Config& cfg, int dp_size);

// Peak resident set size of this process so far (getrusage), in bytes.
long long peak_rss_bytes();

} // namespace minigpt
