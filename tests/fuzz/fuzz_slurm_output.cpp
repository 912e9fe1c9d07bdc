// libFuzzer: every Slurm output parser on hostile text (squeue, sacct, jobcomp and scontrol lines,
// sbatch --parsable, scontrol show config). Only infrarsi::Error may come out; anything else is a crash.
#include "slurm/client.hpp"
#include "util/error.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    infrarsi::slurm::ParseStats stats;
    infrarsi::slurm::parse_squeue(text, &stats);
    infrarsi::slurm::parse_sacct(text, &stats);
    infrarsi::slurm::parse_jobcomp(text, &stats);
    infrarsi::slurm::parse_squeue_json(text, &stats);
    infrarsi::slurm::parse_scontrol_config(text);
    try {
        infrarsi::slurm::parse_sbatch_parsable(text);
    } catch (const infrarsi::Error&) {
    }
    return 0;
}
