#pragma once
// The one statistics helper: medians, confidence intervals (bootstrap for medians, Student t for means),
// and the summary of one trial's step log (cold start vs steady state).
#include "measure/steps.hpp"

#include <cstdint>
#include <optional>
#include <vector>

namespace infrarsi::measure {

struct Interval {
    double estimate = 0, lo = 0, hi = 0;
};

double median(std::vector<double> xs);
double mean(const std::vector<double>& xs);
double stddev(const std::vector<double>& xs); // sample standard deviation (n - 1)
// The spread of a run's step times relative to their median, robust to a few outlier steps (an evaluation
// or a checkpoint inside a timed step): 1.4826 x the median absolute deviation / the median, which equals the
// coefficient of variation for normal noise. 0 for fewer than two samples or a zero median.
double robust_cv(const std::vector<double>& xs);
// Two-sided Student t quantile t_{1 - alpha/2, dof} for a two-sided `level` (student_t_quantile below).
double t_quantile(int dof, double level = 0.95);
// The p-quantile of the standard normal distribution (Acklam's rational approximation, refined by one Halley
// step: relative error below 1e-12), for 0 < p < 1.
double normal_quantile(double p);
// P(T <= t) for Student's t with `dof` degrees of freedom (through the regularized incomplete beta function).
double student_t_cdf(double t, double dof);
// The p-quantile of Student's t with `dof` degrees of freedom, at any p in (0, 1); +-infinity without a
// degree of freedom.
double student_t_quantile(double p, double dof);
Interval mean_ci(const std::vector<double>& xs, double level = 0.95);
// Percentile bootstrap of the median (Efron & Tibshirani 1993, ch. 13), deterministic in seed.
Interval median_ci(const std::vector<double>& xs, double level = 0.95, int resamples = 2000,
                   std::uint64_t seed = 1);

// A trial's step log reduced to what the campaign compares.
struct TrialSummary {
    int steps = 0;
    double cold_step_s = 0; // mean of the warm-up steps (compile, page faults, caches)
    Interval steady_step_s; // median of the steps after warm-up, with a bootstrap interval
    std::vector<double> steady_samples;
    int excluded_steps = 0;               // steady-state steps left out of timing (StepSample::timed)
    double tokens_per_s = 0;              // median after warm-up
    std::optional<double> mfu;            // median after warm-up, when reported
    std::optional<double> peak_rss_bytes; // max over steps
    std::map<std::string, double> phases; // median seconds per phase after warm-up
    std::vector<double> losses;           // per step
};

// Throws infrarsi::Error when there are no steady-state steps.
TrialSummary summarize(const StepLog& log, int warmup_steps);

// Model FLOPs utilization: achieved model FLOP/s over the hardware's peak.
double mfu(double model_flops_per_step, double step_time_s, double peak_flops);

// MFU's parts as a job reports them (verify/verify.hpp: the campaign's MFU has one denominator a hardware).
struct MfuParts {
    double model_flops_per_step = 0;
    double peak_flops = 0; // implied by the job's own MFU (model FLOPs / step time / mfu); 0: not reported
};
// The medians over the steps after warm-up that report model FLOPs; nullopt when none does.
std::optional<MfuParts> reported_mfu_parts(const std::vector<StepSample>& steps, int warmup_steps);

} // namespace infrarsi::measure
