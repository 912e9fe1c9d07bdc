#include "node_identity.hpp"

#include <fstream>
#include <sstream>
#include <unistd.h>

namespace infrarsi::spank {

std::optional<std::string> node_from_cgroup(std::string_view text) {
    // Each line: hierarchy-ID:controllers:path. The first path component decides.
    while (!text.empty()) {
        auto eol = text.find('\n');
        auto line = text.substr(0, eol);
        text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
        auto colon = line.find(':');
        if (colon == std::string_view::npos) continue;
        colon = line.find(':', colon + 1);
        if (colon == std::string_view::npos) continue;
        auto path = line.substr(colon + 1);
        // v2: /system.slice/<node>_slurmstepd.scope/...
        if (path.starts_with("/system.slice/")) path.remove_prefix(std::string_view("/system.slice").size());
        if (!path.starts_with('/')) continue;
        path.remove_prefix(1);
        auto first = path.substr(0, path.find('/'));
        std::string_view node;
        if (first.starts_with("slurm_"))
            node = first.substr(6);
        else if (first.ends_with("_slurmstepd.scope"))
            node = first.substr(0, first.size() - std::string_view("_slurmstepd.scope").size());
        if (!node.empty()) return std::string(node);
    }
    return std::nullopt;
}

std::string this_node() {
    std::ifstream in("/proc/self/cgroup");
    std::stringstream text;
    text << in.rdbuf();
    if (auto node = node_from_cgroup(text.str())) return *node;
    char host[256] = {0};
    ::gethostname(host, sizeof host - 1);
    return host;
}

} // namespace infrarsi::spank
