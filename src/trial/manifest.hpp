#pragma once
// The batch manifest: what one array job of trials runs. The orchestrator writes it (campaign/batch_runner.cpp);
// the trial wrapper (trial/exec.cpp) and the SPANK plugin's trial mode (spank/stepd.cpp) read it with the one
// strict reader below, as a user's input: every name, value and path is checked. Format: docs/orchestrator.md
// ("Batch manifest"); the plugin's rules: docs/plugin.md ("Trial mode").
#include "measure/log_format.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::trial {

// Written: /3 (tasks carry the knobs' arguments and sbatch options). Read: /3 and /2 (which has neither).
inline constexpr const char* kManifestFormat = "infrarsi-manifest/3";
inline constexpr const char* kManifestFormatV2 = "infrarsi-manifest/2";
inline constexpr std::size_t kMaxManifestBytes = 4u << 20;
inline constexpr std::size_t kMaxEnvValueBytes = 4096;
inline constexpr std::size_t kMaxEnvNameBytes = 128;

// Every name a task's env may set: its allowed values, or nullopt for any valid value.
using KnobDeclarations = std::map<std::string, std::optional<std::vector<std::string>>>;

struct ManifestTask {
    std::uint32_t index = 0;                // the array task id
    std::string trial_id;                   // [A-Za-z0-9._-]{1,128}; the orchestrator's store row id
    std::map<std::string, std::string> env; // knob and workload variables, each declared in Manifest::knobs
    std::string result;                     // absolute path of result.json
    // What the trial wrapper runs; a manifest written by hand for the plugin alone may leave them out.
    std::string kind;                 // doctor, search, verify (the store's trial kind)
    nlohmann::json candidate;         // the candidate's JSON (search::Candidate::to_json), or null
    std::vector<std::string> command; // argv, never a shell string: the program and the contract's fixed args
    std::vector<std::string> args;    // the knobs' arguments, run after `command` (argv elements)
    // The knobs' sbatch options this task's array job was submitted with ("--cpus-per-task=2"): a record;
    // the wrapper cannot change them, the batch runner groups tasks into arrays by them.
    std::vector<std::string> sbatch_options;
    std::string build, workdir, log; // absolute paths
    // Stop the workload early when its first timed steps are too slow to matter (search trials only): once
    // `after_steps` timed steps past the first `skip_steps` step lines have been printed, their median step
    // time above `step_s` ends the trial (trial::Outcome::StoppedSlow). With `control_log` (the log of the
    // batch's control, a baseline run beside it under the same conditions) the limit is instead
    // `control_ratio` times the control's median over its own first `after_steps` timed steps past
    // `skip_steps`, undecided until the control has printed them: a host-wide slowdown moves both.
    struct SlowStop {
        // With a control_log: the limit where the wrapper cannot read the control (a view the plugin made
        // hides it): the last batch's control x control_ratio; 0: none, the trial runs on.
        double step_s = 0;
        int skip_steps = 0;
        int after_steps = 0;
        std::string control_log; // absolute; empty: the absolute limit step_s
        double control_ratio = 0;
        bool operator==(const SlowStop&) const = default;
    };
    std::optional<SlowStop> stop_slow;
    bool operator==(const ManifestTask&) const = default;
};

struct Manifest {
    std::string campaign; // [A-Za-z0-9._-]{1,128}
    std::int64_t batch = 0;
    std::string kind;
    measure::LogFormat metrics; // how the wrapper reads the steps from the workload's output
    KnobDeclarations knobs;
    std::vector<ManifestTask> tasks;
    bool operator==(const Manifest&) const = default;

    // The entry for array task `index`; Error when the manifest has none.
    const ManifestTask& task(std::uint32_t index) const;
};

nlohmann::json to_json(const Manifest& m);
// Strict: format infrarsi-manifest/3 or /2, every rule of docs/plugin.md. An older shape is refused with what
// to do about it. `where` names the source in errors. Throws infrarsi::Error.
Manifest manifest_from_json(const nlohmann::json& j, const std::string& where);
Manifest parse_manifest(const std::string& text, const std::string& where);
// A regular file of at most kMaxManifestBytes (a FIFO does not block), then parse_manifest.
Manifest read_manifest(const std::filesystem::path& path);
// Validates (the writer is held to the reader's rules), then replaces `path` atomically.
void write_manifest(const std::filesystem::path& path, const Manifest& m);

// Reads a batch manifest an older orchestrator wrote ("version": 1, integer trial ids) and rewrites it in
// the current format, so a campaign on disk resumes. Returns false when the file is already current.
bool upgrade_manifest(const std::filesystem::path& path);

// The environment trial `index` gets: its env plus INFRARSI_CAMPAIGN, INFRARSI_TRIAL_ID, INFRARSI_RESULT.
std::map<std::string, std::string> trial_environment(const Manifest& m, std::uint32_t index);

// [A-Z_][A-Z0-9_]*, at most kMaxEnvNameBytes, and not one of the prefixes Slurm and InfraRSI own.
bool valid_knob_name(const std::string& name);
// At most kMaxEnvValueBytes, no NUL, newline or carriage return.
bool valid_env_value(const std::string& value);

} // namespace infrarsi::trial
