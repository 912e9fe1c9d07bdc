#pragma once
// Hidden constraints: the probability that a configuration fails for a reason of its own (a crash, a broken
// contract), learned from the trials over the encoded space. Infrastructure failures (a node failure, a
// cancelled job) are never given to it.
//
// Model: Bayesian logistic regression with main effects and pairwise interactions,
//
//   logit P(fail | x) = m + b + sum_j w_j x_j + sum_{j<k} v_jk x_j x_k,
//   b ~ N(0, s_b^2), w_j ~ N(0, s_1^2), v_jk ~ N(0, s_2^2),   m = logit(prior failure rate),
//
// fitted in its dual form: a Gaussian-process classifier whose kernel is exactly that feature map,
//   k(x, x') = s_b^2 + s_1^2 x.x' + s_2^2 ((x.x')^2 - sum_j (x_j x'_j)^2) / 2,
// with the Laplace approximation (Rasmussen & Williams 2006, algorithms 3.1 and 3.2) and the probit
// approximation of the predictive probability. Why this and not a random forest (SCOOT) or a stationary GP
// classifier: the failures seen in practice are a knob value that fails whatever else is set (a main effect:
// the reference BLAS, a launcher option) or a pair that fails together (two ranks per node with a patch that
// leaves parameters unused, which DDP refuses): exactly the terms of the model, so two or three failures that
// share a value move every candidate with that value, while successes elsewhere keep the rest of the space
// open. A forest needs many more trials to split on a value, and a stationary kernel spreads a failure to
// whatever is near in the encoding rather than to what shares the failing value. Cost: cubic in the points
// used (at most `max_points`: every failure up to half of them, the rest a seeded sample of the successes),
// linear in the candidates scored.
#include <Eigen/Dense>
#include <cstdint>
#include <vector>

namespace infrarsi::model {

struct FeasibilitySettings {
    double prior_failure_rate = 0.1; // before any trial: failures are the exception
    double intercept_sd = 1.0;       // a campaign whose every trial fails moves the whole space
    double main_effect_sd = 2.0;     // one knob value can turn a configuration from working to failing
    double interaction_sd = 0.5;     // ...and so can a pair of them (weaker a priori: there are many pairs)
    int max_points = 300;
    std::uint64_t seed = 1;
};

class FeasibilityModel {
  public:
    // X: one row per trial; failed: whether it failed for a reason of its own. No failure among them: the
    // model is inactive and every probability is 0 (nothing has been seen to fail).
    void fit(const Eigen::MatrixXd& X, const std::vector<bool>& failed,
             const FeasibilitySettings& settings = {});
    bool active() const { return active_; }
    // P(the configuration fails), in [0, 1].
    double probability(const Eigen::VectorXd& x) const;
    // The latent mean alone (logit scale, no variance): linear in the points, for scanning many candidates.
    double mean_logit(const Eigen::VectorXd& x) const;

  private:
    Eigen::VectorXd kernel_column(const Eigen::VectorXd& x) const; // k(X_, x)
    double kernel(const Eigen::VectorXd& a, const Eigen::VectorXd& b) const;
    bool active_ = false;
    FeasibilitySettings s_;
    double prior_mean_ = 0;
    Eigen::MatrixXd X_;
    Eigen::VectorXd grad_; // d log p(y | f) / d f at the mode
    Eigen::VectorXd sqrt_w_;
    Eigen::MatrixXd L_; // chol(I + W^1/2 K W^1/2)
};

// The rule beside the model: a value that failed every time it ran is not tried again. An encoded feature's
// value (a knob value, a patch on or off) seen in at least `min_failures` trials that failed for a reason of
// their own and in none that ran (ok, OOM, timeout, stopped) is avoided; so is a pair of values that failed
// every time. Values are blamed greedily, the one that explains the most failures first, and a value whose
// failures are all explained already is not blamed. The model above may stay unsure after two
// crashes of one value (its prior calls failures rare); what failed every time needs no more evidence until
// something changes (a new campaign). `ran[i]`: trial i ran (false: it failed for a reason of its own).
struct FailureRule {
    struct Value {
        int feature = 0;
        double value = 0;
    };
    std::vector<Value> values;                  // each avoided alone
    std::vector<std::pair<Value, Value>> pairs; // each avoided together
    bool avoids(const Eigen::VectorXd& x) const;
};
FailureRule consistent_failures(const std::vector<Eigen::VectorXd>& trial_features,
                                const std::vector<bool>& ran, int min_failures = 2);

} // namespace infrarsi::model
