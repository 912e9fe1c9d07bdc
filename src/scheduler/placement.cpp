// Where an array runs: the placement options a campaign gives Slurm (scheduler.hpp, ArrayJob::placement).
#include "scheduler/scheduler.hpp"

#include <algorithm>
#include <sstream>
#include <string_view>

namespace infrarsi::scheduler {

std::vector<std::string> nodes_to_avoid(const std::vector<std::string>& slow,
                                        const std::vector<std::string>& partition_nodes, int needed) {
    std::vector<std::string> avoid;
    for (const auto& n : slow)
        if (std::find(partition_nodes.begin(), partition_nodes.end(), n) != partition_nodes.end())
            avoid.push_back(n);
    if (partition_nodes.size() - avoid.size() < static_cast<size_t>(std::max(1, needed))) return {};
    return avoid;
}

std::vector<std::string> excluding(std::vector<std::string> placement,
                                   const std::vector<std::string>& nodes) {
    if (nodes.empty()) return placement;
    const auto starts = [](const std::string& o, std::string_view p) { return o.rfind(p, 0) == 0; };
    if (std::any_of(placement.begin(), placement.end(),
                    [&](const std::string& o) { return starts(o, "--nodelist=") || starts(o, "-w"); }))
        return placement;
    constexpr std::string_view option = "--exclude=";
    auto it = std::find_if(placement.begin(), placement.end(),
                           [&](const std::string& o) { return starts(o, option); });
    if (it == placement.end()) it = placement.insert(placement.end(), std::string(option));
    std::vector<std::string> names; // those already excluded, then the new ones
    std::istringstream list(it->substr(option.size()));
    for (std::string n; std::getline(list, n, ',');)
        if (!n.empty()) names.push_back(n);
    for (const auto& n : nodes)
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    *it = std::string(option);
    for (size_t i = 0; i < names.size(); ++i)
        *it += (i ? "," : "") + names[i];
    return placement;
}

} // namespace infrarsi::scheduler
