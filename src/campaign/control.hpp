#pragma once
// Like against like: a search batch runs the baseline beside its candidates (its control), and a candidate is
// judged by its step time over that control's, so two batches under different load compare by their ratios.
// Read by the search, the verification's choice of candidates, the agent stage and the report.
#include "store/campaign_store.hpp"

#include <optional>
#include <vector>

namespace infrarsi::campaign {

// A search trial's step time over its batch's control's (Measurements::control), where both ran every step;
// nullopt otherwise.
std::optional<double> control_ratio(const store::TrialRow& t);

// What each search batch's ratios are over, given the step times of the campaign's controls (one a batch):
// the control's own, or, for a control further than `bound` (in log step time) from the median of them all
// (three at least), that median: one run far from every other is a fluke of that run (a bimodal host's slow
// run), not a slowdown of its batch. It errs against a batch that was slowed as a whole: a fluke never makes
// a candidate look faster.
struct ControlLevel {
    double over = 0;
    bool outlier = false;
};
std::vector<ControlLevel> control_levels(const std::vector<double>& control_step_s, double bound);

// A search trial's step time over the baseline's, like against like: over its batch's control where it has
// one, else over the doctor's median `baseline_step_s`; nullopt when neither can be formed. Under 1: faster.
std::optional<double> baseline_ratio(const store::TrialRow& t, double baseline_step_s);

} // namespace infrarsi::campaign
