#pragma once
// Claims as priors (issue 31): what an agent says a change does (a patch switched on, a knob set to a value)
// is where the models start for that change, and the trials move them from there.
//
// Runtime: each claim is one explicit basis function of the runtime GP (model/gaussian_process.hpp,
// GpBasisPrior; Rasmussen & Williams 2006, section 2.7), the indicator of the change, with a Gaussian prior
// on its coefficient, the change's effect on log step time: mean -discount * log(claimed speed-up), sd
// widening as the confidence falls (claim_prior_sd). Marginalized, the claim shifts the prior mean of every
// candidate with the change and adds a shared, fixed covariance among them: one trial of a candidate with the
// change moves the prediction of all of them, by how much the prior's sd and the trial's noise say (the
// posterior of a normal mean: a claim at confidence 1, sd 5%, weighs as much as one trial at 5% noise; one at
// confidence 0.5, sd 27.5%, little once a trial of the change has run). So a claim decides the order of the
// first trials, and the data decide the rest. Before the runtime model is fitted, the initial design takes
// the candidates with the most claimed gain first (BatchProposer).
//
// Memory: the claimed factor (with its own discount) multiplies the candidate's prior peak estimate, the
// mean the censored memory model (model/censored_memory_model.hpp) corrects; an OOM or a measured peak of a
// candidate with the change moves the change's feature coefficient as it moves any error of the estimate.
// The hard memory rules (dominance by an OOM's key) never read a claim: only declared tags.
//
// Everything in a claim comes from an untrusted agent: a non-finite or non-positive factor is ignored (taken
// as 1), a factor beyond 10x either way is read as 10x, a confidence outside [0, 1] is clamped.
#include "model/gaussian_process.hpp"

#include <vector>

namespace infrarsi::model {

// One claim about one change, as the models read it (search::PatchClaim and search::KnobPrior, typed here
// so that the models know nothing of the space or the protocol).
struct EffectClaim {
    double speedup = 1;       // baseline / with the change
    double memory_factor = 1; // peak with the change / without
    double confidence = 0.5;  // in [0, 1]
    double discount = 1;      // the campaign's: the log speed-up is multiplied by it (ClaimCalibration)
    double memory_discount = 1;
    double calibration_error = 0; // the agent's mean |log claimed - log measured| so far; 0: unknown
};

// The largest effect a claim is read as: 10x either way.
inline constexpr double kMaxClaimedFactor = 10.0;

// The prior sd of a claim's log effect: 0.05 at confidence 1 (5%: as sure as a trial or two of a quiet
// job), 0.5 at confidence 0 (a factor 1.65 either way: next to nothing for patches, which rarely do more
// than 2x), linear between; at least sqrt(pi / 2) times the agent's calibration error, the sd of a normal
// error whose mean absolute value that is: an agent known to miss by 30% is not believed to 5%.
double claim_prior_sd(double confidence, double calibration_error);

// The sd of a claim at confidence 0 with no calibration (a catalog tag's, search::tag_claim): as vague as a
// claim gets. Such a claim weighs in the runtime model, but does not reorder the initial design (the
// baseline's one-knob moves, BatchProposer), whose order a claim sets only when it says something.
inline constexpr double kVagueClaimSd = 0.5;
bool orders_initial_design(double prior_variance);

// The claim's log effect on step time (the basis coefficient's prior mean): -discount * log(speedup),
// sanitized as above.
double claimed_log_step_effect(const EffectClaim& claim);
// The factor on the prior peak estimate: memory_factor ^ memory_discount, sanitized as above.
double claimed_memory_factor(const EffectClaim& claim);

// The runtime GP's basis prior for these claims, in their order (GpSettings::basis). A candidate's basis
// values (Candidate::prior_basis) are 1 for each claimed change it has, else 0.
GpBasisPrior runtime_claim_prior(const std::vector<EffectClaim>& claims);

} // namespace infrarsi::model
