#pragma once
// result.json: what the trial wrapper (trial/exec.cpp) saw of one trial, written atomically when the
// workload ends, read by the orchestrator's ingest (campaign/batch_runner.cpp). The workload is told where it lies
// (INFRARSI_RESULT) and may write there, so the reader takes it as a job's input: a file that is not a result
// is an Error, never an abort. Format: docs/orchestrator.md ("result.json").
#include "measure/steps.hpp"
#include "trial/proof.hpp"
#include "util/file_digest.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::trial {

inline constexpr const char* kResultFormat = "infrarsi-result/1";
inline constexpr std::size_t kMaxResultBytes = 64u << 20;

struct Result {
    std::string trial_id;
    std::uint32_t index = 0;
    int exit_code = 0;
    int signal = 0;
    double wall_s = 0;
    double max_rss_children_bytes = 0;
    // The job cgroup's peak on the wrapper's node (trial/memory_peak.hpp): what Slurm's --mem is enforced on.
    std::optional<double> job_cgroup_peak_bytes;
    // On a GPU node, the largest GPU memory of the workload's processes in nvidia-smi's samples, once a
    // second (trial/gpu_memory.hpp); absent elsewhere or when no sample found it on a GPU.
    std::optional<double> gpu_sampled_peak_bytes;
    std::string log;
    measure::StepLog steps;                   // the workload's step lines, its malformed count and summary
    std::string error;                        // why the workload could not be started; empty when it ran
    std::map<std::string, std::string> slurm; // SLURMD_NODENAME, SLURM_JOB_ID, ... as the job saw them
    // What the wrapper gave the workload (proof.hpp), checked against the manifest entry by the orchestrator.
    std::optional<Settings> settings;
    // Processes the workload left behind that the wrapper (a child subreaper) killed before writing this.
    int leftover_processes_killed = 0;
    // Whether the workload ran with the campaign directory hidden (trial/isolation.hpp), and how or why not;
    // empty detail: the manifest is not a campaign's, nothing to hide.
    bool isolated = false;
    std::string isolation;
    // The wrapper stopped the workload because its first timed steps were too slow (ManifestTask::stop_slow):
    // why, for people.
    std::optional<std::string> stopped_slow;
};

nlohmann::json to_json(const Result& r);
// Throws infrarsi::Error naming `where` and the field. A result of the unversioned first format is read too.
Result result_from_json(const nlohmann::json& j, const std::string& where);
void write_result(const std::filesystem::path& path, const Result& r);
// nullopt when there is no file (the job died with its wrapper); Error when there is one that is not a
// result.
// `seen`, when given, gets the digest of the bytes it parsed (absent for no file), to hold against the
// trial's evidence without reading the file twice.
std::optional<Result> read_result(const std::filesystem::path& path, FileDigest* seen = nullptr);

// Beside the trial's log, the wrapper writes when each line ended: seconds since the workload started, one
// line of text per log line. read_line_times gives what is there (empty when there is no file), as far as it
// reads as times.
std::filesystem::path line_times_path(const std::filesystem::path& log);
std::vector<double> read_line_times(const std::filesystem::path& path);

// What a job left in one of its output files (log.txt, Slurm's -o file), as the orchestrator reads it: the
// last `max_bytes` of a regular file, opened without blocking and without following a symlink, read in
// bounded chunks. A larger file gives its end from the first whole line (`cut`: its line numbers are not the
// file's, so line_times do not apply). A missing file, or one that is not a regular file (a FIFO planted in
// its place must not hang ingest), gives nothing, with `problem` saying why when it exists.
inline constexpr std::size_t kMaxTrialOutputBytes = 32u << 20;
struct TrialOutput {
    std::string text;
    bool cut = false;
    std::string problem;
};
TrialOutput read_trial_output(const std::filesystem::path& file,
                              std::size_t max_bytes = kMaxTrialOutputBytes);

} // namespace infrarsi::trial
