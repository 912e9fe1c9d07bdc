#include "verify/equivalence.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

namespace infrarsi::verify {

Equivalence compare_losses(const std::vector<double>& baseline, const std::vector<double>& candidate,
                           int steps, double tolerance, std::optional<double> baseline_eval,
                           std::optional<double> candidate_eval) {
    Equivalence e;
    if (static_cast<int>(baseline.size()) < steps || static_cast<int>(candidate.size()) < steps) {
        e.reason = fmt::format("{} baseline and {} candidate losses of {} steps", baseline.size(),
                               candidate.size(), steps);
        return e;
    }
    auto compare = [&](int step, double a, double b) {
        StepDifference d{step, a, b, 0};
        if (!std::isfinite(a) || !std::isfinite(b))
            d.relative = INFINITY;
        else if (a != b)
            d.relative = std::fabs(b - a) / std::max(std::fabs(a), 1e-12);
        e.values.push_back(d);
        ++e.compared;
        e.max_relative = std::max(e.max_relative, d.relative);
        if (!(d.relative <= tolerance) && e.beyond.size() < 20) e.beyond.push_back(d);
    };
    for (int i = 0; i < steps; ++i)
        compare(i + 1, baseline[static_cast<std::size_t>(i)], candidate[static_cast<std::size_t>(i)]);
    if (baseline_eval && candidate_eval)
        compare(0, *baseline_eval, *candidate_eval);
    else if (baseline_eval && !candidate_eval) {
        e.reason = "the baseline printed a final evaluation loss and the patch set did not";
        return e;
    }
    e.equivalent = e.beyond.empty();
    if (!e.equivalent) {
        const auto& d = e.beyond.front();
        e.reason =
            fmt::format("{} of {} values differ beyond {:.3g} relative; first at {}: {:.9g} against the "
                        "baseline's {:.9g} ({:.3g} relative); largest difference {:.3g}",
                        e.beyond.size(), e.compared, tolerance,
                        d.step > 0 ? fmt::format("step {}", d.step) : std::string("the final evaluation"),
                        d.candidate, d.baseline, d.relative, e.max_relative);
    }
    return e;
}

} // namespace infrarsi::verify
