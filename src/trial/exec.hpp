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
// is stopped.
std::optional<std::string> slow_stop_reason(const std::vector<measure::StepSample>& steps,
                                            const ManifestTask::SlowStop& rule);

} // namespace infrarsi::trial
