#include "model/feasibility_model.hpp"

#include "model/censored_memory_model.hpp"
#include "util/error.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace infrarsi::model {

namespace {
double sigmoid(double f) {
    return f >= 0 ? 1 / (1 + std::exp(-f)) : std::exp(f) / (1 + std::exp(f));
}
} // namespace

double FeasibilityModel::kernel(const Eigen::VectorXd& a, const Eigen::VectorXd& b) const {
    const double dot = a.dot(b);
    const double sq = a.cwiseProduct(b).squaredNorm();
    return s_.intercept_sd * s_.intercept_sd + s_.main_effect_sd * s_.main_effect_sd * dot +
           s_.interaction_sd * s_.interaction_sd * 0.5 * (dot * dot - sq);
}

Eigen::VectorXd FeasibilityModel::kernel_column(const Eigen::VectorXd& x) const {
    Eigen::VectorXd k(X_.rows());
    for (Eigen::Index i = 0; i < X_.rows(); ++i)
        k(i) = kernel(X_.row(i).transpose(), x);
    return k;
}

void FeasibilityModel::fit(const Eigen::MatrixXd& X, const std::vector<bool>& failed,
                           const FeasibilitySettings& settings) {
    if (static_cast<std::size_t>(X.rows()) != failed.size())
        throw Error("feasibility data: " + std::to_string(X.rows()) + " rows, " +
                        std::to_string(failed.size()) + " labels",
                    "FeasibilityModel::fit");
    s_ = settings;
    active_ = std::find(failed.begin(), failed.end(), true) != failed.end();
    if (!active_) return;
    prior_mean_ = std::log(s_.prior_failure_rate / (1 - s_.prior_failure_rate));

    // The points used: every failure up to half the budget, the successes sampled for the rest.
    std::vector<int> fail, ok;
    for (std::size_t i = 0; i < failed.size(); ++i)
        (failed[i] ? fail : ok).push_back(static_cast<int>(i));
    std::mt19937_64 rng(s_.seed);
    const int cap = std::max(2, s_.max_points);
    if (static_cast<int>(fail.size()) > cap / 2) {
        std::shuffle(fail.begin(), fail.end(), rng);
        fail.resize(cap / 2);
    }
    const int room = cap - static_cast<int>(fail.size());
    if (static_cast<int>(ok.size()) > room) {
        std::shuffle(ok.begin(), ok.end(), rng);
        ok.resize(room);
    }
    std::vector<int> use = fail;
    use.insert(use.end(), ok.begin(), ok.end());
    const int n = static_cast<int>(use.size());
    X_.resize(n, X.cols());
    Eigen::VectorXd t(n);
    for (int i = 0; i < n; ++i) {
        X_.row(i) = X.row(use[i]);
        t(i) = failed[use[i]] ? 1.0 : 0.0;
    }
    Eigen::MatrixXd K(n, n);
    for (int i = 0; i < n; ++i)
        for (int j = 0; j <= i; ++j)
            K(i, j) = K(j, i) = kernel(X_.row(i).transpose(), X_.row(j).transpose());

    // Newton's method for the mode of p(g | y), g = f - m (R&W algorithm 3.1).
    Eigen::VectorXd g = Eigen::VectorXd::Zero(n), a = Eigen::VectorXd::Zero(n);
    Eigen::VectorXd pi(n), w(n);
    for (int it = 0; it < 50; ++it) {
        for (int i = 0; i < n; ++i) {
            pi(i) = sigmoid(prior_mean_ + g(i));
            w(i) = std::max(pi(i) * (1 - pi(i)), 1e-10);
        }
        sqrt_w_ = w.cwiseSqrt();
        Eigen::MatrixXd B = sqrt_w_.asDiagonal() * K * sqrt_w_.asDiagonal();
        B.diagonal().array() += 1.0;
        Eigen::LLT<Eigen::MatrixXd> llt(B);
        L_ = llt.matrixL();
        Eigen::VectorXd b = w.cwiseProduct(g) + (t - pi);
        Eigen::VectorXd c = llt.solve(sqrt_w_.cwiseProduct(K * b));
        Eigen::VectorXd a_new = b - sqrt_w_.cwiseProduct(c);
        Eigen::VectorXd g_new = K * a_new;
        const double step = (g_new - g).cwiseAbs().maxCoeff();
        a = a_new;
        g = g_new;
        if (step < 1e-6) break;
    }
    for (int i = 0; i < n; ++i) {
        pi(i) = sigmoid(prior_mean_ + g(i));
        w(i) = std::max(pi(i) * (1 - pi(i)), 1e-10);
    }
    sqrt_w_ = w.cwiseSqrt();
    Eigen::MatrixXd B = sqrt_w_.asDiagonal() * K * sqrt_w_.asDiagonal();
    B.diagonal().array() += 1.0;
    L_ = Eigen::LLT<Eigen::MatrixXd>(B).matrixL();
    grad_ = t - pi;
}

