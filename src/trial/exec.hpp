#pragma once
// The inside of a trial job (called by sbatch/trial.sbatch): find this array task's entry in the batch
// manifest, run the workload with the entry's environment, stream its output to the trial log, and write
// result.json. The manifest format is documented in docs/orchestrator.md ("Batch manifest").
#include <filesystem>

namespace infrarsi::trial {

// Returns the exit status for the job: the workload's, or 128 + signal.
int execute(const std::filesystem::path& manifest, int index);

} // namespace infrarsi::trial
