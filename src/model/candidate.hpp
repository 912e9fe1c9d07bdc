#pragma once
// What the global models see of a configuration and of a trial: feature vectors over a finite candidate
// set. Nothing here knows about knobs, Slurm or the store, so any proposer can feed the models.
#include <Eigen/Dense>
#include <string>
#include <vector>

namespace infrarsi::model {

struct MemorySaver {
    int candidate = -1; // index of the same configuration with one declared memory saver applied
    std::string change; // human-readable, e.g. "recompute=selective"
};

struct Candidate {
    std::string id;              // stable, human-readable; used in reasons
    Eigen::VectorXd features;    // encoded configuration (same length for all candidates)
    double prior_peak_bytes = 0; // analytic peak-memory estimate per GPU (> 0)
    // Oriented memory coordinates: if a.memory_key >= b.memory_key componentwise, a needs at least as much
    // memory as b. A knob that changes memory non-monotonically appears as +v and -v, so it must match.
    // Empty: no dominance claims for this candidate.
    Eigen::VectorXd memory_key;
    std::vector<MemorySaver> savers;
};

enum class Outcome { ok, oom, failed };

struct TrialObservation {
    int candidate = -1; // index into the candidate list given to the proposer
    Outcome outcome = Outcome::ok;
    double step_time_s = 0; // steady-state step time (ok trials)
    double peak_bytes = 0;  // measured peak per GPU (ok trials; 0 when unknown)
    double cost_s = 0;      // what the trial cost, in seconds of allocation
};

} // namespace infrarsi::model
