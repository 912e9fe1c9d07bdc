#pragma once
// The inside of a trial job (called by sbatch/trial.sbatch): find this array task's entry in the batch
// manifest, run the workload with the entry's environment, stream its output to the trial log, and write
// result.json. The manifest format is documented in docs/orchestrator.md ("Batch manifest").
#include "measure/steps.hpp"
#include "trial/manifest.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::trial {

// Returns the exit status for the job: the workload's, or 128 + signal.
int execute(const std::filesystem::path& manifest, int index);

// The early stop of a search trial (ManifestTask::stop_slow) on the steps printed so far: nullopt while
// there are too few timed steps to decide, an empty string when they are fast enough (run on), else why it
// is stopped. A rule with a control_log compares with `control`, the steps the control has printed so far
// (control_steps): undecided while it has too few; with no control to read (nullptr), the rule's absolute
// step_s where it has one, else the trial runs on.
std::optional<std::string> slow_stop_reason(const std::vector<measure::StepSample>& steps,
                                            const ManifestTask::SlowStop& rule,
                                            const std::vector<measure::StepSample>* control = nullptr);

// The steps a batch's control has printed so far: its log and line times as far as they are written
// (read like the orchestrator reads a trial's output: bounded, no symlink, no FIFO); none when unreadable.
std::vector<measure::StepSample> control_steps(const std::filesystem::path& log, const measure::LogFormat& f);

} // namespace infrarsi::trial
