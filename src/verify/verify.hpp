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

// pairs: (baseline run, candidate run), in the order they ran.
Decision decide(const std::vector<std::pair<Arm, Arm>>& pairs, const std::vector<double>& reference_loss,
                const contract::Contract& c, double mde, bool math_changing);

} // namespace infrarsi::verify
