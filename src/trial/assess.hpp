#pragma once
// One assessment of a finished trial: what its job left (the scheduler's record, the plugin's root-side
// evidence, result.json, the log and Slurm's output file) becomes one typed TrialRecord. It chooses the
// evidence, reads the steps, applies the memory-peak policy, runs the checks the contract holds a trial to
// (step lines, files rewritten after the end, settings, timing and pace, the loss rule), classifies
// (outcome.hpp) and censors an out-of-memory peak. The campaign's ingest (campaign/batch_runner.cpp) stores the
// record and hands the trial to its stage; it decides nothing about the trial itself.
#include "contract/contract.hpp"
#include "slurm/job.hpp"
#include "trial/manifest.hpp"
#include "trial/outcome.hpp"
#include "trial/proof.hpp"
#include "trial/record.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::trial {

// The loss rule a trial is held to: empty when its losses keep it, else why not. `losses` are the job's
// per-step losses, `final_eval` the last evaluation loss it printed.
using LossCheck =
    std::function<std::string(const std::vector<double>& losses, std::optional<double> final_eval)>;

struct AssessInput {
    const contract::Contract& contract;
    const slurm::JobRecord& record;     // the scheduler's record of the task
    std::filesystem::path result_path;  // the trial's result.json; its log.txt is beside it
    std::filesystem::path slurm_output; // the batch step's own output (Slurm's -o file); empty: none
    std::string evidence_spool;         // the plugin's spool; empty: none
    bool local_scheduler = false;       // the record is the local scheduler's (the trial's parent's)
    // A doctor run: its runs are what calibrate the timing checks, so they are not held to them.
    bool doctor = false;
    // The settings the wrapper saw are checked against the manifest entry the orchestrator wrote (not for
    // the user's own job, nor a batch an older orchestrator planned without a manifest digest). A manifest
    // that cannot prove them (`manifest_problem`) fails every trial of the batch.
    bool check_settings = false;
    const Manifest* manifest = nullptr;
    std::string manifest_problem;
    std::uint32_t array_index = 0;
    std::optional<Startup> startup;      // the doctor's startup (proof.hpp check_timing); none: unchecked
    std::optional<double> baseline_pace; // the doctor's median step pace (check_pace); none: unchecked
    LossCheck loss_check;                // empty: held to no loss rule here (a run at a seed of its own)
    std::vector<SelfSubmittedJob> self_submitted; // the user's jobs submitted while it ran (a warning)
};

TrialRecord assess(const AssessInput& in);

} // namespace infrarsi::trial
