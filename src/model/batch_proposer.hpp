#pragma once
// Model-based batch proposals over a finite candidate set: the runtime GP and the censored memory model,
// refitted on every call from all trials (OOMs included), and a cost-aware, noise-aware acquisition.
//
//   a(x) = EI_mde(x) * (1 - P(OOM | x)) / E[cost(x)]
//
// EI_mde is expected improvement of log step time over the incumbent minus log(1 + MDE): a gain smaller
// than the minimum detectable effect counts as zero, because it could never be promoted. E[cost] mixes a
// full run (overhead + steps x predicted step time) with an OOM that is killed part way (Snoek et al. 2012,
// "EI per second"; Gelbart et al. 2014 for the constraint-weighted EI).
//
// A batch of q distinct candidates is chosen by the kriging believer (Ginsbourger et al. 2010): after each
// pick, the GP is conditioned on a fantasy observation equal to its mean, which shrinks the variance (and
// so the EI) of similar candidates. Hard rules, never relaxed: no candidate already tried, none that OOMed,
// none whose memory key dominates an OOM's (needs at least as much memory on the declared monotone knobs).
// When the best-looking candidate is memory-hungry, it is paired with its declared memory-saver variant.
#include "model/candidate.hpp"
#include "model/censored_memory_model.hpp"
#include "model/gaussian_process.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::model {

struct ProposerSettings {
    double memory_limit_bytes = 0;       // per GPU; required
    double noise_variance = 1e-4;        // of log step time for one trial: the doctor's calibration
    double min_detectable_effect = 0.02; // relative speedup the campaign can claim
    double oom_cost_fraction = 0.3;      // an OOM runs this fraction of a full trial before the kill
    double trial_overhead_s = 60;        // start-up per trial (allocation, build cache, init)
    double trial_steps = 20;             // steps per trial
    std::vector<int> hints;              // candidate indices to start from (contract hints, experience bank)
    int min_model_points = 3;            // successful trials before the runtime model is trusted
    double pair_oom_threshold = 0.3;     // best-looking candidate with P(OOM) above this gets a saver pair
    double max_pair_oom = 0.8;           // ...and is itself proposed only below this
    double initial_max_oom = 0.5;        // initial design avoids candidates above this P(OOM)
    int pool_size = 1500;                // random candidates scored per call (plus neighbours of the best)
    int neighbours = 60;                 // nearest untried candidates of each of the best few trials
    int exact_pool = 300;                // candidates given an exact posterior (the rest are bounded)
    std::uint64_t seed = 1;
    GpSettings gp; // noise_variance_floor is overwritten by noise_variance
    MemoryModelSettings memory;
};

struct Proposal {
    int candidate = -1;
    std::string reason; // human-readable, for the audit
    double p_oom = 0;
    double expected_improvement = 0; // in log step time, above the MDE
    double predicted_step_s = 0;     // 0 in the initial design
};

class BatchProposer {
  public:
    // Up to q distinct candidates (fewer only when fewer are allowed). Throws Error on inconsistent input
    // (index out of range, feature lengths differ, no memory limit).
    std::vector<Proposal> propose(const std::vector<Candidate>& candidates,
                                  const std::vector<TrialObservation>& trials, int q,
                                  const ProposerSettings& s);

    // The models of the last call (for reports and tests). The runtime model is unfitted in the initial
    // design.
    const GaussianProcess& runtime_model() const { return runtime_; }
    const CensoredMemoryModel& memory_model() const { return memory_; }
    bool runtime_model_fitted() const { return runtime_fitted_; }

  private:
    GaussianProcess runtime_;
    CensoredMemoryModel memory_;
    bool runtime_fitted_ = false;
    std::optional<GpHyperparameters> warm_; // last fit, as a start for the next
};

// Candidates excluded by the hard memory rules: OOMed, or memory key >= an OOMed candidate's key.
std::vector<char> memory_dominated(const std::vector<Candidate>& candidates,
                                   const std::vector<TrialObservation>& trials);

// Expected improvement below `target` for a Gaussian N(mean, sd^2) (minimization; Jones et al. 1998).
double expected_improvement(double target, double mean, double sd);

} // namespace infrarsi::model
