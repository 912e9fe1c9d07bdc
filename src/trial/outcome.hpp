#pragma once
// What became of a trial: one typed outcome for every part (the store, the search, verification, the report
// and the experience bank), and the one classify() that decides it from the evidence a finished trial leaves:
// Slurm's record of the job, the job's output, the wrapper's result file and the steps it measured.
// Nothing downstream reads the detail text: it is for people; decisions use Outcome and Violation.
#include "measure/statistics.hpp"
#include "slurm/job.hpp"
#include "trial/log_signals.hpp"
#include "util/enum_names.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace infrarsi::trial {

enum class Outcome {
    Ok,                // ran every step, kept the contract; its measurements count
    OutOfMemory,       // killed at the memory limit: its peak is only known to exceed the limit
    Timeout,           // reached the time limit
    NodeFailure,       // the node failed under it: says nothing about the candidate (re-queued)
    Cancelled,         // cancelled or preempted: says nothing about the candidate (re-queued)
    Crash,             // exited non-zero (or by a signal) for another reason
    BuildFailure,      // its patch set did not build
    ContractViolation, // finished, but broke the contract (Violation says how)
    // Stopped by the trial wrapper once its first timed steps were slower than the incumbent by more than
    // the minimum detectable effect (ManifestTask::stop_slower_than_s): it cannot be promoted, so the rest of
    // its steps would be wasted. Not a failure of the candidate's correctness; its steps were measured.
    StoppedSlow,
};

// How a trial broke the contract (Outcome::ContractViolation); None for every other outcome.
enum class Violation {
    None,
    NoResult,         // the trial wrapper wrote no result file
    MissingSteps,     // fewer step lines than the contract's steps
    LossInvariant,    // the losses left the contract's tolerance of the baseline's
    ProtectedChanged, // the patch set changed a protected file (found when its sandbox was made)
    OutOfScope,       // the patched tree differs outside the editable scope, or has a symlink (ditto)
    StepLines,        // more step lines than the contract's steps, or a step numbered twice or out of order
    Timing,           // the job's own step times are implausibly short for the elapsed time the evidence saw
    Settings,         // the trial ran other settings (env, arguments, build) than its manifest entry names
    NotEquivalent,    // at the baseline's knobs and a fresh seed, its patch set's losses left the baseline's
    // result.json or log.txt differs from what the evidence recorded when the task ended: something of the
    // job's user (a job it submitted, a process that escaped it) rewrote them after the trial.
    RewrittenAfterEnd,
};

inline constexpr util::EnumNames<Outcome, 9> outcome_names{{{
    {Outcome::Ok, "ok"},
    {Outcome::OutOfMemory, "oom"},
    {Outcome::Timeout, "timeout"},
    {Outcome::NodeFailure, "node_failure"},
    {Outcome::Cancelled, "cancelled"},
    {Outcome::Crash, "crash"},
    {Outcome::BuildFailure, "build_failure"},
    {Outcome::ContractViolation, "contract_violation"},
    {Outcome::StoppedSlow, "stopped_slow"},
}}};
inline constexpr util::EnumNames<Violation, 11> violation_names{{{
    {Violation::None, ""},
    {Violation::NoResult, "no_result"},
    {Violation::MissingSteps, "missing_steps"},
    {Violation::LossInvariant, "loss_invariant"},
    {Violation::ProtectedChanged, "protected_changed"},
    {Violation::OutOfScope, "out_of_scope"},
    {Violation::StepLines, "step_lines"},
    {Violation::Timing, "timing"},
    {Violation::Settings, "settings"},
    {Violation::NotEquivalent, "not_equivalent"},
    {Violation::RewrittenAfterEnd, "rewritten_after_end"},
}}};

inline std::string to_string(Outcome o) {
    return std::string(outcome_names.name(o));
}
inline std::string to_string(Violation v) {
    return std::string(violation_names.name(v));
}
// Throws an Error naming the accepted values.
Outcome parse_outcome(std::string_view name);
Violation parse_violation(std::string_view name);

// True for outcomes that say nothing about the candidate (the node failed, the job was cancelled): such a
// trial is not counted against the budget and a search trial is re-queued.
bool says_nothing(Outcome o);

// What the contract allows, for classify's details.
struct Limits {
    std::string mem;         // the contract's memory limit as written ("4G")
    long long mem_bytes = 0; // the same in bytes
    std::string time_limit;  // the contract's time limit as written
    int steps = 0;           // step lines a trial must print
    std::string step_lines;  // what a step line is, for people (measure::describe of the contract's format)
};

// The evidence a finished trial leaves.
struct Evidence {
    const slurm::JobRecord* record = nullptr; // Slurm's record of the job (required)
    std::string_view job_output;              // the workload's log and Slurm's output file for the task
    bool has_result = false;                  // the wrapper wrote result.json
    // The wrapper stopped the workload for slowness (result.json's stopped_slow), and why.
    std::optional<std::string> stopped_slow;
    int steps = 0; // step lines measured (from result.json, else from the log)
    // check_step_lines's reason (trial/proof.hpp) when the step lines are not exactly the contract's steps,
    // each numbered once in order; nullopt when they are (or too few: that is `steps` above).
    std::optional<std::string> step_lines_violation;
    // What differs between the trial's files (result.json, log.txt) and the evidence's digests of them taken
    // when the task ended (util/file_digest.hpp digest_difference); nullopt when they match or there are
    // none.
    std::optional<std::string> rewritten_violation;
    // check_settings's reason when the wrapper saw other settings than the manifest entry's.
    std::optional<std::string> settings_violation;
    // check_timing's reason when the job's step times are implausibly short against the evidence.
    std::optional<std::string> timing_violation;
    const measure::TrialSummary* summary = nullptr; // the steady-state summary, when enough steps ran
    // verify::check_loss's reason when the losses broke the invariant; nullopt when they held or there is no
    // reference (the doctor's own trials).
    std::optional<std::string> loss_violation;
    std::string_view log_tail; // the last lines of the workload's log, for a crash's detail
};

struct Verdict {
    Outcome outcome = Outcome::Ok;
    Violation violation = Violation::None;
    std::string detail; // one line for people
    // What the job's output said about its end (log_signals.hpp), when it said anything: which memory ran out
    // (a GPU's out-of-memory is not the host limit's censored observation) and the allocator's numbers.
    std::optional<LogDiagnosis> log;
};

// Slurm's verdict decides the failures only Slurm knows (out of memory, timeout, node failure, cancelled:
// slurm::classify); a failed job is told apart by its output (trial::diagnose: a cgroup OOM kill Slurm
// reported there, a GPU or host out-of-memory, a collective timeout, a rank's exception); a job that
// completed is then held to the contract: a result file, every step line, the loss invariant.
Verdict classify(const Evidence& e, const Limits& limits);

} // namespace infrarsi::trial
