#include "model/claim_prior.hpp"

#include <algorithm>
#include <cmath>

namespace infrarsi::model {

namespace {

// log of a claimed factor: 0 for one that is not a positive number, within +-log(kMaxClaimedFactor).
double log_factor(double f) {
    if (!std::isfinite(f) || !(f > 0)) return 0;
    const double bound = std::log(kMaxClaimedFactor);
    return std::clamp(std::log(f), -bound, bound);
}

double finite_or(double v, double fallback) {
    return std::isfinite(v) ? v : fallback;
}

} // namespace

double claim_prior_sd(double confidence, double calibration_error) {
    const double c = std::clamp(finite_or(confidence, 0.0), 0.0, 1.0);
    const double sd = 0.05 + 0.45 * (1 - c);
    const double error = std::clamp(finite_or(calibration_error, 0.0), 0.0, std::log(kMaxClaimedFactor));
    return std::max(sd, std::sqrt(M_PI / 2) * error);
}

bool orders_initial_design(double prior_variance) {
    return std::sqrt(std::max(0.0, prior_variance)) < kVagueClaimSd - 1e-9;
}

double claimed_log_step_effect(const EffectClaim& claim) {
    return -std::max(0.0, finite_or(claim.discount, 1.0)) * log_factor(claim.speedup);
}

double claimed_memory_factor(const EffectClaim& claim) {
    return std::exp(std::max(0.0, finite_or(claim.memory_discount, 1.0)) * log_factor(claim.memory_factor));
}

GpBasisPrior runtime_claim_prior(const std::vector<EffectClaim>& claims) {
    GpBasisPrior p;
    p.mean.resize(static_cast<Eigen::Index>(claims.size()));
    p.variance.resize(static_cast<Eigen::Index>(claims.size()));
    for (std::size_t j = 0; j < claims.size(); ++j) {
        p.mean(static_cast<Eigen::Index>(j)) = claimed_log_step_effect(claims[j]);
        const double sd = claim_prior_sd(claims[j].confidence, claims[j].calibration_error);
        p.variance(static_cast<Eigen::Index>(j)) = sd * sd;
    }
    return p;
}

} // namespace infrarsi::model
