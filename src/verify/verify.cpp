#include "verify/verify.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

namespace infrarsi::verify {

EvalReference eval_reference(const std::vector<double>& losses) {
    EvalReference r;
    r.runs = static_cast<int>(losses.size());
    if (losses.empty()) return r;
    r.mean = measure::mean(losses);
    r.sd = losses.size() >= 2 ? measure::stddev(losses) : 0.0;
    return r;
}

double eval_tolerance(const EvalReference& ref, const contract::Invariants& inv, bool pair) {
    const double floor = inv.loss_tolerance * std::fabs(ref.mean);
    if (ref.runs < 2) return floor;
    const double spread = pair ? std::sqrt(2.0) : std::sqrt(1.0 + 1.0 / ref.runs);
    return std::max(floor, measure::t_quantile(ref.runs - 1, 0.95) * ref.sd * spread);
}

std::string check_eval_loss(const EvalReference& ref, std::optional<double> got,
                            const contract::Invariants& inv, std::optional<double> against) {
    if (!got) return "no evaluation loss in the job's output";
    if (!std::isfinite(*got)) return "the final evaluation loss is not finite";
    if (ref.runs < 1) return "no baseline evaluation loss to compare with";
    const double target = against.value_or(ref.mean);
    const double tol = eval_tolerance(ref, inv, against.has_value());
    if (std::fabs(*got - target) > tol)
        return fmt::format("final evaluation loss {:.6g}, {} {:.6g} (tolerance {:.3g}, calibrated from {} "
                           "baseline runs at different seeds)",
                           *got, against ? "the paired baseline's" : "baseline", target, tol, ref.runs);
    return {};
}

std::vector<double> reference_losses(const std::vector<std::vector<double>>& runs) {
    std::vector<double> ref;
    if (runs.empty()) return ref;
    std::size_t n = runs[0].size();
    for (const auto& r : runs)
        n = std::min(n, r.size());
    for (std::size_t i = 0; i < n; ++i) {
        std::vector<double> xs;
        for (const auto& r : runs)
            xs.push_back(r[i]);
        ref.push_back(measure::median(xs));
    }
    return ref;
}

std::string check_loss(const std::vector<double>& ref, const std::vector<double>& got,
                       const contract::Invariants& inv) {
    if (static_cast<int>(got.size()) < inv.steps)
        return fmt::format("{} of {} step lines", got.size(), inv.steps);
    if (static_cast<int>(ref.size()) < inv.steps) return "no complete baseline loss curve to compare with";
    auto rel = [](double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-12); };
    if (inv.loss_mode == contract::LossMode::PerStep) {
        for (int i = 0; i < inv.steps; ++i) {
            if (!std::isfinite(got[i])) return fmt::format("loss at step {} is not finite", i + 1);
            if (rel(got[i], ref[i]) > inv.loss_tolerance)
                return fmt::format("loss at step {} is {:.6g}, baseline {:.6g} (tolerance {:.3g} relative)",
                                   i + 1, got[i], ref[i], inv.loss_tolerance);
        }
        return {};
    }
    double a = 0, b = 0;
    for (int i = inv.steps - inv.loss_last_k; i < inv.steps; ++i) {
        if (!std::isfinite(got[i])) return fmt::format("loss at step {} is not finite", i + 1);
        a += got[i];
        b += ref[i];
    }
    a /= inv.loss_last_k;
    b /= inv.loss_last_k;
    if (rel(a, b) > inv.loss_tolerance)
        return fmt::format(
            "mean loss of the last {} steps is {:.6g}, baseline {:.6g} (tolerance {:.3g} relative)",
            inv.loss_last_k, a, b, inv.loss_tolerance);
    return {};
}

