#include "measure/noise.hpp"

#include "measure/statistics.hpp"

#include <algorithm>
#include <cmath>

namespace infrarsi::measure {

double minimum_detectable_effect(double cv, int n, double floor) {
    if (n < 1) n = 1;
    return std::max(floor, (1.959964 + 0.841621) * cv * std::sqrt(2.0 / n));
}

NoiseModel calibrate(const std::vector<double>& repeat_medians, const std::vector<double>& within_cvs,
                     int comparison_repeats) {
    NoiseModel m;
    m.repeats = static_cast<int>(repeat_medians.size());
    m.median_step_s = median(repeat_medians);
    double mu = mean(repeat_medians);
    m.cv_between = mu > 0 ? stddev(repeat_medians) / mu : 0;
    m.cv_within = median(within_cvs);
    m.comparison_repeats = comparison_repeats;
    // The per-run median still carries within-run noise; use the larger of the two views of the spread.
    double cv = std::max(m.cv_between, m.cv_within / std::sqrt(3.0));
    m.minimum_detectable_effect = minimum_detectable_effect(cv, comparison_repeats);
    return m;
}

} // namespace infrarsi::measure
