#pragma once
// Tune mode's hand-over from the plugin to the orchestrator: a JSON file per job in <spool>/tune/ saying
// which job is the baseline, which script it ran and which contract applies. The plugin writes it as root
// (spank/stepd.cpp); the orchestrator reads it as input from a job: every field is checked. Format:
// docs/plugin.md ("Tune an existing job").
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <string>

namespace infrarsi::trial {

inline constexpr const char* kTuneRequestFormat = "infrarsi-tune-request/1";
inline constexpr std::size_t kMaxTuneRequestBytes = 64u << 10;

struct TuneRequest {
    std::uint32_t job_id = 0;
    std::uint32_t uid = 0;
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
// A regular file of at most kMaxTuneRequestBytes, not followed through a symlink, then validated.
TuneRequest read_tune_request(const std::filesystem::path& path);

} // namespace infrarsi::trial