measure::Interval speedup_interval(const std::vector<double>& log_ratios, const NoisePrior& prior,
                                   double level) {
    const int n = static_cast<int>(log_ratios.size());
    if (prior.dof <= 0 || prior.cv_between <= 0) return measure::mean_ci(log_ratios, level);
    measure::Interval iv;
    iv.estimate = measure::mean(log_ratios);
    const double pair_var = n >= 2 ? std::pow(measure::stddev(log_ratios), 2) : 0.0;
    const double prior_var = 2 * prior.cv_between * prior.cv_between;
    const int dof = prior.dof + std::max(0, n - 1);
    const double pooled = (prior.dof * prior_var + std::max(0, n - 1) * pair_var) / dof;
    const double half = measure::t_quantile(dof, level) * std::sqrt(pooled / std::max(1, n));
    iv.lo = iv.estimate - half;
    iv.hi = iv.estimate + half;
    return iv;
}

Decision decide(const std::vector<std::pair<Arm, Arm>>& pairs, const std::vector<double>& reference_loss,
                const contract::Contract& c, double mde, bool math_changing, const NoisePrior& noise,
                const EvalReference& eval) {
    const bool final_eval = c.invariants.loss_mode == contract::LossMode::FinalEval;
    Decision d;
    std::vector<double> log_ratios;
    double peak = 0;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
        const auto& [a, b] = pairs[i];
        if (!a.ok || !b.ok) {
            d.reasons.push_back(
                fmt::format("pair {}: {} run did not complete", i + 1, !b.ok ? "candidate" : "baseline"));
            continue;
        }
        const auto broken = final_eval ? check_eval_loss(eval, b.eval_loss, c.invariants)
                                       : check_loss(reference_loss, b.losses, c.invariants);
        if (!broken.empty())
            d.reasons.push_back(fmt::format("pair {}: loss invariant broken: {}", i + 1, broken));
        const auto differs =
            final_eval ? (a.eval_loss ? check_eval_loss(eval, b.eval_loss, c.invariants, a.eval_loss)
                                      : std::string())
                       : check_loss(a.losses, b.losses, c.invariants);
        if (!differs.empty())
            d.reasons.push_back(
                fmt::format("pair {}: loss differs from the interleaved baseline: {}", i + 1, differs));
        if (b.peak_memory_bytes) peak = std::max(peak, *b.peak_memory_bytes);
        log_ratios.push_back(std::log(a.step_s / b.step_s));
    }
    d.pairs = static_cast<int>(log_ratios.size());
    if (math_changing)
        d.reasons.push_back("a patch of this candidate is tagged math_changing: never promoted");
    if (peak >= static_cast<double>(c.resources.mem_bytes))
        d.reasons.push_back(fmt::format("peak memory {:.0f} MiB is not under the limit {}", peak / (1 << 20),
                                        c.resources.mem));
    d.evidence.push_back(fmt::format("peak memory {:.0f} MiB, limit {}", peak / (1 << 20), c.resources.mem));
    if (log_ratios.size() < 2) {
        d.reasons.push_back(fmt::format("only {} complete A/B pairs; at least 2 are needed for an interval",
                                        log_ratios.size()));
        if (log_ratios.size() == 1) d.speedup = d.lo = d.hi = std::exp(log_ratios[0]);
    } else {
        auto ci = speedup_interval(log_ratios, noise, 0.95);
        d.speedup = std::exp(ci.estimate);
        d.lo = std::exp(ci.lo);
        d.hi = std::exp(ci.hi);
        d.evidence.push_back(fmt::format(
            "speed-up {:.3f}x, 95% interval [{:.3f}, {:.3f}] over {} A/B pairs{}", d.speedup, d.lo, d.hi,
            log_ratios.size(),
            noise.dof > 0 ? fmt::format(" (variance pooled with the doctor's noise: CV {:.2f}%, {} dof)",
                                        100 * noise.cv_between, noise.dof)
                          : ""));
        if (!(d.lo - 1.0 > mde))
            d.reasons.push_back(fmt::format(
                "lower bound of the speed-up {:.3f}x does not exceed 1 + MDE = {:.3f}", d.lo, 1.0 + mde));
    }
    d.promoted = d.reasons.empty();
    return d;
}

} // namespace infrarsi::verify
