#pragma once
// Re-verification and promotion rules. A candidate is promoted only if, in interleaved A/B runs against the
// baseline: every run succeeded, the loss invariant holds, its peak memory stays under the limit, it changes
// no math (a patch tagged math_changing is never promoted), and the lower confidence bound of its speed-up
// exceeds the minimum detectable effect.
#include "contract/contract.hpp"
#include "measure/statistics.hpp"

#include <optional>
#include <string>
#include <vector>

namespace infrarsi::verify {

// Empty when `losses` keeps the loss of `reference` within the contract's tolerance; else a one-line reason.
std::string check_loss(const std::vector<double>& reference, const std::vector<double>& losses,
                       const contract::Invariants& inv);

// Per-step median over several runs' loss curves (runs may differ in length; the shortest bounds it).
std::vector<double> reference_losses(const std::vector<std::vector<double>>& runs);

struct Arm {
    bool ok = false;   // the run completed with all its step lines
    double step_s = 0; // steady-state median
    std::vector<double> losses;
    std::optional<double> peak_memory_bytes;
};

struct Decision {
    bool promoted = false;
    double speedup = 0, lo = 0, hi = 0; // baseline time / candidate time, with a 95 % t interval
    int pairs = 0;
    std::vector<std::string> reasons;  // why not (empty when promoted)
    std::vector<std::string> evidence; // what was checked
};

// The doctor's noise calibration as prior knowledge of run-to-run noise: the relative spread of the baseline
// runs' medians (a coefficient of variation, taken as the standard deviation of log step time) and its
// degrees of freedom (baseline runs - 1).
struct NoisePrior {
    double cv_between = 0;
    int dof = 0;
};

// The interval of the mean log speed-up over A/B pairs. Its variance pools the pairs' own spread with the
// doctor's calibration (a pair's log-ratio has variance 2 cv^2 when both arms share the baseline's noise), so
// two consistent pairs are not judged with a one-degree-of-freedom t interval alone. Without a prior (dof 0)
// it is the plain t interval of the pairs.
measure::Interval speedup_interval(const std::vector<double>& log_ratios, const NoisePrior& prior,
                                   double level = 0.95);

// pairs: (baseline run, candidate run), in the order they ran.
Decision decide(const std::vector<std::pair<Arm, Arm>>& pairs, const std::vector<double>& reference_loss,
                const contract::Contract& c, double mde, bool math_changing, const NoisePrior& noise = {});

} // namespace infrarsi::verify
