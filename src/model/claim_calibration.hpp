#pragma once
// How well an agent's claims matched what was measured, and how much of its next claims to believe
// (issue 31): the campaign calls it per agent call for the report, and the bank per agent name and hardware
// key, so that a later campaign discounts a miscalibrated agent from its first call. Pure: factors in,
// figures out. The same for speed-ups (baseline / with the change) and memory factors (with / without).
//
// Discount: the slope b of log measured = b log claimed + e through the origin (an agent that claims 2x for
// what does 1.41x has b = 0.5; one that claims 1.1x for 1.21x has b = 2), with a Gaussian prior on b centred
// on 1 (claims taken as said) of sd `slope_prior_sd`, and e's variance the pooled estimate of the residuals
// and a prior guess (`residual_prior_sd` worth `residual_prior_pairs` pairs): the posterior mean of b (a
// conjugate normal linear regression; Gelman et al., Bayesian Data Analysis, 3rd ed., section 14.8) shrinks
// toward 1 when the pairs are few or their claimed effects small (they say little about a slope), and is
// clamped to [0, max_discount]. The claims are then multiplied by it in log (model/claim_prior.hpp).
#include <vector>

namespace infrarsi::model {

struct ClaimPair {
    double claimed = 1;  // the claimed factor (> 0)
    double measured = 1; // the measured one (> 0)
};

struct ClaimCalibrationSettings {
    double slope_prior_sd = 0.5;
    double residual_prior_sd = 0.2; // log: a trial's noise and the agent's scatter from claim to claim
    double residual_prior_pairs = 2;
    double max_discount = 1.5;
};

struct ClaimCalibration {
    int pairs = 0;    // usable pairs (both factors finite and > 0)
    double error = 0; // mean |log claimed - log measured|; 0 without pairs
    double discounted_error =
        0;               // mean |discount log claimed - log measured|: what is left after the discount
    double slope = 1;    // least-squares slope through the origin, unshrunk (1 when undefined)
    double discount = 1; // for the next claims: the shrunk slope, in [0, max_discount]
};

ClaimCalibration calibrate_claims(const std::vector<ClaimPair>& pairs,
                                  const ClaimCalibrationSettings& s = {});

} // namespace infrarsi::model
