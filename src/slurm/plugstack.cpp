#include "slurm/plugstack.hpp"

#include <fmt/core.h>

#include <fstream>
#include <glob.h>
#include <sstream>

namespace infrarsi::slurm {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> words(const std::string& line) {
    std::istringstream in(line);
    std::vector<std::string> out;
    for (std::string w; in >> w;)
        out.push_back(w);
    return out;
}

std::vector<fs::path> expand(const std::string& pattern, const fs::path& dir) {
    const fs::path p = fs::path(pattern).is_absolute() ? fs::path(pattern) : dir / pattern;
    glob_t g{};
    std::vector<fs::path> out;
    if (::glob(p.c_str(), 0, nullptr, &g) == 0)
        for (std::size_t i = 0; i < g.gl_pathc; ++i)
            out.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    return out;
}

std::optional<std::string> spool_in(const fs::path& conf, int depth) {
    std::ifstream f(conf);
    if (!f || depth > 8) return std::nullopt;
    std::stringstream text;
    text << f.rdbuf();
    const auto stack = parse_plugstack(text.str());
    for (const auto& p : stack.plugins) {
        if (fs::path(p.plugin).filename() != "infrarsi.so") continue;
        // The plugin's own rule (spank/config.cpp): the last spool= wins, an absolute path only.
        std::string spool = kDefaultPluginSpool;
        for (const auto& a : p.args)
            if (a.rfind("spool=/", 0) == 0) spool = a.substr(6);
        return spool;
    }
    for (const auto& pattern : stack.includes)
        for (const auto& inc : expand(pattern, conf.parent_path()))
            if (auto s = spool_in(inc, depth + 1)) return s;
    return std::nullopt;
}

} // namespace

Plugstack parse_plugstack(const std::string& text) {
    Plugstack out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
        const auto w = words(line);
        if (w.empty()) continue;
        if (w[0] == "include" && w.size() >= 2) {
            out.includes.push_back(w[1]);
        } else if ((w[0] == "required" || w[0] == "optional") && w.size() >= 2) {
            out.plugins.push_back({w[0] == "required", w[1], {w.begin() + 2, w.end()}});
        }
    }
    return out;
}

std::optional<std::string> plugstack_spool(const fs::path& conf) {
    return spool_in(conf, 0);
}

SpoolDiscovery discover_plugin_spool(const std::string& given, const std::string& env,
                                     const std::map<std::string, std::string>& slurm_config) {
    if (!given.empty()) return {given, "--spool"};
    if (!env.empty()) return {env, fmt::format("${}", kSpoolEnv)};
    fs::path conf;
    if (auto it = slurm_config.find("PlugStackConfig");
        it != slurm_config.end() && !it->second.empty() && it->second != "(null)")
        conf = it->second;
    else if (auto c = slurm_config.find("SLURM_CONF"); c != slurm_config.end() && !c->second.empty())
        conf = fs::path(c->second).parent_path() / "plugstack.conf";
    if (conf.empty()) return {"", "Slurm's configuration names no plugstack.conf"};
    const auto spool = plugstack_spool(conf);
    if (!spool) return {"", fmt::format("{} loads no InfraRSI plugin (or cannot be read)", conf.string())};
    std::error_code ec;
    if (!fs::is_directory(*spool, ec))
        return {"", fmt::format("{} gives the plugin the spool {}, which is not a directory here",
                                conf.string(), *spool)};
    return {*spool, fmt::format("the plugin's spool= in {}", conf.string())};
}

} // namespace infrarsi::slurm
