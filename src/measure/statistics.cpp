#include "measure/statistics.hpp"

#include "util/error.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <random>

namespace infrarsi::measure {

double median(std::vector<double> xs) {
    if (xs.empty()) return 0;
    std::sort(xs.begin(), xs.end());
    std::size_t n = xs.size();
    return n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

double mean(const std::vector<double>& xs) {
    return xs.empty() ? 0 : std::accumulate(xs.begin(), xs.end(), 0.0) / static_cast<double>(xs.size());
}

double robust_cv(const std::vector<double>& xs) {
    if (xs.size() < 2) return 0;
    const double m = median(xs);
    if (!(m > 0)) return 0;
    std::vector<double> deviations;
    deviations.reserve(xs.size());
    for (double x : xs)
        deviations.push_back(std::abs(x - m));
    return 1.4826 * median(deviations) / m;
}

double stddev(const std::vector<double>& xs) {
    if (xs.size() < 2) return 0;
    double m = mean(xs), s = 0;
    for (double x : xs)
        s += (x - m) * (x - m);
    return std::sqrt(s / static_cast<double>(xs.size() - 1));
}

double t_quantile(int dof, double level) {
    if (dof < 1) return INFINITY;
    return student_t_quantile(1 - (1 - level) / 2, dof);
}

double normal_quantile(double p) {
    if (!(p > 0)) return -INFINITY;
    if (!(p < 1)) return INFINITY;
    static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                               1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                               6.680131188771972e+01, -1.328068155288572e+01};
    static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                               -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
    static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                               3.754408661907416e+00};
    const double lo = 0.02425;
    double x;
    if (p < lo || p > 1 - lo) {
        const double q = std::sqrt(-2 * std::log(p < lo ? p : 1 - p));
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
        if (p > 1 - lo) x = -x;
    } else {
        const double q = p - 0.5, r = q * q;
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
            (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
    }
    // One Halley step on the exact CDF.
    const double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
    const double u = e * std::sqrt(2 * std::numbers::pi) * std::exp(x * x / 2);
    return x - u / (1 + x * u / 2);
}

namespace {

// The continued fraction of the regularized incomplete beta function (Numerical Recipes, 6.4; Lentz).
double beta_fraction(double a, double b, double x) {
    const double tiny = 1e-300;
    double c = 1, d = 1 - (a + b) * x / (a + 1);
    if (std::fabs(d) < tiny) d = tiny;
    d = 1 / d;
    double h = d;
    for (int m = 1; m <= 300; ++m) {
        const double m2 = 2.0 * m;
        double aa = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
        d = 1 + aa * d;
        if (std::fabs(d) < tiny) d = tiny;
        c = 1 + aa / c;
        if (std::fabs(c) < tiny) c = tiny;
        d = 1 / d;
        h *= d * c;
        aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
        d = 1 + aa * d;
        if (std::fabs(d) < tiny) d = tiny;
        c = 1 + aa / c;
        if (std::fabs(c) < tiny) c = tiny;
        d = 1 / d;
        const double del = d * c;
        h *= del;
        if (std::fabs(del - 1) < 1e-15) break;
    }
    return h;
}

double incomplete_beta(double a, double b, double x) {
    if (x <= 0) return 0;
    if (x >= 1) return 1;
    const double front =
        std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
    if (x < (a + 1) / (a + b + 2)) return front * beta_fraction(a, b, x) / a;
    return 1 - front * beta_fraction(b, a, 1 - x) / b;
}

} // namespace

double student_t_cdf(double t, double dof) {
    if (!(dof > 0)) return 0.5;
    if (std::isinf(t)) return t > 0 ? 1 : 0;
    const double tail = 0.5 * incomplete_beta(dof / 2, 0.5, dof / (dof + t * t));
    return t > 0 ? 1 - tail : tail;
}

double student_t_quantile(double p, double dof) {
    if (!(p > 0)) return -INFINITY;
    if (!(p < 1)) return INFINITY;
    if (!(dof > 0)) return p < 0.5 ? -INFINITY : p > 0.5 ? INFINITY : 0;
    if (p == 0.5) return 0;
    if (p < 0.5) return -student_t_quantile(1 - p, dof);
    // Bisection on the CDF, bracketed from the normal quantile (t's is larger) upwards.
    double lo = normal_quantile(p), hi = std::max(1.0, 2 * lo);
    while (student_t_cdf(hi, dof) < p && hi < 1e12)
        hi *= 2;
    for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; ++i) {
        const double mid = (lo + hi) / 2;
        (student_t_cdf(mid, dof) < p ? lo : hi) = mid;
    }
    return (lo + hi) / 2;
}

