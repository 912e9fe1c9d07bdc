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

// loss_mode = "final_eval": the doctor's final evaluation losses, from repeats at different seeds (seed,
// seed + 1, ...). Their spread is how much the final evaluation loss moves for reasons that change nothing
// about the training (which samples a step sees), so it calibrates the tolerance.
struct EvalReference {
    double mean = 0; // over the doctor's runs
    double sd = 0;   // their sample standard deviation
    int runs = 0;
};
EvalReference eval_reference(const std::vector<double>& final_eval_losses);
// The tolerance, absolute: the half-width of the 95% prediction interval of one more run's final evaluation
// loss around the mean (t(runs - 1) * sd * sqrt(1 + 1/runs)); for the difference of two single runs
// (`pair`), t(runs - 1) * sd * sqrt(2). At least invariants.loss_tolerance * |mean| (a deterministic job's
// seeds may agree exactly).
double eval_tolerance(const EvalReference& ref, const contract::Invariants& inv, bool pair = false);
// Empty when `got` (a run's final evaluation loss; nullopt when it printed none) lies within the tolerance
// of `against` (another run's, as a pair) or, without it, of the reference mean; else a one-line reason.
std::string check_eval_loss(const EvalReference& ref, std::optional<double> got,
                            const contract::Invariants& inv, std::optional<double> against = std::nullopt);

// Per-step median over several runs' loss curves (runs may differ in length; the shortest bounds it).
std::vector<double> reference_losses(const std::vector<std::vector<double>>& runs);

struct Arm {
    bool ok = false;   // the run completed with all its step lines
    double step_s = 0; // steady-state median
    std::vector<double> losses;
    std::optional<double> peak_memory_bytes;
    std::optional<double> eval_loss; // the final evaluation loss, when the job printed one
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

// pairs: (baseline run, candidate run), in the order they ran. The loss is checked by the contract's mode:
// against reference_loss (per_step, last_k_mean) or eval (final_eval).
Decision decide(const std::vector<std::pair<Arm, Arm>>& pairs, const std::vector<double>& reference_loss,
                const contract::Contract& c, double mde, bool math_changing, const NoisePrior& noise = {},
                const EvalReference& eval = {});

} // namespace infrarsi::verify
