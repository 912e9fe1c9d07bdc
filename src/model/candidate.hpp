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
    // The values of the knobs and patches whose effect on memory is not declared, one coordinate each (a
    // value's index, a patch 0/1). The hard rule needs them equal to an OOM's; the OOM edge
    // (model/failure_edges.hpp) presumes that changing one saves no memory until a trial shows it does.
    Eigen::VectorXd memory_unknown;
    std::vector<MemorySaver> savers;
    // The runtime model's explicit basis at this candidate (model/claim_prior.hpp): 1 for each claimed change
    // it has, else 0, in the order of ProposerSettings::runtime_prior. Empty: no claims.
    Eigen::VectorXd prior_basis;
};

// What kind of observation a trial is for the models (trial::Outcome read by the models:
// search/model_proposer maps one to the other). Every kind marks the candidate as tried (never proposed
// again); each model learns only from the kinds it can read:
//   ok        ran every step: step time (runtime model) and peak (memory model);
//   oom       killed at the memory limit: peak > limit (memory model, censored);
//   timeout   killed at the time limit: step time >= step_time_s (runtime model, right-censored; see
//             step_time_censored), when step_time_s > 0;
//   stopped   stopped early because its first steps were slower than the incumbent by more than max(MDE,
//   10%):
//             step_time_s is what those steps measured (runtime model); not a failure of the candidate;
//   infeasible failed for a reason of its own (a crash, a broken contract): the feasibility model; its steps,
//             when it printed any timed ones (step_time_s > 0), teach the runtime model too;
//   failed    nothing to learn: not measured yet (queued), or a failure the models cannot read (a build
//             failure, the infrastructure's).
enum class ObservationKind { ok, oom, failed, timeout, stopped, infeasible };

struct TrialObservation {
    int candidate = -1; // index into the candidate list given to the proposer
    ObservationKind outcome = ObservationKind::ok;
    double step_time_s = 0;          // steady-state step time (ok trials; see ObservationKind for the others)
    double peak_bytes = 0;           // measured peak per GPU (ok and stopped trials; 0 when unknown)
    double cost_s = 0;               // what the trial cost, in seconds of allocation
    bool step_time_censored = false; // step_time_s is a lower bound (a timeout that measured less than it)
};

} // namespace infrarsi::model