Interval mean_ci(const std::vector<double>& xs, double level) {
    Interval iv;
    iv.estimate = mean(xs);
    if (xs.size() < 2) {
        iv.lo = -INFINITY;
        iv.hi = INFINITY;
        return iv;
    }
    double half = t_quantile(static_cast<int>(xs.size()) - 1, level) * stddev(xs) /
                  std::sqrt(static_cast<double>(xs.size()));
    iv.lo = iv.estimate - half;
    iv.hi = iv.estimate + half;
    return iv;
}

Interval median_ci(const std::vector<double>& xs, double level, int resamples, std::uint64_t seed) {
    Interval iv;
    iv.estimate = median(xs);
    iv.lo = iv.hi = iv.estimate;
    if (xs.size() < 2) return iv;
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::size_t> pick(0, xs.size() - 1);
    std::vector<double> meds(static_cast<std::size_t>(resamples)), sample(xs.size());
    for (auto& m : meds) {
        for (auto& s : sample)
            s = xs[pick(rng)];
        m = median(sample);
    }
    std::sort(meds.begin(), meds.end());
    double a = (1 - level) / 2;
    iv.lo = meds[static_cast<std::size_t>(a * (resamples - 1))];
    iv.hi = meds[static_cast<std::size_t>((1 - a) * (resamples - 1))];
    return iv;
}

TrialSummary summarize(const StepLog& log, int warmup_steps) {
    TrialSummary t;
    t.steps = static_cast<int>(log.steps.size());
    std::vector<double> cold, tps, mfus;
    std::map<std::string, std::vector<double>> phases;
    int position = 0;
    for (const auto& s : log.steps) {
        t.losses.push_back(s.loss);
        if (s.peak_rss_bytes) t.peak_rss_bytes = std::max(t.peak_rss_bytes.value_or(0), *s.peak_rss_bytes);
        // By position, not by step number: workloads count steps from 0 or from 1.
        if (position++ < warmup_steps) {
            cold.push_back(s.step_time_s);
            continue;
        }
        if (!s.timed) { // an excluded step (an evaluation or checkpoint inside it): its loss only
            ++t.excluded_steps;
            continue;
        }
        t.steady_samples.push_back(s.step_time_s);
        tps.push_back(s.tokens_per_s);
        if (s.mfu) mfus.push_back(*s.mfu);
        for (const auto& [k, v] : s.phases)
            phases[k].push_back(v);
    }
    if (t.steady_samples.empty())
        throw Error("no steady-state steps in the log (" + std::to_string(t.steps) + " steps, " +
                        std::to_string(warmup_steps) + " warm-up, " + std::to_string(t.excluded_steps) +
                        " excluded)",
                    "step log", "more steps than warm-up and excluded steps");
    t.cold_step_s = mean(cold);
    t.steady_step_s = median_ci(t.steady_samples);
    t.tokens_per_s = median(tps);
    if (!mfus.empty()) t.mfu = median(mfus);
    for (const auto& [k, v] : phases)
        t.phases[k] = median(v);
    return t;
}

double mfu(double model_flops_per_step, double step_time_s, double peak_flops) {
    if (step_time_s <= 0 || peak_flops <= 0) return 0;
    return model_flops_per_step / step_time_s / peak_flops;
}

std::optional<MfuParts> reported_mfu_parts(const std::vector<measure::StepSample>& steps, int warmup_steps) {
    std::vector<double> flops, peaks;
    for (std::size_t i = static_cast<std::size_t>(std::max(0, warmup_steps)); i < steps.size(); ++i) {
        const auto& s = steps[i];
        if (!s.timed || !(s.model_flops > 0)) continue;
        flops.push_back(s.model_flops);
        if (s.mfu && *s.mfu > 0 && s.step_time_s > 0) peaks.push_back(s.model_flops / s.step_time_s / *s.mfu);
    }
    if (flops.empty()) return std::nullopt;
    return MfuParts{median(flops), peaks.empty() ? 0.0 : median(peaks)};
}

} // namespace infrarsi::measure
