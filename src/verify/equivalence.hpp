#pragma once
// A patch set's numerical equivalence apart from knobs: the baseline and the patch set, both at the
// baseline's knob settings and at one seed chosen fresh for the check, must print the same losses step by
// step (within a tight relative tolerance), whatever loss mode the contract uses for knob changes. A patch
// that skips work, or prints losses it copied from a log of another seed, cannot pass it.
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::verify {

struct StepDifference {
    int step = 0; // 1-based; 0 for the final evaluation loss
    double baseline = 0, candidate = 0;
    double relative = 0; // |candidate - baseline| / |baseline|; infinite when either is not finite
};

struct Equivalence {
    bool equivalent = false;
    double max_relative = 0;            // the largest relative difference over the compared values
    int compared = 0;                   // values compared (steps, and the evaluation loss when both have it)
    std::vector<StepDifference> beyond; // the values beyond the tolerance (the first 20)
    std::vector<StepDifference> values; // every compared value, for the audit and the report
    std::string reason;                 // empty when equivalent
};

// Compares the first `steps` losses (and the final evaluation losses when the baseline printed one) at
// `tolerance`, relative to the baseline's value. Fewer than `steps` losses on either side, a value that is
// not finite, or a missing evaluation loss the baseline printed, is not equivalent.
Equivalence compare_losses(const std::vector<double>& baseline, const std::vector<double>& candidate,
                           int steps, double tolerance, std::optional<double> baseline_eval = std::nullopt,
                           std::optional<double> candidate_eval = std::nullopt);

} // namespace infrarsi::verify
