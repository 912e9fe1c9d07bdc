#include "measure/statistics.hpp"

#include "util/error.hpp"

#include <algorithm>
#include <cmath>
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
    // Two-sided critical values of Student's t (standard tables).
    static const double t95[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                 2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086};
    static const double t90[] = {6.314, 2.920, 2.353, 2.132, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796,
                                 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725, 1.725};
    if (dof < 1) return INFINITY;
    const bool ninety = level < 0.925;
    if (dof <= 20) return ninety ? t90[dof - 1] : t95[dof - 1];
    if (dof <= 30) return ninety ? 1.70 : 2.05;
    if (dof <= 60) return ninety ? 1.68 : 2.01;
    return ninety ? 1.645 : 1.96;
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

} // namespace infrarsi::measure
