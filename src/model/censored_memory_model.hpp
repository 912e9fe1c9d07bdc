#pragma once
// Censored peak-memory model. A successful trial observes its peak memory; an OOM trial observes only that
// the peak exceeded the limit (right-censored). Model (Tobit regression, Tobin 1958; as a censored
// response for Bayesian optimization: arXiv:1310.1947; the GP version: Groot & Lucas, "Gaussian process
// regression with censored data using expectation propagation", 2012):
//
//   log peak(x) = log prior_estimate(x) + w . z(x) + e,   e ~ N(0, s^2),   w ~ N(0, diag(tau^2))
//   z(x) = [1, features(x), log prior_estimate(x) - ref]
//
// The analytic estimate is the prior mean; w is a linear correction, so one OOM moves the prediction of
// every configuration that shares its features. Fit: MAP for w by Newton's method (the Tobit log-likelihood
// is concave in w for fixed s), Laplace approximation of the posterior of w, for every s and feature prior
// scale tau of a grid; a prediction averages the grid's fits weighted by their Laplace evidence (Bayesian
// model averaging over the hyperparameters, moment-matched to one normal: a point choice of s made the 90%
// interval cover ~80% of held-out peaks, scripts/bench-tuners). Without an analytic estimate (one constant
// prior) the evidence picks a wide tau: the features then carry the whole memory effect. Cost is linear in
// the number of trials, so it scales to thousands. Why linear and not a GP correction: the errors of analytic
// memory estimates are systematic per term (activations, buffers, fragmentation), which a linear correction
// over the encoded knobs captures with few observations; a GP correction would need many more OOMs to move.
#include <Eigen/Dense>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace infrarsi::model {

struct MemoryPoint {
    Eigen::VectorXd features;
    double prior_peak_bytes = 0;
    bool censored = false; // true: OOM, peak > bytes (the limit); false: peak == bytes (measured)
    double bytes = 0;
};

struct MemoryModelSettings {
    double intercept_prior_sd = 0.7; // log scale: a prior off by 2x is one sd away
    // Per encoded feature, chosen with the residual sd by the evidence: small corrections of an analytic
    // estimate, or, without one (a constant prior), the features must carry the whole memory effect.
    std::vector<double> feature_prior_sd_grid = {0.15, 0.4, 1.0};
    double prior_slope_prior_sd = 0.2; // on log prior estimate (errors that grow with size)
    std::vector<double> residual_sd_grid = {0.02, 0.04, 0.07, 0.12, 0.2, 0.35};
    double residual_sd_prior_median = 0.07; // weak log-normal prior on s (sd 1 in log)
};

struct MemoryPrediction {
    double mean_log = 0; // of peak bytes
    double sd_log = 0;   // predictive, including the residual
};

class CensoredMemoryModel {
  public:
    // No points: the model is its prior (the analytic estimate with wide uncertainty).
    void fit(const std::vector<MemoryPoint>& points, int feature_count,
             const MemoryModelSettings& settings = {});

    // Unconditional prediction from the correction; see below for observed OOMs.
    MemoryPrediction predict(const Eigen::VectorXd& features, double prior_peak_bytes) const;
    // For a configuration that itself OOMed (same features and prior), the peak is known to exceed that
    // limit: the probability is 1 at or below it and the lower bound is at least that limit.
    double probability_over(const Eigen::VectorXd& features, double prior_peak_bytes,
                            double limit_bytes) const;
    // Lower confidence bound on peak bytes, `sd_multiple` predictive sds below the mean.
    double lower_bound(const Eigen::VectorXd& features, double prior_peak_bytes,
                       double sd_multiple = 1.645) const;

    const Eigen::VectorXd& correction() const { return w_; }
    double residual_sd() const { return sigma_; }

  private:
    Eigen::VectorXd design(const Eigen::VectorXd& features, double prior_peak_bytes) const;
    std::uint64_t key(const Eigen::VectorXd& features, double prior_peak_bytes) const;
    double censored_at(const Eigen::VectorXd& features, double prior_peak_bytes) const; // 0 when none
    std::unordered_map<std::uint64_t, double> censored_; // OOMed configurations -> largest limit exceeded
    struct Fit {
        Eigen::VectorXd w;
        Eigen::MatrixXd cov;
        double sigma = 0, weight = 0; // weight: the evidence while fitting, then its normalized share
    };
    std::vector<Fit> mixture_; // one per (feature prior sd, residual sd) of the grid
    Eigen::VectorXd w_;        // the best fit's (by evidence)
    Eigen::MatrixXd cov_;      // Laplace posterior covariance of w
    double sigma_ = 0.07, ref_ = 0;
    int feature_count_ = -1;
};

// Standard normal helpers shared by the models.
double normal_cdf(double x);
double normal_pdf(double x);
double log_normal_cdf(double x);
double inverse_mills(double x); // pdf(x) / cdf(x), stable for very negative x

} // namespace infrarsi::model
