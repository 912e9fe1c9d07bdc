#pragma once
// The training loop: data parallel over MPI ranks, gradient accumulation, bucketed all-reduce, AdamW, and the
// INFRARSI_STEP / INFRARSI_SUMMARY lines (format in README.md).
#include "config.hpp"

#include <functional>
#include <iosfwd>
#include <vector>

namespace minigpt {

struct TrainResult {
    std::vector<double> losses; // per step (every rank gets them)
    std::vector<double> step_times;
};

// Runs cfg.steps steps on MPI_COMM_WORLD (MPI must be initialized). Rank 0 writes the step lines to out.
TrainResult train(Config cfg, std::ostream& out);

} // namespace minigpt
