#pragma once
// Tune mode's hand-over to the orchestrator: a JSON file per job in <spool>/tune/ saying which job is the
// baseline, which script it ran and which contract applies. Format: docs/plugin.md.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::spank {

inline constexpr const char* kTuneRequestFormat = "infrarsi-tune-request/1";

struct TuneRequest {
    uint32_t job_id = 0;
    uint32_t uid = 0;
    std::string user;
    std::string script;   // absolute path as submitted; empty for --wrap or a script on stdin
    std::string contract; // absolute path of the contract (named, or beside the script)
    std::string submit_dir;
    std::string job_name;
    std::string node; // where the baseline's batch step runs
    std::string time; // UTC ISO 8601
    std::string plugin_version;
    bool operator==(const TuneRequest&) const = default;
};

nlohmann::json to_json(const TuneRequest& r);
// Validates: format, positive job id, absolute contract path, no control characters anywhere.
TuneRequest tune_request_from_json(const nlohmann::json& j);

// sbatch's batch script among its arguments: the first argument after argv[0] that is not an option and
// names a regular file beginning with "#!" (sbatch itself refuses scripts without it). Relative paths are
// resolved against `cwd`. nullopt for --wrap or a script on stdin.
std::optional<std::string> find_batch_script(const std::vector<std::string>& argv, const std::string& cwd);

// Where tune mode looks for the contract when none is named: beside the script, <dir>/<stem>.contract.toml.
std::string default_contract_for(const std::string& script);

// A contract named on the command line, made absolute against `cwd`.
std::string absolute_path(const std::string& path, const std::string& cwd);

// An environment-supplied path we pass on: absolute, at most 4096 bytes, printable.
bool valid_path_value(const std::string& path);

} // namespace infrarsi::spank