double FeasibilityModel::mean_logit(const Eigen::VectorXd& x) const {
    if (!active_) return -std::numeric_limits<double>::infinity();
    return prior_mean_ + kernel_column(x).dot(grad_);
}

double FeasibilityModel::probability(const Eigen::VectorXd& x) const {
    if (!active_) return 0.0;
    const Eigen::VectorXd k = kernel_column(x);
    const double mean = prior_mean_ + k.dot(grad_);
    const Eigen::VectorXd v = L_.triangularView<Eigen::Lower>().solve(sqrt_w_.cwiseProduct(k));
    const double var = std::max(0.0, kernel(x, x) - v.squaredNorm());
    // The probit approximation of E[sigmoid(f)], f ~ N(mean, var) (MacKay 1992).
    return sigmoid(mean / std::sqrt(1 + M_PI * var / 8));
}

bool FailureRule::avoids(const Eigen::VectorXd& x) const {
    for (const auto& v : values)
        if (x(v.feature) == v.value) return true;
    for (const auto& [a, b] : pairs)
        if (x(a.feature) == a.value && x(b.feature) == b.value) return true;
    return false;
}

FailureRule consistent_failures(const std::vector<Eigen::VectorXd>& trial_features,
                                const std::vector<bool>& ran, int min_failures) {
    FailureRule rule;
    if (trial_features.empty()) return rule;
    const auto d = static_cast<int>(trial_features.front().size());
    const auto n = trial_features.size();
    // Greedy cover: take the value (then the pair) that never ran and explains the most failures not yet
    // explained, until none explains min_failures more. A value that only appears in failures another value
    // already explains (the micro-batch of two crashed trials that both had the crashing optimizer) is not
    // blamed.
    std::vector<char> explained(n, 0);
    auto matches = [&](std::size_t t, int j, double v) { return trial_features[t](j) == v; };
    for (int pass = 0; pass < 2; ++pass) { // 0: single values, 1: pairs
        for (;;) {
            int best_failed = 0;
            FailureRule::Value best_a, best_b;
            for (std::size_t i = 0; i < n; ++i) {
                if (ran[i] || explained[i]) continue;
                const auto& x = trial_features[i];
                for (int j = 0; j < d; ++j)
                    for (int k = pass == 0 ? j : j + 1; k < (pass == 0 ? j + 1 : d); ++k) {
                        int failed = 0;
                        bool never_ran = true;
                        for (std::size_t t = 0; t < n && never_ran; ++t) {
                            if (!matches(t, j, x(j)) || !matches(t, k, x(k))) continue;
                            if (ran[t])
                                never_ran = false;
                            else if (!explained[t])
                                ++failed;
                        }
                        if (never_ran && failed > best_failed)
                            best_failed = failed, best_a = {j, x(j)}, best_b = {k, x(k)};
                    }
            }
            if (best_failed < min_failures) break;
            if (pass == 0)
                rule.values.push_back(best_a);
            else
                rule.pairs.push_back({best_a, best_b});
            for (std::size_t t = 0; t < n; ++t)
                if (!ran[t] && matches(t, best_a.feature, best_a.value) &&
                    matches(t, best_b.feature, best_b.value))
                    explained[t] = 1;
        }
    }
    return rule;
}

} // namespace infrarsi::model
