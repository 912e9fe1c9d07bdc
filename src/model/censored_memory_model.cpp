#include "model/censored_memory_model.hpp"

#include "util/error.hpp"

#include <cmath>
#include <functional>
#include <limits>

namespace infrarsi::model {

namespace {
constexpr double kLog2Pi = 1.8378770664093453;
}

double normal_cdf(double x) {
    return 0.5 * std::erfc(-x / std::sqrt(2.0));
}
double normal_pdf(double x) {
    return std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}

double log_normal_cdf(double x) {
    if (x > -30) return std::log(normal_cdf(x));
    // Asymptotic series (Abramowitz & Stegun 26.2.12) where erfc underflows.
    return -0.5 * x * x - std::log(-x) - 0.5 * kLog2Pi + std::log1p(-1.0 / (x * x));
}

double inverse_mills(double x) {
    if (x > -30) return normal_pdf(x) / normal_cdf(x);
    return -x / (1.0 - 1.0 / (x * x)); // same asymptotic series
}

Eigen::VectorXd CensoredMemoryModel::design(const Eigen::VectorXd& features, double prior_peak_bytes) const {
    if (features.size() != feature_count_)
        throw Error("memory model features have length " + std::to_string(features.size()),
                    "CensoredMemoryModel", std::to_string(feature_count_));
    if (!(prior_peak_bytes > 0)) throw Error("prior peak estimate must be positive", "CensoredMemoryModel");
    Eigen::VectorXd z(feature_count_ + 2);
    z(0) = 1.0;
    z.segment(1, feature_count_) = features;
    z(feature_count_ + 1) = std::log(prior_peak_bytes) - ref_;
    return z;
}

void CensoredMemoryModel::fit(const std::vector<MemoryPoint>& points, int feature_count,
                              const MemoryModelSettings& s) {
    if (feature_count < 0) throw Error("negative feature count", "CensoredMemoryModel::fit");
    feature_count_ = feature_count;
    const int p = feature_count + 2;
    if (s.feature_prior_sd_grid.empty() || s.residual_sd_grid.empty())
        throw Error("empty prior grid", "CensoredMemoryModel::fit");
    auto prior_variance = [&](double feature_sd) {
        Eigen::VectorXd v(p);
        v.setConstant(feature_sd * feature_sd);
        v(0) = s.intercept_prior_sd * s.intercept_prior_sd;
        v(p - 1) = s.prior_slope_prior_sd * s.prior_slope_prior_sd;
        return v;
    };

    ref_ = 0;
    for (const auto& pt : points) {
        if (!(pt.bytes > 0) || !(pt.prior_peak_bytes > 0))
            throw Error("memory observation with non-positive bytes", "CensoredMemoryModel::fit");
        ref_ += std::log(pt.prior_peak_bytes);
    }
    ref_ = points.empty() ? 0.0 : ref_ / points.size();
    censored_.clear();
    for (const auto& pt : points)
        if (pt.censored) {
            double& at = censored_[key(pt.features, pt.prior_peak_bytes)];
            at = std::max(at, pt.bytes);
        }
    mixture_.clear();
    w_ = Eigen::VectorXd::Zero(p);
    cov_ = prior_variance(s.feature_prior_sd_grid.front()).asDiagonal();
    sigma_ = s.residual_sd_prior_median;
    if (points.empty()) return;

    const int n = static_cast<int>(points.size());
    Eigen::MatrixXd Z(n, p);
    Eigen::VectorXd t(n); // log peak minus log prior (ok) or log limit minus log prior (censored)
    std::vector<bool> cens(n);
    for (int i = 0; i < n; ++i) {
        Z.row(i) = design(points[i].features, points[i].prior_peak_bytes).transpose();
        t(i) = std::log(points[i].bytes) - std::log(points[i].prior_peak_bytes);
        cens[i] = points[i].censored;
    }
    Eigen::VectorXd prior_var = prior_variance(s.feature_prior_sd_grid.front());
    Eigen::VectorXd prior_prec = prior_var.cwiseInverse();

    // Log posterior (up to constants), gradient and Hessian in w for a fixed residual sd.
    auto evaluate = [&](const Eigen::VectorXd& w, double sigma, Eigen::VectorXd* g, Eigen::MatrixXd* H) {
        Eigen::VectorXd m = Z * w;
        double value = -0.5 * (w.array().square() * prior_prec.array()).sum();
        Eigen::VectorXd dg(n), hd(n);
        for (int i = 0; i < n; ++i) {
            if (!cens[i]) {
                double r = (t(i) - m(i)) / sigma;
                value += -0.5 * r * r - std::log(sigma) - 0.5 * kLog2Pi;
                dg(i) = r / sigma;
                hd(i) = 1.0 / (sigma * sigma);
            } else {
                double u = (m(i) - t(i)) / sigma;
                double lam = inverse_mills(u);
                value += log_normal_cdf(u);
                dg(i) = lam / sigma;
                hd(i) = lam * (lam + u) / (sigma * sigma);
            }
        }
        if (g) *g = Z.transpose() * dg - prior_prec.cwiseProduct(w);
        if (H) { // negative Hessian (positive definite)
            *H = Z.transpose() * hd.asDiagonal() * Z;
            H->diagonal() += prior_prec;
        }
        return value;
    };

    double best_evidence = -std::numeric_limits<double>::infinity();
    for (double feature_sd : s.feature_prior_sd_grid) {
        prior_var = prior_variance(feature_sd);
        prior_prec = prior_var.cwiseInverse();
        Eigen::VectorXd w = Eigen::VectorXd::Zero(p);
        for (double sigma : s.residual_sd_grid) {
            // Damped Newton from the previous optimum (the grid is sorted, optima move smoothly).
            Eigen::VectorXd g;
            Eigen::MatrixXd H;
            double f = evaluate(w, sigma, &g, &H);
            for (int it = 0; it < 50; ++it) {
                Eigen::VectorXd step = H.ldlt().solve(g);
                double a = 1.0, fn = f;
                Eigen::VectorXd wn;
                for (int ls = 0; ls < 30; ++ls, a *= 0.5) {
                    wn = w + a * step;
                    fn = evaluate(wn, sigma, nullptr, nullptr);
                    if (fn >= f - 1e-12) break;
                }
                bool done = std::abs(fn - f) < 1e-9 * std::max(1.0, std::abs(f));
                w = wn, f = evaluate(w, sigma, &g, &H);
                if (done || g.norm() < 1e-8) break;
            }
            // Laplace evidence: log p(D|w*) + log N(w*; 0, prior) + p/2 log 2pi - 1/2 log det H.
            Eigen::LLT<Eigen::MatrixXd> llt(H);
            double logdet_h = 2.0 * Eigen::MatrixXd(llt.matrixL()).diagonal().array().log().sum();
            double log_prior_norm = -0.5 * (prior_var.array().log().sum() + p * kLog2Pi);
            double evidence = f + log_prior_norm + 0.5 * p * kLog2Pi - 0.5 * logdet_h;
            double zs = std::log(sigma / s.residual_sd_prior_median);
            evidence += -0.5 * zs * zs;
            mixture_.push_back({w, llt.solve(Eigen::MatrixXd::Identity(p, p)), sigma, evidence});
            if (evidence > best_evidence) {
                best_evidence = evidence;
                w_ = w;
                cov_ = mixture_.back().cov;
                sigma_ = sigma;
            }
        }
    }
    // Weights of the grid's fits by their evidence: the prediction averages over the prior's scales rather
    // than trusting the best one (a point choice makes the interval too narrow with few trials).
    double total = 0;
    for (auto& c : mixture_)
        total += c.weight = std::exp(c.weight - best_evidence);
    for (auto& c : mixture_)
        c.weight /= total;
}

MemoryPrediction CensoredMemoryModel::predict(const Eigen::VectorXd& features,
                                              double prior_peak_bytes) const {
    if (feature_count_ < 0) throw Error("memory model used before fit", "CensoredMemoryModel::predict");
    Eigen::VectorXd z = design(features, prior_peak_bytes);
    MemoryPrediction out;
    if (mixture_.empty()) { // no data: the prior
        out.mean_log = std::log(prior_peak_bytes) + z.dot(w_);
        out.sd_log = std::sqrt(z.dot(cov_ * z) + sigma_ * sigma_);
        return out;
    }
    // The mixture's mean and variance (moment-matched to one normal).
    double mean = 0, second = 0;
    for (const auto& c : mixture_) {
        if (c.weight < 1e-6) continue;
        const double m = z.dot(c.w), v = z.dot(c.cov * z) + c.sigma * c.sigma;
        mean += c.weight * m;
        second += c.weight * (v + m * m);
    }
    out.mean_log = std::log(prior_peak_bytes) + mean;
    out.sd_log = std::sqrt(std::max(1e-12, second - mean * mean));
    return out;
}

std::uint64_t CensoredMemoryModel::key(const Eigen::VectorXd& features, double prior_peak_bytes) const {
    std::uint64_t h = std::hash<double>{}(prior_peak_bytes);
    for (Eigen::Index i = 0; i < features.size(); ++i)
        h = (h ^ std::hash<double>{}(features(i))) * 1099511628211ULL;
    return h;
}

double CensoredMemoryModel::censored_at(const Eigen::VectorXd& features, double prior_peak_bytes) const {
    if (censored_.empty()) return 0;
    auto it = censored_.find(key(features, prior_peak_bytes));
    return it == censored_.end() ? 0.0 : it->second;
}

double CensoredMemoryModel::probability_over(const Eigen::VectorXd& features, double prior_peak_bytes,
                                             double limit_bytes) const {
    if (limit_bytes <= censored_at(features, prior_peak_bytes)) return 1.0;
    MemoryPrediction m = predict(features, prior_peak_bytes);
    return normal_cdf((m.mean_log - std::log(limit_bytes)) / m.sd_log);
}

double CensoredMemoryModel::lower_bound(const Eigen::VectorXd& features, double prior_peak_bytes,
                                        double sd_multiple) const {
    MemoryPrediction m = predict(features, prior_peak_bytes);
    return std::max(censored_at(features, prior_peak_bytes), std::exp(m.mean_log - sd_multiple * m.sd_log));
}

} // namespace infrarsi::model
