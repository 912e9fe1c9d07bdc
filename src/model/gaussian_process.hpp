#pragma once
// Gaussian-process regression with a squared-exponential kernel (ARD or one shared length scale), fitted
// by maximizing the log marginal likelihood plus weak log-normal priors on the hyperparameters (MAP-II;
// Rasmussen & Williams 2006, ch. 5), with L-BFGS from a few starts. The observation noise never goes below
// a given floor: the doctor's calibrated measurement variance.
//
// Scaling: above `max_points` observations the posterior uses a subset of data (the best quarter by target
// plus a seeded random sample of the rest; Chalupka, Williams & Murray 2013 find subset-of-data a strong
// baseline among GP approximations), and hyperparameters are fitted on at most `fit_points` of them. Cost is
// then bounded by max_points^3 whatever the number of trials.
#include <Eigen/Dense>
#include <cstdint>
#include <optional>

namespace infrarsi::model {

struct GpHyperparameters {
    Eigen::VectorXd log_lengthscales; // one per feature (ARD) or a single shared one
    double log_signal_variance = 0;   // of the standardized target
    double log_extra_noise = 0;       // noise variance above the floor, standardized units
};

// Explicit basis functions with a Gaussian prior on their coefficients (Rasmussen & Williams 2006, section
// 2.7, after O'Hagan 1978): the last `mean.size()` columns of X are h(x), indicators in [0, 1], not inputs of
// the kernel, and f(x) = g(x) + h(x)^T beta with g ~ GP(0, k) and beta ~ N(mean, diag(variance)). With beta
// marginalized out this is a GP with mean h(x)^T mean and covariance k(x, x') + h(x)^T diag(variance) h(x')
// (their eq. 2.39): the prior mean is where the model starts, and the data move beta away from it as they
// move any GP, the more so the wider its variance. This is how an agent's claim about a change enters the
// runtime model (model/claim_prior.hpp). Empty: no basis (the plain GP).
struct GpBasisPrior {
    Eigen::VectorXd mean;     // per basis function, target units
    Eigen::VectorXd variance; // per basis function, target units (>= 0)
    int size() const { return static_cast<int>(mean.size()); }
};

struct GpSettings {
    bool ard = true;
    int restarts = 1;                   // starts besides the warm start (or the default start)
    int max_iterations = 25;            // L-BFGS iterations per start
    double noise_variance_floor = 1e-4; // target units (log step time): the calibrated measurement variance
    int max_points = 300;               // subset of data for the posterior above this
    int fit_points = 100;               // subset for hyperparameter fitting
    std::uint64_t seed = 1;
    std::optional<GpHyperparameters> warm_start;
    GpBasisPrior basis; // the last basis.size() columns of X are its functions' values
};

// The posterior at a set of points, with what batch selection needs to condition on fantasies cheaply:
// cov(i, j) = prior_cov(i, j) - whitened.col(i) . whitened.col(j).
struct GpPosterior {
    Eigen::VectorXd mean;     // target units
    Eigen::VectorXd variance; // latent (noise-free) variance, target units
    Eigen::MatrixXd whitened; // L^{-1} K(X, Xs) scaled to target units: (points used) x (query points)
};

class GaussianProcess {
  public:
    // X: one row per observation; y: targets. Throws Error on empty or mismatched input.
    void fit(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, const GpSettings& settings);

    GpPosterior posterior(const Eigen::MatrixXd& Xs) const;
    // Posterior mean only: linear in the number of points used, for scoring many points cheaply.
    Eigen::VectorXd mean(const Eigen::MatrixXd& Xs) const;
    // Prior covariance (target units) between rows of A and B.
    Eigen::MatrixXd prior_covariance(const Eigen::MatrixXd& A, const Eigen::MatrixXd& B) const;
    // Observation noise variance in target units (floor plus fitted excess).
    double noise_variance() const;
    // Prior (latent) variance in target units: an upper bound on any posterior variance (with a basis, the
    // kernel's plus every basis coefficient's: its functions are at most 1).
    double signal_variance() const;
    const GpHyperparameters& hyperparameters() const { return hyp_; }
    double log_marginal_likelihood() const { return lml_; }
    int points_used() const { return static_cast<int>(X_.rows()); }

  private:
    Eigen::MatrixXd kernel(const Eigen::MatrixXd& A, const Eigen::MatrixXd& B) const; // standardized units
    Eigen::VectorXd basis_mean(const Eigen::MatrixXd& Xs) const;                      // target units
    Eigen::MatrixXd X_;
    Eigen::VectorXd basis_mean_, basis_variance_; // target units; standardized: / y_scale_^2
    Eigen::VectorXd alpha_;
    Eigen::MatrixXd L_; // Cholesky factor of K + noise
    GpHyperparameters hyp_;
    double y_mean_ = 0, y_scale_ = 1, floor_std_ = 0, lml_ = 0;
};

} // namespace infrarsi::model
