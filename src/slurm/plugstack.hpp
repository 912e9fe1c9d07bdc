#pragma once
// Where the InfraRSI plugin keeps its spool on this cluster, read from the site's SPANK configuration
// (plugstack.conf, spank(8)) rather than asked of the user: its `spool=DIR` argument, else the plugin's
// default. The orchestrator needs the spool for the plugin's trial evidence and allocation records.
// Discovery order (discover_plugin_spool): --spool, $INFRARSI_SPOOL (a site's or user's setting), the
// PlugStackConfig that `scontrol show config` names (the file beside slurm.conf when it names
// none), following `include` lines. Docs: docs/orchestrator.md ("Evidence").
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::slurm {

// Where the plugin keeps its spool when plugstack.conf gives it no spool= argument (spank/config.hpp).
inline constexpr const char* kDefaultPluginSpool = "/var/spool/infrarsi";
// The environment variable that names the spool where the configuration cannot be read.
inline constexpr const char* kSpoolEnv = "INFRARSI_SPOOL";

struct PlugstackLine {
    bool required = false; // "required" or "optional"
    std::string plugin;    // the plugin's path as written
    std::vector<std::string> args;
};
struct Plugstack {
    std::vector<PlugstackLine> plugins;
    std::vector<std::string> includes; // the patterns of `include` lines, as written
};
// One plugstack.conf's text: comments (#) and blank lines skipped, a line that is neither a plugin nor an
// include ignored (Slurm refuses it; not ours to say).
Plugstack parse_plugstack(const std::string& text);

// The spool of the InfraRSI plugin (a plugin whose file name is infrarsi.so) in `conf` or the files it
// includes (glob patterns; relative ones from conf's directory; at most 8 levels); nullopt when the file
// cannot be read or loads no InfraRSI plugin.
std::optional<std::string> plugstack_spool(const std::filesystem::path& conf);

struct SpoolDiscovery {
    std::string spool; // empty: none found
    std::string how;   // where it came from, for the log and the report
};
// From `given` (--spool), else `env` (the value of $INFRARSI_SPOOL, may be empty), else the plugstack
// config named in `slurm_config` (scontrol show config: PlugStackConfig, else SLURM_CONF's directory). A
// spool found in the configuration that is not a directory here is not taken (`how` says so).
SpoolDiscovery discover_plugin_spool(const std::string& given, const std::string& env,
                                     const std::map<std::string, std::string>& slurm_config);

} // namespace infrarsi::slurm
