#include "campaign/wall_plan.hpp"

#include <algorithm>
#include <cmath>

namespace infrarsi::campaign {

double TrialCostModel::steps_s() const {
    const int warm = std::clamp(warmup_steps, 0, std::max(steps, 0));
    return warm * std::max(cold_step_s, step_s) + (std::max(steps, 0) - warm) * step_s;
}

double TrialCostModel::trial_s() const {
    return std::max(0.0, steps_s() + std::max(0.0, overhead_s));
}

double verification_wall_s(const TrialCostModel& m, int candidates, int pairs, int equivalence_checks) {
    const int trials = std::max(0, candidates) * std::max(0, pairs) * 2 + 2 * std::max(0, equivalence_checks);
    return trials * m.trial_s();
}

int affordable_pairs(const TrialCostModel& m, double wall_left_s, int pairs) {
    const double pair_s = 2 * m.trial_s();
    if (pair_s <= 0) return pairs;
    if (wall_left_s <= 0) return 0;
    return static_cast<int>(std::min<double>(pairs, std::floor(wall_left_s / pair_s)));
}

} // namespace infrarsi::campaign
