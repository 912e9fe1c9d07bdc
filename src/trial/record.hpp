#pragma once
// What a finished trial measured, typed, and how it ended (TrialRecord). trial::assess (assess.hpp) fills
// it, the campaign store keeps it (one versioned JSON document per trial, read into this struct inside store/
// only), and the stages and the report read its fields: nothing reads a measurement by a string key.
#include "trial/log_signals.hpp"
#include "trial/outcome.hpp"
#include "util/enum_names.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::trial {

// Where the peak memory that decides a trial under a per-GPU limit came from: the job's step lines (its
// allocator's peak), else the trial wrapper's nvidia-smi samples.
enum class GpuMemorySource { StepLines, Samples };
inline constexpr util::EnumNames<GpuMemorySource, 2> gpu_memory_source_names{
    {{{GpuMemorySource::StepLines, "step lines"}, {GpuMemorySource::Samples, "nvidia-smi samples"}}}};

// The evidence the trial was judged on: the plugin's root-side record (trial/evidence.hpp's format), or the
// scheduler's own record. `document` is that record as the report shows it.
struct EvidenceRecord {
    std::string source;              // "plugin", "local parent", "slurm accounting"
    std::optional<double> elapsed_s; // the task's elapsed time as the evidence has it
    nlohmann::json document = nullptr;
};

// How the trial's processes were contained (trial/isolation.hpp), as the wrapper reported it.
struct IsolationRecord {
    bool in_place = false;
    std::string detail;
};

// A job of the user submitted while the trial ran that the campaign did not submit
// (campaign/self_submitted.cpp): a warning on the trial.
struct SelfSubmittedJob {
    std::string job, state, submitted;
};

// What of the job's own files was removed once the trial was read ([workload] keep_job_files).
struct JobFilesRemoved {
    std::uint64_t entries = 0, bytes = 0;
};

// A search trial against its batch's control (campaign/search_stage.cpp): the control's trial, its step time,
// and this trial's step time over it.
struct ControlRatio {
    std::int64_t trial = 0;
    double step_s = 0,
           ratio = 0; // step_s: what the ratio is over (the control's, or the level when an outlier)
    // The control's own run was far from every other baseline run of the campaign (one slow run of a
    // bimodal host, say): the ratio is over the baseline's level (the median of those runs) instead, and
    // this is the control's own step time.
    std::optional<double> outlier_control_s;
};

struct Measurements {
    std::vector<double> steady_samples;              // the steady-state step times (empty: no summary)
    std::optional<std::vector<double>> losses;       // per step
    std::map<std::string, double> phases;            // median seconds per phase after warm-up
    std::optional<int> excluded_steps;               // steady-state steps left out of timing
    std::optional<double> model_flops, peak_flops;   // MFU's parts as the job reports them
    std::optional<double> reported_step_s;           // the job's own step times, summed
    std::optional<std::vector<int>> step_numbers;    // each step as the job numbered it (the report's curves)
    std::optional<std::vector<double>> step_times_s; // each step's time as the job printed it
    std::optional<double> started_at, ended_at;      // epoch seconds, the scheduler's record (the timeline)
    std::optional<double> step_pace;                 // trial/proof.hpp
    std::optional<double> eval_loss;                 // the last evaluation loss the job printed
    std::optional<EvidenceRecord> evidence;
    std::optional<IsolationRecord> isolation;
    std::vector<SelfSubmittedJob> self_submitted_jobs;
    int leftover_processes_killed = 0;
    std::optional<double> host_peak_bytes; // under a per-GPU limit: the host's peak, not deciding
    std::optional<GpuMemorySource> gpu_memory_source;
    std::optional<LogDiagnosis> log_signal; // what the job's output said of how it failed
    std::optional<JobFilesRemoved> job_files_removed;
    std::optional<ControlRatio> control;
};

// A finished trial as trial::assess (assess.hpp) judged it.
struct TrialRecord {
    Outcome outcome = Outcome::Ok;
    Violation violation = Violation::None;
    std::string detail;                                            // a line saying why, for people
    std::optional<double> step_time_s, step_time_lo, step_time_hi; // steady-state median and its interval
    std::optional<double> cold_step_s, tokens_per_s, mfu, loss;
    // The peak checked against the limit: the host's (the evidence's, else the job cgroup's the wrapper
    // read; the accounting's MaxRSS and the workload's report can only raise it), or the GPU's under a
    // per-GPU limit (measurements.gpu_memory_source says whose; the host's is measurements.host_peak_bytes).
    std::optional<double> peak_memory_bytes;
    // An out-of-memory trial's peak is the limit of the memory that ran out: a lower bound, not a reading.
    bool peak_censored = false;
    double cost_node_s = 0;
    Measurements measurements;
    std::vector<std::string> notes; // what reading it found wrong, for the campaign's log
};

// The store's and the report's JSON of the parts both show as they are.
nlohmann::json to_json(const IsolationRecord& i);
nlohmann::json to_json(const std::vector<SelfSubmittedJob>& jobs);
nlohmann::json to_json(const JobFilesRemoved& r);

} // namespace infrarsi::trial
