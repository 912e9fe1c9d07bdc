#pragma once
// Trial evidence: what something the trial's code cannot write saw of a trial's run. Under Slurm the plugin
// writes it as root from slurmstepd (spank/stepd.cpp) into its spool, one file per run of a trial job's batch
// step; the local scheduler keeps the same record as the trial's parent (scheduler/local_scheduler.cpp). The
// orchestrator holds the job's own claims (result.json, step lines) against it (trial/proof.hpp) and takes
// the memory peak from it. Format and rules: docs/orchestrator.md ("Evidence"), docs/plugin.md.
#include "util/file_digest.hpp"

#include <nlohmann/json.hpp>

#include <chrono>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace infrarsi::trial {

inline constexpr const char* kEvidenceFormat = "infrarsi-evidence/1";

struct TrialEvidence {
    std::string source; // "plugin" (root, slurmstepd) or "local parent" (the local scheduler)
    std::string job;    // the task's job: "JOB" or, for an array task, "ARRAYJOB_TASK"
    std::string node;
    double start_epoch = 0, end_epoch = 0; // CLOCK_REALTIME seconds, for people and for ordering runs
    double elapsed_s = 0;                  // CLOCK_BOOTTIME (plugin) or steady clock (parent): not set back
    int exit_code = 0;                     // the task's exit status, or 0 when a signal ended it
    int signal = 0;
    std::optional<double> memory_peak_bytes; // the job cgroup's peak (what --mem is enforced on)
    // result.json and log.txt as they were when the task ended, read as the job's user (digest_files_as):
    // ingest refuses files that differ since (a job that outlived the trial rewrote them). nullopt: a record
    // written before the plugin took them, or a task whose manifest entry the plugin did not read.
    std::optional<FileDigest> result_file, log_file;
    bool operator==(const TrialEvidence&) const = default;
};

// What the evidence reads of a trial's files: result.json at most kMaxResultBytes (trial/result.hpp), the log
// at most kMaxDigestLogBytes, both within kDigestTimeout (it holds slurmstepd's end of the task).
inline constexpr std::uint64_t kMaxDigestLogBytes = 1ull << 30;
inline constexpr std::chrono::milliseconds kDigestTimeout{20000};

nlohmann::json to_json(const TrialEvidence& e);
// Throws infrarsi::Error naming `where` and the field.
TrialEvidence evidence_from_json(const nlohmann::json& j, const std::string& where);

// Where the plugin keeps the evidence of job `job` ("JOB" or "ARRAYJOB_TASK") in its spool:
// <spool>/trials/<ARRAYJOB or JOB>/<TASK or 0>.<start ns>.json.
std::filesystem::path evidence_dir(const std::filesystem::path& spool, const std::string& job);
std::string evidence_file_prefix(const std::string& job);

// The plugin's evidence of job `job`'s last run (a job Slurm requeued ran more than once), when the spool has
// one that root wrote: a file owned by another user, a symlink or one that does not parse is no evidence.
std::optional<TrialEvidence> read_plugin_evidence(const std::filesystem::path& spool, const std::string& job);

} // namespace infrarsi::trial
