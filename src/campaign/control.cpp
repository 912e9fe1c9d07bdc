#include "campaign/control.hpp"

#include "measure/statistics.hpp"

#include <cmath>

namespace infrarsi::campaign {

std::optional<double> control_ratio(const store::TrialRow& t) {
    if (!t.measurements.control) return std::nullopt;
    return t.measurements.control->ratio;
}

std::optional<double> baseline_ratio(const store::TrialRow& t, double baseline_step_s) {
    if (const auto r = control_ratio(t); r && *r > 0) return *r;
    if (baseline_step_s > 0 && t.step_time_s && *t.step_time_s > 0) return *t.step_time_s / baseline_step_s;
    return std::nullopt;
}

std::vector<ControlLevel> control_levels(const std::vector<double>& control_step_s, double bound) {
    std::vector<ControlLevel> out;
    const double level = control_step_s.size() >= 3 ? measure::median(control_step_s) : 0.0;
    for (const double s : control_step_s) {
        const bool outlier = level > 0 && s > 0 && std::abs(std::log(s / level)) > bound;
        out.push_back({outlier ? level : s, outlier});
    }
    return out;
}

} // namespace infrarsi::campaign
