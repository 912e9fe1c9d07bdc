#pragma once
// Where this installation's pieces are, found from the running binary, so an installed prefix
// (`cmake --install`) works anywhere: <prefix>/bin/infrarsi, <prefix>/share/infrarsi/sbatch/trial.sbatch, ...
// Paths compiled in from the build and source trees are only the fallback of a binary run where it was
// built (tests, developers).
#include <filesystem>

namespace infrarsi {

// The `infrarsi` command trials run (`infrarsi trial-exec`): $INFRARSI_BIN, else the `infrarsi` beside the
// running binary (infrarsi or infrarsid), else the build tree's.
std::filesystem::path infrarsi_command();

// The read-only data (sbatch/, the reference workloads, etc/): $INFRARSI_DATA_DIR, else
// <binary dir>/../share/infrarsi when it holds sbatch/trial.sbatch, else the source tree.
std::filesystem::path data_dir();

// The trial wrapper every batch is submitted with: data_dir()/sbatch/trial.sbatch.
std::filesystem::path trial_script();

} // namespace infrarsi
