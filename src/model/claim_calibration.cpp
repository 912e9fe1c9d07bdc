#include "model/claim_calibration.hpp"

#include <algorithm>
#include <cmath>

namespace infrarsi::model {

ClaimCalibration calibrate_claims(const std::vector<ClaimPair>& pairs, const ClaimCalibrationSettings& s) {
    std::vector<double> x, y; // log claimed, log measured
    for (const auto& p : pairs)
        if (std::isfinite(p.claimed) && std::isfinite(p.measured) && p.claimed > 0 && p.measured > 0) {
            x.push_back(std::log(p.claimed));
            y.push_back(std::log(p.measured));
        }
    ClaimCalibration c;
    c.pairs = static_cast<int>(x.size());
    if (x.empty()) return c;
    double sxx = 0, sxy = 0, abs_error = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        sxx += x[i] * x[i];
        sxy += x[i] * y[i];
        abs_error += std::abs(x[i] - y[i]);
    }
    c.error = abs_error / static_cast<double>(x.size());
    if (sxx > 1e-12) c.slope = sxy / sxx;
    // The residual variance: the least-squares residuals pooled with the prior guess.
    double rss = 0;
    for (std::size_t i = 0; i < x.size(); ++i)
        rss += std::pow(y[i] - c.slope * x[i], 2);
    const double n0 = std::max(s.residual_prior_pairs, 1e-9);
    const double sigma2 =
        (n0 * s.residual_prior_sd * s.residual_prior_sd + rss) / (n0 + static_cast<double>(x.size()));
    const double tau2 = std::max(s.slope_prior_sd * s.slope_prior_sd, 1e-12);
    // Posterior mean of the slope under the prior N(1, tau2): precision-weighted.
    const double b = (sxy / sigma2 + 1.0 / tau2) / (sxx / sigma2 + 1.0 / tau2);
    c.discount = std::clamp(b, 0.0, s.max_discount);
    double left = 0;
    for (std::size_t i = 0; i < x.size(); ++i)
        left += std::abs(c.discount * x[i] - y[i]);
    c.discounted_error = left / static_cast<double>(x.size());
    return c;
}

} // namespace infrarsi::model
