#include "model/gaussian_process.hpp"

#include "util/error.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <numeric>
#include <random>

namespace infrarsi::model {
namespace {

constexpr double kLog2Pi = 1.8378770664093453;
constexpr double kBound = 6.0; // hyperparameters live in [-kBound, kBound] (log scale): keeps K well posed

// Weak priors (mean, sd) on the log hyperparameters: features are scaled to about [0, 1], targets are
// standardized, so length scales near 1, unit signal variance and small excess noise are typical.
constexpr double kLengthMean = 0.0, kLengthSd = 1.5;
constexpr double kSignalMean = 0.0, kSignalSd = 1.5;
constexpr double kNoiseMean = -4.0, kNoiseSd = 2.0;

using Objective = std::function<double(const Eigen::VectorXd&, Eigen::VectorXd&)>;

// Limited-memory BFGS (Nocedal & Wright 2006, alg. 7.4/7.5) with a backtracking Armijo line search and box
// clamping. Small and dependency-free; enough for a few dozen hyperparameters.
double minimize_lbfgs(const Objective& f, Eigen::VectorXd& x, int max_iterations) {
    const int memory = 6;
    std::deque<Eigen::VectorXd> S, Y;
    Eigen::VectorXd g(x.size());
    double fx = f(x, g);
    for (int it = 0; it < max_iterations; ++it) {
        if (!std::isfinite(fx) || g.norm() < 1e-5) break;
        Eigen::VectorXd q = g;
        std::vector<double> a(S.size());
        for (int i = static_cast<int>(S.size()) - 1; i >= 0; --i) {
            a[i] = S[i].dot(q) / Y[i].dot(S[i]);
            q -= a[i] * Y[i];
        }
        if (!S.empty())
            q *= S.back().dot(Y.back()) / Y.back().squaredNorm();
        else
            q /= std::max(1.0, g.norm());
        for (size_t i = 0; i < S.size(); ++i)
            q += S[i] * (a[i] - Y[i].dot(q) / Y[i].dot(S[i]));
        Eigen::VectorXd d = -q;
        if (d.dot(g) >= 0) d = -g / std::max(1.0, g.norm()), S.clear(), Y.clear();
        double step = 1.0, fnew = 0;
        Eigen::VectorXd xnew, gnew(x.size());
        bool accepted = false;
        for (int ls = 0; ls < 12; ++ls, step *= 0.4) {
            xnew = (x + step * d).cwiseMax(-kBound).cwiseMin(kBound);
            fnew = f(xnew, gnew);
            if (std::isfinite(fnew) && fnew <= fx + 1e-4 * g.dot(xnew - x)) {
                accepted = true;
                break;
            }
        }
        if (!accepted) break;
        Eigen::VectorXd s = xnew - x, y = gnew - g;
        if (s.dot(y) > 1e-10) {
            S.push_back(s), Y.push_back(y);
            if (static_cast<int>(S.size()) > memory) S.pop_front(), Y.pop_front();
        }
        bool converged = std::abs(fx - fnew) < 1e-7 * std::max(1.0, std::abs(fx));
        x = xnew, g = gnew, fx = fnew;
        if (converged) break;
    }
    return fx;
}

// Indices of a subset of at most m points: the best quarter (smallest y: the region that decides the
// acquisition), then a seeded random sample of the rest.
std::vector<int> subset(const Eigen::VectorXd& y, int m, std::mt19937_64& rng) {
    const int n = static_cast<int>(y.size());
    std::vector<int> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    if (n <= m) return idx;
    int best = m / 4;
    std::partial_sort(idx.begin(), idx.begin() + best, idx.end(), [&](int a, int b) { return y(a) < y(b); });
    std::shuffle(idx.begin() + best, idx.end(), rng);
    idx.resize(m);
    std::sort(idx.begin(), idx.end());
    return idx;
}

Eigen::MatrixXd rows(const Eigen::MatrixXd& X, const std::vector<int>& idx) {
    Eigen::MatrixXd out(idx.size(), X.cols());
    for (size_t i = 0; i < idx.size(); ++i)
        out.row(i) = X.row(idx[i]);
    return out;
}

Eigen::MatrixXd squared_distances(const Eigen::MatrixXd& A, const Eigen::MatrixXd& B) {
    Eigen::MatrixXd D = -2.0 * A * B.transpose();
    D.colwise() += A.rowwise().squaredNorm();
    D.rowwise() += B.rowwise().squaredNorm().transpose();
    return D.cwiseMax(0.0);
}

struct Unpacked {
    Eigen::ArrayXd inv_lengthscales; // per feature
    double signal = 1, noise = 0;    // standardized units (noise includes the floor)
};

Unpacked unpack(const Eigen::VectorXd& theta, int d, bool ard, double floor_std) {
    Unpacked u;
    u.inv_lengthscales = ard ? Eigen::ArrayXd((-theta.head(d)).array().exp())
                             : Eigen::ArrayXd::Constant(d, std::exp(-theta(0)));
    int k = ard ? d : 1;
    u.signal = std::exp(theta(k));
    u.noise = floor_std + std::exp(theta(k + 1));
    return u;
}

// Negative log marginal likelihood plus negative log prior, and its gradient (Rasmussen & Williams 2006,
// eq. 2.30 and 5.9): dL/dtheta = -1/2 tr((alpha alpha^T - K^{-1}) dK/dtheta).
// `fixed`: a covariance that does not depend on theta (the explicit basis's), added to K; empty when none.
// Its derivative is zero, so the gradient's terms are those of the kernel and the noise alone.
double negative_log_posterior(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, bool ard, double floor_std,
                              const Eigen::MatrixXd& fixed, const Eigen::VectorXd& theta,
                              Eigen::VectorXd& grad) {
    const int n = static_cast<int>(X.rows()), d = static_cast<int>(X.cols());
    Unpacked u = unpack(theta, d, ard, floor_std);
    Eigen::MatrixXd Xs = X.array().rowwise() * u.inv_lengthscales.transpose();
    Eigen::MatrixXd Kf = (-0.5 * squared_distances(Xs, Xs)).array().exp() * u.signal;
    Eigen::MatrixXd K = Kf;
    if (fixed.size() > 0) K += fixed;
    K.diagonal().array() += u.noise;
    Eigen::LLT<Eigen::MatrixXd> llt(K);
    if (llt.info() != Eigen::Success) return std::numeric_limits<double>::infinity();
    Eigen::VectorXd alpha = llt.solve(y);
    const Eigen::MatrixXd& L = llt.matrixLLT();
    double value = 0.5 * y.dot(alpha) + L.diagonal().array().log().sum() + 0.5 * n * kLog2Pi;

    Eigen::MatrixXd W = alpha * alpha.transpose() - llt.solve(Eigen::MatrixXd::Identity(n, n));
    Eigen::MatrixXd M = W.cwiseProduct(Kf);
    grad.setZero(theta.size());
    // sum_ij M_ij (x_ik - x_jk)^2 = 2 (x_k^2 . M1 - x_k . M x_k) for symmetric M; on length-scaled features
    // this is the derivative with respect to log lengthscale_k up to the factor -1/2.
    Eigen::VectorXd r = M.rowwise().sum();
    Eigen::MatrixXd MX = M * Xs;
    Eigen::VectorXd per_feature = 2.0 * ((Xs.array().square().matrix().transpose() * r).array() -
                                         (Xs.array() * MX.array()).colwise().sum().transpose());
    if (ard)
        grad.head(d) = -0.5 * per_feature;
    else
        grad(0) = -0.5 * per_feature.sum();
    int k = ard ? d : 1;
    grad(k) = -0.5 * M.sum();
    grad(k + 1) = -0.5 * W.trace() * std::exp(theta(k + 1));

    // Priors.
    auto prior = [&](int i, double mean, double sd) {
        double z = (theta(i) - mean) / sd;
        value += 0.5 * z * z;
        grad(i) += z / sd;
    };
    for (int i = 0; i < k; ++i)
        prior(i, kLengthMean, kLengthSd);
    prior(k, kSignalMean, kSignalSd);
    prior(k + 1, kNoiseMean, kNoiseSd);
    return value;
}

} // namespace

void GaussianProcess::fit(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, const GpSettings& s) {
    if (X.rows() == 0 || X.rows() != y.size())
        throw Error("GP fit needs one target per row and at least one row", "GaussianProcess::fit");
    if (!y.allFinite()) throw Error("GP targets must be finite", "GaussianProcess::fit");
    if (s.max_points < 2 || s.fit_points < 2) throw Error("GP subset sizes must be at least 2", "GpSettings");
    const int m = s.basis.size();
    if (s.basis.variance.size() != m || m >= X.cols() || !s.basis.mean.allFinite() ||
        !s.basis.variance.allFinite() || (m > 0 && s.basis.variance.minCoeff() < 0))
        throw Error("GP basis prior: " + std::to_string(m) + " means, " +
                        std::to_string(s.basis.variance.size()) + " variances for " +
                        std::to_string(X.cols()) + " columns",
                    "GpSettings::basis", "as many finite means as variances (>= 0), fewer than the columns");
    basis_mean_ = s.basis.mean;
    basis_variance_ = s.basis.variance;
    const int d = static_cast<int>(X.cols()) - m; // the kernel's inputs
    std::mt19937_64 rng(s.seed);

    std::vector<int> used = subset(y, s.max_points, rng);
    X_ = rows(X, used);
    Eigen::VectorXd yu(used.size());
    for (size_t i = 0; i < used.size(); ++i)
        yu(i) = y(used[i]);
    if (m > 0) yu -= basis_mean(X_); // the GP models what the basis's prior mean leaves
    y_mean_ = yu.mean();
    double var = (yu.array() - y_mean_).square().mean();
    y_scale_ = std::sqrt(std::max(var, s.noise_variance_floor));
    Eigen::VectorXd ys = (yu.array() - y_mean_) / y_scale_;
    floor_std_ = s.noise_variance_floor / (y_scale_ * y_scale_);

    std::vector<int> fit_idx = subset(ys, s.fit_points, rng);
    Eigen::MatrixXd Xf = rows(X_, fit_idx);
    Eigen::VectorXd yf(fit_idx.size());
    for (size_t i = 0; i < fit_idx.size(); ++i)
        yf(i) = ys(fit_idx[i]);

    const int k = s.ard ? d : 1;
    Eigen::MatrixXd fixed; // the basis's covariance between the fitted points, standardized
    if (m > 0) {
        const Eigen::MatrixXd H = Xf.rightCols(m);
        fixed = H * (basis_variance_ / (y_scale_ * y_scale_)).asDiagonal() * H.transpose();
    }
    const Eigen::MatrixXd Xk = Xf.leftCols(d);
    Objective objective = [&](const Eigen::VectorXd& theta, Eigen::VectorXd& g) {
        return negative_log_posterior(Xk, yf, s.ard, floor_std_, fixed, theta, g);
    };
    Eigen::VectorXd start(k + 2);
    start.head(k).setConstant(std::log(0.7));
    start(k) = 0.0;
    start(k + 1) = std::log(0.05);
    std::vector<Eigen::VectorXd> starts;
    if (s.warm_start && s.warm_start->log_lengthscales.size() == k) {
        Eigen::VectorXd w(k + 2);
        w << s.warm_start->log_lengthscales, s.warm_start->log_signal_variance, s.warm_start->log_extra_noise;
        starts.push_back(w);
    } else {
        starts.push_back(start);
    }
    std::normal_distribution<double> jitter(0.0, 0.8);
    for (int r = 0; r < s.restarts; ++r) {
        Eigen::VectorXd t = start;
        for (int i = 0; i < t.size(); ++i)
            t(i) += jitter(rng);
        starts.push_back(t.cwiseMax(-kBound).cwiseMin(kBound));
    }
    double best = std::numeric_limits<double>::infinity();
    Eigen::VectorXd best_theta = start;
    for (auto& t : starts) {
        double v = minimize_lbfgs(objective, t, s.max_iterations);
        if (v < best) best = v, best_theta = t;
    }
    hyp_.log_lengthscales = best_theta.head(k);
    hyp_.log_signal_variance = best_theta(k);
    hyp_.log_extra_noise = best_theta(k + 1);

    // Posterior on the whole subset with the fitted hyperparameters; add jitter if K is numerically singular.
    Eigen::MatrixXd K = kernel(X_, X_);
    Unpacked u = unpack(best_theta, d, s.ard, floor_std_);
    for (double jitter_add = 0;; jitter_add = std::max(1e-8, jitter_add * 10)) {
        Eigen::MatrixXd Kn = K;
        Kn.diagonal().array() += u.noise + jitter_add;
        Eigen::LLT<Eigen::MatrixXd> llt(Kn);
        if (llt.info() == Eigen::Success) {
            L_ = llt.matrixL();
            alpha_ = llt.solve(ys);
            lml_ = -(0.5 * ys.dot(alpha_) + L_.diagonal().array().log().sum() + 0.5 * ys.size() * kLog2Pi) -
                   ys.size() * std::log(y_scale_);
            break;
        }
        if (jitter_add > 1.0)
            throw Error("GP kernel matrix is not positive definite", "GaussianProcess::fit");
    }
}

Eigen::MatrixXd GaussianProcess::kernel(const Eigen::MatrixXd& A, const Eigen::MatrixXd& B) const {
    const int m = static_cast<int>(basis_mean_.size());
    const int d = static_cast<int>(X_.cols()) - m;
    bool ard = hyp_.log_lengthscales.size() == d && d > 1;
    Eigen::ArrayXd inv = ard ? Eigen::ArrayXd((-hyp_.log_lengthscales).array().exp())
                             : Eigen::ArrayXd::Constant(d, std::exp(-hyp_.log_lengthscales(0)));
    if (m == 0) {
        Eigen::MatrixXd As = A.array().rowwise() * inv.transpose();
        Eigen::MatrixXd Bs = B.array().rowwise() * inv.transpose();
        return (-0.5 * squared_distances(As, Bs)).array().exp() * std::exp(hyp_.log_signal_variance);
    }
    Eigen::MatrixXd As = A.leftCols(d).array().rowwise() * inv.transpose();
    Eigen::MatrixXd Bs = B.leftCols(d).array().rowwise() * inv.transpose();
    Eigen::MatrixXd K = (-0.5 * squared_distances(As, Bs)).array().exp() * std::exp(hyp_.log_signal_variance);
    K += A.rightCols(m) * (basis_variance_ / (y_scale_ * y_scale_)).asDiagonal() * B.rightCols(m).transpose();
    return K;
}

Eigen::VectorXd GaussianProcess::basis_mean(const Eigen::MatrixXd& Xs) const {
    const auto m = basis_mean_.size();
    if (m == 0) return Eigen::VectorXd::Zero(Xs.rows());
    return Xs.rightCols(m) * basis_mean_;
}

double GaussianProcess::noise_variance() const {
    return (floor_std_ + std::exp(hyp_.log_extra_noise)) * y_scale_ * y_scale_;
}

double GaussianProcess::signal_variance() const {
    return std::exp(hyp_.log_signal_variance) * y_scale_ * y_scale_ + basis_variance_.sum();
}

Eigen::MatrixXd GaussianProcess::prior_covariance(const Eigen::MatrixXd& A, const Eigen::MatrixXd& B) const {
    return kernel(A, B) * (y_scale_ * y_scale_);
}

Eigen::VectorXd GaussianProcess::mean(const Eigen::MatrixXd& Xs) const {
    if (X_.rows() == 0) throw Error("GP mean asked before fit", "GaussianProcess::mean");
    if (Xs.cols() != X_.cols()) throw Error("query features have the wrong length", "GaussianProcess::mean");
    Eigen::VectorXd out = (kernel(Xs, X_) * alpha_).array() * y_scale_ + y_mean_;
    if (basis_mean_.size() > 0) out += basis_mean(Xs);
    return out;
}

GpPosterior GaussianProcess::posterior(const Eigen::MatrixXd& Xs) const {
    if (X_.rows() == 0) throw Error("GP posterior asked before fit", "GaussianProcess::posterior");
    if (Xs.cols() != X_.cols())
        throw Error("query features have the wrong length", "GaussianProcess::posterior");
    Eigen::MatrixXd Ks = kernel(X_, Xs); // m x P
    GpPosterior p;
    p.mean = (Ks.transpose() * alpha_).array() * y_scale_ + y_mean_;
    p.whitened = L_.triangularView<Eigen::Lower>().solve(Ks);
    double signal = std::exp(hyp_.log_signal_variance);
    if (const auto m = basis_mean_.size(); m > 0) {
        p.mean += basis_mean(Xs);
        // Each point's prior variance: the kernel's plus its basis's, h^T diag(variance) h.
        const Eigen::ArrayXd prior =
            signal +
            (Xs.rightCols(m).array().square().matrix() * basis_variance_).array() / (y_scale_ * y_scale_);
        p.variance = ((prior - p.whitened.colwise().squaredNorm().transpose().array()).cwiseMax(1e-12) *
                      y_scale_ * y_scale_)
                         .matrix();
        p.whitened *= y_scale_;
        return p;
    }
    p.variance = ((signal - p.whitened.colwise().squaredNorm().array()).cwiseMax(1e-12) * y_scale_ * y_scale_)
                     .matrix();
    p.whitened *= y_scale_;
    return p;
}

} // namespace infrarsi::model
